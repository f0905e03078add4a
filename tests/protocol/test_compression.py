"""The record batch codecs (protocol/compression.py): Kafka's formats, the decompression cap,
and hypothesis fuzzing of every decoder with random and truncated input."""

from __future__ import annotations

import gzip
import struct
import time

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_broker.protocol import compression as cz
from trio_broker.protocol import records as rb

CODECS = [cz.COMPRESSION_GZIP, cz.COMPRESSION_SNAPPY, cz.COMPRESSION_LZ4, cz.COMPRESSION_ZSTD]
CAP = 1 << 20


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("size", [0, 1, 1000, 200_000])
def test_round_trip(codec: int, size: int) -> None:
    data = bytes((i * 7919 // 13) % 251 for i in range(size))
    assert bytes(cz.decompress(codec, cz.compress(codec, data), CAP)) == data


def test_snappy_xerial_and_raw_blocks() -> None:
    data = b"kafka " * 20_000  # several 32 KiB xerial chunks
    framed = cz.compress(cz.COMPRESSION_SNAPPY, data)
    # snappy-java's header: magic, version 1, compatible version 1
    assert framed[:16] == b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01"
    (first,) = struct.unpack_from(">i", framed, 16)
    assert cramjam.snappy.decompress_raw_len(framed[20:20 + first]) == cz.XERIAL_BLOCK_SIZE
    # a raw block (librdkafka) is told apart by the missing magic, as SnappyInputStream does
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert bytes(cz.decompress(cz.COMPRESSION_SNAPPY, raw, CAP)) == data
    # an empty xerial stream (header only) is empty records
    assert bytes(cz.decompress(cz.COMPRESSION_SNAPPY, framed[:16], CAP)) == b""


def test_lz4_is_written_as_kafka_reads_it_and_linked_blocks_are_refused() -> None:
    data = bytes(range(256)) * 1000
    frame = cz.compress(cz.COMPRESSION_LZ4, data)
    assert frame[:4] == b"\x04\x22\x4d\x18"
    assert frame[4] & 0x20  # FLG.blockIndependence: Kafka's reader requires it
    assert frame[4] >> 6 == 1  # version 01
    linked = cramjam.lz4.Compressor(block_linked=True)
    linked.compress(data)
    with pytest.raises(cz.CompressionError, match="dependent blocks"):
        cz.decompress(cz.COMPRESSION_LZ4, bytes(linked.finish()), CAP)


def test_gzip_concatenated_members_are_read() -> None:
    both = gzip.compress(b"one ") + gzip.compress(b"two")
    assert bytes(cz.decompress(cz.COMPRESSION_GZIP, both, CAP)) == b"one two"
    assert bytes(cz.decompress(cz.COMPRESSION_GZIP, both + b"\x00junk", CAP)) == b"one two"
    with pytest.raises(cz.CompressionError):
        cz.decompress(cz.COMPRESSION_GZIP, both + b"\x1f\x8b\x08junk", CAP)
    with pytest.raises(cz.CompressionError):
        cz.decompress(cz.COMPRESSION_GZIP, both[:-3], CAP)


@pytest.mark.parametrize("codec", CODECS)
def test_the_cap_bounds_a_bomb(codec: int) -> None:
    """64 MiB of zeros against a 1 MiB cap: refused as too large, quickly (the output buffer
    never grows past the cap) and without touching much memory; exactly the cap is fine."""
    bomb = cz.compress(codec, bytes(64 << 20))
    started = time.perf_counter()
    with pytest.raises(cz.CompressionError) as caught:
        cz.decompress(codec, bomb, CAP)
    assert caught.value.too_large
    assert time.perf_counter() - started < 2.0
    exact = cz.compress(codec, bytes(CAP))
    assert len(cz.decompress(codec, exact, CAP)) == CAP
    with pytest.raises(cz.CompressionError):
        cz.decompress(codec, cz.compress(codec, bytes(CAP + 1)), CAP)


def test_a_snappy_preamble_claiming_too_much_is_refused_before_allocating() -> None:
    lie = bytes([0x80, 0x80, 0x80, 0x80, 0x04]) + b"\x00"  # claims 1 GiB
    with pytest.raises(cz.CompressionError) as caught:
        cz.decompress(cz.COMPRESSION_SNAPPY, lie, CAP)
    assert caught.value.too_large


def test_the_output_buffer_grows_for_highly_compressible_records() -> None:
    # ratio far above the first 8x guess: the buffer grows 8x at a time up to the cap
    data = b"a" * 900_000 + b"b"
    for codec in (cz.COMPRESSION_LZ4, cz.COMPRESSION_ZSTD):
        assert bytes(cz.decompress(codec, cz.compress(codec, data), CAP)) == data


def test_the_limit_follows_message_max_bytes() -> None:
    assert cz.decompressed_limit(1 << 20) == cz.DEFAULT_DECOMPRESSED_LIMIT == 64 << 20
    assert cz.decompressed_limit(1000) == cz.MIN_DECOMPRESSED_LIMIT
    assert cz.decompressed_limit(10 << 20) == 640 << 20


@pytest.mark.parametrize("codec", CODECS)
def test_compressed_batches_decode_with_every_codec(codec: int) -> None:
    records = [(b"k%d" % i, b"v" * i, [("h", b"x")], 1000 + i % 5) for i in range(30)]
    batch = rb.build_batch(records, attributes=codec)
    header = rb.validate_batch(batch)
    assert header.compression == codec
    assert [(r.key, r.value, r.timestamp) for r in rb.decode_records(batch)] == [
        (k, v, t) for k, v, _, t in records]
    assert rb.records_timestamp_bounds(batch, 0, header) == (1000, 1004)
    with pytest.raises(rb.RecordBatchError) as caught:
        rb.decode_records(batch, max_decompressed=100)
    assert caught.value.kind == "corrupt_message"


# ----------------------------------------------------------------------------------- fuzzing
@given(st.sampled_from(CODECS), st.binary(max_size=2000))
@settings(max_examples=1500, deadline=None)
def test_random_bytes_never_crash_a_decoder(codec: int, data: bytes) -> None:
    try:
        out = cz.decompress(codec, data, 1 << 16)
    except cz.CompressionError:
        return
    assert len(out) <= 1 << 16


def _magic_prefixed(draw: st.DrawFn) -> tuple[int, bytes]:
    codec = draw(st.sampled_from(CODECS))
    prefix = {cz.COMPRESSION_GZIP: b"\x1f\x8b\x08\x00", cz.COMPRESSION_SNAPPY: b"\x82SNAPPY\x00",
              cz.COMPRESSION_LZ4: b"\x04\x22\x4d\x18\x60\x40\x82",
              cz.COMPRESSION_ZSTD: b"\x28\xb5\x2f\xfd"}[codec]
    return codec, prefix + draw(st.binary(max_size=500))


@given(st.data())
@settings(max_examples=1500, deadline=None)
def test_bytes_behind_a_valid_magic_never_crash_a_decoder(data: st.DataObject) -> None:
    codec, payload = data.draw(st.composite(_magic_prefixed)())
    try:
        out = cz.decompress(codec, payload, 1 << 16)
    except cz.CompressionError:
        return
    assert len(out) <= 1 << 16


@given(st.sampled_from(CODECS), st.binary(min_size=1, max_size=3000), st.data())
@settings(max_examples=800, deadline=None)
def test_truncated_and_flipped_valid_frames_never_crash_a_decoder(
        codec: int, plain: bytes, data: st.DataObject) -> None:
    frame = bytearray(cz.compress(codec, plain * 3))
    cut = data.draw(st.integers(0, len(frame)))
    flips = data.draw(st.lists(st.tuples(st.integers(0, len(frame) - 1), st.integers(0, 255)),
                               max_size=3))
    for at, value in flips:
        frame[at] = value
    for candidate in (bytes(frame[:cut]), bytes(frame)):
        try:
            out = cz.decompress(codec, candidate, 1 << 16)
        except cz.CompressionError:
            continue
        assert len(out) <= 1 << 16
    if not flips:
        assert bytes(cz.decompress(codec, bytes(frame), 1 << 16)) == plain * 3


@given(st.sampled_from(CODECS), st.binary(max_size=600), st.integers(0, 10_000))
@settings(max_examples=500, deadline=None)
def test_corrupt_compressed_batches_are_batch_errors(codec: int, junk: bytes,
                                                     cut: int) -> None:
    """Through the batch reader (what produce and the cleaner use): only RecordBatchError."""
    good = rb.build_batch([(b"k", b"value %d" % i, [], 5 + i) for i in range(5)],
                          attributes=codec)
    body = good[rb.HEADER_SIZE:]
    for payload in (junk, body[:cut % (len(body) + 1)], body[:cut % (len(body) + 1)] + junk):
        batch = bytearray(good[:rb.HEADER_SIZE] + payload)
        struct.pack_into(">i", batch, 8, len(batch) - rb.LOG_OVERHEAD)
        struct.pack_into(">I", batch, rb.CRC_OFFSET, rb.compute_crc(batch))
        header = rb.validate_batch(batch)
        try:
            rb.decode_records(bytes(batch))
        except rb.RecordBatchError as exc:
            assert exc.kind == "corrupt_message"
        try:
            rb.records_timestamp_bounds(batch, 0, header)
        except rb.RecordBatchError as exc:
            assert exc.kind == "corrupt_message"
