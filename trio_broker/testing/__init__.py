"""Testing with a real broker: the pytest plugin's fixtures, and what they are built from.

The plugin (:mod:`trio_broker.testing.plugin`, registered under the ``pytest11`` entry point, or
``pytest -p trio_broker.testing``) provides ``kafka_broker``, ``kafka_broker_session`` and
``trio_kafka_broker``; docs/testing.md shows how to use them.
"""

from __future__ import annotations

from typing import Any

from .plugin import (
    kafka_broker,
    kafka_broker_session,
    pytest_addoption,
    pytest_configure,
    trio_kafka_broker,
)

#: Imported on first use (``pytest -p trio_broker.testing`` imports this package before pytest's
#: other plugins load; kio, under the broker, imports hypothesis when it is installed).
_LAZY = {
    "DEFAULTS": "broker", "EventLog": "broker", "KafkaBroker": "broker", "Metrics": "broker",
    "StoredRecord": "broker", "TrioKafkaBroker": "broker", "KafkaError": "client",
    "TrioKafkaClient": "client", "WireClient": "client", "Interception": "intercept",
    "close": "intercept", "delay": "intercept", "drop": "intercept", "error": "intercept",
}

__all__ = [*_LAZY, "kafka_broker", "kafka_broker_session", "pytest_addoption",
           "pytest_configure", "trio_kafka_broker"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
