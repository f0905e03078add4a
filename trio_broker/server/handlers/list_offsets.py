"""ListOffsets (API key 2): earliest, latest, max timestamp, and offsets by timestamp."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from ...protocol.error_response import error_response
from ...storage.log import LEADER_EPOCH
from ..acl import AclOperation, ResourceType
from ..context import RequestContext
from ..registry import api_handler
from ._admin import build, error_of, response_module, throttle, unknown_isolation_level

LIST_OFFSETS = 2
MIN_VERSION = 0  # v0 (max_num_offsets, old_style_offsets): Kafka 3.9 serves it
MAX_VERSION = 11
LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
#: KIP-405: the first offset still on local disk (all of the log here: no tiered storage).
EARLIEST_LOCAL = -4
#: KIP-1005 / KIP-1023: offsets in remote storage; without it Kafka answers offset -1.
LATEST_TIERED = -5
EARLIEST_PENDING_UPLOAD = -6
#: The most negative special timestamp each version may ask for (ListOffsetsRequest).
_LOWEST_SPECIAL = {7: MAX_TIMESTAMP, 8: EARLIEST_LOCAL, 9: LATEST_TIERED, 10: LATEST_TIERED,
                   11: EARLIEST_PENDING_UPLOAD}


@api_handler(LIST_OFFSETS, MIN_VERSION, MAX_VERSION, inline=True)
async def handle_list_offsets(ctx: RequestContext, body: Any) -> Any:
    """One answer per requested partition; a duplicate partition is INVALID_REQUEST (Kafka)."""
    module = response_module(LIST_OFFSETS, ctx.api_version)
    lm = ctx.broker.log_manager
    if ctx.api_version == 0:
        return _list_offsets_v0(ctx, body, module)
    seen: dict[tuple[str, int], int] = {}
    if int(body.replica_id) == -1 and unknown_isolation_level(body):  # a consumer's
        return error_response(LIST_OFFSETS, ctx.api_version, body)
    # read_committed consumers start from the last stable offset, not the high watermark.
    read_committed = int(getattr(body, "isolation_level", 0)) == 1
    for topic in body.topics:
        for part in topic.partitions:
            key = (topic.name, int(part.partition_index))
            seen[key] = seen.get(key, 0) + 1
    topics = []
    for topic in body.topics:
        denied = not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, topic.name)
        partitions = []
        for part in topic.partitions:
            index = int(part.partition_index)
            timestamp = int(part.timestamp)
            code, offset, found_ts = ErrorCode.none, -1, -1
            current_epoch = int(getattr(part, "current_leader_epoch", -1))
            if denied:
                code = ErrorCode.topic_authorization_failed
            elif seen[(topic.name, index)] > 1:
                code = ErrorCode.invalid_request
            elif lm is None or lm.get_partition(topic.name, index) is None:
                code = ErrorCode.unknown_topic_or_partition
            elif current_epoch > LEADER_EPOCH:
                code = ErrorCode.unknown_leader_epoch
            elif timestamp < _LOWEST_SPECIAL.get(ctx.api_version, EARLIEST):
                code = ErrorCode.unsupported_version
            elif timestamp in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
                pass  # no remote storage: offset -1 and no epoch, as Kafka without tiering
            else:
                try:
                    offset, found_ts = lm.list_offset(
                        topic.name, index, EARLIEST if timestamp == EARLIEST_LOCAL else timestamp)
                    log = lm.get_partition(topic.name, index)
                    if timestamp == LATEST and read_committed and log is not None:
                        offset = min(offset, log.last_stable_offset)
                except Exception as exc:
                    code, _ = error_of(exc)
            partitions.append(build(
                module.ListOffsetsPartitionResponse, partition_index=index, error_code=code,
                timestamp=found_ts, offset=offset,
                leader_epoch=LEADER_EPOCH if code is ErrorCode.none and offset >= 0 else -1,
                old_style_offsets=()))
        topics.append(build(module.ListOffsetsTopicResponse, name=topic.name,
                            partitions=tuple(partitions)))
    return build(module.ListOffsetsResponse, throttle_time=throttle(ctx), topics=tuple(topics))


# ------------------------------------------------------------------------------------- v0
#: ListOffsetsRequest.DEBUGGING_REPLICA_ID: may read a follower's log (there are none here).
DEBUGGING_REPLICA_ID = -2


def legacy_offsets_before(segments: Sequence[tuple[int, int, int]], log_start: int,
                          log_end: int, now_ms: int, timestamp: int,
                          max_num_offsets: int) -> list[int]:
    """Kafka 3.9's ``UnifiedLog.legacyFetchOffsetsBefore`` (ListOffsets v0), sans-IO.

    ``segments`` are ``(base offset, last modified ms, size)`` in offset order. The candidates
    are each segment's base offset (at least the log start) with its file's modification time,
    plus the log end offset stamped "now" when the active segment holds data; LATEST starts
    from the last candidate, EARLIEST from the first, a timestamp from the last candidate
    modified at or before it. Up to ``max_num_offsets`` offsets are returned, from there
    towards the start, in descending order. A negative count fails as Kafka's array
    allocation does (:class:`ValueError`).
    """
    candidates = [(max(base, log_start), modified) for base, modified, _ in segments]
    if segments and segments[-1][2] > 0:
        candidates.append((log_end, now_ms))
    if timestamp == LATEST:
        start = len(candidates) - 1
    elif timestamp == EARLIEST:
        start = 0
    else:
        start = len(candidates) - 1
        while start >= 0 and candidates[start][1] > timestamp:
            start -= 1
    count = min(max_num_offsets, start + 1)
    if count < 0:
        raise ValueError(f"negative offset count {count}")
    return sorted((candidates[start - j][0] for j in range(count)), reverse=True)


def _segment_times(log: Any) -> list[tuple[int, int, int]]:
    out = []
    for segment in list(log.segments):
        try:
            modified = int(os.fstat(segment.fd).st_mtime * 1000)
        except OSError:  # closed under us by a roll or deletion: Kafka's File.lastModified is 0
            modified = 0
        out.append((int(segment.base_offset), modified, int(segment.size)))
    return out


def _list_offsets_v0(ctx: RequestContext, body: Any, module: Any) -> Any:
    """KafkaApis.handleListOffsetRequestV0: DESCRIBE on each topic, then up to
    ``max_num_offsets`` offsets per partition (Partition.legacyFetchOffsetsForTimestamp: a
    consumer never sees an offset above the high watermark, which takes their place)."""
    lm = ctx.broker.log_manager
    from_consumer = int(body.replica_id) == -1
    topics = []
    for topic in body.topics:
        denied = not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, topic.name)
        partitions = []
        for part in topic.partitions:
            index = int(part.partition_index)
            code = ErrorCode.none
            offsets: tuple[int, ...] = ()
            log = None if denied or lm is None else lm.get_partition(topic.name, index)
            if denied:
                code = ErrorCode.topic_authorization_failed
            elif log is None:
                code = ErrorCode.unknown_topic_or_partition
            else:
                try:
                    found = legacy_offsets_before(
                        _segment_times(log), log.log_start_offset, log.log_end_offset,
                        int(time.time() * 1000), int(part.timestamp), int(part.max_num_offsets))
                except ValueError:
                    code = ErrorCode.unknown_server_error
                else:
                    hw = log.high_watermark
                    if from_consumer and any(o > hw for o in found):
                        found = [hw, *[o for o in found if o <= hw]]
                    offsets = tuple(found)
            partitions.append(build(module.ListOffsetsPartitionResponse, partition_index=index,
                                    error_code=code, old_style_offsets=offsets))
        topics.append(build(module.ListOffsetsTopicResponse, name=topic.name,
                            partitions=tuple(partitions)))
    return build(module.ListOffsetsResponse, topics=tuple(topics))
