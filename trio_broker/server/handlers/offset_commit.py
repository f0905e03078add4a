"""OffsetCommit, OffsetFetch and OffsetDelete: committed offsets kept by the group coordinator."""

from __future__ import annotations

import uuid
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
#: OffsetCommit and OffsetFetch name topics by id from v10 (KIP-848, Kafka 4.1's
#: ``OffsetCommitResponse.useTopicIds`` / ``OffsetFetchRequest.useTopicIds``), names no more.
TOPIC_ID_VERSION = 10


def _names_by_id(ctx: RequestContext) -> dict[uuid.UUID, str] | None:
    """The topic names by id for a v10 request (one look-up per request, never per entry);
    None below v10, where topics are named."""
    if ctx.api_version < TOPIC_ID_VERSION:
        return None
    lm = ctx.broker.log_manager
    return lm.names_by_id() if lm is not None else {}


def _topic_names(topics: Any, names_by_id: dict[uuid.UUID, str] | None) -> list[str | None]:
    """Each topic entry's name: its own below v10; from v10 the name of its id, None for an
    id this broker has no topic of (the zero id too, which kio reads as None), answered
    UNKNOWN_TOPIC_ID before any topic authorization (KafkaApis.handleOffsetCommitRequest,
    fetchOffsetsForGroup)."""
    if names_by_id is None:
        return [t.name for t in topics]
    return [names_by_id.get(t.topic_id) if t.topic_id is not None else None for t in topics]


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
# time, as Kafka 3.9 keeps it. v9 (KIP-848) has v8's fields; the member epoch in
# generation_id_or_member_epoch is checked as in every version. v10 (Kafka 4.1) names each
# topic by id: resolved to its name once, then checked and committed as before, answered by id.
@api_handler(OFFSET_COMMIT, 0, 10)
async def handle_offset_commit(ctx: RequestContext, body: Any) -> Any:
    if ctx.api_version == 0:
        return _offset_commit_v0(ctx, body)
    cls = response_class(ctx)
    topic_cls = nested(cls, "OffsetCommitResponseTopic")
    partition_cls = nested(cls, "OffsetCommitResponsePartition")
    names = _topic_names(body.topics, _names_by_id(ctx))
    offsets: dict[tuple[str, int], OffsetCommitEntry] = {}
    steps = Steps()  # thousands of partitions: other connections get their turns
    for topic, name in zip(body.topics, names, strict=True):
        if name is None:
            continue
        for p in topic.partitions:
            await steps.tick()
            offsets[(name, int(p.partition_index))] = OffsetCommitEntry(
                int(p.committed_offset), int(getattr(p, "committed_leader_epoch", -1)),
                p.committed_metadata, int(getattr(p, "commit_timestamp", -1)))
    coord = coordinator(ctx)
    # KafkaApis.handleOffsetCommitRequest: READ on the group (every partition fails without
    # it, unknown ids too), then an unknown id, then READ on each (resolved) topic.
    group_allowed = ctx.authorize(AclOperation.READ, ResourceType.GROUP, body.group_id)
    denied: dict[tuple[str, int], int] = {}
    if not group_allowed:
        denied = dict.fromkeys(offsets, ErrorCode.group_authorization_failed)
        offsets = {}
    else:
        for name in {topic for topic, _ in offsets}:
            if not ctx.authorize(AclOperation.READ, ResourceType.TOPIC, name):
                for key in [key for key in offsets if key[0] == name]:
                    denied[key] = ErrorCode.topic_authorization_failed
                    del offsets[key]
    if not offsets:
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
    unknown_id = (ErrorCode.unknown_topic_id if group_allowed
                  else ErrorCode.group_authorization_failed)
    topics = []
    for topic, name in zip(body.topics, names, strict=True):
        partitions = []
        for p in topic.partitions:
            await steps.tick()
            error = (unknown_id if name is None
                     else errors.get((name, int(p.partition_index)), 0))
            partitions.append(build(partition_cls, partition_index=p.partition_index,
                                    error_code=ErrorCode(error)))
        # v10 answers each topic by the id it was asked by (OffsetCommitResponse's builder
        # keyed by id), known or not.
        topics.append(build(topic_cls, name=name, topic_id=getattr(topic, "topic_id", None),
                            partitions=tuple(partitions)))
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
                 partition_cls: type[Any], require_stable: bool = False,
                 member: tuple[str | None, int] = (None, -1),
                 names_by_id: dict[uuid.UUID, str] | None = None) -> tuple[int, tuple[Any, ...]]:
    """``(error, topics)`` for one group; ``topics`` None means every committed partition.
    With ``require_stable`` (v7+), a partition with an undecided transactional commit is
    UNSTABLE_OFFSET_COMMIT (KIP-447), so the consumer retries instead of starting from an
    offset the transaction is about to replace. ``member`` is v9's member id and epoch;
    ``names_by_id`` is v10's look-up of the request's topic ids."""
    coord = coordinator(ctx)
    names = None if topics is None else _topic_names(topics, names_by_id)
    wanted: list[tuple[str, int]] | None = None
    if topics is not None:
        wanted = [(name, int(i)) for t, name in zip(topics, names or (), strict=True)
                  if name is not None for i in t.partition_indexes]
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
        names_seen = {t for t, _ in (wanted if wanted is not None else found)}
        denied_topics = {name for name in names_seen if not ctx.authorize(
            AclOperation.DESCRIBE, ResourceType.TOPIC, name, log_if_denied=wanted is not None)}
        if wanted is None and denied_topics:
            found = {k: v for k, v in found.items() if k[0] not in denied_topics}
    if error and ctx.api_version >= 2:
        # OffsetFetchRequest.getErrorResponse (v2-v7), OffsetFetchResponse.groupError (v8+):
        # the group's error alone; v1 has no such field and answers it in every partition.
        return error, ()
    unstable = {key for key in (
        ctx.broker.transaction_coordinator.offsets.pending_partitions(group_id)
        if require_stable and not error else ()) if key[0] not in denied_topics}

    def partition(topic: str | None, index: int) -> Any:
        """One partition's answer; ``topic`` None: an id this broker has no topic of."""
        committed = (None if topic is None or (topic, index) in unstable
                     else found.get((topic, index)))
        return build(
            partition_cls, partition_index=index,
            committed_offset=committed.offset if committed else NO_OFFSET,
            committed_leader_epoch=committed.leader_epoch if committed else -1,
            metadata=committed.metadata if committed else "",
            # Before v2 there is no top-level error: each partition carries it.
            error_code=ErrorCode.unknown_topic_id if topic is None
            else ErrorCode.topic_authorization_failed if topic in denied_topics
            else ErrorCode.unstable_offset_commit if (topic, index) in unstable
            else ErrorCode(error if ctx.api_version < 2 else 0))

    if topics is None:
        by_topic: dict[str, list[Any]] = {}
        for topic, index in sorted(set(found) | unstable):
            by_topic.setdefault(topic, []).append(partition(topic, index))
        lm = ctx.broker.log_manager
        everything = []
        for topic, entries in by_topic.items():
            info = lm.topics.get(topic) if names_by_id is not None and lm is not None else None
            if names_by_id is not None and info is None:
                # KafkaApis.fetchAllOffsetsForGroup (v10): a topic without an id (deleted
                # since its commit) cannot be answered by id, so it is left out.
                continue
            everything.append(build(topic_cls, name=topic, partitions=tuple(entries),
                                    topic_id=info.topic_id if info is not None else None))
        return error, tuple(everything)
    answered: list[Any] = []
    failed: list[Any] = []
    for t, name in zip(topics, names or (), strict=True):
        parts = tuple(partition(name, int(i)) for i in t.partition_indexes)
        entry = build(topic_cls, name=name, topic_id=getattr(t, "topic_id", None),
                      partitions=parts)
        failed_here = ctx.api_version >= 8 and (name is None or name in denied_topics)
        (failed if failed_here else answered).append(entry)
    # v8+ (KafkaApis.fetchOffsetsForGroup): the coordinator's answers in request order, then
    # the topics it was not asked about (unknown ids, TOPIC_AUTHORIZATION_FAILED).
    return error, tuple(answered + failed)


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


# v10 (Kafka 4.1) names each topic by id: every group's ids are looked up in one map per request.
@api_handler(OFFSET_FETCH, 0, 10)
async def handle_offset_fetch(ctx: RequestContext, body: Any) -> Any:
    if ctx.api_version == 0:
        return _offset_fetch_v0(ctx, body)
    cls = response_class(ctx)
    if ctx.api_version >= 8:
        group_cls = nested(cls, "OffsetFetchResponseGroup")
        topic_cls = nested(cls, "OffsetFetchResponseTopics")
        partition_cls = nested(cls, "OffsetFetchResponsePartitions")
        names_by_id = _names_by_id(ctx)
        groups = []
        for group in body.groups:
            error, topics = _fetch_group(ctx, group.group_id, group.topics, topic_cls,
                                         partition_cls,
                                         bool(getattr(body, "require_stable", False)),
                                         (getattr(group, "member_id", None),
                                          int(getattr(group, "member_epoch", -1))),
                                         names_by_id)
            groups.append(build(group_cls, group_id=group.group_id, topics=topics,
                                error_code=ErrorCode(error)))
        return build(cls, throttle_time=throttle(ctx), groups=tuple(groups))
    topic_cls = nested(cls, "OffsetFetchResponseTopic")
    partition_cls = nested(cls, "OffsetFetchResponsePartition")
    error, topics = _fetch_group(ctx, body.group_id, body.topics, topic_cls, partition_cls,
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
