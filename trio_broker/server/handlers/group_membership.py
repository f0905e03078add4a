"""JoinGroup, SyncGroup, Heartbeat and LeaveGroup: the classic group membership protocol.

Joins and syncs that must wait for the rest of the group are parked (``ctx.park``): the handler
task is free at once and the response leaves when the coordinator completes the phase.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...coordinator.group import JoinResult, SyncResult
from ...coordinator.waiting import Pending
from ..acl import AclOperation, ResourceType
from ..context import RequestContext
from ..registry import api_handler
from .group_common import build, client_host, coordinator, millis, nested, response_class, throttle

JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14


# ------------------------------------------------------------------------- JoinGroup
def _join_response(ctx: RequestContext, result: JoinResult) -> Any:
    cls = response_class(ctx)
    member_cls = nested(cls, "JoinGroupResponseMember")
    nullable_protocol = ctx.api_version >= 7
    protocol = result.protocol_name
    if protocol is None and not nullable_protocol:
        protocol = ""
    return build(
        cls, throttle_time=throttle(ctx), error_code=ErrorCode(result.error),
        generation_id=result.generation_id,
        protocol_type=result.protocol_type if nullable_protocol else None,
        protocol_name=protocol, leader=result.leader_id,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=tuple(build(member_cls, member_id=mid, group_instance_id=iid, metadata=meta)
                      for mid, iid, meta in result.members))


@api_handler(JOIN_GROUP, 0, 9)
async def handle_join_group(ctx: RequestContext, body: Any) -> Any:
    coord = coordinator(ctx)
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, body.group_id):
        return _join_response(ctx, JoinResult(ErrorCode.group_authorization_failed,
                                               body.member_id))
    if coord is None:
        return _join_response(ctx, JoinResult(ErrorCode.coordinator_not_available, body.member_id))
    session = millis(body.session_timeout)
    # v0 has no rebalance timeout: Kafka uses the session timeout.
    rebalance = millis(getattr(body, "rebalance_timeout", None), session)
    if rebalance < 0:
        rebalance = session
    pending: Pending[JoinResult] = coord.join_group(
        group_id=body.group_id, member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None),
        client_id=ctx.request.client_id or "", client_host=client_host(ctx),
        session_timeout_ms=session, rebalance_timeout_ms=rebalance,
        protocol_type=body.protocol_type,
        protocols=[(p.name, p.metadata) for p in body.protocols],
        # KIP-394: from v4 a new member first gets its id with MEMBER_ID_REQUIRED.
        require_known_member_id=ctx.api_version >= 4,
        reason=getattr(body, "reason", None),
        # KIP-814: a restarted static leader learns it leads without reassigning.
        skips_assignment=ctx.api_version >= 9)
    if pending.done:
        return _join_response(ctx, await pending.wait())

    async def wait() -> Any:
        return _join_response(ctx, await pending.wait())

    return ctx.park(wait)


# ------------------------------------------------------------------------- SyncGroup
def _sync_response(ctx: RequestContext, result: SyncResult) -> Any:
    return build(response_class(ctx), throttle_time=throttle(ctx),
                 error_code=ErrorCode(result.error), protocol_type=result.protocol_type,
                 protocol_name=result.protocol_name, assignment=result.assignment)


@api_handler(SYNC_GROUP, 0, 5)
async def handle_sync_group(ctx: RequestContext, body: Any) -> Any:
    coord = coordinator(ctx)
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, body.group_id):
        return _sync_response(ctx, SyncResult(ErrorCode.group_authorization_failed))
    if coord is None:
        return _sync_response(ctx, SyncResult(ErrorCode.coordinator_not_available))
    pending: Pending[SyncResult] = coord.sync_group(
        group_id=body.group_id, generation_id=int(body.generation_id), member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None),
        protocol_type=getattr(body, "protocol_type", None),
        protocol_name=getattr(body, "protocol_name", None),
        assignments={a.member_id: a.assignment for a in body.assignments})
    if pending.done:
        return _sync_response(ctx, await pending.wait())

    async def wait() -> Any:
        return _sync_response(ctx, await pending.wait())

    return ctx.park(wait)


# ------------------------------------------------------------------------- Heartbeat
@api_handler(HEARTBEAT, 0, 4)
async def handle_heartbeat(ctx: RequestContext, body: Any) -> Any:
    coord = coordinator(ctx)
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, body.group_id):
        error = ErrorCode.group_authorization_failed
    elif coord is None:
        error = ErrorCode.coordinator_not_available
    else:
        error = coord.heartbeat(group_id=body.group_id, member_id=body.member_id,
                                group_instance_id=getattr(body, "group_instance_id", None),
                                generation_id=int(body.generation_id))
    return build(response_class(ctx), throttle_time=throttle(ctx), error_code=ErrorCode(error))


# ------------------------------------------------------------------------ LeaveGroup
@api_handler(LEAVE_GROUP, 0, 5)
async def handle_leave_group(ctx: RequestContext, body: Any) -> Any:
    cls = response_class(ctx)
    batch = ctx.api_version >= 3
    if batch:
        leaving = [(m.member_id, m.group_instance_id, getattr(m, "reason", None))
                   for m in body.members]
    else:
        leaving = [(body.member_id, None, None)]
    coord = coordinator(ctx)
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, body.group_id):
        # Kafka answers the whole request with the error and no members.
        return build(cls, throttle_time=throttle(ctx),
                     error_code=ErrorCode.group_authorization_failed, members=())
    if coord is None:
        top = ErrorCode.coordinator_not_available
        errors = [top] * len(leaving)
    else:
        top, errors = coord.leave_group(body.group_id, leaving)
    if not batch:
        # Before v3 one member leaves and its error is the response's error.
        return build(cls, throttle_time=throttle(ctx),
                     error_code=ErrorCode(top or (errors[0] if errors else 0)))
    member_cls = nested(cls, "MemberResponse")
    return build(cls, throttle_time=throttle(ctx), error_code=ErrorCode(top),
                 members=tuple(build(member_cls, member_id=mid, group_instance_id=iid,
                                     error_code=ErrorCode(err))
                               for (mid, iid, _), err in zip(leaving, errors, strict=True)))
