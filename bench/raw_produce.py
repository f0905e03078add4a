"""One-record Produce requests from a raw client: the broker's CPU per request, one in flight
and pipelined, with as little client CPU as possible beside it.

``python -m bench.raw_produce [--count N] [--depth D ...] [--rounds R] [--py-spy FILE]``

librdkafka's own CPU (and the Python loop feeding it) shares the machine's two cores with the
broker, so its req/s moves with the load; this client sends one pre-encoded Produce v9 frame
(one 100 B record, acks=1) per request from a blocking socket and only counts the response
frames, keeping ``D`` requests in flight: at depth 1 it sends the next request when the answer
arrives (Kafka's default), at depth 16 it answers every batch of responses with as many new
requests in one write (a pipelining client). The broker runs with
``connection.max.inflight.requests`` = D. The end offset is checked (every request appended
one record). A diagnostic beside ``bench.small_produce``, not one of the issue's figures.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from .common import running_broker
from .reference import cpu_seconds
from .small_produce import print_profile
from .throughput import create_topic
from .wire import produce_frame, send_in_flight

TOPIC = "raw"


def drive(port: int, count: int, depth: int) -> float:
    """Send ``count`` one-record Produce requests keeping ``depth`` in flight; seconds taken."""
    return send_in_flight(port, produce_frame(TOPIC), count, depth)


def end_offset(bootstrap: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "raw-check"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=30)[1])
    finally:
        consumer.close()


def run_once(count: int, depth: int, spy_out: Path | None = None) -> tuple[float, float]:
    """(requests/s, broker µs of CPU per request)."""
    settings = {"logging.metrics.snapshot.interval.ms": "0",
                "connection.max.inflight.requests": str(depth)}
    with running_broker(settings) as broker:
        create_topic(broker.bootstrap, TOPIC)
        port = int(broker.bootstrap.rsplit(":", 1)[1])
        drive(port, 2000, depth)  # warm up
        spy = None
        if spy_out is not None:
            py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
            spy = subprocess.Popen([py_spy, "record", "--pid", str(broker.pid), "--format", "raw",
                                    "--rate", "250", "--output", str(spy_out), "--threads"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            time.sleep(1.0)  # py-spy attaches
        before = cpu_seconds(broker.pid)
        seconds = drive(port, count, depth)
        cpu = cpu_seconds(broker.pid) - before
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(30)
        if (end := end_offset(broker.bootstrap)) != count + 2000:
            raise RuntimeError(f"wrong answer: end offset {end}, expected {count + 2000}")
    return count / seconds, cpu / count * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.raw_produce", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=30_000)
    parser.add_argument("--depth", type=int, action="append", default=[])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--py-spy", type=Path, default=None, metavar="FILE",
                        help="sample the broker with py-spy into FILE (raw) and print a table")
    args = parser.parse_args(argv)
    for index in range(args.rounds):
        for depth in args.depth or [1, 16]:
            rate, cpu_us = run_once(args.count, depth, args.py_spy)
            print(f"round {index + 1} depth {depth:2d}: {rate:,.0f} req/s, broker {cpu_us:.1f} µs "
                  f"CPU/request (load {os.getloadavg()[0]:.1f})", flush=True)
            if args.py_spy is not None:
                print_profile(args.py_spy, args.count, cpu_us)
    return 0


if __name__ == "__main__":
    sys.exit(main())
