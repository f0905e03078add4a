"""FindCoordinator: this single node coordinates every group and every transactional id.

The answer is this node at the advertised endpoint of the listener the request came in on, so a
client that bootstrapped through one listener keeps using it. From v4 several keys are asked for
at once (KIP-699). v5 (KIP-890) only says the client understands TRANSACTION_ABORTABLE, a code
FindCoordinator never answers (Kafka 3.9 neither): v5 is served as v4.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ..acl import AclOperation, ResourceType
from ..context import RequestContext
from ..registry import api_handler
from .group_common import build, coordinator, nested, response_class, throttle

FIND_COORDINATOR = 10
GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1


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


@api_handler(FIND_COORDINATOR, 0, 5)
async def handle_find_coordinator(ctx: RequestContext, body: Any) -> Any:
    cls = response_class(ctx)
    key_type = int(getattr(body, "key_type", GROUP_KEY_TYPE))
    if ctx.api_version >= 4:  # v5's body is v4's
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
