"""Features and the metadata quorum with an unmodified client: kafka-python's KafkaAdminClient
(``describe_features``, ``update_features``, ``describe_metadata_quorum``).

No interop test runs a Java client, and confluent-kafka's AdminClient (librdkafka) has none of
these calls; kafka-python's admin client has all three. Each session runs in a worker thread with
its own timeout, so a misbehaving broker fails the test instead of hanging it.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

pytestmark = pytest.mark.interop

TIMEOUT = 30.0
PREFIX = "The update failed for all features since the following feature had an error: "


def kafka_python_features_session(bootstrap: str, port: int) -> None:
    from kafka.admin import KafkaAdminClient
    from kafka.errors import InvalidUpdateVersionError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000,
                             client_id="interop-features")
    try:
        features = admin.describe_features()
        assert {name: f["supported"] for name, f in features.items()} == {
            "group.version": (0, 1), "kraft.version": (0, 1),
            "metadata.version": (7, 25), "transaction.version": (0, 2)}
        assert {name: f["finalized"] for name, f in features.items() if "finalized" in f} == {
            "group.version": (1, 1), "metadata.version": (25, 25), "transaction.version": (2, 2)}
        epoch = features["metadata.version"]["finalized_epoch"]

        # A feature this node cannot finalize fails the whole request (Kafka 4.0).
        with pytest.raises(InvalidUpdateVersionError) as refused:
            admin.update_features({"transaction.version": 3, "group.version": 1})
        assert PREFIX + ("Invalid update version 3 for feature transaction.version. Local "
                         "controller 1 only supports versions 0-2") in str(refused.value)
        assert admin.update_features({"kraft.version": 1}, validate_only=True) == {
            "kraft.version": "OK"}
        assert "finalized" not in admin.describe_features()["kraft.version"]

        assert admin.update_features({"kraft.version": 1}) == {"kraft.version": "OK"}
        after = admin.describe_features()
        assert after["kraft.version"]["finalized"] == (1, 1)
        assert after["kraft.version"]["finalized_epoch"] == epoch + 1

        quorum = admin.describe_metadata_quorum()
        (topic,) = quorum["topics"]
        (partition,) = topic["partitions"]
        assert topic["topic_name"] == "__cluster_metadata"
        assert (partition["leader_id"], partition["leader_epoch"], partition["error"]) == (
            1, 1, None)
        assert partition["high_watermark"] == epoch + 2
        assert [v["replica_id"] for v in partition["current_voters"]] == [1]
        assert partition["observers"] == []
        (node,) = quorum["nodes"]
        assert node["node_id"] == 1
        assert [(listener["host"], listener["port"]) for listener in node["listeners"]] == [
            ("127.0.0.1", port)]
    finally:
        admin.close()


async def test_kafka_python_features_and_quorum(broker: Any) -> None:
    with trio.fail_after(TIMEOUT + 5):
        await trio.to_thread.run_sync(kafka_python_features_session, broker.bootstrap,
                                      broker.port, abandon_on_cancel=True)
