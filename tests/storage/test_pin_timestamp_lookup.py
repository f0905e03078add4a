"""ListOffsets by timestamp in the log (Kafka's ``UnifiedLog.fetchOffsetByTimestamp``): the
first record at or after a timestamp, never below the log start, and KIP-734's record with the
largest timestamp, the earliest one on a tie. The mutation run over ``storage/log`` found these
reached only through the server's tests (docs/development.md, "Eighth run")."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.storage.test_storage import make
from trio_broker.protocol import compression
from trio_broker.protocol import records as rb
from trio_broker.storage import LogManager
from trio_broker.storage import log as log_module
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


async def test_log_append_time_batches_stamped_before_the_target_are_passed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lm = make(tmp_path)
    lm.create_topic("t", 1, {"message.timestamp.type": "LogAppendTime"})
    for now in (1_000, 2_000):
        monkeypatch.setattr(log_module, "now_ms", lambda now=now: now)
        await lm.append("t", 0, rb.build_batch([(None, b"v", [], 1)]))
    log = lm.get_partition("t", 0)
    assert log is not None
    assert log.offset_for_timestamp(1_500) == (1, 2_000)
    assert log.offset_for_timestamp(2_001) is None
    lm.close()


async def test_a_batch_undecodable_since_answers_with_the_batch_never_below_the_log_start(
        tmp_path: Path) -> None:
    # Stored under the default max.message.bytes, a compressed batch inflating to 17 MiB is
    # past the decompression limit once max.message.bytes is lowered (16 MiB): the lookup
    # answers at the batch's granularity, as for LogAppendTime.
    lm = make(tmp_path)
    lm.create_topic("t", 1)
    await lm.append("t", 0, rb.build_batch(
        [(None, bytes(17 << 20), [], 100), (None, b"v", [], 200), (None, b"w", [], 150)],
        attributes=compression.COMPRESSION_GZIP))
    lm.alter_topic_config("t", {"max.message.bytes": "100000"}, incremental=True)
    log = lm.get_partition("t", 0)
    assert log is not None and log.decompressed_limit == compression.MIN_DECOMPRESSED_LIMIT
    assert log.offset_for_timestamp(150) == (0, 200)
    await lm.delete_records("t", 0, 1)
    assert log.offset_for_timestamp(150) == (1, 200)
    lm.close()


async def test_the_largest_timestamp_below_the_log_start_is_still_answered(
        tmp_path: Path) -> None:
    # Kafka's MAX_TIMESTAMP lookup reads the segment's largest timestamp so far, whatever
    # the log start: the record's offset, below it.
    lm = make(tmp_path)
    log = await stamped(lm, [[100, 300, 200], [250]])
    await lm.delete_records("t", 0, 2)
    assert log.max_timestamp_offset() == (1, 300)
    lm.close()


async def test_each_batch_of_a_request_is_timed_on_its_own(tmp_path: Path) -> None:
    # Two batches in one append, the first stamped later: the largest timestamp is the first
    # batch's record (offset 1), not the append's last offset.
    lm = make(tmp_path)
    lm.create_topic("t", 1, {"index.interval.bytes": "0"})
    await lm.append("t", 0, rb.build_batch([(None, b"v", [], 50)]))
    await lm.append("t", 0, rb.build_batch([(None, b"a", [], 300)])
                    + rb.build_batch([(None, b"b", [], 100)]))
    log = lm.get_partition("t", 0)
    assert log is not None
    assert log.max_timestamp_offset() == (1, 300)
    assert log.offset_for_timestamp(110) == (1, 300)
    lm.close()


async def test_the_largest_timestamp_at_offset_zero(tmp_path: Path) -> None:
    lm = make(tmp_path)
    log = await stamped(lm, [[300, 100]])
    assert log.max_timestamp_offset() == (0, 300)
    lm.close()
