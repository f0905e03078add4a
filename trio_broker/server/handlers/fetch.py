"""Fetch (API key 1): whole batches from each partition, with a min_bytes / max_wait long poll.

A fetch that cannot be satisfied at once is parked (Kafka's DelayedFetch in its purgatory): the
handler returns ``ctx.park(wait)`` and is free at once, and ``wait`` runs in the purgatory
under ``purgatory.delay(max_wait)``, woken by appends to the partitions it reads; at shutdown the
purgatory ends the wait at once and the fetch answers with what it has.

Fetch sessions (KIP-227) are declined, as the protocol allows: every answer carries session id
0, so clients keep sending full fetch requests. A request for an incremental session we never
created gets FETCH_SESSION_ID_NOT_FOUND.
"""

from __future__ import annotations

from typing import Any

import trio
from kio.schema.errors import ErrorCode

from ...protocol.codec import encode_body
from ..context import RequestContext
from ..quota_manager import FETCH as FETCH_QUOTA
from ..quota_manager import REQUEST, QuotaManagers
from ..registry import api_handler
from ._admin import build, error_of, response_module, throttle

FETCH = 1
MIN_VERSION = 4
MAX_VERSION = 12
READ_COMMITTED = 1


#: Errors Kafka's ``ReplicaManager.readFromLocalLog`` treats as expected: answered, but not
#: counted in FailedFetchRequestsPerSec (only unexpected errors are).
_EXPECTED_FETCH_ERRORS = frozenset({
    ErrorCode.unknown_topic_or_partition, ErrorCode.not_leader_or_follower,
    ErrorCode.offset_out_of_range, ErrorCode.kafka_storage_error,
    ErrorCode.replica_not_available, ErrorCode.unknown_leader_epoch,
    ErrorCode.fenced_leader_epoch,
})


def _count_requests(ctx: RequestContext, topics: Any) -> None:
    """TotalFetchRequestsPerSec and FailedFetchRequestsPerSec, once per topic-partition of the
    request's first read (Kafka counts in ``readFromLocalLog``), for the topic and all topics.
    Topics this broker does not host are not counted, so a client's typo makes no series."""
    stats = ctx.broker.topic_metrics
    every = stats.all_topics
    hosted = ctx.broker.log_manager.topics if ctx.broker.log_manager is not None else {}
    for topic in topics:
        if topic.topic not in hosted:
            continue
        counts = stats.topic(topic.topic)
        for part in topic.partitions:
            counts.total_fetch_requests += 1
            every.total_fetch_requests += 1
            if (part.error_code is not ErrorCode.none
                    and part.error_code not in _EXPECTED_FETCH_ERRORS):
                counts.failed_fetch_requests += 1
                every.failed_fetch_requests += 1


def _count_bytes_out(ctx: RequestContext, topics: Any) -> None:
    """BytesOutPerSec: the record bytes of a response that is sent, per topic and all topics."""
    stats = ctx.broker.topic_metrics
    for topic in topics:
        size = sum(len(part.records or b"") for part in topic.partitions)
        if size:
            stats.topic(topic.topic).bytes_out += size
            stats.all_topics.bytes_out += size


def _read_all(ctx: RequestContext, body: Any, module: Any, max_bytes: int
              ) -> tuple[Any, int, bool]:
    """Read every requested partition now: ``(topic responses, bytes, any error)``."""
    lm = ctx.broker.log_manager
    remaining = max_bytes
    read_committed = int(getattr(body, "isolation_level", 0)) == READ_COMMITTED
    aborted: tuple[Any, ...] | None = () if read_committed else None
    total = 0
    errors = False
    topics = []
    for topic in body.topics:
        partitions = []
        for part in topic.partitions:
            index = int(part.partition)
            code = ErrorCode.none
            records = b""
            hw = lso = start = -1
            log = lm.get_partition(topic.topic, index) if lm is not None else None
            if log is None:
                code = ErrorCode.unknown_topic_or_partition
            else:
                hw, start = log.high_watermark, log.log_start_offset
                lso = hw
                try:
                    result = log.read(int(part.fetch_offset),
                                      max(0, min(int(part.partition_max_bytes), remaining)),
                                      min_one_batch=total == 0)
                except Exception as exc:  # OFFSET_OUT_OF_RANGE and storage failures
                    code, _ = error_of(exc)
                else:
                    records = result.records
                    hw, start, lso = (result.high_watermark, result.log_start_offset,
                                      result.last_stable_offset)
                    total += len(records)
                    remaining -= len(records)
            errors = errors or code is not ErrorCode.none
            partitions.append(build(
                module.PartitionData, partition_index=index, error_code=code,
                high_watermark=hw, last_stable_offset=lso, log_start_offset=start,
                aborted_transactions=aborted, preferred_read_replica=-1, records=records))
        topics.append(build(module.FetchableTopicResponse, topic=topic.topic,
                            partitions=tuple(partitions)))
    return tuple(topics), total, errors


@api_handler(FETCH, MIN_VERSION, MAX_VERSION, inline=True)
async def handle_fetch(ctx: RequestContext, body: Any) -> Any:
    """Answer at once when min_bytes is met, a partition failed, or max_wait is 0; else park."""
    module = response_module(FETCH, ctx.api_version)
    quotas = ctx.broker.client_quotas

    def respond(topics: Any, code: ErrorCode = ErrorCode.none) -> Any:
        response = build(module.FetchResponse, throttle_time=throttle(ctx), error_code=code,
                         session_id=0, responses=topics)
        if quotas is not None and _throttled(ctx, quotas.managers, response):
            # Kafka answers a throttled fetch with no data (the bytes stay unread and are
            # not charged), so the client backs off and fetches them after the throttle.
            response = build(module.FetchResponse, throttle_time=throttle(ctx),
                             error_code=ErrorCode.none, session_id=0, responses=())
        _count_bytes_out(ctx, response.responses)
        return response

    session_id = int(getattr(body, "session_id", 0))
    if session_id != 0:
        return respond((), ErrorCode.fetch_session_id_not_found)
    max_bytes = int(body.max_bytes)
    if quotas is not None:
        # Kafka caps a consumer's fetch at what its quota allows in num - 1 windows: asking for
        # more would be throttled for sure, and the consumer might never make progress.
        window_bytes = quotas.managers.fetch.max_value_in_window(ctx.user, ctx.client_id)
        max_bytes = int(min(max_bytes, window_bytes))
    topics, total, errors = _read_all(ctx, body, module, max_bytes)
    _count_requests(ctx, topics)
    min_bytes = min(int(body.min_bytes), max_bytes)
    max_wait_s = body.max_wait.total_seconds()
    if total >= min_bytes or errors or max_wait_s <= 0 or not body.topics:
        return respond(topics)
    lm = ctx.broker.log_manager
    purgatory = ctx.broker.purgatory
    keys = [(t.topic, int(p.partition)) for t in body.topics for p in t.partitions]

    async def wait() -> Any:
        nonlocal topics
        # Ends at max_wait, or at once when the broker shuts down (DelayedFetch.forceComplete).
        with purgatory.delay(max_wait_s):
            while True:
                await lm.wait_for_data(keys)
                topics, got, failed = _read_all(ctx, body, module, max_bytes)
                if got >= min_bytes or failed:
                    return respond(topics)
        return respond(_read_all(ctx, body, module, max_bytes)[0])

    return ctx.park(wait)


def _throttled(ctx: RequestContext, managers: QuotaManagers, response: Any) -> bool:
    """Kafka's fetch quotas: the request time and the response's size are charged; when
    either quota throttles, the size is taken back and True is returned."""
    if not (managers.request.enabled or managers.fetch.enabled):
        return False
    request_ms = managers.record_request_time(ctx)
    fetch_ms = 0
    size = 0
    now = trio.current_time()
    if managers.fetch.enabled:
        # Kafka counts the whole response (FetchResponse.sizeOf), not only the records.
        size = len(encode_body(response))
        fetch_ms = managers.fetch.record(ctx.user, ctx.client_id, float(size), now)
    if max(request_ms, fetch_ms) <= 0:
        return False
    if size:
        managers.fetch.unrecord(ctx.user, ctx.client_id, float(size), now)
    ctx.throttle(fetch_ms, FETCH_QUOTA)
    ctx.throttle(request_ms, REQUEST, wins_ties=True)
    return True
