"""DescribeTopicPartitions (API key 75, KIP-966): topics and their partitions, paginated.

What KIP-966-aware admin tools (``kafka-topics.sh --describe`` from Kafka 3.8, the Java
``Admin.describeTopics``) ask instead of Metadata. Kafka's ``DescribeTopicPartitionsRequest
Handler`` rules: an empty topic list means every topic; topics are answered sorted by name from
the cursor on (the cursor's topic from its partition index); at most ``response_partition_limit``
partitions (capped at Kafka's ``max.request.partition.size.limit``, 2000) are answered, and
``next_cursor`` names the first partition left out. A requested topic that does not exist gets
UNKNOWN_TOPIC_OR_PARTITION (when listing all topics there are none). One node: every partition
is led by it at leader epoch 0, with no eligible leader replicas (ELR is off).
"""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from ...storage.log import LEADER_EPOCH
from ..acl import AclOperation, ResourceType
from ..context import RequestContext
from ..registry import api_handler
from ._admin import TOPIC_OPERATIONS, build, is_internal_topic, response_module, throttle

DESCRIBE_TOPIC_PARTITIONS = 75
#: Kafka's ``max.request.partition.size.limit`` default.
MAX_PARTITIONS = 2000
_ZERO_UUID = uuid.UUID(int=0)


@api_handler(DESCRIBE_TOPIC_PARTITIONS, 0, 0)
async def handle_describe_topic_partitions(ctx: RequestContext, body: Any) -> Any:
    module = response_module(DESCRIBE_TOPIC_PARTITIONS, ctx.api_version)
    lm = ctx.broker.log_manager
    hosted = lm.topics if lm is not None else {}
    all_topics = not body.topics
    names = sorted(hosted) if all_topics else sorted({t.name for t in body.topics})
    cursor = body.cursor
    if cursor is not None:
        names = [name for name in names if name >= cursor.topic_name]
    remaining = max(0, min(int(body.response_partition_limit), MAX_PARTITIONS))
    node = ctx.broker.node_id
    topics = []
    next_cursor = None
    for name in names:
        if remaining == 0:
            # Every earlier topic is complete: the next page starts at this one.
            next_cursor = build(module.Cursor, topic_name=name, partition_index=0)
            break
        # DescribeTopicPartitionsRequestHandler: DESCRIBE on each topic; unauthorized topics
        # are left out of "all topics", TOPIC_AUTHORIZATION_FAILED (zero id) when named.
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
            if not all_topics:
                topics.append(build(module.DescribeTopicPartitionsResponseTopic,
                                    error_code=ErrorCode.topic_authorization_failed, name=name,
                                    topic_id=_ZERO_UUID, is_internal=False, partitions=()))
            continue
        info = hosted.get(name)
        if info is None:
            topics.append(build(module.DescribeTopicPartitionsResponseTopic,
                                error_code=ErrorCode.unknown_topic_or_partition, name=name,
                                topic_id=_ZERO_UUID, is_internal=False, partitions=()))
            continue
        start = int(cursor.partition_index) if cursor is not None and \
            name == cursor.topic_name else 0
        end = min(info.num_partitions, start + remaining)
        partitions = tuple(
            build(module.DescribeTopicPartitionsResponsePartition, error_code=ErrorCode.none,
                  partition_index=index, leader_id=node, leader_epoch=LEADER_EPOCH,
                  replica_nodes=(node,), isr_nodes=(node,), eligible_leader_replicas=(),
                  last_known_elr=(), offline_replicas=())
            for index in range(start, end))
        topics.append(build(module.DescribeTopicPartitionsResponseTopic,
                            error_code=ErrorCode.none, name=name, topic_id=info.topic_id,
                            is_internal=is_internal_topic(name, info), partitions=partitions,
                            topic_authorized_operations=ctx.authorized_operations(
                                ResourceType.TOPIC, name, TOPIC_OPERATIONS)))
        remaining -= len(partitions)
        if end < info.num_partitions:
            next_cursor = build(module.Cursor, topic_name=name, partition_index=end)
            break
    return build(module.DescribeTopicPartitionsResponse, throttle_time=throttle(ctx),
                 topics=tuple(topics), next_cursor=next_cursor)
