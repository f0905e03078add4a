"""Fixtures shared by every test layer.

* strict structured logging for every test: an event or field not declared in
  ``trio_broker/observability/events.py`` fails the test that emitted it;
* ``log_events``: the JSON lines the broker wrote during the test;
* ``start_broker`` / ``broker``: an in-process broker on port 0 under the test's nursery;
* ``broker_process``: the real ``trio_broker run`` command as a subprocess, for real clients.
"""

from __future__ import annotations

import io
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from trio_broker.config import BrokerConfig, load_config
from trio_broker.observability import log
from trio_broker.observability.loop import LoopInstrument
from trio_broker.server.app import BrokerApp

# pytester runs inner sessions for the tests of the pytest plugin (tests/testing/).
pytest_plugins = ["pytester"]


# ---------------------------------------------------------------------- mutation testing
@pytest.fixture(autouse=True)
def _fresh_prescan_scanners() -> None:
    """Under ``nox -s mutation``: the pre-scan's compiled scanners are built anew for each
    test. They are cached per schema, and mutmut forks each mutant's run from a process that
    built them while collecting coverage, so a mutant in the code that builds them would
    otherwise never run (and would count as a survivor)."""
    if "MUTANT_UNDER_TEST" in os.environ:
        from trio_broker.protocol import prescan

        prescan.forget_compiled()


# ------------------------------------------------------------------------------ logging
class CapturedLog:
    """The broker's log lines of one test, parsed."""

    def __init__(self, stream: io.StringIO) -> None:
        self._stream = stream

    def text(self) -> str:
        """The raw JSON lines (cheap to search before parsing)."""
        log.flush()
        return self._stream.getvalue()

    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.text().splitlines() if line]

    def events(self, name: str, **match: Any) -> list[dict[str, Any]]:
        return [e for e in self.lines()
                if e["event"] == name and all(e.get(k) == v for k, v in match.items())]

    async def wait_for(self, name: str, timeout: float = 5.0, **match: Any
                       ) -> list[dict[str, Any]]:
        """The matching events, once there is at least one (the broker logs asynchronously)."""
        with trio.fail_after(timeout):
            while not (found := self.events(name, **match)):
                await trio.sleep(0.01)
        return found


@pytest.fixture(autouse=True)
def log_events() -> Iterator[CapturedLog]:
    stream = io.StringIO()
    writer = log.configure_logging(broker_id=1, fmt="json", level="DEBUG", strict=True,
                                   stream=stream)
    log.schema_violations()
    captured = CapturedLog(stream)
    yield captured
    writer.flush()
    violations = log.schema_violations()
    assert not violations, f"undeclared log events or fields: {violations}"


# ------------------------------------------------------------------- in-process broker
TEST_DEFAULTS = {
    "listeners": "PLAINTEXT://127.0.0.1:0",
    "group.initial.rebalance.delay.ms": "0",
    "logging.metrics.snapshot.interval.ms": "0",
    "shutdown.graceful.timeout.ms": "2000",
}


@attrs.define
class RunningBroker:
    """An in-process broker started by the ``broker``/``start_broker`` fixtures."""

    app: BrokerApp

    @property
    def config(self) -> BrokerConfig:
        return self.app.config

    @property
    def broker(self) -> Any:
        return self.app.broker

    @property
    def data_dir(self) -> Path:
        return self.app.config.data_dir

    @property
    def port(self) -> int:
        return self.app.listeners[0].port

    def port_of(self, listener: str) -> int:
        return next(b.port for b in self.app.listeners if b.name == listener.upper())

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def shutdown(self) -> None:
        await self.app.shutdown()


StartBroker = Callable[..., Any]


@pytest.fixture
async def start_broker(nursery: trio.Nursery, tmp_path: Path) -> Any:
    """``await start_broker(**{"kafka.key": "value"})`` starts a broker under the test nursery."""
    started: list[RunningBroker] = []

    async def start(overrides: dict[str, str] | None = None, **kw: str) -> RunningBroker:
        settings = {**TEST_DEFAULTS, "log.dirs": str(tmp_path / f"data{len(started)}"),
                    **(overrides or {}), **kw}
        app = BrokerApp(load_config(settings))
        await nursery.start(app.serve)
        running = RunningBroker(app)
        started.append(running)
        return running

    yield start
    for running in started:
        with trio.move_on_after(10):
            await running.shutdown()


@pytest.fixture
async def broker(start_broker: Any) -> RunningBroker:
    return await start_broker()  # type: ignore[no-any-return]


@pytest.fixture
async def loop_lag() -> Any:
    """This test's event loop watched: ``loop_lag.read_lag("test")`` is the longest run of the
    loop (every task waited that long) since the previous reading, in seconds."""
    instrument = LoopInstrument()
    trio.lowlevel.add_instrument(instrument)
    yield instrument
    trio.lowlevel.remove_instrument(instrument)


# ------------------------------------------------------------------- broker subprocess
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@attrs.define
class BrokerProcess:
    """``trio_broker run`` in a subprocess, as a user starts it."""

    data_dir: Path
    log_path: Path
    overrides: dict[str, str]
    config_file: Path | None = None
    port: int = attrs.field(factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    #: Resource limits the process starts with, ``{resource.RLIMIT_...: (soft, hard)}``
    #: (the rest are this process's).
    limits: dict[int, tuple[int, int]] = attrs.field(factory=dict)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        settings = {
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": str(self.data_dir),
            "logging.file": str(self.log_path),
            "logging.format": "json",
            "group.initial.rebalance.delay.ms": "0",
            "logging.metrics.snapshot.interval.ms": "1000",
            **self.overrides,
        }
        args = [sys.executable, "-m", "trio_broker", "run"]
        if self.config_file is not None:
            args += ["--config", str(self.config_file)]
        for key, value in settings.items():
            args += ["--override", f"{key}={value}"]
        return args

    def start(self, timeout: float = 30.0) -> BrokerProcess:
        ready_before = self._count_ready()
        limits = dict(self.limits)

        def set_limits() -> None:
            for which, limit in limits.items():
                resource.setrlimit(which, limit)

        self.process = subprocess.Popen(self.command(), stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, preexec_fn=set_limits)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                err = self.process.stderr.read().decode() if self.process.stderr else ""
                raise RuntimeError(f"broker exited with {self.process.returncode}: {err}")
            if self._count_ready() > ready_before:
                return self
            time.sleep(0.02)
        self.kill()
        raise TimeoutError("broker did not become ready")

    def _count_ready(self) -> int:
        if not self.log_path.exists():
            return 0
        return self.log_path.read_text(encoding="utf-8").count('"event":"broker_ready"')

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, as an operator stops it; returns the exit status."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout)
        if self.process.stderr:
            self.process.stderr.close()
        return code

    def kill(self) -> None:
        """SIGKILL: a crash, nothing flushed."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(30)
        if self.process.stderr:
            self.process.stderr.close()

    def restart(self) -> BrokerProcess:
        if self.process is not None and self.process.poll() is None:
            self.stop()
        return self.start()

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        """Parsed lines of the broker's log file (every rotated file, oldest first)."""
        files = sorted(self.log_path.parent.glob(self.log_path.name + ".*"), reverse=True)
        lines: list[dict[str, Any]] = []
        for path in [*files, self.log_path]:
            for line in path.read_text(encoding="utf-8").splitlines():
                event = json.loads(line)
                if name is None or event["event"] == name:
                    lines.append(event)
        return lines


@pytest.fixture
def broker_process(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    """``broker_process({"kafka.key": "value"})`` starts ``trio_broker run`` and waits for it."""
    started: list[BrokerProcess] = []

    def start(overrides: dict[str, str] | None = None, *, config_file: Path | None = None,
              limits: dict[int, tuple[int, int]] | None = None) -> BrokerProcess:
        index = len(started)
        process = BrokerProcess(data_dir=tmp_path / f"broker{index}",
                                log_path=tmp_path / f"broker{index}.log",
                                overrides=dict(overrides or {}), config_file=config_file,
                                limits=dict(limits or {}))
        started.append(process)
        return process.start()

    yield start
    for process in started:
        if process.process is not None and process.process.poll() is None:
            process.stop()


os.environ.setdefault("PYTHONUNBUFFERED", "1")
