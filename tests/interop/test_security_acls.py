"""Authentication, ACLs and quotas together, as a Kafka user runs them: SCRAM-SHA-512 users made
with ``trio_broker scram`` before the broker starts, a SASL_SSL listener (trustme certificates),
``authorizer.class.name=standard`` with ``super.users=User:admin``, and unmodified librdkafka
clients (confluent-kafka) for the admin, producers and consumers.

The principals are the SASL users (``User:alice``...) or, on the mTLS listener, the client
certificate's subject; every ACL below names them (``User:ANONYMOUS`` only for the operator
tools on the loopback PLAINTEXT listener). Covered: producer, consumer, prefixed and DENY ACLs,
transactional ids (consume-transform-produce), mTLS subjects, authorized operations, client
quotas by SASL user, the authentication metrics, who may change SCRAM credentials, and
docs/security.md's end-to-end example run as written.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from tests.conftest import free_port
from tests.interop.test_acls import create as create_acls
from tests.security.conftest import Certs, make_certs

pytestmark = pytest.mark.interop

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret",
         "carol": "carol-secret", "dave": "dave-secret"}
MTLS_PRINCIPAL = "User:CN=alice,OU=eng,O=trustme v1.2.1"
DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


class Cluster:
    """A started broker and how each user reaches it."""

    def __init__(self, process: Any, certs: Certs, sasl: str, ssl: str, plain: str) -> None:
        self.process = process
        self.certs = certs
        self.sasl = sasl
        self.ssl = ssl
        self.plain = plain

    def client(self, user: str, **extra: Any) -> dict[str, Any]:
        """librdkafka settings of ``user`` (SCRAM-SHA-512 over SASL_SSL)."""
        return {"bootstrap.servers": self.sasl, "security.protocol": "SASL_SSL",
                "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": user,
                "sasl.password": USERS[user], "ssl.ca.location": str(self.certs.ca_pem),
                **extra}

    def mtls_client(self, **extra: Any) -> dict[str, Any]:
        return {"bootstrap.servers": self.ssl, "security.protocol": "SSL",
                "ssl.ca.location": str(self.certs.ca_pem),
                "ssl.certificate.location": str(self.certs.client_cert_pem),
                "ssl.key.location": str(self.certs.client_key_pem), **extra}

    def admin(self) -> AdminClient:
        return AdminClient(self.client("admin"))


def scram_user(data_dir: Path, user: str, password: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "trio_broker", "scram", "--data-dir", str(data_dir), "--alter",
         "--entity-type", "users", "--entity-name", user, "--add-config",
         f"SCRAM-SHA-512=[iterations=8192,password={password}]"],
        check=True, capture_output=True, timeout=60)


@pytest.fixture
def cluster(broker_process: Any, certs: Certs, tmp_path: Path) -> Any:
    """Start a broker with SASL_SSL, mTLS (SSL, client auth required) and PLAINTEXT (for the
    operator tools, which speak PLAINTEXT only) listeners, the ACL authorizer on."""

    def start(**extra: str) -> Cluster:
        data_dir = tmp_path / "data"
        for user, password in USERS.items():
            scram_user(data_dir, user, password)
        sasl, ssl, plain = free_port(), free_port(), free_port()
        process = broker_process({
            "listeners": f"SASL_SSL://127.0.0.1:{sasl},SSL://127.0.0.1:{ssl},"
                         f"PLAINTEXT://127.0.0.1:{plain}",
            "log.dirs": str(data_dir),
            "ssl.keystore.location": str(certs.keystore),
            "ssl.truststore.location": str(certs.ca_pem),
            "listener.name.ssl.ssl.client.auth": "required",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "authorizer.class.name": "standard",
            "super.users": "User:admin",
            **extra})
        return Cluster(process, certs, f"127.0.0.1:{sasl}", f"127.0.0.1:{ssl}",
                       f"127.0.0.1:{plain}")

    return start


def acl(rt: ResourceType, name: str, principal: str, op: AclOperation,
        perm: AclPermissionType = AclPermissionType.ALLOW,
        pattern: ResourcePatternType = ResourcePatternType.LITERAL) -> AclBinding:
    return AclBinding(rt, name, pattern, principal, "*", op, perm)


def producer_acls(topic: str, principal: str) -> list[AclBinding]:
    """What an idempotent producer needs: WRITE and DESCRIBE on the topic, IDEMPOTENT_WRITE on
    the cluster."""
    return [acl(ResourceType.TOPIC, topic, principal, AclOperation.WRITE),
            acl(ResourceType.TOPIC, topic, principal, AclOperation.DESCRIBE),
            acl(ResourceType.BROKER, "kafka-cluster", principal, AclOperation.IDEMPOTENT_WRITE)]


def create_topics(admin: AdminClient, *names: str) -> None:
    for future in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        future.result(timeout=20)


def produce(config: dict[str, Any], topic: str, count: int = 3) -> KafkaError | None:
    """Produce ``count`` records; the first delivery error (None when all were written)."""
    producer = Producer({"message.timeout.ms": 10000, **config})
    outcome: list[KafkaError | None] = []
    for index in range(count):
        producer.produce(topic, f"m{index}".encode(),
                         on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(20)
    assert len(outcome) == count, "missing delivery reports"
    return next((err for err in outcome if err is not None), None)


def consume(config: dict[str, Any], topic: str, group: str, count: int = 3
            ) -> list[bytes] | KafkaError:
    """Subscribe in ``group``: ``count`` record values, or the first error the consumer
    reports."""
    consumer = Consumer({**config, "group.id": group, "auto.offset.reset": "earliest",
                         "session.timeout.ms": 6000})
    consumer.subscribe([topic])
    values: list[bytes] = []
    try:
        deadline = time.monotonic() + 30
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                return error
            value = message.value()
            assert value is not None
            values.append(value)
        return values
    finally:
        consumer.close()


def code(result: Any) -> int | None:
    return result.code() if isinstance(result, KafkaError) else None


def test_producer_and_consumer_acls_for_sasl_users(cluster: Any) -> None:
    broker = cluster()
    admin = broker.admin()
    create_topics(admin, "orders")
    create_acls(admin, *producer_acls("orders", "User:alice"))
    alice = broker.client("alice", **{"enable.idempotence": True})
    assert produce(alice, "orders") is None

    # bob may read the topic (READ implies DESCRIBE, so he sees it) but not write it.
    create_acls(admin, acl(ResourceType.TOPIC, "orders", "User:bob", AclOperation.READ))
    bob = broker.client("bob")
    assert code(produce(bob, "orders")) == KafkaError.TOPIC_AUTHORIZATION_FAILED

    # READ on the topic but none on the group: the group coordinator refuses bob.
    assert code(consume(bob, "orders", "billing")) == KafkaError.GROUP_AUTHORIZATION_FAILED
    create_acls(admin, acl(ResourceType.GROUP, "billing", "User:bob", AclOperation.READ))
    assert consume(bob, "orders", "billing") == [b"m0", b"m1", b"m2"]

    broker.process.stop()
    requests = broker.process.events("request")
    by_api: dict[tuple[str, str], set[str]] = {}
    for event in requests:
        by_api.setdefault((event["principal"], event["api"]), set()).add(event["error"])
    assert by_api[("User:alice", "InitProducerId")] == {"NONE"}
    assert by_api[("User:alice", "Produce")] == {"NONE"}
    assert by_api[("User:bob", "Produce")] == {"TOPIC_AUTHORIZATION_FAILED"}
    assert ("User:bob", "Fetch") in by_api and ("User:bob", "JoinGroup") in by_api
    assert ("User:ANONYMOUS", "Produce") not in by_api
    denied = broker.process.events("authorization_denied")
    assert any(e["principal"] == "User:bob" and e["operation"] == "WRITE"
               and e["resource_type"] == "TOPIC" and e["resource_name"] == "orders"
               for e in denied), denied
    # FindCoordinator needs DESCRIBE on the group (READ implies it), as in Kafka
    assert any(e["principal"] == "User:bob" and e["operation"] == "DESCRIBE"
               and e["resource_type"] == "GROUP" and e["resource_name"] == "billing"
               for e in denied), denied
    assert {e["principal"] for e in denied} == {"User:bob"}


def test_prefixed_acls_and_deny_over_allow(cluster: Any) -> None:
    broker = cluster()
    admin = broker.admin()
    create_topics(admin, "carol-events", "orders", "audit")
    prefixed = ResourcePatternType.PREFIXED
    create_acls(admin,
                acl(ResourceType.TOPIC, "carol-", "User:carol", AclOperation.WRITE,
                    pattern=prefixed),
                acl(ResourceType.TOPIC, "carol-", "User:carol", AclOperation.DESCRIBE,
                    pattern=prefixed),
                # dave may do everything on every topic, except write to orders
                acl(ResourceType.TOPIC, "*", "User:dave", AclOperation.ALL),
                acl(ResourceType.TOPIC, "orders", "User:dave", AclOperation.WRITE,
                    AclPermissionType.DENY))
    assert produce(broker.client("carol"), "carol-events") is None
    assert code(produce(broker.client("carol"), "audit")) == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce(broker.client("dave"), "audit") is None
    assert code(produce(broker.client("dave"), "orders")) == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    # What applies to carol-events, as kafka-acls.sh --list --resource-pattern-type match
    matching = admin.describe_acls(AclBindingFilter(
        ResourceType.TOPIC, "carol-events", ResourcePatternType.MATCH,
        None, None,  # type: ignore[arg-type]  # None: any principal, any host
        AclOperation.ANY, AclPermissionType.ANY)).result(timeout=20)
    assert sorted((b.principal, b.name, b.operation.name) for b in matching) == [
        ("User:carol", "carol-", "DESCRIBE"), ("User:carol", "carol-", "WRITE"),
        ("User:dave", "*", "ALL")]
    broker.process.stop()
    denied = [(e["principal"], e["operation"], e["resource_name"], e["reason"])
              for e in broker.process.events("authorization_denied")
              if e["resource_type"] == "TOPIC"]
    assert ("User:dave", "WRITE", "orders", "denied by ACL") in denied
    assert ("User:carol", "WRITE", "audit", "no matching ALLOW ACL") in denied \
        or ("User:carol", "DESCRIBE", "audit", "no matching ALLOW ACL") in denied


def test_transactional_producer_needs_write_on_its_transactional_id(cluster: Any) -> None:
    broker = cluster()
    admin = broker.admin()
    create_topics(admin, "orders", "invoices")
    assert produce(broker.client("admin"), "orders") is None
    create_acls(admin,
                acl(ResourceType.TOPIC, "orders", "User:alice", AclOperation.READ),
                acl(ResourceType.TOPIC, "invoices", "User:alice", AclOperation.WRITE),
                acl(ResourceType.TOPIC, "invoices", "User:alice", AclOperation.DESCRIBE),
                acl(ResourceType.GROUP, "invoicer", "User:alice", AclOperation.READ))
    settings = broker.client("alice", **{"transactional.id": "invoicer-1"})
    producer = Producer(settings)
    with pytest.raises(KafkaException) as refused:
        producer.init_transactions(20)
    assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    del producer

    create_acls(admin, acl(ResourceType.TRANSACTIONAL_ID, "invoicer-", "User:alice",
                           AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED))
    # consume-transform-produce: the input offsets commit with the output records
    consumer = Consumer(broker.client("alice", **{
        "group.id": "invoicer", "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "isolation.level": "read_committed"}))
    consumer.subscribe(["orders"])
    message = None
    deadline = time.monotonic() + 30
    while message is None and time.monotonic() < deadline:
        polled = consumer.poll(0.5)
        if polled is not None:
            assert polled.error() is None, polled.error()
            message = polled
    assert message is not None
    producer = Producer(settings)
    producer.init_transactions(20)
    producer.begin_transaction()
    producer.produce("invoices", b"invoice for " + (message.value() or b""))
    producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                         consumer.consumer_group_metadata(), 20)
    producer.commit_transaction(20)
    committed = consumer.committed(consumer.assignment(), timeout=20)
    assert [tp.offset for tp in committed] == [1]
    consumer.close()
    reader = broker.client("admin", **{"isolation.level": "read_committed"})
    assert consume(reader, "invoices", "checker", count=1) == [b"invoice for m0"]

    broker.process.stop()
    requests = [e for e in broker.process.events("request") if e["principal"] == "User:alice"]
    outcome = {(e["api"], e["error"]) for e in requests}
    assert ("FindCoordinator", "NONE") in outcome
    assert {("InitProducerId", "NONE"), ("AddPartitionsToTxn", "NONE"),
            ("AddOffsetsToTxn", "NONE"), ("TxnOffsetCommit", "NONE"),
            ("EndTxn", "NONE")} <= outcome
    denied = broker.process.events("authorization_denied")
    assert {(e["principal"], e["resource_type"], e["resource_name"]) for e in denied} == {
        ("User:alice", "TRANSACTIONAL_ID", "invoicer-1")}


def test_mtls_principal_is_matched_by_an_acl_on_the_certificate_subject(cluster: Any
                                                                        ) -> None:
    broker = cluster()
    admin = broker.admin()
    create_topics(admin, "mtls-orders", "orders")
    create_acls(admin,
                acl(ResourceType.TOPIC, "mtls-orders", MTLS_PRINCIPAL, AclOperation.WRITE),
                acl(ResourceType.TOPIC, "mtls-orders", MTLS_PRINCIPAL, AclOperation.DESCRIBE),
                # the SASL user of the same name is a different principal
                acl(ResourceType.TOPIC, "orders", "User:alice", AclOperation.WRITE))
    assert produce(broker.mtls_client(), "mtls-orders") is None
    assert code(produce(broker.mtls_client(), "orders")) == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    broker.process.stop()
    produced = [e for e in broker.process.events("request") if e["api"] == "Produce"]
    assert {e["principal"] for e in produced} == {MTLS_PRINCIPAL}
    assert {e["principal"] for e in broker.process.events("authorization_denied")} == {
        MTLS_PRINCIPAL}


def ops(values: Any) -> set[str]:
    return {op.name for op in values or ()}


def test_authorized_operations_for_sasl_users(cluster: Any) -> None:
    broker = cluster()
    admin = broker.admin()
    create_topics(admin, "orders")
    create_acls(admin, *producer_acls("orders", "User:alice"),
                acl(ResourceType.TOPIC, "orders", "User:bob", AclOperation.READ),
                acl(ResourceType.BROKER, "kafka-cluster", "User:bob", AclOperation.DESCRIBE),
                acl(ResourceType.GROUP, "billing", "User:bob", AclOperation.READ))
    bob_admin = AdminClient(broker.client("bob"))
    group = bob_admin.describe_consumer_groups(
        ["billing"], include_authorized_operations=True)["billing"].result(timeout=20)
    assert ops(group.authorized_operations) == {"READ", "DESCRIBE"}

    def described(user: str) -> tuple[set[str], set[str]]:
        client = AdminClient(broker.client(user))
        topic = client.describe_topics(TopicCollection(["orders"]),
                                       include_authorized_operations=True)["orders"]
        cluster_info = client.describe_cluster(include_authorized_operations=True)
        return (ops(topic.result(timeout=20).authorized_operations),
                ops(cluster_info.result(timeout=20).authorized_operations))

    # Kafka: the topic's operations the ACLs allow (WRITE and READ imply DESCRIBE); the
    # cluster's only with DESCRIBE on the cluster (else none).
    assert described("alice") == ({"WRITE", "DESCRIBE"}, set())
    assert described("bob") == ({"READ", "DESCRIBE"}, {"DESCRIBE"})
    assert described("admin") == (
        {"READ", "WRITE", "CREATE", "DESCRIBE", "DELETE", "ALTER", "DESCRIBE_CONFIGS",
         "ALTER_CONFIGS"},
        {"CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE",
         "ALTER", "DESCRIBE"})


def scrape(address: str) -> str:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        body: bytes = response.read()
        return body.decode()


def produce_load(config: dict[str, Any], topic: str, throttles: list[Any]) -> None:
    """150 KB in 5 KB records, acknowledged."""
    producer = Producer({**config, "linger.ms": 5, "batch.size": 16384,
                         "throttle_cb": throttles.append})
    for _ in range(30):
        producer.produce(topic, b"q" * 5000)
        producer.poll(0)
    assert producer.flush(60) == 0


def test_client_quotas_by_sasl_user(cluster: Any) -> None:
    metrics = f"127.0.0.1:{free_port()}"
    broker = cluster(**{"quota.window.num": "2", "quota.window.size.seconds": "1",
                        "metrics.prometheus.listener": metrics})
    admin = broker.admin()
    create_topics(admin, "orders")
    create_acls(admin, *(acl(ResourceType.TOPIC, "orders", user, op)
                         for user in ("User:alice", "User:bob")
                         for op in (AclOperation.WRITE, AclOperation.DESCRIBE)),
                # the operator's tools speak PLAINTEXT: User:ANONYMOUS, from this host only
                AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL,
                           "User:ANONYMOUS", "127.0.0.1", AclOperation.ALTER_CONFIGS,
                           AclPermissionType.ALLOW))
    quotas = subprocess.run(
        [sys.executable, "-m", "trio_broker", "quotas", "--bootstrap-server", broker.plain,
         "--alter", "--add-config", "producer_byte_rate=50000", "--entity-type", "users",
         "--entity-name", "alice"], capture_output=True, text=True, timeout=60)
    assert quotas.returncode == 0, quotas.stderr
    assert quotas.stdout.strip() == "Completed updating config for user alice."

    alice_throttles: list[Any] = []
    bob_throttles: list[Any] = []
    produce_load(broker.client("alice"), "orders", alice_throttles)
    produce_load(broker.client("bob"), "orders", bob_throttles)
    assert alice_throttles and max(t.throttle_time for t in alice_throttles) > 0
    assert not [t for t in bob_throttles if t.throttle_time > 0]
    exposition = scrape(metrics)
    throttle_time = {line.split("{")[1].split("}")[0]: float(line.rsplit(" ", 1)[1])
                     for line in exposition.splitlines()
                     if line.startswith("kafka_server_produce_throttle_time{")}
    assert throttle_time['client_id="",user="alice"'] > 0
    assert all(value == 0 for labels, value in throttle_time.items() if "bob" in labels)
    broker.process.stop()
    throttled = broker.process.events("throttle_started")
    assert throttled and {(e["user"], e["security_protocol"], e["quota_type"])
                          for e in throttled} == {("alice", "SASL_SSL", "producer_byte_rate")}


def samples(exposition: str, name: str) -> dict[str, float]:
    """``{labels: value}`` of one metric in a Prometheus text exposition."""
    found = {}
    for line in exposition.splitlines():
        if line.startswith(name + "{"):
            labels, _, value = line[len(name) + 1:].partition("} ")
            found[labels] = float(value)
    return found


def test_authentication_metrics_per_listener(cluster: Any) -> None:
    metrics = f"127.0.0.1:{free_port()}"
    broker = cluster(**{"metrics.prometheus.listener": metrics,
                        "connection.failed.authentication.delay.ms": "0"})
    assert AdminClient(broker.client("alice")).list_topics(timeout=20).brokers
    assert AdminClient(broker.mtls_client()).list_topics(timeout=20).brokers
    bad = AdminClient({**broker.client("bob"), "sasl.password": "wrong"})
    with pytest.raises(KafkaException):
        bad.list_topics(timeout=3)
    del bad
    exposition = scrape(metrics)
    prefix = "kafka_server_socket_server_metrics_"
    succeeded = samples(exposition, prefix + "successful_authentication_total")
    failed = samples(exposition, prefix + "failed_authentication_total")
    # one connection per broker and bootstrap server: at least one success each
    assert succeeded['listener="SASL_SSL"'] >= 1 and succeeded['listener="SSL"'] >= 1
    assert failed['listener="SASL_SSL"'] >= 1
    assert 'listener="SSL"' not in failed and 'listener="PLAINTEXT"' not in succeeded
    broker.process.stop()
    # the refused client may have retried again since the scrape
    assert failed['listener="SASL_SSL"'] <= len(broker.process.events("authentication_failed"))
    assert sum(succeeded.values()) == len(broker.process.events("authentication_succeeded"))


def test_only_an_authorized_user_changes_scram_credentials(cluster: Any) -> None:
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    broker = cluster()
    steal = UserScramCredentialUpsertion(
        "alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"stolen")
    bob = AdminClient(broker.client("bob"))
    with pytest.raises(KafkaException) as refused:
        bob.alter_user_scram_credentials([steal])["alice"].result(timeout=20)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # (DescribeUserScramCredentials is refused the same way, in Kafka's shape, but librdkafka
    # 2.16.0 segfaults on that answer: tests/security/test_sasl.py covers it on the wire)
    # alice still logs in with her password; the super user may change it
    assert AdminClient(broker.client("alice")).list_topics(timeout=20).brokers
    admin = broker.admin()
    admin.alter_user_scram_credentials([steal])["alice"].result(timeout=20)
    assert AdminClient({**broker.client("alice"), "sasl.password": "stolen"}).list_topics(
        timeout=20).brokers


def documented_blocks() -> list[tuple[str, str]]:
    """``(language, text)`` of each fenced block of docs/security.md's end-to-end section."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## End-to-end example", 1)[1].split("\n## ", 1)[0]
    return [(lang, body) for lang, body in
            re.findall(r"^```(\w+)\n(.*?)^```$", section, flags=re.MULTILINE | re.DOTALL)]


def run_documented_commands(script: str, replace: dict[str, str]) -> list[str]:
    """Run each ``trio_broker`` command of a documented shell block; their outputs."""
    outputs = []
    for command in script.replace("\\\n", " ").splitlines():
        if not command.strip():
            continue
        for old, new in replace.items():
            command = command.replace(old, new)
        argv = shlex.split(command)
        assert argv[0] == "trio_broker"
        done = subprocess.run([sys.executable, "-m", "trio_broker", *argv[1:]],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, (command, done.stderr)
        outputs.append(done.stdout)
    return outputs


def test_the_documented_example(broker_process: Any, certs: Certs, tmp_path: Path) -> None:
    """docs/security.md's end-to-end example, block by block, as written there."""
    blocks = documented_blocks()
    assert [lang for lang, _ in blocks] == ["properties", "sh", "python", "sh"]
    (_, properties), (_, users), (_, clients), (_, quotas) = blocks
    data_dir = tmp_path / "documented"
    sasl, plain = free_port(), free_port()
    replace = {"/var/lib/trio-broker": str(data_dir),
               "/etc/trio-broker/broker.pem": str(certs.keystore),
               "SASL_SSL://:9094": f"SASL_SSL://127.0.0.1:{sasl}",
               "127.0.0.1:9092": f"127.0.0.1:{plain}",
               "broker1:9094": f"127.0.0.1:{sasl}",
               '"ca.pem"': repr(str(certs.ca_pem))}
    settings = {}
    for line in properties.splitlines():
        key, _, value = line.partition("=")
        for old, new in replace.items():
            value = value.replace(old, new)
        settings[key.strip()] = value.strip()
    assert run_documented_commands(users, replace)
    broker = broker_process(settings)

    code_text = clients
    for old, new in replace.items():
        code_text = code_text.replace(old, new)
    exec(compile(code_text, "docs/security.md", "exec"), {})  # noqa: S102 - our own docs

    [out] = run_documented_commands(quotas, replace)
    assert out.strip() == "Completed updating config for user alice."
    broker.stop()
    principals = {(e["principal"], e["api"]) for e in broker.events("request")
                  if e["api"] in ("Produce", "InitProducerId", "JoinGroup", "Fetch",
                                  "CreateAcls", "CreateTopics", "AlterClientQuotas")}
    assert principals == {("User:alice", "InitProducerId"), ("User:alice", "Produce"),
                          ("User:bob", "JoinGroup"), ("User:bob", "Fetch"),
                          ("User:admin", "CreateAcls"), ("User:admin", "CreateTopics"),
                          ("User:ANONYMOUS", "AlterClientQuotas")}
    assert not broker.events("authorization_denied")
