"""A produced append that rolls the segment creates the new segment's files and writes the
producer snapshot in a worker thread, real threads and files: the event loop serves others
meanwhile, offsets stay dense across the roll, a topic deleted during it is answered as gone,
and the snapshot written by the thread is the one a restart recovers from.

Under a bulk producer, creating a file waits for the file system's journal behind the
writeback of everything written before: a roll on the loop held every connection for 230 ms."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path

import trio
import trio.lowlevel
import trio.testing

from tests.storage.test_off_loop_append import LoopTicks
from tests.storage.test_storage import batch, crash, make, read_all
from trio_broker.storage import LogManager
from trio_broker.storage import errors as se
from trio_broker.storage.log import PartitionLog
from trio_broker.storage.segment import Segment

#: Segments of about four small batches.
SMALL_SEGMENTS = {"segment.bytes": "300"}


def partition(lm: LogManager, topic: str = "t") -> PartitionLog:
    log = lm.get_partition(topic, 0)
    assert log is not None
    return log


async def test_an_append_that_rolls_lets_the_event_loop_run_and_others_do_not(
        tmp_path: Path) -> None:
    lm = make(tmp_path)
    lm.create_topic("t", 1, SMALL_SEGMENTS)
    log = partition(lm)
    ticks = LoopTicks()
    rolled_with_ticks: list[bool] = []
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ticks.run)
            await trio.lowlevel.checkpoint()
            for index in range(12):
                segments, before = len(log.segments), ticks.count
                await lm.append("t", 0, batch([b"v%02d" % index], producer_id=3,
                                              producer_epoch=0, base_sequence=index))
                if len(log.segments) > segments:
                    rolled_with_ticks.append(ticks.count > before)
                else:
                    assert ticks.count == before  # no roll: written at once, on the loop
            nursery.cancel_scope.cancel()
    # Every roll let the loop run while its thread created the files and the snapshot.
    assert len(rolled_with_ticks) >= 2 and all(rolled_with_ticks)
    assert [offset for offset, _ in read_all(lm, "t")] == list(range(12))
    bases = [segment.base_offset for segment in log.segments]
    assert bases == sorted(bases) and bases[0] == 0
    # Each roll wrote the producer state at the new segment's base; the newest two are kept.
    snapshots = [offset for offset, _ in log.producer_state.snapshot_files()]
    assert snapshots == bases[-2:]
    lm.close()


async def test_concurrent_appends_across_rolls_take_dense_offsets(tmp_path: Path) -> None:
    lm = make(tmp_path)
    lm.create_topic("t", 1, SMALL_SEGMENTS)
    sent: dict[int, bytes] = {}

    async def producer(tag: bytes, count: int) -> None:
        for index in range(count):
            value = tag + b"%03d" % index
            result = await lm.append("t", 0, batch([value]))
            assert result.base_offset not in sent
            sent[result.base_offset] = value

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for tag in (b"a", b"b", b"c"):
                nursery.start_soon(producer, tag, 40)
    assert sorted(sent) == list(range(120))
    assert read_all(lm, "t") == sorted(sent.items())
    log = partition(lm)
    assert len(log.segments) > 10
    for previous, segment in itertools.pairwise(log.segments):
        assert segment.base_offset == previous.next_offset  # no gap, no overlap
    lm.close()


async def test_a_topic_deleted_while_its_roll_creates_files_is_gone(
        tmp_path: Path) -> None:
    lm = make(tmp_path)
    lm.create_topic("t", 1, SMALL_SEGMENTS)
    lm.create_topic("other", 1)
    log = partition(lm)
    while not log.roll_due(len(batch([b"next"]))):
        await lm.append("t", 0, batch([b"fill"]))
    creating = threading.Event()
    deleted = threading.Event()
    new_segment = log._new_segment

    def slow_new_segment(base: int) -> Segment:
        creating.set()
        deleted.wait(10)
        return new_segment(base)

    log._new_segment = slow_new_segment  # type: ignore[method-assign]
    outcome: list[BaseException | int] = []

    async def rolling_append() -> None:
        try:
            outcome.append((await lm.append("t", 0, batch([b"next"]))).base_offset)
        except se.StorageError as exc:
            outcome.append(exc)

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(rolling_append)
            await trio.to_thread.run_sync(creating.wait, 10)
            lm.delete_topic("t")
            deleted.set()
            await lm.append("other", 0, batch([b"keep"]))
    # Kafka's answer for a partition deleted under a produce.
    assert len(outcome) == 1 and isinstance(outcome[0], se.UnknownTopicOrPartition)
    assert lm.get_partition("t", 0) is None
    assert [value for _, value in read_all(lm, "other")] == [b"keep"]
    lm.close()


async def test_the_snapshot_a_thread_wrote_answers_a_retry_after_a_restart(
        tmp_path: Path) -> None:
    lm = make(tmp_path)
    lm.create_topic("t", 1, SMALL_SEGMENTS)
    records = [batch([b"p%02d" % index], producer_id=9, producer_epoch=2, base_sequence=index)
               for index in range(10)]
    for record in records:
        await lm.append("t", 0, record)
    assert len(partition(lm).producer_state.snapshot_files()) == 2
    crash(lm)  # no clean-shutdown snapshot: the roll's is what there is
    lm = make(tmp_path)
    again = await lm.append("t", 0, records[-1])
    assert (again.base_offset, again.duplicate) == (9, True)
    with trio.fail_after(5):
        try:
            await lm.append("t", 0, batch([b"gap"], producer_id=9, producer_epoch=2,
                                          base_sequence=12))
        except se.OutOfOrderSequence:
            pass
        else:
            raise AssertionError("a sequence gap after the restart was accepted")
    assert [value for _, value in read_all(lm, "t")][-1] == b"p09"
    lm.close()
