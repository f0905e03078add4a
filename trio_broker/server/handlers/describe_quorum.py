"""DescribeQuorum (API key 55): the metadata quorum of this node, its single voter.

Kafka's broker forwards the request to the active controller, whose ``KafkaRaftClient``
answers for ``__cluster_metadata``-0. Here the node is leader and only voter; its log is the
counter of ``..features`` (``end_offset``), and the voter has always just caught up with itself.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from ..acl import AclOperation, ResourceType
from ..context import RequestContext
from ..features import KRAFT_VERSION, METADATA_PARTITION, METADATA_TOPIC
from ..registry import api_handler
from ._admin import build, response_module

DESCRIBE_QUORUM = 55
MIN_VERSION = 0
MAX_VERSION = 2
ZERO_UUID = uuid.UUID(int=0)


def _asks_for_metadata_log(body: Any) -> bool:
    """``KafkaRaftClient.hasValidTopicPartition``: exactly one topic with one partition, the
    metadata log's."""
    topics = body.topics
    return (len(topics) == 1 and topics[0].topic_name == METADATA_TOPIC
            and len(topics[0].partitions) == 1
            and int(topics[0].partitions[0].partition_index) == METADATA_PARTITION)


@api_handler(DESCRIBE_QUORUM, MIN_VERSION, MAX_VERSION)
async def handle_describe_quorum(ctx: RequestContext, body: Any) -> Any:
    """Leader, epoch, high watermark, the voter (this node) and no observers; v2 adds the
    voter's listeners."""
    module = response_module(DESCRIBE_QUORUM, ctx.api_version)

    def failed(code: ErrorCode) -> Any:
        # ``DescribeQuorumRequest.getTopLevelErrorResponse``: the code alone.
        return build(module.DescribeQuorumResponse, error_code=code, error_message=None,
                     topics=(), nodes=())

    # KafkaApis.handleDescribeQuorumRequest: DESCRIBE on CLUSTER before forwarding.
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER):
        return failed(ErrorCode.cluster_authorization_failed)
    if not _asks_for_metadata_log(body):
        return failed(ErrorCode.unknown_topic_or_partition)
    broker = ctx.broker
    state = broker.features.state
    node_id = broker.node_id
    now_ms = int(time.time() * 1000)
    # With kraft.version 0 (a static voter set) Kafka has no directory ids: the zero UUID.
    directory = state.directory_id if state.level(KRAFT_VERSION) >= 1 else ZERO_UUID
    voter = build(module.ReplicaState, replica_id=node_id, replica_directory_id=directory,
                  log_end_offset=state.end_offset, last_fetch_timestamp=now_ms,
                  last_caught_up_timestamp=now_ms)
    partition = build(module.PartitionData, partition_index=METADATA_PARTITION,
                      error_code=ErrorCode.none, error_message=None, leader_id=node_id,
                      leader_epoch=state.leader_epoch, high_watermark=state.end_offset,
                      current_voters=(voter,), observers=())
    topic = build(module.TopicData, topic_name=METADATA_TOPIC, partitions=(partition,))
    nodes: tuple[Any, ...] = ()
    if hasattr(module, "Node"):
        listeners = tuple(
            build(module.Listener, name=name, host=endpoint.host, port=endpoint.port)
            for name, endpoint in sorted(broker.advertised.items()))
        nodes = (build(module.Node, node_id=node_id, listeners=listeners),)
    return build(module.DescribeQuorumResponse, error_code=ErrorCode.none, error_message=None,
                 topics=(topic,), nodes=nodes)
