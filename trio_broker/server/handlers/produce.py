"""Produce (API key 0): validate and append each partition's batch, answer per partition.

acks=0 sends nothing back (Kafka's NoOpResponse) unless a partition failed, in which case the
connection is closed, as Kafka does, so the client notices. acks=1 and acks=-1 are the same on
one node: the answer leaves after the append (and after the fsync when the flush policy asks).

Produce v0-v2 (old clients: kafka-python before ``api_version`` 0.11, librdkafka before 0.11)
carry message sets of magic 0 or 1: each is parsed and up-converted to one v2 batch
(:mod:`...protocol.legacy_records`, docs/storage.md "Message formats v0 and v1"), then appended
as a v3+ batch is. Whether a blob is a message set is decided by its first entry's magic, as
Kafka decides by the data: a v0-v2 request may carry v2 batches too.
"""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from collections.abc import Iterable
from typing import Any

import attrs
from kio.schema.errors import ErrorCode

from ...offload import in_worker
from ...protocol import compression
from ...protocol import records as rb
from ...protocol.legacy_records import LegacyRecordError, first_magic, parse_message_set, up_convert
from ...protocol.produce_response import DIRECT_VERSIONS, produce_response_frame
from ...protocol.record_walk import (
    CheckedRecords,
    Deferred,
    WalkBudget,
    check_records,
    request_budget,
)
from ...storage.errors import ProducerRefusal, batch_error
from ...storage.log import now_ms
from ...storage.topic_config import LogConfig
from ..acl import AclOperation, ResourceType
from ..context import NO_RESPONSE, CloseConnection, EncodedBody, RequestContext
from ..registry import api_handler
from ._admin import build, error_of, is_internal_topic, response_module, throttle

PRODUCE = 0
#: Kafka 3.9's lowest (KIP-896 removed v0-v2 in Kafka 4).
MIN_VERSION = 0
#: Below this version a partition's records may be a message set of magic 0/1 (and the
#: request has no transactional id).
V2_BATCHES_VERSION = 3
MAX_VERSION = 13
#: From this version topics are named by id (KIP-516), in the request and in the answer.
TOPIC_ID_VERSION = 13
#: KIP-890: from v11 the client knows TRANSACTION_ABORTABLE; from v12 (transaction version 2)
#: a transactional batch adds its partition to the transaction instead of being refused.
ABORTABLE_VERSION = 11
ADD_PARTITION_VERSION = 12

#: Kafka's ReplicaManager: verification errors an older client would not retry become
#: NOT_ENOUGH_REPLICAS, which every producer retries without a metadata refresh.
_RETRIED_AS_NOT_ENOUGH_REPLICAS = frozenset({
    ErrorCode.concurrent_transactions, ErrorCode.network_exception,
    ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available,
    ErrorCode.not_coordinator})


def verification_error(code: ErrorCode, version: int) -> ErrorCode:
    """The produce answer of a transaction coordinator's verification ``code`` (Kafka's
    AddPartitionsToTxnManager and ReplicaManager): PRODUCER_FENCED is INVALID_PRODUCER_EPOCH,
    TRANSACTION_ABORTABLE is INVALID_TXN_STATE below v11, retriable ones NOT_ENOUGH_REPLICAS."""
    if code is ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch
    if code is ErrorCode.transaction_abortable and version < ABORTABLE_VERSION:
        return ErrorCode.invalid_txn_state
    if code in _RETRIED_AS_NOT_ENOUGH_REPLICAS:
        return ErrorCode.not_enough_replicas
    return code


def _append_time(ms: int) -> datetime.datetime | None:
    if ms < 0:
        return None
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


def _single_batch_problem(records: bytes, legacy: bool = False) -> str | None:
    """Produce v3+ must carry exactly one batch (Kafka's ``ProduceRequest.validateRecords``);
    v2 batches in a v0-v2 request too, as ``LogValidator`` checks
    (``getFirstBatchAndMaybeValidateNoMoreBatches``: one batch from magic 2 on)."""
    if len(records) >= rb.LOG_OVERHEAD:
        _, length = rb.peek_offset_and_length(records)
        if 0 < length + rb.LOG_OVERHEAD < len(records):
            if legacy:
                return "Compressed outer record has more than one batch"
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


#: Records (compressed, or larger than this) are checked before their append, on the event loop
#: up to :data:`INLINE_WALK_BYTES` per request and in a worker thread past that.
LIGHT_RECORDS_BYTES = 64 * 1024
#: Record bytes (decompressed) one request may have walked on the event loop; one uncompressed
#: batch of the default ``message.max.bytes`` still fits (bulk producers stay inline).
INLINE_WALK_BYTES = (1 << 20) + 4096


@attrs.define
class _RequestWork:
    """What one Produce request has spent checking records, and where the rest goes."""

    #: The event loop's allowance for this request (``defer``: past it, a worker thread).
    inline: WalkBudget = attrs.field(factory=lambda: WalkBudget(INLINE_WALK_BYTES, defer=True))
    #: The request's whole budget, charged by the worker thread (set at the first hand-over).
    total: WalkBudget | None = None


def _is_heavy(records: bytes) -> bool:
    return len(records) > LIGHT_RECORDS_BYTES or (
        len(records) >= rb.HEADER_SIZE
        and records[rb.ATTRIBUTES_OFFSET + 1] & rb.COMPRESSION_MASK != 0)


async def _check_ahead(ctx: RequestContext, topic: str, partition: int, records: bytes,
                       work: _RequestWork) -> CheckedRecords | None:
    """The records' CRCs and every record checked before the append: on the event loop while
    the request's inline allowance lasts (None for uncompressed records: the append checks
    them), then in a worker thread (a pipelining connection's later Produce requests wait
    for this one: ``network/turns.py``). Raises the storage error the append would (CORRUPT_MESSAGE,
    INVALID_RECORD, MESSAGE_TOO_LARGE)."""
    log = ctx.broker.log_manager.get_partition(topic, partition)
    assert log is not None
    max_size, limit = log.config.max_message_bytes, log.decompressed_limit
    try:
        if work.total is None:
            if not records[rb.ATTRIBUTES_OFFSET + 1] & rb.COMPRESSION_MASK:
                if work.inline.remaining >= len(records):
                    # Uncompressed, within the allowance: the append's own walk (length and
                    # timestamp of each record) is the cheaper check on the loop.
                    work.inline.remaining -= len(records)
                    return None
            else:
                try:
                    return check_records(records, max_size=max_size, limit=limit,
                                         budget=work.inline)
                except Deferred:
                    pass
            work.total = WalkBudget(request_budget(limit, ctx.size))
        return await in_worker(ctx.broker.workers, _check_in_thread, records, max_size, limit,
                               work.total)
    except rb.RecordBatchError as exc:
        raise batch_error(exc) from None


def _check_in_thread(records: bytes, max_size: int, limit: int, budget: WalkBudget
                     ) -> CheckedRecords:
    return check_records(records, max_size=max_size, limit=limit, budget=budget)


#: ``compression.type`` of a topic as the codec old producers' messages are converted to
#: (absent, ``producer``: the messages' own codec).
_TARGET_CODECS = {
    "uncompressed": compression.COMPRESSION_NONE, "gzip": compression.COMPRESSION_GZIP,
    "snappy": compression.COMPRESSION_SNAPPY, "lz4": compression.COMPRESSION_LZ4,
    "zstd": compression.COMPRESSION_ZSTD,
}
#: Where a message set's first message keeps its attributes (offset, size, crc, magic).
_LEGACY_ATTRIBUTES_AT = 17
#: An uncompressed message set up to this size is converted on the event loop. Parsing and
#: rebuilding is Python per message: 79 KiB of 10-byte messages took 16 ms, so 8 KiB stays
#: under 2 ms; anything larger goes to a worker thread.
LIGHT_MESSAGE_SET_BYTES = 8 * 1024


def _is_message_set(records: bytes) -> bool:
    """A Produce v0-v2 blob that is not v2 batches: Kafka reads the first entry's magic (a
    blob too short to have one is an empty message set)."""
    return first_magic(records) != rb.MAGIC


def _up_converted(records: bytes, config: LogConfig, limit: int, budget: WalkBudget,
                  now: int, check: bool) -> tuple[bytes, CheckedRecords | None] | None:
    """The one v2 batch Kafka's ``LogValidator`` appends for a message set (None: no complete
    message, nothing to append), and, with ``check``, that batch checked ahead of its append
    (:func:`check_records`: MESSAGE_TOO_LARGE for a batch conversion made too large, as
    Kafka's re-validation of sizes after a conversion). Raises :class:`LegacyRecordError`.
    Sans-IO and bounded by ``budget``: runs on the event loop for light sets, else in a worker."""
    message_set = parse_message_set(records, budget=budget, limit=limit,
                                    max_size=config.max_message_bytes)
    batch = up_convert(
        message_set, log_append_time=now if config.log_append_time else None,
        target_codec=_TARGET_CODECS.get(config.compression), now_ms=now,
        timestamp_before_max_ms=config.timestamp_before_max_ms,
        timestamp_after_max_ms=config.timestamp_after_max_ms, compacted=config.compact)
    if batch is None:
        return None
    checked = None
    if check:
        checked = check_records(batch, max_size=config.max_message_bytes, limit=limit,
                                budget=WalkBudget(request_budget(limit, len(batch))))
    return batch, checked


async def _convert_message_set(ctx: RequestContext, topic: str, partition: int,
                               records: bytes, work: _RequestWork
                               ) -> tuple[bytes, CheckedRecords | None] | None:
    """A Produce v0-v2 message set as the v2 batch to append. An uncompressed set within the
    request's inline allowance (and :data:`LIGHT_MESSAGE_SET_BYTES`) is converted on the event
    loop (its cost is its size); anything else in a worker thread, under the request's
    decompression budget, with the converted batch checked there too so that the append
    walks nothing on the loop. Raises the storage error the append would."""
    log = ctx.broker.log_manager.get_partition(topic, partition)
    assert log is not None
    config, limit = log.config, log.decompressed_limit
    size = len(records)
    compressed = (size > _LEGACY_ATTRIBUTES_AT
                  and records[_LEGACY_ATTRIBUTES_AT] & rb.COMPRESSION_MASK != 0)
    try:
        if (not compressed and size <= LIGHT_MESSAGE_SET_BYTES and work.total is None
                and work.inline.remaining >= size):
            work.inline.remaining -= size
            # Uncompressed: nothing is inflated (a later compressed entry is refused before).
            return _up_converted(records, config, limit, WalkBudget(limit), now_ms(), False)
        if work.total is None:
            work.total = WalkBudget(request_budget(limit, ctx.size))
        return await in_worker(ctx.broker.workers, _up_converted, records, config, limit,
                               work.total, now_ms(), True)
    except LegacyRecordError as exc:
        raise _LegacyRefusal(exc.kind, exc.message) from None
    except rb.RecordBatchError as exc:
        raise batch_error(exc) from None


class _LegacyRefusal(Exception):
    """A message set refused: ``error_code`` is the Kafka error its ``kind`` names (the
    storage errors do not have all of them: INVALID_TIMESTAMP, UNSUPPORTED_COMPRESSION_TYPE)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.error_code = ErrorCode[kind]
        self.message = message


async def _append_one(ctx: RequestContext, topic: str, partition: int, records: bytes | None,
                      transactional_id: str | None, refusals: list[ProducerRefusal],
                      work: _RequestWork | None, legacy: bool = False
                      ) -> tuple[ErrorCode, str | None, int, int, int]:
    """``(error, message, base_offset, log_append_time, log_start_offset)``; counts the topic's
    BrokerTopicMetrics (TotalProduceRequests, BytesIn, MessagesIn, FailedProduceRequests) as
    Kafka's ``appendToLocalLog`` does, for the topic and all topics. A batch the producer
    state refuses adds its :class:`ProducerRefusal` to ``refusals``. ``legacy``: a v0-v2
    request, whose records may be a message set (converted first) or a v2 batch."""
    broker = ctx.broker
    stats = broker.topic_metrics
    counts, every = stats.topic(topic), stats.all_topics
    counts.total_produce_requests += 1
    every.total_produce_requests += 1
    # What follows is _append_checked's work, written out: one coroutine frame less on the
    # path of every produced batch.
    code: ErrorCode
    message: str | None
    message_set = legacy and records is not None and _is_message_set(records)
    if records is None:
        code, message = ErrorCode.invalid_record, "Produce request without records"
    elif not message_set and (message := _single_batch_problem(records, legacy)) is not None:
        code = ErrorCode.invalid_record
    else:
        code = ErrorCode.none
        if transactional_id is not None and len(records) >= rb.HEADER_SIZE:
            header = rb.decode_header(records)
            if header.is_transactional:
                coordinator = broker.transaction_coordinator
                version = ctx.api_version
                if version >= ADD_PARTITION_VERSION:
                    code = await coordinator.add_produced_partition(
                        transactional_id, header.producer_id, header.producer_epoch, topic,
                        partition)
                else:
                    code = coordinator.verify_produce(
                        transactional_id, header.producer_id, header.producer_epoch, topic,
                        partition)
                if code is not ErrorCode.none:
                    code = verification_error(code, version)
        if code is ErrorCode.none:
            try:
                batch = records
                if message_set:
                    assert work is not None
                    converted = await _convert_message_set(ctx, topic, partition, records, work)
                    if converted is None:
                        # No complete message: Kafka appends nothing and answers success
                        # with its unknown append info (offsets -1).
                        return ErrorCode.none, None, -1, -1, -1
                    batch, checked = converted
                else:
                    checked = (await _check_ahead(ctx, topic, partition, records, work)
                               if work is not None and _is_heavy(records) else None)
                result = await broker.log_manager.append(topic, partition, batch,
                                                         checked=checked)
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


def _partitions_once(topic_data: Any, by_id: bool = False
                     ) -> Iterable[tuple[Any, Iterable[tuple[int, Any]]]]:
    """The request's ``(topic, [(partition, data)])``, each partition once. Kafka keys a
    Produce's partitions in a map (``authorizedRequestInfo``): a partition named twice, in one
    topic entry or in two entries of the same topic, is appended once with its last mention's
    records and answered once; here at its first mention's place. ``by_id``: topics are named
    by their ``topic_id`` (v13+)."""
    if len(topic_data) == 1 and len(topic_data[0].partition_data) == 1:
        # The usual request: nothing to merge.
        data = topic_data[0].partition_data[0]
        topic = topic_data[0]
        return ((topic.topic_id if by_id else topic.name, ((int(data.index), data),)),)
    by_topic: dict[Any, dict[int, Any]] = {}
    for topic in topic_data:
        mentions = by_topic.setdefault(topic.topic_id if by_id else topic.name, {})
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
    legacy = ctx.api_version < V2_BATCHES_VERSION
    # v0-v2 have no transactional id (nor producer ids: old clients are neither idempotent
    # nor transactional).
    transactional_id = None if legacy else body.transactional_id
    # KafkaApis.handleProduceRequest: WRITE on the transactional id, then on each topic.
    id_denied = transactional_id is not None and not ctx.authorize(
        AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)
    failed = False
    refusals: list[ProducerRefusal] = []
    # (name, [(index, code, message, base offset, append time, log start)]) per topic; from
    # v13 the topic's id in place of its name.
    topics: list[tuple[Any, list[tuple[int, ErrorCode, str | None, int, int, int]]]] = []
    by_id = ctx.api_version >= TOPIC_ID_VERSION
    names: dict[uuid.UUID, str] = lm.names_by_id() if by_id and lm is not None else {}
    # Where the request has its records checked ahead of the append (heavy ones only).
    work: _RequestWork | None = None
    for key, mentions in _partitions_once(body.topic_data, by_id):
        # KafkaApis.handleProduceRequest (v13+): an id it cannot name is UNKNOWN_TOPIC_ID,
        # before any topic authorization.
        name = names.get(key) if by_id else key
        topic_denied = not id_denied and name is not None and not ctx.authorize(
            AclOperation.WRITE, ResourceType.TOPIC, name)
        info = lm.topics.get(name) if lm is not None and name is not None else None
        partitions: list[tuple[int, ErrorCode, str | None, int, int, int]] = []
        for index, data in mentions:
            result: tuple[ErrorCode, str | None, int, int, int]
            if id_denied:
                result = (ErrorCode.transactional_id_authorization_failed, None, -1, -1, -1)
            elif name is None:
                result = (ErrorCode.unknown_topic_id, None, -1, -1, -1)
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
                records = data.records
                if work is None and records is not None and (legacy or _is_heavy(records)):
                    work = _RequestWork()
                result = await _append_one(ctx, name, index, records, transactional_id,
                                           refusals, work, legacy)
            if result[0] is not ErrorCode.none:
                failed = True
            partitions.append((index, *result))
        topics.append((key, partitions))
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
    if legacy:
        # v0 has no throttle time, v0/v1 no log append time (build keeps what the version has).
        return build(response_cls, responses=tuple(
            topic_cls(name=key, partition_responses=tuple(
                make_partition(index, code, base, _append_time(append_time), start, message)
                for index, code, message, base, append_time, start in partitions))
            for key, partitions in topics),
            throttle_time=throttle(ctx) if throttle_ms else _NO_THROTTLE)
    return response_cls(
        responses=tuple(
            topic_cls(**{"topic_id" if by_id else "name": key}, partition_responses=tuple(
                make_partition(index, code, base, _append_time(append_time), start, message)
                for index, code, message, base, append_time, start in partitions))
            for key, partitions in topics),
        throttle_time=throttle(ctx) if throttle_ms else _NO_THROTTLE)
