"""OffsetCommit, OffsetFetch and OffsetDelete: committed offsets kept by the group coordinator."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...coordinator import OffsetCommitEntry
from ...offload import Steps
from ..acl import AclOperation, ResourceType
from ..context import RequestContext
from ..registry import api_handler
from .group_common import build, coordinator, nested, response_class, throttle

OFFSET_COMMIT = 8
OFFSET_FETCH = 9
OFFSET_DELETE = 47

#: What OffsetFetch answers for a partition without a committed offset.
NO_OFFSET = -1


# ---------------------------------------------------------------------- OffsetCommit
def _every_partition(cls: type[Any], body: Any, error: int) -> Any:
    """``getErrorResponse`` of OffsetCommit v0/v1: every requested partition gets ``error``."""
    topic_cls = nested(cls, "OffsetCommitResponseTopic")
    partition_cls = nested(cls, "OffsetCommitResponsePartition")
    return build(cls, topics=tuple(
        build(topic_cls, name=t.name, partitions=tuple(
            build(partition_cls, partition_index=p.partition_index, error_code=ErrorCode(error))
            for p in t.partitions)) for t in body.topics))


def _offset_commit_v0(ctx: RequestContext, body: Any) -> Any:
    """KafkaApis.handleOffsetCommitRequest (3.9) for v0, which stored offsets in ZooKeeper:
    after the group and topic checks, a request with any valid partition left fails with
    UNSUPPORTED_VERSION everywhere ("Version 0 offset commit requests" are unsupported on a
    KRaft broker); one with none left gets the per-partition errors."""
    cls = response_class(ctx)
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, body.group_id):
        return _every_partition(cls, body, ErrorCode.group_authorization_failed)
    lm = ctx.broker.log_manager
    errors: dict[tuple[str, int], int] = {}
    valid = False
    for topic in body.topics:
        allowed = ctx.authorize(AclOperation.READ, ResourceType.TOPIC, topic.name)
        for p in topic.partitions:
            key = (topic.name, int(p.partition_index))
            if not allowed:
                errors[key] = ErrorCode.topic_authorization_failed
            elif lm is None or lm.get_partition(*key) is None:
                errors[key] = ErrorCode.unknown_topic_or_partition
            else:
                valid = True
    if valid:
        return _every_partition(cls, body, ErrorCode.unsupported_version)
    topic_cls = nested(cls, "OffsetCommitResponseTopic")
    partition_cls = nested(cls, "OffsetCommitResponsePartition")
    return build(cls, topics=tuple(
        build(topic_cls, name=t.name, partitions=tuple(
            build(partition_cls, partition_index=p.partition_index,
                  error_code=ErrorCode(errors[(t.name, int(p.partition_index))]))
            for p in t.partitions)) for t in body.topics))


def _needs_v9(ctx: RequestContext, coord: Any, body: Any) -> bool:
    """ConsumerGroup.validateOffsetCommit (3.9): a member of a consumer group (KIP-848) must
    commit with v9+; below, its non-transactional commits are UNSUPPORTED_VERSION. A commit
    naming no member (epoch < 0, no id: an admin client) is checked as before."""
    epoch, member_id = int(body.generation_id_or_member_epoch), body.member_id
    if ctx.api_version >= 9 or coord is None or (epoch < 0 and not member_id):
        return False
    return coord.consumer_groups.member_epoch(body.group_id, member_id)[1] is not None


# v0 and v1 are Kafka 3.9's (legacy_schemas); v1's commit_timestamp (-1: now) is the commit's
# time, as Kafka 3.9 keeps it. v9 (KIP-848) has v8's
# fields; the member epoch in generation_id_or_member_epoch is checked as in every version.
@api_handler(OFFSET_COMMIT, 0, 9)
async def handle_offset_commit(ctx: RequestContext, body: Any) -> Any:
    if ctx.api_version == 0:
        return _offset_commit_v0(ctx, body)
    cls = response_class(ctx)
    topic_cls = nested(cls, "OffsetCommitResponseTopic")
    partition_cls = nested(cls, "OffsetCommitResponsePartition")
    offsets: dict[tuple[str, int], OffsetCommitEntry] = {}
    steps = Steps()  # thousands of partitions: other connections get their turns
    for topic in body.topics:
        for p in topic.partitions:
            await steps.tick()
            offsets[(topic.name, int(p.partition_index))] = OffsetCommitEntry(
                int(p.committed_offset), int(getattr(p, "committed_leader_epoch", -1)),
                p.committed_metadata, int(getattr(p, "commit_timestamp", -1)))
    coord = coordinator(ctx)
    # KafkaApis.handleOffsetCommitRequest: READ on the group, then READ on each topic.
    denied: dict[tuple[str, int], int] = {}
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, body.group_id):
        denied = dict.fromkeys(offsets, ErrorCode.group_authorization_failed)
        offsets = {}
    else:
        for name in {topic for topic, _ in offsets}:
            if not ctx.authorize(AclOperation.READ, ResourceType.TOPIC, name):
                for key in [key for key in offsets if key[0] == name]:
                    denied[key] = ErrorCode.topic_authorization_failed
                    del offsets[key]
    if denied and not offsets:
        errors = denied
    elif coord is None:
        errors = dict.fromkeys(offsets, ErrorCode.coordinator_not_available)
    elif _needs_v9(ctx, coord, body):
        errors = {**dict.fromkeys(offsets, ErrorCode.unsupported_version), **denied}
    else:
        errors = await coord.commit_offsets(
            group_id=body.group_id, generation_id=int(body.generation_id_or_member_epoch),
            member_id=body.member_id, group_instance_id=getattr(body, "group_instance_id", None),
            offsets=offsets)
        errors = {**errors, **denied}
    topics = []
    for topic in body.topics:
        partitions = []
        for p in topic.partitions:
            await steps.tick()
            partitions.append(build(
                partition_cls, partition_index=p.partition_index,
                error_code=ErrorCode(errors.get((topic.name, int(p.partition_index)), 0))))
        topics.append(build(topic_cls, name=topic.name, partitions=tuple(partitions)))
    return build(cls, throttle_time=throttle(ctx), topics=tuple(topics))


# ----------------------------------------------------------------------- OffsetFetch
def _member_error(coord: Any, group_id: str, member_id: str | None, member_epoch: int) -> int:
    """ConsumerGroup.validateOffsetFetch (3.9), OffsetFetch v9+: a consumer group's member
    fetches only with its current epoch (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH). A request
    naming no member (null id, epoch -1: an admin client), a classic group and an unknown
    group are not checked."""
    if member_id is None and member_epoch < 0:
        return ErrorCode.none
    consumer_group, epoch = coord.consumer_groups.member_epoch(group_id, member_id)
    if not consumer_group:
        return ErrorCode.none
    if epoch is None:
        return ErrorCode.unknown_member_id
    return ErrorCode.none if epoch == member_epoch else ErrorCode.stale_member_epoch


def _fetch_group(ctx: RequestContext, group_id: str, topics: Any, topic_cls: type[Any],
                 partition_cls: type[Any], index_field: str, require_stable: bool = False,
                 member: tuple[str | None, int] = (None, -1)) -> tuple[int, tuple[Any, ...]]:
    """``(error, topics)`` for one group; ``topics`` None means every committed partition.
    With ``require_stable`` (v7+), a partition with an undecided transactional commit is
    UNSTABLE_OFFSET_COMMIT (KIP-447), so the consumer retries instead of starting from an
    offset the transaction is about to replace. ``member`` is v9's member id and epoch."""
    coord = coordinator(ctx)
    wanted: list[tuple[str, int]] | None = None
    if topics is not None:
        wanted = [(t.name, int(i)) for t in topics for i in getattr(t, index_field)]
    # KafkaApis.handleOffsetFetchRequest: DESCRIBE on the group; topics without DESCRIBE are
    # TOPIC_AUTHORIZATION_FAILED when named, left out when all are asked for.
    denied_topics: set[str] = set()
    found: dict[tuple[str, int], Any]
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        error, found = int(ErrorCode.group_authorization_failed), {}
    elif coord is None:
        error, found = int(ErrorCode.coordinator_not_available), {}
    elif member_error := _member_error(coord, group_id, *member):
        # GroupCoordinatorService.fetchOffsets: the group's error alone, no topics.
        return member_error, ()
    else:
        error, found = coord.fetch_offsets(group_id, wanted)
        names = {t for t, _ in (wanted if wanted is not None else found)}
        denied_topics = {name for name in names if not ctx.authorize(
            AclOperation.DESCRIBE, ResourceType.TOPIC, name, log_if_denied=wanted is not None)}
        if wanted is None and denied_topics:
            found = {k: v for k, v in found.items() if k[0] not in denied_topics}
    unstable = {key for key in (
        ctx.broker.transaction_coordinator.offsets.pending_partitions(group_id)
        if require_stable and not error else ()) if key[0] not in denied_topics}
    by_topic: dict[str, list[Any]] = {}
    keys = wanted if wanted is not None else sorted(set(found) | unstable)
    for topic, partition in keys:
        committed = found.get((topic, partition))
        if (topic, partition) in unstable:
            committed = None
        by_topic.setdefault(topic, []).append(build(
            partition_cls, partition_index=partition,
            committed_offset=committed.offset if committed else NO_OFFSET,
            committed_leader_epoch=committed.leader_epoch if committed else -1,
            metadata=committed.metadata if committed else "",
            # Before v2 there is no top-level error: each partition carries it.
            error_code=ErrorCode.topic_authorization_failed if topic in denied_topics
            else ErrorCode.unstable_offset_commit if (topic, partition) in unstable
            else ErrorCode(error if ctx.api_version < 2 else 0)))
    return error, tuple(build(topic_cls, name=name, partitions=tuple(parts))
                        for name, parts in by_topic.items())


def _offset_fetch_v0(ctx: RequestContext, body: Any) -> Any:
    """KafkaApis.handleOffsetFetchRequestFromZookeeper (3.9): v0 read ZooKeeper's offsets, which
    a KRaft broker has not: after the group check every requested partition is
    UNSUPPORTED_VERSION, with offset -1 and empty metadata (OffsetFetchRequest.getErrorResponse)."""
    cls = response_class(ctx)
    error = (ErrorCode.unsupported_version
             if ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, body.group_id)
             else ErrorCode.group_authorization_failed)
    topic_cls = nested(cls, "OffsetFetchResponseTopic")
    partition_cls = nested(cls, "OffsetFetchResponsePartition")
    return build(cls, topics=tuple(
        build(topic_cls, name=t.name, partitions=tuple(
            build(partition_cls, partition_index=i, committed_offset=NO_OFFSET, metadata="",
                  error_code=error) for i in t.partition_indexes))
        for t in body.topics))


@api_handler(OFFSET_FETCH, 0, 9)
async def handle_offset_fetch(ctx: RequestContext, body: Any) -> Any:
    if ctx.api_version == 0:
        return _offset_fetch_v0(ctx, body)
    cls = response_class(ctx)
    if ctx.api_version >= 8:
        group_cls = nested(cls, "OffsetFetchResponseGroup")
        topic_cls = nested(cls, "OffsetFetchResponseTopics")
        partition_cls = nested(cls, "OffsetFetchResponsePartitions")
        groups = []
        for group in body.groups:
            error, topics = _fetch_group(ctx, group.group_id, group.topics, topic_cls,
                                         partition_cls, "partition_indexes",
                                         bool(getattr(body, "require_stable", False)),
                                         (getattr(group, "member_id", None),
                                          int(getattr(group, "member_epoch", -1))))
            groups.append(build(group_cls, group_id=group.group_id, topics=topics,
                                error_code=ErrorCode(error)))
        return build(cls, throttle_time=throttle(ctx), groups=tuple(groups))
    topic_cls = nested(cls, "OffsetFetchResponseTopic")
    partition_cls = nested(cls, "OffsetFetchResponsePartition")
    error, topics = _fetch_group(ctx, body.group_id, body.topics, topic_cls, partition_cls,
                                 "partition_indexes",
                                 bool(getattr(body, "require_stable", False)))
    return build(cls, throttle_time=throttle(ctx), topics=topics, error_code=ErrorCode(error))


# ---------------------------------------------------------------------- OffsetDelete
@api_handler(OFFSET_DELETE, 0, 0)
async def handle_offset_delete(ctx: RequestContext, body: Any) -> Any:
    cls = response_class(ctx)
    topic_cls = nested(cls, "OffsetDeleteResponseTopic")
    partition_cls = nested(cls, "OffsetDeleteResponsePartition")
    wanted = [(t.name, int(p.partition_index)) for t in body.topics for p in t.partitions]
    coord = coordinator(ctx)
    # KafkaApis.handleOffsetDeleteRequest: DELETE on the group, READ on each topic.
    results: dict[tuple[str, int], int]
    group_allowed = ctx.authorize(AclOperation.DELETE, ResourceType.GROUP, body.group_id)
    denied = {t.name for t in body.topics
              if group_allowed and not ctx.authorize(AclOperation.READ, ResourceType.TOPIC,
                                                     t.name)}
    if not group_allowed:
        error, results = int(ErrorCode.group_authorization_failed), {}
    elif coord is None:
        error, results = int(ErrorCode.coordinator_not_available), {}
    else:
        error, results = await coord.delete_offsets(
            body.group_id, [key for key in wanted if key[0] not in denied])
        results = {**results, **{key: int(ErrorCode.topic_authorization_failed)
                                 for key in wanted if key[0] in denied}}
    topics = []
    if not error:
        for topic in body.topics:
            topics.append(build(topic_cls, name=topic.name, partitions=tuple(
                build(partition_cls, partition_index=p.partition_index,
                      error_code=ErrorCode(results.get((topic.name, int(p.partition_index)), 0)))
                for p in topic.partitions)))
    return build(cls, error_code=ErrorCode(error), throttle_time=throttle(ctx),
                 topics=tuple(topics))
