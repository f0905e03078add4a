"""The sans-IO fetch session rules (KIP-227, Kafka's FetchSession/FetchSessionCache): contexts,
epochs, forgotten partitions, what an incremental answer includes, eviction."""

from __future__ import annotations

import datetime
import random
import sys
import uuid
from collections.abc import Iterator
from dataclasses import replace as dc_replace
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from tests.server.handler_harness import answer_when_woken, call, open_broker, send, wire
from trio_broker.config import load_config
from trio_broker.protocol import records as rb
from trio_broker.protocol.codec import (
    request_schema,
)
from trio_broker.server.broker import Broker
from trio_broker.server.context import Parked
from trio_broker.server.fetch_session import (
    EVICTION_MS,
    FINAL_EPOCH,
    INVALID_SESSION_ID,
    ZERO_UUID,
    ContextKind,
    FetchPartition,
    FetchSessionCache,
    Outcome,
    PartitionKey,
    next_epoch,
)
from trio_broker.storage.log import now_ms


def part(topic: str, partition: int, offset: int = 0) -> FetchPartition:
    return FetchPartition(PartitionKey(ZERO_UUID, topic, partition), topic, offset, 1 << 20)


def key(topic: str, partition: int) -> PartitionKey:
    return PartitionKey(ZERO_UUID, topic, partition)


QUIET = Outcome(records_size=0, high_watermark=10, log_start_offset=0)


def open_session(cache: FetchSessionCache, parts: list[FetchPartition], now: int = 0,
                 version: int = 12) -> int:
    context = cache.new_context(version, 0, 0, parts, (), now)
    assert context.kind is ContextKind.FULL
    session_id, keep = context.response([QUIET] * len(parts), now)
    assert all(keep)
    return session_id


def test_next_epoch() -> None:
    assert next_epoch(0) == 1
    assert next_epoch(5) == 6
    assert next_epoch(2**31 - 1) == 1
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH


def test_full_fetch_opens_a_session_and_incremental_answers_only_changes() -> None:
    cache = FetchSessionCache(10, rng=random.Random(1))
    session_id = open_session(cache, [part("a", 0), part("a", 1), part("b", 0)])
    assert session_id != INVALID_SESSION_ID
    assert len(cache) == 1 and cache.num_partitions == 3
    # epoch 1, nothing named: the whole session is read
    context = cache.new_context(12, session_id, 1, [], (), 10)
    assert context.kind is ContextKind.INCREMENTAL
    assert [p.key for p in context.partitions] == [key("a", 0), key("a", 1), key("b", 0)]
    data = Outcome(records_size=100, high_watermark=10, log_start_offset=0)
    moved = Outcome(records_size=0, high_watermark=11, log_start_offset=0)
    sid, keep = context.response([data, QUIET, moved], 10)
    assert sid == session_id and keep == [True, False, True]
    # the partition that returned records moved to the end (Kafka's fairness rotation)
    assert list(cache.sessions[session_id].partitions) == [key("a", 1), key("b", 0),
                                                           key("a", 0)]
    # the high watermark change was remembered: not sent again
    context = cache.new_context(12, session_id, 2, [], (), 20)
    assert context.response([QUIET, moved, QUIET], 20)[1] == [False, False, False]


def test_dry_run_changes_nothing() -> None:
    cache = FetchSessionCache(10)
    session_id = open_session(cache, [part("a", 0)])
    context = cache.new_context(12, session_id, 1, [], (), 0)
    moved = Outcome(records_size=0, high_watermark=11, log_start_offset=0)
    assert context.response([moved], 0, commit=False)[1] == [True]
    assert context.response([moved], 0)[1] == [True]
    # a full context's dry run opens no session
    full = cache.new_context(12, 0, 0, [part("b", 0)], (), 0)
    assert full.response([QUIET], 0, commit=False) == (INVALID_SESSION_ID, [True])
    assert len(cache) == 1


def test_errors_are_always_sent_and_resent_once_gone() -> None:
    cache = FetchSessionCache(10)
    session_id = open_session(cache, [part("a", 0)])
    failed = Outcome(records_size=0, high_watermark=-1, log_start_offset=-1, error=True)
    context = cache.new_context(12, session_id, 1, [], (), 0)
    assert context.response([failed], 0)[1] == [True]
    context = cache.new_context(12, session_id, 2, [], (), 0)
    assert context.response([failed], 0)[1] == [True]
    context = cache.new_context(12, session_id, 3, [], (), 0)
    assert context.response([QUIET], 0)[1] == [True]  # recovered: sent again
    context = cache.new_context(12, session_id, 4, [], (), 0)
    assert context.response([QUIET], 0)[1] == [False]


def test_log_start_offset_change_is_sent() -> None:
    cache = FetchSessionCache(10)
    session_id = open_session(cache, [part("a", 0)])
    context = cache.new_context(12, session_id, 1, [], (), 0)
    deleted = Outcome(records_size=0, high_watermark=10, log_start_offset=4)
    assert context.response([deleted], 0)[1] == [True]


def test_incremental_updates_adds_and_forgets() -> None:
    cache = FetchSessionCache(10)
    session_id = open_session(cache, [part("a", 0), part("a", 1)])
    context = cache.new_context(12, session_id, 1, [part("a", 0, 7), part("c", 0)],
                                [key("a", 1)], 0)
    assert [(p.key, p.fetch_offset) for p in context.partitions] == [
        (key("a", 0), 7), (key("c", 0), 0)]
    assert cache.num_partitions == 2
    # a new partition has never been answered: it is included
    assert context.response([QUIET, QUIET], 0)[1] == [False, True]


def test_forgetting_every_partition_drops_the_session() -> None:
    cache = FetchSessionCache(10)
    session_id = open_session(cache, [part("a", 0)])
    context = cache.new_context(12, session_id, 1, [], [key("a", 0)], 0)
    assert context.kind is ContextKind.SESSIONLESS
    assert len(cache) == 0 and cache.num_partitions == 0


def test_session_errors() -> None:
    cache = FetchSessionCache(10)
    unknown = cache.new_context(12, 1234, 1, [part("a", 0)], (), 0)
    assert unknown.kind is ContextKind.ERROR and unknown.error == "fetch_session_id_not_found"
    session_id = open_session(cache, [part("a", 0)])
    stale = cache.new_context(12, session_id, 5, [], (), 0)
    assert stale.error == "invalid_fetch_session_epoch"
    # the epoch is not consumed by a failed request
    assert cache.new_context(12, session_id, 1, [], (), 0).kind is ContextKind.INCREMENTAL
    # the same epoch twice (a retried request) is refused
    assert cache.new_context(12, session_id, 1, [], (), 0).error == "invalid_fetch_session_epoch"
    # a name-keyed session (v12) used from v13 is a topic-id error
    assert cache.new_context(13, session_id, 2, [], (), 0).error == \
        "fetch_session_topic_id_error"


def test_full_fetch_closes_the_named_session_and_final_epoch_opens_none() -> None:
    cache = FetchSessionCache(10)
    first = open_session(cache, [part("a", 0)])
    context = cache.new_context(12, first, 0, [part("a", 0)], (), 0)
    assert first not in cache.sessions
    second, _ = context.response([QUIET], 0)
    assert second not in (first, INVALID_SESSION_ID)
    closing = cache.new_context(12, second, FINAL_EPOCH, [part("a", 0)], (), 0)
    assert closing.kind is ContextKind.SESSIONLESS
    assert closing.response([QUIET], 0) == (INVALID_SESSION_ID, [True])
    assert len(cache) == 0


def test_topic_id_sessions() -> None:
    cache = FetchSessionCache(10)
    topic_id = uuid.uuid4()
    by_id = FetchPartition(PartitionKey(topic_id, "", 0), "a", 0, 1 << 20)
    session_id = open_session(cache, [by_id], version=13)
    assert cache.new_context(12, session_id, 1, [], (), 0).error == "fetch_session_topic_id_error"
    context = cache.new_context(13, session_id, 1, [], [PartitionKey(topic_id, "", 0)], 0)
    assert context.kind is ContextKind.SESSIONLESS


def test_no_slots_answers_without_a_session() -> None:
    cache = FetchSessionCache(0)
    context = cache.new_context(12, 0, 0, [part("a", 0)], (), 0)
    assert context.response([QUIET], 0) == (INVALID_SESSION_ID, [True])


def test_a_stale_session_is_evicted() -> None:
    cache = FetchSessionCache(2)
    first = open_session(cache, [part("a", 0)], now=0)
    second = open_session(cache, [part("a", 0)], now=1000)
    # full and not stale, new one not bigger than the evictable ones (none are old yet)
    assert open_session(cache, [part("a", 0)], now=2000) == INVALID_SESSION_ID
    third = open_session(cache, [part("a", 0)], now=EVICTION_MS + 1)
    assert third != INVALID_SESSION_ID
    assert set(cache.sessions) == {second, third} and first not in cache.sessions
    assert cache.evictions == 1


def test_a_bigger_session_evicts_a_smaller_old_one() -> None:
    cache = FetchSessionCache(2)
    small = open_session(cache, [part("a", 0)], now=0)
    big = open_session(cache, [part("a", 0), part("a", 1), part("a", 2)], now=0)
    now = EVICTION_MS + 10
    # both used recently, but both older than the eviction time: evictable by anyone
    for session_id in (small, big):
        epoch = cache.sessions[session_id].epoch
        cache.new_context(12, session_id, epoch, [], (), now)
    # a one-partition session is not worth more than the smallest (ties keep the old one)
    assert open_session(cache, [part("b", 0)], now=now) == INVALID_SESSION_ID
    newcomer = open_session(cache, [part("b", 0), part("b", 1)], now=now)
    assert newcomer != INVALID_SESSION_ID
    assert set(cache.sessions) == {big, newcomer}
    assert cache.num_partitions == 5


def test_young_consumer_sessions_are_not_evicted_by_consumers() -> None:
    cache = FetchSessionCache(1)
    open_session(cache, [part("a", 0)], now=0)
    many = [part("b", i) for i in range(50)]
    context = cache.new_context(12, 0, 0, many, (), 10)
    assert context.response([QUIET] * 50, 10)[0] == INVALID_SESSION_ID
    # a privileged (follower) session may evict an unprivileged one at any age
    context = cache.new_context(12, 0, 0, many, (), 10, privileged=True)
    assert context.response([QUIET] * 50, 10)[0] != INVALID_SESSION_ID


def test_throttled_answers() -> None:
    cache = FetchSessionCache(10)
    full = cache.new_context(12, 0, 0, [part("a", 0)], (), 0)
    assert full.throttled() == (None, INVALID_SESSION_ID)
    session_id = open_session(cache, [part("a", 0)])
    context = cache.new_context(12, session_id, 1, [], (), 0)
    assert context.throttled() == (None, session_id)
    cache.new_context(12, session_id, 2, [], (), 0)  # another request moved the session on
    assert context.throttled() == ("invalid_fetch_session_epoch", session_id)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(st.lists(st.tuples(st.sampled_from(["full", "incremental", "close", "stale"]),
                          st.integers(0, 3), st.lists(st.integers(0, 5), max_size=4),
                          st.integers(0, 100_000)), max_size=40))
def test_random_requests_keep_the_cache_consistent(
        steps: list[tuple[str, int, list[int], int]]) -> None:
    """Whatever clients send, the cache never exceeds its slots, its partition count is the sum
    of its sessions' sizes, and every live session's epoch is the one it last handed out."""
    cache = FetchSessionCache(3, eviction_ms=50_000, rng=random.Random(0))
    opened: list[int] = []
    now = 0
    for kind, pick, partitions, elapsed in steps:
        now += elapsed
        parts = [part("t", p) for p in partitions]
        target = opened[pick % len(opened)] if opened else 1
        session = cache.sessions.get(target)
        if kind == "full":
            context = cache.new_context(12, 0, 0, parts, (), now)
        elif kind == "close":
            context = cache.new_context(12, target, FINAL_EPOCH, parts, (), now)
        else:
            epoch = session.epoch if session is not None else 1
            if kind == "stale":
                epoch += 1
            context = cache.new_context(12, target, epoch, parts, [key("t", 0)], now)
        session_id, keep = context.response([QUIET] * len(context.partitions), now)
        assert len(keep) == len(context.partitions)
        if session_id != INVALID_SESSION_ID:
            opened.append(session_id)
            assert session_id in cache.sessions
        assert len(cache) <= 3
        assert cache.num_partitions == sum(s.size() for s in cache.sessions.values())
        assert all(s.epoch >= 1 for s in cache.sessions.values())


# ------------------------------------------------------------------ through the Fetch handler
FETCH = 1
@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    with open_broker(load_config({"log.dirs": str(tmp_path)}), 3) as broker:
        yield broker


async def fetch(broker: Broker, version: int, body: Any) -> Any:
    return await call(broker, FETCH, version, body)


def fetch_body(version: int, wants: dict[tuple[str, int], int], *, session_id: int = 0,
               epoch: int = 0, forget: dict[str, list[int]] | None = None,
               max_wait_ms: int = 0, ids: dict[str, uuid.UUID] | None = None) -> Any:
    """A Fetch request; from v13 topics are named by ``ids``."""
    m = sys.modules[request_schema(FETCH, version).__module__]
    by_id = version >= 13

    def topic(name: str) -> dict[str, Any]:
        return {"topic_id": (ids or {})[name]} if by_id else {"topic": name}

    topics: dict[str, list[Any]] = {}
    for (name, partition), offset in wants.items():
        topics.setdefault(name, []).append(m.FetchPartition(
            partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20,
            current_leader_epoch=-1, last_fetched_epoch=-1, log_start_offset=-1))
    return m.FetchRequest(
        replica_id=-1, max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1,
        max_bytes=1 << 20, isolation_level=0, session_id=session_id, session_epoch=epoch,
        topics=tuple(m.FetchTopic(**topic(n), partitions=tuple(p)) for n, p in topics.items()),
        forgotten_topics_data=tuple(m.ForgottenTopic(**topic(n), partitions=tuple(p))
                                    for n, p in (forget or {}).items()),
        rack_id="")


def answered(response: Any) -> list[tuple[int, int, int]]:
    """``(partition, high watermark, record bytes)`` of each partition in a response."""
    return [(int(p.partition_index), int(p.high_watermark), len(p.records or b""))
            for t in response.responses for p in t.partitions]


def batch(value: bytes) -> bytes:
    return rb.build_batch([(None, value, [], now_ms())])


async def test_incremental_fetch_answers_only_changed_partitions(broker: Broker) -> None:
    lm = broker.log_manager
    await lm.append("t", 0, batch(b"a"))
    everything = {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}
    full = await fetch(broker, 12, fetch_body(12, everything))
    assert full.error_code is ErrorCode.none and full.session_id != 0
    assert [(p, hw) for p, hw, _ in answered(full)] == [(0, 1), (1, 0), (2, 0)]
    session = full.session_id
    # the client moved on to offset 1 of partition 0; nothing new anywhere
    quiet = await fetch(broker, 12, fetch_body(12, {("t", 0): 1}, session_id=session, epoch=1))
    assert quiet.session_id == session and answered(quiet) == []
    await lm.append("t", 2, batch(b"b"))
    changed = await fetch(broker, 12, fetch_body(12, {}, session_id=session, epoch=2))
    assert [(p, hw, size > 0) for p, hw, size in answered(changed)] == [(2, 1, True)]
    # forgetting partitions: the session keeps the rest
    await fetch(broker, 12, fetch_body(12, {("t", 2): 1}, session_id=session, epoch=3,
                                       forget={"t": [1]}))
    assert broker.fetch_sessions.num_partitions == 2
    # session errors, as Kafka answers them: top-level error, session 0, no partitions
    stale = await fetch(broker, 12, fetch_body(12, {}, session_id=session, epoch=9))
    assert (stale.error_code, stale.session_id, stale.responses) == (
        ErrorCode.invalid_fetch_session_epoch, 0, ())
    unknown = await fetch(broker, 12, fetch_body(12, {}, session_id=session + 1, epoch=1))
    assert unknown.error_code is ErrorCode.fetch_session_id_not_found
    # epoch -1 closes the session and answers every named partition without one
    closed = await fetch(broker, 12, fetch_body(12, {("t", 0): 0}, session_id=session,
                                                epoch=-1))
    assert closed.session_id == 0 and [p for p, _, _ in answered(closed)] == [0]
    assert len(broker.fetch_sessions) == 0


async def test_long_poll_in_a_session_answers_the_partition_that_changed(
        broker: Broker, autojump_clock: trio.testing.MockClock) -> None:
    full = await fetch(broker, 12, fetch_body(12, {("t", 0): 0, ("t", 1): 0}))
    request, result = await send(broker, FETCH, 12, fetch_body(
        12, {}, session_id=full.session_id, epoch=1, max_wait_ms=5000))
    assert isinstance(result, Parked)
    answer = await answer_when_woken(
        result, lambda: broker.log_manager.append("t", 1, batch(b"wake")))
    got = wire(request, FETCH, 12, answer)
    assert [(p, hw) for p, hw, _ in answered(got)] == [(1, 1)]
    assert trio.current_time() < 2
    # an empty long poll ends at max_wait with an empty incremental answer
    start = trio.current_time()
    got = await fetch(broker, 12, fetch_body(12, {("t", 1): 1}, session_id=full.session_id,
                                             epoch=2, max_wait_ms=500))
    assert answered(got) == [] and got.session_id == full.session_id
    assert trio.current_time() - start == pytest.approx(0.5)


async def test_sessions_by_topic_id(broker: Broker) -> None:
    topic_id = broker.log_manager.topics["t"].topic_id
    ids = {"t": topic_id, "gone": uuid.uuid4(), "zero": ZERO_UUID}
    await broker.log_manager.append("t", 1, batch(b"a"))
    full = await fetch(broker, 13, fetch_body(13, {("t", 1): 0, ("gone", 0): 0}, ids=ids))
    assert [t.topic_id for t in full.responses] == [topic_id, ids["gone"]]
    codes = [p.error_code for t in full.responses for p in t.partitions]
    assert codes == [ErrorCode.none, ErrorCode.unknown_topic_id]
    # an unknown id stays an error, so it is answered every time
    again = await fetch(broker, 13, fetch_body(13, {("t", 1): 1}, session_id=full.session_id,
                                               epoch=1, ids=ids))
    assert [t.topic_id for t in again.responses] == [ids["gone"]]
    # the zero id (kio reads it as None) is an unknown id like any other
    zero = await fetch(broker, 13, fetch_body(13, {("zero", 0): 0}, epoch=-1, ids=ids))
    assert zero.responses[0].partitions[0].error_code is ErrorCode.unknown_topic_id
    # a v13 session continued with v12 is FETCH_SESSION_TOPIC_ID_ERROR
    mixed = await fetch(broker, 12, fetch_body(12, {}, session_id=full.session_id, epoch=2))
    assert mixed.error_code is ErrorCode.fetch_session_topic_id_error


async def test_current_leader_epoch_is_checked(broker: Broker) -> None:
    m = sys.modules[request_schema(FETCH, 12).__module__]
    body = fetch_body(12, {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}, epoch=-1)
    parts = body.topics[0].partitions
    body = dc_replace(body, topics=(m.FetchTopic(topic="t", partitions=(
        dc_replace(parts[0], current_leader_epoch=0),
        dc_replace(parts[1], current_leader_epoch=1),
        dc_replace(parts[2], current_leader_epoch=-2))),))
    got = await fetch(broker, 12, body)
    assert [p.error_code for p in got.responses[0].partitions] == [
        ErrorCode.none, ErrorCode.unknown_leader_epoch, ErrorCode.fenced_leader_epoch]
