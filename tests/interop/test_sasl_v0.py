"""kafka-python 3.0 pinned to ``api_version=(0, 10, 1)`` over SASL_PLAINTEXT against ``trio_broker
run``: such a client sends SaslHandshake v0 and then bare, size-prefixed SASL tokens (its
``SaslBytesRequest``), as Kafka 0.10 clients did (issue 33). PLAIN and SCRAM-SHA-256 log in;
Metadata, the list of topics and an old Produce work under the principal they logged in as."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from tests.conftest import free_port

pytestmark = pytest.mark.interop

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_carol="carol-secret";')


@pytest.fixture
def sasl_broker(broker_process: Any, tmp_path: Any) -> Any:
    """A broker with one SASL_PLAINTEXT listener; carol is a PLAIN user and has SCRAM-SHA-256
    credentials made offline with ``trio_broker scram``."""
    data_dir = tmp_path / "v0-data"
    subprocess.run(
        [sys.executable, "-m", "trio_broker", "scram", "--data-dir", str(data_dir), "--alter",
         "--entity-type", "users", "--entity-name", "carol", "--add-config",
         "SCRAM-SHA-256=[iterations=8192,password=carol-secret]"],
        check=True, capture_output=True)
    port = free_port()
    process = broker_process({
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}", "log.dirs": str(data_dir),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS})
    process.port = port
    return process


def old_client(broker: Any, mechanism: str) -> dict[str, Any]:
    return {"bootstrap_servers": broker.bootstrap, "api_version": (0, 10, 1),
            "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism,
            "sasl_plain_username": "carol", "sasl_plain_password": "carol-secret",
            "request_timeout_ms": 10000}


def handshakes(broker: Any) -> set[int]:
    return {e["api_version"] for e in broker.events("request") if e["api"] == "SaslHandshake"}


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_kafka_python_0_10_1_lists_topics_after_a_v0_login(sasl_broker: Any,
                                                           mechanism: str) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(**old_client(sasl_broker, mechanism))
    admin.create_topics([NewTopic("old-t", 1, 1)])
    assert "old-t" in admin.list_topics()
    admin.close()
    consumer = KafkaConsumer(**old_client(sasl_broker, mechanism))
    assert "old-t" in consumer.topics()
    assert consumer.partitions_for_topic("old-t") == {0}
    consumer.close()
    sasl_broker.stop()
    assert handshakes(sasl_broker) == {0}  # the bare-token path, nothing else
    assert not sasl_broker.events("authentication_failed")
    succeeded = sasl_broker.events("authentication_succeeded")
    assert succeeded and {(e["mechanism"], e["principal"]) for e in succeeded} == {
        (mechanism, "User:carol")}
    metadata = [e for e in sasl_broker.events("request") if e["api"] == "Metadata"]
    assert metadata and {e["principal"] for e in metadata} == {"User:carol"}
    assert {e["reason"] for e in sasl_broker.events("connection_closed")} <= {
        "client", "shutdown"}


def test_kafka_python_0_10_1_produces_after_a_v0_login(sasl_broker: Any) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(**old_client(sasl_broker, "PLAIN"))
    producer.send("old-p", b"hello").get(20)
    producer.close()
    sasl_broker.stop()
    assert handshakes(sasl_broker) == {0}
    produce = [e for e in sasl_broker.events("request") if e["api"] == "Produce"]
    assert produce and {e["principal"] for e in produce} == {"User:carol"}
