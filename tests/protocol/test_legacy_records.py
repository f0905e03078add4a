"""Message formats v0 and v1 (protocol/legacy_records.py), cross-checked with kafka-python.

kafka-python 3.0 has its own reader and writer of magic 0/1 message sets
(``kafka.record.legacy_records``) and of v2 batches (``kafka.record.default_records``): sets it
builds must parse here to the same messages, sets converted here must parse there, and
up-converted batches must pass both its v2 reader and the broker's own v2 checks. Its magic-0
LZ4 codec needs the ``xxhash`` module; the fixture below hands it XXH32 computed by the lz4 C
library (an LZ4 frame's content checksum is XXH32 of the content), independent of ours.
"""

from __future__ import annotations

import gzip
import random
import struct
import types
import zlib
from collections.abc import Iterator, Sequence

import lz4.frame
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka import codec as kafka_codec
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.legacy_records import LegacyRecordBatch, LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from trio_broker.protocol import compression
from trio_broker.protocol import legacy_records as lr
from trio_broker.protocol import records as rb
from trio_broker.protocol.record_walk import WalkBudget, summarize

LEGACY_CODECS = [0, 1, 2, 3]  # none, gzip, snappy, lz4 (zstd needs magic 2)


class _LZ4Xxh32:
    """``xxhash.xxh32(data)`` for kafka-python, from the lz4 C library's content checksum."""

    def __init__(self, data: bytes) -> None:
        frame = lz4.frame.compress(bytes(data), content_checksum=True)
        self._digest = frame[-4:][::-1]  # stored little-endian; xxhash digests big-endian

    def digest(self) -> bytes:
        return self._digest


@pytest.fixture(autouse=True)
def kafka_python_xxhash(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka_codec, "xxhash", types.SimpleNamespace(xxh32=_LZ4Xxh32))


def budget(size: int = 1 << 30) -> WalkBudget:
    return WalkBudget(size)


def kp_build(magic: int, codec: int, messages: Sequence[lr.MessageInput]) -> bytes:
    builder = LegacyRecordBatchBuilder(magic, codec, 1 << 24)
    for offset, timestamp, key, value in messages:
        assert builder.append(offset, timestamp, key, value) is not None
    return bytes(builder.build())


def kp_read(data: bytes) -> list[tuple[int, int | None, int, bytes | None, bytes | None]]:
    """(offset, timestamp, timestamp type, key, value) of every message kafka-python reads."""
    out = []
    records = MemoryRecords(data)
    while (batch := records.next_batch()) is not None:
        assert isinstance(batch, LegacyRecordBatch)
        assert batch.validate_crc()
        for record in batch:
            out.append((record.offset, record.timestamp, record.timestamp_type, record.key,
                        record.value))
    return out


def sample_messages(count: int = 7) -> list[tuple[int, int, bytes | None, bytes | None]]:
    return [(i, 1_700_000_000_000 + 17 * i, None if i == 2 else b"key-%d" % i,
             None if i == 3 else b"value-%d" % i * (i + 1)) for i in range(count)]


def mine(data: bytes) -> list[tuple[int, int, bytes | None, bytes | None]]:
    parsed = lr.parse_message_set(data, budget=budget())
    return [(m.offset, m.timestamp, m.key, m.value) for m in parsed.messages]


# ------------------------------------------------------------------------- parsing
@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_kafka_python_sets_parse_to_the_same_messages(magic: int, codec: int) -> None:
    data = kp_build(magic, codec, sample_messages())
    theirs = [(o, -1 if t is None else t, k, v) for o, t, _, k, v in kp_read(data)]
    parsed = lr.parse_message_set(data, budget=budget())
    assert [(m.offset, m.timestamp, m.key, m.value) for m in parsed.messages] == theirs
    assert parsed.magic == magic and parsed.codec == codec
    assert parsed.valid_bytes == len(data)
    if magic == 1:
        assert [m.timestamp for m in parsed.messages] == [t for _, t, _, _ in sample_messages()]
    else:
        assert {m.timestamp for m in parsed.messages} == {-1}


def test_magic_one_wrapper_offset_makes_inner_offsets_absolute() -> None:
    # Kafka's writers put the last inner message's absolute offset on the wrapper.
    data = lr.build_message_set([(40 + i, 5 + i, b"k", b"v") for i in range(3)], magic=1,
                                codec=compression.COMPRESSION_GZIP)
    assert struct.unpack_from(">q", data)[0] == 42
    assert [o for o, _, _, _ in mine(data)] == [40, 41, 42]
    assert [o for o, _, _, _, _ in kp_read(data)] == [40, 41, 42]


def test_log_append_time_wrapper_gives_inner_messages_its_timestamp() -> None:
    inner = b"".join(lr.encode_message(i, 1, 0, 5 + i, b"k", b"v") for i in range(3))
    data = lr.encode_message(2, 1, compression.COMPRESSION_GZIP | lr.TIMESTAMP_TYPE_BIT, 999,
                             None, gzip.compress(inner))
    assert [(o, t) for o, t, _, _ in mine(data)] == [(0, 999), (1, 999), (2, 999)]
    assert [(o, t, tt) for o, t, tt, _, _ in kp_read(data)] == [(0, 999, 1), (1, 999, 1),
                                                                (2, 999, 1)]
    create = lr.encode_message(2, 1, compression.COMPRESSION_GZIP, 999, None,
                               gzip.compress(inner))
    assert [t for _, t, _, _ in mine(create)] == [5, 6, 7]


def test_magic_zero_lz4_broken_header_checksum_is_accepted_and_magic_one_is_checked() -> None:
    data = kp_build(0, 3, sample_messages(3))
    value_at = lr.LOG_OVERHEAD + lr.RECORD_OVERHEAD_V0
    frame = data[value_at:]
    right = (lr.xxh32_short(frame[4:6]) >> 8) & 0xFF
    assert frame[6] != right  # kafka-python wrote the old, broken checksum ...
    assert len(mine(data)) == 3  # ... which Kafka (and we) ignore for magic 0
    good = kp_build(1, 3, sample_messages(3))
    hc_at = lr.LOG_OVERHEAD + lr.RECORD_OVERHEAD_V1 + 6
    bad = bytearray(good)
    bad[hc_at] ^= 0xFF
    with pytest.raises(lr.LegacyRecordError) as info:
        mine(refresh_crc(bytes(bad), 0))
    assert info.value.kind == "corrupt_message"


def refresh_crc(data: bytes, position: int) -> bytes:
    """The set with the CRC of the message at ``position`` recomputed (to get past it)."""
    (size,) = struct.unpack_from(">i", data, position + 8)
    start = position + lr.LOG_OVERHEAD
    out = bytearray(data)
    struct.pack_into(">I", out, start, zlib.crc32(out[start + 4:start + size]))
    return bytes(out)


def test_bad_crc_is_corrupt_message() -> None:
    data = bytearray(kp_build(1, 0, sample_messages(3)))
    data[-1] ^= 1
    with pytest.raises(lr.LegacyRecordError) as info:
        mine(bytes(data))
    assert info.value.kind == "corrupt_message"


def test_inner_crc_is_checked() -> None:
    inner = bytearray(lr.encode_message(0, 1, 0, 5, b"k", b"v"))
    inner[-1] ^= 1
    wrapper = lr.encode_message(0, 1, compression.COMPRESSION_GZIP, 5, None,
                                gzip.compress(bytes(inner)))
    with pytest.raises(lr.LegacyRecordError) as info:
        mine(wrapper)
    assert info.value.kind == "corrupt_message"


@pytest.mark.parametrize("magic_byte", [3, 5, 0x80, 0xFF])
def test_bad_magic_is_corrupt_message(magic_byte: int) -> None:
    data = bytearray(kp_build(1, 0, sample_messages(1)))
    data[16] = magic_byte
    with pytest.raises(lr.LegacyRecordError) as info:
        mine(refresh_crc(bytes(data), 0))  # the magic is refused, not the CRC
    assert info.value.kind == "corrupt_message"


def test_partial_trailing_message_is_ignored_as_kafka_does() -> None:
    same = [(i, 5, b"k", b"v") for i in range(3)]
    data = kp_build(1, 0, same)
    one = len(kp_build(1, 0, same[:1]))
    assert len(data) == 3 * one
    for cut in range(1, one + 1):
        parsed = lr.parse_message_set(data[:len(data) - cut], budget=budget())
        assert len(parsed.messages) == 2 and parsed.valid_bytes == 2 * one
    assert lr.parse_message_set(data[:11], budget=budget()).messages == ()
    # ... but a declared size below the overhead is corrupt even in a short tail
    short = data + struct.pack(">qi", 0, 13)
    with pytest.raises(lr.LegacyRecordError) as info:
        mine(short)
    assert info.value.kind == "corrupt_message"


def test_partial_trailing_inner_message_is_ignored() -> None:
    inner = b"".join(lr.encode_message(i, 1, 0, 5, b"k", b"v") for i in range(2))
    wrapper = lr.encode_message(1, 1, compression.COMPRESSION_GZIP, 5, None,
                                gzip.compress(inner + inner[:20]))
    assert [o for o, _, _, _ in mine(wrapper)] == [0, 1]


def wrap(inner: bytes, *, magic: int = 1, codec: int = compression.COMPRESSION_GZIP,
         offset: int = 0) -> bytes:
    payload = compression.compress(codec, inner) if codec < 5 else inner
    return lr.encode_message(offset, magic, codec, 5, None, payload)


@pytest.mark.parametrize("case", ["nested", "magic-mismatch", "zstd", "null-value", "empty",
                                  "wrapper-offset", "two-wrappers", "mixed-magic", "v2-batch"])
def test_invalid_record_cases(case: str) -> None:
    plain = lr.encode_message(0, 1, 0, 5, b"k", b"v")
    data = {
        "nested": lambda: wrap(wrap(plain)),
        "magic-mismatch": lambda: wrap(lr.encode_message(0, 0, 0, 0, b"k", b"v")),
        "zstd": lambda: wrap(plain, codec=compression.COMPRESSION_ZSTD),
        "null-value": lambda: lr.encode_message(0, 1, compression.COMPRESSION_GZIP, 5, None,
                                                None),
        "empty": lambda: wrap(b""),
        "wrapper-offset": lambda: wrap(plain + lr.encode_message(5, 1, 0, 5, b"k", b"v"),
                                       offset=3),
        "two-wrappers": lambda: wrap(plain) + wrap(plain),
        "mixed-magic": lambda: plain + lr.encode_message(1, 0, 0, 0, b"k", b"v"),
        "v2-batch": lambda: plain + rb.build_batch([(b"k", b"v", (), 5)]),
    }[case]()
    with pytest.raises(lr.LegacyRecordError) as info:
        mine(data)
    assert info.value.kind == "invalid_record", info.value


def test_fields_running_past_the_message_are_corrupt() -> None:
    body = b"\x01\x00" + struct.pack(">q", 5) + struct.pack(">i", 50) + b"k" + \
        struct.pack(">i", -1)
    message = struct.pack(">I", zlib.crc32(body)) + body
    data = struct.pack(">qi", 0, len(message)) + message
    with pytest.raises(lr.LegacyRecordError) as info:
        mine(data)
    assert info.value.kind == "corrupt_message"


def test_first_magic_dispatches_v2_sets_elsewhere() -> None:
    assert lr.first_magic(rb.build_batch([(b"k", b"v", (), 5)])) == 2
    assert lr.first_magic(kp_build(0, 1, sample_messages(1))) == 0
    assert lr.first_magic(kp_build(1, 0, sample_messages(1))) == 1
    assert lr.first_magic(b"\x00" * 16) is None


def test_message_max_bytes() -> None:
    data = kp_build(1, 0, sample_messages(1))
    with pytest.raises(lr.LegacyRecordError) as info:
        lr.parse_message_set(data, budget=budget(), max_size=len(data) - 1)
    assert info.value.kind == "message_too_large"
    assert len(lr.parse_message_set(data, budget=budget(), max_size=len(data)).messages) == 1


@pytest.mark.parametrize("codec", [1, 2, 3])
def test_decompression_budget_bounds_inflation(codec: int) -> None:
    inner = b"".join(lr.encode_message(i, 1, 0, 5, None, bytes(4000)) for i in range(50))
    data = wrap(inner, codec=codec)
    spent = budget(len(inner))
    assert len(lr.parse_message_set(data, budget=spent).messages) == 50
    assert spent.remaining == 0
    with pytest.raises(lr.LegacyRecordError) as info:
        lr.parse_message_set(data, budget=budget(len(inner) - 1))
    assert info.value.kind == "corrupt_message"
    with pytest.raises(lr.LegacyRecordError):
        lr.parse_message_set(data, budget=budget(), limit=len(inner) - 1)


# ---------------------------------------------------------------------- up-conversion
def kp_read_v2(batch: bytes) -> list[tuple[int, int, int, bytes | None, bytes | None]]:
    reader = DefaultRecordBatch(batch)
    assert reader.validate_crc()
    return [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value) for r in reader]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_up_converted_batch_passes_v2_checks_and_kafka_python(magic: int, codec: int) -> None:
    source = sample_messages()
    parsed = lr.parse_message_set(kp_build(magic, codec, source), budget=budget())
    batch = lr.up_convert(parsed, base_offset=1000)
    assert batch is not None
    header = rb.validate_batch(batch)
    assert header.compression == codec  # compression.type=producer keeps the source codec
    assert (header.producer_id, header.base_sequence, header.is_transactional) == (-1, -1, False)
    summary = summarize(batch, header, limit=1 << 24, budget=budget())
    expected_ts = [t if magic == 1 else -1 for _, t, _, _ in source]
    assert (summary.min_timestamp, summary.max_timestamp) == (min(expected_ts),
                                                              max(expected_ts))
    assert header.max_timestamp == max(expected_ts)
    assert kp_read_v2(batch) == [(1000 + i, expected_ts[i], 0, k, v)
                                 for i, (_, _, k, v) in enumerate(source)]


def test_up_convert_ignores_client_offsets_and_can_recompress() -> None:
    messages = [(77 + 3 * i, 10 + i, b"k", b"v%d" % i) for i in range(4)]
    parsed = lr.parse_message_set(lr.build_message_set(messages, magic=1), budget=budget())
    batch = lr.up_convert(parsed, base_offset=5, target_codec=compression.COMPRESSION_ZSTD)
    assert batch is not None
    assert rb.validate_batch(batch).compression == compression.COMPRESSION_ZSTD
    assert [(r.offset, r.timestamp) for r in rb.decode_records(batch)] == \
        [(5, 10), (6, 11), (7, 12), (8, 13)]


def test_up_convert_log_append_time() -> None:
    parsed = lr.parse_message_set(kp_build(1, 1, sample_messages(3)), budget=budget())
    batch = lr.up_convert(parsed, base_offset=0, log_append_time=123456)
    assert batch is not None
    header = rb.validate_batch(batch)
    assert header.log_append_time and header.max_timestamp == 123456
    assert {t for _, t, tt, _, _ in kp_read_v2(batch) if tt == 1} == {123456}
    assert len(kp_read_v2(batch)) == 3


def test_up_convert_validates_records_as_log_validator() -> None:
    parsed = lr.parse_message_set(kp_build(1, 0, sample_messages(4)), budget=budget())
    with pytest.raises(lr.LegacyRecordError) as info:
        lr.up_convert(parsed, compacted=True)  # message 2 has no key
    assert info.value.kind == "invalid_record"
    now = sample_messages()[0][1]
    assert lr.up_convert(parsed, now_ms=now, timestamp_before_max_ms=0,
                         timestamp_after_max_ms=100) is not None
    with pytest.raises(lr.LegacyRecordError) as info:
        lr.up_convert(parsed, now_ms=now, timestamp_before_max_ms=0, timestamp_after_max_ms=50)
    assert info.value.kind == "invalid_timestamp"
    producer_lat = lr.parse_message_set(
        lr.encode_message(0, 1, lr.TIMESTAMP_TYPE_BIT, 9, b"k", b"v"), budget=budget())
    with pytest.raises(lr.LegacyRecordError) as info:
        lr.up_convert(producer_lat, log_append_time=50)
    assert info.value.kind == "invalid_timestamp"
    assert lr.up_convert(lr.parse_message_set(b"", budget=budget())) is None


# --------------------------------------------------------------------- down-conversion
V2_RECORDS = [(b"k%d" % i if i != 1 else None, b"value %d" % i if i != 2 else None,
               [("h", b"x")], 1_700_000_000_000 + i) for i in range(6)]


@pytest.mark.parametrize("to_magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_down_converted_sets_parse_with_kafka_python(to_magic: int, codec: int) -> None:
    batch = rb.build_batch(V2_RECORDS, base_offset=300, attributes=codec)
    converted = lr.down_convert_batch(batch, to_magic, 300)
    theirs = kp_read(converted)
    expected = [(300 + i, t if to_magic else None, 0 if to_magic else None, k, v)
                for i, (k, v, _, t) in enumerate(V2_RECORDS)]
    assert theirs == expected
    parsed = lr.parse_message_set(converted, budget=budget())
    assert parsed.magic == to_magic and parsed.codec == codec
    if codec:
        assert struct.unpack_from(">q", converted)[0] == 305  # wrapper: the last offset
    if codec == 1:
        # inner offsets as Kafka writes them: relative for magic 1, absolute for magic 0
        inner = gzip.decompress(converted[lr.LOG_OVERHEAD + (lr.RECORD_OVERHEAD_V1 if to_magic
                                                             else lr.RECORD_OVERHEAD_V0):])
        assert struct.unpack_from(">q", inner)[0] == (0 if to_magic else 300)
    if codec == 3:
        # lz4: magic 0 carries the old header checksum (over the frame magic too), magic 1 the
        # standard one (XXH32 from the lz4 library here, not ours)
        frame = converted[lr.LOG_OVERHEAD + (lr.RECORD_OVERHEAD_V1 if to_magic
                                              else lr.RECORD_OVERHEAD_V0):]
        covered = frame[4:6] if to_magic else frame[:6]
        assert frame[6] == _LZ4Xxh32(covered).digest()[2]


def test_down_convert_log_append_time_and_first_offset() -> None:
    batch = bytearray(rb.build_batch(V2_RECORDS, base_offset=10))
    rb.assign_offset(batch, 0, 10, log_append_time=999)
    converted = lr.down_convert_batch(bytes(batch), 1, 13)
    # uncompressed: the records below the fetch offset are dropped
    assert kp_read(converted) == [(10 + i, 999, 1, k, v)
                                  for i, (k, v, _, _) in enumerate(V2_RECORDS) if i >= 3]
    gz = bytearray(rb.build_batch(V2_RECORDS, base_offset=10, attributes=1))
    rb.assign_offset(gz, 0, 10, log_append_time=999)
    converted = lr.down_convert_batch(bytes(gz), 1, 13)
    # compressed: kept whole (the client skips them); the wrapper carries LogAppendTime
    assert [(o, t, tt) for o, t, tt, _, _ in kp_read(converted)] == \
        [(10 + i, 999, 1) for i in range(6)]


def test_down_convert_control_zstd_and_transactional() -> None:
    control = rb.build_batch([(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", (), 5)],
                             producer_id=7, producer_epoch=0, base_sequence=0,
                             attributes=rb.TRANSACTIONAL_BIT | rb.CONTROL_BIT)
    assert lr.down_convert_batch(control, 1, 0) == b""
    txn = rb.build_batch(V2_RECORDS[:2], producer_id=7, producer_epoch=0, base_sequence=0,
                         attributes=rb.TRANSACTIONAL_BIT)
    assert len(kp_read(lr.down_convert_batch(txn, 1, 0))) == 2
    zstd = rb.build_batch(V2_RECORDS, attributes=compression.COMPRESSION_ZSTD)
    with pytest.raises(lr.LegacyRecordError) as info:
        lr.down_convert_batch(zstd, 1, 0)
    assert info.value.kind == "unsupported_compression_type"
    # streamed: the control batch disappears between the others
    stored = txn + control + rb.build_batch(V2_RECORDS[:1], base_offset=3)
    chunks = list(lr.down_convert(stored, 0, 0))
    assert len(chunks) == 2 and len(kp_read(b"".join(chunks))) == 3
    # nothing converts (only a marker, or nothing read): one overflow header, read as nothing
    for nothing in (control, b""):
        out = lr.down_converted_records(nothing, 1, 0)
        assert len(out) == lr.MIN_OVERFLOW_MESSAGE_LENGTH and kp_read(out) == []
    # a marker first does not duplicate the batch after it
    out = lr.down_converted_records(control + txn, 1, 0)
    assert [o for o, *_ in kp_read(out)] == [0, 1]


def test_down_converted_records_size_rule() -> None:
    # many small records: magic 1 is bigger than v2, so the answer is cut at the stored size
    # (after the first batch, which always goes whole) and the client ignores the partial tail
    small = [(b"k", b"v", (), 5)] * 50
    stored = rb.build_batch(small) + rb.build_batch(small, base_offset=50)
    first = lr.down_convert_batch(stored[:len(stored) // 2], 1, 0)
    out = lr.down_converted_records(stored, 1, 0)
    assert len(out) == max(len(stored), len(first))
    read = [o for o, *_ in kp_read(out)]
    assert 50 <= len(read) < 100 and read == list(range(len(read)))
    assert len(out) < len(b"".join(lr.down_convert(stored, 1, 0)))
    # a shortfall (gzip shrinks) is filled with overflow batches that read as nothing
    # (single-record batches whose headers are dropped shrink to magic 0)
    stored = b"".join(rb.build_batch([(b"k", b"v", [("h", bytes(100))], 5)], base_offset=i)
                      for i in range(5))
    out = lr.down_converted_records(stored, 0, 0)
    converted = b"".join(lr.down_convert(stored, 0, 0))
    assert len(out) == len(stored) > len(converted) and out.startswith(converted)
    assert [o for o, *_ in kp_read(out)] == list(range(5))
    assert lr.parse_message_set(out, budget=budget()).valid_bytes == len(converted)
    # zstd after the first batch ends the data (Kafka sends an overflow batch instead)
    noise = random.Random(1)
    stored = rb.build_batch(small[:5]) + rb.build_batch(
        [(b"k", noise.randbytes(200), (), 5)] * 20, base_offset=5, attributes=4)
    out = lr.down_converted_records(stored, 1, 0)
    assert len(out) == len(stored) and [o for o, *_ in kp_read(out)] == list(range(5))
    with pytest.raises(lr.LegacyRecordError):  # zstd first: the partition's error
        lr.down_converted_records(stored[len(rb.build_batch(small[:5])):], 1, 0)


def test_overflow_filler_reads_as_a_partial_message() -> None:
    for size in (0, 1, 11, 12, 13, 200, lr.MAX_READ_SIZE + 5):
        filler = lr.overflow_filler(size)
        assert len(filler) == size
        assert lr.parse_message_set(filler, budget=budget()).messages == ()
        assert kp_read(filler) == []


# ----------------------------------------------------------------------------- fuzzing
def valid_sets() -> Iterator[bytes]:
    saved = kafka_codec.xxhash
    kafka_codec.xxhash = types.SimpleNamespace(xxh32=_LZ4Xxh32)
    try:
        for magic in (0, 1):
            for codec in LEGACY_CODECS:
                yield kp_build(magic, codec, sample_messages(4))
    finally:
        kafka_codec.xxhash = saved


VALID = list(valid_sets())


def check_parse(data: bytes, size: int = 1 << 16) -> None:
    spent = budget(size)
    try:
        parsed = lr.parse_message_set(data, budget=spent, limit=1 << 16)
    except lr.LegacyRecordError:
        return
    assert spent.remaining >= 0  # never inflated past the budget
    try:
        batch = lr.up_convert(parsed)
    except lr.LegacyRecordError:
        return
    if batch is not None:
        rb.validate_batch(batch)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=300))
def test_fuzz_random_bytes(data: bytes) -> None:
    check_parse(data)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(VALID), st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)),
                                        min_size=1, max_size=6),
       st.booleans(), st.integers(0, 400))
def test_fuzz_mutated_sets(data: bytes, flips: list[tuple[int, int]], fix_crc: bool,
                           cut: int) -> None:
    mutated = bytearray(data)
    for at, byte in flips:
        mutated[at % len(mutated)] = byte
    if fix_crc and len(mutated) >= lr.LOG_OVERHEAD + lr.RECORD_OVERHEAD_V0:
        (size,) = struct.unpack_from(">i", mutated, 8)
        if lr.RECORD_OVERHEAD_V0 <= size <= len(mutated) - lr.LOG_OVERHEAD:
            mutated = bytearray(refresh_crc(bytes(mutated), 0))
    check_parse(bytes(mutated[:len(mutated) - cut] if cut < len(mutated) else mutated))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([1, 2, 3]), st.binary(max_size=400), st.integers(0, 1))
def test_fuzz_compressed_payloads(codec: int, inner: bytes, magic: int) -> None:
    # arbitrary bytes as a wrapper's (valid, CRC-correct) compressed value or its inflated set
    check_parse(lr.encode_message(0, magic, codec, 5, None, inner))
    check_parse(wrap(inner, magic=magic, codec=codec))


_maybe_bytes = st.one_of(st.none(), st.binary(max_size=40))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(_maybe_bytes, _maybe_bytes, st.integers(-1, 2**41)), min_size=1,
                max_size=12),
       st.sampled_from(LEGACY_CODECS), st.integers(0, 1), st.integers(0, 2**40))
def test_fuzz_round_trip_through_both_formats(
        records: list[tuple[bytes | None, bytes | None, int]], codec: int, to_magic: int,
        base: int) -> None:
    """v2 -> magic 0/1 -> (ours and kafka-python's readers agree) -> v2 keeps every record."""
    batch = rb.build_batch([(k, v, (), t) for k, v, t in records], base_offset=base,
                           attributes=codec)
    converted = lr.down_convert_batch(batch, to_magic, base)
    theirs = [(o, -1 if t is None else t, k, v) for o, t, _, k, v in kp_read(converted)]
    assert mine(converted) == theirs
    assert theirs == [(base + i, t if to_magic else -1, k, v)
                      for i, (k, v, t) in enumerate(records)]
    back = lr.up_convert(lr.parse_message_set(converted, budget=budget()), base_offset=base)
    assert back is not None
    assert [(r.offset, r.timestamp, r.key, r.value) for r in rb.decode_records(back)] == theirs
