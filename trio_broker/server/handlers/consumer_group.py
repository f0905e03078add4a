"""ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69): the consumer group protocol of
KIP-848. The group logic is in ``coordinator/consumer_group.py``; this module only translates
between topic ids on the wire and the topic names the coordinator keeps."""

from __future__ import annotations

import datetime
import functools
import uuid
from typing import Any

import attrs
from kio.schema.errors import ErrorCode

from ...coordinator.consumer_group import HeartbeatRequest, Partitions
from ..acl import AclOperation, ResourceType
from ..context import RequestContext
from ..features import consumer_protocol_enabled
from ..registry import api_handler
from .group_admin import GROUP_AUTHORIZED_OPERATIONS, INT32_MIN
from .group_common import build, client_host, coordinator, millis, nested, response_class, throttle

CONSUMER_GROUP_HEARTBEAT = 68
CONSUMER_GROUP_DESCRIBE = 69


def _may_describe(ctx: RequestContext, topic: str) -> bool:
    # Not logged when denied: filtering a regex is no refused request (Kafka's logIfDenied=false).
    return ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, topic, log_if_denied=False)


def _topic_partitions(ctx: RequestContext, cls: type[Any], partitions: Partitions,
                      with_names: bool = False) -> tuple[Any, ...]:
    topics = ctx.broker.log_manager.topics
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    out = []
    for topic, parts in by_topic.items():
        info = topics.get(topic)
        if info is None:
            continue  # deleted since: the member will get its new assignment soon
        out.append(build(cls, topic_id=info.topic_id, topic_name=topic,
                         partitions=tuple(parts)) if with_names else
                   build(cls, topic_id=info.topic_id, partitions=tuple(parts)))
    return tuple(out)


def _blank(value: str | None) -> bool:
    # Kafka's Utils.throwIfEmptyString: a value given that trims to nothing.
    return value is not None and not value.strip()


def _invalid_heartbeat(body: Any, version: int) -> str | None:
    """Kafka's ``throwIfConsumerGroupHeartbeatRequestIsInvalid``: the INVALID_REQUEST message,
    or None for a well-formed heartbeat."""
    epoch = int(body.member_epoch)
    if (version >= 1 or epoch > 0 or epoch == -1) and _blank(body.member_id):
        return "MemberId can't be empty."
    if _blank(body.group_id):
        return "GroupId can't be empty."
    if _blank(body.instance_id):
        return "InstanceId can't be empty."
    if _blank(body.rack_id):
        return "RackId can't be empty."
    if epoch == 0:
        if millis(body.rebalance_timeout) == -1:
            return "RebalanceTimeoutMs must be provided in first request."
        # A joining member owns nothing: partitions it claims would skip reconciliation.
        if body.topic_partitions is None or body.topic_partitions:
            return "TopicPartitions must be empty when (re-)joining."
        if body.subscribed_topic_names is None and \
                getattr(body, "subscribed_topic_regex", None) is None:
            return ("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when "
                    "(re-)joining.")
    elif epoch == -2:
        if body.instance_id is None:
            return "InstanceId can't be null."
    elif epoch < -2:
        return "MemberEpoch is invalid."
    return None


@api_handler(CONSUMER_GROUP_HEARTBEAT, 0, 1)
async def handle_consumer_group_heartbeat(ctx: RequestContext, body: Any) -> Any:
    cls = response_class(ctx)

    def answer(error: int, message: str | None = None, member_id: str | None = None,
               epoch: int = -1, interval: int = 0, assignment: Any = None) -> Any:
        return build(cls, throttle_time=throttle(ctx), error_code=ErrorCode(error),
                     error_message=message, member_id=member_id, member_epoch=epoch,
                     heartbeat_interval=datetime.timedelta(milliseconds=interval), assignment=assignment)

    if not consumer_protocol_enabled(ctx.broker.features.state):
        # Kafka 4.x, before any other check: group.version 0 disables the consumer protocol.
        return answer(ErrorCode.unsupported_version, "The consumer group protocol is disabled.")
    coord = coordinator(ctx)
    if coord is None:
        return answer(ErrorCode.coordinator_not_available)
    # Kafka's checks: READ on the group, DESCRIBE on every subscribed topic name.
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, body.group_id):
        return answer(ErrorCode.group_authorization_failed)
    if body.subscribed_topic_names:
        denied = [t for t in body.subscribed_topic_names
                  if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, t)]
        if denied:
            return answer(ErrorCode.topic_authorization_failed,
                          "Unauthorized topics: " + ", ".join(sorted(denied)))
    if body.group_id and (invalid := _invalid_heartbeat(body, ctx.api_version)) is not None:
        return answer(ErrorCode.invalid_request, invalid)
    owned: Partitions | None = None
    if body.topic_partitions is not None:
        names = ctx.broker.log_manager.names_by_id()
        # Partitions of topics deleted meanwhile are no longer owned by anyone.
        owned = frozenset((names[t.topic_id], int(p)) for t in body.topic_partitions
                          if t.topic_id in names for p in t.partitions)
    req = HeartbeatRequest(
        member_id=body.member_id, member_epoch=int(body.member_epoch),
        instance_id=body.instance_id, rack_id=body.rack_id,
        rebalance_timeout_ms=millis(body.rebalance_timeout),
        subscribed_topic_names=(None if body.subscribed_topic_names is None
                                else tuple(body.subscribed_topic_names)),
        subscribed_topic_regex=getattr(body, "subscribed_topic_regex", None),
        server_assignor=body.server_assignor, owned=owned,
        client_id=ctx.request.client_id or "", client_host=client_host(ctx),
        topic_authorized=None if ctx.broker.authorizer is None else functools.partial(
            _may_describe, ctx))
    if ctx.api_version == 0 and req.member_epoch == 0 and not req.member_id:
        # v0: the coordinator may generate the member id (v1 clients always send one).
        req = attrs.evolve(req, member_id=str(uuid.uuid4()))
    error, message, result = await coord.consumer_groups.heartbeat(body.group_id, req)
    if error or result is None:
        return answer(error, message, member_id=req.member_id or None)
    assignment = None
    if result.assignment is not None:
        assignment_cls = nested(cls, "Assignment")
        tp_cls = nested(cls, "TopicPartitions")
        assignment = build(assignment_cls,
                           topic_partitions=_topic_partitions(ctx, tp_cls, result.assignment))
    return answer(ErrorCode.none, None, result.member_id, result.member_epoch,
                  result.heartbeat_interval_ms, assignment)


@api_handler(CONSUMER_GROUP_DESCRIBE, 0, 1)
async def handle_consumer_group_describe(ctx: RequestContext, body: Any) -> Any:
    cls = response_class(ctx)
    group_cls = nested(cls, "DescribedGroup")
    member_cls = nested(cls, "Member")
    assignment_cls = nested(cls, "Assignment")
    tp_cls = nested(cls, "TopicPartitions")
    coord = coordinator(ctx)
    with_ops = bool(getattr(body, "include_authorized_operations", False))
    described = []
    for group_id in body.group_ids:
        operations = ctx.authorized_operations(
            ResourceType.GROUP, group_id, GROUP_AUTHORIZED_OPERATIONS) if with_ops else INT32_MIN
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            described.append(build(group_cls, error_code=ErrorCode.group_authorization_failed,
                                   group_id=group_id, group_state="", group_epoch=-1,
                                   assignment_epoch=-1, assignor_name="", members=(),
                                   authorized_operations=INT32_MIN))
            continue
        group = None if coord is None else coord.consumer_groups.groups.get(group_id)
        if group is None:
            if coord is None:
                error, message = ErrorCode.coordinator_not_available, None
            else:
                error = ErrorCode.group_id_not_found
                message = (f"Group {group_id} is not a consumer group."
                           if group_id in coord.groups else f"Group {group_id} not found.")
            described.append(build(group_cls, error_code=error, error_message=message,
                                   group_id=group_id, group_state="", group_epoch=-1,
                                   assignment_epoch=-1, assignor_name="", members=(),
                                   authorized_operations=operations))
            continue
        members = []
        for m in group.members.values():
            members.append(build(
                member_cls, member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
                subscribed_topic_names=m.subscribed_topic_names,
                subscribed_topic_regex=m.subscribed_topic_regex,
                assignment=build(assignment_cls, topic_partitions=_topic_partitions(
                    ctx, tp_cls, m.assigned, with_names=True)),
                target_assignment=build(assignment_cls, topic_partitions=_topic_partitions(
                    ctx, tp_cls, group.target.get(m.member_id, frozenset()), with_names=True)),
                member_type=1))  # 1: a consumer-protocol member (0 would be classic)
        described.append(build(
            group_cls, error_code=ErrorCode.none, group_id=group_id, group_state=group.state,
            group_epoch=group.group_epoch, assignment_epoch=group.assignment_epoch,
            assignor_name=group.assignor_name, members=tuple(members),
            authorized_operations=operations))
    return build(cls, throttle_time=throttle(ctx), groups=tuple(described))
