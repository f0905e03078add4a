"""The request versions Kafka 3.9 serves and Kafka 4 removed (KIP-896), sent as raw frames to an
in-process broker over a real socket, each answered as a Kafka 3.9 KRaft broker answers it.

Their message classes come from :mod:`trio_broker.protocol.legacy_schemas` (kio 0.6.5 has none).
"""

from __future__ import annotations

import datetime
import sys
import time
from typing import Any

import pytest
import trio
from kio.schema.errors import ErrorCode as E

from tests.kafka_wire import WireClient
from tests.server.test_acls import ADMIN, binding
from trio_broker.protocol import records as rb
from trio_broker.protocol.codec import request_schema
from trio_broker.server.acl import AclOperation, PatternType, ResourceType
from trio_broker.server.handlers.list_offsets import EARLIEST, LATEST, legacy_offsets_before
from trio_broker.server.registry import supported_versions
from trio_broker.storage.log import now_ms

PRODUCE, LIST_OFFSETS, OFFSET_COMMIT, OFFSET_FETCH, API_VERSIONS = 0, 2, 8, 9, 18
CREATE_TOPICS, DELETE_TOPICS, OFFSET_FOR_LEADER_EPOCH, WRITE_TXN_MARKERS = 19, 20, 23, 27
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS, DESCRIBE_CONFIGS, DESCRIBE_LOG_DIRS = 29, 30, 31, 32, 35
TIMEOUT = 15

#: Kafka 3.9's lowest version of each API this task opened (validVersions of the 3.9 specs).
KAFKA_39_LOWEST = {LIST_OFFSETS: 0, OFFSET_COMMIT: 0, OFFSET_FETCH: 0, CREATE_TOPICS: 0,
                   DELETE_TOPICS: 0, OFFSET_FOR_LEADER_EPOCH: 0, WRITE_TXN_MARKERS: 0,
                   DESCRIBE_ACLS: 0, CREATE_ACLS: 0, DELETE_ACLS: 0, DESCRIBE_CONFIGS: 0,
                   DESCRIBE_LOG_DIRS: 0}


def mod(api_key: int, version: int) -> Any:
    return sys.modules[request_schema(api_key, version).__module__]


async def produce(client: WireClient, topic: str, *values: bytes) -> None:
    m = mod(PRODUCE, 9)
    data = rb.build_batch([(None, v, [], now_ms()) for v in values])
    answer = await client.request(PRODUCE, 9, m.ProduceRequest(
        transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5),
        topic_data=(m.TopicProduceData(name=topic, partition_data=(
            m.PartitionProduceData(index=0, records=data),)),)))
    assert answer.responses[0].partition_responses[0].error_code is E.none


async def test_api_versions_advertises_kafka_39_lowest_versions(broker: Any) -> None:
    client = await WireClient.connect(broker.port)
    try:
        m = mod(API_VERSIONS, 3)
        answer = await client.request(API_VERSIONS, 3, m.ApiVersionsRequest(
            client_software_name="old", client_software_version="1"))
        lowest = {int(k.api_key): int(k.min_version) for k in answer.api_keys}
        assert {key: lowest[key] for key in KAFKA_39_LOWEST} == KAFKA_39_LOWEST
        assert all(supported_versions()[key][0] == 0 for key in KAFKA_39_LOWEST)
    finally:
        await client.aclose()


def list_offsets_v0(topic: str, partitions: dict[int, tuple[int, int]],
                    replica_id: int = -1) -> Any:
    m = mod(LIST_OFFSETS, 0)
    return m.ListOffsetsRequest(replica_id=replica_id, topics=(m.ListOffsetsTopic(
        name=topic, partitions=tuple(
            m.ListOffsetsPartition(partition_index=p, timestamp=ts, max_num_offsets=n)
            for p, (ts, n) in partitions.items())),))


async def test_list_offsets_v0_answers_old_style_offsets(broker: Any) -> None:
    """UnifiedLog.legacyFetchOffsetsBefore: EARLIEST is the log start; LATEST the log end
    followed by segment base offsets, up to max_num_offsets, descending; a timestamp before
    every segment was written finds nothing; an unknown partition is an error, no offsets."""
    broker.broker.log_manager.create_topic("lo", 1)
    client = await WireClient.connect(broker.port)
    try:
        with trio.fail_after(TIMEOUT):
            await produce(client, "lo", b"a", b"b", b"c")
            answer = await client.request(LIST_OFFSETS, 0, list_offsets_v0("lo", {0: (-2, 5)}))
            [part] = answer.topics[0].partitions
            assert (part.error_code, part.old_style_offsets) == (E.none, (0,))
            answer = await client.request(LIST_OFFSETS, 0, list_offsets_v0("lo", {0: (-1, 1)}))
            assert answer.topics[0].partitions[0].old_style_offsets == (3,)
            answer = await client.request(LIST_OFFSETS, 0, list_offsets_v0("lo", {0: (-1, 10)}))
            assert answer.topics[0].partitions[0].old_style_offsets == (3, 0)
            future = int(time.time() * 1000) + 3_600_000
            answer = await client.request(LIST_OFFSETS, 0,
                                          list_offsets_v0("lo", {0: (future, 1)}))
            assert answer.topics[0].partitions[0].old_style_offsets == (3,)
            answer = await client.request(LIST_OFFSETS, 0, list_offsets_v0("lo", {0: (0, 1)}))
            assert answer.topics[0].partitions[0].old_style_offsets == ()
            answer = await client.request(LIST_OFFSETS, 0, list_offsets_v0("lo", {4: (-1, 1)}))
            [part] = answer.topics[0].partitions
            assert (part.error_code, part.old_style_offsets) == (E.unknown_topic_or_partition, ())
            answer = await client.request(LIST_OFFSETS, 0, list_offsets_v0("lo", {0: (-1, -1)}))
            assert answer.topics[0].partitions[0].error_code is E.unknown_server_error
    finally:
        await client.aclose()


def offset_commit(version: int, group: str, topic: str, offsets: dict[int, int],
                  commit_timestamp: int = -1) -> Any:
    m = mod(OFFSET_COMMIT, version)
    extra: dict[str, Any] = ({} if version == 0 else
                             {"generation_id_or_member_epoch": -1, "member_id": ""})
    stamp: dict[str, Any] = {"commit_timestamp": commit_timestamp} if version == 1 else {}
    return m.OffsetCommitRequest(group_id=group, **extra, topics=(m.OffsetCommitRequestTopic(
        name=topic, partitions=tuple(
            m.OffsetCommitRequestPartition(partition_index=p, committed_offset=o,
                                           committed_metadata="m", **stamp)
            for p, o in offsets.items())),))


def offset_fetch(version: int, group: str, topic: str, partitions: tuple[int, ...]) -> Any:
    m = mod(OFFSET_FETCH, version)
    return m.OffsetFetchRequest(group_id=group, topics=(
        m.OffsetFetchRequestTopic(name=topic, partition_indexes=partitions),))


async def test_offset_commit_and_fetch_v0_v1(broker: Any) -> None:
    """v1 commits to the group coordinator and reads back; v0 (ZooKeeper's offsets) is
    UNSUPPORTED_VERSION on a KRaft 3.9 broker once the request has a valid partition, and a
    request naming only unknown partitions gets UNKNOWN_TOPIC_OR_PARTITION instead."""
    broker.broker.log_manager.create_topic("oc", 2)
    client = await WireClient.connect(broker.port)
    try:
        with trio.fail_after(TIMEOUT):
            answer = await client.request(OFFSET_COMMIT, 1, offset_commit(1, "g", "oc", {0: 7}))
            assert answer.topics[0].partitions[0].error_code is E.none
            got = await client.request(OFFSET_FETCH, 1, offset_fetch(1, "g", "oc", (0, 1)))
            assert [(int(p.committed_offset), p.metadata, p.error_code)
                    for p in got.topics[0].partitions] == [(7, "m", E.none), (-1, "", E.none)]
            answer = await client.request(OFFSET_COMMIT, 0,
                                          offset_commit(0, "g", "oc", {0: 9, 5: 1}))
            assert [p.error_code for p in answer.topics[0].partitions] == [
                E.unsupported_version, E.unsupported_version]
            answer = await client.request(OFFSET_COMMIT, 0, offset_commit(0, "g", "nope", {0: 1}))
            assert answer.topics[0].partitions[0].error_code is E.unknown_topic_or_partition
            got = await client.request(OFFSET_FETCH, 0, offset_fetch(0, "g", "oc", (0,)))
            [part] = got.topics[0].partitions
            assert (int(part.committed_offset), part.metadata, part.error_code) == (
                -1, "", E.unsupported_version)
            # v0 changed nothing
            got = await client.request(OFFSET_FETCH, 1, offset_fetch(1, "g", "oc", (0,)))
            assert int(got.topics[0].partitions[0].committed_offset) == 7
    finally:
        await client.aclose()


async def test_offset_commit_v1_keeps_the_clients_timestamp(broker: Any) -> None:
    """OffsetAndMetadata.fromRequest: v1's commit_timestamp is the commit's time (-1: now), so
    offsets.retention.minutes counts from it: a commit stamped two weeks ago expires at the
    next check, the one stamped now stays."""
    broker.broker.log_manager.create_topic("oc", 2)
    groups = broker.broker.group_coordinator
    weeks_ago = int(time.time() * 1000) - 14 * 24 * 3600 * 1000
    client = await WireClient.connect(broker.port)
    try:
        with trio.fail_after(TIMEOUT):
            for partition, stamp in ((0, weeks_ago), (1, -1)):
                answer = await client.request(OFFSET_COMMIT, 1, offset_commit(
                    1, "g", "oc", {partition: 5}, commit_timestamp=stamp))
                assert answer.topics[0].partitions[0].error_code is E.none
            stored = groups.groups["g"].offsets
            assert stored[("oc", 0)].commit_timestamp_ms == weeks_ago
            assert stored[("oc", 1)].commit_timestamp_ms > weeks_ago
            assert groups.expire_offsets() == 1
            got = await client.request(OFFSET_FETCH, 1, offset_fetch(1, "g", "oc", (0, 1)))
            assert [int(p.committed_offset) for p in got.topics[0].partitions] == [-1, 5]
    finally:
        await client.aclose()


def create_topics(version: int, name: str, partitions: int, **extra: Any) -> Any:
    m = mod(CREATE_TOPICS, version)
    return m.CreateTopicsRequest(topics=(m.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1, assignments=(),
        configs=()),), timeout=datetime.timedelta(seconds=5), **extra)


async def test_create_and_delete_topics_v0_v1(broker: Any) -> None:
    lm = broker.broker.log_manager
    client = await WireClient.connect(broker.port)
    try:
        with trio.fail_after(TIMEOUT):
            answer = await client.request(CREATE_TOPICS, 0, create_topics(0, "c0", 2))
            [result] = answer.topics
            assert (result.name, result.error_code) == ("c0", E.none)
            assert lm.topics["c0"].num_partitions == 2
            answer = await client.request(CREATE_TOPICS, 0, create_topics(0, "c0", 2))
            assert answer.topics[0].error_code is E.topic_already_exists
            answer = await client.request(CREATE_TOPICS, 1, create_topics(
                1, "c1", 1, validate_only=True))
            assert (answer.topics[0].error_code, answer.topics[0].error_message) == (E.none, None)
            assert "c1" not in lm.topics
            answer = await client.request(CREATE_TOPICS, 1, create_topics(1, "c0", 1))
            assert answer.topics[0].error_code is E.topic_already_exists
            assert answer.topics[0].error_message == "Topic 'c0' already exists."
            m = mod(DELETE_TOPICS, 0)
            answer = await client.request(DELETE_TOPICS, 0, m.DeleteTopicsRequest(
                topic_names=("c0", "nope"), timeout=datetime.timedelta(seconds=5)))
            assert {(r.name, r.error_code) for r in answer.responses} == {
                ("c0", E.none), ("nope", E.unknown_topic_or_partition)}
            assert "c0" not in lm.topics
    finally:
        await client.aclose()


async def test_offset_for_leader_epoch_v0_v1(broker: Any) -> None:
    """v0 answers the end offset only, v1 the epoch too (leader epoch 0 on a one-node broker)."""
    broker.broker.log_manager.create_topic("ep", 1)
    client = await WireClient.connect(broker.port)
    try:
        with trio.fail_after(TIMEOUT):
            await produce(client, "ep", b"x", b"y")
            for version in (0, 1):
                m = mod(OFFSET_FOR_LEADER_EPOCH, version)
                answer = await client.request(OFFSET_FOR_LEADER_EPOCH, version,
                                              m.OffsetForLeaderEpochRequest(topics=(
                                                  m.OffsetForLeaderTopic(topic="ep", partitions=(
                                                      m.OffsetForLeaderPartition(
                                                          partition=0, leader_epoch=0),
                                                      m.OffsetForLeaderPartition(
                                                          partition=3, leader_epoch=0))),)))
                ok, missing = answer.topics[0].partitions
                assert (ok.error_code, int(ok.end_offset)) == (E.none, 2)
                assert missing.error_code is E.unknown_topic_or_partition
                assert hasattr(ok, "leader_epoch") == (version == 1)
                if version == 1:
                    assert int(ok.leader_epoch) == 0
    finally:
        await client.aclose()


async def test_describe_configs_v0_has_is_default_and_no_synonyms(broker: Any) -> None:
    broker.broker.log_manager.create_topic("dc", 1, {"retention.ms": "1000"})
    client = await WireClient.connect(broker.port)
    try:
        with trio.fail_after(TIMEOUT):
            m = mod(DESCRIBE_CONFIGS, 0)
            answer = await client.request(DESCRIBE_CONFIGS, 0, m.DescribeConfigsRequest(
                resources=(m.DescribeConfigsResource(
                    resource_type=2, resource_name="dc",
                    configuration_keys=("retention.ms", "cleanup.policy")),)))
            [result] = answer.results
            assert result.error_code is E.none
            configs = {c.name: (c.value, c.is_default) for c in result.configs}
            assert configs == {"retention.ms": ("1000", False), "cleanup.policy": ("delete", True)}
            assert not hasattr(result.configs[0], "synonyms")
    finally:
        await client.aclose()


async def test_describe_log_dirs_v0(broker: Any) -> None:
    broker.broker.log_manager.create_topic("ld", 1)
    client = await WireClient.connect(broker.port)
    try:
        with trio.fail_after(TIMEOUT):
            m = mod(DESCRIBE_LOG_DIRS, 0)
            answer = await client.request(DESCRIBE_LOG_DIRS, 0, m.DescribeLogDirsRequest(
                topics=(m.DescribableLogDirTopic(topic="ld", partitions=(0,)),)))
            [result] = answer.results
            assert result.error_code is E.none
            assert [(t.name, [int(p.partition_index) for p in t.partitions])
                    for t in result.topics] == [("ld", [0])]
    finally:
        await client.aclose()


async def test_acl_apis_v0_know_only_literal_patterns(start_broker: Any) -> None:
    """v0 has no pattern type: creations are LITERAL, filters match LITERAL bindings only."""
    running = await start_broker(ADMIN)
    running.broker.authorizer.add([binding("pre-", AclOperation.READ,
                                           pattern=PatternType.PREFIXED)], "test")
    client = await WireClient.connect(running.port)
    try:
        with trio.fail_after(TIMEOUT):
            m = mod(CREATE_ACLS, 0)
            answer = await client.request(CREATE_ACLS, 0, m.CreateAclsRequest(creations=(
                m.AclCreation(resource_type=int(ResourceType.TOPIC), resource_name="lit",
                              principal="User:bob", host="*",
                              operation=int(AclOperation.WRITE), permission_type=3),)))
            assert [(r.error_code, r.error_message) for r in answer.results] == [(E.none, None)]
            stored = {(b.name, b.pattern_type) for b in running.broker.authorizer.index}
            assert ("lit", PatternType.LITERAL) in stored
            m = mod(DESCRIBE_ACLS, 0)
            answer = await client.request(DESCRIBE_ACLS, 0, m.DescribeAclsRequest(
                resource_type_filter=1, resource_name_filter=None, principal_filter=None,
                host_filter=None, operation=1, permission_type=1))
            assert answer.error_code is E.none
            assert [r.resource_name for r in answer.resources] == ["lit"]  # not "pre-"
            m = mod(DELETE_ACLS, 0)
            answer = await client.request(DELETE_ACLS, 0, m.DeleteAclsRequest(filters=(
                m.DeleteAclsFilter(resource_type_filter=1, resource_name_filter=None,
                                   principal_filter=None, host_filter=None, operation=1,
                                   permission_type=1),)))
            [result] = answer.filter_results
            assert [a.resource_name for a in result.matching_acls] == ["lit"]
            assert {b.name for b in running.broker.authorizer.index} == {"pre-"}
    finally:
        await client.aclose()


async def test_write_txn_markers_v0_is_not_flexible(broker: Any) -> None:
    """v0 has request header v1 and no tagged fields; an unknown partition is refused."""
    client = await WireClient.connect(broker.port)
    try:
        with trio.fail_after(TIMEOUT):
            m = mod(WRITE_TXN_MARKERS, 0)
            assert m.WriteTxnMarkersRequest.__flexible__ is False
            answer = await client.request(WRITE_TXN_MARKERS, 0, m.WriteTxnMarkersRequest(
                markers=(m.WritableTxnMarker(
                    producer_id=5, producer_epoch=0, transaction_result=False,
                    coordinator_epoch=0, topics=(m.WritableTxnMarkerTopic(
                        name="nope", partition_indexes=(0,)),)),)))
            [marker] = answer.markers
            assert marker.topics[0].partitions[0].error_code is E.unknown_topic_or_partition
    finally:
        await client.aclose()


# -------------------------------------------------------- ListOffsets v0's offsets, sans-IO
def test_legacy_offsets_before_follows_kafka_39() -> None:
    """UnifiedLog.legacyFetchOffsetsBefore: one candidate per segment (its base offset, at least
    the log start, and its modification time), plus the log end offset stamped now when the
    active segment holds data; descending, at most ``max_num_offsets``."""
    segments = [(0, 1000, 50), (10, 2000, 50), (20, 3000, 0)]  # the active segment is empty
    assert legacy_offsets_before(segments, 5, 20, 9999, LATEST, 10) == [20, 10, 5]
    assert legacy_offsets_before(segments, 5, 20, 9999, LATEST, 1) == [20]
    assert legacy_offsets_before(segments, 5, 20, 9999, EARLIEST, 3) == [5]
    assert legacy_offsets_before(segments, 5, 20, 9999, 2500, 5) == [10, 5]
    assert legacy_offsets_before(segments, 5, 20, 9999, 3000, 1) == [20]
    assert legacy_offsets_before(segments, 5, 20, 9999, 500, 5) == []
    assert legacy_offsets_before(segments, 5, 20, 9999, LATEST, 0) == []
    active = [(0, 1000, 10)]  # the active segment holds data: the log end offset is a candidate
    assert legacy_offsets_before(active, 0, 7, 5000, LATEST, 2) == [7, 0]
    assert legacy_offsets_before(active, 0, 7, 5000, 4000, 9) == [0]
    assert legacy_offsets_before(active, 0, 7, 5000, 6000, 1) == [7]
    with pytest.raises(ValueError, match="negative"):
        legacy_offsets_before(active, 0, 7, 5000, LATEST, -1)
