"""Topic administration with unmodified clients: confluent-kafka's AdminClient and kafka-python's.

The broker runs in-process (the ``broker`` fixture); each client call runs in a worker thread
with its own timeout, so a misbehaving broker fails the test instead of hanging it.
"""

from __future__ import annotations

import uuid
import warnings
from typing import Any

import pytest
import trio
from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

pytestmark = pytest.mark.interop

TIMEOUT = 15.0


def _error_code(future: Any) -> int:
    """The KafkaError code a confluent-kafka future failed with (NO_ERROR if it succeeded)."""
    try:
        future.result(timeout=TIMEOUT)
    except KafkaException as exc:
        return int(exc.args[0].code())
    return int(KafkaError.NO_ERROR)


def _topic_configs(admin: AdminClient, topic: str) -> dict[str, Any]:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    future = admin.describe_configs([resource], request_timeout=TIMEOUT)[resource]
    return dict(future.result(timeout=TIMEOUT))


def confluent_admin_session(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})

    # create: two topics, one with a config override
    futures = admin.create_topics(
        [NewTopic("alpha", num_partitions=3, replication_factor=1,
                  config={"retention.ms": "3600000"}),
         NewTopic("beta", num_partitions=1, replication_factor=1)],
        request_timeout=TIMEOUT)
    assert {name: _error_code(f) for name, f in futures.items()} == {
        "alpha": KafkaError.NO_ERROR, "beta": KafkaError.NO_ERROR}
    futures = admin.create_topics(
        [NewTopic("alpha", num_partitions=1, replication_factor=1),
         NewTopic("gamma", num_partitions=1, replication_factor=3),
         NewTopic("bad name", num_partitions=1, replication_factor=1),
         NewTopic("delta", num_partitions=1, replication_factor=1,
                  config={"retention.ms": "later"})],
        request_timeout=TIMEOUT)
    assert {name: _error_code(f) for name, f in futures.items()} == {
        "alpha": KafkaError.TOPIC_ALREADY_EXISTS,
        "gamma": KafkaError.INVALID_REPLICATION_FACTOR,
        "bad name": KafkaError.TOPIC_EXCEPTION,
        "delta": KafkaError.INVALID_CONFIG,
    }
    futures = admin.create_topics([NewTopic("dry", num_partitions=2, replication_factor=1)],
                                  validate_only=True, request_timeout=TIMEOUT)
    assert _error_code(futures["dry"]) == KafkaError.NO_ERROR

    # list: partitions led by this node, replicas and ISR this node only
    metadata = admin.list_topics(timeout=TIMEOUT)
    assert {n: len(t.partitions) for n, t in metadata.topics.items()
            if not n.startswith("__")} == {"alpha": 3, "beta": 1}
    (node,) = metadata.brokers
    for partition in metadata.topics["alpha"].partitions.values():
        assert (partition.leader, partition.replicas, partition.isrs) == (node, [node], [node])
    assert metadata.controller_id == node
    assert metadata.cluster_id

    # describe topics (Metadata with authorized operations)
    described = admin.describe_topics(TopicCollection(["alpha", "nope"]),
                                      request_timeout=TIMEOUT)
    alpha = described["alpha"].result(timeout=TIMEOUT)
    assert (alpha.name, alpha.is_internal, len(alpha.partitions)) == ("alpha", False, 3)
    assert [p.leader.id for p in alpha.partitions] == [node] * 3
    assert alpha.topic_id is not None
    assert _error_code(described["nope"]) == KafkaError.UNKNOWN_TOPIC_OR_PART

    # describe: the override with its source, the rest from the broker's defaults
    configs = _topic_configs(admin, "alpha")
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["cleanup.policy"].value == "delete"
    resource = ConfigResource(ResourceType.TOPIC, "nope")
    future = admin.describe_configs([resource], request_timeout=TIMEOUT)[resource]
    assert _error_code(future) == KafkaError.UNKNOWN_TOPIC_OR_PART
    broker_resource = ConfigResource(ResourceType.BROKER, str(node))
    broker_configs = admin.describe_configs([broker_resource], request_timeout=TIMEOUT)[
        broker_resource].result(timeout=TIMEOUT)
    assert broker_configs["num.partitions"].value == "1"
    assert broker_configs["node.id"].value == str(node)

    # alter, incrementally: SET one key, DELETE another override
    resource = ConfigResource(ResourceType.TOPIC, "alpha", incremental_configs=[
        ConfigEntry("segment.bytes", "1048576", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
    ])
    future = admin.incremental_alter_configs([resource], request_timeout=TIMEOUT)[resource]
    assert _error_code(future) == KafkaError.NO_ERROR
    configs = _topic_configs(admin, "alpha")
    assert configs["segment.bytes"].value == "1048576"
    assert configs["segment.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["retention.ms"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    # alter, the legacy way (replaces every override of the topic)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        resource = ConfigResource(ResourceType.TOPIC, "alpha",
                                  set_config={"retention.bytes": "1000000"})
        future = admin.alter_configs([resource], request_timeout=TIMEOUT)[resource]
    assert _error_code(future) == KafkaError.NO_ERROR
    configs = _topic_configs(admin, "alpha")
    assert configs["retention.bytes"].value == "1000000"
    assert configs["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value

    # broker configs are static
    resource = ConfigResource(ResourceType.BROKER, str(node), incremental_configs=[
        ConfigEntry("num.io.threads", "4", incremental_operation=AlterConfigOpType.SET)])
    future = admin.incremental_alter_configs([resource], request_timeout=TIMEOUT)[resource]
    assert _error_code(future) == KafkaError.INVALID_REQUEST

    # create partitions: only upwards
    futures = admin.create_partitions([NewPartitions("alpha", 5)], request_timeout=TIMEOUT)
    assert _error_code(futures["alpha"]) == KafkaError.NO_ERROR
    futures = admin.create_partitions([NewPartitions("alpha", 2), NewPartitions("nope", 2)],
                                      request_timeout=TIMEOUT)
    assert {n: _error_code(f) for n, f in futures.items()} == {
        "alpha": KafkaError.INVALID_PARTITIONS, "nope": KafkaError.UNKNOWN_TOPIC_OR_PART}
    metadata = admin.list_topics(timeout=TIMEOUT)
    assert len(metadata.topics["alpha"].partitions) == 5

    # describe the cluster
    cluster = admin.describe_cluster(request_timeout=TIMEOUT).result(timeout=TIMEOUT)
    assert cluster.cluster_id == metadata.cluster_id
    assert [n.id for n in cluster.nodes] == [node]

    # delete
    futures = admin.delete_topics(["beta", "nope"], request_timeout=TIMEOUT)
    assert {n: _error_code(f) for n, f in futures.items()} == {
        "beta": KafkaError.NO_ERROR, "nope": KafkaError.UNKNOWN_TOPIC_OR_PART}
    metadata = admin.list_topics(timeout=TIMEOUT)
    assert {n for n in metadata.topics if not n.startswith("__")} == {"alpha"}


def assert_no_refusals(log_events: Any) -> None:
    """The broker closed no connection for a request it did not understand or failed on."""
    for event in ("invalid_request", "request_failed"):
        assert log_events.events(event) == [], event


async def test_confluent_admin_client(broker: Any, log_events: Any) -> None:
    with trio.fail_after(90):
        await trio.to_thread.run_sync(confluent_admin_session, broker.bootstrap,
                                         abandon_on_cancel=True)
    assert {n for n in broker.broker.log_manager.topics if not n.startswith("__")} == {"alpha"}
    assert_no_refusals(log_events)
    assert not any(p.name.startswith("beta-") for p in broker.data_dir.iterdir())


def kafka_python_admin_session(bootstrap: str) -> None:
    from kafka.admin import ConfigResource as KpConfigResource
    from kafka.admin import KafkaAdminClient
    from kafka.errors import (
        InvalidPartitionsError,
        InvalidReplicationFactorError,
        TopicAlreadyExistsError,
    )

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000,
                             client_id="interop-admin")
    try:
        admin.create_topics({"kp": {"num_partitions": 2, "replication_factor": 1,
                                    "configs": {"retention.ms": "100000"}}})
        assert "kp" in admin.list_topics()
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics({"kp": {"num_partitions": 1, "replication_factor": 1}})
        with pytest.raises(InvalidReplicationFactorError):
            admin.create_topics({"kp3": {"num_partitions": 1, "replication_factor": 3}})
        (described,) = admin.describe_topics(["kp"])
        assert described["name"] == "kp"
        assert len(described["partitions"]) == 2
        # By topic id (Metadata v12).
        topic_id = described["topic_id"]
        (by_id,) = admin.describe_topics([uuid.UUID(str(topic_id))])
        assert by_id["name"] == "kp"

        configs = admin.describe_configs([KpConfigResource("TOPIC", "kp")])
        assert configs["topic"]["kp"]["retention.ms"]["value"] == "100000"
        admin.alter_configs([KpConfigResource("TOPIC", "kp", configs={"retention.ms": "200000"})])
        configs = admin.describe_configs([KpConfigResource("TOPIC", "kp")], config_filter="all")
        assert configs["topic"]["kp"]["retention.ms"]["value"] == "200000"
        assert configs["topic"]["kp"]["segment.bytes"]["value"] == "1073741824"

        admin.create_partitions({"kp": 4})
        (described,) = admin.describe_topics(["kp"])
        assert len(described["partitions"]) == 4
        with pytest.raises(InvalidPartitionsError):
            admin.create_partitions({"kp": 3})

        cluster = admin.describe_cluster()
        assert [b["broker_id"] for b in cluster["brokers"]] == [cluster["controller_id"]]

        admin.delete_topics(["kp"])
        assert "kp" not in admin.list_topics()
    finally:
        admin.close()


async def test_kafka_python_admin_client(broker: Any, log_events: Any) -> None:
    with trio.fail_after(90):
        await trio.to_thread.run_sync(kafka_python_admin_session, broker.bootstrap,
                                         abandon_on_cancel=True)
    assert "kp" not in broker.broker.log_manager.topics
    assert_no_refusals(log_events)
