"""ElectLeaders (API key 43): with one node the leader of every partition is already the
preferred (and only) replica, so no election is ever needed (``kafka-leader-election.sh``)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ..acl import AclOperation, ResourceType
from ..context import RequestContext
from ..registry import api_handler
from ._admin import build, response_module, throttle

ELECT_LEADERS = 43
PREFERRED, UNCLEAN = 0, 1
#: ``Errors.ELECTION_NOT_NEEDED.message()``
NOT_NEEDED = "Leader election not needed for topic partition."


@api_handler(ELECT_LEADERS, 0, 2)
async def handle_elect_leaders(ctx: RequestContext, body: Any) -> Any:
    """Named partitions: ELECTION_NOT_NEEDED (UNKNOWN_TOPIC_OR_PARTITION when absent). All
    partitions (null): an empty result, as KRaft reports only partitions that were eligible."""
    module = response_module(ELECT_LEADERS, ctx.api_version)
    lm = ctx.broker.log_manager
    election_type = int(getattr(body, "election_type", PREFERRED))
    results = []
    if not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER):
        # KafkaApis.handleElectLeaders: CLUSTER_AUTHORIZATION_FAILED for everything asked.
        for topic in body.topic_partitions or ():
            results.append(build(module.ReplicaElectionResult, topic=topic.topic,
                                 partition_result=tuple(
                build(module.PartitionResult, partition_id=int(p),
                      error_code=ErrorCode.cluster_authorization_failed, error_message=None)
                for p in dict.fromkeys(topic.partitions))))
        return build(module.ElectLeadersResponse, throttle_time=throttle(ctx),
                     error_code=ErrorCode.cluster_authorization_failed,
                     replica_election_results=tuple(results))
    for topic in body.topic_partitions or ():
        partitions = []
        for index in dict.fromkeys(int(p) for p in topic.partitions):  # Kafka uses a set
            if election_type not in (PREFERRED, UNCLEAN):
                code, message = ErrorCode.invalid_request, f"Unknown election type {election_type}"
            elif lm is None or lm.get_partition(topic.topic, index) is None:
                code, message = ErrorCode.unknown_topic_or_partition, \
                    "This server does not host this topic-partition."
            else:
                code, message = ErrorCode.election_not_needed, NOT_NEEDED
            partitions.append(build(module.PartitionResult, partition_id=index, error_code=code,
                                    error_message=message))
        results.append(build(module.ReplicaElectionResult, topic=topic.topic,
                             partition_result=tuple(partitions)))
    return build(module.ElectLeadersResponse, throttle_time=throttle(ctx),
                 error_code=ErrorCode.none, replica_election_results=tuple(results))
