"""FindCoordinator v6 (KIP-932) over a real socket to the in-process broker: GROUP and
TRANSACTION keys batched as at v4/v5, and the SHARE key type answered as Kafka 4.1's
KafkaApis.getCoordinator answers it on a node without a share coordinator: CLUSTER_ACTION or the
whole request is CLUSTER_AUTHORIZATION_FAILED, a key that is not ``groupId:topicId:partition``
INVALID_REQUEST, a valid one COORDINATOR_NOT_AVAILABLE; below v6 a SHARE key is INVALID_REQUEST.
"""

from __future__ import annotations

import base64
import sys
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode as E
from kio.static.primitive import i8

from tests.kafka_wire import WireClient
from tests.server.test_acls import ON, Op, R, binding
from trio_broker.protocol.codec import request_schema
from trio_broker.protocol.error_response import override_message
from trio_broker.server.acl import CLUSTER_NAME
from trio_broker.server.handlers.find_coordinator import share_key_problem

pytestmark = pytest.mark.timeout(30)

FIND_COORDINATOR = 10
GROUP, TRANSACTION, SHARE = 0, 1, 2


def kafka_uuid(value: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()


TOPIC = kafka_uuid(uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8"))
SHARE_KEY = f"g:{TOPIC}:0"


def mod(version: int) -> Any:
    return sys.modules[request_schema(FIND_COORDINATOR, version).__module__]


async def find(client: WireClient, version: int, key_type: int, *keys: str
               ) -> list[tuple[str, E, int, str | None]]:
    """``(key, error, node id, message)`` per key (v0-v3: the one key's answer)."""
    m = mod(version)
    if version >= 4:
        answer = await client.request(FIND_COORDINATOR, version, m.FindCoordinatorRequest(
            key_type=i8(key_type), coordinator_keys=keys))
        return [(c.key, c.error_code, int(c.node_id), c.error_message)
                for c in answer.coordinators]
    (key,) = keys
    answer = await client.request(FIND_COORDINATOR, version, m.FindCoordinatorRequest(
        key=key, key_type=i8(key_type)))
    return [(key, answer.error_code, int(answer.node_id), answer.error_message)]


async def test_v6_batches_group_and_transaction_keys(broker: Any) -> None:
    node = broker.broker.node_id
    client = await WireClient.connect(broker.port)
    try:
        for key_type in (GROUP, TRANSACTION):
            m = mod(6)
            answer = await client.request(FIND_COORDINATOR, 6, m.FindCoordinatorRequest(
                key_type=i8(key_type), coordinator_keys=("a", "b")))
            assert [(c.key, c.error_code, int(c.node_id), c.host, int(c.port))
                    for c in answer.coordinators] == [
                ("a", E.none, node, "127.0.0.1", broker.port),
                ("b", E.none, node, "127.0.0.1", broker.port)]
    finally:
        await client.aclose()


async def test_a_share_key_finds_no_share_coordinator(broker: Any) -> None:
    client = await WireClient.connect(broker.port)
    try:
        # A valid key: no share coordinator here (share groups are not served).
        assert await find(client, 6, SHARE, SHARE_KEY, "a:b:" + SHARE_KEY[2:], "bad") == [
            (SHARE_KEY, E.coordinator_not_available, -1, None),
            ("a:b:" + SHARE_KEY[2:], E.coordinator_not_available, -1, None),
            ("bad", E.invalid_request, -1, None)]
        # Below v6 the key type is INVALID_REQUEST whatever the key; v1-v3 answer with the
        # error response, which carries Kafka's message.
        for version in (4, 5):
            assert await find(client, version, SHARE, SHARE_KEY) == [
                (SHARE_KEY, E.invalid_request, -1, None)]
        for version in (1, 3):
            assert await find(client, version, SHARE, SHARE_KEY) == [
                (SHARE_KEY, E.invalid_request, -1, override_message(E.invalid_request))]
    finally:
        await client.aclose()


async def test_a_share_key_needs_cluster_action(start_broker: Any) -> None:
    running = await start_broker(ON)
    client = await WireClient.connect(running.port)
    try:
        refused = override_message(E.cluster_authorization_failed)
        assert refused == "Cluster authorization failed."
        # The whole request fails, the malformed key too (the check comes first).
        assert await find(client, 6, SHARE, SHARE_KEY, "bad") == [
            (SHARE_KEY, E.cluster_authorization_failed, -1, refused),
            ("bad", E.cluster_authorization_failed, -1, refused)]
        # Below v6 the version is refused before any authorization.
        assert await find(client, 5, SHARE, SHARE_KEY) == [
            (SHARE_KEY, E.invalid_request, -1, None)]
        running.broker.authorizer.add(
            [binding(CLUSTER_NAME, Op.CLUSTER_ACTION, rt=R.CLUSTER)], "test")
        assert await find(client, 6, SHARE, SHARE_KEY, "bad") == [
            (SHARE_KEY, E.coordinator_not_available, -1, None),
            ("bad", E.invalid_request, -1, None)]
    finally:
        await client.aclose()


@pytest.mark.parametrize(("key", "bad"), [
    (SHARE_KEY, False),
    (f"g:with:colons:{TOPIC}:7", False),        # the group id is what is left of the right
    (f"g:{TOPIC}:-1", False),                   # Integer.parseInt: any int32
    (f"g:{TOPIC}:+3", False),
    (f"g:{TOPIC}==:0", False),                  # base64 padding is optional
    (f"g:{TOPIC}:0:", False),                   # Java's split drops a trailing empty string
    ("", True),
    ("g", True),
    (f"g:{TOPIC}", True),
    (f":{TOPIC}:0", True),                      # a blank group id
    (f" \t:{TOPIC}:0", True),
    (f"g::{TOPIC}:0", False),                   # "g:" is a group id
    ("g:not-a-uuid:0", True),
    (f"g:{TOPIC[:-1]}:0", True),                # 15 bytes and a bit
    (f"g:{TOPIC}AAAA:0", True),                 # 19 bytes
    (f"g:{TOPIC}:x", True),
    (f"g:{TOPIC}:2147483648", True),            # beyond int32
    (f"g:{TOPIC}: 1", True),
])
def test_share_key_format_is_kafkas(key: str, bad: bool) -> None:
    assert share_key_problem(key) is bad
