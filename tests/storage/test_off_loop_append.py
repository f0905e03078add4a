"""Large appends are written by a worker thread while writes stall (``WriteStalls``), real
threads and real files: the event loop serves others meanwhile, offsets are still taken in
turn, a reader never sees half an append, and a topic deleted during the write is answered as
gone without touching any other file. Without a stall they are written on the loop.

A producer's megabyte batches made the event loop wait out the kernel's dirty-page throttling
in ``os.write`` (5-15 ms each), where in Kafka a request-handler thread, not a network thread,
waits."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio
import trio.lowlevel
import trio.testing

from tests.storage.test_storage import batch, make, read_all
from trio_broker.storage import LogManager
from trio_broker.storage import errors as se
from trio_broker.storage.manager import OFF_LOOP_WRITE_BYTES, WriteStalls

#: A topic that takes large batches in one segment.
LARGE = {"max.message.bytes": str(64 << 20), "segment.bytes": str(256 << 20)}


def large_batch(tag: bytes, size: int = OFF_LOOP_WRITE_BYTES) -> bytes:
    return batch([tag * (size // len(tag))])


class LoopTicks:
    """How many times the event loop let another task run: :meth:`run` counts its turns."""

    def __init__(self) -> None:
        self.count = 0

    async def run(self) -> None:
        while True:
            self.count += 1
            await trio.lowlevel.checkpoint()


def stalling(lm: LogManager) -> LogManager:
    """``lm`` as after a write that stalled for a minute: large appends go off the loop."""
    lm.write_stalls.observed(time.perf_counter(), 60.0)
    return lm


def test_large_appends_leave_the_loop_only_while_writes_stall() -> None:
    stalls = WriteStalls()
    assert not stalls.off_loop(100.0)
    stalls.observed(100.0, WriteStalls.STALL_S)  # not slower than a stall
    assert not stalls.off_loop(100.1)
    stalls.observed(100.0, 0.01)
    assert stalls.off_loop(100.01 + WriteStalls.HOLD_S - 0.001)
    assert not stalls.off_loop(100.01 + WriteStalls.HOLD_S)


@pytest.mark.parametrize("stalled", [False, True])
async def test_a_large_append_lets_the_event_loop_run_while_writes_stall(
        tmp_path: Path, stalled: bool) -> None:
    lm = stalling(make(tmp_path)) if stalled else make(tmp_path)
    lm.create_topic("t", 1, LARGE)
    ticks = LoopTicks()
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ticks.run)
            await trio.lowlevel.checkpoint()
            before = ticks.count
            small = await lm.append("t", 0, batch([b"small"]))
            assert ticks.count == before  # a small append is written at once, on the loop
            result = await lm.append("t", 0, large_batch(b"L", 16 << 20))
            # Stalling, the loop went on while the thread wrote; else it was written at once.
            assert (ticks.count > before) is stalled
            nursery.cancel_scope.cancel()
    assert (small.base_offset, result.base_offset) == (0, 1)
    assert [offset for offset, _ in read_all(lm, "t")] == [0, 1]
    lm.close()


async def test_appends_during_a_large_write_take_their_offsets_in_turn(tmp_path: Path) -> None:
    lm = stalling(make(tmp_path))
    lm.create_topic("t", 1, LARGE)
    sent: dict[int, bytes] = {}
    reads: list[int] = []
    done = trio.Event()

    async def producer(count: int, size: int, tag: int) -> None:
        for index in range(count):
            payload = bytes([tag + index % 8]) * size
            result = await lm.append("t", 0, batch([payload]))
            assert result.base_offset not in sent
            sent[result.base_offset] = payload
            await trio.lowlevel.checkpoint()

    async def reader() -> None:
        # A reader during the writes sees whole appends only: every offset below the end it
        # reads has its bytes.
        while not done.is_set():
            log = lm.get_partition("t", 0)
            assert log is not None
            reads.append(len(read_all(lm, "t")) - log.log_end_offset)
            await trio.lowlevel.checkpoint()

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader)
            async with trio.open_nursery() as producers:
                # The small appends keep coming while the large ones are in the thread.
                producers.start_soon(producer, 12, 4 * OFF_LOOP_WRITE_BYTES, 65)
                producers.start_soon(producer, 60, 10, 97)
            done.set()
    assert reads and set(reads) == {0}
    assert sorted(sent) == list(range(72))  # dense, no offset taken twice
    assert read_all(lm, "t") == sorted(sent.items())
    lm.close()


async def test_a_topic_deleted_during_a_large_write_is_gone_and_no_other_file_changes(
        tmp_path: Path) -> None:
    lm = stalling(make(tmp_path))
    lm.create_topic("t", 1, LARGE)
    lm.create_topic("other", 1)
    await lm.append("other", 0, batch([b"keep"]))
    outcome: list[BaseException | int] = []

    async def big_append() -> None:
        try:
            outcome.append((await lm.append("t", 0, large_batch(b"D", 48 << 20))).base_offset)
        except se.StorageError as exc:
            outcome.append(exc)

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(big_append)
            # The append task waits for its worker thread (the 48 MB write) here.
            await trio.testing.wait_all_tasks_blocked()
            lm.delete_topic("t")
            # The descriptors the deleted log held are free: files opened now may reuse
            # their numbers while the thread still writes.
            lm.create_topic("fresh", 1)
            await lm.append("fresh", 0, batch([b"new"]))
    # Kafka's answer for a partition deleted under a produce; nothing accounted for.
    assert len(outcome) == 1 and isinstance(outcome[0], se.UnknownTopicOrPartition)
    assert [value for _, value in read_all(lm, "other")] == [b"keep"]
    assert [value for _, value in read_all(lm, "fresh")] == [b"new"]
    fresh_log = lm.get_partition("fresh", 0)
    assert fresh_log is not None and fresh_log.segments[-1].size < 4096
    lm.close()


@pytest.mark.parametrize("size", [1024, 256 * 1024])  # on the loop, by a thread
async def test_a_retried_large_batch_is_answered_as_the_first_time(
        tmp_path: Path, size: int) -> None:
    lm = stalling(make(tmp_path))
    lm.create_topic("t", 1, LARGE)
    records = batch([b"r" * size], producer_id=7, producer_epoch=0, base_sequence=0)
    first = await lm.append("t", 0, records)
    again = await lm.append("t", 0, records)
    assert (again.base_offset, again.duplicate) == (first.base_offset, True)
    assert len(read_all(lm, "t")) == 1
    lm.close()
