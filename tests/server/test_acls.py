"""ACLs in-process, on the wire: CreateAcls / DescribeAcls / DeleteAcls with Kafka's errors,
their file in the data directory, and the authorization of the other handlers.

The principal of every PLAINTEXT connection is ``User:ANONYMOUS`` and its host 127.0.0.1.
"""

from __future__ import annotations

import datetime
import json
import sys
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i16, i32

from tests.kafka_wire import WireClient
from tests.server.test_produce_fetch import batch, produce_body
from trio_broker.protocol.codec import request_schema
from trio_broker.server.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
    operations_bits,
)
from trio_broker.server.authorizer import ACLS_FILE

DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
PRODUCE, METADATA, CREATE_TOPICS, DESCRIBE_CLUSTER, JOIN_GROUP = 0, 3, 19, 60, 11
ON = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}
ADMIN = {**ON, "super.users": "User:ANONYMOUS"}
ME = "User:ANONYMOUS"
Op, R, P, Perm = AclOperation, ResourceType, PatternType, PermissionType


def mod(api_key: int, version: int) -> Any:
    return sys.modules[request_schema(api_key, version).__module__]


def binding(name: str, op: AclOperation = Op.READ, perm: PermissionType = Perm.ALLOW,
            rt: ResourceType = R.TOPIC, pattern: PatternType = P.LITERAL,
            principal: str = ME, host: str = "*") -> AclBinding:
    return AclBinding(rt, name, pattern, principal, host, op, perm)


async def create_acls(port: int, *acls: AclBinding | tuple[int, ...], version: int = 3
                      ) -> list[tuple[ErrorCode, str | None]]:
    m = mod(CREATE_ACLS, version)
    creations = []
    for a in acls:
        raw = (int(a.resource_type), a.name, int(a.pattern_type), a.principal, a.host,
               int(a.operation), int(a.permission)) if isinstance(a, AclBinding) else a
        creations.append(m.AclCreation(
            resource_type=i8(raw[0]), resource_name=raw[1], resource_pattern_type=i8(raw[2]),
            principal=raw[3], host=raw[4], operation=i8(raw[5]), permission_type=i8(raw[6])))
    client = await WireClient.connect(port, client_id="acl-admin")
    body = await client.request(CREATE_ACLS, version, m.CreateAclsRequest(
        creations=tuple(creations)))
    await client.aclose()
    return [(r.error_code, r.error_message) for r in body.results]


def _filter_fields(rt: int = 1, name: str | None = None, pattern: int = 1,
                   principal: str | None = None, host: str | None = None, op: int = 1,
                   perm: int = 1) -> dict[str, Any]:
    return {"resource_type_filter": i8(rt), "resource_name_filter": name,
            "pattern_type_filter": i8(pattern), "principal_filter": principal,
            "host_filter": host, "operation": i8(op), "permission_type": i8(perm)}


async def describe_acls(port: int, version: int = 3, **filter_kw: Any) -> Any:
    m = mod(DESCRIBE_ACLS, version)
    client = await WireClient.connect(port, client_id="acl-admin")
    body = await client.request(DESCRIBE_ACLS, version,
                                m.DescribeAclsRequest(**_filter_fields(**filter_kw)))
    await client.aclose()
    return body


def described(body: Any) -> set[tuple[Any, ...]]:
    return {(r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation,
             a.permission_type) for r in body.resources for a in r.acls}


def as_tuple(a: AclBinding) -> tuple[Any, ...]:
    return (int(a.resource_type), a.name, int(a.pattern_type), a.principal, a.host,
            int(a.operation), int(a.permission))


async def delete_acls(port: int, *filters: dict[str, Any], version: int = 3) -> Any:
    m = mod(DELETE_ACLS, version)
    client = await WireClient.connect(port, client_id="acl-admin")
    body = await client.request(DELETE_ACLS, version, m.DeleteAclsRequest(filters=tuple(
        m.DeleteAclsFilter(**_filter_fields(**f)) for f in filters)))
    await client.aclose()
    return body


# ------------------------------------------------------------------------ ACL APIs
async def test_acl_apis_without_an_authorizer_answer_security_disabled(start_broker: Any
                                                                       ) -> None:
    running = await start_broker()
    assert await create_acls(running.port, binding("t")) == [
        (ErrorCode.security_disabled, "No Authorizer is configured.")]
    body = await describe_acls(running.port)
    assert body.error_code == ErrorCode.security_disabled
    body = await delete_acls(running.port, {})
    assert [r.error_code for r in body.filter_results] == [ErrorCode.security_disabled]


async def test_acl_apis_need_cluster_alter_and_describe(start_broker: Any) -> None:
    running = await start_broker(ON)
    assert await create_acls(running.port, binding("t")) == [
        (ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")]
    assert (await describe_acls(running.port)).error_code == \
        ErrorCode.cluster_authorization_failed
    body = await delete_acls(running.port, {})
    assert [r.error_code for r in body.filter_results] == [
        ErrorCode.cluster_authorization_failed]
    # DESCRIBE on the cluster (implied by ALTER) lets describe through, ALTER creation.
    running.broker.authorizer.add([binding(CLUSTER_NAME, Op.ALTER, rt=R.CLUSTER)], "test")
    assert (await describe_acls(running.port)).error_code == ErrorCode.none
    assert await create_acls(running.port, binding("t")) == [(ErrorCode.none, None)]


@pytest.mark.parametrize("version", [1, 2, 3])
async def test_create_describe_delete_and_persist(start_broker: Any, tmp_path: Any,
                                                  version: int) -> None:
    data = str(tmp_path / "acl-data")
    running = await start_broker(ADMIN, **{"log.dirs": data})
    port = running.port
    lit = binding("orders", Op.WRITE)
    pre = binding("fin-", Op.READ, pattern=P.PREFIXED, principal="User:bob")
    star = binding("*", Op.DESCRIBE, Perm.DENY, host="10.0.0.9")
    group = binding("app", Op.READ, rt=R.GROUP)
    results = await create_acls(
        port, lit, pre, star, group,
        (R.ANY, "x", P.LITERAL, ME, "*", Op.READ, Perm.ALLOW),
        (R.TOPIC, "x", P.MATCH, ME, "*", Op.READ, Perm.ALLOW),
        (R.TOPIC, "x", P.LITERAL, ME, "*", Op.ANY, Perm.ALLOW),
        (R.CLUSTER, "other", P.LITERAL, ME, "*", Op.ALTER, Perm.ALLOW),
        (R.TOPIC, "x", P.LITERAL, "alice", "*", Op.READ, Perm.ALLOW),
        (R.DELEGATION_TOKEN, "tok", P.LITERAL, ME, "*", Op.DESCRIBE, Perm.ALLOW),
        version=version)
    assert results[:4] == [(ErrorCode.none, None)] * 4
    assert [code for code, _ in results[4:]] == [ErrorCode.invalid_request] * 6
    assert results[4][1] == "Invalid resourceType ANY"
    assert results[7][1] == "The only valid name for the CLUSTER resource is kafka-cluster"
    # created twice: still once (Kafka's create is idempotent)
    assert await create_acls(port, lit, version=version) == [(ErrorCode.none, None)]

    everything = {as_tuple(a) for a in (lit, pre, star, group)}
    assert described(await describe_acls(port, version)) == everything
    assert described(await describe_acls(port, version, rt=R.TOPIC, name="fin-orders",
                                         pattern=P.MATCH)) == {as_tuple(pre), as_tuple(star)}
    assert described(await describe_acls(port, version, rt=R.TOPIC, name="orders",
                                         pattern=P.LITERAL)) == {as_tuple(lit)}
    assert described(await describe_acls(port, version, principal="User:bob")) == \
        {as_tuple(pre)}
    bad = await describe_acls(port, version, pattern=P.UNKNOWN)
    assert (bad.error_code, bad.error_message) == (ErrorCode.invalid_request,
                                                    "Unknown patternFilter.")
    stored = json.loads((running.data_dir / ACLS_FILE).read_text())
    assert len(stored["acls"]) == 4

    body = await delete_acls(port, {"rt": R.GROUP}, {"op": Op.UNKNOWN},
                             {"rt": R.TOPIC, "name": "nothing", "pattern": P.LITERAL},
                             version=version)
    first, second, third = body.filter_results
    assert first.error_code == ErrorCode.none
    assert [(m.resource_type, m.resource_name, m.operation) for m in first.matching_acls] == [
        (R.GROUP, "app", Op.READ)]
    assert (second.error_code, second.error_message) == (ErrorCode.invalid_request,
                                                         "Unknown entryFilter.")
    assert third.error_code == ErrorCode.none and third.matching_acls == ()
    assert described(await describe_acls(port, version)) == everything - {as_tuple(group)}

    # Reloaded on restart from the data directory.
    await running.shutdown()
    again = await start_broker(ADMIN, **{"log.dirs": data})
    assert described(await describe_acls(again.port, version)) == \
        everything - {as_tuple(group)}


# ------------------------------------------------------------------ handler checks
async def _produce(port: int, topic: str) -> ErrorCode:
    client = await WireClient.connect(port)
    body = await client.request(PRODUCE, 9, produce_body(9, {(topic, 0): batch(b"v")}))
    await client.aclose()
    code: ErrorCode = body.responses[0].partition_responses[0].error_code
    return code


async def _metadata(port: int, topics: list[str] | None, version: int = 12, *,
                    allow_create: bool = False, with_ops: bool = False) -> Any:
    m = mod(METADATA, version)
    client = await WireClient.connect(port)
    body = await client.request(METADATA, version, m.MetadataRequest(
        topics=None if topics is None else tuple(
            m.MetadataRequestTopic(name=t, topic_id=None) for t in topics),
        allow_auto_topic_creation=allow_create,
        include_topic_authorized_operations=with_ops))
    await client.aclose()
    return body


async def test_produce_needs_write_and_denials_are_logged(start_broker: Any,
                                                          log_events: Any) -> None:
    running = await start_broker(ON)
    authorizer = running.broker.authorizer
    running.broker.log_manager.create_topic("orders", 1)
    running.broker.log_manager.create_topic("fin-a", 1)
    assert await _produce(running.port, "orders") == ErrorCode.topic_authorization_failed
    denied = log_events.events("authorization_denied")
    assert denied and denied[-1]["principal"] == ME and denied[-1]["operation"] == "WRITE"
    assert denied[-1]["resource_type"] == "TOPIC" and denied[-1]["resource_name"] == "orders"
    assert denied[-1]["host"] == "127.0.0.1" and denied[-1]["level"] == "info"
    authorizer.add([binding("orders", Op.WRITE)], "test")
    assert await _produce(running.port, "orders") == ErrorCode.none
    # prefixed ALLOW, then a DENY by host wins over it
    authorizer.add([binding("fin-", Op.WRITE, pattern=P.PREFIXED)], "test")
    assert await _produce(running.port, "fin-a") == ErrorCode.none
    authorizer.add([binding("fin-a", Op.WRITE, Perm.DENY, host="127.0.0.1")], "test")
    assert await _produce(running.port, "fin-a") == ErrorCode.topic_authorization_failed
    assert not log_events.events("authorization_allowed")  # logging.level is INFO


async def test_metadata_filters_and_reports_topics(start_broker: Any, log_events: Any) -> None:
    running = await start_broker(ON)
    lm = running.broker.log_manager
    for name in ("seen", "hidden"):
        lm.create_topic(name, 1)
    running.broker.authorizer.add([binding("seen", Op.WRITE)], "test")
    body = await _metadata(running.port, None, with_ops=True)
    assert [t.name for t in body.topics] == ["seen"]
    assert body.topics[0].topic_authorized_operations == operations_bits([Op.WRITE,
                                                                         Op.DESCRIBE])
    # all-topics listing logs no denial (Kafka's logIfDenied=false)
    assert not log_events.events("authorization_denied")
    body = await _metadata(running.port, ["seen", "hidden", "absent"])
    assert [(t.name, t.error_code) for t in body.topics] == [
        ("seen", ErrorCode.none), ("hidden", ErrorCode.topic_authorization_failed),
        ("absent", ErrorCode.topic_authorization_failed)]
    # auto-creation needs CREATE (on the cluster or the topic) besides DESCRIBE
    running.broker.authorizer.add([binding("new-", Op.DESCRIBE, pattern=P.PREFIXED)], "test")
    body = await _metadata(running.port, ["new-a"], allow_create=True)
    assert body.topics[0].error_code == ErrorCode.topic_authorization_failed
    assert "new-a" not in lm.topics
    running.broker.authorizer.add([binding("new-", Op.CREATE, pattern=P.PREFIXED)], "test")
    body = await _metadata(running.port, ["new-a"], allow_create=True)
    assert body.topics[0].error_code == ErrorCode.none
    assert "new-a" in lm.topics


async def test_allow_everyone_if_no_acl_found(start_broker: Any) -> None:
    running = await start_broker({**ON, "allow.everyone.if.no.acl.found": "true"})
    running.broker.log_manager.create_topic("open", 1)
    running.broker.log_manager.create_topic("closed", 1)
    running.broker.authorizer.add([binding("closed", Op.WRITE, principal="User:bob")], "test")
    assert await _produce(running.port, "open") == ErrorCode.none
    assert await _produce(running.port, "closed") == ErrorCode.topic_authorization_failed
    # no ACL on the cluster either: the ACL APIs are open
    assert await create_acls(running.port, binding("x")) == [(ErrorCode.none, None)]


async def test_describe_cluster_authorized_operations(start_broker: Any) -> None:
    running = await start_broker(ON)
    m = mod(DESCRIBE_CLUSTER, 1)

    async def ops() -> int:
        client = await WireClient.connect(running.port)
        body = await client.request(DESCRIBE_CLUSTER, 1, m.DescribeClusterRequest(
            include_cluster_authorized_operations=True, endpoint_type=i8(1)))
        await client.aclose()
        return int(body.cluster_authorized_operations)

    assert await ops() == 0
    running.broker.authorizer.add([binding(CLUSTER_NAME, Op.CREATE, rt=R.CLUSTER)], "test")
    assert await ops() == 0  # without DESCRIBE on the cluster: 0, as Kafka
    running.broker.authorizer.add([binding(CLUSTER_NAME, Op.ALTER, rt=R.CLUSTER)], "test")
    assert await ops() == operations_bits([Op.CREATE, Op.ALTER, Op.DESCRIBE])


async def test_join_group_needs_group_read(start_broker: Any) -> None:
    running = await start_broker(ON)
    m = mod(JOIN_GROUP, 9)
    client = await WireClient.connect(running.port)
    body = await client.request(JOIN_GROUP, 9, m.JoinGroupRequest(
        group_id="app", session_timeout=datetime.timedelta(seconds=10),
        rebalance_timeout=datetime.timedelta(seconds=10),
        member_id="", group_instance_id=None, protocol_type="consumer",
        protocols=(m.JoinGroupRequestProtocol(name="range", metadata=b""),), reason=None))
    await client.aclose()
    assert body.error_code == ErrorCode.group_authorization_failed


async def test_create_topics_needs_create(start_broker: Any) -> None:
    running = await start_broker(ON)
    m = mod(CREATE_TOPICS, 7)

    async def create(name: str) -> ErrorCode:
        client = await WireClient.connect(running.port)
        body = await client.request(CREATE_TOPICS, 7, m.CreateTopicsRequest(
            topics=(m.CreatableTopic(name=name, num_partitions=i32(1),
                                     replication_factor=i16(-1), assignments=(), configs=()),),
            timeout=datetime.timedelta(seconds=5), validate_only=False))
        await client.aclose()
        last[:] = [body.topics[0]]
        code: ErrorCode = body.topics[0].error_code
        return code

    last: list[Any] = []

    assert await create("a") == ErrorCode.topic_authorization_failed
    running.broker.authorizer.add([binding("a", Op.CREATE)], "test")
    assert await create("a") == ErrorCode.none
    # the configs come back only with DESCRIBE_CONFIGS on the topic
    assert last[0].topic_config_error_code == ErrorCode.topic_authorization_failed
    assert last[0].configs == ()
    running.broker.authorizer.add([binding(CLUSTER_NAME, Op.CREATE, rt=R.CLUSTER),
                                   binding("b", Op.DESCRIBE_CONFIGS)], "test")
    assert await create("b") == ErrorCode.none
    assert last[0].topic_config_error_code == 0 and last[0].configs


async def test_allowed_decisions_are_logged_only_at_debug(start_broker: Any,
                                                          log_events: Any) -> None:
    running = await start_broker({**ADMIN, "logging.level": "DEBUG"})
    running.broker.log_manager.create_topic("t", 1)
    assert await _produce(running.port, "t") == ErrorCode.none
    allowed = log_events.events("authorization_allowed")
    assert allowed and allowed[-1]["reason"] == "super user"
    assert allowed[-1]["level"] == "debug" and allowed[-1]["operation"] == "WRITE"


async def test_fetch_and_configs_and_quotas_are_authorized(start_broker: Any) -> None:
    from tests.server.test_produce_fetch import fetch_body

    running = await start_broker(ON)
    running.broker.log_manager.create_topic("t", 1)
    client = await WireClient.connect(running.port)
    body = await client.request(1, 12, fetch_body(12, {("t", 0): 0}, max_wait_ms=0))
    assert body.responses[0].partitions[0].error_code == ErrorCode.topic_authorization_failed

    m = mod(32, 4)
    body = await client.request(32, 4, m.DescribeConfigsRequest(resources=(
        m.DescribeConfigsResource(resource_type=i8(2), resource_name="t",
                                  configuration_keys=None),
        m.DescribeConfigsResource(resource_type=i8(4), resource_name="1",
                                  configuration_keys=None)),
        include_synonyms=False, include_documentation=False))
    assert [r.error_code for r in body.results] == [ErrorCode.topic_authorization_failed,
                                                    ErrorCode.cluster_authorization_failed]
    m = mod(48, 1)
    body = await client.request(48, 1, m.DescribeClientQuotasRequest(components=(),
                                                                     strict=False))
    assert body.error_code == ErrorCode.cluster_authorization_failed
    running.broker.authorizer.add([binding("t", Op.READ),
                                   binding("t", Op.ALTER_CONFIGS)], "test")
    body = await client.request(1, 12, fetch_body(12, {("t", 0): 0}, max_wait_ms=0))
    assert body.responses[0].partitions[0].error_code == ErrorCode.none
    m = mod(32, 4)
    body = await client.request(32, 4, m.DescribeConfigsRequest(resources=(
        m.DescribeConfigsResource(resource_type=i8(2), resource_name="t",
                                  configuration_keys=None),),
        include_synonyms=False, include_documentation=False))
    assert body.results[0].error_code == ErrorCode.none
    await client.aclose()


async def test_offset_commit_and_fetch_need_group_then_topic(start_broker: Any) -> None:
    running = await start_broker(ON)
    for name in ("a", "b"):
        running.broker.log_manager.create_topic(name, 1)
    authorizer = running.broker.authorizer
    m = mod(8, 8)
    f = mod(9, 8)
    client = await WireClient.connect(running.port)

    async def commit() -> dict[str, ErrorCode]:
        body = await client.request(8, 8, m.OffsetCommitRequest(
            group_id="g", generation_id_or_member_epoch=i32(-1), member_id="",
            topics=tuple(m.OffsetCommitRequestTopic(name=t, partitions=(
                m.OffsetCommitRequestPartition(partition_index=i32(0), committed_offset=5,
                                               committed_metadata=None),))
                for t in ("a", "b"))))
        return {t.name: t.partitions[0].error_code for t in body.topics}

    async def fetch(topics: tuple[str, ...] | None) -> tuple[ErrorCode, dict[str, Any]]:
        body = await client.request(9, 8, f.OffsetFetchRequest(groups=(f.OffsetFetchRequestGroup(
            group_id="g", topics=None if topics is None else tuple(
                f.OffsetFetchRequestTopics(name=t, partition_indexes=(i32(0),))
                for t in topics)),), require_stable=False))
        group = body.groups[0]
        return group.error_code, {t.name: (t.partitions[0].error_code,
                                           t.partitions[0].committed_offset)
                                  for t in group.topics}

    assert await commit() == {"a": ErrorCode.group_authorization_failed,
                              "b": ErrorCode.group_authorization_failed}
    assert (await fetch(None))[0] == ErrorCode.group_authorization_failed
    authorizer.add([binding("g", Op.READ, rt=R.GROUP), binding("a", Op.READ)], "test")
    assert await commit() == {"a": ErrorCode.none, "b": ErrorCode.topic_authorization_failed}
    # all topics: the unauthorized ones are left out; named: TOPIC_AUTHORIZATION_FAILED
    assert await fetch(None) == (ErrorCode.none, {"a": (ErrorCode.none, 5)})
    assert await fetch(("a", "b")) == (ErrorCode.none, {
        "a": (ErrorCode.none, 5), "b": (ErrorCode.topic_authorization_failed, -1)})
    await client.aclose()


async def test_an_unreadable_acl_file_stops_the_start(start_broker: Any, tmp_path: Any) -> None:
    data = tmp_path / "bad-acls"
    data.mkdir()
    (data / ACLS_FILE).write_text('{"version": 1, "acls": [{"resource_type": "NOPE"}]}')
    with pytest.raises(RuntimeError, match="cannot read the ACLs"):
        await start_broker(ON, **{"log.dirs": str(data)})


async def test_describe_topic_partitions_needs_describe(start_broker: Any) -> None:
    running = await start_broker(ON)
    for name in ("seen", "hidden"):
        running.broker.log_manager.create_topic(name, 1)
    running.broker.authorizer.add([binding("seen", Op.READ)], "test")
    m = mod(75, 0)

    async def describe(names: tuple[str, ...]) -> list[tuple[str, ErrorCode, int]]:
        client = await WireClient.connect(running.port)
        body = await client.request(75, 0, m.DescribeTopicPartitionsRequest(
            topics=tuple(m.TopicRequest(name=n) for n in names),
            response_partition_limit=i32(100), cursor=None))
        await client.aclose()
        return [(t.name, t.error_code, t.topic_authorized_operations) for t in body.topics]

    read_ops = operations_bits([Op.READ, Op.DESCRIBE])
    assert await describe(()) == [("seen", ErrorCode.none, read_ops)]
    assert sorted(await describe(("hidden", "seen"))) == [
        ("hidden", ErrorCode.topic_authorization_failed, -(2**31)),
        ("seen", ErrorCode.none, read_ops)]
