"""ListGroups, DescribeGroups and DeleteGroups."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...coordinator.group import GroupState
from ..acl import AclOperation, ResourceType
from ..context import RequestContext
from ..registry import api_handler
from .group_common import build, coordinator, nested, response_class, throttle

DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
DELETE_GROUPS = 42

#: Every classic group here is a "classic" group (KIP-848 names).
GROUP_TYPE = "classic"
#: KIP-848 groups (``coordinator/consumer_group.py``).
CONSUMER_GROUP_TYPE = "consumer"
#: READ, DELETE and DESCRIBE (AclOperation codes 3, 6, 8): everything a group supports, what
#: a client may do when authorization is off.
GROUP_AUTHORIZED_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)
INT32_MIN = -(2**31)


@api_handler(LIST_GROUPS, 0, 5)
async def handle_list_groups(ctx: RequestContext, body: Any) -> Any:
    cls = response_class(ctx)
    listed_cls = nested(cls, "ListedGroup")
    coord = coordinator(ctx)
    if coord is None:
        return build(cls, throttle_time=throttle(ctx),
                     error_code=ErrorCode.coordinator_not_available, groups=())
    types = {t.lower() for t in getattr(body, "types_filter", ())}
    states = getattr(body, "states_filter", ())
    error, groups = coord.list_groups(states)
    consumer_groups = coord.consumer_groups.groups
    # A consumer group's offsets live in a classic entry: it is listed as the consumer group.
    listed = [(g.group_id, g.protocol_type, g.state, GROUP_TYPE) for g in groups
              if g.group_id not in consumer_groups]
    wanted_states = {s.lower() for s in states}
    for group_id, group in consumer_groups.items():
        if not wanted_states or group.state in wanted_states:
            listed.append((group_id, "consumer", group.state.capitalize(), CONSUMER_GROUP_TYPE))
    if types:
        listed = [g for g in listed if g[3] in types]
    # KafkaApis.handleListGroupsRequest: DESCRIBE on the cluster lists every group, else
    # the groups the principal may DESCRIBE (denials not logged).
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, log_if_denied=False):
        listed = [g for g in listed if ctx.authorize(
            AclOperation.DESCRIBE, ResourceType.GROUP, g[0], log_if_denied=False)]
    return build(cls, throttle_time=throttle(ctx), error_code=ErrorCode(error),
                 groups=tuple(build(listed_cls, group_id=gid, protocol_type=ptype,
                                    group_state=state, group_type=gtype)
                              for gid, ptype, state, gtype in listed))


#: From v6 (KIP-1043) an unknown group, or one that is not a classic group, is
#: GROUP_ID_NOT_FOUND with a message; below, a Dead group with no error.
GROUP_NOT_FOUND_VERSION = 6


@api_handler(DESCRIBE_GROUPS, 0, 6)
async def handle_describe_groups(ctx: RequestContext, body: Any) -> Any:
    """As Kafka 4's GroupMetadataManager.describeGroups: classic groups only."""
    cls = response_class(ctx)
    group_cls = nested(cls, "DescribedGroup")
    member_cls = nested(cls, "DescribedGroupMember")
    coord = coordinator(ctx)
    with_ops = bool(getattr(body, "include_authorized_operations", False))
    described = []
    for group_id in body.groups:
        operations = ctx.authorized_operations(
            ResourceType.GROUP, group_id, GROUP_AUTHORIZED_OPERATIONS) if with_ops else INT32_MIN
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            described.append(build(group_cls, error_code=ErrorCode.group_authorization_failed,
                                   group_id=group_id, group_state="", protocol_type="",
                                   protocol_data="", members=(),
                                   authorized_operations=INT32_MIN))
            continue
        if coord is None:
            described.append(build(group_cls, error_code=ErrorCode.coordinator_not_available,
                                   group_id=group_id, group_state="", protocol_type="",
                                   protocol_data="", members=(),
                                   authorized_operations=operations))
            continue
        summary = coord.describe_group(group_id)
        missing = None
        if group_id in coord.consumer_groups.groups:
            missing = f"Group {group_id} is not a classic group."
        elif summary.error == ErrorCode.none and summary.state == GroupState.DEAD.value:
            missing = f"Group {group_id} not found."
        if missing is not None:
            # GroupIdNotFoundException: a Dead group, and from v6 the error and its message.
            found = ctx.api_version < GROUP_NOT_FOUND_VERSION
            described.append(build(
                group_cls, error_code=ErrorCode.none if found else ErrorCode.group_id_not_found,
                error_message=None if found else missing, group_id=group_id,
                group_state=GroupState.DEAD.value, protocol_type="", protocol_data="", members=(),
                authorized_operations=operations))
            continue
        described.append(build(
            group_cls, error_code=ErrorCode(summary.error), group_id=group_id,
            group_state=summary.state, protocol_type=summary.protocol_type,
            protocol_data=summary.protocol_name,
            members=tuple(build(member_cls, member_id=m.member_id,
                                group_instance_id=m.group_instance_id, client_id=m.client_id,
                                client_host=m.client_host, member_metadata=m.metadata,
                                member_assignment=m.assignment) for m in summary.members),
            authorized_operations=operations))
    return build(cls, throttle_time=throttle(ctx), groups=tuple(described))


@api_handler(DELETE_GROUPS, 0, 2)
async def handle_delete_groups(ctx: RequestContext, body: Any) -> Any:
    cls = response_class(ctx)
    result_cls = nested(cls, "DeletableGroupResult")
    coord = coordinator(ctx)
    names = list(dict.fromkeys(body.groups_names))
    denied = {name for name in names
              if not ctx.authorize(AclOperation.DELETE, ResourceType.GROUP, name)}
    allowed = [name for name in names if name not in denied]
    if coord is None:
        results = dict.fromkeys(allowed, ErrorCode.coordinator_not_available)
    else:
        results = {}
        for name in allowed:
            consumer_result = await coord.consumer_groups.delete(name)
            if consumer_result is not None and consumer_result:
                results[name] = consumer_result
            else:
                # The consumer group is gone: its offsets go with the classic entry.
                results.update(await coord.delete_groups([name]))
                if consumer_result is not None and \
                        results[name] == ErrorCode.group_id_not_found:
                    results[name] = ErrorCode.none
    results = {name: results.get(name, ErrorCode.group_authorization_failed)
               for name in names}
    return build(cls, throttle_time=throttle(ctx),
                 results=tuple(build(result_cls, group_id=name, error_code=ErrorCode(err))
                               for name, err in results.items()))
