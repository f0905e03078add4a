"""Many connections: 1,000 producers of one record per second next to one heavy producer.

``python -m bench.many_producers [--light N] [--seconds S] [--settle W] [--rounds R]`` (also
``python -m bench --only many_producers``). The heavy producer (confluent-kafka, 1 KiB values,
``linger.ms=5``, acks=1, as fast as librdkafka goes) runs without a break for the whole
measurement, on one warm connection. ``N`` light producers (one connection each, one one-record
Produce request, acks=1, per second; a separate process: raw protocol on Trio, requests encoded
once, responses only framed) are connected before any timing starts and stay connected; they are
switched on and off (paused: connection open, nothing sent) in alternating windows of ``W + S``
seconds: solo, mixed, solo, mixed, ... ``R`` rounds of each. The first ``W`` seconds after each
switch are left out (the light producers' first requests, the heavy producer's queue settling);
the heavy producer's records acknowledged in the remaining ``S`` seconds give its MB/s for the
window. The figure is the median over the rounds of mixed/solo (each round pairs a solo window
with the mixed one right after it, so load drifting over the run cancels out; target: >= 0.8),
with every round's ratio as the spread and the windows' MB/s medians beside it. Per window
also: the light producers' answered requests/s and errors, the broker's idle gauges
(``metrics_snapshot`` every second: NetworkProcessorAvgIdlePercent,
RequestHandlerAvgIdlePercent), and the CPU (% of one core) of the broker, the heavy producer's
process and the light producers' process, read from /proc; and the light producers' answer
latency (send to answer), its 99th percentile per mixed window, and the runs of the broker's
event loop over 5 ms (its ``event_loop_blocked`` lines): how many, how long, and where.

Each round runs on a freshly started broker with a new data directory (:func:`measure`). Then the
same schedule runs against the reference broker (tansu, memory storage, also started afresh for
each round: :func:`measure_tansu`; skipped with ``--no-reference``): issue 35 asks for the
heavy producer's mixed MB/s at >= 1.5x tansu's and the light producers' p99 at <= 20 ms.
"""

from __future__ import annotations

import argparse
import bisect
import datetime
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import attrs
import trio

from .common import (
    REPO_ROOT,
    BenchResult,
    BrokerLauncher,
    Figure,
    bench_env,
    median,
    percentile,
    raise_fd_limit,
    stop_process,
)
from .reference import Tansu, cpu_seconds, obtain_tansu
from .throughput import MB, VALUE_SIZE, create_topic
from .wire import FrameCounter, api_versions_frame, produce_frame, read_one_frame

HEAVY_TOPIC = "heavy"
LIGHT_TOPIC = "light"
PRODUCE_KEY = 0
TARGET = 0.8


# ------------------------------------------------------------------------ light producers
@attrs.define
class LightStats:
    connected: int = 0
    sent: int = 0
    answered: int = 0
    errors: int = 0
    #: Milliseconds from each request's send to its answer since the last stats line.
    latencies_ms: list[float] = attrs.field(factory=list)


@attrs.define
class Switch:
    """Whether the light producers send (shared by their tasks; ``on`` is set while they do)."""

    on: trio.Event = attrs.field(factory=trio.Event)


async def _light_connection(port: int, frame: bytes, stats: LightStats, switch: Switch,
                            task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                            ) -> None:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(api_versions_frame())
        await read_one_frame(stream)
        stats.connected += 1
        task_status.started()
        frames = FrameCounter()
        next_at = trio.current_time()
        try:
            while True:
                if not switch.on.is_set():
                    await switch.on.wait()
                    # Spread over the second, as independent clients would be.
                    await trio.sleep(random.random())
                    next_at = trio.current_time()
                stats.sent += 1
                sent_at = trio.current_time()
                await stream.send_all(frame)
                got = 0
                while not got:
                    data = await stream.receive_some(65536)
                    if not data:
                        stats.errors += 1
                        return
                    got = frames.feed(data)
                stats.answered += got
                stats.latencies_ms.append(round((trio.current_time() - sent_at) * 1000, 3))
                next_at += 1.0
                await trio.sleep_until(next_at)
        except (trio.BrokenResourceError, OSError):
            stats.errors += 1


async def _light_main(port: int, count: int) -> None:
    """Connect ``count`` light producers (paused), print ``ready``, then a JSON stats line per
    second; stdin lines ``on`` / ``off`` switch them on and off; EOF stops them."""
    frame = produce_frame(LIGHT_TOPIC)
    stats = LightStats()
    switch = Switch()
    async with trio.open_nursery() as nursery:
        for _ in range(count):
            await nursery.start(_light_connection, port, frame, stats, switch)
        print("ready", flush=True)

        async def report() -> None:
            while True:
                print(json.dumps(attrs.asdict(stats)), flush=True)
                stats.latencies_ms = []
                await trio.sleep(1)

        nursery.start_soon(report)
        while line := await trio.to_thread.run_sync(sys.stdin.readline):
            if line.strip() == "on":
                switch.on.set()
            elif line.strip() == "off" and switch.on.is_set():
                switch.on = trio.Event()
        nursery.cancel_scope.cancel()


class LightProcess:
    """The light producers in their own process (they must not share the heavy one's GIL)."""

    def __init__(self, port: int, count: int) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.many_producers", "--light-process", str(count),
             "--port", str(port)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, cwd=str(REPO_ROOT), env=bench_env())
        self.last: dict[str, Any] = {}
        #: (wall time a stats line arrived, the latencies it reported)
        self.latencies: list[tuple[float, list[float]]] = []
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        if line != "ready":
            err = self.process.stderr.read() if self.process.stderr else ""
            raise RuntimeError(f"light producers did not start: {line!r} {err[-2000:]}")
        self.last = json.loads(self.process.stdout.readline())
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.last = json.loads(line)
            self.latencies.append((time.time(), self.last.get("latencies_ms", [])))

    def stats(self) -> dict[str, Any]:
        return dict(self.last)

    def latencies_between(self, since: float, until: float) -> list[float]:
        """The answers' latencies reported by the stats lines that arrived in a window (the
        lines come once a second: the window's edges are as precise as that)."""
        return [ms for at, batch in list(self.latencies) if since <= at <= until for ms in batch]

    def switch(self, on: bool) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("on\n" if on else "off\n")
        self.process.stdin.flush()

    def stop(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        stop_process(self.process, 30)


# ---------------------------------------------------------------------------- heavy producer
@attrs.define
class Window:
    """One timed window: what was measured between ``since`` and ``until`` (wall time)."""

    mixed: bool
    since: float
    until: float
    heavy_mbps: float = 0.0
    light_rate: float = 0.0
    light_errors: int = 0
    network_idle: float = float("nan")
    handler_idle: float = float("nan")
    connections: float = float("nan")
    #: CPU used during the window, in % of one core.
    broker_cpu: float = 0.0
    heavy_cpu: float = 0.0
    light_cpu: float = 0.0
    #: % of the window the broker's event-loop thread was runnable but waiting for a CPU
    broker_wait: float = 0.0
    #: The light producers' answer latency in the window, 99th percentile (ms)
    light_p99_ms: float = float("nan")
    #: The same requests' time inside the broker (its request log's ``total_ms``), p99 (ms):
    #: the rest of ``light_p99_ms`` passed before the broker read the frame, or in the client
    light_broker_p99_ms: float = float("nan")
    #: The broker's event loop held in runs over ``BLOCKED_THRESHOLD_MS`` (its
    #: ``event_loop_blocked`` lines): how many, their total ms, and where, most time first.
    blocked_runs: int = 0
    blocked_ms: float = 0.0
    blocked_where: dict[str, float] = attrs.field(factory=dict)
    #: Of ``blocked_ms``, the time in Python's cyclic garbage collector.
    blocked_gc_ms: float = 0.0


def runqueue_wait(pid: int) -> float:
    """Seconds the main thread of ``pid`` has spent runnable, waiting for a CPU
    (/proc/PID/schedstat, second field): machine starvation, as opposed to the broker's own
    work or waiting for I/O."""
    with open(f"/proc/{pid}/schedstat", encoding="ascii") as stat:
        return int(stat.read().split()[1]) / 1e9


def drive(bootstrap: str, light: LightProcess | None, broker_pid: int, seconds: float,
          settle: float, rounds: int) -> list[Window]:
    """Produce as fast as possible for the whole schedule (solo, mixed, ... ``rounds`` times),
    switching the light producers at each window's start; returns the timed windows."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "1",
                         "message.timeout.ms": 60000})
    value = b"h" * VALUE_SIZE
    errors: list[str] = []
    acked: list[float] = []  # perf_counter of each delivery report (in poll, main thread)

    def report(error: Any, _message: Any) -> None:
        if error is not None:
            errors.append(str(error))
        else:
            acked.append(time.perf_counter())

    producer.produce(HEAVY_TOPIC, value, partition=0)  # connect and warm up first
    producer.flush(30)
    schedule = [mixed for _ in range(rounds) for mixed in (False, True)]
    windows: list[Window] = []
    # (perf_counter start, end) of the timed part of each window, and readings at its edges
    spans: list[tuple[float, float]] = []
    for mixed in schedule:
        if light is not None:
            light.switch(mixed)
        timed_from = time.perf_counter() + settle
        timed_until = timed_from + seconds
        started = False
        readings: dict[str, Any] = {}
        while True:
            now = time.perf_counter()
            if not started and now >= timed_from:
                started = True
                readings = {"wall": time.time(), "broker": cpu_seconds(broker_pid),
                            "wait": runqueue_wait(broker_pid),
                            "heavy": cpu_seconds(os.getpid()),
                            "light": cpu_seconds(light.process.pid) if light else 0.0,
                            "stats": light.stats() if light else {}}
            if now >= timed_until:
                break
            for _ in range(200):
                try:
                    producer.produce(HEAVY_TOPIC, value, partition=0, on_delivery=report)
                except BufferError:
                    producer.poll(0.005)
                    break
            producer.poll(0)
        elapsed = time.perf_counter() - timed_from
        window = Window(mixed, readings["wall"], time.time())
        window.broker_cpu = (cpu_seconds(broker_pid) - readings["broker"]) / elapsed * 100
        window.broker_wait = (runqueue_wait(broker_pid) - readings["wait"]) / elapsed * 100
        window.heavy_cpu = (cpu_seconds(os.getpid()) - readings["heavy"]) / elapsed * 100
        if light is not None:
            window.light_cpu = (cpu_seconds(light.process.pid) - readings["light"]) / elapsed * 100
            after = light.stats()  # a stats line a second: the rate is over whole seconds
            before = readings["stats"]
            window.light_rate = (after.get("answered", 0) - before.get("answered", 0)) / elapsed
            window.light_errors = after.get("errors", 0)
            if mixed:
                # The stats line of the window's last second arrives just after it ends.
                window.light_p99_ms = percentile(
                    light.latencies_between(window.since + 1.0, window.until + 1.0), 99)
        windows.append(window)
        spans.append((timed_from, timed_until))
    if light is not None:
        light.switch(False)
    producer.flush(60)
    if errors:
        raise RuntimeError(f"heavy producer errors: {errors[:5]}")
    acked.sort()
    for window, (low, high) in zip(windows, spans, strict=True):
        count = bisect.bisect_right(acked, high) - bisect.bisect_left(acked, low)
        window.heavy_mbps = count * VALUE_SIZE / MB / (high - low)
    return windows


# ------------------------------------------------------------------------------- the run
#: The metrics_snapshot gauges averaged per window (network idle, handler idle, connections)
GAUGES = ("network_processor_avg_idle_percent", "request_handler_avg_idle_percent",
          "connection_count")


def _broker_readings(log_path: Path, windows: list[Window]) -> None:
    """Fill each window from the broker's log, read once: the averages of its metrics_snapshot
    gauges, and (mixed windows) the light requests' p99 as the broker measured them
    (``total_ms``: from the frame read to the response sent)."""
    sums: list[dict[str, float]] = [{} for _ in windows]
    counts = [0] * len(windows)
    light: list[list[float]] = [[] for _ in windows]
    for line in log_path.read_text(encoding="utf-8").splitlines():
        snapshot = '"event":"metrics_snapshot"' in line
        blocked = '"event":"event_loop_blocked"' in line
        if not snapshot and not blocked and '"client_id":"light"' not in line:
            continue
        event = json.loads(line)
        stamp = datetime.datetime.fromisoformat(
            event["timestamp"].replace("Z", "+00:00")).timestamp()
        for index, window in enumerate(windows):
            if not window.since <= stamp <= window.until:
                continue
            if blocked:
                window.blocked_runs += 1
                window.blocked_ms += float(event["duration_ms"])
                window.blocked_gc_ms += float(event.get("gc_ms", 0.0))
                where = event.get("where") or "?"
                window.blocked_where[where] = (window.blocked_where.get(where, 0.0)
                                               + float(event["duration_ms"]))
            elif snapshot:
                counts[index] += 1
                for key in GAUGES:
                    sums[index][key] = sums[index].get(key, 0.0) + float(event[key])
            elif event.get("event") == "request" and window.mixed:
                light[index].append(float(event["total_ms"]))
    nan = float("nan")
    for index, window in enumerate(windows):
        count, gauges = counts[index], sums[index]
        window.network_idle, window.handler_idle, window.connections = (
            gauges[key] / count if count else nan
            for key in GAUGES)
        if light[index]:
            window.light_broker_p99_ms = percentile(light[index], 99)


def measure_tansu(light: int, seconds: float, settle: float, rounds: int) -> list[Window]:
    """The same schedule against the reference broker (tansu, memory storage), or [] when its
    binary cannot be had.

    Each round runs on a freshly started tansu: its memory storage keeps every record produced
    in its heap (18 GB of RSS after 85 s of the heavy producer alone, 2026-11-28), so five
    rounds in one process outgrow this machine's RAM, and tansu stops answering (the heavy
    producer's messages time out) -- a figure of the machine, not of the broker. A fresh
    process per round holds at most one round's records; trio_broker's rounds are run the same
    way (:func:`measure`)."""
    binary, _how = obtain_tansu()
    if binary is None:
        return []
    raise_fd_limit()
    windows: list[Window] = []
    for _ in range(rounds):
        broker = Tansu(binary).start()
        try:
            windows += _schedule(broker.bootstrap, broker.port, broker.pid, light, seconds,
                                 settle, 1)
        finally:
            broker.stop()
    return windows


def _schedule(bootstrap: str, port: int, pid: int, light: int, seconds: float, settle: float,
              rounds: int) -> list[Window]:
    """The topics, the light producers connected, then the alternating windows (any broker)."""
    create_topic(bootstrap, HEAVY_TOPIC)
    create_topic(bootstrap, LIGHT_TOPIC)
    process = LightProcess(port, light) if light else None
    try:
        return drive(bootstrap, process, pid, seconds, settle, rounds)
    finally:
        if process is not None:
            process.stop()


#: The broker's log in steady state, as a production broker's: every partition keeps its last
#: GiB (segments of 256 MiB, retention checked every second), so it deletes about as much as it
#: appends and the page cache recycles its pages. Without a bound, the heavy producer's 20 GB
#: grow the page cache into memory this VM's host must back anew: past about 6 GB written,
#: copying into never-touched pages costs 3-4 ms of system time per MB against 0.6
#: (docs/performance.md), and the figure measures the VM.
STEADY_STATE = {"log.retention.bytes": str(1 << 30), "log.segment.bytes": str(256 << 20),
                "log.retention.check.interval.ms": "1000"}


def measure(light: int, seconds: float, settle: float, rounds: int,
            overrides: dict[str, str] | None = None) -> list[Window]:
    """Each round on a freshly started broker in a new data directory (deleted after it), as
    tansu's rounds (:func:`measure_tansu`), its log bounded (:data:`STEADY_STATE`): the light
    producers connected first, then one solo and one mixed window."""
    raise_fd_limit()
    windows: list[Window] = []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory(prefix="trio-broker-many-") as tmp:
            broker = BrokerLauncher(Path(tmp), {"logging.metrics.snapshot.interval.ms": "1000",
                                                "event.loop.blocked.threshold.ms":
                                                    str(BLOCKED_THRESHOLD_MS),
                                                **STEADY_STATE, **(overrides or {})})
            broker.start()
            try:
                these = _schedule(broker.bootstrap, broker.port, broker.pid, light, seconds,
                                  settle, 1)
            finally:
                broker.stop()
            _broker_readings(broker.log_path, these)
        windows += these
    return windows


#: The broker logs every run of its event loop longer than this (``event_loop_blocked``).
BLOCKED_THRESHOLD_MS = 5


def _blocked_note(window: Window) -> str:
    """``runs/ms`` of a window's blocked loop, with its three costliest places."""
    top = sorted(window.blocked_where.items(), key=lambda item: -item[1])[:3]
    where = "; ".join(f"{name} {ms:.0f} ms" for name, ms in top)
    return (f"{window.blocked_runs} runs {window.blocked_ms:.0f} ms, of which garbage "
            f"collection {window.blocked_gc_ms:.0f} ms" + (f" ({where})" if top else ""))


#: Issue 35's goals for the mixed run: the heavy producer's MB/s against the reference
#: broker's in the same run, and the light producers' answer latency.
REFERENCE_TARGET = 1.5
LIGHT_P99_TARGET_MS = 20.0


def run(quick: bool, light: int | None = None, seconds: float | None = None,
        rounds: int | None = None, settle: float | None = None,
        overrides: dict[str, str] | None = None, reference: bool = True) -> BenchResult:
    light = light or (50 if quick else 1000)
    seconds = seconds or (1.5 if quick else 10.0)
    settle = settle if settle is not None else (0.5 if quick else 3.0)
    rounds = rounds or (1 if quick else 5)
    result = BenchResult("many_producers")
    windows = measure(light, seconds, settle, rounds, overrides)
    tansu: list[Window] = []
    reference_failure = ""
    if reference:
        try:
            tansu = measure_tansu(light, seconds, settle, rounds)
        except RuntimeError as exc:  # the reference's own failure must not lose our figures
            reference_failure = str(exc)[:300]
    phases = {"solo": [w for w in windows if not w.mixed],
              "mixed": [w for w in windows if w.mixed]}
    solo = median([w.heavy_mbps for w in phases["solo"]])
    mixed = median([w.heavy_mbps for w in phases["mixed"]])
    ratio = mixed / solo if solo else 0.0
    pairs = [m.heavy_mbps / s.heavy_mbps if s.heavy_mbps else 0.0
             for s, m in zip(phases["solo"], phases["mixed"], strict=True)]

    def rounds_of(name: str, get: Any, fmt: str = "{:.0f}") -> str:
        return ", ".join(fmt.format(get(w)) for w in phases[name])

    kept = median(pairs)
    result.figures += [
        # Judged on the rounds' ratios: each pairs a solo window with the mixed one right after
        # it, so load that drifts over the run (other work on the machine) cancels out.
        Figure(f"heavy producer kept with {light} light ones (mixed/solo, median of rounds)",
               kept, "x solo", target=f">= {TARGET:.2f} (80% of alone)", met=kept >= TARGET,
               note="per round: " + ", ".join(f"{p:.2f}" for p in pairs)
               + f" (min {min(pairs):.2f}, max {max(pairs):.2f}); ratio of the medians "
               f"{ratio:.2f}"),
        Figure(f"heavy producer with {light} light ones (1 record/s each)", mixed, "MB/s",
               "heavy producer alone", solo,
               note=f"windows: {rounds_of('mixed', lambda w: w.heavy_mbps)} vs "
               f"{rounds_of('solo', lambda w: w.heavy_mbps)}"),
        Figure("light producers answered", median([w.light_rate for w in phases["mixed"]]),
               "req/s", note=f"{light} connections; errors "
               f"{max(w.light_errors for w in windows)}; windows: "
               + rounds_of("mixed", lambda w: w.light_rate)),
    ]
    p99s = [w.light_p99_ms for w in phases["mixed"]]
    worst_p99 = max(p99s)
    result.figures.append(Figure(
        "light producers' answer latency p99 (worst mixed window)", worst_p99, "ms",
        target=f"<= {LIGHT_P99_TARGET_MS:.0f} ms", met=worst_p99 <= LIGHT_P99_TARGET_MS,
        note="windows: " + ", ".join(f"{p:.1f}" for p in p99s)
        + "; inside the broker (its request log's total_ms, p99): "
        + rounds_of("mixed", lambda w: w.light_broker_p99_ms, "{:.1f}")
        + f"; the broker's loop held over {BLOCKED_THRESHOLD_MS} ms, per mixed window: "
        + " | ".join(_blocked_note(w) for w in phases["mixed"])))
    if tansu:
        ref_mixed = median([w.heavy_mbps for w in tansu if w.mixed])
        ref_solo = median([w.heavy_mbps for w in tansu if not w.mixed])
        versus = mixed / ref_mixed if ref_mixed else 0.0
        ref_p99s = [w.light_p99_ms for w in tansu if w.mixed]
        result.figures += [
            Figure(f"heavy producer with {light} light ones, against tansu", mixed, "MB/s",
                   "tansu, same schedule", ref_mixed, target=f">= {REFERENCE_TARGET}x tansu",
                   met=versus >= REFERENCE_TARGET,
                   note="tansu windows: mixed "
                   + ", ".join(f"{w.heavy_mbps:.0f}" for w in tansu if w.mixed)
                   + ", alone " + ", ".join(f"{w.heavy_mbps:.0f}" for w in tansu if not w.mixed)
                   + f" (median alone {ref_solo:.0f}); tansu's light p99 "
                   + ", ".join(f"{p:.1f}" for p in ref_p99s) + " ms; tansu's CPU mixed "
                   + ", ".join(f"{w.broker_cpu:.0f}" for w in tansu if w.mixed)
                   + " % of a core"),
        ]
    # What a light request costs the broker, assuming its CPU for the heavy producer scales
    # with the heavy MB: (mixed CPU - solo CPU x mixed MB / solo MB) / light requests.
    costs = [(m.broker_cpu - s.broker_cpu * m.heavy_mbps / s.heavy_mbps) / 100 / m.light_rate
             * 1e6 for s, m in zip(phases["solo"], phases["mixed"], strict=True)
             if s.heavy_mbps and m.light_rate]
    if costs:
        result.figures.append(Figure(
            "broker CPU per light request (estimated)", median(costs), "µs",
            note="per round: " + ", ".join(f"{c:.0f}" for c in costs) + "; (mixed CPU - solo "
            "CPU x mixed/solo heavy MB) / light requests"))
    for name in ("solo", "mixed"):
        label = "alone" if name == "solo" else "with the light producers"
        result.figures += [
            Figure(f"NetworkProcessorAvgIdlePercent, heavy {label}",
                   median([w.network_idle * 100 for w in phases[name]]), "%",
                   note="windows: " + rounds_of(name, lambda w: w.network_idle * 100)),
            Figure(f"RequestHandlerAvgIdlePercent, heavy {label}",
                   median([w.handler_idle * 100 for w in phases[name]]), "%",
                   note="windows: " + rounds_of(name, lambda w: w.handler_idle * 100)
                   + f"; connections {rounds_of(name, lambda w: w.connections)}"),
            Figure(f"broker CPU, heavy {label}",
                   median([w.broker_cpu for w in phases[name]]), "% of a core",
                   note="windows: " + rounds_of(name, lambda w: w.broker_cpu)
                   + "; broker's loop thread waiting for a CPU, % of the time: "
                   + rounds_of(name, lambda w: w.broker_wait)
                   + "; heavy producer's process: " + rounds_of(name, lambda w: w.heavy_cpu)
                   + ("; light producers' process: " + rounds_of(name, lambda w: w.light_cpu)
                      if name == "mixed" else "")),
        ]
    if reference_failure:
        result.notes.append(f"reference broker (tansu) failed the schedule: {reference_failure}")
    result.notes.append(
        f"load average {os.getloadavg()[0]:.1f} at the end on {os.cpu_count()} CPUs; {rounds} "
        f"rounds of a solo then a mixed window, each {settle:g} s settling (left out) + "
        f"{seconds:g} s timed; one heavy producer throughout; the {light} light producers "
        "connected before timing and paused (connections open) in the solo windows; gauges are "
        "the broker's metrics_snapshot (every 1 s) averaged over each window")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--light", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0, help="timed part of a window")
    parser.add_argument("--settle", type=float, default=3.0,
                        help="seconds left out at the start of each window")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker setting (repeatable)")
    parser.add_argument("--no-reference", action="store_true",
                        help="skip the same schedule against tansu")
    parser.add_argument("--light-process", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.light_process:
        raise_fd_limit()
        trio.run(_light_main, args.port, args.light_process)
        return
    overrides = dict(item.split("=", 1) for item in args.override)
    result = run(False, args.light, args.seconds, args.rounds, args.settle, overrides,
                 reference=not args.no_reference)
    for figure in result.figures:
        ratio = figure.ratio
        base = "" if figure.baseline_value is None else \
            f" vs {figure.baseline_value:.1f} ({ratio:.2f}x)"
        print(f"{figure.name}: {figure.value:.3g} {figure.unit}{base}; {figure.note}")
    for note in result.notes:
        print(note)


if __name__ == "__main__":
    main()
