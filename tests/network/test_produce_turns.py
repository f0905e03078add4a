"""A pipelining connection's Produce requests append in the order they were sent, even when
they are handled by different handler tasks (``network/turns.py``)."""

from __future__ import annotations

import datetime
import time
from typing import Any

import attrs
import pytest
import trio

from tests.kafka_wire import METADATA_ALL_V12
from tests.network.conftest import METADATA, BlockedHandler
from trio_broker.network.turns import Turns
from trio_broker.protocol import records as rb
from trio_broker.server import registry
from trio_broker.testing.client import VERSIONS, TrioKafkaClient, request_body

PRODUCE = 0


def produce_body(client: TrioKafkaClient, value: bytes) -> Any:
    batch = rb.build_batch([(None, value, [], int(time.time() * 1000))])
    data = client._nested(PRODUCE, "PartitionProduceData", index=0, records=batch)
    return request_body(PRODUCE, VERSIONS[PRODUCE], transactional_id=None, acks=1,
                        timeout=datetime.timedelta(seconds=30), topic_data=(client._nested(
                            PRODUCE, "TopicProduceData", name="t", partition_data=(data,)),))


async def test_pipelined_produce_requests_append_in_the_order_sent(
        start_broker: Any, blocked_metadata: BlockedHandler, monkeypatch: pytest.MonkeyPatch,
        autojump_clock: trio.testing.MockClock) -> None:
    """Both handlers busy, so the connection's three Produce requests queue and go to
    different handler tasks; the first is slow to append (a slow disk). The others wait for
    it: offsets follow the order the client sent the requests in."""
    original = registry.handlers()[PRODUCE]

    async def slow_first(ctx: Any, body: Any) -> Any:
        if b"first" in body.topic_data[0].partition_data[0].records:
            await trio.sleep(1)
        return await original.handle(ctx, body)

    monkeypatch.setitem(registry._HANDLERS, PRODUCE, attrs.evolve(original, handle=slow_first))
    running = await start_broker({"connection.max.inflight.requests": "8",
                                  "num.io.threads": "2"})
    async with await TrioKafkaClient.connect(running.port) as admin:
        await admin.create_topic("t")
    blocker = await TrioKafkaClient.connect(running.port)
    await blocker.send_raw(b"".join(blocker.encode(METADATA, 12, METADATA_ALL_V12)
                                    for _ in range(2)))
    with trio.fail_after(10):
        while blocked_metadata.entered < 2:
            await trio.sleep(0.01)
    producer = await TrioKafkaClient.connect(running.port)
    await producer.send_raw(b"".join(
        producer.encode(PRODUCE, VERSIONS[PRODUCE], produce_body(producer, value))
        for value in (b"first", b"second", b"third")))
    await trio.sleep(0.5)  # read and queued behind the blocked Metadata requests
    blocked_metadata.release.set()
    answers = [await producer.receive() for _ in range(3)]
    offsets = [body.responses[0].partition_responses[0].base_offset for _, body in answers]
    assert offsets == [0, 1, 2]
    async with await TrioKafkaClient.connect(running.port) as reader:
        assert [r.value for r in await reader.fetch("t", 0, 0)] == [b"first", b"second", b"third"]
    await blocker.aclose()
    await producer.aclose()


def test_a_turn_finished_early_is_skipped_when_its_turn_comes() -> None:
    """A ticket dropped before its turn (its request never reached a handler) does not hold
    the ones after it."""
    turns = Turns()
    first, second, third = turns.issue(), turns.issue(), turns.issue()
    assert turns.is_turn(first) and not turns.is_turn(second)
    turns.finish(second)
    assert not turns.is_turn(third)
    turns.finish(first)
    assert turns.is_turn(third)
    turns.finish(first)  # finishing twice changes nothing
    assert turns.is_turn(third)


async def test_waiting_for_a_turn_wakes_in_ticket_order(
        autojump_clock: trio.testing.MockClock) -> None:
    turns = Turns()
    tickets = [turns.issue() for _ in range(4)]
    order: list[int] = []

    async def take(ticket: int) -> None:
        await turns.wait(ticket)
        order.append(ticket)
        await trio.sleep(0.1)
        turns.finish(ticket)

    async with trio.open_nursery() as nursery:
        for ticket in reversed(tickets):
            nursery.start_soon(take, ticket)
    assert order == tickets
