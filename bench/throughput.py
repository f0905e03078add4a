"""Produce and consume throughput with confluent-kafka (librdkafka), 1 KiB values.

* produce: ``linger.ms=5``, ``acks=1`` and ``acks=all``, N messages to one partition; MB/s of
  values from the first ``produce()`` until every delivery report has arrived;
* consume: a consumer with default fetch settings, ``assign`` + seek to the beginning, reading
  every message back; MB/s of values (the clock starts at ``assign`` on a consumer that already
  knows the partition's leader: see ``common.know_leader``; ``common.CONSUMER_SETTINGS``);
* baseline, same run: the same byte volume through a raw loopback socket into a Trio sink
  (``bench.baseline_server sink``): what this machine's loopback and one Trio reader can move;
* reference (BRIEF §7, quoted, not measured): Kafka-protocol brokers do 125-230 MB/s with this
  producer setup.

MB is 10^6 bytes of record values (protocol overhead not counted).
With ``profile_to`` the broker runs under cProfile (acks=1 produce and the consume only).
"""

from __future__ import annotations

import pstats
import socket
import time
from pathlib import Path
from typing import Any

from .common import (
    CONSUMER_SETTINGS,
    BenchResult,
    BrokerLauncher,
    Figure,
    know_leader,
    running_broker,
    running_helper,
)

VALUE_SIZE = 1024
REFERENCE_MBPS = (125.0, 230.0)
TIMEOUT_S = 180.0
MB = 1e6


class ProduceFailed(Exception):
    """The broker did not acknowledge every message (Produce not working, or too slow)."""


def create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)],
                                  request_timeout=30)
    futures[topic].result(timeout=30)


def produce(bootstrap: str, topic: str, count: int, acks: str) -> float:
    """Seconds until every delivery report arrived; raises ProduceFailed otherwise."""
    from confluent_kafka import Producer

    producer = Producer({
        "bootstrap.servers": bootstrap,
        "linger.ms": 5,
        "acks": acks,
        "message.timeout.ms": int(TIMEOUT_S * 1000),
    })
    know_leader(producer, topic)  # connected, metadata known: the clock times the produce only
    value = b"v" * VALUE_SIZE
    delivered = [0]
    errors: list[str] = []

    def report(error: Any, _message: Any) -> None:
        if error is not None:
            if len(errors) < 5:
                errors.append(str(error))
            return
        delivered[0] += 1

    started = time.perf_counter()
    for index in range(count):
        while True:
            try:
                producer.produce(topic, value, partition=0, on_delivery=report)
                break
            except BufferError:
                # The client's queue is full: wait for deliveries, as an application would.
                producer.poll(0.01)
        if index % 1000 == 0:
            producer.poll(0)
    remaining = producer.flush(TIMEOUT_S)
    elapsed = time.perf_counter() - started
    if remaining or errors or delivered[0] != count:
        raise ProduceFailed(f"acks={acks}: {delivered[0]} of {count} acknowledged, "
                            f"{remaining} still queued after {elapsed:.1f} s; errors: {errors}")
    return elapsed


def consume(bootstrap: str, topic: str, count: int) -> float:
    """Seconds to read ``count`` messages from the beginning (assign + seek, default fetch)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "trio-broker-bench",
        "enable.auto.commit": False,
        **CONSUMER_SETTINGS,
    })
    received = 0
    errors: list[str] = []
    try:
        know_leader(consumer, topic)  # else librdkafka's 500 ms offset-query timer is timed
        started = time.perf_counter()
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + TIMEOUT_S
        while received < count and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=10000, timeout=0.5):
                if message.error() is not None:
                    if len(errors) < 5:
                        errors.append(str(message.error()))
                    continue
                received += 1
        elapsed = time.perf_counter() - started
    finally:
        consumer.close()
    if received < count:
        raise ProduceFailed(f"consumed {received} of {count} in {elapsed:.1f} s; "
                            f"errors: {errors}")
    return elapsed


def loopback_sink_seconds(port: int, total: int) -> float:
    """Seconds to push ``total`` bytes through loopback into the Trio sink (acknowledged)."""
    chunk = memoryview(b"x" * (1 << 20))
    with socket.create_connection(("127.0.0.1", port)) as sock:
        started = time.perf_counter()
        sent = 0
        while sent < total:
            piece = chunk[:min(len(chunk), total - sent)]
            sock.sendall(piece)
            sent += len(piece)
        sock.shutdown(socket.SHUT_WR)
        ack = b""
        while len(ack) < 8:
            data = sock.recv(8 - len(ack))
            if not data:
                raise ConnectionError("sink closed before acknowledging")
            ack += data
        elapsed = time.perf_counter() - started
    if int.from_bytes(ack, "big") != total:
        raise RuntimeError(f"sink received {int.from_bytes(ack, 'big')} of {total} bytes")
    return elapsed


# Start-up work that dominates a short profile and says nothing about the request path.
_STARTUP_NAMES = {"_find_and_load", "_find_and_load_unlocked", "_load_unlocked", "exec_module",
                  "_call_with_frames_removed", "_handle_fromlist", "__init_subclass__",
                  "<built-in method builtins.__import__>",
                  "<built-in method builtins.__build_class__>"}


def _where(func: tuple[str, int, str]) -> str:
    filename, line, name = func
    if filename == "~":
        return name
    short = "/".join(Path(filename).parts[-2:])
    return f"{short}:{line}({name})"


def top_functions(profile_file: Path, limit: int = 25) -> list[str]:
    """The top ``limit`` functions by cumulative time, then the top by own time.

    Only what runs under ``trio.run`` is listed: module imports (the import machinery and what it
    calls) would fill the list in a short run, and the start-up benchmark measures them.
    """
    stats = pstats.Stats(str(profile_file))
    table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    imports = max((row[3] for func, row in table.items() if func[2] == "_find_and_load"),
                  default=0.0)
    # What runs under trio.run, not counting the import machinery and what it calls.
    reachable = {func for func in table if func[2] == "run" and func[0].endswith("_core/_run.py")}
    grew = True
    while grew:
        grew = False
        for func, row in table.items():
            if func in reachable or func[2] in _STARTUP_NAMES:
                continue
            if any(caller in reachable for caller in row[4]):
                reachable.add(func)
                grew = True
    rows = [(func, table[func]) for func in reachable]
    lines = [f"profile: {stats.total_tt:.2f} s in the broker's main thread "  # type: ignore[attr-defined]
             f"(module imports: {imports:.2f} s); under trio.run, imports left out:",
             f"top {limit} by cumulative time:",
             f"  {'cumtime':>8} {'tottime':>8} {'ncalls':>9}  function"]
    for func, (_cc, nc, tt, ct, _callers) in sorted(rows, key=lambda r: -r[1][3])[:limit]:
        lines.append(f"  {ct:8.3f} {tt:8.3f} {nc:9d}  {_where(func)}")
    lines += ["top 15 by own time:", f"  {'tottime':>8} {'cumtime':>8} {'ncalls':>9}  function"]
    for func, (_cc, nc, tt, ct, _callers) in sorted(rows, key=lambda r: -r[1][2])[:15]:
        lines.append(f"  {tt:8.3f} {ct:8.3f} {nc:9d}  {_where(func)}")
    return lines


def _run_on_broker(broker: BrokerLauncher, count: int, acks_modes: tuple[str, ...],
                   result: BenchResult) -> dict[str, float]:
    """MB/s per phase ('produce acks=1', ..., 'consume'); failures go to result.notes."""
    volume = count * VALUE_SIZE
    rates: dict[str, float] = {}
    consumed = False
    for acks in acks_modes:
        topic = f"bench-acks-{acks}"
        try:
            create_topic(broker.bootstrap, topic)
            seconds = produce(broker.bootstrap, topic, count, acks)
            rates[f"produce acks={acks}"] = volume / seconds / MB
        except Exception as exc:  # noqa: BLE001 - reported, never fatal: other phases still run
            result.notes.append(f"PRODUCE acks={acks} FAILED: {type(exc).__name__}: {exc}")
            continue
        if not consumed:
            # Read back the first topic that was produced in full.
            consumed = True
            try:
                rates["consume"] = volume / consume(broker.bootstrap, topic, count) / MB
            except Exception as exc:  # noqa: BLE001
                result.notes.append(f"CONSUME FAILED: {type(exc).__name__}: {exc}")
    return rates


def run(quick: bool, profile_to: Path | None = None) -> BenchResult:
    count = 2_000 if quick else 200_000
    result = BenchResult("throughput" if profile_to is None else "profile")
    acks_modes = ("1",) if profile_to is not None else ("1", "all")
    overrides = {"logging.metrics.snapshot.interval.ms": "0"}
    with running_broker(overrides, profile_to=profile_to) as broker:
        rates = _run_on_broker(broker, count, acks_modes, result)
    volume = count * VALUE_SIZE
    with running_helper("sink") as sink:
        raw = volume / loopback_sink_seconds(sink.port, volume) / MB
    low = REFERENCE_MBPS[0]
    for phase in [*(f"produce acks={a}" for a in acks_modes), "consume"]:
        rate = rates.get(phase)
        result.figures.append(Figure(
            f"{phase}, {count} x 1 KiB", rate, "MB/s", "raw loopback into a trio sink", raw,
            f">= {low:.0f} MB/s (reference brokers, quoted)",
            None if rate is None else rate >= low,
            note="" if rate is not None else "failed: see notes"))
    result.figures.append(Figure("raw loopback into a trio sink", raw, "MB/s",
                                 note=f"{volume / MB:.0f} MB, 1 MiB sends"))
    result.notes.append(f"reference (BRIEF §7, quoted, not measured): Kafka-protocol brokers, "
                        f"same producer settings: {REFERENCE_MBPS[0]:.0f}-{REFERENCE_MBPS[1]:.0f} "
                        "MB/s")
    if profile_to is not None:
        if profile_to.exists():
            result.details = top_functions(profile_to)
        else:
            result.notes.append(f"no profile written to {profile_to} (broker did not exit "
                                "cleanly on SIGTERM?)")
    return result
