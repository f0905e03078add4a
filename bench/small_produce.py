"""One record per Produce request against ``python -m trio_broker run``: req/s and broker CPU
per request, optionally with the broker sampled by py-spy.

``python -m bench.small_produce [--count N] [--rounds R] [--py-spy FILE] [--override K=V]``

The producer is the reference benchmark's (confluent-kafka, ``batch.num.messages=1``,
``linger.ms=0``, ``acks=1``, one connection); every acknowledged record is read back and checked.
With ``--py-spy FILE`` the broker is sampled (``py-spy record --format raw``, 250 Hz, idle
frames left out) during the produce only, and a table of where the broker's CPU went is printed:
per function, the share of samples with the function on the stack (inclusive) and at the top
(own), and the µs per request that share is.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from .common import running_broker
from .reference import SMALL_SIZE, consume_all, cpu_seconds, produce
from .throughput import create_topic

CONFIG = {"linger.ms": 0, "batch.num.messages": 1, "acks": "1"}


def _frame_name(frame: str) -> str:
    # py-spy raw frames look like "function (path/to/file.py:123)"
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    parts = Path(path).parts
    short = "/".join(parts[-2:]) if parts else path
    return f"{short}:{name}"


#: Frames that are waits (py-spy's idle detection misses timed waits and epoll with a timeout).
IDLE_LEAVES = {"threading.py:Condition.wait", "_core/_thread_cache.py:WorkerThread._work",
               "_core/_io_epoll.py:EpollIOManager.get_events"}


def profile_table(raw: Path, requests: int, cpu: float, limit: int = 45) -> list[str]:
    """Where the sampled time went, from py-spy's collapsed stacks."""
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text(encoding="utf-8", errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        # The first entry names the thread; the rest are "function (file:line)" frames.
        frames = [_frame_name(f) for f in stack.split(";")[1:]]
        if frames and frames[-1] in IDLE_LEAVES:
            continue  # a timed wait py-spy did not recognise as idle
        total += count
        for name in set(frames):
            inclusive[name] += count
        if frames:
            own[frames[-1]] += count
    if not total:
        return ["no samples"]
    per_sample_us = cpu / total / requests * 1e6 if requests else 0.0
    lines = [f"{total} samples of the broker's busy threads (waits left out); broker CPU {cpu:.2f} s for "
             f"{requests} requests = {cpu / requests * 1e6:.0f} µs/request; µs columns spread "
             "that CPU over the samples",
             f"  {'incl %':>6} {'incl µs':>7} {'own %':>6} {'own µs':>6}  function"]
    for name, count in inclusive.most_common(limit):
        lines.append(f"  {100 * count / total:6.1f} {count * per_sample_us:7.1f} "
                     f"{100 * own[name] / total:6.1f} {own[name] * per_sample_us:6.1f}  {name}")
    lines.append("top by own time:")
    for name, count in own.most_common(15):
        lines.append(f"  {100 * count / total:6.1f} {count * per_sample_us:7.1f}  {name}")
    return lines


#: Parts of the request path, matched from the innermost frame outwards (first match wins).
PARTS = (
    ("request log line", ("observability/log.py:emit",)),
    ("request metrics", ("observability/metrics.py:BrokerMetrics.observe_request",)),
    ("response encoding", ("protocol/codec.py:encode_response",)),
    ("request decoding (pre-scan + kio)", ("protocol/codec.py:decode_request",)),
    ("storage append", ("storage/manager.py:LogManager.append",)),
    ("produce handler, rest", ("handlers/produce.py:",)),
    ("handler pool, rest", ("server/handler_pool.py:",)),
    ("socket send", ("trio/_highlevel_socket.py:SocketStream.send_all",
                     "network/response_writer.py:_send_nowait")),
    ("socket receive", ("trio/_highlevel_socket.py:SocketStream.receive_some",)),
    ("connection and request channel, rest", ("network/",)),
    ("log writer thread", ("observability/log.py:LineWriter",)),
    ("trio scheduler and I/O wait bookkeeping", ("_core/",)),
)


def profile_parts(raw: Path) -> dict[str, int]:
    """Samples per part of the request path (see :data:`PARTS`), plus ``total``."""
    parts: collections.Counter[str] = collections.Counter()
    for line in raw.read_text(encoding="utf-8", errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        frames = [_frame_name(f) for f in stack.split(";")[1:]]
        if frames and frames[-1] in IDLE_LEAVES:
            continue
        count = int(count_text)
        parts["total"] += count
        for frame in reversed(frames):
            found = next((name for name, patterns in PARTS
                          if any(frame.startswith(p) or f"/{p}" in f"/{frame}"
                                 for p in patterns)), None)
            if found:
                parts[found] += count
                break
        else:
            parts["other"] += count
    return dict(parts)


def run_once(count: int, overrides: dict[str, str], spy_out: Path | None) -> tuple[float, float]:
    """(requests/s, broker µs CPU per request) for ``count`` one-record requests."""
    settings = {"logging.metrics.snapshot.interval.ms": "0", **overrides}
    with running_broker(settings) as broker:
        create_topic(broker.bootstrap, "small")
        # Warm up: the first requests pay for imports and caches, not the steady state.
        produce(broker.bootstrap, "warm", 500, SMALL_SIZE, CONFIG)
        spy = None
        if spy_out is not None:
            py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
            if not Path(py_spy).exists():
                raise SystemExit("--py-spy needs py-spy (pip install py-spy)")
            spy = subprocess.Popen([py_spy, "record", "--pid", str(broker.pid), "--format", "raw",
                                    "--rate", "250", "--output", str(spy_out), "--threads"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            time.sleep(1.0)  # py-spy attaches
        before = cpu_seconds(broker.pid)
        seconds, sent = produce(broker.bootstrap, "small", count, SMALL_SIZE, CONFIG)
        cpu = cpu_seconds(broker.pid) - before
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(30)
        _, got, problems = consume_all(broker.bootstrap, "small", count)
        if problems or got != sent:
            raise RuntimeError(f"wrong answer: {problems or 'checksum differs'}")
    return count / seconds, cpu / count * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.small_produce", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--py-spy", type=Path, default=None, metavar="FILE",
                        help="sample the broker with py-spy into FILE (raw) and print a table")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    overrides = dict(item.split("=", 1) for item in args.override)
    for index in range(args.rounds):
        rate, cpu_us = run_once(args.count, overrides, args.py_spy)
        print(f"round {index + 1}: {rate:,.0f} req/s, broker {cpu_us:.0f} µs CPU/request "
              f"(load {os.getloadavg()[0]:.1f})", flush=True)
        if args.py_spy is not None:
            print_profile(args.py_spy, args.count, cpu_us)
    return 0


def print_profile(raw: Path, requests: int, cpu_us: float) -> None:
    """Print a py-spy run's table and its split by part of the request path, the broker's CPU
    per request (``cpu_us``, from /proc) spread over the samples."""
    print("\n".join(profile_table(raw, requests, cpu_us * requests / 1e6)))
    parts = profile_parts(raw)
    print("by part of the request path (µs of broker CPU per request):")
    for name, samples in sorted(parts.items(), key=lambda item: -item[1]):
        if name != "total":
            print(f"  {cpu_us * samples / parts['total']:6.1f}  {name}")


if __name__ == "__main__":
    sys.exit(main())
