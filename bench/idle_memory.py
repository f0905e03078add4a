"""Idle connections: RSS growth of the broker per idle Kafka connection.

Each connection sends one ApiVersions and reads the answer (a real Kafka client's first
exchange), then stays idle. The growth is measured between a warm-up set of connections and the
full set, so one-time costs (first accept, first request, lazily built tables) are not charged to
the connections. Baseline: a minimal Trio server (``bench.baseline_server framed``) holding the
same connections, measured the same way. Target: at most 10 KiB per idle connection.
"""

from __future__ import annotations

import trio

from .common import BenchResult, Figure, raise_fd_limit, rss_bytes, running_broker, running_helper
from .wire import api_versions_frame, open_kafka_connection, probe_api_versions_body

TARGET_BYTES = 10 * 1024
WARMUP_CONNECTIONS = 100
QUICK_WARMUP_CONNECTIONS = 10


async def _open_many(port: int, count: int, into: list[trio.SocketStream]) -> None:
    frame = api_versions_frame()
    # A few at a time: a burst of thousands of SYNs would only measure the listen backlog.
    limiter = trio.CapacityLimiter(50)

    async def one() -> None:
        async with limiter:
            into.append(await open_kafka_connection(port, frame))

    async with trio.open_nursery() as nursery:
        for _ in range(count):
            nursery.start_soon(one)


async def _measure(pid: int, port: int, connections: int, warmup: int, settle: float
                   ) -> tuple[float, int, int]:
    """(bytes per connection, RSS at warm-up, RSS with every connection open)."""
    streams: list[trio.SocketStream] = []
    try:
        await _open_many(port, warmup, streams)
        await trio.sleep(settle / 2)
        before = rss_bytes(pid)
        await _open_many(port, connections, streams)
        # Let the server finish its per-connection work (log lines, buffers) before reading.
        await trio.sleep(settle)
        after = rss_bytes(pid)
        return (after - before) / connections, before, after
    finally:
        for stream in streams:
            await stream.aclose()


def run(quick: bool) -> BenchResult:
    connections = 50 if quick else 2000
    warmup = QUICK_WARMUP_CONNECTIONS if quick else WARMUP_CONNECTIONS
    settle = 0.2 if quick else 2.0
    limit = raise_fd_limit()
    result = BenchResult("idle_memory")
    if limit < connections + warmup + 200:
        connections = max(100, limit - warmup - 200)
        result.notes.append(f"RLIMIT_NOFILE is {limit}: measured {connections} connections")
    with running_broker({"logging.metrics.snapshot.interval.ms": "0"}) as broker:
        body = trio.run(probe_api_versions_body, broker.port)
        per_conn, before, after = trio.run(_measure, broker.pid, broker.port, connections,
                                           warmup, settle)
    with running_helper("framed", body.hex()) as server:
        base_per_conn, base_before, base_after = trio.run(_measure, server.pid, server.port,
                                                          connections, warmup, settle)
    result.figures += [
        Figure(f"broker RSS per idle connection ({connections})", per_conn / 1024, "KiB",
               "minimal trio server", base_per_conn / 1024, f"<= {TARGET_BYTES // 1024} KiB",
               per_conn <= TARGET_BYTES),
        Figure(f"broker RSS at {warmup} connections", before / 2**20, "MiB",
               note=f"{after / 2**20:.1f} MiB at {warmup + connections}"),
        Figure(f"minimal trio server RSS at {warmup} connections",
               base_before / 2**20, "MiB",
               note=f"{base_after / 2**20:.1f} MiB at {warmup + connections}"),
    ]
    result.notes.append(f"growth measured from {warmup} warm-up connections to "
                        f"{warmup + connections}")
    return result
