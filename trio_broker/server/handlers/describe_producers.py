"""DescribeProducers (API key 61): the active idempotent producers of partitions
(``kafka-transactions.sh describe-producers``)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ..acl import AclOperation, ResourceType
from ..context import RequestContext
from ..registry import api_handler
from ._admin import build, response_module, throttle

DESCRIBE_PRODUCERS = 61


@api_handler(DESCRIBE_PRODUCERS, 0, 0)
async def handle_describe_producers(ctx: RequestContext, body: Any) -> Any:
    """Per partition: each producer's id, epoch, last sequence, last timestamp and the first
    offset of its open transaction (-1 when none). One coordinator that never moves: its epoch
    is 0 for transactional producers' markers, reported as -1 like Kafka's unknown."""
    module = response_module(DESCRIBE_PRODUCERS, ctx.api_version)
    lm = ctx.broker.log_manager
    topics = []
    for topic in body.topics:
        denied = not ctx.authorize(AclOperation.READ, ResourceType.TOPIC, topic.name)
        partitions = []
        for raw in topic.partition_indexes:
            index = int(raw)
            log = lm.get_partition(topic.name, index) if lm is not None else None
            if denied:
                partitions.append(build(
                    module.PartitionResponse, partition_index=index,
                    error_code=ErrorCode.topic_authorization_failed, error_message=None,
                    active_producers=()))
                continue
            if log is None:
                partitions.append(build(
                    module.PartitionResponse, partition_index=index,
                    error_code=ErrorCode.unknown_topic_or_partition,
                    error_message="This server does not host this topic-partition.",
                    active_producers=()))
                continue
            producers = tuple(
                build(module.ProducerState, producer_id=entry.producer_id,
                      producer_epoch=entry.epoch, last_sequence=entry.last_seq,
                      last_timestamp=entry.last_timestamp, coordinator_epoch=-1,
                      current_txn_start_offset=log.producer_state.ongoing_txns.get(
                          entry.producer_id, -1))
                for entry in sorted(log.producer_state.producers.values(),
                                    key=lambda e: e.producer_id))
            partitions.append(build(module.PartitionResponse, partition_index=index,
                                    error_code=ErrorCode.none, error_message=None,
                                    active_producers=producers))
        topics.append(build(module.TopicResponse, name=topic.name, partitions=tuple(partitions)))
    return build(module.DescribeProducersResponse, throttle_time=throttle(ctx),
                 topics=tuple(topics))
