"""The lines a mute writes, which operators and the analytics' "mutes by reason" read: a
throttle mutes a connection with one request in flight as it mutes a pipelining one, each mute
is logged with its end (``connection_unmuted`` and how long it lasted), ``throttle_ended``
names the client and the user, and the normal wait of one request in flight is never logged.
(The connection mutation run left these open: docs/development.md, ``_wait_until_readable``,
``_muted``, ``_unmuted``.) Kafka mutes the channel for a throttle (KIP-219:
``SocketServer.Processor``, ``KafkaChannel`` THROTTLE_STARTED/THROTTLE_ENDED)."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from tests.kafka_wire import API_VERSIONS_V3, METADATA_ALL_V12, WireClient
from tests.network.conftest import THROTTLE_MS, BlockedHandler

API_VERSIONS, METADATA = 18, 3


@pytest.mark.parametrize("inflight", ["1", "2"])
async def test_a_throttle_mutes_and_unmutes_with_one_line_each_naming_client_and_user(
        start_broker: Any, throttling_metadata: None, log_events: Any, inflight: str,
        autojump_clock: trio.testing.MockClock) -> None:
    running = await start_broker({"connection.max.inflight.requests": inflight})
    client = await WireClient.connect(running.port, client_id="throttled-app")
    await client.request(METADATA, 12, METADATA_ALL_V12)  # answered at once, then throttled
    answered = trio.current_time()
    await client.request(API_VERSIONS, 3, API_VERSIONS_V3)  # read when the throttle ends
    assert trio.current_time() - answered == pytest.approx(THROTTLE_MS / 1000, abs=1e-6)
    [muted] = log_events.events("connection_muted")
    assert muted["reason"] == "throttle"
    assert muted["inflight"] == 0
    [unmuted] = log_events.events("connection_unmuted")
    assert unmuted["reason"] == "ready"
    assert unmuted["muted_ms"] == pytest.approx(THROTTLE_MS, abs=0.01)
    [ended] = log_events.events("throttle_ended")
    assert ended["client_id"] == "throttled-app"
    assert ended["user"] == "ANONYMOUS"
    await client.aclose()


async def test_waiting_for_an_in_flight_slot_is_logged_when_pipelining_and_ends_no_throttle(
        start_broker: Any, blocked_metadata: BlockedHandler, log_events: Any,
        autojump_clock: trio.testing.MockClock) -> None:
    """Two in flight (the smallest pipelining limit): the third request waits, logged as an
    in-flight mute; no throttle was involved, so no ``throttle_ended``."""
    running = await start_broker({"connection.max.inflight.requests": "2",
                                  "num.io.threads": "4"})
    client = await WireClient.connect(running.port)
    await trio.sleep(10)  # the clock far from zero: a sum of times would show
    await client.send_raw(b"".join(client.encode(METADATA, 12, METADATA_ALL_V12)
                                   for _ in range(3)))
    await trio.testing.wait_all_tasks_blocked()
    assert blocked_metadata.entered == 2
    await trio.sleep(1.2345678)
    blocked_metadata.release.set()
    assert [(await client.receive())[0] for _ in range(3)] == [1, 2, 3]
    [muted] = log_events.events("connection_muted")
    assert (muted["reason"], muted["inflight"]) == ("inflight", 2)
    [unmuted] = log_events.events("connection_unmuted")
    # Milliseconds with three decimals (microseconds), as every *_ms field of the log.
    assert unmuted["muted_ms"] == 1234.568
    assert not log_events.events("throttle_ended")
    await client.aclose()


async def test_one_request_in_flight_logs_no_mute_without_a_throttle(
        start_broker: Any, log_events: Any, autojump_clock: trio.testing.MockClock) -> None:
    """Kafka's one request in flight is the normal rule, not a mute worth a line: many
    requests sent at once are answered without a ``connection_muted`` or ``throttle_ended``."""
    running = await start_broker()
    client = await WireClient.connect(running.port)
    await client.send_raw(b"".join(client.encode(API_VERSIONS, 3, API_VERSIONS_V3)
                                   for _ in range(20)))
    assert [(await client.receive())[0] for _ in range(20)] == list(range(1, 21))
    assert not log_events.events("connection_muted")
    assert not log_events.events("connection_unmuted")
    assert not log_events.events("throttle_ended")
    await client.aclose()
