"""A Produce refused by a partition's producer state (idempotence and epoch checks) explains
itself in its canonical ``request`` log line: ``sequence_errors`` names the partition, the
producer id and epoch, the expected and the received first sequence (issue 36), as Kafka's
broker logs such a refusal. A real in-process broker, over the wire."""

from __future__ import annotations

from typing import Any

import trio
from kio.schema.errors import ErrorCode

from tests.kafka_wire import WireClient
from tests.server.test_produce_fetch import batch, produce_body

PRODUCE = 0


async def setup(start_broker: Any, partitions: int = 4) -> tuple[Any, int]:
    running = await start_broker()
    running.broker.log_manager.create_topic("orders", partitions)
    return running, running.broker.log_manager.allocate_producer_id()


async def produce_lines(log_events: Any, client_id: str, count: int) -> list[dict[str, Any]]:
    """The Produce request lines of ``client_id``, once there are ``count`` of them."""
    with trio.fail_after(5):
        while len(lines := log_events.events("request", api="Produce",
                                             client_id=client_id)) < count:
            await trio.sleep(0.01)
    return lines  # type: ignore[no-any-return]


def codes(answer: Any) -> dict[tuple[str, int], ErrorCode]:
    return {(t.name, p.index): p.error_code for t in answer.responses
            for p in t.partition_responses}


async def test_a_sequence_gap_and_a_stale_epoch_are_named_in_the_request_line(
        start_broker: Any, log_events: Any) -> None:
    running, pid = await setup(start_broker)
    data = {
        # accepted: sequences 0-1 at epoch 0
        1: batch(b"a", b"b", producer_id=pid, producer_epoch=0, base_sequence=0),
        # a gap: 2 expected, 5 sent
        2: batch(b"c", producer_id=pid, producer_epoch=0, base_sequence=5),
    }
    async with await WireClient.connect(running.port, client_id="seq") as client:
        first = await client.request(PRODUCE, 9, produce_body(9, {("orders", 3): data[1]}))
        gap = await client.request(PRODUCE, 9, produce_body(9, {("orders", 3): data[2]}))
        # the producer moves to epoch 1 on another partition, then a stale epoch-0 batch
        bumped = await client.request(PRODUCE, 9, produce_body(9, {("orders", 1): batch(
            b"d", producer_id=pid, producer_epoch=1, base_sequence=0)}))
        stale = await client.request(PRODUCE, 9, produce_body(9, {("orders", 1): batch(
            b"e", producer_id=pid, producer_epoch=0, base_sequence=3)}))
        # a new epoch must start at sequence 0
        new_epoch = await client.request(PRODUCE, 9, produce_body(9, {("orders", 1): batch(
            b"f", producer_id=pid, producer_epoch=2, base_sequence=7)}))
    assert list(codes(first).values()) == list(codes(bumped).values()) == [ErrorCode.none]
    assert codes(gap) == {("orders", 3): ErrorCode.out_of_order_sequence_number}
    assert codes(stale) == {("orders", 1): ErrorCode.invalid_producer_epoch}
    assert codes(new_epoch) == {("orders", 1): ErrorCode.out_of_order_sequence_number}
    # the client is told the same, as Kafka words it
    message = gap.responses[0].partition_responses[0].error_message
    assert message == (f"Out of order sequence number for producer {pid} at offset 2 in "
                       "partition orders-3: 5 (incoming seq. number), 1 (current end "
                       "sequence number)")

    lines = await produce_lines(log_events, "seq", 5)
    assert [line["error"] for line in lines] == [
        "NONE", "OUT_OF_ORDER_SEQUENCE_NUMBER", "NONE", "INVALID_PRODUCER_EPOCH",
        "OUT_OF_ORDER_SEQUENCE_NUMBER"]
    assert lines[1]["sequence_errors"] == (
        f"orders-3 OUT_OF_ORDER_SEQUENCE_NUMBER pid={pid} epoch=0 expected_seq=2 got_seq=5")
    assert lines[3]["sequence_errors"] == (
        f"orders-1 INVALID_PRODUCER_EPOCH pid={pid} epoch=0 current_epoch=1 got_seq=3")
    assert lines[4]["sequence_errors"] == (
        f"orders-1 OUT_OF_ORDER_SEQUENCE_NUMBER pid={pid} epoch=2 current_epoch=1 "
        "expected_seq=0 got_seq=7")
    # A request nothing refused has no such field: absent, not empty.
    assert "sequence_errors" not in lines[0] and "sequence_errors" not in lines[2]
    # One line per request, never one per partition.
    assert not [e for e in log_events.lines() if "sequence_errors" in e
                and e["event"] != "request"]


async def test_many_refused_partitions_name_the_first_ten_and_count_the_rest(
        start_broker: Any, log_events: Any) -> None:
    running, pid = await setup(start_broker, partitions=14)
    lm = running.broker.log_manager
    for index in range(14):
        await lm.append("orders", index, batch(b"x", producer_id=pid, producer_epoch=0,
                                               base_sequence=0))
    # partition 0 continues its sequence; 1-13 skip one: 13 refusals, in request order
    records = {("orders", 0): batch(b"y", producer_id=pid, producer_epoch=0, base_sequence=1)}
    records |= {("orders", i): batch(b"y", producer_id=pid, producer_epoch=0, base_sequence=2)
                for i in range(1, 14)}
    async with await WireClient.connect(running.port, client_id="many") as client:
        answer = await client.request(PRODUCE, 9, produce_body(9, records))
    assert codes(answer)[("orders", 0)] is ErrorCode.none
    assert {codes(answer)[("orders", i)] for i in range(1, 14)} == {
        ErrorCode.out_of_order_sequence_number}
    (line,) = await produce_lines(log_events, "many", 1)
    entries = line["sequence_errors"].split("; ")
    assert entries == [
        f"orders-{i} OUT_OF_ORDER_SEQUENCE_NUMBER pid={pid} epoch=0 expected_seq=1 got_seq=2"
        for i in range(1, 11)] + ["+3 more"]


async def test_an_acks_zero_refusal_closes_the_connection_and_is_named(
        start_broker: Any, log_events: Any) -> None:
    running, pid = await setup(start_broker)
    await running.broker.log_manager.append("orders", 2, batch(
        b"x", producer_id=pid, producer_epoch=0, base_sequence=0))
    async with await WireClient.connect(running.port, client_id="acks0") as client:
        await client.send(PRODUCE, 9, produce_body(9, {("orders", 2): batch(
            b"y", producer_id=pid, producer_epoch=0, base_sequence=9)}, acks=0))
        with trio.fail_after(5):
            assert await client.closed_by_peer()
    (line,) = await produce_lines(log_events, "acks0", 1)
    assert line["response_action"] == "close"
    assert line["sequence_errors"] == (
        f"orders-2 OUT_OF_ORDER_SEQUENCE_NUMBER pid={pid} epoch=0 expected_seq=1 got_seq=9")
