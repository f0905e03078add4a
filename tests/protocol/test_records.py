"""Record batch header decoding, validation and offset assignment (sans-IO)."""

from __future__ import annotations

import gzip
import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_broker.protocol import records as rb

keys = st.one_of(st.none(), st.binary(max_size=40))
headers = st.lists(st.tuples(st.text(max_size=10), st.one_of(st.none(), st.binary(max_size=20))),
                   max_size=3)
timestamps = st.integers(min_value=0, max_value=2**45)
record_lists = st.lists(st.tuples(keys, keys, headers, timestamps), min_size=1, max_size=20)


@given(record_lists, st.integers(0, 2**40), st.integers(-1, 2**40), st.integers(0, 2**20))
@settings(max_examples=150, deadline=None)
def test_build_validate_decode_round_trip(recs: list[rb.RecordInput], base: int, pid: int,
                                          seq: int) -> None:
    batch = rb.build_batch(recs, base_offset=base, producer_id=pid,
                           producer_epoch=0 if pid >= 0 else -1,
                           base_sequence=seq if pid >= 0 else -1)
    header = rb.validate_batch(batch)
    assert header.base_offset == base
    assert header.record_count == len(recs)
    assert header.size == len(batch)
    assert header.max_timestamp == max(r[3] for r in recs)
    decoded = rb.decode_records(batch)
    assert [(r.key, r.value, list(r.headers), r.timestamp) for r in decoded] == [
        (k, v, list(h), t) for k, v, h, t in recs]
    assert [r.offset for r in decoded] == list(range(base, base + len(recs)))


@given(record_lists, st.integers(0, 2**40), st.integers(0, 2**45))
@settings(max_examples=100, deadline=None)
def test_assign_offset_keeps_crc_valid(recs: list[rb.RecordInput], new_base: int,
                                       append_time: int) -> None:
    batch = bytearray(rb.build_batch(recs))
    rb.assign_offset(batch, 0, new_base)
    header = rb.validate_batch(bytes(batch))  # CRC does not cover the base offset
    assert header.base_offset == new_base and not header.log_append_time
    rb.assign_offset(batch, 0, new_base, log_append_time=append_time)
    header = rb.validate_batch(bytes(batch))
    assert header.log_append_time and header.max_timestamp == append_time
    assert all(r.timestamp == append_time for r in rb.decode_records(bytes(batch)))


@given(st.lists(record_lists, min_size=1, max_size=5))
@settings(max_examples=50, deadline=None)
def test_split_batches_finds_each_batch(groups: list[list[rb.RecordInput]]) -> None:
    batches = [rb.build_batch(g) for g in groups]
    blob = b"".join(batches)
    found = rb.split_batches(blob)
    assert [h.record_count for _, h in found] == [len(g) for g in groups]
    assert [p for p, _ in found] == [sum(map(len, batches[:i])) for i in range(len(batches))]
    assert list(rb.iter_batches(blob)) == [(p, h.size) for p, h in found]
    # a torn tail: iter_batches stops before it, split_batches refuses it
    torn = blob + batches[0][: len(batches[0]) - 1]
    assert list(rb.iter_batches(torn)) == list(rb.iter_batches(blob))
    with pytest.raises(rb.RecordBatchError) as info:
        rb.split_batches(torn)
    assert info.value.kind == "corrupt_message"


@given(record_lists, st.data())
@settings(max_examples=100, deadline=None)
def test_any_flipped_byte_after_the_crc_field_is_detected(recs: list[rb.RecordInput],
                                                          data: st.DataObject) -> None:
    batch = bytearray(rb.build_batch(recs))
    index = data.draw(st.integers(rb.ATTRIBUTES_OFFSET, len(batch) - 1))
    batch[index] ^= data.draw(st.integers(1, 255))
    with pytest.raises(rb.RecordBatchError) as info:
        rb.validate_batch(bytes(batch))
    assert info.value.kind in ("corrupt_message", "invalid_record")


def _one() -> bytes:
    return rb.build_batch([(b"k", b"v", [], 1000)])


def _with_crc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, rb.CRC_OFFSET, crc32c.crc32c(bytes(batch[rb.ATTRIBUTES_OFFSET:])))
    return bytes(batch)


def test_bad_magic_is_invalid_record() -> None:
    batch = bytearray(_one())
    batch[16] = 1
    with pytest.raises(rb.RecordBatchError) as info:
        rb.validate_batch(bytes(batch))
    assert info.value.kind == "invalid_record"


def test_record_count_must_match_last_offset_delta() -> None:
    batch = bytearray(_one())
    struct.pack_into(">i", batch, 57, 2)
    with pytest.raises(rb.RecordBatchError) as info:
        rb.validate_batch(_with_crc(batch))
    assert info.value.kind == "invalid_record"


def test_control_batch_from_client_is_refused() -> None:
    batch = rb.build_batch([(b"k", b"v", [], 1)], attributes=rb.CONTROL_BIT)
    with pytest.raises(rb.RecordBatchError):
        rb.validate_batch(batch)
    assert rb.validate_batch(batch, from_client=False).is_control


def test_too_large() -> None:
    batch = rb.build_batch([(None, b"x" * 500, [], 1)])
    with pytest.raises(rb.RecordBatchError) as info:
        rb.split_batches(batch, max_size=100)
    assert info.value.kind == "message_too_large"


def test_undersized_and_empty() -> None:
    for blob in (b"", b"\x00" * 20, _one()[:-1]):
        with pytest.raises(rb.RecordBatchError) as info:
            rb.split_batches(blob)
        assert info.value.kind == "corrupt_message"
    short = bytearray(_one())
    struct.pack_into(">i", short, 8, 10)
    with pytest.raises(rb.RecordBatchError):
        rb.split_batches(bytes(short))


def test_sequence_wraps_and_producer_fields() -> None:
    batch = rb.build_batch([(None, b"a", [], 1)] * 3, producer_id=7, producer_epoch=2,
                           base_sequence=rb.INT32_MAX - 1)
    header = rb.validate_batch(batch)
    assert (header.producer_id, header.producer_epoch) == (7, 2)
    assert header.last_sequence == 0
    no_seq = rb.build_batch([(None, b"a", [], 1)], producer_id=7, producer_epoch=0)
    with pytest.raises(rb.RecordBatchError):
        rb.validate_batch(no_seq)


def test_gzip_batches_decode() -> None:
    plain = rb.build_batch([(b"k", b"value", [("h", b"1")], 5), (None, None, [], 6)])
    payload = gzip.compress(plain[rb.HEADER_SIZE:])
    batch = bytearray(plain[: rb.HEADER_SIZE]) + payload
    struct.pack_into(">i", batch, 8, len(batch) - rb.LOG_OVERHEAD)
    struct.pack_into(">h", batch, rb.ATTRIBUTES_OFFSET, rb.COMPRESSION_GZIP)
    compressed = _with_crc(batch)
    assert rb.validate_batch(compressed).compression == rb.COMPRESSION_GZIP
    assert [(r.key, r.value, r.timestamp) for r in rb.decode_records(compressed)] == [
        (b"k", b"value", 5), (None, None, 6)]


@pytest.mark.parametrize("value_size", [1, 100, 10_000, 300_000])
@pytest.mark.parametrize("spread", [0, 50, 5_000, 10**9])
def test_records_max_timestamp_reads_every_varint_width(value_size: int, spread: int) -> None:
    base = 1_700_000_000_000
    # deltas of every width, negative ones too (records need not be in timestamp order)
    stamps = [base, base + spread, base - spread, base + spread // 3]
    data = rb.build_batch([(b"k", b"v" * value_size, [], t) for t in stamps])
    header = rb.decode_header(data)
    assert rb.records_max_timestamp(data, 0, header) == max(stamps)
    padded = b"\0" * 7 + data
    assert rb.records_max_timestamp(padded, 7, header) == max(stamps)
