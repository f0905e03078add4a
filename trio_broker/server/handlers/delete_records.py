"""DeleteRecords (API key 21): move partitions' log start offsets (``kafka-delete-records.sh``,
``AdminClient.delete_records``)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ..acl import AclOperation, ResourceType
from ..context import RequestContext
from ..registry import api_handler
from ._admin import build, error_of, is_internal_topic, response_module, throttle

DELETE_RECORDS = 21
MIN_VERSION = 0
MAX_VERSION = 2


@api_handler(DELETE_RECORDS, MIN_VERSION, MAX_VERSION)
async def handle_delete_records(ctx: RequestContext, body: Any) -> Any:
    """Per partition: the new low watermark (log start offset), or Kafka's error for it.

    One replica, so the answer needs no wait for followers (the request's timeout is moot).
    """
    module = response_module(DELETE_RECORDS, ctx.api_version)
    lm = ctx.broker.log_manager
    topics = []
    for topic in body.topics:
        denied = not ctx.authorize(AclOperation.DELETE, ResourceType.TOPIC, topic.name)
        partitions = []
        for part in topic.partitions:
            index = int(part.partition_index)
            code, low = ErrorCode.none, -1
            if denied:
                code = ErrorCode.topic_authorization_failed
            elif lm is None or lm.get_partition(topic.name, index) is None:
                code = ErrorCode.unknown_topic_or_partition
            elif is_internal_topic(topic.name, lm.topics.get(topic.name)):
                # ReplicaManager.deleteRecords: clients may not delete from internal topics.
                code = ErrorCode.invalid_topic_exception
            else:
                try:
                    low = await lm.delete_records(topic.name, index, int(part.offset))
                except Exception as exc:  # OFFSET_OUT_OF_RANGE, POLICY_VIOLATION, storage
                    code, _ = error_of(exc)
            partitions.append(build(module.DeleteRecordsPartitionResult, partition_index=index,
                                    low_watermark=low, error_code=code))
        topics.append(build(module.DeleteRecordsTopicResult, name=topic.name,
                            partitions=tuple(partitions)))
    return build(module.DeleteRecordsResponse, throttle_time=throttle(ctx), topics=tuple(topics))
