"""In-process tests of the data-path handlers (Produce, Fetch, ListOffsets, InitProducerId,
OffsetForLeaderEpoch) against a real LogManager, through the codec both ways."""

from __future__ import annotations

import dataclasses
import datetime
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from kio.schema.errors import ErrorCode

from tests.server.handler_harness import answer_when_woken, call, open_broker, send, wire
from trio_broker.config import BrokerConfig, load_config
from trio_broker.protocol import records as rb
from trio_broker.protocol.codec import (
    request_schema,
)
from trio_broker.server.broker import Broker
from trio_broker.server.context import (
    NO_RESPONSE,
    CloseConnection,
    EncodedBody,
    Parked,
)
from trio_broker.storage.log import now_ms

PRODUCE, FETCH, LIST_OFFSETS, INIT_PID, OFFSET_FOR_EPOCH = 0, 1, 2, 22, 23


def mod(api_key: int, version: int) -> Any:
    return sys.modules[request_schema(api_key, version).__module__]


@pytest.fixture
def config(tmp_path: Path) -> BrokerConfig:
    return load_config({"log.dirs": str(tmp_path)})


@pytest.fixture
def broker(config: BrokerConfig) -> Iterator[Broker]:
    with open_broker(config, 2) as broker:
        yield broker


def produce_body(version: int, records: dict[tuple[str, int], bytes | None], acks: int = -1
                 ) -> Any:
    m = mod(PRODUCE, version)
    topics: dict[str, list[Any]] = {}
    for (topic, partition), data in records.items():
        topics.setdefault(topic, []).append(m.PartitionProduceData(index=partition, records=data))
    return m.ProduceRequest(
        transactional_id=None, acks=acks, timeout=datetime.timedelta(seconds=5),
        topic_data=tuple(m.TopicProduceData(name=n, partition_data=tuple(p))
                         for n, p in topics.items()))


def fetch_body(version: int, wants: dict[tuple[str, int], int], *, min_bytes: int = 1,
               max_wait_ms: int = 0, max_bytes: int = 1 << 20, partition_max: int = 1 << 20,
               session_id: int = 0, session_epoch: int = -1) -> Any:
    m = mod(FETCH, version)
    topics: dict[str, list[Any]] = {}
    for (topic, partition), offset in wants.items():
        topics.setdefault(topic, []).append(
            m.FetchPartition(partition=partition, fetch_offset=offset,
                             partition_max_bytes=partition_max))
    fields: dict[str, Any] = dict(
        max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=min_bytes,
        topics=tuple(m.FetchTopic(topic=n, partitions=tuple(p)) for n, p in topics.items()),
        forgotten_topics_data=(), max_bytes=max_bytes, isolation_level=0)
    if version >= 7:
        fields.update(session_id=session_id, session_epoch=session_epoch)
    names = {f for f in m.FetchRequest.__dataclass_fields__}
    return m.FetchRequest(**{k: v for k, v in fields.items() if k in names})


def batch(*values: bytes, **kw: Any) -> bytes:
    return rb.build_batch([(None, v, [], now_ms()) for v in values], **kw)


def values(data: bytes) -> list[bytes | None]:
    return [r.value for p, s in rb.iter_batches(data)
            for r in rb.decode_records(data[p:p + s])]


@pytest.mark.parametrize("version", [3, 5, 7, 9])
async def test_produce_then_fetch(broker: Broker, version: int) -> None:
    answer = await call(broker, PRODUCE, version, produce_body(
        version, {("t", 0): batch(b"a", b"b"), ("t", 1): batch(b"c"), ("nope", 0): batch(b"x")}))
    by_key = {(t.name, p.index): p for t in answer.responses for p in t.partition_responses}
    assert by_key[("t", 0)].error_code is ErrorCode.none and by_key[("t", 0)].base_offset == 0
    assert by_key[("t", 1)].base_offset == 0
    assert by_key[("nope", 0)].error_code is ErrorCode.unknown_topic_or_partition
    again = await call(broker, PRODUCE, version, produce_body(version, {("t", 0): batch(b"d")}))
    assert again.responses[0].partition_responses[0].base_offset == 2
    for fetch_version in (4, 11, 12):
        got = await call(broker, FETCH, fetch_version, fetch_body(fetch_version, {("t", 0): 0}))
        if fetch_version >= 7:  # sessions (KIP-227) are declined: session id 0, no error
            assert (got.error_code, got.session_id) == (ErrorCode.none, 0)
        part = got.responses[0].partitions[0]
        assert part.error_code is ErrorCode.none and part.high_watermark == 3
        # v4 brought the last stable offset and aborted transactions (none when uncommitted)
        assert part.last_stable_offset == 3 and part.aborted_transactions is None
        assert values(part.records) == [b"a", b"b", b"d"]


async def test_produce_errors(broker: Broker) -> None:
    bad = bytearray(batch(b"x"))
    bad[-1] ^= 0xFF
    two = batch(b"1") + batch(b"2")
    answer = await call(broker, PRODUCE, 9, produce_body(
        9, {("t", 0): bytes(bad), ("t", 1): two}))
    codes = [p.error_code for p in answer.responses[0].partition_responses]
    assert codes == [ErrorCode.corrupt_message, ErrorCode.invalid_record]
    answer = await call(broker, PRODUCE, 9, produce_body(9, {("t", 0): batch(b"x")}, acks=2))
    assert answer.responses[0].partition_responses[0].error_code is \
        ErrorCode.invalid_required_acks


async def test_acks_zero(broker: Broker) -> None:
    _, result = await send(broker, PRODUCE, 9, produce_body(9, {("t", 0): batch(b"x")}, acks=0))
    assert result is NO_RESPONSE
    assert broker.log_manager.get_partition("t", 0).log_end_offset == 1
    with pytest.raises(CloseConnection):
        await send(broker, PRODUCE, 9, produce_body(9, {("gone", 0): batch(b"x")}, acks=0))


async def test_fetch_errors_and_sessions(broker: Broker) -> None:
    got = await call(broker, FETCH, 12, fetch_body(12, {("t", 0): 5, ("x", 0): 0}))
    codes = [p.error_code for t in got.responses for p in t.partitions]
    assert codes == [ErrorCode.offset_out_of_range, ErrorCode.unknown_topic_or_partition]
    # an incremental fetch (epoch > 0) of a session that does not exist
    got = await call(broker, FETCH, 12, fetch_body(12, {("t", 0): 0}, session_id=77,
                                                   session_epoch=1))
    assert got.error_code is ErrorCode.fetch_session_id_not_found and got.responses == ()


async def test_fetch_max_bytes_returns_whole_batches(broker: Broker) -> None:
    for i in range(5):
        await broker.log_manager.append("t", 0, batch(b"%d" % i * 100))
    size = len(batch(b"0" * 100))
    got = await call(broker, FETCH, 12, fetch_body(12, {("t", 0): 0, ("t", 1): 0},
                                                   max_bytes=size * 2 + 10))
    assert values(got.responses[0].partitions[0].records) == [b"0" * 100, b"1" * 100]
    # partition_max_bytes below one batch: still one whole batch for the first partition
    got = await call(broker, FETCH, 12, fetch_body(12, {("t", 0): 3}, partition_max=10))
    assert values(got.responses[0].partitions[0].records) == [b"3" * 100]


async def test_fetch_limits_of_zero_or_below_still_answer_one_whole_batch(broker: Broker
                                                                          ) -> None:
    """A hostile client's max_bytes / partition_max_bytes of 0 or below get the first batch
    whole (KIP-74), as Kafka; min_bytes below 1 answers at once (no park)."""
    for i in range(3):
        await broker.log_manager.append("t", 0, batch(b"%d" % i * 50))
    for limit in (0, -1, -(2**31)):
        for fields in ({"max_bytes": limit}, {"partition_max": limit}):
            got = await call(broker, FETCH, 12, fetch_body(12, {("t", 0): 0}, **fields))
            part = got.responses[0].partitions[0]
            assert (part.error_code, values(part.records)) == (ErrorCode.none, [b"0" * 50])
    _, result = await send(broker, FETCH, 12, fetch_body(12, {("t", 0): 3}, min_bytes=-1,
                                                         max_wait_ms=2**31 - 1))
    assert not isinstance(result, Parked)


async def test_fetch_max_bytes_caps_what_a_request_asks_for(tmp_path: Path) -> None:
    """Kafka's fetch.max.bytes: a request asking for more (here 2 GiB) gets at most that many
    bytes, across partitions and within one; the first batch is still whole. A client asking
    for 2 GiB used to make the broker read a whole segment into one response (150 MB each
    for a few non-reading clients: 887 MB of RSS)."""
    config = load_config({"log.dirs": str(tmp_path), "fetch.max.bytes": "1024"})
    with open_broker(config, 2) as broker:
        for i in range(6):
            await broker.log_manager.append("t", i % 2, batch(b"%d" % i * 300))
        got = await call(broker, FETCH, 12, fetch_body(12, {("t", 0): 0, ("t", 1): 0},
                                                       max_bytes=2**31 - 1,
                                                       partition_max=2**31 - 1))
        assert [values(p.records) for p in got.responses[0].partitions] == [
            [b"0" * 300, b"2" * 300], []]
        got = await call(broker, FETCH, 12, fetch_body(12, {("t", 1): 0},
                                                       max_bytes=2**31 - 1, partition_max=10))
        assert values(got.responses[0].partitions[0].records) == [b"1" * 300]
        # A batch larger than fetch.max.bytes is sent whole all the same (KIP-74).
        await broker.log_manager.append("t", 1, batch(b"b" * 3000))
        got = await call(broker, FETCH, 12, fetch_body(12, {("t", 1): 3}, max_bytes=2**31 - 1))
        assert values(got.responses[0].partitions[0].records) == [b"b" * 3000]


@pytest.mark.parametrize("version", [4, 12])
async def test_fetch_naming_a_partition_twice_answers_it_once(broker: Broker, version: int
                                                              ) -> None:
    """Kafka keys a Fetch's partitions in a map: a partition named again (here in the same
    topic and in a second entry of the topic) is read and answered once, where it was first
    named, with the last mention's offset; it is not read (and sent) once per mention."""
    for i in range(3):
        await broker.log_manager.append("t", 0, batch(b"%d" % i))
    m = mod(FETCH, version)
    body = fetch_body(version, {("t", 0): 0, ("t", 1): 0})
    first, other = body.topics[0].partitions
    again = m.FetchPartition(partition=0, fetch_offset=2, partition_max_bytes=1 << 20)
    body = dataclasses.replace(body, topics=(
        m.FetchTopic(topic="t", partitions=(first, other, first)),
        m.FetchTopic(topic="t", partitions=(again,))))
    got = await call(broker, FETCH, version, body)
    answered = [(t.topic, p.partition_index, values(p.records))
                for t in got.responses for p in t.partitions]
    assert answered == [("t", 0, [b"2"]), ("t", 1, [])]


@pytest.mark.parametrize("version", [3, 9])
async def test_produce_naming_a_partition_twice_appends_the_last_mention_once(
        broker: Broker, version: int) -> None:
    """Kafka keys a Produce's partitions in a map: a partition named twice (in one topic entry
    or in a second entry of the topic) is appended once, with the last mention's records, and
    answered once, here at its first place; the other partitions are unaffected."""
    m = mod(PRODUCE, version)
    body = produce_body(version, {("t", 0): batch(b"first"), ("t", 1): batch(b"other")})
    first, other = body.topic_data[0].partition_data
    middle = m.PartitionProduceData(index=0, records=batch(b"middle"))
    last = m.PartitionProduceData(index=0, records=batch(b"last"))
    body = dataclasses.replace(body, topic_data=(
        m.TopicProduceData(name="t", partition_data=(first, other, middle)),
        m.TopicProduceData(name="t", partition_data=(last,))))
    answer = await call(broker, PRODUCE, version, body)
    answered = [(t.name, p.index, p.error_code, p.base_offset)
                for t in answer.responses for p in t.partition_responses]
    assert answered == [("t", 0, ErrorCode.none, 0), ("t", 1, ErrorCode.none, 0)]
    for partition, expected in ((0, [b"last"]), (1, [b"other"])):
        got = await call(broker, FETCH, 12, fetch_body(12, {("t", partition): 0}))
        assert values(got.responses[0].partitions[0].records) == expected


@pytest.mark.parametrize("version", [4, 12, 15])
async def test_fetch_from_a_replica_id_is_not_served_as_a_consumer(broker: Broker,
                                                                   version: int) -> None:
    """A fetch naming a replica id (a follower's) reads nothing: this broker is the only
    replica of every partition, so Kafka answers NOT_LEADER_OR_FOLLOWER per partition (unknown
    partitions stay unknown); -1 (a consumer) and -2 (Kafka's debugging consumer) read as
    usual."""
    await broker.log_manager.append("t", 0, batch(b"x"))
    m = mod(FETCH, version)
    body = fetch_body(12 if version >= 13 else version, {("t", 0): 0, ("nope", 0): 0})
    unknown = ErrorCode.unknown_topic_or_partition
    if version >= 13:  # topics by id (KIP-516): "nope" has none
        unknown = ErrorCode.unknown_topic_id
        ids = {"t": broker.log_manager.topics["t"].topic_id, "nope": uuid.uuid4()}
        body = m.FetchRequest(
            max_wait=body.max_wait, min_bytes=1, max_bytes=body.max_bytes, isolation_level=0,
            session_id=0, session_epoch=-1, forgotten_topics_data=(), rack_id="",
            topics=tuple(m.FetchTopic(topic_id=ids[t.topic], partitions=tuple(
                m.FetchPartition(partition=p.partition, fetch_offset=0,
                                 partition_max_bytes=1 << 20) for p in t.partitions))
                for t in body.topics))
    for replica in (0, 1, 7, -1, -2):
        if version >= 15:
            asked = dataclasses.replace(body, replica_state=m.ReplicaState(
                replica_id=replica, replica_epoch=-1))
        else:
            asked = dataclasses.replace(body, replica_id=replica)
        got = await call(broker, FETCH, version, asked)
        answered = [(p.error_code, values(p.records))
                    for t in got.responses for p in t.partitions]
        if replica < 0:
            assert answered == [(ErrorCode.none, [b"x"]), (unknown, [])]
        else:
            assert answered == [(ErrorCode.not_leader_or_follower, []), (unknown, [])]


async def test_fetch_long_poll_is_parked_and_woken_by_append(
        broker: Broker, autojump_clock: trio.testing.MockClock) -> None:
    request, result = await send(broker, FETCH, 12, fetch_body(
        12, {("t", 1): 0}, max_wait_ms=5000, min_bytes=1))
    assert isinstance(result, Parked)
    answer = await answer_when_woken(
        result, lambda: broker.log_manager.append("t", 1, batch(b"wake")))
    decoded = wire(request, FETCH, 12, answer)
    assert values(decoded.responses[0].partitions[0].records) == [b"wake"]
    assert trio.current_time() < 2


async def test_fetch_long_poll_times_out_empty(
        broker: Broker, autojump_clock: trio.testing.MockClock) -> None:
    start = trio.current_time()
    got = await call(broker, FETCH, 12, fetch_body(12, {("t", 1): 0}, max_wait_ms=500))
    assert got.responses[0].partitions[0].records == b""  # empty, not null, as Kafka
    assert trio.current_time() - start == pytest.approx(0.5)


@pytest.mark.parametrize("version", [1, 4, 7])
async def test_list_offsets(broker: Broker, version: int) -> None:
    lm = broker.log_manager
    for ts in (1000, 2000, 3000):
        await lm.append("t", 0, rb.build_batch([(None, b"v", [], ts)]))
    m = mod(LIST_OFFSETS, version)
    stamps = [-2, -1, 2000, 9999] + ([-3] if version >= 7 else [])
    results = []
    for ts in stamps:
        parts = (m.ListOffsetsPartition(partition_index=0, timestamp=ts, **(
            {"current_leader_epoch": -1} if version >= 4 else {})),)
        body = m.ListOffsetsRequest(replica_id=-1, topics=(m.ListOffsetsTopic(
            name="t", partitions=parts),), **({"isolation_level": 0} if version >= 2 else {}))
        got = await call(broker, LIST_OFFSETS, version, body)
        part = got.topics[0].partitions[0]
        assert part.error_code is ErrorCode.none
        results.append((part.offset, part.timestamp))
    expected = [(0, -1), (3, -1), (1, 2000), (-1, -1)] + ([(2, 3000)] if version >= 7 else [])
    assert results == expected


@pytest.mark.parametrize("fetch_version", [4, 7, 12])
async def test_unknown_isolation_level_fails_as_in_kafka(broker: Broker,
                                                         fetch_version: int) -> None:
    """Kafka's ``IsolationLevel.forId`` throws for a level other than 0 and 1: a consumer's
    Fetch and ListOffsets are answered UNKNOWN_SERVER_ERROR, never read as read_uncommitted."""
    await broker.log_manager.append("t", 0, batch(b"a"))
    body = dataclasses.replace(fetch_body(fetch_version, {("t", 0): 0}), isolation_level=2)
    got = await call(broker, FETCH, fetch_version, body)
    if fetch_version >= 7:  # the top-level error code came with sessions
        assert got.error_code is ErrorCode.unknown_server_error
    # Before v13 every partition carries the error too (FetchRequest.getErrorResponse).
    assert all(p.error_code is ErrorCode.unknown_server_error and not p.records
               for t in got.responses for p in t.partitions)
    m = mod(LIST_OFFSETS, 7)
    topics = (m.ListOffsetsTopic(name="t", partitions=(m.ListOffsetsPartition(
        partition_index=0, timestamp=-1, current_leader_epoch=-1),)),)
    failed = await call(broker, LIST_OFFSETS, 7, m.ListOffsetsRequest(
        replica_id=-1, isolation_level=2, topics=topics))
    assert failed.topics[0].partitions[0].error_code is ErrorCode.unknown_server_error
    debugging = await call(broker, LIST_OFFSETS, 7, m.ListOffsetsRequest(
        replica_id=-2, isolation_level=2, topics=topics))  # Kafka does not ask its level
    assert debugging.topics[0].partitions[0].offset == 1


async def test_init_producer_id_and_idempotent_produce(broker: Broker) -> None:
    m = mod(INIT_PID, 4)
    body = m.InitProducerIdRequest(transactional_id=None,
                                   transaction_timeout=datetime.timedelta(seconds=60))
    first = await call(broker, INIT_PID, 4, body)
    second = await call(broker, INIT_PID, 4, body)
    assert first.error_code is ErrorCode.none and first.producer_epoch == 0
    assert second.producer_id > first.producer_id
    pid = int(first.producer_id)
    data = batch(b"once", producer_id=pid, producer_epoch=0, base_sequence=0)
    for _ in range(2):
        answer = await call(broker, PRODUCE, 9, produce_body(9, {("t", 0): data}))
        assert answer.responses[0].partition_responses[0].base_offset == 0
    gap = batch(b"gap", producer_id=pid, producer_epoch=0, base_sequence=5)
    answer = await call(broker, PRODUCE, 9, produce_body(9, {("t", 0): gap}))
    assert answer.responses[0].partition_responses[0].error_code is \
        ErrorCode.out_of_order_sequence_number
    transactional = await call(broker, INIT_PID, 4, m.InitProducerIdRequest(
        transactional_id="tx", transaction_timeout=datetime.timedelta(seconds=60)))
    # This fixture runs no transaction coordinator: a retriable answer, no producer id
    # (tests/coordinator/test_transactions.py covers the coordinator).
    assert (transactional.error_code, transactional.producer_id, transactional.producer_epoch) \
        == (ErrorCode.coordinator_load_in_progress, -1, -1)


async def test_offset_for_leader_epoch(broker: Broker) -> None:
    await broker.log_manager.append("t", 1, batch(b"a", b"b"))
    m = mod(OFFSET_FOR_EPOCH, 4)
    body = m.OffsetForLeaderEpochRequest(replica_id=-1, topics=(
        m.OffsetForLeaderTopic(topic="t", partitions=(
            m.OffsetForLeaderPartition(partition=1, current_leader_epoch=0, leader_epoch=0),
            m.OffsetForLeaderPartition(partition=9, current_leader_epoch=0, leader_epoch=0))),))
    got = await call(broker, OFFSET_FOR_EPOCH, 4, body)
    ok, missing = got.topics[0].partitions
    assert (ok.error_code, ok.leader_epoch, ok.end_offset) == (ErrorCode.none, 0, 2)
    assert missing.error_code is ErrorCode.unknown_topic_or_partition


@pytest.mark.parametrize("version", [8, 9, 12])
async def test_the_usual_answer_is_framed_directly_and_reads_the_same(broker: Broker,
                                                                     version: int) -> None:
    """One topic with one partition at v9+ comes back as a ready frame; other shapes and
    versions as a response object. Both read the same off the wire."""
    request, result = await send(broker, PRODUCE, version,
                                 produce_body(version, {("t", 0): batch(b"a")}))
    assert isinstance(result, EncodedBody) == (version >= 9)
    if version >= 9:
        assert result.framed and result.error == "NONE"
    answer = wire(request, PRODUCE, version, result)
    part = answer.responses[0].partition_responses[0]
    assert (answer.responses[0].name, part.index, part.error_code) == ("t", 0, ErrorCode.none)
    request, result = await send(broker, PRODUCE, version,
                                 produce_body(version, {("nope", 0): batch(b"x")}))
    if version >= 9:
        assert result.error == "UNKNOWN_TOPIC_OR_PARTITION"
    part = wire(request, PRODUCE, version, result).responses[0].partition_responses[0]
    assert part.error_code is ErrorCode.unknown_topic_or_partition and part.base_offset == -1
    _, result = await send(broker, PRODUCE, version,
                           produce_body(version, {("t", 0): batch(b"b"), ("t", 1): batch(b"c")}))
    assert not isinstance(result, EncodedBody)
