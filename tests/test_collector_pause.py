"""The cyclic collector held off while huge requests are in hand (``offload.CollectorPause``),
and never for good."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest
import trio
from kio.schema.offset_commit.v8.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.static.primitive import i32, i64

from trio_broker import offload
from trio_broker.offload import CollectorPause, collector_pause
from trio_broker.testing.client import TrioKafkaClient


@pytest.fixture(autouse=True)
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_the_collector_is_off_while_anything_is_held() -> None:
    pause = CollectorPause()
    first, second = pause.hold(), pause.hold()
    assert not gc.isenabled()
    pause.release(first)
    assert not gc.isenabled()
    pause.release(second)
    assert gc.isenabled()
    pause.release(second)  # twice: nothing more
    assert gc.isenabled() and pause.holding == 0


def test_a_collector_that_was_off_stays_off() -> None:
    gc.disable()
    pause = CollectorPause()
    pause.release(pause.hold())
    assert not gc.isenabled()


def test_a_pause_past_its_limit_ends_whatever_is_held(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(offload.time, "monotonic", lambda: now[0])
    pause = CollectorPause()
    forgotten = pause.hold()  # a request kept alive by a cycle never releases
    now[0] += offload.MAX_COLLECTOR_PAUSE_S / 2
    pause.sweep()
    assert not gc.isenabled()
    now[0] += offload.MAX_COLLECTOR_PAUSE_S
    pause.sweep()
    assert gc.isenabled() and pause.holding == 0
    # A new hold after the expiry pauses again; the old token's release changes nothing.
    fresh = pause.hold()
    pause.release(forgotten)
    assert not gc.isenabled()
    pause.release(fresh)
    assert gc.isenabled()


def test_a_stream_of_holds_cannot_keep_the_collector_off(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each new hold checks the oldest: past the limit the collector comes back on at once."""
    now = [0.0]
    monkeypatch.setattr(offload.time, "monotonic", lambda: now[0])
    pause = CollectorPause()
    pause.hold()
    for _ in range(5):
        now[0] += offload.MAX_COLLECTOR_PAUSE_S / 2 + 0.01
        pause.hold()
    assert pause.holding < 5


async def test_a_huge_request_releases_its_pause_once_answered(
        broker: Any, autojump_clock: trio.testing.MockClock) -> None:
    """An OffsetCommit frame over the off-loop size: the collector is held for it and back
    on once the request is answered and gone."""
    partitions = tuple(OffsetCommitRequestPartition(
        partition_index=i32(index), committed_offset=i64(0), committed_leader_epoch=i32(-1),
        committed_metadata="") for index in range(8000))
    body = OffsetCommitRequest(group_id="g", generation_id_or_member_epoch=i32(-1),
                               member_id="", group_instance_id=None,
                               topics=(OffsetCommitRequestTopic(name="t", partitions=partitions),))
    held: list[int] = []
    real_hold = collector_pause.hold

    def counting_hold() -> int:
        token = real_hold()
        held.append(token)
        return token

    async with await TrioKafkaClient.connect(broker.port) as client:
        await client.create_topic("t", partitions=4)
        collector_pause.hold = counting_hold  # type: ignore[method-assign]
        try:
            frame = client.encode(8, 8, body)
            assert len(frame) >= 64 * 1024
            await client.send_raw(frame)
            _, answer = await client.receive()
        finally:
            del collector_pause.hold
    errors = [p.error_code for p in answer.topics[0].partitions]
    assert errors[:4] == [0] * 4 and set(errors[4:]) == {3}  # UNKNOWN_TOPIC_OR_PARTITION
    assert len(held) == 1
    await trio.sleep(0.1)  # the request line is written once the response is sent
    assert collector_pause.holding == 0 and gc.isenabled()


async def test_memory_is_handed_back_once_after_a_pause_ends(
        monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.testing.MockClock) -> None:
    trims: list[float] = []
    monkeypatch.setattr(offload, "_malloc_trim", lambda: trims.append(trio.current_time()))
    pause = CollectorPause()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pause.keep_sweeping, 0.5)
        await trio.sleep(2)
        assert trims == []  # no pause, nothing to hand back
        token = pause.hold()
        await trio.sleep(1)
        assert trims == []  # not while a request is held
        pause.release(token)
        await trio.sleep(2)
        assert len(trims) == 1
        nursery.cancel_scope.cancel()


def test_malloc_trim_is_glibcs_here() -> None:
    """On this (glibc) machine the trim is real; elsewhere it is skipped, never an error."""
    assert offload._TRIM is not None
    offload._malloc_trim()
