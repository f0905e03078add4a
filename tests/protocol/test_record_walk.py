"""The streamed record walk (protocol/record_walk.py): Kafka's answers, early failure, budgets.

Sans-IO: batches built with ``build_batch`` (every codec), bombs built by hand, and hypothesis
feeding arbitrary compressed payloads (the walk reads untrusted bytes through four codecs).
"""

from __future__ import annotations

import gzip
import struct

import cramjam
import lz4.frame
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_broker.protocol import compression
from trio_broker.protocol import records as rb
from trio_broker.protocol.record_walk import (
    PIECE,
    Deferred,
    WalkBudget,
    check_records,
    request_budget,
    summarize,
)

CODECS = [rb.COMPRESSION_NONE, rb.COMPRESSION_GZIP, rb.COMPRESSION_SNAPPY, rb.COMPRESSION_LZ4,
          rb.COMPRESSION_ZSTD]
LIMIT = compression.DEFAULT_DECOMPRESSED_LIMIT


def _batch_with_payload(codec: int, payload: bytes, count: int = 1) -> bytes:
    """A v2 batch of ``count`` records whose (compressed) records bytes are ``payload``."""
    batch = bytearray(rb.HEADER_SIZE) + payload
    struct.pack_into(">qiibIhiqqqhii", batch, 0, 0, len(batch) - rb.LOG_OVERHEAD, -1, rb.MAGIC,
                     0, codec, count - 1, 1000, 1000, -1, -1, -1, count)
    struct.pack_into(">I", batch, rb.CRC_OFFSET, rb.compute_crc(batch))
    return bytes(batch)


def _compress(codec: int, data: bytes) -> bytes:
    if codec == rb.COMPRESSION_GZIP:
        return gzip.compress(data)
    if codec == rb.COMPRESSION_LZ4:
        return bytes(lz4.frame.compress(data, block_linked=False))
    if codec == rb.COMPRESSION_ZSTD:
        return bytes(cramjam.zstd.compress(data))
    if codec == rb.COMPRESSION_SNAPPY:
        return compression.compress(codec, data)
    return data


def _walk(batch: bytes, budget: WalkBudget | None = None) -> object:
    header = rb.decode_header(batch)
    return summarize(batch, header, limit=LIMIT, budget=budget or WalkBudget(1 << 40))


records_strategy = st.lists(
    st.tuples(st.one_of(st.none(), st.binary(max_size=40)), st.one_of(st.none(), st.binary(max_size=300)),
              st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=8))),
                       max_size=3),
              st.integers(0, 10**6)),
    min_size=1, max_size=40)


@pytest.mark.parametrize("codec", CODECS)
@settings(max_examples=40, deadline=None)
@given(records=records_strategy)
def test_valid_batches_give_the_decoded_timestamps_and_keys(codec: int, records: list) -> None:
    batch = rb.build_batch([(k, v, h, 10**12 + t) for k, v, h, t in records], attributes=codec)
    summary = _walk(batch)
    decoded = rb.decode_records(batch)
    assert (summary.min_timestamp, summary.max_timestamp) == (  # type: ignore[attr-defined]
        min(r.timestamp for r in decoded), max(r.timestamp for r in decoded))
    assert summary.keyless == any(r.key is None for r in decoded)  # type: ignore[attr-defined]


@pytest.mark.parametrize("codec", CODECS[1:])
def test_a_bomb_of_zeros_fails_at_its_first_record(codec: int) -> None:
    """128 MiB of zeros: the first record's length is 0, so Kafka's reader fails it at once;
    the walk inflates one piece or two, not the 64 MiB cap."""
    zeros = bytes(128 << 20) if codec != rb.COMPRESSION_SNAPPY else bytes(16 << 20)
    batch = _batch_with_payload(codec, _compress(codec, zeros))
    budget = WalkBudget(1 << 40)
    with pytest.raises(rb.RecordBatchError) as refused:
        _walk(batch, budget)
    assert refused.value.kind == "corrupt_message"
    spent = (1 << 40) - budget.remaining
    assert spent <= (16 << 20 if codec == rb.COMPRESSION_SNAPPY else 2 * PIECE)


def test_a_record_longer_than_its_fields_is_corrupt_before_its_length_is_inflated() -> None:
    """A record declaring 32 MiB whose fields end after 7 bytes (the rest zeros) is refused
    after the first piece: Kafka reads fields, not the declared length."""
    record = bytearray()
    rb.write_varint(record, 32 << 20)
    payload = bytes(record) + bytes(32 << 20)
    batch = _batch_with_payload(rb.COMPRESSION_ZSTD, _compress(rb.COMPRESSION_ZSTD, payload))
    budget = WalkBudget(1 << 40)
    with pytest.raises(rb.RecordBatchError, match="invalid record size") as refused:
        _walk(batch, budget)
    assert refused.value.kind == "corrupt_message"
    assert (1 << 40) - budget.remaining <= 2 * PIECE


@pytest.mark.parametrize("codec", CODECS)
def test_bytes_after_the_declared_count_are_invalid_record(codec: int) -> None:
    two = rb.build_batch([(b"k", b"v", [], 5), (b"k", b"w", [], 6)], attributes=codec)
    records = rb.records_payload(two, rb.decode_header(two))
    batch = _batch_with_payload(codec, _compress(codec, bytes(records)), count=1)
    with pytest.raises(rb.RecordBatchError, match="records still remaining") as refused:
        _walk(batch)
    assert refused.value.kind == "invalid_record"


@pytest.mark.parametrize("codec", CODECS)
def test_records_ending_before_the_declared_count_are_corrupt(codec: int) -> None:
    one = rb.build_batch([(b"k", b"v", [], 5)], attributes=codec)
    records = rb.records_payload(one, rb.decode_header(one))
    batch = _batch_with_payload(codec, _compress(codec, bytes(records)), count=2)
    with pytest.raises(rb.RecordBatchError, match="runs past the batch") as refused:
        _walk(batch)
    assert refused.value.kind == "corrupt_message"


def test_the_cap_on_one_batch_holds() -> None:
    values = [(b"k", bytes(1 << 20), [], 5)] * 20
    batch = rb.build_batch(values, attributes=rb.COMPRESSION_GZIP)
    header = rb.decode_header(batch)
    with pytest.raises(rb.RecordBatchError, match="past the limit"):
        summarize(batch, header, limit=8 << 20, budget=WalkBudget(1 << 40))
    summary = summarize(batch, header, limit=32 << 20, budget=WalkBudget(1 << 40))
    assert summary.max_timestamp == 5


def test_an_inline_allowance_defers_and_a_request_budget_refuses() -> None:
    batch = rb.build_batch([(b"k", bytes(300_000), [], 5)] * 4, attributes=rb.COMPRESSION_LZ4)
    header = rb.decode_header(batch)
    with pytest.raises(Deferred):
        summarize(batch, header, limit=LIMIT, budget=WalkBudget(1 << 20, defer=True))
    with pytest.raises(rb.RecordBatchError, match="budget") as refused:
        summarize(batch, header, limit=LIMIT, budget=WalkBudget(1 << 20))
    assert refused.value.kind == "corrupt_message"
    budget = WalkBudget(2 << 20)
    summarize(batch, header, limit=LIMIT, budget=budget)
    assert budget.remaining < (2 << 20) - 1_200_000  # every record's bytes were charged


def test_the_request_budget_is_bounded_by_the_request_and_keeps_one_batch_whole() -> None:
    assert request_budget(LIMIT, 4096) == LIMIT
    assert request_budget(LIMIT, 10 << 20) == compression.DECOMPRESSION_RATIO * (10 << 20)


def test_check_records_is_split_batches_plus_summaries() -> None:
    batch = rb.build_batch([(None, b"v", [], 7)], attributes=rb.COMPRESSION_SNAPPY)
    checked = check_records(batch, max_size=1 << 20, limit=LIMIT, budget=WalkBudget(LIMIT))
    assert checked.batches == rb.split_batches(batch, max_size=1 << 20)
    assert checked.summaries[0].keyless and checked.summaries[0].max_timestamp == 7
    with pytest.raises(rb.RecordBatchError) as refused:
        check_records(batch, max_size=10, limit=LIMIT, budget=WalkBudget(LIMIT))
    assert refused.value.kind == "message_too_large"


@pytest.mark.parametrize("codec", CODECS)
@settings(max_examples=300, deadline=None)
@given(payload=st.binary(max_size=2048), count=st.integers(1, 50))
def test_any_payload_is_a_batch_error_or_a_summary(codec: int, payload: bytes, count: int) -> None:
    """Untrusted bytes through every codec: refused with Kafka's kinds, never anything else."""
    batch = _batch_with_payload(codec, payload, count)
    try:
        _walk(batch, WalkBudget(64 << 20))
    except rb.RecordBatchError as exc:
        assert exc.kind in {"corrupt_message", "invalid_record"}


@pytest.mark.parametrize("codec", CODECS[1:])
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_mutated_compressed_batches_are_refused_or_read(codec: int, data: st.DataObject) -> None:
    """Real compressed records with bytes flipped or cut: the codecs' own errors become
    CORRUPT_MESSAGE."""
    batch = rb.build_batch([(b"key", b"value" * 20, [("h", b"x")], 5)] * 5, attributes=codec)
    payload = bytearray(batch[rb.HEADER_SIZE:])
    cut = data.draw(st.integers(0, len(payload)))
    del payload[cut:]
    for _ in range(data.draw(st.integers(0, 4))):
        if payload:
            at = data.draw(st.integers(0, len(payload) - 1))
            payload[at] = data.draw(st.integers(0, 255))
    try:
        _walk(_batch_with_payload(codec, bytes(payload), 5), WalkBudget(64 << 20))
    except rb.RecordBatchError as exc:
        assert exc.kind in {"corrupt_message", "invalid_record"}
