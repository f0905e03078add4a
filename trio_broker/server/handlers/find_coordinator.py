"""FindCoordinator: this single node coordinates every group and every transactional id.

The answer is this node at the advertised endpoint of the listener the request came in on, so a
client that bootstrapped through one listener keeps using it. From v4 several keys are asked for
at once (KIP-699). v5 (KIP-890) only says the client understands TRANSACTION_ABORTABLE, a code
FindCoordinator never answers (Kafka 3.9 neither): v5 is served as v4.

v6 (KIP-932) adds the key type SHARE, whose keys name a share partition
(``groupId:topicId:partition``) and which brokers send each other to find a share coordinator.
This node runs no share coordinator (share groups are not served), so it answers as Kafka 4.1's
``KafkaApis.getCoordinator`` does while there is no share-state topic to place one on: after
CLUSTER_ACTION on the cluster (without it the whole request fails with
CLUSTER_AUTHORIZATION_FAILED) and the key's format (INVALID_REQUEST),
COORDINATOR_NOT_AVAILABLE. Below v6 a SHARE key is INVALID_REQUEST.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from kio.schema.errors import ErrorCode

from ...protocol.error_response import error_response, override_message
from ..acl import AclOperation, ResourceType
from ..context import RequestContext
from ..registry import api_handler
from .group_common import build, coordinator, nested, response_class, throttle

FIND_COORDINATOR = 10
GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
SHARE_KEY_TYPE = 2
#: The first version that may ask for a share coordinator (KIP-932).
SHARE_VERSION = 6
#: The first version that batches keys (KIP-699).
BATCHED_VERSION = 4
_INT = re.compile(r"[+-]?\d+")
#: What Java's ``String.trim`` removes: every code point up to the space.
_JAVA_BLANK = "".join(map(chr, range(0x21)))


def _uuid_problem(text: str) -> bool:
    """Whether Kafka's ``Uuid.fromString`` refuses ``text``: 16 bytes in URL-safe base64 (at
    most 24 characters, padding optional)."""
    if len(text) > 24:
        return True
    try:
        raw = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        return True
    return len(raw) != 16


def share_key_problem(key: str) -> bool:
    """Whether ``key`` is not a share partition key (Kafka's ``SharePartitionKey.validate``):
    ``groupId:topicId:partition``, read from the right, the group id possibly holding colons
    but not blank, a base64 topic id, an int32 partition."""
    tokens = key.split(":")
    while tokens and tokens[-1] == "":  # Java's String.split drops trailing empty strings
        tokens.pop()
    if len(tokens) < 3:
        return True
    group_id, topic_id, partition = ":".join(tokens[:-2]), tokens[-2], tokens[-1]
    if not group_id.strip(_JAVA_BLANK) or _uuid_problem(topic_id):
        return True
    return not _INT.fullmatch(partition) or not -2**31 <= int(partition) < 2**31


def _answer(ctx: RequestContext, key_type: int, key: str
            ) -> tuple[int, str | None, int, str, int]:
    """``(error, message, node_id, host, port)`` for one key."""
    # KafkaApis.getCoordinator: DESCRIBE on the group or the transactional id.
    if key_type == GROUP_KEY_TYPE and not ctx.authorize(
            AclOperation.DESCRIBE, ResourceType.GROUP, key):
        return ErrorCode.group_authorization_failed, None, -1, "", -1
    if key_type == TRANSACTION_KEY_TYPE and not ctx.authorize(
            AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
        return ErrorCode.transactional_id_authorization_failed, None, -1, "", -1
    if key_type == SHARE_KEY_TYPE:
        # Below v6 (the v0-v3 answer is the error response, with Kafka's message), a bad key,
        # or no share coordinator: CLUSTER_ACTION was checked for the whole request.
        if ctx.api_version < SHARE_VERSION:
            message = (override_message(ErrorCode.invalid_request)
                       if ctx.api_version < BATCHED_VERSION else None)
            return ErrorCode.invalid_request, message, -1, "", -1
        if share_key_problem(key):
            return ErrorCode.invalid_request, None, -1, "", -1
        return ErrorCode.coordinator_not_available, None, -1, "", -1
    if key_type == TRANSACTION_KEY_TYPE:
        coord: Any = ctx.broker.transaction_coordinator
    elif key_type == GROUP_KEY_TYPE:
        coord = coordinator(ctx)
    else:
        return ErrorCode.invalid_request, f"unknown key type {key_type}", -1, "", -1
    if coord is None or not coord.is_active:
        return ErrorCode.coordinator_not_available, None, -1, "", -1
    try:
        endpoint = ctx.broker.advertised_endpoint(ctx.connection.listener)
    except KeyError:
        return ErrorCode.coordinator_not_available, None, -1, "", -1
    return ErrorCode.none, None, ctx.broker.node_id, endpoint.host, endpoint.port


@api_handler(FIND_COORDINATOR, 0, 6)
async def handle_find_coordinator(ctx: RequestContext, body: Any) -> Any:
    cls = response_class(ctx)
    key_type = int(getattr(body, "key_type", GROUP_KEY_TYPE))
    if (key_type == SHARE_KEY_TYPE and ctx.api_version >= SHARE_VERSION
            and body.coordinator_keys
            and not ctx.authorize(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER)):
        # KafkaApis.getCoordinator: authorizeClusterOperation throws, and the request is
        # answered with its error response (every key the error, with Kafka's message).
        return error_response(FIND_COORDINATOR, ctx.api_version, body,
                              ErrorCode.cluster_authorization_failed)
    if ctx.api_version >= BATCHED_VERSION:  # v5's and v6's bodies are v4's
        coordinator_cls = nested(cls, "Coordinator")
        entries = []
        for key in body.coordinator_keys:
            error, message, node, host, port = _answer(ctx, key_type, key)
            entries.append(build(coordinator_cls, key=key, node_id=node, host=host, port=port,
                                 error_code=ErrorCode(error), error_message=message))
        return build(cls, throttle_time=throttle(ctx), coordinators=tuple(entries))
    error, message, node, host, port = _answer(ctx, key_type, body.key)
    return build(cls, throttle_time=throttle(ctx), error_code=ErrorCode(error),
                 error_message=message, node_id=node, host=host, port=port)
