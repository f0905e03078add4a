"""Shutdown answers parked long polls at once (Kafka force-completes delayed fetches).

Without it a graceful shutdown waits out every parked Fetch's max_wait before the in-flight
drain can finish. Time is trio's autojump clock: a long poll that were still waiting would show
as 5 s of virtual time.
"""

from __future__ import annotations

import datetime
import sys
from typing import Any

import trio
import trio.testing
from kio.schema.errors import ErrorCode

from tests.kafka_wire import WireClient
from trio_broker.protocol.codec import request_schema
from trio_broker.protocol.records import build_batch
from trio_broker.server.purgatory import Purgatory

FETCH, JOIN_GROUP = 1, 11


def long_poll(max_wait_ms: int) -> Any:
    m = sys.modules[request_schema(FETCH, 12).__module__]
    return m.FetchRequest(
        max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1, session_id=0,
        session_epoch=-1, rack_id="", forgotten_topics_data=(),
        topics=(m.FetchTopic(topic="t", partitions=(
            m.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),)),))


async def wait_until(condition: Any) -> None:
    while not condition():
        await trio.sleep(0.001)


async def test_shutdown_answers_a_parked_fetch_at_once(
        start_broker: Any, log_events: Any, autojump_clock: trio.testing.MockClock) -> None:
    running = await start_broker({"shutdown.graceful.timeout.ms": "10000"})
    running.broker.log_manager.create_topic("t", 1)
    purgatory = running.broker.purgatory
    client = await WireClient.connect(running.port)
    with trio.fail_after(30):
        await client.send(FETCH, 12, long_poll(5000))
        await wait_until(lambda: purgatory.waiting == 1)
    parked_at = trio.current_time()
    # No deadline of the test's own around the shutdown: the autojump clock would skip to it
    # while storage closes in a worker thread. pytest-timeout bounds the test.
    async with trio.open_nursery() as nursery:
        nursery.start_soon(running.shutdown)
        with trio.fail_after(30):
            _, answer = await client.receive()
        answered_after = trio.current_time() - parked_at
    stopped_after = trio.current_time() - parked_at
    assert answered_after < 0.5 and stopped_after < 0.5, (answered_after, stopped_after)
    assert answer.error_code == ErrorCode.none
    [partition] = answer.responses[0].partitions
    assert partition.error_code == ErrorCode.none and not partition.records
    assert partition.high_watermark == 0
    steps = [e["step"] for e in log_events.events("shutdown_step")]
    assert "delayed_operations_completed" in steps
    assert "in_flight_requests_finished" in steps
    assert await client.closed_by_peer()


async def test_a_parked_fetch_still_waits_for_data_until_shutdown(
        start_broker: Any, autojump_clock: trio.testing.MockClock) -> None:
    """Before shutdown the long poll is the usual one: an append answers it, with the data."""
    running = await start_broker()
    lm = running.broker.log_manager
    lm.create_topic("t", 1)
    client = await WireClient.connect(running.port)
    with trio.fail_after(30):
        await client.send(FETCH, 12, long_poll(5000))
        await wait_until(lambda: running.broker.purgatory.waiting == 1)
        await trio.sleep(1)  # still parked: nothing to read yet
        assert running.broker.purgatory.waiting == 1
        await lm.append("t", 0, build_batch([(b"k", b"v", [], 1_700_000_000_000)]))
        _, answer = await client.receive()
    [partition] = answer.responses[0].partitions
    assert partition.records and partition.high_watermark == 1
    assert running.broker.purgatory.waiting == 0


async def test_a_delay_opened_after_complete_all_ends_at_once(
        autojump_clock: trio.testing.MockClock) -> None:
    """A request read before shutdown but parked after it does not hold the drain either."""
    purgatory = Purgatory()
    purgatory.complete_all()
    start = trio.current_time()
    with purgatory.delay(5) as scope:
        await trio.sleep(10)
    assert scope.cancelled_caught and trio.current_time() == start
    assert purgatory.waiting == 0


def join_group(member_id: str) -> Any:
    m = sys.modules[request_schema(JOIN_GROUP, 9).__module__]
    return m.JoinGroupRequest(
        group_id="g", session_timeout=datetime.timedelta(seconds=10),
        rebalance_timeout=datetime.timedelta(seconds=30), member_id=member_id,
        group_instance_id=None, protocol_type="consumer",
        protocols=(m.JoinGroupRequestProtocol(name="range", metadata=b""),), reason=None)


async def test_shutdown_answers_a_parked_join_with_not_coordinator(
        start_broker: Any, log_events: Any, autojump_clock: trio.testing.MockClock) -> None:
    """The coordinator resigns when shutdown starts (Kafka's onResignation on controlled
    shutdown): a JoinGroup waiting out the initial rebalance delay learns NOT_COORDINATOR now
    and goes looking for another coordinator, instead of holding the drain for 5 s."""
    running = await start_broker({"shutdown.graceful.timeout.ms": "10000",
                                  "group.initial.rebalance.delay.ms": "5000"})
    client = await WireClient.connect(running.port)
    with trio.fail_after(30):
        first = await client.request(JOIN_GROUP, 9, join_group(""))
        assert first.error_code == ErrorCode.member_id_required
        await client.send(JOIN_GROUP, 9, join_group(first.member_id))
        group = running.broker.group_coordinator.groups["g"]

        def parked() -> bool:
            member = group.members.get(first.member_id)
            return member is not None and member.join_waiter is not None
        await wait_until(parked)
    parked_at = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(running.shutdown)
        with trio.fail_after(30):
            _, answer = await client.receive()
        answered_after = trio.current_time() - parked_at
    assert answered_after < 0.5, answered_after
    assert answer.error_code == ErrorCode.not_coordinator
    assert "in_flight_requests_finished" in [e["step"] for e in log_events.events("shutdown_step")]
