"""CreatePartitions (API key 37): raise a topic's partition count."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ..acl import AclOperation, ResourceType
from ..context import RequestContext
from ..quota_manager import CONTROLLER_MUTATION
from ..registry import api_handler
from ._admin import (
    MAX_PARTITIONS_PER_REQUEST,
    NO_STORAGE,
    THROTTLING_QUOTA_EXCEEDED,
    build,
    controller_mutation_quota,
    duplicates,
    error_of,
    response_module,
    throttle,
)

CREATE_PARTITIONS = 37
MIN_VERSION = 0
MAX_VERSION = 3
#: KIP-599: from this version a topic over the controller mutation quota is refused.
STRICT_QUOTA_SINCE = 3


def _problem(ctx: RequestContext, topic: Any, current: int) -> tuple[ErrorCode, str] | None:
    """Kafka's checks of a new partition count and assignment, or None when acceptable."""
    count = int(topic.count)
    if count < current:
        return ErrorCode.invalid_partitions, \
            f"Topic currently has {current} partitions, which is higher than the requested {count}."
    if count == current:
        return ErrorCode.invalid_partitions, f"Topic already has {current} partitions."
    if topic.assignments is not None:
        added = count - current
        if len(topic.assignments) != added:
            return ErrorCode.invalid_replica_assignment, \
                f"Increasing the number of partitions by {added} but {len(topic.assignments)} " \
                "assignments provided."
        node = ctx.broker.node_id
        for assignment in topic.assignments:
            if list(assignment.broker_ids) != [node]:
                return ErrorCode.invalid_replica_assignment, \
                    f"Unknown broker(s) or replication factor above 1 in assignment " \
                    f"{list(assignment.broker_ids)}; only broker {node} is registered."
    return None


def _new_partitions(lm: Any, topics: Any) -> int:
    """Partitions the request would add to existing topics (Kafka's controller bounds the
    records of one operation)."""
    total = 0
    for topic in topics:
        info = lm.topics.get(topic.name)
        if info is not None:
            total += max(int(topic.count) - info.num_partitions, 0)
    return total


@api_handler(CREATE_PARTITIONS, MIN_VERSION, MAX_VERSION)
async def handle_create_partitions(ctx: RequestContext, body: Any) -> Any:
    """Add partitions to each requested topic."""
    module = response_module(CREATE_PARTITIONS, ctx.api_version)
    lm = ctx.broker.log_manager
    repeated = duplicates(t.name for t in body.topics)
    results = []
    reported: set[str] = set()
    mutations = controller_mutation_quota(ctx, STRICT_QUOTA_SINCE)
    if lm is not None and _new_partitions(lm, body.topics) > MAX_PARTITIONS_PER_REQUEST:
        names = dict.fromkeys(topic.name for topic in body.topics)
        return build(module.CreatePartitionsResponse, throttle_time=throttle(ctx), results=tuple(
            build(module.CreatePartitionsTopicResult, name=name,
                  error_code=ErrorCode.policy_violation,
                  error_message="Unable to perform excessively large batch operation.")
            for name in names))
    for topic in body.topics:
        name = topic.name
        code, message = ErrorCode.none, None
        if name in repeated:
            if name in reported:
                continue
            reported.add(name)
            code, message = ErrorCode.invalid_request, "Duplicate topic in request."
        elif not ctx.authorize(AclOperation.ALTER, ResourceType.TOPIC, name):
            code, message = ErrorCode.topic_authorization_failed, "Authorization failed."
        elif lm is None:
            code, message = NO_STORAGE
        else:
            info = lm.topics.get(name)
            if info is None:
                code, message = ErrorCode.unknown_topic_or_partition, \
                    "This server does not host this topic-partition."
            else:
                problem = _problem(ctx, topic, info.num_partitions)
                if problem is not None:
                    code, message = problem
                elif not mutations.record(int(topic.count) - info.num_partitions):
                    code, message = ErrorCode.throttling_quota_exceeded, THROTTLING_QUOTA_EXCEEDED
                else:
                    try:
                        await lm.create_partitions_async(name, int(topic.count),
                                                         validate_only=bool(body.validate_only))
                    except Exception as exc:  # StorageError, per topic
                        code, message = error_of(exc)
        results.append(build(module.CreatePartitionsTopicResult, name=name, error_code=code,
                             error_message=message))
    ctx.throttle(mutations.throttle_time(), CONTROLLER_MUTATION)
    return build(module.CreatePartitionsResponse, throttle_time=throttle(ctx),
                 results=tuple(results))
