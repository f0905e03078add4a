"""ListOffsets by timestamp in the log (Kafka's ``UnifiedLog.fetchOffsetByTimestamp``): the
first record at or after a timestamp, never below the log start, and KIP-734's record with the
largest timestamp, the earliest one on a tie. The mutation run over ``storage/log`` found these
reached only through the server's tests (docs/development.md, "Eighth run")."""

from __future__ import annotations

from pathlib import Path

from tests.storage.test_storage import make
from trio_broker.protocol import records as rb
from trio_broker.storage import LogManager
from trio_broker.storage.log import PartitionLog


async def stamped(lm: LogManager, stamps: list[list[int]], **config: str) -> PartitionLog:
    """A topic whose batches hold records stamped as ``stamps`` (one list per batch), in
    segments of about one batch."""
    lm.create_topic("t", 1, {"segment.bytes": "100", **config})
    for batch in stamps:
        await lm.append("t", 0, rb.build_batch([(None, b"v", [], ts) for ts in batch]))
    log = lm.get_partition("t", 0)
    assert log is not None
    return log


async def test_the_largest_timestamp_is_found_the_earliest_on_a_tie(tmp_path: Path) -> None:
    lm = make(tmp_path)
    log = await stamped(lm, [[100, 300, 200], [250], [300, 100], [50]])
    assert len(log.segments) >= 3
    # Offsets: 0-2, 3, 4-5, 6. The largest timestamp, 300, first at offset 1.
    assert log.max_timestamp_offset() == (1, 300)
    lm.close()


async def test_a_log_without_timestamps_has_no_largest_one(tmp_path: Path) -> None:
    lm = make(tmp_path)
    assert (await stamped(lm, [])).max_timestamp_offset() == (-1, -1)
    lm.close()
    lm = make(tmp_path / "b")
    assert (await stamped(lm, [[-1], [-1]])).max_timestamp_offset() == (-1, -1)
    lm.close()


async def test_a_timestamp_of_zero_can_be_the_largest(tmp_path: Path) -> None:
    lm = make(tmp_path)
    log = await stamped(lm, [[-1], [0], [-1]])
    assert log.max_timestamp_offset() == (1, 0)
    lm.close()


async def test_the_first_record_at_or_after_a_timestamp(tmp_path: Path) -> None:
    lm = make(tmp_path)
    log = await stamped(lm, [[100, 300, 200], [250], [400]])
    assert log.offset_for_timestamp(150) == (1, 300)
    assert log.offset_for_timestamp(300) == (1, 300)
    assert log.offset_for_timestamp(301) == (4, 400)
    assert log.offset_for_timestamp(401) is None
    lm.close()


async def test_a_lookup_never_answers_below_the_log_start(tmp_path: Path) -> None:
    lm = make(tmp_path)
    log = await stamped(lm, [[100, 300, 200], [250]])
    await lm.delete_records("t", 0, 2)
    assert log.offset_for_timestamp(0) == (2, 200)
    lm.close()


async def test_log_append_time_answers_with_the_batch(tmp_path: Path) -> None:
    lm = make(tmp_path)
    log = await stamped(lm, [[1, 2, 3], [4]], **{"message.timestamp.type": "LogAppendTime"})
    appended = log.segments[0].max_timestamp
    assert log.offset_for_timestamp(0) == (0, appended)
    await lm.delete_records("t", 0, 1)
    assert log.offset_for_timestamp(0) == (1, appended)
    lm.close()


async def test_records_below_the_log_start_are_skipped_not_answered_for(tmp_path: Path) -> None:
    # The first batch's largest timestamp (300, offset 1) is below the new log start: Kafka's
    # search goes on to the next record that qualifies; it does not answer with offset 2
    # (stamped 200) as if it were 300.
    lm = make(tmp_path)
    log = await stamped(lm, [[100, 300, 200], [250]])
    await lm.delete_records("t", 0, 2)
    assert log.offset_for_timestamp(250) == (3, 250)
    assert log.offset_for_timestamp(260) is None
    lm.close()
