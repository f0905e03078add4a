"""Metadata (API key 3): this broker, the cluster id, and the topics with their partitions.

A single-node cluster: every partition is led by this node, whose replica set and ISR are just
this node, at leader epoch 0. Unknown topics named in a request are created on the spot when
``auto.create.topics.enable`` and the request allow it (Kafka's ``AutoTopicCreationManager``).
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import uuid
from collections.abc import Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from ...storage.log import LEADER_EPOCH
from ..acl import AclOperation, ResourceType
from ..context import RequestContext
from ..registry import api_handler
from ._admin import (
    CLUSTER_OPERATIONS,
    MAX_PARTITIONS_PER_REQUEST,
    OPERATIONS_OMITTED,
    TOPIC_OPERATIONS,
    build,
    error_of,
    is_internal_topic,
    response_module,
    topic_name_problem,
)

METADATA = 3
MIN_VERSION = 0
MAX_VERSION = 13
_ZERO_UUID = uuid.UUID(int=0)


def broker_entries(ctx: RequestContext, module: Any) -> tuple[Any, ...]:
    """This node as the one broker of the cluster, at the address of the request's listener."""
    endpoint = ctx.broker.advertised_endpoint(ctx.connection.listener)
    return (build(module.MetadataResponseBroker, node_id=ctx.broker.node_id, host=endpoint.host,
                  port=endpoint.port, rack=None),)


def _topic_entry(ctx: RequestContext, module: Any, info: Any, *, with_ops: bool) -> Any:
    node = ctx.broker.node_id
    partitions = tuple(
        build(module.MetadataResponsePartition, error_code=ErrorCode.none, partition_index=index,
              leader_id=node, leader_epoch=LEADER_EPOCH, replica_nodes=(node,), isr_nodes=(node,),
              offline_replicas=())
        for index in range(info.num_partitions)
    )
    return build(
        module.MetadataResponseTopic, error_code=ErrorCode.none, name=info.name,
        topic_id=info.topic_id, is_internal=is_internal_topic(info.name, info),
        partitions=partitions,
        topic_authorized_operations=ctx.authorized_operations(
            ResourceType.TOPIC, info.name, TOPIC_OPERATIONS) if with_ops else OPERATIONS_OMITTED,
    )


def _error_entry(module: Any, error: ErrorCode, name: str | None,
                 topic_id: uuid.UUID | None = None) -> Any:
    cls = module.MetadataResponseTopic
    if name is None and not _name_nullable(cls):
        # Before v12 a response topic must have a name; Kafka answers an unnamed request
        # entry with an empty one.
        name = ""
    return build(cls, error_code=error, name=name,
                 topic_id=topic_id or _ZERO_UUID,
                 is_internal=name is not None and is_internal_topic(name), partitions=())


@functools.cache
def _name_nullable(cls: type[Any]) -> bool:
    name_field = next(f for f in dataclasses.fields(cls) if f.name == "name")
    return "None" in str(name_field.type)


def _requested(body: Any, version: int) -> list[Any] | None:
    """The requested topic entries, or None for "all topics" (v0: an empty list means all)."""
    if body.topics is None:
        return None
    if version == 0 and not body.topics:
        return None
    return list(body.topics)


def _auto_create(ctx: RequestContext, name: str) -> tuple[Any | None, ErrorCode]:
    """Create ``name`` with the broker defaults; the topic, or the error to report."""
    lm = ctx.broker.log_manager
    try:
        info = lm.create_topic(name, ctx.broker.config.num_partitions)
    except Exception as exc:  # StorageError and anything unexpected: reported, never raised
        code, _message = error_of(exc)
        if code is ErrorCode.topic_already_exists:
            # Raced with another creator: answer with what is there now.
            existing = lm.topics.get(name)
            if existing is not None:
                return existing, ErrorCode.none
        return None, code
    return info, ErrorCode.none


def _to_create(requested: list[Any], topics: Mapping[str, Any]) -> int:
    """How many topics of the request auto-creation would make (named, missing, valid, not
    internal; before authorization, which is checked per topic as each is created)."""
    names = {getattr(item, "name", None) for item in requested}
    return sum(1 for name in names if name and name not in topics
               and topic_name_problem(name) is None and not is_internal_topic(name))


@api_handler(METADATA, MIN_VERSION, MAX_VERSION)
async def handle_metadata(ctx: RequestContext, body: Any) -> Any:
    """Answer a Metadata request of any supported version."""
    version = ctx.api_version
    module = response_module(METADATA, version)
    config = ctx.broker.config
    lm = ctx.broker.log_manager
    topics: Mapping[str, Any] = lm.topics if lm is not None else {}
    with_ops = bool(getattr(body, "include_topic_authorized_operations", False))
    # v0-v3 have no flag: Kafka treats them as allowing auto-creation.
    allow_create = bool(getattr(body, "allow_auto_topic_creation", True))
    allow_create = allow_create and config.auto_create_topics_enable and lm is not None

    entries: list[Any] = []
    requested = _requested(body, version)
    # Kafka creates a request's missing topics in one CreateTopics, which its controller
    # refuses whole past 10,000 partitions: then none is created here either.
    refused_create = (allow_create and requested is not None and _to_create(requested, topics)
                      * config.num_partitions > MAX_PARTITIONS_PER_REQUEST)
    if refused_create:
        allow_create = False

    # KafkaApis.handleTopicMetadataRequest: DESCRIBE on each topic. Asked for all topics,
    # the others are left out (denials not logged); named, they get TOPIC_AUTHORIZATION_FAILED
    # whether they exist or not. Auto-creation needs CREATE on the cluster or the topic.
    def described(name: str) -> bool:
        return ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, name,
                             log_if_denied=requested is not None)

    cluster_create: bool | None = None

    def may_create(name: str) -> bool:
        nonlocal cluster_create
        if cluster_create is None:
            cluster_create = ctx.authorize(AclOperation.CREATE, ResourceType.CLUSTER,
                                           log_if_denied=False)
        return cluster_create or ctx.authorize(AclOperation.CREATE, ResourceType.TOPIC, name)

    if requested is None:
        entries = [_topic_entry(ctx, module, info, with_ops=with_ops)
                   for name, info in sorted(topics.items()) if described(name)]
    else:
        by_id = {info.topic_id: info for info in topics.values()}
        seen: set[str] = set()
        for item in requested:
            name = getattr(item, "name", None)
            topic_id = getattr(item, "topic_id", None)
            if topic_id is not None and topic_id != _ZERO_UUID:
                if name == "":
                    # Kafka treats an empty name as absent: the Java client's
                    # describeTopics(TopicCollection.ofTopicIds(...)) sends id + "".
                    name = None
                # Kafka refuses ids before v12 (and with a name too): INVALID_REQUEST there;
                # per topic here, so the rest of the request is still answered.
                if version < 12 or name is not None:
                    entries.append(_error_entry(module, ErrorCode.invalid_request, name, topic_id))
                    continue
                info = by_id.get(topic_id)
                if info is not None and not described(info.name):
                    entries.append(_error_entry(module, ErrorCode.topic_authorization_failed,
                                                None, topic_id))
                elif info is None:
                    entries.append(_error_entry(module, ErrorCode.unknown_topic_id, None, topic_id))
                else:
                    entries.append(_topic_entry(ctx, module, info, with_ops=with_ops))
                continue
            if name is None or name in seen:
                if name is None:
                    entries.append(_error_entry(module, ErrorCode.invalid_request, None))
                continue
            seen.add(name)
            if not described(name):
                entries.append(_error_entry(module, ErrorCode.topic_authorization_failed, name))
                continue
            info = topics.get(name)
            if info is not None:
                entries.append(_topic_entry(ctx, module, info, with_ops=with_ops))
                continue
            if topic_name_problem(name) is not None:
                entries.append(_error_entry(module, ErrorCode.invalid_topic_exception, name))
                continue
            if allow_create and not is_internal_topic(name):
                if not may_create(name):
                    entries.append(_error_entry(module, ErrorCode.topic_authorization_failed,
                                                name))
                    continue
                created, error = _auto_create(ctx, name)
                if created is not None:
                    entries.append(_topic_entry(ctx, module, created, with_ops=with_ops))
                    continue
                entries.append(_error_entry(module, error, name))
                continue
            missing = ErrorCode.unknown_topic_or_partition
            if refused_create and not is_internal_topic(name):
                missing = ErrorCode.policy_violation  # would have been created, but too many
            entries.append(_error_entry(module, missing, name))

    with_cluster_ops = bool(getattr(body, "include_cluster_authorized_operations", False))
    return build(
        module.MetadataResponse,
        # v13 (KIP-1102): a top-level error for rebootstrapping clients; none on one node.
        error_code=ErrorCode.none,
        throttle_time=datetime.timedelta(milliseconds=ctx.throttle_ms),
        brokers=broker_entries(ctx, module),
        cluster_id=ctx.broker.cluster_id,
        controller_id=ctx.broker.node_id,
        topics=tuple(entries),
        cluster_authorized_operations=(
            ctx.cluster_authorized_operations(CLUSTER_OPERATIONS)
            if with_cluster_ops else OPERATIONS_OMITTED
        ),
    )
