"""Real clients over TLS and SASL against ``trio_broker run``: confluent-kafka (SCRAM-SHA-512
over SASL_SSL, mTLS, the AdminClient's SCRAM APIs, a wrong CA, a wrong password), kcat (PLAIN over
SASL_SSL), kafka-python (SCRAM-SHA-256 over SASL_SSL) and aiokafka (PLAIN over SASL_SSL).

The first SCRAM user is made with ``trio_broker scram`` before the broker starts, as an operator
bootstraps one. Certificates are made with trustme."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import free_port
from tests.security.conftest import Certs, make_certs

pytestmark = pytest.mark.interop

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_carol="carol-secret";')


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


class SecureBroker:
    def __init__(self, process: Any, sasl_port: int, ssl_port: int) -> None:
        self.process = process
        self.sasl = f"127.0.0.1:{sasl_port}"
        self.ssl = f"127.0.0.1:{ssl_port}"


@pytest.fixture
def secure_broker(broker_process: Any, certs: Certs, tmp_path: Path) -> Any:
    """A broker with a SASL_SSL listener (PLAIN, SCRAM-SHA-256/512) and an mTLS SSL listener;
    alice has SCRAM credentials made offline with ``trio_broker scram``."""

    def start(**extra: str) -> SecureBroker:
        data_dir = tmp_path / "secure-data"
        subprocess.run(
            [sys.executable, "-m", "trio_broker", "scram", "--data-dir", str(data_dir),
             "--alter", "--entity-type", "users", "--entity-name", "alice", "--add-config",
             "SCRAM-SHA-256=[iterations=8192,password=alice-secret],"
             "SCRAM-SHA-512=[password=alice-secret]"], check=True, capture_output=True)
        sasl_port, ssl_port = free_port(), free_port()
        process = broker_process({
            "listeners": f"SASL_SSL://127.0.0.1:{sasl_port},SSL://127.0.0.1:{ssl_port}",
            "log.dirs": str(data_dir),
            "ssl.keystore.location": str(certs.keystore),
            "ssl.truststore.location": str(certs.ca_pem),
            "listener.name.ssl.ssl.client.auth": "required",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
            **extra})
        return SecureBroker(process, sasl_port, ssl_port)

    return start


def confluent_sasl(broker: SecureBroker, certs: Certs, user: str = "alice",
                   password: str = "alice-secret", mechanism: str = "SCRAM-SHA-512"
                   ) -> dict[str, Any]:
    return {"bootstrap.servers": broker.sasl, "security.protocol": "SASL_SSL",
            "sasl.mechanisms": mechanism, "sasl.username": user, "sasl.password": password,
            "ssl.ca.location": str(certs.ca_pem)}


def produce_and_consume(config: dict[str, Any], topic: str) -> list[bytes]:
    from confluent_kafka import Consumer, Producer

    producer = Producer(config)
    for index in range(3):
        producer.produce(topic, f"m{index}".encode())
    assert producer.flush(20) == 0
    consumer = Consumer({**config, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < 3 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            values.append(message.value())
    consumer.close()
    return values


def test_confluent_scram_sha_512_over_sasl_ssl(secure_broker: Any, certs: Certs) -> None:
    broker = secure_broker()
    assert produce_and_consume(confluent_sasl(broker, certs), "secure-t") == [b"m0", b"m1", b"m2"]
    broker.process.stop()
    succeeded = broker.process.events("authentication_succeeded")
    assert succeeded and {(e["mechanism"], e["principal"]) for e in succeeded} == {
        ("SCRAM-SHA-512", "User:alice")}
    requests = [e for e in broker.process.events("request") if e["api"] in ("Produce", "Fetch")]
    assert requests and {e["principal"] for e in requests} == {"User:alice"}
    assert {e["security_protocol"] for e in requests} == {"SASL_SSL"}
    assert not broker.process.events("authentication_failed")


def test_confluent_admin_adds_a_scram_user_who_then_logs_in(secure_broker: Any,
                                                            certs: Certs) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    broker = secure_broker()
    admin = AdminClient(confluent_sasl(broker, certs))
    upsert = UserScramCredentialUpsertion(
        "bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"bob-secret")
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=20)
    described = admin.describe_user_scram_credentials(["alice", "bob"])
    described = {user: f.result(timeout=20) for user, f in described.items()}
    assert [(i.mechanism, i.iterations)
            for i in described["bob"].scram_credential_infos] == [(ScramMechanism.SCRAM_SHA_256,
                                                                   8192)]
    assert len(described["alice"].scram_credential_infos) == 2
    bob = confluent_sasl(broker, certs, "bob", "bob-secret", "SCRAM-SHA-256")
    assert produce_and_consume(bob, "bob-t") == [b"m0", b"m1", b"m2"]
    broker.process.stop()
    principals = {e["principal"] for e in broker.process.events("authentication_succeeded")}
    assert principals == {"User:alice", "User:bob"}


def test_confluent_wrong_password_fails_and_the_broker_keeps_serving(secure_broker: Any,
                                                                     certs: Certs) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    broker = secure_broker()
    errors: list[Any] = []
    bad = AdminClient({**confluent_sasl(broker, certs, password="wrong"),
                       "error_cb": errors.append})
    with pytest.raises(KafkaException):
        bad.list_topics(timeout=5)
    bad.poll(1)  # delivers the errors to error_cb
    assert any("Authentication failed during authentication due to invalid credentials with "
               "SASL mechanism SCRAM-SHA-512" in str(e) for e in errors), errors
    del bad
    good = AdminClient(confluent_sasl(broker, certs))
    assert good.list_topics(timeout=10).brokers
    broker.process.stop()
    failed = broker.process.events("authentication_failed")
    assert failed and failed[0]["principal"] == "User:alice"
    assert failed[0]["error"] == "SASL_AUTHENTICATION_FAILED"
    requests = broker.process.events("request")
    assert any(e["api"] == "SaslAuthenticate" and e["error"] == "SASL_AUTHENTICATION_FAILED"
               for e in requests)


def test_confluent_mtls_principal_from_the_client_certificate(secure_broker: Any,
                                                              certs: Certs) -> None:
    from confluent_kafka.admin import AdminClient

    broker = secure_broker()
    admin = AdminClient({"bootstrap.servers": broker.ssl, "security.protocol": "SSL",
                         "ssl.ca.location": str(certs.ca_pem),
                         "ssl.certificate.location": str(certs.client_cert_pem),
                         "ssl.key.location": str(certs.client_key_pem)})
    assert admin.list_topics(timeout=10).brokers[1].port == int(broker.ssl.rsplit(":")[1])
    broker.process.stop()
    principal = "User:CN=alice,OU=eng,O=trustme v1.2.1"
    assert {e["principal"] for e in broker.process.events("authentication_succeeded")} == {
        principal}
    assert {e["principal"] for e in broker.process.events("request")} == {principal}


def test_confluent_with_the_wrong_ca_fails(secure_broker: Any, certs: Certs) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    broker = secure_broker()
    errors: list[Any] = []
    admin = AdminClient({**confluent_sasl(broker, certs), "ssl.ca.location":
                         str(certs.other_ca_pem), "error_cb": errors.append})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
    admin.poll(1)  # delivers the errors to error_cb
    assert any("certificate verify failed" in str(e) for e in errors), errors
    del admin
    broker.process.stop()
    closed = [e for e in broker.process.events("connection_closed")
              if e["reason"] == "ssl_handshake_failed"]
    assert closed and closed[0]["peer"].startswith("127.0.0.1:")
    assert not broker.process.events("request")


def test_kcat_plain_over_sasl_ssl(secure_broker: Any, certs: Certs) -> None:
    kcat = shutil.which("kcat")
    assert kcat, "kcat is required (.ci/run installs the Debian package)"
    broker = secure_broker()
    security = ["-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanisms=PLAIN",
                "-X", "sasl.username=carol", "-X", "sasl.password=carol-secret",
                "-X", f"ssl.ca.location={certs.ca_pem}"]
    subprocess.run([kcat, "-P", "-b", broker.sasl, "-t", "kcat-secure", *security],
                   input="one\ntwo\n", text=True, check=True, timeout=30)
    result = subprocess.run([kcat, "-C", "-b", broker.sasl, "-t", "kcat-secure", "-e", "-o",
                             "beginning", *security],
                            capture_output=True, text=True, check=True, timeout=30)
    assert result.stdout.split() == ["one", "two"]
    broker.process.stop()
    assert {(e["mechanism"], e["principal"])
            for e in broker.process.events("authentication_succeeded")} == {
        ("PLAIN", "User:carol")}


def test_kafka_python_scram_sha_256_over_sasl_ssl(secure_broker: Any, certs: Certs) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    broker = secure_broker()
    options = {"bootstrap_servers": broker.sasl, "security_protocol": "SASL_SSL",
               "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": "alice",
               "sasl_plain_password": "alice-secret", "ssl_cafile": str(certs.ca_pem)}
    producer = KafkaProducer(**options)
    for index in range(3):
        producer.send("kp-secure", f"v{index}".encode())
    producer.flush(20)
    producer.close()
    consumer = KafkaConsumer("kp-secure", auto_offset_reset="earliest",
                             consumer_timeout_ms=10000, **options)
    values = [m.value for m in consumer][:3]
    consumer.close()
    assert values == [b"v0", b"v1", b"v2"]
    broker.process.stop()
    assert {(e["mechanism"], e["principal"])
            for e in broker.process.events("authentication_succeeded")} == {
        ("SCRAM-SHA-256", "User:alice")}


async def test_aiokafka_plain_over_sasl_ssl(secure_broker: Any, certs: Certs) -> None:
    import asyncio

    import trio
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    broker = secure_broker()

    async def run() -> list[bytes]:
        options = {"bootstrap_servers": broker.sasl, "security_protocol": "SASL_SSL",
                   "sasl_mechanism": "PLAIN", "sasl_plain_username": "carol",
                   "sasl_plain_password": "carol-secret",
                   "ssl_context": create_ssl_context(cafile=str(certs.ca_pem))}
        producer = AIOKafkaProducer(**options)
        await producer.start()
        try:
            for index in range(3):
                await producer.send_and_wait("aio-secure", f"a{index}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer("aio-secure", auto_offset_reset="earliest", **options)
        await consumer.start()
        try:
            values = []
            async with asyncio.timeout(20):
                async for message in consumer:
                    values.append(message.value)
                    if len(values) == 3:
                        break
            return values
        finally:
            await consumer.stop()

    values = await trio.to_thread.run_sync(lambda: asyncio.run(run()))
    assert values == [b"a0", b"a1", b"a2"]
    broker.process.stop()
    assert {(e["mechanism"], e["principal"])
            for e in broker.process.events("authentication_succeeded")} == {
        ("PLAIN", "User:carol")}


def test_secure_client_example(secure_broker: Any, certs: Certs) -> None:
    """examples/secure_client.py as its docstring shows it: SCRAM-SHA-512 over SASL_SSL, and
    mTLS on the SSL listener."""
    broker = secure_broker()
    example = Path(__file__).resolve().parents[2] / "examples" / "secure_client.py"
    scram = subprocess.run(
        [sys.executable, str(example), "--bootstrap", broker.sasl, "--ca", str(certs.ca_pem),
         "--user", "alice", "--password", "alice-secret"],
        capture_output=True, text=True, timeout=90)
    assert scram.returncode == 0, scram.stderr
    assert "produced 5 messages" in scram.stdout and "secret message 4" in scram.stdout
    mtls = subprocess.run(
        [sys.executable, str(example), "--bootstrap", broker.ssl, "--ca", str(certs.ca_pem),
         "--cert", str(certs.client_cert_pem), "--key", str(certs.client_key_pem),
         "--topic", "mtls-example"], capture_output=True, text=True, timeout=90)
    assert mtls.returncode == 0, mtls.stderr
    broker.process.stop()
    principals = {e["principal"] for e in broker.process.events("authentication_succeeded")}
    assert principals == {"User:alice", "User:CN=alice,OU=eng,O=trustme v1.2.1"}
