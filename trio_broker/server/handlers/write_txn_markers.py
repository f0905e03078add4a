"""WriteTxnMarkers (API key 27): a COMMIT or ABORT marker written to partitions on request.

Kafka's coordinators send it to partition leaders; here the coordinator writes its markers
itself, so the request's user is the operator's ``trio_broker transactions abort`` (KIP-664):
the remedy for a transaction left open when its ``__transaction_state`` record was lost."""

from __future__ import annotations

import time
from typing import Any

from kio.schema.errors import ErrorCode

from ...coordinator.records import OFFSETS_TOPIC
from ...observability.log import emit
from ...storage.txn_index import build_marker
from ..acl import AclOperation, ResourceType
from ..context import RequestContext
from ..registry import api_handler
from ._admin import build, response_module

WRITE_TXN_MARKERS = 27


def _marker_error(log: Any, producer_id: int, producer_epoch: int) -> ErrorCode:
    """Kafka's ProducerAppendInfo.checkProducerEpoch for a marker from a client (not a
    replica): an epoch older than the partition's current one is refused (INVALID_PRODUCER_EPOCH
    since Kafka 2.7, KIP-588, replacing PRODUCER_FENCED)."""
    entry = log.producer_state.producers.get(producer_id)
    if entry is not None and producer_epoch < entry.epoch:
        return ErrorCode.invalid_producer_epoch
    return ErrorCode.none


@api_handler(WRITE_TXN_MARKERS, 0, 2)  # v0: Kafka 3.9, not flexible
async def handle_write_txn_markers(ctx: RequestContext, body: Any) -> Any:
    """KafkaApis.handleWriteTxnMarkersRequest: CLUSTER_ACTION on the cluster, else every
    partition answers CLUSTER_AUTHORIZATION_FAILED; per partition UNKNOWN_TOPIC_OR_PARTITION
    when not hosted, the epoch check, then the control batch appended through the coordinator's
    own storage path (the LSO and the aborted-transaction index follow from it)."""
    module = response_module(WRITE_TXN_MARKERS, ctx.api_version)
    allowed = ctx.authorize(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER)
    lm = ctx.broker.log_manager
    coordinator = ctx.broker.transaction_coordinator
    markers = []
    for marker in body.markers:
        pid, epoch = int(marker.producer_id), int(marker.producer_epoch)
        commit = bool(marker.transaction_result)
        now = int(time.time() * 1000)
        topics = []
        for topic in marker.topics:
            partitions = []
            for raw in topic.partition_indexes:
                index = int(raw)
                error = await _write_one(lm, coordinator, allowed, topic.name, index,
                                         pid, epoch, commit, int(marker.coordinator_epoch), now)
                partitions.append(build(module.WritableTxnMarkerPartitionResult,
                                        partition_index=index, error_code=error))
            topics.append(build(module.WritableTxnMarkerTopicResult, name=topic.name,
                                partitions=tuple(partitions)))
        markers.append(build(module.WritableTxnMarkerResult, producer_id=pid,
                             topics=tuple(topics)))
    return build(module.WriteTxnMarkersResponse, markers=tuple(markers))


async def _write_one(lm: Any, coordinator: Any, allowed: bool, topic: str,
                     index: int, pid: int, epoch: int, commit: bool, coordinator_epoch: int,
                     now: int) -> ErrorCode:
    if not allowed:
        return ErrorCode.cluster_authorization_failed
    log = lm.get_partition(topic, index) if lm is not None else None
    if log is None:
        return ErrorCode.unknown_topic_or_partition
    error = _marker_error(log, pid, epoch)
    if error:
        return error
    if topic == OFFSETS_TOPIC and coordinator is not None:
        # Pending transactional offsets become committed (or are dropped) with the marker.
        result: ErrorCode = await coordinator.offsets.complete(pid, epoch, index, commit, now)
        return result
    try:
        await lm.append(topic, index, build_marker(pid, epoch, commit, now, coordinator_epoch),
                        producer_check=False)
    except Exception as exc:
        emit("transaction_marker_failed", topic=topic, partition=index, error=repr(exc))
        return ErrorCode.kafka_storage_error
    return ErrorCode.none
