"""Fetch (API key 1): whole batches from each partition, with a min_bytes / max_wait long poll.

A fetch that cannot be satisfied at once is parked (Kafka's DelayedFetch in its purgatory): the
handler returns ``ctx.park(wait)`` and is free at once, and ``wait`` runs in the purgatory
under ``purgatory.delay(max_wait)``, woken by appends to the partitions it reads; at shutdown the
purgatory ends the wait at once and the fetch answers with what it has.

Fetch sessions (KIP-227): the request/response rules live in :mod:`..fetch_session` (sans-IO);
this handler parses the request into its partitions, reads what the session context says (for an
incremental fetch: every partition of the session), and answers the partitions the context keeps.
A parked fetch reads the whole session each time it wakes; the session is updated only when the
answer is built. From v13 topics are named by id (KIP-516); an unknown id is UNKNOWN_TOPIC_ID.

Fetch v0-v3 (old consumers: no isolation level, no sessions) read message formats v0 (v0/v1) or
v1 (v2/v3) only: their records are read into memory (no zero-copy) and down-converted as Kafka
3.9's ``KafkaApis.maybeConvertFetchedData`` and ``LazyDownConversionRecords`` do
(:func:`...protocol.legacy_records.down_converted_records`), unless the topic's
``message.downconversion.enable`` is off (UNSUPPORTED_VERSION for its partitions).
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import trio
from kio.schema.errors import ErrorCode

from ...offload import Steps, in_worker
from ...protocol import records as rb
from ...protocol.codec import encoded_size
from ...protocol.error_response import error_response
from ...protocol.legacy_records import (
    MAGIC_V0,
    MAGIC_V1,
    LegacyRecordError,
    down_converted_records,
)
from ...storage.log import LEADER_EPOCH
from ...storage.txn_index import committed_view
from ..acl import AclOperation, ResourceType
from ..context import RequestContext
from ..fetch_session import (
    FINAL_EPOCH,
    INVALID_SESSION_ID,
    ZERO_UUID,
    ContextKind,
    FetchPartition,
    Outcome,
    PartitionKey,
)
from ..quota_manager import FETCH as FETCH_QUOTA
from ..quota_manager import REQUEST, QuotaManagers
from ..registry import api_handler
from ._admin import build, error_of, response_module, throttle, unknown_isolation_level

FETCH = 1
#: Kafka 3.9's lowest (KIP-896 removed v0-v3 in Kafka 4).
MIN_VERSION = 0
#: Below this version records are down-converted: magic 0 up to v1, magic 1 for v2 and v3.
V2_RECORDS_VERSION = 4
MAGIC_V1_VERSION = 2
#: Up to this version ``partition_max_bytes`` is a hard limit (Kafka's
#: ``FetchParams.hardMaxBytesLimit``): no first batch larger than it is sent.
HARD_MAX_BYTES_VERSION = 2
#: Below this version KAFKA_STORAGE_ERROR is answered as NOT_LEADER_OR_FOLLOWER (Kafka's
#: ``maybeDownConvertStorageError``).
STORAGE_ERROR_VERSION = 6
#: Stored bytes of a response converted on the event loop when none is compressed; more, or any
#: compressed batch, go to a worker thread. Conversion is Python per record: 74 KiB of 10-byte
#: records took 31 ms, so 4 KiB stays under 2 ms.
INLINE_CONVERSION_BYTES = 4 * 1024
#: v18 adds the replica's high watermark (a tagged field of a follower's fetch, KIP-1166):
#: a consumer never sets it, and this single node has no followers, so it is read and ignored.
MAX_VERSION = 18
READ_COMMITTED = 1
#: From this version topics are named by id (KIP-516).
TOPIC_ID_VERSION = 13
#: A partition's current leader epoch the client does not know (no fencing check).
NO_EPOCH = -1


#: Errors Kafka's ``ReplicaManager.readFromLocalLog`` treats as expected: answered, but not
#: counted in FailedFetchRequestsPerSec (only unexpected errors are).
_EXPECTED_FETCH_ERRORS = frozenset({
    ErrorCode.unknown_topic_or_partition, ErrorCode.not_leader_or_follower,
    ErrorCode.offset_out_of_range, ErrorCode.kafka_storage_error,
    ErrorCode.replica_not_available, ErrorCode.unknown_leader_epoch,
    ErrorCode.fenced_leader_epoch,
})


def _count_requests(ctx: RequestContext, read: Any) -> None:
    """TotalFetchRequestsPerSec and FailedFetchRequestsPerSec, once per topic-partition of the
    request's first read (Kafka counts in ``readFromLocalLog``), for the topic and all topics.
    Topics this broker does not host are not counted, so a client's typo makes no series."""
    stats = ctx.broker.topic_metrics
    every = stats.all_topics
    hosted = ctx.broker.log_manager.topics if ctx.broker.log_manager is not None else {}
    for request, part in read:
        if request.name not in hosted:
            continue
        counts = stats.topic(request.name)
        counts.total_fetch_requests += 1
        every.total_fetch_requests += 1
        if (part.error_code is not ErrorCode.none
                and part.error_code not in _EXPECTED_FETCH_ERRORS):
            counts.failed_fetch_requests += 1
            every.failed_fetch_requests += 1


def _count_bytes_out(ctx: RequestContext, read: Any) -> None:
    """BytesOutPerSec: the record bytes of a response that is sent, per topic and all topics."""
    stats = ctx.broker.topic_metrics
    for request, part in read:
        size = len(part.records or b"")
        if size and request.name is not None:
            stats.topic(request.name).bytes_out += size
            stats.all_topics.bytes_out += size


async def _requested(ctx: RequestContext, body: Any
                     ) -> tuple[list[FetchPartition], list[PartitionKey]]:
    """The request's partitions and forgotten partitions, keyed as the session cache keys them:
    by topic id from v13 (KIP-516; an id this broker does not know has no name), else by name."""
    by_id = ctx.api_version >= TOPIC_ID_VERSION
    names: dict[uuid.UUID, str] = {}
    if by_id and ctx.broker.log_manager is not None:
        names = ctx.broker.log_manager.names_by_id()
    partitions: list[FetchPartition] = []
    # Kafka keys the request's partitions in a LinkedHashMap: a partition named twice is read
    # and answered once, at its first place, with the last mention's offsets and limits.
    places: dict[PartitionKey, int] = {}
    steps = Steps()
    for topic in body.topics:
        if by_id:
            # kio reads the zero id as None; Kafka looks it up like any other (unknown) id
            topic_id = topic.topic_id or ZERO_UUID
            name, key_name = names.get(topic_id), ""
        else:
            topic_id, name, key_name = ZERO_UUID, topic.topic, topic.topic
        for part in topic.partitions:
            await steps.tick()
            key = PartitionKey(topic_id, key_name, int(part.partition))
            wanted = FetchPartition(
                key, name, int(part.fetch_offset), int(part.partition_max_bytes),
                int(getattr(part, "log_start_offset", -1)),
                int(getattr(part, "current_leader_epoch", -1)),
                int(getattr(part, "last_fetched_epoch", -1)))
            place = places.setdefault(key, len(partitions))
            if place == len(partitions):
                partitions.append(wanted)
            else:
                partitions[place] = wanted
    forgotten = [
        PartitionKey(item.topic_id or ZERO_UUID, "", int(p)) if by_id
        else PartitionKey(ZERO_UUID, item.topic, int(p))
        for item in getattr(body, "forgotten_topics_data", ()) for p in item.partitions]
    return partitions, forgotten


def _replica_id(body: Any) -> int:
    """The fetching replica's id: -1 for a consumer (-2, Kafka's debugging consumer, too),
    a broker's node id for a follower; in ``replica_state`` from v15 (KIP-903)."""
    state = getattr(body, "replica_state", None)
    return int(state.replica_id if state is not None else getattr(body, "replica_id", -1))


async def _read_all(ctx: RequestContext, body: Any, module: Any, max_bytes: int,
                    reads: list[FetchPartition], denied: frozenset[str] = frozenset(),
                    follower: bool = False) -> tuple[list[tuple[FetchPartition, Any]], int, bool]:
    """Read every partition of ``reads`` now: ``(request and PartitionData of each, bytes,
    any error)``; partitions of the ``denied`` topics (no READ) get TOPIC_AUTHORIZATION_FAILED.
    A ``follower``'s fetch reads nothing: this broker is every partition's only replica, so
    the fetching broker is not a follower of any (Kafka's NOT_LEADER_OR_FOLLOWER)."""
    lm = ctx.broker.log_manager
    remaining = max_bytes
    read_committed = int(getattr(body, "isolation_level", 0)) == READ_COMMITTED
    old = ctx.api_version < V2_RECORDS_VERSION
    hard_max_bytes = ctx.api_version <= HARD_MAX_BYTES_VERSION
    total = 0
    errors = False
    # Zero-copy: the records stay in the segment files; the connection sends them with
    # sendfile where it can and reads them a chunk at a time otherwise (protocol/regions.py).
    # Never read here: a response waiting its turn then holds no record bytes.
    read = []
    steps = Steps()
    for part in reads:
        await steps.tick()  # thousands of partitions: other connections get their turns
        index = part.key.partition
        code = ErrorCode.none
        records: Any = b""  # bytes, or a FileRegion (zero-copy)
        hw = lso = start = -1
        aborted: tuple[Any, ...] | None = () if read_committed else None
        log = (lm.get_partition(part.name, index)
               if lm is not None and part.name is not None else None)
        if part.name is None:
            code = ErrorCode.unknown_topic_id
        elif denied and part.name in denied:
            code = ErrorCode.topic_authorization_failed
        elif log is None:
            code = ErrorCode.unknown_topic_or_partition
        elif follower:
            code = ErrorCode.not_leader_or_follower
        elif part.current_leader_epoch != NO_EPOCH and part.current_leader_epoch < LEADER_EPOCH:
            # Kafka's checkCurrentLeaderEpoch: an older epoch is fenced, a newer one unknown.
            code = ErrorCode.fenced_leader_epoch
        elif part.current_leader_epoch > LEADER_EPOCH:
            code = ErrorCode.unknown_leader_epoch
        else:
            hw, start = log.high_watermark, log.log_start_offset
            lso = hw
            # A read_committed fetch past an open transaction is trimmed at the LSO, which
            # needs the bytes; otherwise the records may stay in the files.
            # Old fetchers get converted records: read into memory.
            zero_copy = not old and not (read_committed and log.last_stable_offset < hw)
            try:
                result = log.read(part.fetch_offset,
                                  max(0, min(part.partition_max_bytes, remaining)),
                                  min_one_batch=total == 0 and not hard_max_bytes,
                                  region=zero_copy)
            except Exception as exc:  # OFFSET_OUT_OF_RANGE and storage failures
                code, _ = error_of(exc)
            else:
                records = result.records
                hw, start, lso = (result.high_watermark, result.log_start_offset,
                                  result.last_stable_offset)
                if read_committed:
                    records, aborted = committed_view(log.txn_index, records, part.fetch_offset,
                                                      lso, module.AbortedTransaction)
                total += len(records)
                remaining -= len(records)
        errors = errors or code is not ErrorCode.none
        read.append((part, build(
            module.PartitionData, partition_index=index, error_code=code,
            high_watermark=hw, last_stable_offset=lso, log_start_offset=start,
            aborted_transactions=aborted, preferred_read_replica=-1, records=records)))
    return read, total, errors


def _partition_error(part: Any, code: ErrorCode) -> Any:
    """Kafka's ``FetchResponse.partitionResponse``: the error, no offsets, no records."""
    return dataclasses.replace(part, error_code=code, high_watermark=-1, records=b"")


def _convert_all(work: list[tuple[int, bytes, int, int, int]]
                 ) -> list[tuple[int, bytes | ErrorCode]]:
    """Each ``(place, records, magic, fetch offset, limit)`` down-converted, or the error its
    partition answers with (UNSUPPORTED_COMPRESSION_TYPE for a zstd batch first). Sans-IO:
    on the event loop for small uncompressed data, else in a worker thread."""
    out: list[tuple[int, bytes | ErrorCode]] = []
    for place, records, magic, offset, limit in work:
        try:
            out.append((place, down_converted_records(records, magic, offset, limit=limit)))
        except LegacyRecordError as exc:
            out.append((place, ErrorCode[exc.kind] if exc.kind in ErrorCode.__members__
                        else ErrorCode.corrupt_message))
        except rb.RecordBatchError:
            out.append((place, ErrorCode.corrupt_message))
    return out


def _any_compressed(records: bytes) -> bool:
    view = memoryview(records)
    return any(view[at + rb.ATTRIBUTES_OFFSET + 1] & rb.COMPRESSION_MASK
               for at, _ in rb.iter_batches(view))


async def _for_old_fetcher(ctx: RequestContext, read: list[tuple[FetchPartition, Any]]
                           ) -> list[tuple[FetchPartition, Any]]:
    """``read`` as an old consumer gets it (Kafka's ``maybeConvertFetchedData``, for every
    partition of a hosted topic): a zstd topic is UNSUPPORTED_COMPRESSION_TYPE (Fetch v10
    brought zstd), a topic with ``message.downconversion.enable=false`` UNSUPPORTED_VERSION,
    else the records down-converted to the magic the version reads; before v6 a storage error
    is NOT_LEADER_OR_FOLLOWER. Conversion is bounded by the response size (``fetch.max.bytes``
    and the partitions' limits), and runs in a worker thread past
    :data:`INLINE_CONVERSION_BYTES` or for compressed batches."""
    version = ctx.api_version
    lm = ctx.broker.log_manager
    out = list(read)
    work: list[tuple[int, bytes, int, int, int]] = []
    heavy = False
    magic = MAGIC_V0 if version < MAGIC_V1_VERSION else MAGIC_V1
    stored = 0
    for place, (request, part) in enumerate(read):
        if (version < STORAGE_ERROR_VERSION
                and part.error_code is ErrorCode.kafka_storage_error):
            part = dataclasses.replace(part, error_code=ErrorCode.not_leader_or_follower)
            out[place] = (request, part)
        log = (lm.get_partition(request.name, request.key.partition)
               if lm is not None and request.name is not None else None)
        if log is None or version >= V2_RECORDS_VERSION:
            continue
        if log.config.compression == "zstd":
            out[place] = (request, _partition_error(part, ErrorCode.unsupported_compression_type))
        elif not log.config.downconversion_enable:
            out[place] = (request, _partition_error(part, ErrorCode.unsupported_version))
        else:
            records = part.records or b""
            assert isinstance(records, bytes)  # read without zero-copy (_read_all)
            stored += len(records)
            heavy = heavy or _any_compressed(records)
            work.append((place, records, magic, request.fetch_offset, log.decompressed_limit))
    if not work:
        return out
    if heavy or stored > INLINE_CONVERSION_BYTES:
        converted = await in_worker(ctx.broker.workers, _convert_all, work)
    else:
        converted = _convert_all(work)
    for place, result in converted:
        request, part = out[place]
        out[place] = (request, _partition_error(part, result) if isinstance(result, ErrorCode)
                      else dataclasses.replace(part, records=result))
    return out


def _outcome(part: Any) -> Outcome:
    return Outcome(len(part.records or b""), int(part.high_watermark),
                   int(getattr(part, "log_start_offset", -1)),
                   part.error_code is not ErrorCode.none)


def _topics(module: Any, read: list[tuple[FetchPartition, Any]]) -> tuple[Any, ...]:
    """Group partitions into topic responses, consecutive partitions of a topic together (as
    Kafka's ``FetchResponse.of`` does); by topic id from v13, else by name."""
    topics = []
    current: PartitionKey | None = None
    group: list[Any] = []
    for request, part in read:
        if current is None or (request.key.topic_id, request.key.topic) != (
                current.topic_id, current.topic):
            if current is not None:
                topics.append((current, group))
            current, group = request.key, []
        group.append(part)
    if current is not None:
        topics.append((current, group))
    return tuple(build(module.FetchableTopicResponse, topic=key.topic, topic_id=key.topic_id,
                       partitions=tuple(parts)) for key, parts in topics)


@api_handler(FETCH, MIN_VERSION, MAX_VERSION, inline=True)
async def handle_fetch(ctx: RequestContext, body: Any) -> Any:
    """Answer at once when min_bytes is met, a partition failed, or max_wait is 0; else park."""
    module = response_module(FETCH, ctx.api_version)
    quotas = ctx.broker.client_quotas
    cache = ctx.broker.fetch_sessions
    requested, forgotten = await _requested(ctx, body)
    # Before v7 there is no session: Kafka's FetchMetadata.LEGACY (id 0, final epoch).
    fetch_context = cache.new_context(
        ctx.api_version, int(getattr(body, "session_id", 0)),
        int(getattr(body, "session_epoch", FINAL_EPOCH)), requested, forgotten, _now_ms())

    def answer(read: list[tuple[FetchPartition, Any]], *, commit: bool) -> tuple[Any, Any]:
        """``(response, partitions in it)``: what the session context keeps of ``read``."""
        if fetch_context.kind is ContextKind.SESSIONLESS:
            sent, session_id = read, INVALID_SESSION_ID
        else:
            outcomes = [_outcome(part) for _, part in read]
            session_id, keep = fetch_context.response(outcomes, _now_ms(), commit=commit)
            sent = [item for item, kept in zip(read, keep, strict=True) if kept]
        return build(module.FetchResponse, throttle_time=throttle(ctx),
                     error_code=ErrorCode.none, session_id=session_id,
                     responses=_topics(module, sent)), sent

    def respond(read: list[tuple[FetchPartition, Any]]) -> Any:
        # Kafka sizes the answer without touching the session (getResponseSize), then answers a
        # throttled fetch with no data (the bytes stay unread and are not charged), so the
        # client backs off and fetches them after the throttle.
        if (quotas is not None and _quotas_on(quotas.managers)
                and _throttled(ctx, quotas.managers, answer(read, commit=False)[0])):
            error, session_id = fetch_context.throttled()
            return build(module.FetchResponse, throttle_time=throttle(ctx),
                         error_code=ErrorCode[error] if error else ErrorCode.none,
                         session_id=session_id, responses=())
        response, sent = answer(read, commit=True)
        _count_bytes_out(ctx, sent)
        return response

    if fetch_context.error is not None:
        return build(module.FetchResponse, throttle_time=throttle(ctx),
                     error_code=ErrorCode[fetch_context.error], session_id=INVALID_SESSION_ID,
                     responses=())
    reads = fetch_context.partitions
    # KafkaApis.handleFetchRequest: never more than fetch.max.bytes, whatever the client asks
    # (a client asking for 2 GiB made the broker read a whole segment into one response).
    # v0-v2 have no max_bytes (Kafka reads Int.MaxValue).
    max_bytes = min(int(getattr(body, "max_bytes", 2**31 - 1)),
                    ctx.broker.config.fetch_max_bytes)
    if quotas is not None:
        # Kafka caps a consumer's fetch at what its quota allows in num - 1 windows: asking for
        # more would be throttled for sure, and the consumer might never make progress.
        window_bytes = quotas.managers.fetch.max_value_in_window(ctx.user, ctx.client_id)
        max_bytes = int(min(max_bytes, window_bytes))
    names = {p.name for p in reads if p.name is not None}
    follower = _replica_id(body) >= 0
    if follower:
        # KafkaApis.handleFetchRequest: a follower needs CLUSTER_ACTION, not READ.
        denied = frozenset() if ctx.authorize(AclOperation.CLUSTER_ACTION,
                                              ResourceType.CLUSTER) else frozenset(names)
        read = (await _read_all(ctx, body, module, max_bytes, reads, denied, True))[0]
        _count_requests(ctx, read)
        return respond(read)
    # KafkaApis.handleFetchRequest: READ on each topic, else TOPIC_AUTHORIZATION_FAILED.
    denied = frozenset() if ctx.broker.authorizer is None else frozenset(
        name for name in names if not ctx.authorize(AclOperation.READ, ResourceType.TOPIC, name))
    if reads and unknown_isolation_level(body):
        return error_response(FETCH, ctx.api_version, body)
    read, total, errors = await _read_all(ctx, body, module, max_bytes, reads, denied)
    _count_requests(ctx, read)
    min_bytes = min(int(body.min_bytes), max_bytes)
    max_wait_s = body.max_wait.total_seconds()

    async def finish(read: list[tuple[FetchPartition, Any]]) -> Any:
        if ctx.api_version < STORAGE_ERROR_VERSION:
            read = await _for_old_fetcher(ctx, read)
        return respond(read)

    if total >= min_bytes or errors or max_wait_s <= 0 or not reads:
        return await finish(read)
    lm = ctx.broker.log_manager
    purgatory = ctx.broker.purgatory
    keys = [(p.name, p.key.partition) for p in reads if p.name is not None]

    async def wait() -> Any:
        nonlocal read
        # Ends at max_wait, or at once when the broker shuts down (DelayedFetch.forceComplete).
        with purgatory.delay(max_wait_s):
            while True:
                await lm.wait_for_data(keys)
                read, got, failed = await _read_all(ctx, body, module, max_bytes, reads,
                                                    denied)
                if got >= min_bytes or failed:
                    return await finish(read)
        return await finish((await _read_all(ctx, body, module, max_bytes, reads, denied))[0])

    return ctx.park(wait)


def _now_ms() -> int:
    """The session cache's clock: trio's (the autojump clock in tests), in milliseconds."""
    return int(trio.current_time() * 1000)


def _quotas_on(managers: QuotaManagers) -> bool:
    return bool(managers.request.enabled or managers.fetch.enabled)


def _throttled(ctx: RequestContext, managers: QuotaManagers, response: Any) -> bool:
    """Kafka's fetch quotas: the request time and the response's size are charged; when
    either quota throttles, the size is taken back and True is returned."""
    if not _quotas_on(managers):
        return False
    request_ms = managers.record_request_time(ctx)
    fetch_ms = 0
    size = 0
    now = trio.current_time()
    if managers.fetch.enabled:
        # Kafka counts the whole response (FetchResponse.sizeOf), not only the records.
        size = encoded_size(response)
        fetch_ms = managers.fetch.record(ctx.user, ctx.client_id, float(size), now)
    if max(request_ms, fetch_ms) <= 0:
        return False
    if size:
        managers.fetch.unrecord(ctx.user, ctx.client_id, float(size), now)
    ctx.throttle(fetch_ms, FETCH_QUOTA)
    ctx.throttle(request_ms, REQUEST, wins_ties=True)
    return True
