"""ACLs against unmodified librdkafka clients (confluent-kafka) and the ``trio_broker acls``
command, on the real ``trio_broker run`` process over PLAINTEXT: the principal is
``User:ANONYMOUS`` and the host 127.0.0.1.

ACLs are created through the AdminClient (create_acls / describe_acls / delete_acls) and through
``trio_broker acls``; the producer and consumer see Kafka's TOPIC_AUTHORIZATION_FAILED and
GROUP_AUTHORIZATION_FAILED; ACLs survive a restart.
"""

from __future__ import annotations

import io
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
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

from trio_broker.tools.acls import main as acls_main

pytestmark = pytest.mark.interop

ON = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}
ME = "User:ANONYMOUS"


def acl(rt: ResourceType, name: str, op: AclOperation,
        perm: AclPermissionType = AclPermissionType.ALLOW, *, principal: str = ME,
        host: str = "*", pattern: ResourcePatternType = ResourcePatternType.LITERAL
        ) -> AclBinding:
    return AclBinding(rt, name, pattern, principal, host, op, perm)


def create(admin: AdminClient, *bindings: AclBinding) -> None:
    for future in admin.create_acls(list(bindings)).values():
        future.result(timeout=20)


def produce(bootstrap: str, topic: str) -> KafkaError | None:
    """Produce one record; the delivery error (None when it was written)."""
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10000,
                         "topic.metadata.refresh.interval.ms": 500})
    outcome: list[KafkaError | None] = []
    producer.produce(topic, b"value", on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(20)
    assert outcome, "no delivery report"
    return outcome[0]


def consume_error(bootstrap: str, topic: str, group: str) -> KafkaError | None:
    """The first error a subscribing consumer reports (None if it gets a record first)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "session.timeout.ms": 6000})
    consumer.subscribe([topic])
    try:
        for _ in range(40):
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            return msg.error()
        raise AssertionError("neither a record nor an error")
    finally:
        consumer.close()


def code(err: KafkaError | None) -> int | None:
    return None if err is None else err.code()


def test_acls_through_the_admin_client(broker_process: Any) -> None:
    broker = broker_process({**ON, "allow.everyone.if.no.acl.found": "true"})
    bootstrap = broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    # No ACL anywhere yet: allow.everyone.if.no.acl.found lets the topic and ACLs be created.
    for future in admin.create_topics([NewTopic("orders", 1, 1)]).values():
        future.result(timeout=20)
    create(admin,
           acl(ResourceType.BROKER, "kafka-cluster", AclOperation.ALTER),
           acl(ResourceType.TOPIC, "orders", AclOperation.WRITE, principal="User:bob"))
    # The topic has ACLs now, none for us: Kafka's TOPIC_AUTHORIZATION_FAILED.
    assert code(produce(bootstrap, "orders")) == KafkaError.TOPIC_AUTHORIZATION_FAILED

    create(admin, acl(ResourceType.TOPIC, "orders", AclOperation.WRITE))
    assert produce(bootstrap, "orders") is None
    # DENY beats ALLOW, here by host
    deny = acl(ResourceType.TOPIC, "orders", AclOperation.WRITE, AclPermissionType.DENY,
               host="127.0.0.1")
    create(admin, deny)
    assert code(produce(bootstrap, "orders")) == KafkaError.TOPIC_AUTHORIZATION_FAILED

    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    found = admin.describe_acls(everything).result(timeout=20)
    assert len(found) == 4
    assert deny in found
    on_orders = admin.describe_acls(AclBindingFilter(
        ResourceType.TOPIC, "orders", ResourcePatternType.MATCH, ME, None, AclOperation.ANY,
        AclPermissionType.ANY)).result(timeout=20)
    assert sorted(b.permission_type.name for b in on_orders) == ["ALLOW", "DENY"]

    # A consumer with READ on the topic but not on its group.
    create(admin, acl(ResourceType.TOPIC, "orders", AclOperation.READ),
           acl(ResourceType.GROUP, "app", AclOperation.READ, principal="User:bob"))
    assert code(consume_error(bootstrap, "orders", "app")) == \
        KafkaError.GROUP_AUTHORIZATION_FAILED

    # The ACLs survive a restart.
    broker.restart()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert sorted(map(str, admin.describe_acls(everything).result(timeout=20))) == \
        sorted(map(str, found + [acl(ResourceType.TOPIC, "orders", AclOperation.READ),
                                 acl(ResourceType.GROUP, "app", AclOperation.READ,
                                     principal="User:bob")]))
    assert code(produce(bootstrap, "orders")) == KafkaError.TOPIC_AUTHORIZATION_FAILED

    deleted = admin.delete_acls([AclBindingFilter(
        ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, None, "127.0.0.1",
        AclOperation.ANY, AclPermissionType.DENY)])
    (result,) = deleted.values()
    assert result.result(timeout=20) == [deny]
    assert produce(bootstrap, "orders") is None
    denied = broker.events("authorization_denied")
    assert any(e["operation"] == "WRITE" and e["resource_name"] == "orders"
               and e["principal"] == ME and e["host"] == "127.0.0.1" for e in denied)


def test_super_user_does_everything(broker_process: Any) -> None:
    broker = broker_process({**ON, "super.users": "User:admin;User:ANONYMOUS"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic("t", 1, 1)]).values():
        future.result(timeout=20)
    assert produce(broker.bootstrap, "t") is None
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["t"])
    try:
        for _ in range(40):
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None
                assert msg.value() == b"value"
                break
        else:
            raise AssertionError("no record")
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    # Deny ACLs do not apply to super users.
    create(admin, acl(ResourceType.TOPIC, "*", AclOperation.ALL, AclPermissionType.DENY,
                      principal="User:*"))
    assert produce(broker.bootstrap, "t") is None


def test_without_acls_everything_is_denied(broker_process: Any) -> None:
    broker = broker_process(ON)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    future = admin.create_topics([NewTopic("t", 1, 1)])["t"]
    with pytest.raises(KafkaException) as failure:
        future.result(timeout=20)
    assert failure.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # (librdkafka's describe_acls returns an empty list for a failed describe; the tool shows
    # the broker's answer.)
    status, _, err = acls("--bootstrap-server", broker.bootstrap, "--list")
    assert status == 1
    assert "CLUSTER_AUTHORIZATION_FAILED" in err
    assert code(produce(broker.bootstrap, "t")) == KafkaError.TOPIC_AUTHORIZATION_FAILED


def acls(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = acls_main(list(args), out=out, err=err)
    return status, out.getvalue(), err.getvalue()


def test_prefixed_acls_through_trio_broker_acls(broker_process: Any) -> None:
    broker = broker_process({**ON, "allow.everyone.if.no.acl.found": "true"})
    server = ("--bootstrap-server", broker.bootstrap)
    status, out, err = acls(*server, "--add", "--allow-principal", ME, "--operation", "Alter",
                            "--cluster")
    assert status == 0, err
    topic = f"fin-{uuid.uuid4().hex[:6]}"
    status, out, err = acls(*server, "--add", "--allow-principal", ME, "--producer",
                            "--topic", "fin-", "--resource-pattern-type", "prefixed")
    assert status == 0, err
    pattern = "ResourcePattern(resourceType=TOPIC, name=fin-, patternType=PREFIXED)"
    assert out.startswith(f"Adding ACLs for resource `{pattern}`: \n \t(principal={ME}, "
                          "host=*, operation=WRITE, permissionType=ALLOW)\n")
    assert f"Current ACLs for resource `{pattern}`: \n" in out
    for op in ("WRITE", "DESCRIBE", "CREATE"):
        assert f"\t(principal={ME}, host=*, operation={op}, permissionType=ALLOW)" in out
    # A topic that another principal holds ACLs on is not ours.
    status, _, err = acls(*server, "--add", "--allow-principal", "User:bob", "--operation",
                          "Write", "--topic", "other")
    assert status == 0, err
    # CREATE through the prefix lets the producer's Metadata create the topic.
    assert produce(broker.bootstrap, topic) is None
    assert code(produce(broker.bootstrap, "other")) == KafkaError.TOPIC_AUTHORIZATION_FAILED

    status, out, err = acls(*server, "--list", "--topic", "fin-", "--resource-pattern-type",
                            "prefixed")
    assert status == 0, err
    assert out.count("Current ACLs for resource") == 1 and out.count("\t(principal=") == 3
    status, out, err = acls(*server, "--list", "--principal", "User:bob")
    assert status == 0, err
    assert out.startswith("ACLs for principal `User:bob`\n")
    assert "operation=WRITE" in out and "fin-" not in out

    # --remove asks first; "n" keeps the ACLs, --force does not ask.
    out_stream, err_stream = io.StringIO(), io.StringIO()
    status = acls_main([*server, "--remove", "--topic", "fin-", "--resource-pattern-type",
                        "prefixed"], out=out_stream, err=err_stream, stdin=io.StringIO("n\n"))
    assert status == 0
    assert "Are you sure you want to delete all ACLs for resource filter" in out_stream.getvalue()
    assert produce(broker.bootstrap, topic) is None
    status, out, err = acls(*server, "--remove", "--force", "--allow-principal", ME,
                            "--operation", "Write", "--topic", "fin-",
                            "--resource-pattern-type", "prefixed")
    assert status == 0, err
    assert code(produce(broker.bootstrap, topic)) == KafkaError.TOPIC_AUTHORIZATION_FAILED

    status, out, err = acls(*server, "--add", "--allow-principal", ME, "--operation",
                            "IdempotentWrite", "--topic", "x")
    assert status == 1
    assert "ResourceType TOPIC only supports operations" in err
