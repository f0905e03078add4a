"""The pytest plugin: a real trio_broker in every test that asks for one.

Registered with the ``pytest11`` entry point when trio-broker is installed; otherwise
``pytest -p trio_broker.testing``. Fixtures:

* ``kafka_broker``: a fresh broker per test, in a background thread (any client);
* ``kafka_broker_session``: one such broker for the whole session;
* ``trio_kafka_broker``: a fresh broker in the test's own Trio run (pytest-trio), on its clock.

Configuration, later wins: the fixtures' test defaults (``DEFAULTS``), the ``kafka_broker_config``
ini key (one ``key=value`` per line), ``--kafka-broker-config key=value`` (repeatable), then
``@pytest.mark.kafka_broker_config(**{"key": "value"})`` on the test, its class or module
(function-scoped fixtures only). A key trio_broker does not know fails the test's set-up.
Data directories are in /dev/shm unless the ini key ``kafka_broker_data_dir`` is ``tmp_path``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import trio

from ..config import ConfigError, parse_override
from ..observability import log

if TYPE_CHECKING:
    from .broker import KafkaBroker, TrioKafkaBroker

# The brokers (and kio, which imports hypothesis when it is installed) are imported when a
# fixture is first used: a plugin module is imported before pytest's other plugins load.

__all__ = ["kafka_broker", "kafka_broker_session", "pytest_addoption", "pytest_configure",
           "trio_kafka_broker"]

MARKER = "kafka_broker_config"
#: Seconds a threaded broker may take to start, or to stop, before the test errors.
TIMEOUT = 30.0


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("trio_broker", "trio_broker's Kafka broker fixtures")
    group.addoption("--kafka-broker-config", action="append", default=[], metavar="KEY=VALUE",
                    help="broker configuration for the kafka_broker fixtures (repeatable)")
    parser.addini(MARKER, type="linelist", default=[],
                  help="broker configuration for the kafka_broker fixtures, key=value per line")
    parser.addini("kafka_broker_data_dir", default="memory",
                  help="where brokers keep their data: 'memory' (a directory in /dev/shm, "
                       "removed at tear-down; pytest's tmp_path where there is none) or "
                       "'tmp_path' (pytest's temporary directories, kept after the session)")
    parser.addini("kafka_broker_log_level", default="DEBUG",
                  help="level of the broker's structured log when the plugin configures it "
                       "(events below it are not captured)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}(**settings): broker configuration for this test's kafka_broker "
                   "or trio_kafka_broker (Kafka keys, string values)")


def _pairs(lines: list[str], source: str) -> dict[str, str]:
    settings: dict[str, str] = {}
    for line in lines:
        try:
            key, value = parse_override(line)
        except ConfigError:
            raise ConfigError(source, line, "expected key=value") from None
        settings[key] = value
    return settings


def _settings(request: pytest.FixtureRequest, markers: bool) -> dict[str, str]:
    config = request.config
    settings = _pairs(config.getini(MARKER), f"{MARKER} (ini)")
    settings.update(_pairs(config.getoption("kafka_broker_config") or [],
                           "--kafka-broker-config"))
    if markers:
        # iter_markers yields the closest (the test's own) first: apply it last.
        for marker in reversed(list(request.node.iter_markers(MARKER))):
            if marker.args:
                raise TypeError(f"@pytest.mark.{MARKER} takes keyword settings only")
            settings.update({key: str(value) for key, value in marker.kwargs.items()})
    return settings


#: tmpfs on Linux: a broker's start and stop fsync several files (checkpoints, the logs on a
#: clean shutdown), 20-30 ms each way on a disk and nothing in memory.
SHM = Path("/dev/shm")


@contextlib.contextmanager
def _data_dir(config: pytest.Config, tmp_path_factory: pytest.TempPathFactory, name: str
              ) -> Iterator[Path]:
    """A fresh data directory for one broker (see the ``kafka_broker_data_dir`` ini key)."""
    where = str(config.getini("kafka_broker_data_dir"))
    if where not in ("memory", "tmp_path"):
        raise ConfigError("kafka_broker_data_dir", where, "one of memory, tmp_path")
    if where == "memory" and SHM.is_dir() and os.access(SHM, os.W_OK):
        path = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=SHM))
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)
    else:
        yield tmp_path_factory.mktemp(name)


def _ensure_logging(config: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Configure the broker's logging when nothing has (a project's conftest may have): JSON
    lines to ``kafka-broker.log`` in pytest's base temporary directory."""
    if log.is_configured():
        return
    path = Path(tmp_path_factory.getbasetemp()) / "kafka-broker.log"
    log.configure_logging(broker_id=1, file=str(path), fmt="json",
                          level=str(config.getini("kafka_broker_log_level")))


@pytest.fixture
def kafka_broker(request: pytest.FixtureRequest,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A broker for this test in a background thread, on a free port with a fresh data dir."""
    from .broker import KafkaBroker

    _ensure_logging(request.config, tmp_path_factory)
    with _data_dir(request.config, tmp_path_factory, "kafka-broker") as data_dir:
        broker = KafkaBroker(_settings(request, markers=True), data_dir, timeout=TIMEOUT)
        broker.start()
        yield broker
        broker.stop()


@pytest.fixture(scope="session")
def kafka_broker_session(request: pytest.FixtureRequest,
                         tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """One broker for the whole session (ini and command-line configuration only)."""
    from .broker import KafkaBroker

    _ensure_logging(request.config, tmp_path_factory)
    with _data_dir(request.config, tmp_path_factory, "kafka-broker-session") as data_dir:
        broker = KafkaBroker(_settings(request, markers=False), data_dir, timeout=TIMEOUT)
        broker.start()
        yield broker
        broker.stop()


@pytest.fixture
async def trio_kafka_broker(request: pytest.FixtureRequest,
                            tmp_path_factory: pytest.TempPathFactory
                            ) -> AsyncIterator[TrioKafkaBroker]:
    """A broker for this test in the test's own Trio run (pytest-trio), on the test's clock."""
    from .broker import TrioKafkaBroker

    _ensure_logging(request.config, tmp_path_factory)
    with _data_dir(request.config, tmp_path_factory, "trio-kafka-broker") as data_dir:
        broker = TrioKafkaBroker(_settings(request, markers=True), data_dir)
        async with trio.open_nursery() as nursery:
            await broker.start(nursery)
            yield broker
            # Not bounded on the Trio clock: under autojump_clock, virtual time races ahead
            # while the shutdown waits for worker threads (the test's own timeout bounds it).
            await broker.stop()
            nursery.cancel_scope.cancel()
