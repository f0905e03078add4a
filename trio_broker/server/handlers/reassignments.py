"""The replica-placement admin APIs as a one-node KRaft cluster answers them:
AlterPartitionReassignments (45) and ListPartitionReassignments (46).

Tools and GUIs probe these; with one broker no reassignment is ever in progress, and the only
valid replica set is ``[node.id]`` (already the current one, so Kafka treats it as a no-op).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ..acl import AclOperation, ResourceType
from ..context import RequestContext
from ..registry import api_handler
from ._admin import build, response_module, throttle

ALTER_PARTITION_REASSIGNMENTS = 45
LIST_PARTITION_REASSIGNMENTS = 46
UNKNOWN_PARTITION = "This server does not host this topic-partition."


def _reassignment_error(ctx: RequestContext, topic: str, part: Any,
                        allow_rf_change: bool) -> tuple[ErrorCode, str | None]:
    """Kafka's ReplicationControlManager checks, in its order, for one partition."""
    lm = ctx.broker.log_manager
    if lm is None or lm.get_partition(topic, int(part.partition_index)) is None:
        return ErrorCode.unknown_topic_or_partition, UNKNOWN_PARTITION
    if part.replicas is None:
        # A cancellation: there is never anything to cancel.
        return ErrorCode.no_reassignment_in_progress, \
            "No ongoing reassignment for this partition."
    replicas = [int(r) for r in part.replicas]
    if not replicas:
        return ErrorCode.invalid_replica_assignment, \
            "The manual partition assignment includes an empty replica list."
    seen: set[int] = set()
    for replica in replicas:
        if replica in seen:
            return ErrorCode.invalid_replica_assignment, \
                f"The manual partition assignment includes the broker {replica} more than once."
        seen.add(replica)
    node = ctx.broker.node_id
    for replica in replicas:
        if replica != node:
            return ErrorCode.invalid_replica_assignment, \
                f"The manual partition assignment includes broker {replica}, but no such " \
                "broker is registered."
    if not allow_rf_change and len(replicas) != 1:  # unreachable with one broker; as Kafka
        return ErrorCode.invalid_replication_factor, \
            "The replication factor is changed from 1 to " f"{len(replicas)}"
    return ErrorCode.none, None  # [node]: the current assignment, a no-op


@api_handler(ALTER_PARTITION_REASSIGNMENTS, 0, 1)
async def handle_alter_partition_reassignments(ctx: RequestContext, body: Any) -> Any:
    """Per partition: Kafka's error for the requested replica set, or NONE for ``[node]``."""
    module = response_module(ALTER_PARTITION_REASSIGNMENTS, ctx.api_version)
    allow_rf_change = bool(getattr(body, "allow_replication_factor_change", True))
    responses = []
    if not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER):
        return build(module.AlterPartitionReassignmentsResponse, throttle_time=throttle(ctx),
                     error_code=ErrorCode.cluster_authorization_failed, error_message=None,
                     responses=(), allow_replication_factor_change=allow_rf_change)
    for topic in body.topics:
        partitions = []
        for part in topic.partitions:
            code, message = _reassignment_error(ctx, topic.name, part, allow_rf_change)
            partitions.append(build(module.ReassignablePartitionResponse,
                                    partition_index=int(part.partition_index), error_code=code,
                                    error_message=message))
        responses.append(build(module.ReassignableTopicResponse, name=topic.name,
                               partitions=tuple(partitions)))
    return build(module.AlterPartitionReassignmentsResponse, throttle_time=throttle(ctx),
                 error_code=ErrorCode.none, error_message=None, responses=tuple(responses),
                 allow_replication_factor_change=allow_rf_change)


@api_handler(LIST_PARTITION_REASSIGNMENTS, 0, 0)
async def handle_list_partition_reassignments(ctx: RequestContext, body: Any) -> Any:
    """Nothing is ever in progress: no topics, whatever was asked (Kafka lists only ongoing
    reassignments and skips unknown partitions)."""
    module = response_module(LIST_PARTITION_REASSIGNMENTS, ctx.api_version)
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER):
        return build(module.ListPartitionReassignmentsResponse, throttle_time=throttle(ctx),
                     error_code=ErrorCode.cluster_authorization_failed, error_message=None,
                     topics=())
    return build(module.ListPartitionReassignmentsResponse, throttle_time=throttle(ctx),
                 error_code=ErrorCode.none, error_message=None, topics=())
