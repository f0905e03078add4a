"""Many connections: 1,000 producers of one record per second next to one heavy producer.

``python -m bench.many_producers [--light N] [--seconds S] [--rounds R]`` (also ``python -m
bench --only many_producers``). The heavy producer (confluent-kafka, 1 KiB values,
``linger.ms=5``, acks=1, as fast as librdkafka goes) runs for ``S`` seconds alone, then for
``S`` seconds while ``N`` light producers each send one one-record Produce request (acks=1)
per second on their own connection, from a separate process (raw protocol on Trio, requests
encoded once, responses only framed). Rounds alternate solo and mixed. The heavy producer's
MB/s (records acknowledged inside the window) mixed over solo is the figure: it should keep at
least 80% of its solo throughput. The light producers' answered requests per second, their
errors and the broker's own idle gauges (``metrics_snapshot`` every second:
NetworkProcessorAvgIdlePercent, RequestHandlerAvgIdlePercent, averaged over the window) are
reported for both phases.
"""

from __future__ import annotations

import argparse
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
    raise_fd_limit,
    stop_process,
)
from .reference import cpu_seconds
from .throughput import MB, VALUE_SIZE, create_topic
from .wire import FrameCounter, api_versions_frame, read_one_frame

HEAVY_TOPIC = "heavy"
LIGHT_TOPIC = "light"
PRODUCE_KEY = 0
TARGET = 0.8


# ------------------------------------------------------------------------ light producers
def produce_frame(topic: str) -> bytes:
    """One Produce v9 request frame: one 100-byte record, acks=1."""
    from kio.schema.produce.v9 import request as produce_v9

    from trio_broker.protocol import records as rb
    from trio_broker.protocol.codec import encode_request

    batch = rb.build_batch([(None, b"l" * 100, [], int(time.time() * 1000))])
    m: Any = produce_v9
    body = m.ProduceRequest(transactional_id=None, acks=1,
                            timeout=datetime.timedelta(seconds=30),
                            topic_data=(m.TopicProduceData(name=topic, partition_data=(
                                m.PartitionProduceData(index=0, records=batch),)),))
    return encode_request(PRODUCE_KEY, 9, 1, "light", body)


@attrs.define
class LightStats:
    connected: int = 0
    sent: int = 0
    answered: int = 0
    errors: int = 0


async def _light_connection(port: int, frame: bytes, stats: LightStats,
                            task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                            ) -> None:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(api_versions_frame())
        await read_one_frame(stream)
        stats.connected += 1
        task_status.started()
        frames = FrameCounter()
        # Spread over the second, as independent clients would be.
        await trio.sleep(random.random())
        next_at = trio.current_time()
        try:
            while True:
                stats.sent += 1
                await stream.send_all(frame)
                got = 0
                while not got:
                    data = await stream.receive_some(65536)
                    if not data:
                        stats.errors += 1
                        return
                    got = frames.feed(data)
                stats.answered += got
                next_at += 1.0
                await trio.sleep_until(next_at)
        except (trio.BrokenResourceError, OSError):
            stats.errors += 1


async def _light_main(port: int, count: int) -> None:
    """Connect ``count`` light producers, print ``ready``, then a JSON stats line per second
    until stdin closes."""
    frame = produce_frame(LIGHT_TOPIC)
    stats = LightStats()
    async with trio.open_nursery() as nursery:
        for _ in range(count):
            await nursery.start(_light_connection, port, frame, stats)
        print("ready", flush=True)

        async def report() -> None:
            while True:
                print(json.dumps(attrs.asdict(stats)), flush=True)
                await trio.sleep(1)

        nursery.start_soon(report)
        await trio.to_thread.run_sync(sys.stdin.read)  # the parent closes stdin to stop us
        nursery.cancel_scope.cancel()


class LightProcess:
    """The light producers in their own process (they must not share the heavy one's GIL)."""

    def __init__(self, port: int, count: int) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.many_producers", "--light-process", str(count),
             "--port", str(port)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, cwd=str(REPO_ROOT), env=bench_env())
        self.last: dict[str, int] = {}
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        if line != "ready":
            err = self.process.stderr.read() if self.process.stderr else ""
            raise RuntimeError(f"light producers did not start: {line!r} {err[-2000:]}")
        self.last = json.loads(self.process.stdout.readline())  # counts before the window
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.last = json.loads(line)

    def stats(self) -> dict[str, int]:
        return dict(self.last)

    def stop(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        stop_process(self.process, 30)


# ---------------------------------------------------------------------------- heavy producer
def heavy(bootstrap: str, seconds: float) -> float:
    """MB/s of 1 KiB records acknowledged within ``seconds`` of producing as fast as possible."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "1",
                         "message.timeout.ms": 60000})
    value = b"h" * VALUE_SIZE
    acked = [0]
    errors: list[str] = []
    end = [0.0]

    def report(error: Any, _message: Any) -> None:
        if error is not None:
            errors.append(str(error))
        elif time.perf_counter() <= end[0]:
            acked[0] += 1

    producer.produce(HEAVY_TOPIC, value, partition=0)  # connect and warm up first
    producer.flush(30)
    started = time.perf_counter()
    end[0] = started + seconds
    while time.perf_counter() < end[0]:
        for _ in range(1000):
            try:
                producer.produce(HEAVY_TOPIC, value, partition=0, on_delivery=report)
            except BufferError:
                producer.poll(0.005)
                break
        producer.poll(0)
    producer.flush(60)
    if errors:
        raise RuntimeError(f"heavy producer errors: {errors[:5]}")
    return acked[0] * VALUE_SIZE / MB / seconds


# ------------------------------------------------------------------------------- the run
def _snapshots(log_path: Path, since: float, until: float) -> dict[str, float]:
    """Averages of the broker's metrics_snapshot gauges logged between two wall times."""
    sums: dict[str, float] = {}
    count = 0
    for line in log_path.read_text(encoding="utf-8").splitlines():
        if '"event":"metrics_snapshot"' not in line:
            continue
        event = json.loads(line)
        stamp = datetime.datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00"))
        if not since <= stamp.timestamp() <= until:
            continue
        count += 1
        for key in ("network_processor_avg_idle_percent", "request_handler_avg_idle_percent",
                    "connection_count"):
            sums[key] = sums.get(key, 0.0) + float(event[key])
    return {key: value / count for key, value in sums.items()} if count else {}


@attrs.define
class Phase:
    heavy_mbps: float
    light_rate: float
    light_errors: int
    network_idle: float
    handler_idle: float
    connections: float
    #: CPU used during the window, in % of one core: the broker's, the light process's.
    broker_cpu: float
    light_cpu: float


def _phase(broker: BrokerLauncher, light: int, seconds: float) -> Phase:
    process = LightProcess(broker.port, light) if light else None
    try:
        since = time.time()
        before = process.stats() if process else {}
        cpu_before = cpu_seconds(broker.pid)
        light_before = cpu_seconds(process.process.pid) if process else 0.0
        mbps = heavy(broker.bootstrap, seconds)
        time.sleep(1.1)  # the light process's next stats line
        until = time.time()
        after = process.stats() if process else {}
        broker_cpu = (cpu_seconds(broker.pid) - cpu_before) / (until - since) * 100
        light_cpu = ((cpu_seconds(process.process.pid) - light_before) / (until - since) * 100
                     if process else 0.0)
    finally:
        if process is not None:
            process.stop()
    gauges = _snapshots(broker.log_path, since, until)
    answered = after.get("answered", 0) - before.get("answered", 0)
    return Phase(mbps, answered / (until - since - 1.1), after.get("errors", 0),
                 gauges.get("network_processor_avg_idle_percent", float("nan")),
                 gauges.get("request_handler_avg_idle_percent", float("nan")),
                 gauges.get("connection_count", float("nan")), broker_cpu, light_cpu)


def measure(light: int, seconds: float, rounds: int) -> dict[str, list[Phase]]:
    raise_fd_limit()
    phases: dict[str, list[Phase]] = {"solo": [], "mixed": []}
    with tempfile.TemporaryDirectory(prefix="trio-broker-many-") as tmp:
        broker = BrokerLauncher(Path(tmp), {"logging.metrics.snapshot.interval.ms": "1000"})
        broker.start()
        try:
            create_topic(broker.bootstrap, HEAVY_TOPIC)
            create_topic(broker.bootstrap, LIGHT_TOPIC)
            for _ in range(rounds):
                phases["solo"].append(_phase(broker, 0, seconds))
                phases["mixed"].append(_phase(broker, light, seconds))
        finally:
            broker.stop()
    return phases


def run(quick: bool, light: int | None = None, seconds: float | None = None,
        rounds: int | None = None) -> BenchResult:
    light = light or (50 if quick else 1000)
    seconds = seconds or (1.5 if quick else 8.0)
    rounds = rounds or (1 if quick else 2)
    result = BenchResult("many_producers")
    phases = measure(light, seconds, rounds)
    solo = median([p.heavy_mbps for p in phases["solo"]])
    mixed = median([p.heavy_mbps for p in phases["mixed"]])
    ratio = mixed / solo if solo else 0.0

    def rounds_of(name: str, get: Any, fmt: str = "{:.0f}") -> str:
        return ", ".join(fmt.format(get(p)) for p in phases[name])

    result.figures += [
        Figure(f"heavy producer with {light} light ones (1 record/s each)", mixed, "MB/s",
               "heavy producer alone", solo, f">= {TARGET:.0%} of alone", ratio >= TARGET,
               note=f"rounds: {rounds_of('mixed', lambda p: p.heavy_mbps)} vs "
               f"{rounds_of('solo', lambda p: p.heavy_mbps)}"),
        Figure("light producers answered", median([p.light_rate for p in phases["mixed"]]),
               "req/s", note=f"{light} connections; errors "
               f"{max(p.light_errors for p in phases['mixed'])}"),
    ]
    for name in ("solo", "mixed"):
        label = "alone" if name == "solo" else "with the light producers"
        result.figures += [
            Figure(f"NetworkProcessorAvgIdlePercent, heavy {label}",
                   median([p.network_idle * 100 for p in phases[name]]), "%",
                   note="rounds: " + rounds_of(name, lambda p: p.network_idle * 100)),
            Figure(f"RequestHandlerAvgIdlePercent, heavy {label}",
                   median([p.handler_idle * 100 for p in phases[name]]), "%",
                   note="rounds: " + rounds_of(name, lambda p: p.handler_idle * 100)
                   + f"; connections {rounds_of(name, lambda p: p.connections)}"),
            Figure(f"broker CPU, heavy {label}",
                   median([p.broker_cpu for p in phases[name]]), "% of a core",
                   note="rounds: " + rounds_of(name, lambda p: p.broker_cpu)
                   + ("; light producers' process: "
                      + rounds_of(name, lambda p: p.light_cpu) if name == "mixed" else "")),
        ]
    result.notes.append(f"load average {os.getloadavg()[0]:.1f} at the end; {rounds} rounds of "
                        f"{seconds:.0f} s alone then {seconds:.0f} s mixed; gauges are the "
                        "broker's metrics_snapshot (every 1 s) averaged over each window")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--light", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--light-process", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.light_process:
        raise_fd_limit()
        trio.run(_light_main, args.port, args.light_process)
        return
    result = run(False, args.light, args.seconds, args.rounds)
    for figure in result.figures:
        ratio = figure.ratio
        base = "" if figure.baseline_value is None else \
            f" vs {figure.baseline_value:.1f} ({ratio:.2f}x)"
        print(f"{figure.name}: {figure.value:.1f} {figure.unit}{base}; {figure.note}")
    for note in result.notes:
        print(note)


if __name__ == "__main__":
    main()
