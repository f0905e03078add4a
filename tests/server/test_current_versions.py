"""The newest API versions kio generates, over real sockets with the raw wire client: Produce
v10-v12, Metadata v13, ListOffsets v8-v11 (KIP-405/1005/1023 special timestamps) and
DescribeTopicPartitions (75, KIP-966) with its cursor; OffsetForLeaderEpoch fencing and answers after
the log start offset moved."""

from __future__ import annotations

import datetime
import sys
from typing import Any

import pytest
import trio
from kio.schema.errors import ErrorCode

from tests.kafka_wire import WireClient
from trio_broker.protocol import records as rb
from trio_broker.protocol.codec import request_schema
from trio_broker.storage.log import now_ms

PRODUCE, LIST_OFFSETS, METADATA, OFFSET_FOR_LEADER_EPOCH, DESCRIBE_TOPIC_PARTITIONS = 0, 2, 3, 23, 75
TIMEOUT = 10


def mod(api_key: int, version: int) -> Any:
    return sys.modules[request_schema(api_key, version).__module__]


def list_offsets(version: int, timestamp: int) -> Any:
    m = mod(LIST_OFFSETS, version)
    fields = dict(replica_id=-1, isolation_level=0, timeout=datetime.timedelta(seconds=5),
                  topics=(m.ListOffsetsTopic(name="t", partitions=(m.ListOffsetsPartition(
                      partition_index=0, timestamp=timestamp, current_leader_epoch=-1),)),))
    return m.ListOffsetsRequest(**{k: v for k, v in fields.items()
                                   if k in m.ListOffsetsRequest.__dataclass_fields__})


@pytest.mark.parametrize("version", [10, 11, 12])
async def test_produce_new_versions(broker: Any, version: int) -> None:
    with trio.fail_after(TIMEOUT):
        broker.broker.log_manager.create_topic("t", 1)
        m = mod(PRODUCE, version)
        client = await WireClient.connect(broker.port)
        answer = await client.request(PRODUCE, version, m.ProduceRequest(
            transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5),
            topic_data=(m.TopicProduceData(name="t", partition_data=(m.PartitionProduceData(
                index=0, records=rb.build_batch([(None, b"v", [], now_ms())])),)),)))
        await client.aclose()
    part = answer.responses[0].partition_responses[0]
    assert (part.error_code, part.base_offset) == (ErrorCode.none, 0)
    assert answer.node_endpoints == ()  # only sent with NOT_LEADER_OR_FOLLOWER (KIP-951)


async def test_metadata_v13(broker: Any) -> None:
    with trio.fail_after(TIMEOUT):
        broker.broker.log_manager.create_topic("t", 2)
        m = mod(METADATA, 13)
        client = await WireClient.connect(broker.port)
        answer = await client.request(METADATA, 13, m.MetadataRequest(
            topics=None, allow_auto_topic_creation=False,
            include_topic_authorized_operations=False))
        await client.aclose()
    assert answer.error_code is ErrorCode.none
    assert [(t.name, len(t.partitions)) for t in answer.topics] == [("t", 2)]


async def test_list_offsets_new_special_timestamps(broker: Any) -> None:
    lm = broker.broker.log_manager
    with trio.fail_after(TIMEOUT):
        lm.create_topic("t", 1)
        for ts in (1000, 3000, 2000):
            await lm.append("t", 0, rb.build_batch([(None, b"v", [], ts)]))
        await lm.delete_records("t", 0, 1)
        client = await WireClient.connect(broker.port)
        answers = {}
        for version in (7, 8, 9, 10, 11):
            answers[version] = []
            for timestamp in (-2, -3, -4, -5, -6):
                got = await client.request(LIST_OFFSETS, version, list_offsets(version, timestamp))
                p = got.topics[0].partitions[0]
                answers[version].append((p.error_code, p.offset, p.leader_epoch, p.timestamp))
        await client.aclose()
    earliest = (ErrorCode.none, 1, 0, -1)
    max_ts = (ErrorCode.none, 1, 0, 3000)
    local = earliest  # no tiered storage: the local log starts at the log start offset
    tiered = (ErrorCode.none, -1, -1, -1)  # nothing in remote storage
    refused = (ErrorCode.unsupported_version, -1, -1, -1)
    assert answers[7] == [earliest, max_ts, refused, refused, refused]
    assert answers[8] == [earliest, max_ts, local, refused, refused]
    assert answers[9] == answers[10] == [earliest, max_ts, local, tiered, refused]
    assert answers[11] == [earliest, max_ts, local, tiered, tiered]


def describe(names: list[str], limit: int = 2000, cursor: tuple[str, int] | None = None) -> Any:
    m = mod(DESCRIBE_TOPIC_PARTITIONS, 0)
    return m.DescribeTopicPartitionsRequest(
        topics=tuple(m.TopicRequest(name=n) for n in names), response_partition_limit=limit,
        cursor=None if cursor is None else m.Cursor(topic_name=cursor[0],
                                                    partition_index=cursor[1]))


def pages(answer: Any) -> tuple[list[tuple[str, list[int]]], tuple[str, int] | None]:
    topics = [(t.name, [int(p.partition_index) for p in t.partitions]) for t in answer.topics]
    cursor = answer.next_cursor
    return topics, None if cursor is None else (cursor.topic_name, int(cursor.partition_index))


async def test_describe_topic_partitions_pages_with_a_cursor(broker: Any) -> None:
    lm = broker.broker.log_manager
    with trio.fail_after(TIMEOUT):
        lm.create_topic("b", 3)
        lm.create_topic("a", 2)
        lm.create_topic("c", 1)
        client = await WireClient.connect(broker.port)
        everything = await client.request(DESCRIBE_TOPIC_PARTITIONS, 0, describe([]))
        first = await client.request(DESCRIBE_TOPIC_PARTITIONS, 0, describe([], limit=3))
        second = await client.request(DESCRIBE_TOPIC_PARTITIONS, 0,
                                      describe([], limit=3, cursor=("b", 1)))
        third = await client.request(DESCRIBE_TOPIC_PARTITIONS, 0,
                                     describe([], limit=2, cursor=("b", 1)))
        named = await client.request(DESCRIBE_TOPIC_PARTITIONS, 0, describe(["c", "nope"]))
        await client.aclose()
    assert pages(everything) == ([("a", [0, 1]), ("b", [0, 1, 2]), ("c", [0])], None)
    assert pages(first) == ([("a", [0, 1]), ("b", [0])], ("b", 1))
    assert pages(second) == ([("b", [1, 2]), ("c", [0])], None)
    assert pages(third) == ([("b", [1, 2])], ("c", 0))  # the limit met at a topic's end
    topic = everything.topics[0]
    assert topic.topic_id == lm.topics["a"].topic_id and topic.error_code is ErrorCode.none
    part = topic.partitions[0]
    node = broker.broker.node_id
    assert (part.leader_id, part.leader_epoch, part.replica_nodes, part.isr_nodes,
            part.eligible_leader_replicas) == (node, 0, (node,), (node,), ())
    assert [(t.name, t.error_code, t.topic_id) for t in named.topics] == [
        ("c", ErrorCode.none, lm.topics["c"].topic_id),
        ("nope", ErrorCode.unknown_topic_or_partition, None)]  # the zero id, as kio reads it


async def test_offset_for_leader_epoch_fencing_and_after_truncation(broker: Any) -> None:
    lm = broker.broker.log_manager
    with trio.fail_after(TIMEOUT):
        lm.create_topic("t", 1)
        for _ in range(4):
            await lm.append("t", 0, rb.build_batch([(None, b"v", [], now_ms())]))
        await lm.delete_records("t", 0, 3)  # the log now starts at 3
        m = mod(OFFSET_FOR_LEADER_EPOCH, 4)
        client = await WireClient.connect(broker.port)
        answers = []
        for current, requested in ((-1, 0), (0, 0), (1, 0), (-2, 0), (-1, 1), (-1, -5)):
            got = await client.request(OFFSET_FOR_LEADER_EPOCH, 4, m.OffsetForLeaderEpochRequest(
                replica_id=-1, topics=(m.OffsetForLeaderTopic(topic="t", partitions=(
                    m.OffsetForLeaderPartition(partition=0, current_leader_epoch=current,
                                               leader_epoch=requested),)),)))
            p = got.topics[0].partitions[0]
            answers.append((p.error_code, p.leader_epoch, p.end_offset))
        await client.aclose()
    assert answers == [
        (ErrorCode.none, 0, 4), (ErrorCode.none, 0, 4),           # the log end offset
        (ErrorCode.unknown_leader_epoch, -1, -1),                 # newer than the leader's
        (ErrorCode.fenced_leader_epoch, -1, -1),                  # older than the leader's
        (ErrorCode.none, -1, -1),                                 # an epoch never seen
        (ErrorCode.none, -5, 3),  # below the first epoch: its start, the log start offset
    ]
