"""Partitions of thousands of segments, and large ones: deleting them must not hold the event
loop.

Retention (or DeleteRecords) dropping thousands of small segments at once unlinked three files
and logged a line per segment in one synchronous step: 6,012 segments kept a broker from
answering ApiVersions for 4.1 s. Segments now go a batch at a time, other tasks running in
between; these tests count the segments deleted between two steps of a neighbour task.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import trio

from trio_broker.protocol import records as rb
from trio_broker.storage import LogManager, manager, segment
from trio_broker.storage.log import PartitionLog, now_ms
from trio_broker.storage.manager import DELETE_SEGMENTS_PER_STEP

from .test_storage import batch, make, read_all, reopen

SEGMENTS = 4 * DELETE_SEGMENTS_PER_STEP + 50
#: Trio runs a batch of ready tasks in random order: two steps of the work may fall between
#: two looks of the watcher.
MOST = 2 * DELETE_SEGMENTS_PER_STEP


async def many_segments(tmp_path: Path, **configs: str) -> tuple[LogManager, PartitionLog]:
    lm = make(tmp_path)
    lm.create_topic("many", 1, {"segment.bytes": "100", **configs})
    old = now_ms() - 3_600_000
    for i in range(SEGMENTS):
        await lm.append("many", 0, batch([b"v%d" % i], ts=old))
    log = lm.get_partition("many", 0)
    assert log is not None and len(log.segments) == SEGMENTS
    return lm, log


async def largest_step(log: PartitionLog, work: object) -> int:
    """Run ``work`` beside a task that looks at the segment count at every scheduling step;
    the most segments that went between two of its looks."""
    seen = [len(log.segments)]
    async with trio.open_nursery() as nursery:
        async def watch() -> None:
            while True:
                seen.append(len(log.segments))
                await trio.lowlevel.checkpoint()
        nursery.start_soon(watch)
        await trio.lowlevel.checkpoint()
        await work()  # type: ignore[operator]
        seen.append(len(log.segments))
        nursery.cancel_scope.cancel()
    return max(a - b for a, b in zip(seen, seen[1:], strict=False))


async def test_retention_of_thousands_of_segments_lets_other_tasks_run(tmp_path: Path) -> None:
    lm, log = await many_segments(tmp_path, **{"retention.ms": "60000"})
    await lm.append("many", 0, batch([b"fresh"]))  # the one segment within retention
    step = await largest_step(log, lm._retention_pass)
    assert step <= MOST
    assert log.log_start_offset == SEGMENTS
    assert read_all(lm, "many") == [(SEGMENTS, b"fresh")]
    lm = reopen(lm)
    assert read_all(lm, "many") == [(SEGMENTS, b"fresh")]
    assert len(list((tmp_path / "many-0").glob("*.log"))) == 1
    lm.close()


async def test_delete_records_over_thousands_of_segments_lets_other_tasks_run(
        tmp_path: Path) -> None:
    lm, log = await many_segments(tmp_path)
    cut = SEGMENTS - 2

    async def delete() -> None:
        assert await lm.delete_records("many", 0, cut) == cut

    step = await largest_step(log, delete)
    assert step <= MOST
    assert [o for o, _ in read_all(lm, "many")] == [cut, cut + 1]
    assert len(log.segments) == 2
    lm = reopen(lm, after_crash=True)
    assert [o for o, _ in read_all(lm, "many")] == [cut, cut + 1]
    lm.close()


async def test_a_clean_shutdown_writes_nothing_for_partitions_that_did_not_change(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Closing 10,000 idle partitions rewrote every producer snapshot and fsynced every
    segment again (12 s, past the graceful shutdown deadline). As Kafka's shutdown, a
    partition with nothing new since its last flush and snapshot is left alone."""
    lm = make(tmp_path)
    lm.create_topic("idle", 20, {"segment.bytes": "100"})
    for partition in range(20):
        for value in (b"a", b"b", b"c"):
            await lm.append("idle", partition, batch([value]))
    lm = reopen(lm)  # flushed, snapshots written at the log end
    snapshots = {p: p.stat().st_ino for p in tmp_path.glob("idle-*/*.snapshot")}
    assert len(snapshots) == 20 * 2  # the newest two of each partition
    await lm.append("idle", 7, batch([b"d"]))
    synced: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    lm.close()
    monkeypatch.undo()
    # idle-7's active segment (log, indexes) and its directory; the lists, checkpoints and
    # metadata the manager writes durably besides.
    assert len(synced) <= 4 + 6, len(synced)
    after = {p: p.stat().st_ino for p in tmp_path.glob("idle-*/*.snapshot")}
    changed = {p.parent.name for p in set(after) ^ set(snapshots)}
    assert changed == {"idle-7"}
    assert all(after[p] == inode for p, inode in snapshots.items() if p in after)
    lm = make(tmp_path)
    assert [v for _, v in read_all(lm, "idle", 7)] == [b"a", b"b", b"c", b"d"]
    assert [v for _, v in read_all(lm, "idle", 3)] == [b"a", b"b", b"c"]
    lm.close()


def record_unlinks(monkeypatch: pytest.MonkeyPatch) -> list[tuple[bool, list[Path]]]:
    """Every call of the manager's unlink step: (on the event loop's thread?, its paths)."""
    calls: list[tuple[bool, list[Path]]] = []

    def unlink_all(paths: list[Path]) -> None:
        calls.append((threading.current_thread() is threading.main_thread(), list(paths)))
        segment.unlink_all(paths)

    monkeypatch.setattr(manager, "unlink_all", unlink_all)
    return calls


@pytest.mark.parametrize("by", ["retention", "delete_records"])
async def test_deleted_segment_files_are_unlinked_by_a_worker_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, by: str) -> None:
    """A 256 MiB segment's unlink (its blocks and cached pages freed) held the event loop for
    up to 150 ms at every retention pass of a busy partition. As Kafka's asyncDeleteSegment,
    the loop only renames the files ``.deleted``; a worker thread unlinks them."""
    lm = make(tmp_path)
    lm.create_topic("t", 1, {"segment.bytes": "100", "retention.ms": "60000"})
    old = now_ms() - 3_600_000
    for i in range(5):
        await lm.append("t", 0, batch([b"v%d" % i], ts=old))
    await lm.append("t", 0, batch([b"fresh"]))
    directory = tmp_path / "t-0"
    doomed = sorted(p.name for p in directory.iterdir()
                    if p.suffix in (".log", ".index", ".timeindex") and int(p.name[:20]) < 5)
    assert any(name.endswith(".log") for name in doomed)
    calls = record_unlinks(monkeypatch)
    if by == "retention":
        await lm._retention_pass()
    else:
        assert await lm.delete_records("t", 0, 5) == 5
    assert calls and not any(on_loop for on_loop, _ in calls)
    unlinked = sorted(p.name for _, paths in calls for p in paths)
    assert unlinked == sorted(f"{name}.deleted" for name in doomed)
    left = sorted(p.name for p in directory.iterdir())
    assert not set(doomed) & set(left) and not [n for n in left if n.endswith(".deleted")]
    assert read_all(lm, "t") == [(5, b"fresh")]
    lm.close()


async def test_deleted_files_a_crash_left_behind_go_at_start_up(tmp_path: Path) -> None:
    """A crash between the rename and the unlink leaves ``.deleted`` files: the next start-up
    removes them, as Kafka's log loader does, and the log reads as before."""
    lm = make(tmp_path)
    lm.create_topic("t", 1)
    await lm.append("t", 0, batch([b"kept"]))
    directory = tmp_path / "t-0"
    debris = [directory / "00000000000000000000.log.deleted",
              directory / "00000000000000000000.index.deleted",
              directory / "00000000000000000000.timeindex.deleted"]
    for path in debris:
        path.write_bytes(b"\0" * 64)
    lm = reopen(lm, after_crash=True)
    assert not any(path.exists() for path in debris)
    assert read_all(lm, "t") == [(0, b"kept")]
    lm.close()


def test_a_retired_segment_still_serves_a_region_taken_before(tmp_path: Path) -> None:
    """A zero-copy Fetch response being sent keeps reading the segment it was cut from after
    retention renamed (and a thread unlinked) its files: the descriptor stays open until the
    region is released."""
    seg = segment.Segment(tmp_path, 0, index_max_bytes=4096, index_interval_bytes=4096,
                          created_ms=0)
    data = batch([b"a", b"b"])
    seg.append(data, [(0, rb.decode_header(data))])
    region = segment.SegmentRegion(seg, 0, len(data))
    segment.unlink_all(seg.retire())
    assert list(tmp_path.iterdir()) == []
    assert region.read() == data
    region.release()
