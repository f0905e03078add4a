"""Idle expiry on ONE processor (issue 37, rule 2): Kafka's IdleExpiryManager keeps every
connection of a processor in one access-ordered map, and any read or send (a few bytes of a
frame included) moves a connection to its back.

``num.network.threads=1`` puts every connection on the same processor, hence in the same
order: with the default three processors (the tests in test_socket_server.py) two connections
never share one, and the order between them is never exercised.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from tests.kafka_wire import API_VERSIONS_V3, WireClient, readable

API_VERSIONS = 18
IDLE_MS = "1000"
IDLE = 1.0


def one_processor(**extra: str) -> dict[str, str]:
    return {"connections.max.idle.ms": IDLE_MS, "num.network.threads": "1", **extra}


def processors(log_events: Any) -> set[str]:
    """The processor ids of the accepted connections (``...-processorId-index``)."""
    return {e["connection_id"].split("-")[-2] for e in log_events.events("connection_accepted")}


async def test_an_idle_connection_behind_an_older_active_one_expires_on_time(
        start_broker: Any, log_events: Any, autojump_clock: trio.testing.MockClock) -> None:
    """A (opened first) stays active, each request just before its deadline; B (opened second)
    goes idle. B must expire exactly connections.max.idle.ms after its last activity, although
    A is older in the processor's order: A's activity moved A behind B. A expires later, at its
    own deadline."""
    running = await start_broker(one_processor())
    active = await WireClient.connect(running.port)  # A: first in the processor's order
    await active.request(API_VERSIONS, 3, API_VERSIONS_V3)
    active_last = trio.current_time()
    await trio.sleep(0.1)
    idle = await WireClient.connect(running.port)  # B: behind A
    await idle.request(API_VERSIONS, 3, API_VERSIONS_V3)
    idle_last = trio.current_time()
    assert processors(log_events) == {"0"}  # one processor: one idle order for both

    async def keep_active() -> None:
        nonlocal active_last
        for _ in range(3):  # at 0.9, 1.8 and 2.7 s: each time just before A's deadline
            await trio.sleep(0.9 * IDLE - (trio.current_time() - active_last))
            await active.request(API_VERSIONS, 3, API_VERSIONS_V3)
            active_last = trio.current_time()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(keep_active)
        assert await idle.closed_by_peer()
        idle_expired = trio.current_time()
    assert idle_expired - idle_last == pytest.approx(IDLE, abs=1e-6)
    [expired] = log_events.events("connection_expired")
    assert expired["idle_ms"] == float(IDLE_MS)
    [closed] = log_events.events("connection_closed")
    assert (closed["reason"], closed["detail"]) == ("idle", "")
    # ... and A is still open at 2.7 s, then expires at its own deadline
    assert not readable(active)
    assert await active.closed_by_peer()
    assert trio.current_time() - active_last == pytest.approx(IDLE, abs=1e-6)
    await log_events.wait_for("connection_closed", reason="idle")
    first, second = log_events.events("connection_expired")
    assert first == expired
    assert first["connection_id"] != second["connection_id"]
    assert len(log_events.events("connection_closed", reason="idle")) == 2


async def test_a_slow_upload_is_not_expired_mid_request(
        start_broker: Any, log_events: Any, autojump_clock: trio.testing.MockClock) -> None:
    """A client sending a frame a few bytes at a time, each part well within
    connections.max.idle.ms of the previous one but the whole frame taking several times that
    long, is active all along: reading part of a frame counts. It gets its answer."""
    running = await start_broker(one_processor())
    client = await WireClient.connect(running.port)
    frame = client.encode(API_VERSIONS, 3, API_VERSIONS_V3)
    started = trio.current_time()
    try:
        for offset in range(0, len(frame), 4):
            if offset:
                await trio.sleep(0.4 * IDLE)
            await client.send_raw(frame[offset:offset + 4])
    except trio.BrokenResourceError:
        pytest.fail(f"closed mid-request, {trio.current_time() - started:.1f} s in, after "
                    f"{offset} of {len(frame)} bytes: "
                    f"{log_events.events('connection_closed')}")
    assert trio.current_time() - started > 3 * IDLE  # the frame took 3 idle limits and more
    correlation, response = await client.receive()
    assert correlation == 1 and response.error_code == 0
    assert not log_events.events("connection_expired")
    assert not log_events.events("connection_closed")
    assert await client.request(API_VERSIONS, 3, API_VERSIONS_V3)  # and it still serves
    await client.aclose()
