"""Shared pieces: the figure record, a broker launcher, RSS readings, small statistics."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs

REPO_ROOT = Path(__file__).resolve().parent.parent


def stop_process(process: subprocess.Popen[Any], timeout: float) -> int | None:
    """SIGTERM a benchmark's server process and wait; SIGKILL if it does not stop within
    ``timeout`` seconds. Closes its pipes; returns the exit status."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
    for pipe in (process.stdout, process.stderr):
        if pipe:
            pipe.close()
    return process.returncode


@attrs.frozen
class Figure:
    """One measured figure, with the baseline it is compared to (when it has one).

    ``ratio`` is ``value / baseline_value``; ``target`` says in words what the figure should
    reach and ``met`` whether it did (None when the figure has no target). ``unjudged`` says why
    a target could not be judged although the figure was measured (the baseline it is compared
    to gave a wrong answer): shown as ``n/a``, not counted as a miss by ``--strict``.
    """

    name: str
    value: float | None
    unit: str
    baseline: str | None = None
    baseline_value: float | None = None
    target: str | None = None
    met: bool | None = None
    note: str = ""
    unjudged: str = ""

    @property
    def ratio(self) -> float | None:
        if self.value is None or not self.baseline_value:
            return None
        return self.value / self.baseline_value

    def as_json(self) -> dict[str, Any]:
        data = attrs.asdict(self)
        data["ratio"] = self.ratio
        return data


@attrs.define
class BenchResult:
    """The figures of one benchmark, or the reason it could not produce them."""

    name: str
    figures: list[Figure] = attrs.field(factory=list)
    notes: list[str] = attrs.field(factory=list)
    error: str | None = None
    seconds: float = 0.0
    details: list[str] = attrs.field(factory=list)

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "figures": [f.as_json() for f in self.figures],
                "notes": self.notes, "error": self.error, "seconds": round(self.seconds, 2),
                "details": self.details}


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def percentile(values: Sequence[float], pct: float) -> float:
    """The value below which ``pct`` % of ``values`` lie (the sample at that rank; NaN when
    there is none)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return float(ordered[min(len(ordered) - 1, int(pct / 100 * len(ordered)))])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def raise_fd_limit() -> int:
    """Raise RLIMIT_NOFILE to the hard limit (children inherit it); returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    return int(soft)


def rss_bytes(pid: int) -> int:
    """Resident set size of a process (VmRSS in /proc/PID/status), in bytes."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def bench_env() -> dict[str, str]:
    """The environment of child processes: the repository importable, output unbuffered."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in [str(REPO_ROOT), env.get("PYTHONPATH", "")] if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


@attrs.define
class BrokerLauncher:
    """``python -m trio_broker run`` as a subprocess on a free port, with a temp data dir and log.

    It runs in the repository directory: with hypothesis installed (the test extra), importing
    kio registers hypothesis strategies, and hypothesis rebuilds its Unicode table (about 2 s)
    when the current directory has no ``.hypothesis`` cache. A plain ``pip install`` has no
    hypothesis; running from the repository keeps that one-off cost out of every figure.

    With ``profile_to`` the broker runs under ``python -m cProfile -o FILE``; ``stop`` sends
    SIGTERM so the broker shuts down cleanly and cProfile writes the file.
    """

    workdir: Path
    overrides: dict[str, str] = attrs.field(factory=dict)
    profile_to: Path | None = None
    port: int = attrs.field(factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    spawned_at: float = 0.0

    @property
    def log_path(self) -> Path:
        return self.workdir / "broker.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def command(self) -> list[str]:
        settings = {
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": str(self.workdir / "data"),
            "logging.file": str(self.log_path),
            "logging.format": "json",
            "group.initial.rebalance.delay.ms": "0",
            **self.overrides,
        }
        args = [sys.executable]
        if self.profile_to is not None:
            args += ["-m", "cProfile", "-o", str(self.profile_to)]
        args += ["-m", "trio_broker", "run"]
        for key, value in settings.items():
            args += ["--override", f"{key}={value}"]
        return args

    def spawn(self) -> None:
        """Start the process without waiting (the start-up benchmark times the wait itself)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.spawned_at = time.perf_counter()
        self.process = subprocess.Popen(self.command(), stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, env=bench_env(),
                                        cwd=str(REPO_ROOT))

    def is_ready(self) -> bool:
        """True once the broker has logged ``broker_ready``."""
        try:
            with open(self.log_path, "rb") as log_file:
                return b'"event":"broker_ready"' in log_file.read()
        except FileNotFoundError:
            return False

    def check_alive(self) -> None:
        assert self.process is not None
        if self.process.poll() is not None:
            err = self.process.stderr.read().decode(errors="replace") if self.process.stderr else ""
            raise RuntimeError(f"broker exited with {self.process.returncode}: {err[-2000:]}")

    def start(self, timeout: float = 30.0) -> BrokerLauncher:
        self.spawn()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            if self.is_ready():
                return self
            time.sleep(0.01)
        self.kill()
        raise TimeoutError(f"broker not ready within {timeout} s")

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM and wait; SIGKILL if it does not stop in time. Returns the exit status."""
        if self.process is None:
            return None
        return stop_process(self.process, timeout)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


@contextlib.contextmanager
def running_broker(overrides: dict[str, str] | None = None, profile_to: Path | None = None,
                   ) -> Iterator[BrokerLauncher]:
    """A started broker in a temporary directory, stopped (SIGTERM) on exit."""
    with tempfile.TemporaryDirectory(prefix="trio-broker-bench-") as tmp:
        broker = BrokerLauncher(Path(tmp), dict(overrides or {}), profile_to)
        broker.start()
        try:
            yield broker
        finally:
            broker.stop()


@attrs.define
class HelperServer:
    """A baseline server from ``bench.baseline_server`` in its own process."""

    mode: str
    extra: list[str] = attrs.field(factory=list)
    port: int = attrs.field(factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self, timeout: float = 15.0) -> HelperServer:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.baseline_server", self.mode, str(self.port),
             *self.extra],
            stdout=subprocess.PIPE, env=bench_env(), cwd=str(REPO_ROOT))
        assert self.process.stdout is not None
        # The server prints one line once it listens.
        deadline = time.monotonic() + timeout
        line = self.process.stdout.readline()
        if not line.startswith(b"listening") or time.monotonic() > deadline:
            self.stop()
            raise RuntimeError(f"baseline server {self.mode} did not start: {line!r}")
        return self

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process, 10)


@contextlib.contextmanager
def running_helper(mode: str, *extra: str) -> Iterator[HelperServer]:
    server = HelperServer(mode, list(extra)).start()
    try:
        yield server
    finally:
        server.stop()


def know_leader(client: Any, topic: str, timeout: float = 30.0) -> None:
    """Have a confluent-kafka client fetch ``topic``'s metadata (connecting to the broker) before
    a benchmark starts its clock.

    librdkafka defers the offset lookup of a partition whose leader it does not know yet by a
    fixed 500 ms timer (``rd_kafka_toppar_offset_request``: "no current leader for partition:
    (re)starting offset query timer"), so a consumer timed from ``assign()`` on a fresh client
    waits 0.5-1.0 s before its first ListOffsets/Fetch, on any broker: the figure would measure
    that timer, not the broker. With the leader known, the ListOffsets goes out at once.
    """
    metadata = client.list_topics(topic, timeout=timeout)
    partitions = metadata.topics[topic].partitions
    if not partitions or any(p.leader < 0 for p in partitions.values()):
        raise RuntimeError(f"no leader known for {topic}: {metadata.topics[topic]}")


#: Consumer settings every timed consume uses, on every broker. librdkafka stops fetching a
#: partition once its local queue holds ``queued.min.messages`` (100,000) records or
#: ``queued.max.messages.kbytes`` (64 MiB), and then postpones the next Fetch by
#: ``fetch.queue.backoff.ms``, 1,000 ms by default, although the queue drains in a fraction of
#: that: a broker fast enough to fill the queue was charged a 1 s client-side pause (consume
#: figures bimodal between runs, e.g. 110 vs 490 MB/s on the same broker). 10 ms keeps the
#: client's back-pressure and takes the timer out of the figure.
CONSUMER_SETTINGS = {"fetch.queue.backoff.ms": 10}
