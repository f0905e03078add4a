"""The segment list under the log cleaner and a topic's deletion: the cleaner installs a cleaned
segment only in place of closed segments that are still the log's, adjacent and in order
(retention, DeleteRecords or a roll may have changed the list while a worker thread cleaned),
never in place of the active one; a deleted partition's directory goes even if it was changed
or removed behind the broker's back. The mutation run over ``storage/log`` found these
unpinned (docs/development.md, "Eighth run")."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.storage.test_storage import batch, make, new_partition
from trio_broker.storage.log import PartitionLog


def four_segments(tmp_path: Path) -> PartitionLog:
    lm = make(tmp_path)
    log = new_partition(lm)
    for value in (b"a", b"b", b"c"):
        log.append(batch([value]), from_client=False, producer_check=False)
        log.roll()
    log.append(batch([b"d"]), from_client=False, producer_check=False)
    assert [s.base_offset for s in log.segments] == [0, 1, 2, 3]
    return log


async def test_only_adjacent_closed_segments_of_the_log_can_be_replaced(tmp_path: Path) -> None:
    log = four_segments(tmp_path)
    s0, s1, s2, active = log.segments
    assert log.has_segments([s0, s1, s2])
    assert log.has_segments([s1])
    assert not log.has_segments([s0, s2])  # no longer adjacent: one was cleaned in between
    assert not log.has_segments([s1, s0])
    assert not log.has_segments([active])  # the active segment is never cleaned
    assert not log.has_segments([s2, active])
    assert not log.has_segments([])
    log.delete_records_before(1)
    log.delete_breached_segments()  # retention got to s0 first
    assert log.segments[0] is s1
    assert not log.has_segments([s0, s1])
    log.close()


async def test_a_cleaned_segment_takes_the_place_of_the_ones_it_replaces(tmp_path: Path) -> None:
    log = four_segments(tmp_path)
    s0, s1, s2, active = log.segments
    log.replace_segments([s0, s1], s0)
    assert log.segments == [s0, s2, active]
    assert log.segment_for(1) is s0 and log.segment_for(2) is s2  # the bases follow
    log.close()


async def test_a_deleted_partitions_directory_goes_whatever_was_done_to_it(
        tmp_path: Path) -> None:
    log = four_segments(tmp_path)
    (log.directory / "stray" / "deeper").mkdir(parents=True)
    log.delete_files()
    assert not log.directory.exists()
    again = four_segments(tmp_path / "second")
    shutil.rmtree(again.directory)  # removed by hand before the topic was deleted
    again.delete_files()
    assert not again.directory.exists()
