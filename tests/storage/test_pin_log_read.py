"""A partition's read, as a Fetch uses it: the offsets that come with the records (high
watermark, log start, last stable offset), the first batch whole even past ``max_bytes`` when
asked for (``min_one_batch``, KIP-74) and nothing otherwise, from the copying and the zero-copy
paths alike. The mutation run over ``storage/log`` found these unpinned in tests/storage/
(docs/development.md, "Eighth run")."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.storage.test_storage import make, new_partition
from trio_broker.protocol import records as rb
from trio_broker.storage.cleaner import empty_batch
from trio_broker.storage.errors import OffsetOutOfRange
from trio_broker.storage.log import PartitionLog, now_ms


def records_of(log: PartitionLog, offset: int, max_bytes: int, *, region: bool,
               min_one_batch: bool = True) -> tuple[bytes, tuple[int, int, int]]:
    result = log.read(offset, max_bytes, region=region, min_one_batch=min_one_batch)
    records = result.records
    if not isinstance(records, bytes):
        try:
            data = records.read()
        finally:
            records.release()
    else:
        data = records
    return data, (result.high_watermark, result.log_start_offset, result.last_stable_offset)


@pytest.mark.parametrize("region", [False, True])
async def test_a_read_carries_the_partitions_offsets(tmp_path: Path, region: bool) -> None:
    lm = make(tmp_path)
    log = new_partition(lm)
    for n in range(4):
        log.append(rb.build_batch([(None, b"%d" % n, [], now_ms())]), from_client=False,
                   producer_check=False)
    # An open transaction from offset 4: the last stable offset stays there.
    log.append(rb.build_batch([(None, b"open", [], now_ms())], producer_id=9, producer_epoch=0,
                              base_sequence=0, attributes=rb.TRANSACTIONAL_BIT),
               from_client=False, producer_check=False)
    log.append(rb.build_batch([(None, b"later", [], now_ms())]), from_client=False,
               producer_check=False)
    await lm.delete_records("t", 0, 1)
    _, offsets = records_of(log, 2, 1 << 20, region=region)
    assert offsets == (6, 1, 4)
    # At the log end: no records, the same offsets.
    assert records_of(log, 6, 1 << 20, region=region) == (b"", (6, 1, 4))
    lm.close()


@pytest.mark.parametrize("region", [False, True])
async def test_the_first_batch_comes_whole_only_when_asked_for(tmp_path: Path,
                                                               region: bool) -> None:
    lm = make(tmp_path)
    log = new_partition(lm)
    first = rb.build_batch([(None, b"x" * 100, [], now_ms())])
    log.append(first, from_client=False, producer_check=False)
    log.append(rb.build_batch([(None, b"y", [], now_ms())]), from_client=False,
               producer_check=False)
    data, _ = records_of(log, 0, 10, region=region)
    assert [size for _, size in rb.iter_batches(data)] == [len(first)]
    assert records_of(log, 0, 10, region=region, min_one_batch=False)[0] == b""
    by_default = log.read(0, 10).records  # whole by default
    assert [size for _, size in rb.iter_batches(by_default)] == [len(first)]
    lm.close()


def record_less(log: PartitionLog, value: bytes) -> bytes:
    """What the cleaner leaves of a batch whose records all have newer versions: its header
    alone (one record's offset), appended as the log's own writers append."""
    data = rb.build_batch([(None, value, [], now_ms())], base_offset=log.log_end_offset)
    empty = empty_batch(rb.decode_header(data, 0))
    log.append(empty, from_client=False, producer_check=False)
    return empty


def batches_of(data: bytes) -> list[tuple[int, int]]:
    """``(base offset, record count)`` of each batch."""
    headers = [rb.decode_header(data, position) for position, _ in rb.iter_batches(data)]
    return [(h.base_offset, h.record_count) for h in headers]


@pytest.mark.parametrize("region", [False, True])
async def test_a_read_stopped_by_max_bytes_inside_a_segment_answers_what_it_read_there(
        tmp_path: Path, region: bool) -> None:
    # Two record-less batches, then records, in one segment: a read whose max_bytes ends
    # before the records answers the two empty batches; the client's next fetch starts at
    # the records. Going on into the next segment instead would skip them.
    lm = make(tmp_path)
    log = new_partition(lm)
    empties = record_less(log, b"a") + record_less(log, b"b")
    assert len(empties) == 2 * rb.HEADER_SIZE
    log.append(rb.build_batch([(None, b"kept" * 10, [], now_ms())]), from_client=False,
               producer_check=False)
    log.roll()
    log.append(rb.build_batch([(None, b"next", [], now_ms())]), from_client=False,
               producer_check=False)
    data, _ = records_of(log, 0, len(empties) + 10, region=region)
    assert batches_of(data) == [(0, 0), (1, 0)]
    lm.close()


@pytest.mark.parametrize("region", [False, True])
async def test_a_read_goes_through_every_record_less_segment_to_the_active_one(
        tmp_path: Path, region: bool) -> None:
    lm = make(tmp_path)
    log = new_partition(lm)
    for value in (b"a", b"b"):
        record_less(log, value)
        log.roll()
    # The active segment still empty: the record-less batches are the whole answer.
    got, _ = records_of(log, 0, 1 << 20, region=region)
    assert batches_of(got) == [(0, 0), (1, 0)] and len(got) == 2 * rb.HEADER_SIZE
    data = rb.build_batch([(None, b"data", [], now_ms())], base_offset=2)
    log.append(data, from_client=False, producer_check=False)
    assert [s.size for s in log.segments] == [rb.HEADER_SIZE, rb.HEADER_SIZE, len(data)]
    got, _ = records_of(log, 0, 1 << 20, region=region)
    assert batches_of(got) == [(0, 0), (1, 0), (2, 1)]
    lm.close()


@pytest.mark.parametrize("offset", [-1, 3])
async def test_a_read_outside_the_log_names_the_offset_and_the_bounds(
        tmp_path: Path, offset: int) -> None:
    lm = make(tmp_path)
    log = new_partition(lm)
    log.append(rb.build_batch([(None, b"v", [], now_ms())] * 2), from_client=False,
               producer_check=False)
    with pytest.raises(OffsetOutOfRange) as out:
        log.read(offset, 100)
    assert str(out.value) == (f"Offset {offset} is out of range for partition t-0: "
                              "log start 0, log end 2")
    lm.close()
