"""A pipelining connection whose responses carry a throttle takes no further frame (nor
reserves its memory) until the throttle ends, even when the reader was waiting for an in-flight
slot when the throttle began, or a later response extended the throttle while the reader slept
on it (the mutation run left these open: docs/development.md, ``_wait_until_readable`` 12 and
22). Kafka mutes the channel until the throttle ends (KIP-219: ``SocketServer.Processor``,
``KafkaChannel`` THROTTLE_STARTED/THROTTLE_ENDED)."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from tests.kafka_wire import WireClient
from tests.server.test_client_quotas import FETCH, PRODUCE, alter, ms, quota_broker
from tests.server.test_produce_fetch import batch, fetch_body, produce_body


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


async def test_a_throttle_extended_while_the_reader_sleeps_on_it_keeps_the_next_frame_unread(
        start_broker: Any, autojump_clock: trio.testing.MockClock) -> None:
    """The reader sleeps until the throttle of one response ends; a later response (a fetch
    that was waiting in its handler meanwhile) extends the throttle. The next frame stays in
    the socket until the later throttle ends too, as Kafka keeps the channel muted."""
    running = await quota_broker(start_broker, **{"connection.max.inflight.requests": "2",
                                                  "queued.max.request.bytes": "104857600"})
    pool = running.app.socket_server.memory_pool
    await alter(running.port, {"client-id": "p"},
                {"producer_byte_rate": 1000, "consumer_byte_rate": 250})
    client = await WireClient.connect(running.port, client_id="p")
    twenty_kb = produce_body(9, {("t", 0): batch(b"x" * 20_000)})
    started = trio.current_time()
    # A produce (throttled when answered), a fetch waiting at the log end (offset 1) and a
    # third request, which the in-flight limit of 2 leaves in the socket.
    await client.send_raw(
        client.encode(PRODUCE, 9, twenty_kb)
        + client.encode(FETCH, 12, fetch_body(12, {("t", 0): 1}, max_wait_ms=30_000))
        + client.encode(PRODUCE, 9, produce_body(9, {("t", 0): batch(b"y")})))
    [connection] = [c for p in running.app.socket_server.processors for c in p.connections
                    if c.info.connection_id != ""]
    other = await WireClient.connect(running.port, client_id="unthrottled")
    _, produced = await client.receive()
    produce_throttle_ends = started + ms(produced) / 1000
    await trio.sleep(2)  # the reader now sleeps until the produce's throttle ends
    await other.request(PRODUCE, 9, twenty_kb)  # the fetch wakes and answers 20 kB
    _, fetched = await client.receive()
    fetch_throttle_ends = trio.current_time() + ms(fetched) / 1000
    assert trio.current_time() < produce_throttle_ends < fetch_throttle_ends
    await trio.sleep_until((produce_throttle_ends + fetch_throttle_ends) / 2)
    assert connection.requests == 2
    assert pool.used == 0, "a frame was taken (its memory reserved) during the throttle"
    await client.receive()
    assert trio.current_time() >= fetch_throttle_ends
    assert connection.requests == 3
    await client.aclose()
    await other.aclose()
