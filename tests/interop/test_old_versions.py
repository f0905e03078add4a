"""kafka-python 3 pinned to old brokers' protocol (``api_version`` (0, 10, 0) to (0, 11, 0)): it
sends versions Kafka 4 removed (CreateTopics v0, DeleteTopics v0, DescribeConfigs v0, CreateAcls
and DescribeAcls v0, ListOffsets v0) and gets a Kafka 3.9 broker's answers; and, pinned to
(0, 10, x), (0, 9) and (0, 8, 2), produces message formats v1/v0 (Produce v2/v1/v0) and consumes
them down-converted (Fetch v3/v2/v1/v0) in a group with commits."""

from __future__ import annotations

from typing import Any

import pytest
import trio

pytestmark = pytest.mark.interop

TIMEOUT = 15.0


def kafka_python_old_admin(bootstrap: str) -> None:
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ConfigResource,
        ConfigResourceType,
        KafkaAdminClient,
        NewTopic,
        ResourcePattern,
        ResourcePatternFilter,
        ResourceType,
    )

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, api_version=(0, 10, 1),
                             request_timeout_ms=int(TIMEOUT * 1000))
    admin.create_topics([NewTopic("old", num_partitions=2, replication_factor=1)])
    assert "old" in admin.list_topics()
    admin.delete_topics(["old"])
    admin.close()

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, api_version=(0, 11, 0),
                             request_timeout_ms=int(TIMEOUT * 1000))
    admin.create_topics([NewTopic("cfg", num_partitions=1, replication_factor=1,
                                  topic_configs={"retention.ms": "1234"})])
    described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "cfg",
                                                       ["retention.ms"])])
    assert "1234" in repr(described), described
    acl = ACL(principal="User:bob", host="*", operation=ACLOperation.READ,
              permission_type=ACLPermissionType.ALLOW,
              resource_pattern=ResourcePattern(ResourceType.TOPIC, "cfg",
                                               ACLResourcePatternType.LITERAL))
    created = admin.create_acls([acl])
    assert created["failed"] == [], created
    found, _ = admin.describe_acls(ACLFilter(
        principal=None, host="*", operation=ACLOperation.ANY,
        permission_type=ACLPermissionType.ANY,
        resource_pattern=ResourcePatternFilter(ResourceType.TOPIC, None,
                                               ACLResourcePatternType.LITERAL)))
    assert [a.principal for a in found] == ["User:bob"], found
    admin.close()

    from kafka import KafkaConsumer, TopicPartition

    # 0.10.0 predates ListOffsets v1: the consumer asks with v0 (max_num_offsets 1).
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, api_version=(0, 10, 0),
                             request_timeout_ms=int(TIMEOUT * 1000) + 1)
    tp = TopicPartition("cfg", 0)
    assert consumer.beginning_offsets([tp]) == {tp: 0}
    assert consumer.end_offsets([tp]) == {tp: 0}
    consumer.close()


async def test_kafka_python_with_old_api_versions(start_broker: Any, log_events: Any) -> None:
    running = await start_broker({
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS"})
    with trio.fail_after(TIMEOUT * 4):
        await trio.to_thread.run_sync(kafka_python_old_admin, running.bootstrap,
                                      abandon_on_cancel=True)
    for event in ("invalid_request", "unsupported_api", "request_failed"):
        assert log_events.events(event) == [], event
    # the versions Kafka 4 removed really went over the wire
    for api in ("CreateTopics", "DeleteTopics", "DescribeConfigs", "CreateAcls", "DescribeAcls",
                "ListOffsets"):
        sent = {e["api_version"] for e in log_events.events("request", api=api)}
        assert 0 in sent, (api, sent)


# ------------------------------------------------------- produce and consume, formats v0/v1
#: kafka-python's api_version, the codec its producer uses, whether it can look offsets up by
#: timestamp (ListOffsets v1 came with 0.10.1), and the Produce and Fetch versions it sends.
#: (0, 10, x) writes message format v1; (0, 9) and (0, 8, 2) format v0 (kafka-python 3 still
#: offers both; (0, 8, 2) has no group membership: manual assignment, offsets committed to
#: Kafka with OffsetCommit v1).
OLD_CLIENTS = [
    ((0, 10, 0), "gzip", False, 2, 2),
    ((0, 10, 1), "snappy", True, 2, 3),
    ((0, 10, 2), "lz4", True, 2, 3),
    ((0, 9), "gzip", False, 1, 1),
    ((0, 8, 2), None, False, 0, 0),
]


def kafka_python_old_clients_round_trip(bootstrap: str, api_version: tuple[int, ...],
                                        codec: str | None, by_time: bool) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = "old-" + "-".join(map(str, api_version))
    group = topic + "-group"
    timeout_ms = int(TIMEOUT * 1000)

    def produce(values: list[bytes], timestamp: int | None = None) -> list[int]:
        producer = KafkaProducer(bootstrap_servers=bootstrap, api_version=api_version,
                                 compression_type=codec, request_timeout_ms=timeout_ms,
                                 linger_ms=5)
        futures = [producer.send(topic, key=b"k%d" % i, value=value, partition=0,
                                 timestamp_ms=timestamp)
                   for i, value in enumerate(values)]
        producer.flush(timeout=TIMEOUT)
        offsets = [f.get(timeout=TIMEOUT).offset for f in futures]
        producer.close(timeout=TIMEOUT)
        return offsets

    # Metadata v0 does not create topics; the admin client's CreateTopics v0 does.
    from kafka.admin import KafkaAdminClient, NewTopic
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, api_version=(0, 10, 1),
                             request_timeout_ms=timeout_ms)
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    admin.close()

    first = [b"first-%d" % i for i in range(20)]
    assert produce(first, 1_600_000_000_000) == list(range(20))

    def consume(expect: int) -> list[bytes]:
        consumer = KafkaConsumer(
            topic, bootstrap_servers=bootstrap, api_version=api_version, group_id=group,
            enable_auto_commit=False, auto_offset_reset="earliest",
            request_timeout_ms=timeout_ms + 1, session_timeout_ms=10_000,
            heartbeat_interval_ms=1_000, consumer_timeout_ms=int(TIMEOUT * 1000))
        got: list[bytes] = []
        for message in consumer:
            got.append(message.value)
            if api_version >= (0, 10):
                assert message.timestamp > 0, message
            if len(got) == expect:
                break
        consumer.commit()
        consumer.close()
        return got

    if api_version >= (0, 9):
        assert consume(20) == first
    second = [b"second-%d" % i for i in range(5)]
    assert produce(second) == list(range(20, 25))
    if api_version >= (0, 9):
        # a restarted member resumes from the group's commit
        assert consume(5) == second
    else:
        # (0, 8, 2): no group membership; manual assignment with offsets committed to Kafka
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, api_version=api_version,
                                 group_id=group, enable_auto_commit=False,
                                 request_timeout_ms=timeout_ms + 1,
                                 consumer_timeout_ms=int(TIMEOUT * 1000))
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        values = [m.value for _, m in zip(range(25), consumer, strict=False)]
        assert values == first + second
        consumer.commit()
        consumer.close()
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, api_version=api_version,
                                 group_id=group, enable_auto_commit=False,
                                 request_timeout_ms=timeout_ms + 1)
        consumer.assign([tp])
        assert consumer.committed(tp) == 25
        consumer.close()
    if by_time:
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, api_version=api_version,
                                 request_timeout_ms=timeout_ms + 1)
        tp = TopicPartition(topic, 0)
        found = consumer.offsets_for_times({tp: 1_600_000_000_000})[tp]
        assert found is not None and found.offset == 0, found
        later = consumer.offsets_for_times({tp: 1_600_000_000_001})[tp]
        assert later is not None and later.offset == 20, later
        consumer.close()


@pytest.mark.parametrize(("api_version", "codec", "by_time", "produce", "fetch"), OLD_CLIENTS,
                         ids=[".".join(map(str, c[0])) for c in OLD_CLIENTS])
async def test_kafka_python_old_formats_produce_and_consume(
        start_broker: Any, log_events: Any, api_version: tuple[int, ...], codec: str | None,
        by_time: bool, produce: int, fetch: int) -> None:
    """Produce v2 (0.10.x, format v1, with the codec), Produce v1/v0 (0.9/0.8.2, format v0),
    a group consumer (Fetch v3/v2/v1) that commits and resumes after a restart, and a
    timestamp lookup where the client has ListOffsets v1."""
    running = await start_broker()
    with trio.fail_after(TIMEOUT * 6):
        await trio.to_thread.run_sync(kafka_python_old_clients_round_trip, running.bootstrap,
                                      api_version, codec, by_time, abandon_on_cancel=True)
    for event in ("invalid_request", "unsupported_api", "request_failed"):
        assert log_events.events(event) == [], event
    produced = {e["api_version"] for e in log_events.events("request", api="Produce")}
    fetched = {e["api_version"] for e in log_events.events("request", api="Fetch")}
    assert (produced, fetched) == ({produce}, {fetch})
