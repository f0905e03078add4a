"""DeleteTopics (API key 20): remove topics, by name or (v6) by topic id, with their files."""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from ..acl import AclOperation, ResourceType
from ..context import RequestContext
from ..quota_manager import CONTROLLER_MUTATION
from ..registry import api_handler
from ._admin import (
    NO_STORAGE,
    THROTTLING_QUOTA_EXCEEDED,
    build,
    controller_mutation_quota,
    duplicates,
    error_of,
    is_internal_topic,
    response_module,
    throttle,
)

DELETE_TOPICS = 20
MIN_VERSION = 0  # v0: Kafka 3.9 (legacy_schemas)
MAX_VERSION = 6
#: KIP-599: from this version a topic over the controller mutation quota is refused.
STRICT_QUOTA_SINCE = 5
_ZERO_UUID = uuid.UUID(int=0)


def _targets(body: Any) -> list[tuple[str | None, uuid.UUID | None]]:
    """``(name, topic_id)`` pairs as requested; v6 may give either (never both)."""
    if hasattr(body, "topics"):
        return [(t.name, t.topic_id if t.topic_id != _ZERO_UUID else None) for t in body.topics]
    return [(name, None) for name in body.topic_names]


@api_handler(DELETE_TOPICS, MIN_VERSION, MAX_VERSION)
async def handle_delete_topics(ctx: RequestContext, body: Any) -> Any:
    """Delete each requested topic; one result per entry."""
    module = response_module(DELETE_TOPICS, ctx.api_version)
    lm = ctx.broker.log_manager
    targets = _targets(body)
    repeated = duplicates(name if topic_id is None else topic_id for name, topic_id in targets)
    results = []
    mutations = controller_mutation_quota(ctx, STRICT_QUOTA_SINCE)
    for name, topic_id in targets:
        code, message = ErrorCode.none, None
        if name is not None and topic_id is not None:
            code, message = ErrorCode.invalid_request, \
                "You may not specify both topic name and topic id."
        elif name is None and topic_id is None:
            code, message = ErrorCode.invalid_request, "A topic name or topic id is required."
        elif (name if topic_id is None else topic_id) in repeated:
            code, message = ErrorCode.invalid_request, "Duplicate topic in the request."
        elif lm is None:
            code, message = NO_STORAGE
        elif not ctx.broker.config.delete_topic_enable:
            code, message = ErrorCode.topic_deletion_disabled, \
                "Topic deletion is disabled (delete.topic.enable=false)."
        else:
            if topic_id is not None:
                name_of_id = lm.names_by_id().get(topic_id)
                found = None if name_of_id is None else lm.topics.get(name_of_id)
                if found is None:
                    code, message = ErrorCode.unknown_topic_id, f"Topic id {topic_id} not found."
                else:
                    name = found.name
            if code is ErrorCode.none and name is not None:
                info = lm.topics.get(name)
                if not ctx.authorize(AclOperation.DELETE, ResourceType.TOPIC, name):
                    code, message = ErrorCode.topic_authorization_failed, \
                        "Authorization failed."
                elif info is None:
                    code, message = ErrorCode.unknown_topic_or_partition, \
                        "This server does not host this topic-partition."
                elif is_internal_topic(name, info):
                    # Deleting the group coordinator's log would break every group.
                    code, message = ErrorCode.invalid_topic_exception, \
                        f"Internal topic {name} cannot be deleted."
                elif not mutations.record(info.num_partitions):
                    topic_id = info.topic_id
                    code, message = ErrorCode.throttling_quota_exceeded, THROTTLING_QUOTA_EXCEEDED
                else:
                    topic_id = info.topic_id
                    try:
                        await lm.delete_topic_async(name)
                        ctx.broker.topic_metrics.forget(name)
                        ctx.broker.group_coordinator.forget_topic(name)
                        ctx.broker.transaction_coordinator.offsets.forget_topic(name)
                    except Exception as exc:  # StorageError and unexpected errors, per topic
                        code, message = error_of(exc)
        results.append(build(module.DeletableTopicResult, name=name, topic_id=topic_id,
                             error_code=code, error_message=message))
    ctx.throttle(mutations.throttle_time(), CONTROLLER_MUTATION)
    return build(module.DeleteTopicsResponse, throttle_time=throttle(ctx),
                 responses=tuple(results))
