"""Features (ApiVersions v3+, UpdateFeatures), DescribeQuorum, Produce v13 by topic id and Fetch
v18, over real sockets against an in-process broker (``start_broker``) with the raw wire client."""

from __future__ import annotations

import datetime
import json
import sys
import time
import uuid
from typing import Any

import pytest
import trio
from kio.schema.errors import ErrorCode

from tests.kafka_wire import WireClient
from trio_broker.protocol import records as rb
from trio_broker.protocol.codec import request_schema
from trio_broker.server.feature_store import FEATURES_FILE
from trio_broker.storage.log import now_ms

PRODUCE, FETCH, API_VERSIONS, DESCRIBE_QUORUM, UPDATE_FEATURES = 0, 1, 18, 55, 57
CONSUMER_APIS = {68, 69}
TIMEOUT = 10
PREFIX = "The update failed for all features since the following feature had an error: "


def mod(api_key: int, version: int) -> Any:
    return sys.modules[request_schema(api_key, version).__module__]


async def call(port: int, api_key: int, version: int, body: Any) -> Any:
    with trio.fail_after(TIMEOUT):
        client = await WireClient.connect(port)
        try:
            return await client.request(api_key, version, body)
        finally:
            await client.aclose()


def api_versions(version: int) -> Any:
    m = mod(API_VERSIONS, version)
    fields = {"client_software_name": "trio-test", "client_software_version": "1.0"}
    return m.ApiVersionsRequest(**(fields if version >= 3 else {}))


def features_of(answer: Any) -> tuple[dict[str, tuple[int, int]], dict[str, tuple[int, int]], int]:
    supported = {f.name: (int(f.min_version), int(f.max_version))
                 for f in answer.supported_features}
    finalized = {f.name: (int(f.min_version_level), int(f.max_version_level))
                 for f in answer.finalized_features}
    return supported, finalized, int(answer.finalized_features_epoch)


def update(version: int, updates: list[tuple[str, int, int]], validate_only: bool = False
           ) -> Any:
    """UpdateFeatures with ``(feature, level, upgrade type)`` entries (v0: type 2 = allow
    downgrade)."""
    m = mod(UPDATE_FEATURES, version)
    keys = []
    for feature, level, kind in updates:
        extra = {"allow_downgrade": kind != 1} if version == 0 else {"upgrade_type": kind}
        keys.append(m.FeatureUpdateKey(feature=feature, max_version_level=level, **extra))
    fields: dict[str, Any] = {"timeout": datetime.timedelta(seconds=5),
                              "feature_updates": tuple(keys)}
    if version >= 1:
        fields["validate_only"] = validate_only
    return m.UpdateFeaturesRequest(**fields)


# ------------------------------------------------------------------------- ApiVersions
@pytest.mark.parametrize("version", [3, 4])
async def test_api_versions_v3_lists_the_features(broker: Any, version: int) -> None:
    answer = await call(broker.port, API_VERSIONS, version, api_versions(version))
    supported, finalized, epoch = features_of(answer)
    assert answer.error_code is ErrorCode.none
    assert supported == {"group.version": (0, 1), "kraft.version": (0, 1),
                         "metadata.version": (7, 25), "transaction.version": (0, 2)}
    assert finalized == {"group.version": (1, 1), "metadata.version": (25, 25),
                         "transaction.version": (2, 2)}
    # The bootstrap records (3) and this start's leader change: offsets 0-3.
    assert epoch == 3
    advertised = {int(k.api_key): (int(k.min_version), int(k.max_version))
                  for k in answer.api_keys}
    assert advertised[PRODUCE][1] == 13 and advertised[FETCH][1] == 18
    assert advertised[DESCRIBE_QUORUM] == (0, 2) and advertised[UPDATE_FEATURES] == (0, 2)


async def test_api_versions_v2_has_no_features(broker: Any) -> None:
    answer = await call(broker.port, API_VERSIONS, 2, api_versions(2))
    assert not hasattr(answer, "supported_features")


# ---------------------------------------------------------------------- UpdateFeatures
@pytest.mark.parametrize("version", [0, 1, 2])
async def test_a_refused_update_fails_the_request_as_kafka_4(broker: Any, version: int) -> None:
    answer = await call(broker.port, UPDATE_FEATURES, version, update(
        version, [("group.version", 1, 1), ("transaction.version", 3, 1)]))
    assert answer.error_code is ErrorCode.invalid_update_version
    assert answer.error_message == PREFIX + (
        "Invalid update version 3 for feature transaction.version. Local controller 1 only "
        "supports versions 0-2")
    assert getattr(answer, "results", ()) == ()


async def test_unknown_feature_and_downgrade_without_its_type(broker: Any) -> None:
    answer = await call(broker.port, UPDATE_FEATURES, 1, update(1, [("share.version", 1, 1)]))
    assert answer.error_message == PREFIX + (
        "Invalid update version 1 for feature share.version. Local controller 1 does not "
        "support this feature.")
    answer = await call(broker.port, UPDATE_FEATURES, 0, update(0, [("group.version", 0, 1)]))
    assert (answer.error_code, answer.error_message) == (
        ErrorCode.invalid_update_version, PREFIX + (
            "Invalid update version 0 for feature group.version. Can't downgrade the version "
            "of this feature without setting the upgrade type to either safe or unsafe "
            "downgrade."))


async def test_validate_only_changes_nothing(broker: Any) -> None:
    answer = await call(broker.port, UPDATE_FEATURES, 1,
                        update(1, [("group.version", 0, 2)], validate_only=True))
    assert answer.error_code is ErrorCode.none
    assert [(r.feature, r.error_code, r.error_message) for r in answer.results] == [
        ("group.version", ErrorCode.none, None)]
    _, finalized, epoch = features_of(await call(broker.port, API_VERSIONS, 3, api_versions(3)))
    assert finalized["group.version"] == (1, 1) and epoch == 3


async def test_update_applies_hides_consumer_apis_and_survives_a_restart(
        start_broker: Any, tmp_path: Any) -> None:
    data = str(tmp_path / "kept")
    first = await start_broker(**{"log.dirs": data})
    before = await call(first.port, API_VERSIONS, 3, api_versions(3))
    assert {int(k.api_key) for k in before.api_keys} >= CONSUMER_APIS
    answer = await call(first.port, UPDATE_FEATURES, 2, update(
        2, [("group.version", 0, 2), ("transaction.version", 1, 2)]))
    assert (answer.error_code, answer.error_message) == (ErrorCode.none, None)
    after = await call(first.port, API_VERSIONS, 3, api_versions(3))
    _, finalized, epoch = features_of(after)
    assert finalized == {"metadata.version": (25, 25), "transaction.version": (1, 1)}
    assert epoch == 5  # two feature level records after offset 3
    # group.version 0: the KIP-848 APIs are no longer advertised (the cached answer changed).
    assert not CONSUMER_APIS & {int(k.api_key) for k in after.api_keys}
    saved = json.loads((tmp_path / "kept" / FEATURES_FILE).read_text())
    assert saved["features"]["group.version"] == 0
    await first.shutdown()

    second = await start_broker(**{"log.dirs": data})
    _, finalized, epoch = features_of(await call(second.port, API_VERSIONS, 3, api_versions(3)))
    assert finalized == {"metadata.version": (25, 25), "transaction.version": (1, 1)}
    assert epoch == 6  # and the new start's leader change
    quorum = await call(second.port, DESCRIBE_QUORUM, 1, describe_quorum(1))
    assert int(quorum.topics[0].partitions[0].leader_epoch) == 2


def heartbeat() -> Any:
    m = mod(68, 0)
    return m.ConsumerGroupHeartbeatRequest(
        group_id="g", member_id="", member_epoch=0, rebalance_timeout=datetime.timedelta(
            seconds=30), subscribed_topic_names=("t",), topic_partitions=())


async def test_group_version_0_disables_the_consumer_protocol(broker: Any) -> None:
    await call(broker.port, UPDATE_FEATURES, 1, update(1, [("group.version", 0, 2)]))
    answer = await call(broker.port, 68, 0, heartbeat())
    assert (answer.error_code, answer.error_message) == (
        ErrorCode.unsupported_version, "The consumer group protocol is disabled.")
    await call(broker.port, UPDATE_FEATURES, 1, update(1, [("group.version", 1, 1)]))
    answer = await call(broker.port, 68, 0, heartbeat())
    assert answer.error_code is ErrorCode.none and answer.member_epoch == 1


async def test_update_features_needs_alter_on_the_cluster(start_broker: Any) -> None:
    running = await start_broker(**{
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "false"})
    answer = await call(running.port, UPDATE_FEATURES, 1, update(1, [("group.version", 0, 2)]))
    assert (answer.error_code, answer.results) == (ErrorCode.cluster_authorization_failed, ())
    quorum = await call(running.port, DESCRIBE_QUORUM, 2, describe_quorum(2))
    assert (quorum.error_code, quorum.topics) == (ErrorCode.cluster_authorization_failed, ())
    _, finalized, _ = features_of(await call(running.port, API_VERSIONS, 3, api_versions(3)))
    assert finalized["group.version"] == (1, 1)


# ---------------------------------------------------------------------- DescribeQuorum
def describe_quorum(version: int, topic: str = "__cluster_metadata", partition: int = 0) -> Any:
    m = mod(DESCRIBE_QUORUM, version)
    return m.DescribeQuorumRequest(topics=(m.TopicData(
        topic_name=topic, partitions=(m.PartitionData(partition_index=partition),)),))


@pytest.mark.parametrize("version", [0, 1, 2])
async def test_describe_quorum_answers_for_the_single_voter(broker: Any, version: int) -> None:
    before = int(time.time() * 1000)
    answer = await call(broker.port, DESCRIBE_QUORUM, version, describe_quorum(version))
    assert answer.error_code is ErrorCode.none
    (topic,) = answer.topics
    (partition,) = topic.partitions
    assert (topic.topic_name, partition.partition_index, partition.error_code) == (
        "__cluster_metadata", 0, ErrorCode.none)
    assert (partition.leader_id, partition.leader_epoch, partition.high_watermark) == (1, 1, 4)
    (voter,) = partition.current_voters
    assert (voter.replica_id, voter.log_end_offset) == (1, 4)
    assert partition.observers == ()
    if version >= 1:
        assert voter.last_caught_up_timestamp >= before
        assert voter.last_fetch_timestamp >= before
    if version >= 2:
        # kraft.version 0: the zero UUID, which kio reads as None.
        assert voter.replica_directory_id is None
        (node,) = answer.nodes
        assert node.node_id == 1
        assert [(listener.name, listener.port) for listener in node.listeners] == [
            ("PLAINTEXT", broker.port)]


async def test_describe_quorum_of_another_partition(broker: Any) -> None:
    for body in (describe_quorum(2, "t"), describe_quorum(2, partition=1)):
        answer = await call(broker.port, DESCRIBE_QUORUM, 2, body)
        assert (answer.error_code, answer.topics) == (ErrorCode.unknown_topic_or_partition, ())


async def test_the_high_watermark_counts_feature_changes(broker: Any) -> None:
    await call(broker.port, UPDATE_FEATURES, 1, update(1, [("kraft.version", 1, 1)]))
    answer = await call(broker.port, DESCRIBE_QUORUM, 2, describe_quorum(2))
    partition = answer.topics[0].partitions[0]
    assert partition.high_watermark == 5
    # kraft.version 1 (KIP-853): the voter reports its directory id.
    directory = partition.current_voters[0].replica_directory_id
    assert directory == broker.broker.features.state.directory_id
    assert directory is not None and directory.int != 0


# ------------------------------------------------------------- Produce v13, Fetch v18
def produce_v13(topic_id: uuid.UUID, values: list[bytes]) -> Any:
    m = mod(PRODUCE, 13)
    batch = rb.build_batch([(None, v, [], now_ms()) for v in values])
    return m.ProduceRequest(
        transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5),
        topic_data=(m.TopicProduceData(topic_id=topic_id, partition_data=(
            m.PartitionProduceData(index=0, records=batch),)),))


def fetch_v18(topic_id: uuid.UUID, offset: int = 0) -> Any:
    m = mod(FETCH, 18)
    return m.FetchRequest(
        max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 20, isolation_level=0,
        session_id=0, session_epoch=-1, forgotten_topics_data=(), rack_id="",
        topics=(m.FetchTopic(topic_id=topic_id, partitions=(m.FetchPartition(
            partition=0, fetch_offset=offset, partition_max_bytes=1 << 20,
            current_leader_epoch=-1, log_start_offset=-1, last_fetched_epoch=-1),)),))


async def test_produce_v13_by_topic_id_and_fetch_v18(broker: Any) -> None:
    broker.broker.log_manager.create_topic("t", 1)
    topic_id = broker.broker.log_manager.topics["t"].topic_id
    answer = await call(broker.port, PRODUCE, 13, produce_v13(topic_id, [b"a", b"b"]))
    (topic,) = answer.responses
    assert topic.topic_id == topic_id
    part = topic.partition_responses[0]
    assert (part.index, part.error_code, part.base_offset) == (0, ErrorCode.none, 0)
    fetched = await call(broker.port, FETCH, 18, fetch_v18(topic_id))
    (ftopic,) = fetched.responses
    assert ftopic.topic_id == topic_id
    fpart = ftopic.partitions[0]
    assert (fpart.error_code, fpart.high_watermark) == (ErrorCode.none, 2)
    records = bytes(fpart.records)
    assert [r.value for r in rb.decode_records(records)] == [b"a", b"b"]


async def test_unknown_topic_id_in_produce_v13_and_fetch_v18(broker: Any) -> None:
    stranger = uuid.uuid4()
    answer = await call(broker.port, PRODUCE, 13, produce_v13(stranger, [b"x"]))
    (topic,) = answer.responses
    part = topic.partition_responses[0]
    assert (topic.topic_id, part.error_code, part.base_offset) == (
        stranger, ErrorCode.unknown_topic_id, -1)
    fetched = await call(broker.port, FETCH, 18, fetch_v18(stranger))
    assert fetched.responses[0].partitions[0].error_code is ErrorCode.unknown_topic_id
