"""Zero-copy fetch: broker CPU per MB consumed with ``sendfile`` and without.

``python -m bench.zero_copy [--count N] [--rounds R]`` (also ``python -m bench --only
zero_copy``). One data directory is written once (confluent-kafka, ``count`` × 1 KiB, acks=1);
then the broker is started on it alternately with ``socket.sendfile.enable=true`` and
``false`` (each start fresh, so the page cache is the only thing shared), and a confluent-kafka
consumer with default fetch settings reads everything from offset 0. The broker's CPU (user +
system, all threads, from /proc) is read before and after the consume. Medians over the rounds;
the ratio compares the two modes of the same run.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from .common import BenchResult, BrokerLauncher, Figure, median
from .reference import cpu_seconds
from .throughput import MB, VALUE_SIZE, consume, create_topic, produce

TOPIC = "zero-copy"
OVERRIDES = {"logging.metrics.snapshot.interval.ms": "0"}


def _broker(root: Path, name: str, data: Path, sendfile: bool) -> BrokerLauncher:
    overrides = {**OVERRIDES, "log.dirs": str(data),
                 "socket.sendfile.enable": "true" if sendfile else "false"}
    return BrokerLauncher(root / name, overrides)


def measure(count: int, rounds: int) -> dict[bool, list[tuple[float, float]]]:
    """``{sendfile: [(broker CPU ms per MB, MB/s), ...]}``, rounds interleaved."""
    got: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    volume = count * VALUE_SIZE / MB
    with tempfile.TemporaryDirectory(prefix="trio-broker-zero-copy-") as tmp:
        root = Path(tmp)
        data = root / "data"
        writer = _broker(root, "write", data, True).start()
        try:
            create_topic(writer.bootstrap, TOPIC)
            produce(writer.bootstrap, TOPIC, count, "1")
        finally:
            writer.stop()
        for index in range(rounds):
            for sendfile in (True, False):
                broker = _broker(root, f"r{index}-{sendfile}", data, sendfile).start()
                try:
                    before = cpu_seconds(broker.pid)
                    seconds = consume(broker.bootstrap, TOPIC, count)
                    cpu = cpu_seconds(broker.pid) - before
                finally:
                    broker.stop()
                got[sendfile].append((cpu * 1000 / volume, volume / seconds))
    return got


def run(quick: bool, count: int | None = None, rounds: int | None = None) -> BenchResult:
    count = count or (2_000 if quick else 300_000)
    rounds = rounds or (1 if quick else 3)
    result = BenchResult("zero_copy")
    got = measure(count, rounds)
    on_cpu = median([cpu for cpu, _ in got[True]])
    off_cpu = median([cpu for cpu, _ in got[False]])
    on_rate = median([rate for _, rate in got[True]])
    off_rate = median([rate for _, rate in got[False]])
    size = f"{count} x 1 KiB"
    result.figures += [
        Figure(f"broker CPU per MB consumed, sendfile, {size}", on_cpu, "ms/MB",
               "socket.sendfile.enable=false", off_cpu,
               note="per round: " + ", ".join(f"{c:.2f}" for c, _ in got[True]) + " vs "
               + ", ".join(f"{c:.2f}" for c, _ in got[False])),
        Figure(f"consume, sendfile, {size}", on_rate, "MB/s",
               "socket.sendfile.enable=false", off_rate,
               note="per round: " + ", ".join(f"{r:.0f}" for _, r in got[True]) + " vs "
               + ", ".join(f"{r:.0f}" for _, r in got[False])),
    ]
    result.notes.append(f"load average {os.getloadavg()[0]:.1f} at the end; {rounds} rounds, "
                        "interleaved; the consumer (librdkafka, no per-record work) shares "
                        "the machine")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    result = run(False, args.count, args.rounds)
    for figure in result.figures:
        ratio = figure.ratio
        print(f"{figure.name}: {figure.value:.2f} {figure.unit} vs {figure.baseline_value:.2f} "
              f"({'-' if ratio is None else f'{ratio:.2f}x'}); {figure.note}")
    for note in result.notes:
        print(note)


if __name__ == "__main__":
    main()
