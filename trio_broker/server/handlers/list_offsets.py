"""ListOffsets (API key 2): earliest, latest, max timestamp, and offsets by timestamp."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...protocol.error_response import error_response
from ...storage.log import LEADER_EPOCH
from ..acl import AclOperation, ResourceType
from ..context import RequestContext
from ..registry import api_handler
from ._admin import build, error_of, response_module, throttle, unknown_isolation_level

LIST_OFFSETS = 2
MIN_VERSION = 1
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
