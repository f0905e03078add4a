"""Testing with a real broker: the pytest plugin's fixtures, and what they are built from.

The plugin (:mod:`trio_broker.testing.plugin`, registered under the ``pytest11`` entry point, or
``pytest -p trio_broker.testing``) provides ``kafka_broker``, ``kafka_broker_session`` and
``trio_kafka_broker``; docs/testing.md shows how to use them.
"""

from __future__ import annotations

from .broker import DEFAULTS, EventLog, KafkaBroker, Metrics, StoredRecord, TrioKafkaBroker
from .client import KafkaError, TrioKafkaClient, WireClient
from .intercept import Interception, close, delay, drop, error
from .plugin import (
    kafka_broker,
    kafka_broker_session,
    pytest_addoption,
    pytest_configure,
    trio_kafka_broker,
)

__all__ = [
    "DEFAULTS", "EventLog", "Interception", "KafkaBroker", "KafkaError", "Metrics",
    "StoredRecord", "TrioKafkaBroker", "TrioKafkaClient", "WireClient", "close", "delay", "drop",
    "error", "kafka_broker", "kafka_broker_session", "pytest_addoption", "pytest_configure",
    "trio_kafka_broker",
]
