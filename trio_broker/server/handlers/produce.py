"""Produce (API key 0): validate and append each partition's batch, answer per partition.

acks=0 sends nothing back (Kafka's NoOpResponse) unless a partition failed, in which case the
connection is closed, as Kafka does, so the client notices. acks=1 and acks=-1 are the same on
one node: the answer leaves after the append (and after the fsync when the flush policy asks).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from ...protocol import records as rb
from ...protocol.produce_response import DIRECT_VERSIONS, produce_response_frame
from ...storage.errors import ProducerRefusal
from ..acl import AclOperation, ResourceType
from ..context import NO_RESPONSE, CloseConnection, EncodedBody, RequestContext
from ..registry import api_handler
from ._admin import build, error_of, is_internal_topic, response_module, throttle

PRODUCE = 0
MIN_VERSION = 3
MAX_VERSION = 12


def _append_time(ms: int) -> datetime.datetime | None:
    if ms < 0:
        return None
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


def _single_batch_problem(records: bytes) -> str | None:
    """Produce v3+ must carry exactly one batch (Kafka's ``ProduceRequest.validateRecords``)."""
    if len(records) >= rb.LOG_OVERHEAD:
        _, length = rb.peek_offset_and_length(records)
        if 0 < length + rb.LOG_OVERHEAD < len(records):
            return "Produce requests with version 3 or later must contain exactly one batch"
    return None


#: Errors Kafka's ``ReplicaManager.appendToLocalLog`` treats as expected: they are answered
#: but do not count in FailedProduceRequestsPerSec (only validation failures and unexpected
#: errors do).
_EXPECTED_PRODUCE_ERRORS = frozenset({
    ErrorCode.unknown_topic_or_partition, ErrorCode.not_leader_or_follower,
    ErrorCode.record_list_too_large, ErrorCode.message_too_large,
    ErrorCode.corrupt_message, ErrorCode.kafka_storage_error,
    ErrorCode.invalid_topic_exception, ErrorCode.invalid_required_acks,
})


#: The most partitions a ``request`` line's ``sequence_errors`` names; it counts the rest.
MAX_SEQUENCE_ERRORS = 10


def describe_refusals(refusals: list[ProducerRefusal]) -> str:
    """The ``sequence_errors`` field: the first :data:`MAX_SEQUENCE_ERRORS` refusals, each
    as :meth:`ProducerRefusal.describe` writes it, joined by ``"; "``, then ``"; +N more"``
    when there were N more (a request naming thousands of partitions stays one short line)."""
    text = "; ".join(r.describe() for r in refusals[:MAX_SEQUENCE_ERRORS])
    more = len(refusals) - MAX_SEQUENCE_ERRORS
    return f"{text}; +{more} more" if more > 0 else text


async def _append_one(ctx: RequestContext, topic: str, partition: int, records: bytes | None,
                      transactional_id: str | None, refusals: list[ProducerRefusal]
                      ) -> tuple[ErrorCode, str | None, int, int, int]:
    """``(error, message, base_offset, log_append_time, log_start_offset)``; counts the topic's
    BrokerTopicMetrics (TotalProduceRequests, BytesIn, MessagesIn, FailedProduceRequests) as
    Kafka's ``appendToLocalLog`` does, for the topic and all topics. A batch the producer
    state refuses adds its :class:`ProducerRefusal` to ``refusals``."""
    broker = ctx.broker
    stats = broker.topic_metrics
    counts, every = stats.topic(topic), stats.all_topics
    counts.total_produce_requests += 1
    every.total_produce_requests += 1
    # What follows is _append_checked's work, written out: one coroutine frame less on the
    # path of every produced batch.
    code: ErrorCode
    message: str | None
    if records is None:
        code, message = ErrorCode.invalid_record, "Produce request without records"
    elif (message := _single_batch_problem(records)) is not None:
        code = ErrorCode.invalid_record
    else:
        code = ErrorCode.none
        if transactional_id is not None and len(records) >= rb.HEADER_SIZE:
            header = rb.decode_header(records)
            if header.is_transactional:
                code = broker.transaction_coordinator.verify_produce(
                    transactional_id, header.producer_id, header.producer_epoch, topic,
                    partition)
        if code is ErrorCode.none:
            try:
                result = await broker.log_manager.append(topic, partition, records)
            except Exception as exc:  # StorageError carries the code; anything else: a server error
                code, message = error_of(exc)
                refusal = getattr(exc, "refusal", None)
                if refusal is not None:
                    refusals.append(refusal)
            else:
                size = len(records)
                counts.bytes_in += size
                every.bytes_in += size
                if not result.duplicate:
                    appended = result.last_offset - result.base_offset + 1
                    counts.messages_in += appended
                    every.messages_in += appended
                return (ErrorCode.none, None, result.base_offset, result.log_append_time,
                        result.log_start_offset)
    if code not in _EXPECTED_PRODUCE_ERRORS:
        counts.failed_produce_requests += 1
        every.failed_produce_requests += 1
    return code, message, -1, -1, -1


#: A response's ``throttle_time`` when not throttled (one object, not one per response).
_NO_THROTTLE = datetime.timedelta(0)


def _makers(version: int) -> tuple[Any, Any, Any]:
    """``(response, topic, partition)`` constructors of one version's ProduceResponse.

    Called per request, so the classes are called directly with the fields that version has
    (``build`` filters field names per call: about 3 µs more per response); an unexpected
    shape falls back to ``build``.
    """
    makers = _MAKERS.get(version)
    if makers is None:
        module = response_module(PRODUCE, version)
        response, topic, partition = (module.ProduceResponse, module.TopicProduceResponse,
                                      module.PartitionProduceResponse)
        names = {f.name for f in dataclasses.fields(partition)}
        base = {"index", "error_code", "base_offset", "log_append_time"}

        def make_partition(index: int, code: ErrorCode, base_offset: int,
                           append_time: datetime.datetime | None, start: int,
                           message: str | None) -> Any:
            return build(partition, index=index, error_code=code, base_offset=base_offset,
                         log_append_time=append_time, log_start_offset=start,
                         record_errors=(), error_message=message)

        if base | {"log_start_offset", "record_errors", "error_message"} <= names:  # v8+
            def make_partition(index: int, code: ErrorCode, base_offset: int,
                               append_time: datetime.datetime | None, start: int,
                               message: str | None) -> Any:
                return partition(index=index, error_code=code, base_offset=base_offset,
                                 log_append_time=append_time, log_start_offset=start,
                                 record_errors=(), error_message=message)
        elif names == base | {"log_start_offset"}:  # v5-v7
            def make_partition(index: int, code: ErrorCode, base_offset: int,
                               append_time: datetime.datetime | None, start: int,
                               message: str | None) -> Any:
                return partition(index=index, error_code=code, base_offset=base_offset,
                                 log_append_time=append_time, log_start_offset=start)

        makers = _MAKERS[version] = (response, topic, make_partition)
    return makers


_MAKERS: dict[int, tuple[Any, Any, Any]] = {}


def _partitions_once(topic_data: Any) -> Iterable[tuple[str, Iterable[tuple[int, Any]]]]:
    """The request's ``(topic, [(partition, data)])``, each partition once. Kafka keys a
    Produce's partitions in a map (``authorizedRequestInfo``): a partition named twice, in one
    topic entry or in two entries of the same topic, is appended once with its last mention's
    records and answered once; here at its first mention's place."""
    if len(topic_data) == 1 and len(topic_data[0].partition_data) == 1:
        # The usual request: nothing to merge.
        data = topic_data[0].partition_data[0]
        return ((topic_data[0].name, ((int(data.index), data),)),)
    by_topic: dict[str, dict[int, Any]] = {}
    for topic in topic_data:
        mentions = by_topic.setdefault(topic.name, {})
        for data in topic.partition_data:
            # A dict keeps a key's first place when the value is replaced.
            mentions[int(data.index)] = data
    return ((name, mentions.items()) for name, mentions in by_topic.items())


@api_handler(PRODUCE, MIN_VERSION, MAX_VERSION, inline=True)
async def handle_produce(ctx: RequestContext, body: Any) -> Any:
    """Append every partition's records; one result per partition, in request order."""
    broker = ctx.broker
    lm = broker.log_manager
    acks = int(body.acks)
    transactional_id = body.transactional_id
    # KafkaApis.handleProduceRequest: WRITE on the transactional id, then on each topic.
    id_denied = transactional_id is not None and not ctx.authorize(
        AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)
    failed = False
    refusals: list[ProducerRefusal] = []
    # (name, [(index, code, message, base offset, append time, log start)]) per topic.
    topics: list[tuple[str, list[tuple[int, ErrorCode, str | None, int, int, int]]]] = []
    for name, mentions in _partitions_once(body.topic_data):
        topic_denied = not id_denied and not ctx.authorize(
            AclOperation.WRITE, ResourceType.TOPIC, name)
        info = lm.topics.get(name) if lm is not None else None
        partitions: list[tuple[int, ErrorCode, str | None, int, int, int]] = []
        for index, data in mentions:
            result: tuple[ErrorCode, str | None, int, int, int]
            if id_denied:
                result = (ErrorCode.transactional_id_authorization_failed, None, -1, -1, -1)
            elif topic_denied:
                result = (ErrorCode.topic_authorization_failed, None, -1, -1, -1)
            elif acks not in (-1, 0, 1):
                result = (ErrorCode.invalid_required_acks, None, -1, -1, -1)
            elif lm is None:
                result = (ErrorCode.kafka_storage_error, "no storage attached", -1, -1, -1)
            elif info is None or lm.get_partition(name, index) is None:
                result = (ErrorCode.unknown_topic_or_partition,
                          "This server does not host this topic-partition.", -1, -1, -1)
            elif is_internal_topic(name, info):
                result = (ErrorCode.invalid_topic_exception,
                          f"Cannot append to internal topic {name}", -1, -1, -1)
            else:
                result = await _append_one(ctx, name, index, data.records, transactional_id,
                                           refusals)
            if result[0] is not ErrorCode.none:
                failed = True
            partitions.append((index, *result))
        topics.append((name, partitions))
    if refusals:
        # One field of the request line, never a line per partition (docs/logging.md).
        ctx.sequence_errors = describe_refusals(refusals)
    quotas = broker.client_quotas
    if quotas is not None:
        # Kafka charges the whole request once it is appended; the data is never dropped.
        quotas.managers.record_produce(ctx)
    if acks == 0:
        if failed:
            raise CloseConnection("acks=0 produce request failed on at least one partition")
        return NO_RESPONSE
    throttle_ms = ctx.throttle_ms
    request = ctx.request
    if (len(topics) == 1 and len(topics[0][1]) == 1 and not throttle_ms
            and request.api_version in DIRECT_VERSIONS
            and (quotas is None or not quotas.managers.request.enabled)):
        # The usual answer, framed directly. Not throttled, and no request_percentage quota
        # can throttle it after the handler (HandlerPool._apply_quotas fills the throttle
        # time into a response object), so it is complete as it stands.
        name, ((index, code, message, base, append_time, start),) = topics[0]
        return EncodedBody(
            produce_response_frame(request.correlation_id, name, index, code.value, message,
                                   base, append_time, start),
            "NONE" if code is ErrorCode.none else code.name.upper(), framed=True)
    response_cls, topic_cls, make_partition = _makers(request.api_version)
    return response_cls(
        responses=tuple(
            topic_cls(name=name, partition_responses=tuple(
                make_partition(index, code, base, _append_time(append_time), start, message)
                for index, code, message, base, append_time, start in partitions))
            for name, partitions in topics),
        throttle_time=throttle(ctx) if throttle_ms else _NO_THROTTLE)
