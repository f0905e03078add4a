"""When a partition rolls its active segment and what it syncs, as Kafka's ``UnifiedLog``:
an append that would take the segment past ``segment.bytes`` rolls it first (one that fills
it exactly does not), so does a full offset index (``segment.index.bytes``); a flush syncs only
the segments with data past the recovery point (and the active one), a close everything left;
an append answers where it landed and the log start. The mutation run over ``storage/log``
found these unpinned (docs/development.md, "Eighth run")."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio
import trio.testing

from tests.storage.test_storage import make, new_partition, reopen
from trio_broker.protocol import records as rb
from trio_broker.storage import log as log_module
from trio_broker.storage import manager as manager_module
from trio_broker.storage import segment as segment_module
from trio_broker.storage.log import AppendResult, PartitionLog, now_ms

NOW = 1_700_000_000_000


def one(value: bytes = b"v") -> bytes:
    return rb.build_batch([(None, value, [], NOW)])


def test_an_append_that_fits_exactly_does_not_roll(tmp_path: Path) -> None:
    lm = make(tmp_path)
    size = len(one())
    log = new_partition(lm, {"segment.bytes": str(2 * size)})
    for _ in range(3):
        log.append(one(), from_client=False, producer_check=False)
    assert [s.base_offset for s in log.segments] == [0, 2]
    lm.close()


def test_a_full_offset_index_rolls_the_segment(tmp_path: Path) -> None:
    lm = make(tmp_path)
    # Room for three offset entries (8 bytes each) and two time entries (12 bytes); every batch
    # after the first indexed (an entry once index.interval.bytes were written since the
    # last), every batch with the same timestamp (one time entry): full after four batches.
    log = new_partition(lm, {"segment.index.bytes": "24", "index.interval.bytes": "1"})
    for _ in range(5):
        log.append(one(), from_client=False, producer_check=False)
    assert [s.base_offset for s in log.segments][:2] == [0, 4]
    lm.close()


def test_an_append_answers_where_it_landed_and_the_log_start(tmp_path: Path) -> None:
    lm = make(tmp_path)
    log = new_partition(lm)
    log.append(one(), from_client=False, producer_check=False)
    log.delete_records_before(1)
    two = rb.build_batch([(None, b"a", [], NOW), (None, b"b", [], NOW)])
    assert log.append(two, from_client=False, producer_check=False) == AppendResult(
        1, -1, 1, 2)
    lm.close()


async def test_a_flush_syncs_only_what_is_past_the_recovery_point(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real = segment_module.Segment.fsync

    def recording(self: segment_module.Segment) -> None:
        synced.append(self.base_offset)
        real(self)

    monkeypatch.setattr(segment_module.Segment, "fsync", recording)
    lm = make(tmp_path)
    log = new_partition(lm, {"segment.bytes": str(2 * len(one()))})
    for _ in range(4):
        log.append(one(), from_client=False, producer_check=False)
    await log.flush()
    assert synced == [0, 2] and log.recovery_point == 4
    synced.clear()
    await log.flush()  # nothing new: nothing synced
    assert synced == []
    for _ in range(3):
        log.append(one(), from_client=False, producer_check=False)
    await log.flush()
    assert synced == [4, 6] and log.recovery_point == 7
    synced.clear()
    log.append(one(), from_client=False, producer_check=False)
    started = now_ms()
    log.flush_sync()  # at close: the same, in the caller's thread
    assert synced == [6]
    assert (log.recovery_point, log.unflushed_messages) == (8, 0)
    assert started <= log.last_flush_ms <= now_ms()
    lm.close()


class Clock:
    """The log module's wall clock, moved by hand."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = NOW
        monkeypatch.setattr(log_module, "now_ms", lambda: self.now)


def rolls(log: PartitionLog, stamps: list[int], clock: Clock, advance: list[int]) -> list[int]:
    """Append one record per stamp (the clock moved by ``advance`` first): the segment bases."""
    for ts, step in zip(stamps, advance, strict=True):
        clock.now += step
        log.append(rb.build_batch([(None, b"v", [], ts)]), from_client=False,
                   producer_check=False)
    return [s.base_offset for s in log.segments]


def test_segment_ms_counts_from_the_first_batchs_timestamp(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch)
    lm = make(tmp_path)
    log = new_partition(lm, {"segment.ms": "1000"})
    # Exactly segment.ms later: no roll; one millisecond more: a roll. The wall clock stands.
    assert rolls(log, [5000, 6000, 6001], clock, [0, 0, 0]) == [0, 2]
    # A first timestamp of 1 counts as one.
    other = new_partition(lm, {"segment.ms": "1000"}, topic="u")
    assert rolls(other, [1, 1002], clock, [0, 0]) == [0, 1]
    lm.close()


def test_without_timestamps_segment_ms_counts_from_the_segments_creation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch)
    lm = make(tmp_path)
    log = new_partition(lm, {"segment.ms": "1000"})
    assert rolls(log, [-1, -1, -1], clock, [0, 1000, 1]) == [0, 2]
    # A first timestamp of 0 is no base either (Kafka: only a positive one is).
    other = new_partition(lm, {"segment.ms": "1000"}, topic="u")
    assert rolls(other, [0, 0], clock, [0, 1001]) == [0, 1]
    lm.close()


def test_a_segment_loaded_at_start_up_counts_segment_ms_from_its_loading(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Kafka's LogSegment takes its creation time when the object is made, at load too: a
    # segment without timestamps written long before the restart is not rolled at once.
    clock = Clock(monkeypatch)
    lm = make(tmp_path)
    new_partition(lm, {"segment.ms": "1000"})
    clock.now += 10_000
    lm = reopen(lm)
    log = lm.get_partition("t", 0)
    assert log is not None
    assert rolls(log, [-1, -1, -1], clock, [0, 1000, 1]) == [0, 2]
    lm.close()


def test_now_ms_is_the_wall_clock_in_milliseconds() -> None:
    before = time.time_ns() // 1_000_000
    assert before <= now_ms() <= time.time_ns() // 1_000_000


def test_an_offset_past_int32_of_the_segments_base_rolls_first(tmp_path: Path) -> None:
    # Index entries hold offsets relative to the segment's base as int32 (Kafka rolls when a
    # batch's last offset would not fit). Offsets jump here by hand, as after a long life.
    lm = make(tmp_path)
    log = new_partition(lm)
    log.append(one(), from_client=False, producer_check=False)
    log.roll()
    log.append(one(), from_client=False, producer_check=False)  # segment 1 from offset 1
    log.active.next_offset = 1 + rb.INT32_MAX
    log.append(one(), from_client=False, producer_check=False)  # relative offset INT32_MAX
    assert [s.base_offset for s in log.segments] == [0, 1]
    log.append(one(), from_client=False, producer_check=False)  # it would be INT32_MAX + 1
    assert [s.base_offset for s in log.segments] == [0, 1, 2 + rb.INT32_MAX]
    lm.close()


def test_stored_batches_carry_the_leader_epoch(tmp_path: Path) -> None:
    # A client sent -1; the broker stamps the partition's leader epoch (KIP-101), which
    # consumers compare with OffsetForLeaderEpoch's answers (KIP-320). One broker: epoch 0.
    lm = make(tmp_path)
    log = new_partition(lm)
    lone = one()
    assert rb.decode_header(lone).partition_leader_epoch == -1
    producer = rb.build_batch([(None, b"p", [], NOW)], producer_id=3, producer_epoch=0,
                              base_sequence=0)
    log.append(lone, from_client=False, producer_check=False)
    log.append(producer, from_client=False, producer_check=False)
    log.append(lone + lone, from_client=False, producer_check=False)
    assert log.unflushed_messages == 4  # every record of every batch (flush.messages)
    data = log.read(0, 1 << 20).records
    epochs = [rb.decode_header(data, p).partition_leader_epoch for p, _ in rb.iter_batches(data)]
    assert epochs == [0, 0, 0, 0]
    assert 3 in log.producer_state.producers
    lm.close()


async def test_the_flush_scheduler_counts_flush_ms_from_the_logs_opening(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        autojump_clock: trio.testing.MockClock) -> None:
    # Kafka's flush scheduler: a log whose data has waited flush.ms since its last flush (or
    # its opening) is synced; a millisecond earlier it is not.
    wall = [1_700_000_000_000]
    monkeypatch.setattr(log_module, "now_ms", lambda: wall[0])
    monkeypatch.setattr(manager_module, "now_ms", lambda: wall[0])
    lm = make(tmp_path, log_flush_scheduler_interval_ms="100")
    log = new_partition(lm, {"flush.ms": "1000"})
    log.append(rb.build_batch([(None, b"v", [], wall[0])]))

    async def ticks(*, until_flushed: bool) -> None:
        """Ten of the scheduler's ticks, then the real time a flush's worker thread takes
        (waited for, up to 10 s, when one is due)."""
        await trio.sleep(1)
        for _ in range(50 if until_flushed else 1):
            await trio.to_thread.run_sync(time.sleep, 0.2)
            if not log.unflushed_messages:
                break

    async with trio.open_nursery() as nursery:
        await nursery.start(lm.run)
        wall[0] += 999
        await ticks(until_flushed=False)
        assert (log.unflushed_messages, log.recovery_point) == (1, 0)
        wall[0] += 1
        await ticks(until_flushed=True)
        assert (log.unflushed_messages, log.recovery_point, log.last_flush_ms) == (0, 1, wall[0])
        nursery.cancel_scope.cancel()
    lm.close()
