"""The last APIs Kafka 3.9 serves to clients, answered as a Kafka 3.9 broker with this one's
configuration answers them, over a real socket: the delegation token APIs without
``delegation.token.secret.key`` (not allowed over PLAINTEXT, disabled over SASL, CREATE_TOKENS
for another owner), AlterReplicaLogDirs with one log directory, and ListConfigResources v0 with
no client-metrics resources."""

from __future__ import annotations

import datetime
import struct
import sys
from typing import Any

import pytest
from kio.schema.errors import ErrorCode as E

from tests.kafka_wire import WireClient
from tests.security.test_sasl import plain_login, sasl_settings
from tests.server.test_acls import ON, binding
from trio_broker.config import ConfigError, load_config
from trio_broker.protocol.codec import request_schema
from trio_broker.server.acl import AclOperation as Op
from trio_broker.server.acl import ResourceType as R

pytestmark = pytest.mark.timeout(30)

ALTER_LOG_DIRS, CREATE, RENEW, EXPIRE, DESCRIBE, LIST_CONFIG_RESOURCES = 34, 38, 39, 40, 41, 74


def mod(api_key: int, version: int) -> Any:
    return sys.modules[request_schema(api_key, version).__module__]


def create(version: int, owner: str | None = None) -> Any:
    m = mod(CREATE, version)
    extra = {"owner_principal_type": "User" if owner else None,
             "owner_principal_name": owner} if version >= 3 else {}
    return m.CreateDelegationTokenRequest(
        renewers=(m.CreatableRenewers(principal_type="User", principal_name="bob"),),
        max_lifetime=datetime.timedelta(hours=1), **extra)


async def raw_answer(client: WireClient, api_key: int, version: int, body: Any) -> bytes:
    """The response body's bytes: kio refuses the -1 timestamps Kafka sends in these answers
    (Java and librdkafka read them as plain int64s)."""
    await client.send(api_key, version, body)
    payload = await client.receive_frame()
    assert payload is not None
    flexible = version >= 2  # all four: flexible from v2, so the header has tagged fields
    return payload[5:] if flexible else payload[4:]


def strings(body: bytes, count: int, flexible: bool) -> tuple[list[str], bytes]:
    """``count`` strings at the start of ``body`` (compact when ``flexible``) and the rest."""
    found = []
    for _ in range(count):
        if flexible:
            length, body = body[0] - 1, body[1:]  # short names: a one-byte uvarint
        else:
            length, body = struct.unpack(">h", body[:2])[0], body[2:]
        found.append(body[:length].decode())
        body = body[length:]
    return found, body


async def token_answers(client: WireClient, version: int, no_time: bytes) -> list[int]:
    """The error of each of the four APIs at ``version`` (Renew/Expire: at most 2), checking
    the empty values Kafka answers with: timestamps ``no_time`` (8 bytes), no token id, no
    HMAC, no tokens."""
    flexible = version >= 2
    created = await raw_answer(client, CREATE, version, create(version))
    names, rest = strings(created[2:], 4 if version >= 3 else 2, flexible)
    assert names[:2] == ["User", "ANONYMOUS"] or names[:2] == ["User", "alice"]
    assert rest[:24] == no_time * 3  # issue, expiry and max timestamps
    assert rest[24:26] == (b"\x01\x01" if flexible else b"\x00\x00")  # "" and then the HMAC
    small = min(version, 2)
    renewed = await raw_answer(client, RENEW, small, mod(RENEW, small).RenewDelegationTokenRequest(
        hmac=b"x", renew_period=datetime.timedelta(hours=1)))
    expired = await raw_answer(client, EXPIRE, small, mod(
        EXPIRE, small).ExpireDelegationTokenRequest(
        hmac=b"x", expiry_time_period=datetime.timedelta(hours=1)))
    for answer in (renewed, expired):
        assert answer[2:10] == no_time
    described = await raw_answer(client, DESCRIBE, version, mod(
        DESCRIBE, version).DescribeDelegationTokenRequest(owners=None))
    assert described[2:3 if flexible else 6] == (b"\x01" if flexible else b"\x00" * 4)
    return [struct.unpack(">h", answer[:2])[0]
            for answer in (created, renewed, expired, described)]


@pytest.mark.parametrize("version", [0, 1, 2, 3])
async def test_delegation_tokens_are_not_allowed_over_plaintext(broker: Any, version: int
                                                                ) -> None:
    client = await WireClient.connect(broker.port)
    try:
        # Refused before the controller: ControllerApis' answer, timestamps -1.
        assert await token_answers(client, version, b"\xff" * 8) == [
            E.delegation_token_request_not_allowed.value] * 4
    finally:
        await client.aclose()


async def test_delegation_tokens_over_sasl_are_disabled(start_broker: Any) -> None:
    running = await start_broker(sasl_settings(**ON, **{"super.users": "User:admin"}))
    client = await WireClient.connect(running.port)
    try:
        assert (await plain_login(client, "alice", 'alice "quoted" secret')).error_code == 0
        # The controller's answer: timestamps left at 0.
        assert await token_answers(client, 3, b"\x00" * 8) == [
            E.delegation_token_auth_disabled.value] * 4
        # A token for another owner needs CREATE_TOKENS on that user first (Kafka's order).
        other = await raw_answer(client, CREATE, 3, create(3, owner="carol"))
        assert struct.unpack(">h", other[:2])[0] == E.delegation_token_authorization_failed.value
        assert strings(other[2:], 4, True)[0] == ["User", "carol", "User", "alice"]
        running.broker.authorizer.add([binding("User:carol", Op.CREATE_TOKENS, rt=R.USER,
                                               principal="User:alice")], "test")
        other = await raw_answer(client, CREATE, 3, create(3, owner="carol"))
        assert struct.unpack(">h", other[:2])[0] == E.delegation_token_auth_disabled.value
    finally:
        await client.aclose()


def test_a_secret_key_for_tokens_fails_at_start_up() -> None:
    with pytest.raises(ConfigError, match="delegation.token.secret.key"):
        load_config({"delegation.token.secret.key": "s3cret"})


def alter_log_dirs(version: int, *moves: tuple[str, str, list[int]]) -> Any:
    m = mod(ALTER_LOG_DIRS, max(version, 1))
    return m.AlterReplicaLogDirsRequest(dirs=tuple(
        m.AlterReplicaLogDir(path=path, topics=(
            m.AlterReplicaLogDirTopic(name=topic, partitions=tuple(parts)),))
        for path, topic, parts in moves))


def outcome(answer: Any) -> dict[tuple[str, int], Any]:
    return {(t.topic_name, int(p.partition_index)): p.error_code
            for t in answer.results for p in t.partitions}


@pytest.mark.parametrize("version", [0, 1, 2])
async def test_alter_replica_log_dirs_with_one_directory(broker: Any, version: int,
                                                         tmp_path: Any) -> None:
    broker.broker.log_manager.create_topic("t", 2)
    data_dir = str(broker.broker.log_manager.data_dir.resolve())
    client = await WireClient.connect(broker.port)
    try:
        answer = await client.request(ALTER_LOG_DIRS, version, alter_log_dirs(
            version, (data_dir, "t", [0, 5]), (str(tmp_path), "t", [1]),
            ("relative/dir", "u", [0])))
        assert outcome(answer) == {("t", 0): E.none, ("t", 5): E.replica_not_available,
                                   ("t", 1): E.log_dir_not_found,
                                   ("u", 0): E.log_dir_not_found}
    finally:
        await client.aclose()


async def test_alter_replica_log_dirs_needs_alter_on_the_cluster(start_broker: Any) -> None:
    running = await start_broker(ON)
    running.broker.log_manager.create_topic("t", 1)
    data_dir = str(running.broker.log_manager.data_dir.resolve())
    client = await WireClient.connect(running.port)
    try:
        answer = await client.request(ALTER_LOG_DIRS, 2, alter_log_dirs(2, (data_dir, "t", [0])))
        assert outcome(answer) == {("t", 0): E.cluster_authorization_failed}
        running.broker.authorizer.add([binding("kafka-cluster", Op.ALTER, rt=R.CLUSTER)],
                                      "test")
        answer = await client.request(ALTER_LOG_DIRS, 2, alter_log_dirs(2, (data_dir, "t", [0])))
        assert outcome(answer) == {("t", 0): E.none}
    finally:
        await client.aclose()


async def test_list_config_resources_v0_is_empty(start_broker: Any) -> None:
    running = await start_broker(ON)
    client = await WireClient.connect(running.port)
    request = mod(LIST_CONFIG_RESOURCES, 0).ListConfigResourcesRequest()
    try:
        answer = await client.request(LIST_CONFIG_RESOURCES, 0, request)
        assert (answer.error_code, answer.config_resources) == (
            E.cluster_authorization_failed, ())
        running.broker.authorizer.add([binding("kafka-cluster", Op.DESCRIBE_CONFIGS,
                                               rt=R.CLUSTER)], "test")
        answer = await client.request(LIST_CONFIG_RESOURCES, 0, request)
        assert (answer.error_code, answer.config_resources) == (E.none, ())
    finally:
        await client.aclose()
