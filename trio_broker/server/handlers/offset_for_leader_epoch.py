"""OffsetForLeaderEpoch (API key 23): every partition has had one leader epoch, 0, since offset 0,
so the end offset of epoch 0 (or of any later epoch asked for by a consumer validating its
position) is the log end offset."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...storage.log import LEADER_EPOCH
from ..acl import AclOperation, ResourceType
from ..context import RequestContext
from ..registry import api_handler
from ._admin import build, response_module, throttle

OFFSET_FOR_LEADER_EPOCH = 23
MIN_VERSION = 0  # v0-v1: Kafka 3.9 (legacy_schemas)
MAX_VERSION = 4
#: "No epoch" in a request (Kafka's RecordBatch.NO_PARTITION_LEADER_EPOCH).
NO_EPOCH = -1


@api_handler(OFFSET_FOR_LEADER_EPOCH, MIN_VERSION, MAX_VERSION)
async def handle_offset_for_leader_epoch(ctx: RequestContext, body: Any) -> Any:
    module = response_module(OFFSET_FOR_LEADER_EPOCH, ctx.api_version)
    lm = ctx.broker.log_manager
    topics = []
    for topic in body.topics:
        denied = not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, topic.topic)
        partitions = []
        for part in topic.partitions:
            index = int(part.partition)
            log = lm.get_partition(topic.topic, index) if lm is not None else None
            current = int(getattr(part, "current_leader_epoch", NO_EPOCH))  # v2+
            requested = int(part.leader_epoch)
            code, epoch, end = ErrorCode.none, -1, -1
            if denied:
                code = ErrorCode.topic_authorization_failed
            elif log is None:
                code = ErrorCode.unknown_topic_or_partition
            elif current > LEADER_EPOCH:
                code = ErrorCode.unknown_leader_epoch
            elif current != NO_EPOCH and current < LEADER_EPOCH:
                # Kafka's checkCurrentLeaderEpoch: an epoch older than the leader's is fenced.
                code = ErrorCode.fenced_leader_epoch
            elif requested == LEADER_EPOCH:
                epoch, end = LEADER_EPOCH, log.log_end_offset
            elif NO_EPOCH != requested < LEADER_EPOCH:
                # Below the first epoch: Kafka's LeaderEpochFileCache answers the requested
                # epoch and the first epoch's start offset, which truncation from the start
                # (DeleteRecords, retention) moves to the log start offset.
                epoch, end = requested, log.log_start_offset
            # A newer epoch (or -1) is unknown: Kafka answers UNDEFINED_EPOCH_OFFSET (-1, -1).
            partitions.append(build(module.EpochEndOffset, error_code=code, partition=index,
                                    leader_epoch=epoch, end_offset=end))
        topics.append(build(module.OffsetForLeaderTopicResult, topic=topic.topic,
                            partitions=tuple(partitions)))
    return build(module.OffsetForLeaderEpochResponse, throttle_time=throttle(ctx),
                 topics=tuple(topics))
