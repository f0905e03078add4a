"""A pipelining connection whose responses carry a throttle takes no further frame (nor
reserves its memory) until the throttle ends, even when the reader was waiting for an in-flight
slot when the throttle began (the mutation run left this open: docs/development.md)."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from tests.kafka_wire import WireClient
from tests.server.test_client_quotas import PRODUCE, alter, ms, quota_broker
from tests.server.test_produce_fetch import batch, produce_body


async def test_a_reader_waiting_for_a_slot_stays_muted_for_the_throttle(
        start_broker: Any, autojump_clock: trio.testing.MockClock) -> None:
    running = await quota_broker(start_broker, **{"connection.max.inflight.requests": "2",
                                                  "queued.max.request.bytes": "104857600"})
    pool = running.app.socket_server.memory_pool
    await alter(running.port, {"client-id": "p"}, {"producer_byte_rate": 1000})
    client = await WireClient.connect(running.port, client_id="p")
    body = produce_body(9, {("t", 0): batch(b"x" * 20_000)})
    # Three at once: two are read (the in-flight limit), the third waits in the socket.
    await client.send_raw(b"".join(client.encode(PRODUCE, 9, body) for _ in range(3)))
    [connection] = [c for p in running.app.socket_server.processors for c in p.connections
                    if c.info.connection_id != ""]
    _, first = await client.receive()
    _, second = await client.receive()
    throttle_s = max(ms(first), ms(second)) / 1000
    assert throttle_s > 0
    # Kafka mutes the channel for the throttle: the third frame stays in the socket (and
    # its memory unreserved) until the throttle has passed, then it is read and answered.
    await trio.sleep(throttle_s / 2)
    assert connection.requests == 2
    assert pool.used == 0, "a frame was taken (its memory reserved) during the throttle"
    _, third = await client.receive()
    assert connection.requests == 3
    await client.aclose()
