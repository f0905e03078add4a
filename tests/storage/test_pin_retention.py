"""Retention and DeleteRecords at their boundaries, as Kafka's ``UnifiedLog`` has them: what the
mutation run over ``storage/log`` found unpinned (docs/development.md, "Eighth run").

- ``retention.ms``: a segment goes once ``now - largestTimestamp > retention.ms`` (exactly that
  old it stays), 0 expires everything older than now, -1 none; a segment without record
  timestamps is aged by its file's modification time (``LogSegment.largestTimestamp``), a
  timestamp of 0 is a timestamp.
- ``retention.bytes``: the oldest segments go while the log stays at or above the limit
  (``diff - segment.size >= 0``: a deletion that leaves exactly the limit happens), 0 empties
  the log, -1 none.
- An empty active segment stops the scan and is kept; a compacted topic has no retention.
- Each deleted segment is logged with why; DeleteRecords logs the start it moved to, and
  nothing when the start does not move.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.storage.test_storage import make
from trio_broker.protocol import records as rb
from trio_broker.storage import LogManager
from trio_broker.storage.log import PartitionLog, now_ms
from trio_broker.storage.txn_index import build_marker

HOUR = 3_600_000


async def filled(lm: LogManager, topic: str, count: int, ts: int, **config: str
                 ) -> PartitionLog:
    """``topic`` (segments of about two batches) holding ``count`` one-record batches stamped
    ``ts``."""
    lm.create_topic(topic, 1, {"segment.bytes": "300", **config})
    for n in range(count):
        # Keyed: a compacted topic takes only records with keys.
        await lm.append(topic, 0, rb.build_batch([(b"k%d" % n, b"x" * 50, [], ts)]))
    log = lm.get_partition(topic, 0)
    assert log is not None and len(log.segments) >= 3
    return log


async def test_a_segment_exactly_retention_ms_old_stays(tmp_path: Path) -> None:
    lm = make(tmp_path)
    stamp = now_ms() - HOUR
    log = await filled(lm, "t", 6, stamp, **{"retention.ms": "60000"})
    segments = len(log.segments)
    assert log.delete_old_segments(stamp + 60_000) == 0
    assert log.delete_old_segments(stamp + 60_001) == segments
    assert log.log_start_offset == log.log_end_offset == 6
    lm.close()


async def test_retention_ms_zero_expires_everything_older_than_now(tmp_path: Path) -> None:
    lm = make(tmp_path)
    log = await filled(lm, "t", 6, now_ms() - 10_000, **{"retention.ms": "0"})
    assert log.delete_old_segments(now_ms()) >= 3
    assert log.log_start_offset == 6
    off = await filled(lm, "off", 6, 0, **{"retention.ms": "-1"})
    assert off.delete_old_segments(now_ms()) == 0
    lm.close()


async def test_without_record_timestamps_a_segment_is_aged_by_its_file(tmp_path: Path) -> None:
    lm = make(tmp_path)
    log = await filled(lm, "t", 6, -1, **{"retention.ms": "60000"})
    assert all(s.max_timestamp < 0 for s in log.segments)
    assert log.delete_old_segments(now_ms()) == 0  # the files were just written
    old = (now_ms() - HOUR) / 1000
    first = log.segments[0]
    os.utime(first.log_path, (old, old))
    assert log.delete_old_segments(now_ms()) == 1
    lm.close()


async def test_a_record_timestamp_of_zero_is_a_timestamp(tmp_path: Path) -> None:
    lm = make(tmp_path)
    log = await filled(lm, "t", 6, 0, **{"retention.ms": str(HOUR)})
    assert log.segments[0].max_timestamp == 0
    segments = len(log.segments)
    assert log.delete_old_segments(now_ms()) == segments  # 1970: long expired
    lm.close()


async def test_an_empty_active_segment_stops_the_scan_and_stays(tmp_path: Path) -> None:
    lm = make(tmp_path)
    log = await filled(lm, "t", 6, now_ms() - HOUR, **{"retention.ms": "60000"})
    log.roll()
    closed = len(log.segments) - 1
    active = log.active
    assert active.size == 0
    assert log.delete_old_segments(now_ms()) == closed
    assert log.segments == [active] and log.log_start_offset == 6
    lm.close()


async def test_a_deletion_leaving_exactly_retention_bytes_happens(tmp_path: Path) -> None:
    lm = make(tmp_path)
    log = await filled(lm, "t", 6, now_ms())
    first = log.segments[0].size
    lm.alter_topic_config("t", {"retention.bytes": str(log.size_bytes - first)},
                          incremental=True)
    assert log.delete_old_segments(now_ms()) == 1
    lm.alter_topic_config("t", {"retention.bytes": str(log.size_bytes - 1)}, incremental=True)
    assert log.delete_old_segments(now_ms()) == 0  # one byte over: the next would go below
    lm.alter_topic_config("t", {"retention.bytes": "0"}, incremental=True)
    assert log.delete_old_segments(now_ms()) >= 2
    assert log.log_start_offset == log.log_end_offset == 6
    lm.close()


async def test_a_compacted_topic_has_no_retention(tmp_path: Path) -> None:
    lm = make(tmp_path)
    log = await filled(lm, "t", 6, 0, **{"retention.ms": "0", "cleanup.policy": "compact"})
    assert log.delete_old_segments(now_ms()) == 0
    assert log.log_start_offset == 0
    lm.close()


async def test_deleted_segments_and_a_moved_start_are_logged_with_why(
        tmp_path: Path, log_events: object) -> None:
    lm = make(tmp_path)
    log = await filled(lm, "t", 6, now_ms() - HOUR)
    second = log.segments[1].base_offset
    first_size = log.segments[0].size
    assert await lm.delete_records("t", 0, second + 1) == second + 1
    assert [(e["topic"], e["partition"], e["log_start_offset"], e["reason"])
            for e in log_events.events("log_start_offset_advanced")] == [  # type: ignore[attr-defined]
        ("t", 0, second + 1, "delete_records")]
    assert [(e["topic"], e["partition"], e["segment"], e["size"], e["reason"])
            for e in log_events.events("log_segment_deleted")] == [  # type: ignore[attr-defined]
        ("t", 0, 0, first_size, "log_start_offset")]
    # The same start again, or a lower one: nothing moves, nothing is logged.
    assert await lm.delete_records("t", 0, second + 1) == second + 1
    assert await lm.delete_records("t", 0, 1) == second + 1
    assert len(log_events.events("log_start_offset_advanced")) == 1  # type: ignore[attr-defined]
    lm.alter_topic_config("t", {"retention.ms": "60000"}, incremental=True)
    log.delete_old_segments(now_ms())
    assert {e["reason"] for e in log_events.events(  # type: ignore[attr-defined]
        "log_segment_deleted") if e["segment"] != 0} == {"retention"}
    lm.close()


def aborted_then_more(lm: LogManager, topic: str, pid: int, **config: str) -> PartitionLog:
    """``topic`` holding a transaction of ``pid`` (offset 0) aborted at 1, then a record (2)."""
    lm.create_topic(topic, 1, config)
    log = lm.get_partition(topic, 0)
    assert log is not None
    log.append(rb.build_batch([(None, b"aborted", [], now_ms())], producer_id=pid,
                              producer_epoch=0, base_sequence=0,
                              attributes=rb.TRANSACTIONAL_BIT),
               from_client=False, producer_check=False)
    log.append(build_marker(pid, 0, False, now_ms()), from_client=False, producer_check=False)
    log.append(rb.build_batch([(None, b"after", [], now_ms())]), from_client=False,
               producer_check=False)
    assert log.txn_index.aborted_ranges() == ((pid, 0, 1),)
    return log


async def test_delete_records_past_an_aborted_transaction_forgets_it(tmp_path: Path) -> None:
    # A read_committed fetch must not be told of aborted records below the log start.
    lm = make(tmp_path)
    pid = 42
    log = aborted_then_more(lm, "t", pid)
    assert log.delete_records_before(1) == 1
    assert log.txn_index.aborted_ranges() == ((pid, 0, 1),)  # its marker is still there
    assert log.delete_records_before(2) == 2
    assert log.txn_index.aborted_ranges() == ()
    lm.close()


async def test_retention_past_an_aborted_transaction_forgets_it(tmp_path: Path) -> None:
    lm = make(tmp_path)
    log = aborted_then_more(lm, "t", 42, **{"retention.ms": "0"})
    assert log.delete_old_segments(now_ms() + 1000) == 1
    assert log.log_start_offset == 3 and log.txn_index.aborted_ranges() == ()
    lm.close()
