"""kafka-python 3 pinned to old brokers' protocol (``api_version`` (0, 10, 0) to (0, 11, 0)): it
sends versions Kafka 4 removed (CreateTopics v0, DeleteTopics v0, DescribeConfigs v0, CreateAcls
and DescribeAcls v0, ListOffsets v0) and gets a Kafka 3.9 broker's answers. No produce or
consume: those old versions wait for message formats v0/v1."""

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
