"""One request never freezes the broker (issue 31): the heavy loads get Kafka's answers while a
probe connection is served, and a run of the loop past the threshold is named.

The loads are ``bench/event_loop.py``'s (decompression bombs, a Metadata naming two million
topics, thousands of partitions created, fetched, committed, described and deleted), sent to an
in-process broker. The probe's waits are measured by the bench (``python -m bench --only
event_loop``); here the loop's worst run is only held to a generous guard against the class
of regression the issue measured (seconds to tens of seconds), never to the targets.
"""

from __future__ import annotations

import gc
import time
from typing import Any

import pytest
import trio
from kio.schema.metadata.v12.request import MetadataRequest

from bench import event_loop
from trio_broker.testing.client import WireClient

pytestmark = pytest.mark.timeout(600)

#: What no load may hold the loop for, even on a busy two-core CI machine (the issue measured
#: 10-22 s for the bombs and 3-15 s for the partitions before the work moved off the loop).
GUARD_SECONDS = 2.5


@pytest.mark.parametrize("load", event_loop.loads(), ids=lambda load: load.name.split(":")[0])
async def test_a_heavy_request_gets_kafkas_answer_while_others_are_served(
        start_broker: Any, loop_lag: Any, load: event_loop.Load) -> None:
    broker = await start_broker({"num.partitions": "1"})
    await event_loop.create_bomb_topic(broker.port)
    if load.api_key in (1, 8, 32, 20):  # these read, commit to or delete the wide topic
        connection = await event_loop.Connection.open(broker.port)
        async with connection.stream:
            await connection.exchange(event_loop.create_frame(2))
    loop_lag.read_lag("test")
    outcome = await event_loop.run_load(broker.port, load)
    assert outcome.problem is None
    assert outcome.waits_ms, "the probe was never answered"
    assert loop_lag.read_lag("test") < GUARD_SECONDS


async def metadata_then_blocked_line(broker: Any, log_events: Any, client_id: str = "wire-test"
                                     ) -> dict[str, Any]:
    """Send one Metadata request (which the test's interceptor makes hold the loop) and
    return the first ``event_loop_blocked`` line."""
    async with await WireClient.connect(broker.port, client_id=client_id) as client:
        await client.request(3, 12, MetadataRequest(
            topics=(), allow_auto_topic_creation=False,
            include_topic_authorized_operations=False))
    with trio.fail_after(5):
        (blocked, *_) = await log_events.wait_for("event_loop_blocked")
    return dict(blocked)


async def test_a_blocked_loop_is_logged_with_the_request_that_held_it(
        start_broker: Any, log_events: Any) -> None:
    broker = await start_broker({"event.loop.blocked.threshold.ms": "50"})
    pool = broker.app._pools[0]

    async def hold_the_loop(ctx: Any, handle: Any) -> Any:
        if ctx.request.api == "Metadata":
            time.sleep(0.3)  # computing without a checkpoint, as a heavy handler would
        return await handle(ctx, ctx.request.body)

    pool.interceptor = hold_the_loop
    blocked = await metadata_then_blocked_line(broker, log_events, "the-heavy-one")
    assert blocked["api"] == "Metadata"
    assert blocked["client_id"] == "the-heavy-one"
    assert blocked["blocked_connection_id"]
    assert blocked["duration_ms"] >= 300
    assert "handler_pool.py" in blocked["where"]
    assert blocked["gc_ms"] < 50  # it slept: young collections at most


async def test_a_blocked_run_says_how_long_the_garbage_collector_held_it(
        start_broker: Any, log_events: Any) -> None:
    """A cyclic collection is one native call holding the GIL: the watchdog cannot look during
    it, so the line gives the collector's share of the run (``gc_ms``)."""
    broker = await start_broker({"event.loop.blocked.threshold.ms": "50"})
    pool = broker.app._pools[0]
    cycles: list[Any] = []

    async def collect_garbage(ctx: Any, handle: Any) -> Any:
        if ctx.request.api == "Metadata":
            # Objects in cycles, which only the collector frees, and a full collection.
            for _ in range(300_000):
                node: list[Any] = []
                node.append(node)
                cycles.append(node)
            cycles.clear()
            started = time.perf_counter()
            gc.collect()
            collected_ms.append((time.perf_counter() - started) * 1000)
        return await handle(ctx, ctx.request.body)

    collected_ms: list[float] = []
    pool.interceptor = collect_garbage
    blocked = await metadata_then_blocked_line(broker, log_events)
    assert blocked["api"] == "Metadata"
    assert collected_ms and blocked["gc_ms"] >= collected_ms[0] * 0.9
    assert blocked["gc_ms"] <= blocked["duration_ms"]
