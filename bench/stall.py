"""No connection stalls (issue 9): rounds of bulk traffic, then librdkafka's one-record pipelining.

Each round, on one broker with default settings (Kafka's 102400-byte socket buffers):

* 100k x 1 KiB records produced with confluent-kafka (``linger.ms=5``, acks=1) and consumed
  back (assign + seek), to a fresh topic;
* 20k records to another fresh topic with ``batch.num.messages=1`` and ``linger.ms=0``: one
  record per Produce request, thousands in flight on one connection (librdkafka's default),
  the load that stalled a connection for minutes before the fix.

Every round's time is printed as it finishes. Target: every round done in seconds (< 30 s) and
none failing. The host's TCP receive-queue pruning counters are reported for the whole run.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from typing import Any

from .common import BenchResult, Figure, median, running_broker
from .throughput import ProduceFailed, consume, create_topic, produce

TARGET_SECONDS = 30.0
COUNTERS = ("TcpExtPruneCalled", "TcpExtRcvPruned", "TcpExtTCPRcvCollapsed",
            "TcpExtTCPRcvQDrop", "TcpExtTCPBacklogDrop", "TcpExtTCPOFODrop")


def tcp_counters() -> dict[str, int]:
    """The host's TCP counters that reveal receive-queue pruning (``nstat -az``), if available."""
    try:
        out = subprocess.run(["nstat", "-az"], capture_output=True, text=True, check=False,
                             timeout=5).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    values = {}
    for line in out.splitlines():
        match = re.match(r"(\S+)\s+(\d+)", line)
        if match and match.group(1) in COUNTERS:
            values[match.group(1)] = int(match.group(2))
    return values


def counter_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k.removeprefix("TcpExt"): after[k] - before.get(k, 0)
            for k in after if after[k] - before.get(k, 0)}


def produce_one_per_request(bootstrap: str, topic: str, count: int, timeout: float,
                            extra: dict[str, Any] | None = None) -> tuple[int, float]:
    """(records acknowledged, seconds) for ``count`` records sent one per Produce request."""
    from confluent_kafka import Producer

    producer = Producer({
        "bootstrap.servers": bootstrap,
        "batch.num.messages": 1,
        "linger.ms": 0,
        "acks": 1,
        "message.timeout.ms": int(timeout * 1000),
        "queue.buffering.max.messages": max(100_000, count),
        **(extra or {}),
    })
    delivered = [0]

    def report(error: Any, _message: Any) -> None:
        if error is None:
            delivered[0] += 1

    started = time.perf_counter()
    for index in range(count):
        producer.produce(topic, b"r%d" % index, partition=0, on_delivery=report)
        if index % 1000 == 0:
            producer.poll(0)
    producer.flush(timeout + 5)
    return delivered[0], time.perf_counter() - started


def run(quick: bool) -> BenchResult:
    rounds, bulk, one_per_request = (2, 5_000, 2_000) if quick else (20, 100_000, 20_000)
    result = BenchResult("stall")
    times: list[float] = []
    failures: list[str] = []
    before = tcp_counters()
    with running_broker({"logging.metrics.snapshot.interval.ms": "0"}) as broker:
        for index in range(rounds):
            started = time.perf_counter()
            try:
                create_topic(broker.bootstrap, f"bulk-{index}")
                produce(broker.bootstrap, f"bulk-{index}", bulk, "1")
                consume(broker.bootstrap, f"bulk-{index}", bulk)
                create_topic(broker.bootstrap, f"one-{index}")
                acked, _ = produce_one_per_request(broker.bootstrap, f"one-{index}",
                                                   one_per_request, TARGET_SECONDS * 2)
                if acked != one_per_request:
                    raise ProduceFailed(f"one record per request: {acked} of "
                                        f"{one_per_request} acknowledged")
            except ProduceFailed as exc:
                failures.append(f"round {index + 1}: {exc}")
                line = f"round {index + 1}: FAILED after {time.perf_counter() - started:.1f} s"
            else:
                times.append(time.perf_counter() - started)
                line = f"round {index + 1}: {times[-1]:.1f} s"
            print(line, file=sys.stderr, flush=True)
            result.details.append(line)
        time.sleep(0.5)  # the broker's log writer flushes on a short interval
        stalled = broker.log_path.read_text(encoding="utf-8").count(
            '"event":"connection_send_stalled"')
    pruning = counter_delta(before, tcp_counters())
    slowest = max(times) if times else None
    result.figures += [
        Figure(f"slowest round ({rounds} rounds)", slowest, "s",
               target=f"every round < {TARGET_SECONDS:.0f} s, none failed",
               met=bool(times) and not failures and slowest is not None
               and slowest < TARGET_SECONDS),
        Figure("median round", median(times) if times else None, "s"),
        Figure("failed rounds", float(len(failures)), "rounds", target="0",
               met=not failures),
        Figure("connections closed as send_stalled", float(stalled), "conns"),
    ]
    result.notes.append(f"a round: {bulk:,} x 1 KiB produced (linger.ms=5) and consumed, then "
                        f"{one_per_request:,} records one per request (batch.num.messages=1, "
                        "linger.ms=0, unlimited in flight); default socket buffers")
    result.notes.append(f"host TCP pruning counters over the run: {pruning or 'none'}")
    result.notes.extend(failures)
    return result
