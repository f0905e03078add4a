"""``logging.traffic`` (issue 32, item 3): the per-request and per-connection lines stay off a
terminal by default, as Kafka's request logger is off by default, and stay in JSON output,
which the analyze jobs read. ``trio_broker run`` is started as a user starts it, with its
standard output on a real pseudo-terminal or a pipe, and real requests sent to it."""

from __future__ import annotations

import os
import pty
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import free_port
from trio_broker.observability import log

#: A line of structlog's ConsoleRenderer: ``<timestamp> [<level>  ] <event>  <fields>``.
CONSOLE_LINE = re.compile(r"^\S+ \[(\w+)\s*\] (\w+)")


class Run:
    """``trio_broker run`` with its standard output on a terminal (``tty=True``) or a pipe."""

    def __init__(self, tmp_path: Path, overrides: dict[str, str], *, tty: bool) -> None:
        self.port = free_port()
        settings = {"listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
                    "log.dirs": str(tmp_path / "data"),
                    "group.initial.rebalance.delay.ms": "0",
                    "logging.metrics.snapshot.interval.ms": "0", **overrides}
        args = [sys.executable, "-m", "trio_broker", "run"]
        for key, value in settings.items():
            args += ["-o", f"{key}={value}"]
        self._chunks: list[bytes] = []
        if tty:
            master, slave = pty.openpty()
            self.process = subprocess.Popen(args, stdout=slave, stderr=subprocess.DEVNULL,
                                            stdin=subprocess.DEVNULL)
            os.close(slave)
            self._master: int | None = master
        else:
            self.process = subprocess.Popen(args, stdout=subprocess.PIPE,
                                            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
            self._master = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                if self._master is not None:
                    chunk = os.read(self._master, 65536)
                else:
                    assert self.process.stdout is not None
                    chunk = self.process.stdout.read1(65536)
            except OSError:  # the terminal's other end closed (EIO)
                return
            if not chunk:
                return
            self._chunks.append(chunk)

    @property
    def text(self) -> str:
        return b"".join(self._chunks).decode().replace("\r\n", "\n")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def wait_for(self, needle: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.text:
            assert self.process.poll() is None, f"broker exited: {self.text}"
            assert time.monotonic() < deadline, f"no {needle!r} in {self.text!r}"
            time.sleep(0.02)

    def stop(self) -> str:
        self.process.send_signal(signal.SIGTERM)
        assert self.process.wait(30) == 0
        self._reader.join(10)
        if self._master is not None:
            os.close(self._master)
        return self.text


def traffic(bootstrap: str) -> None:
    """Requests on three connections: create a topic, produce a record, consume it."""
    def cli(*args: str, stdin: str = "") -> None:
        done = subprocess.run([sys.executable, "-m", "trio_broker", *args], input=stdin,
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr

    cli("topics", "--bootstrap-server", bootstrap, "--create", "--topic", "t")
    cli("produce", "-b", bootstrap, "--topic", "t", stdin="a\n")
    cli("consume", "-b", bootstrap, "--topic", "t", "--from-beginning", "-e")


def console_events(text: str) -> list[str]:
    return [m.group(2) for line in text.splitlines() if (m := CONSOLE_LINE.match(line))]


@pytest.fixture
def run(tmp_path: Path) -> Any:
    started: list[Run] = []

    def start(overrides: dict[str, str] | None = None, *, tty: bool) -> Run:
        process = Run(tmp_path / str(len(started)), dict(overrides or {}), tty=tty)
        started.append(process)
        return process

    yield start
    for process in started:
        if process.process.poll() is None:
            process.process.kill()
            process.process.wait(30)


def test_a_terminal_shows_no_request_lines_by_default(run: Any) -> None:
    broker = run(tty=True)
    broker.wait_for("broker_ready")
    traffic(broker.bootstrap)
    broker.wait_for("topic_created")
    events = console_events(broker.stop())
    # The lifecycle and the topic's creation are there; not one traffic line.
    assert {"broker_starting", "listener_bound", "broker_ready", "topic_created",
            "broker_stopped"} <= set(events), events
    assert not set(events) & log.TRAFFIC_EVENTS, events


def test_a_terminal_shows_request_lines_when_asked(run: Any) -> None:
    broker = run({"logging.traffic": "true"}, tty=True)
    broker.wait_for("broker_ready")
    traffic(broker.bootstrap)
    broker.wait_for("topic_created")
    events = console_events(broker.stop())
    assert {"request", "connection_accepted", "connection_closed",
            "client_registered"} <= set(events), events
    assert events.count("request") >= 6  # ApiVersions, Metadata, CreateTopics, Produce, ...


def test_json_output_keeps_request_lines_by_default_and_drops_them_when_told(run: Any) -> None:
    import json

    broker = run(tty=False)  # a pipe: JSON, as a container's log or a CI job reads it
    broker.wait_for('"broker_ready"')
    traffic(broker.bootstrap)
    lines = [json.loads(line) for line in broker.stop().splitlines()]
    apis = {e["api"] for e in lines if e["event"] == "request"}
    assert {"ApiVersions", "Metadata", "CreateTopics", "Produce", "Fetch"} <= apis, apis
    assert {"connection_accepted", "connection_closed"} <= {e["event"] for e in lines}

    quiet = run({"logging.traffic": "false"}, tty=False)
    quiet.wait_for('"broker_ready"')
    traffic(quiet.bootstrap)
    events = [json.loads(line)["event"] for line in quiet.stop().splitlines()]
    assert "topic_created" in events and not set(events) & log.TRAFFIC_EVENTS, events


def test_a_log_file_keeps_request_lines_while_the_terminal_is_quiet(run: Any,
                                                                  tmp_path: Path) -> None:
    """``logging.file``: JSON in the file (all of it), and only the banner on the terminal."""
    import json

    path = tmp_path / "logs" / "broker.log"
    broker = run({"logging.file": str(path)}, tty=True)
    deadline = time.monotonic() + 30
    while not (path.exists() and '"broker_ready"' in path.read_text()):
        assert time.monotonic() < deadline and broker.process.poll() is None
        time.sleep(0.02)
    traffic(broker.bootstrap)
    assert broker.stop() == ""
    events = [json.loads(line) for line in path.read_text().splitlines()]
    assert sum(e["event"] == "request" for e in events) >= 6


def test_the_key_is_checked() -> None:
    done = subprocess.run([sys.executable, "-m", "trio_broker", "run", "-o",
                           "logging.traffic=sometimes"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 2
    assert "logging.traffic" in done.stderr and "one of auto, true, false" in done.stderr
