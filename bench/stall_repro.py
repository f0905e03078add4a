"""Reproduce issue 9 item 3: librdkafka one record per request stalls a connection.

``python -m bench.stall_repro [--runs N] [--records N] [--buffers -1|102400] [--timeout S]``

Each run starts a fresh broker (default socket buffers unless ``--buffers``), creates a topic
and produces ``--records`` records with ``batch.num.messages=1``, ``linger.ms=0`` and
librdkafka's default unlimited requests in flight. A run that does not get every delivery report
within ``--timeout`` seconds is a stall. The host's TCP prune/collapse/drop counters are printed
per run (``nstat``), since the stall shows up there first.
"""

from __future__ import annotations

import argparse
import sys

from .common import running_broker
from .stall import counter_delta, produce_one_per_request, tcp_counters
from .throughput import create_topic


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.stall_repro")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--records", type=int, default=30_000)
    parser.add_argument("--buffers", default=None,
                        help="socket.{send,receive}.buffer.bytes (default: the broker's)")
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    overrides = {"logging.metrics.snapshot.interval.ms": "0"}
    if args.buffers is not None:
        overrides["socket.send.buffer.bytes"] = args.buffers
        overrides["socket.receive.buffer.bytes"] = args.buffers
    stalls = 0
    for run in range(args.runs):
        before = tcp_counters()
        with running_broker(overrides) as broker:
            create_topic(broker.bootstrap, "one")
            acked, seconds = produce_one_per_request(broker.bootstrap, "one", args.records,
                                                     args.timeout)
        after = tcp_counters()
        delta = counter_delta(before, after)
        stalled = acked != args.records
        stalls += stalled
        print(f"run {run + 1}: {acked}/{args.records} acked in {seconds:.1f} s"
              f"{'  STALL' if stalled else ''}  tcp: {delta}", flush=True)
    print(f"{stalls} stalled of {args.runs}")
    return 1 if stalls else 0


if __name__ == "__main__":
    sys.exit(main())
