"""Record batch codecs, sans-IO: one decompress/compress pair per Kafka compression type.

Formats as Apache Kafka reads and writes them (v2 batches):

- gzip: RFC 1952 members (concatenated members read, trailing non-gzip bytes ignored, as
  ``GZIPInputStream`` does).
- snappy: the Java client and Kafka write xerial snappy-java framing (``b"\\x82SNAPPY\\x00"``,
  version and compatible-version int32s, then ``[int32 length][raw snappy block]`` chunks of
  32 KiB input); librdkafka and others may send one raw snappy block. As Kafka's
  ``SnappyInputStream``, the magic header decides; anything else is a raw block. Written back
  xerial-framed.
- lz4: the LZ4 frame format (Kafka's ``KafkaLZ4BlockOutputStream``). Kafka's reader refuses
  frames with linked blocks ("Dependent block stream is unsupported"), so the broker refuses
  them too (a Java consumer could not read them) and writes independent 64 KiB blocks.
- zstd: standard zstd frames (level 3 written, Kafka's default).

Input is untrusted: the decompressed size is capped by the caller's ``max_size`` (see
:func:`decompressed_limit`), so a decompression bomb costs at most that much memory; data past
the cap, malformed data and anything the codec library raises become
:class:`~trio_broker.protocol.records.RecordBatchError` ``corrupt_message`` (Kafka answers
CORRUPT_MESSAGE for a batch it cannot decompress). cramjam (Rust bindings) does the work.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import cramjam

COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4

CODEC_NAMES = {COMPRESSION_NONE: "none", COMPRESSION_GZIP: "gzip",
               COMPRESSION_SNAPPY: "snappy", COMPRESSION_LZ4: "lz4",
               COMPRESSION_ZSTD: "zstd"}

#: Records of one batch may decompress to this many times ``message.max.bytes`` ...
DECOMPRESSION_RATIO = 64
#: ... and never less than this (a small ``message.max.bytes`` still admits ordinary batches).
MIN_DECOMPRESSED_LIMIT = 16 << 20
#: The limit for the default ``message.max.bytes`` (1 MiB): 64 MiB.
DEFAULT_DECOMPRESSED_LIMIT = DECOMPRESSION_RATIO * (1 << 20)

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")
_I32 = struct.Struct(">i")
#: snappy-java's default block size (what Kafka's SnappyOutputStream writes).
XERIAL_BLOCK_SIZE = 32 * 1024
_LZ4_FRAME_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_BLOCK_INDEPENDENCE = 0x20
#: First output buffer for lz4/zstd, as a multiple of the compressed size; grown 8x on overflow.
_FIRST_GUESS_RATIO = 8
_FIRST_GUESS_MIN = 64 * 1024


class CompressionError(Exception):
    """Compressed records that cannot be decoded: malformed, unsupported, or larger than
    the cap. :mod:`.records` turns it into a ``corrupt_message`` batch error."""

    def __init__(self, message: str, *, too_large: bool = False) -> None:
        self.too_large = too_large
        super().__init__(message)


def decompressed_limit(max_message_bytes: int) -> int:
    """The cap on one batch's decompressed records for a log whose batches may be at most
    ``max_message_bytes`` (compressed): ``DECOMPRESSION_RATIO`` times that, at least
    ``MIN_DECOMPRESSED_LIMIT``."""
    return max(MIN_DECOMPRESSED_LIMIT, DECOMPRESSION_RATIO * max_message_bytes)


def decompress(codec: int, data: bytes | bytearray | memoryview, max_size: int
               ) -> bytes | memoryview:
    """The records bytes of a batch compressed with ``codec``, at most ``max_size`` bytes."""
    if codec == COMPRESSION_NONE:
        if len(data) > max_size:
            raise CompressionError(f"records exceed {max_size} bytes", too_large=True)
        return memoryview(data)
    if codec == COMPRESSION_GZIP:
        return _gunzip(bytes(data), max_size)
    if codec == COMPRESSION_SNAPPY:
        return memoryview(_unsnappy(memoryview(data), max_size))
    if codec == COMPRESSION_LZ4:
        view = memoryview(data)
        if len(view) >= 5 and view[:4] == _LZ4_FRAME_MAGIC \
                and not view[4] & _LZ4_BLOCK_INDEPENDENCE:
            raise CompressionError("lz4 frame with dependent blocks (Kafka reads only "
                                   "independent blocks)")
        return memoryview(_bounded(cramjam.lz4.decompress_into, "lz4", bytes(view), max_size))
    if codec == COMPRESSION_ZSTD:
        return memoryview(_bounded(cramjam.zstd.decompress_into, "zstd", bytes(data),
                                   max_size))
    raise CompressionError(f"unknown compression type {codec}")


def compress(codec: int, data: bytes | bytearray | memoryview) -> bytes:
    """``data`` compressed with ``codec`` as Kafka writes it."""
    if codec == COMPRESSION_NONE:
        return bytes(data)
    if codec == COMPRESSION_GZIP:
        # Kafka's default gzip level is zlib's 6; mtime 0 keeps the output deterministic.
        return gzip.compress(bytes(data), compresslevel=6, mtime=0)
    if codec == COMPRESSION_SNAPPY:
        view = memoryview(data)
        out = bytearray(_XERIAL_HEADER.pack(XERIAL_MAGIC, 1, 1))
        for start in range(0, len(view), XERIAL_BLOCK_SIZE):
            block = bytes(cramjam.snappy.compress_raw(bytes(view[start:start
                                                                 + XERIAL_BLOCK_SIZE])))
            out += _I32.pack(len(block))
            out += block
        return bytes(out)
    if codec == COMPRESSION_LZ4:
        # Kafka's KIP-390 default lz4 level is 9; independent blocks, no content checksum.
        compressor = cramjam.lz4.Compressor(level=9, content_checksum=False,
                                            block_linked=False)
        compressor.compress(bytes(data))
        return bytes(compressor.finish())
    if codec == COMPRESSION_ZSTD:
        return bytes(cramjam.zstd.compress(bytes(data), level=3))
    raise ValueError(f"unknown compression type {codec}")


def _too_large(codec: str, max_size: int) -> CompressionError:
    return CompressionError(f"{codec} records decompress past the limit of {max_size} bytes",
                            too_large=True)


def _gunzip(data: bytes, max_size: int) -> bytes:
    out = bytearray()
    rest = data
    try:
        while True:
            inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
            out += inflater.decompress(rest, max_size + 1 - len(out))
            if len(out) > max_size or inflater.unconsumed_tail:
                raise _too_large("gzip", max_size)
            if not inflater.eof:
                raise CompressionError("bad gzip data: truncated stream")
            rest = inflater.unused_data
            if not rest.startswith(b"\x1f\x8b"):
                # GZIPInputStream reads further members and ignores trailing bytes that are
                # not one (as zlib.decompress did here before)
                return bytes(out)
    except zlib.error as exc:
        raise CompressionError(f"bad gzip data: {exc}") from None


def _unsnappy(view: memoryview, max_size: int) -> bytearray:
    out = bytearray()
    for block in snappy_chunks(view):
        _raw_snappy(block, out, max_size)
    return out


def snappy_chunks(view: memoryview) -> Iterator[memoryview]:
    """The raw snappy blocks of snappy-compressed records: each chunk of xerial framing, or
    the one raw block (see the module's docstring)."""
    if len(view) >= _XERIAL_HEADER.size and view[:len(XERIAL_MAGIC)] == XERIAL_MAGIC:
        _, _version, compatible = _XERIAL_HEADER.unpack_from(view)
        if compatible < 1:
            raise CompressionError(f"xerial snappy compatible version {compatible}")
        at = _XERIAL_HEADER.size
        while at < len(view):
            if len(view) - at < _I32.size:
                raise CompressionError("truncated xerial snappy chunk length")
            (length,) = _I32.unpack_from(view, at)
            at += _I32.size
            if length < 0 or at + length > len(view):
                raise CompressionError("xerial snappy chunk runs past the data")
            yield view[at:at + length]
            at += length
        return
    yield view


def unsnappy_block(block: memoryview, max_size: int) -> bytearray:
    """One raw snappy block inflated, refused before allocation when its preamble declares
    more than ``max_size`` bytes."""
    out = bytearray()
    _raw_snappy(block, out, max_size)
    return out


def _raw_snappy(block: memoryview, out: bytearray, max_size: int) -> None:
    data = bytes(block)
    try:
        # The block's preamble declares its length: checked before anything is inflated.
        length = int(cramjam.snappy.decompress_raw_len(data))
    except Exception as exc:  # noqa: BLE001 - anything the codec raises is corrupt input
        raise CompressionError(f"bad snappy data: {exc}") from None
    if length < 0 or len(out) + length > max_size:
        raise _too_large("snappy", max_size)
    if length == 0:
        if data != b"\x00":
            raise CompressionError("bad snappy data: empty block with trailing bytes")
        return
    buffer = bytearray(length)
    try:
        written = int(cramjam.snappy.decompress_raw_into(data, buffer))
    except Exception as exc:  # noqa: BLE001
        raise CompressionError(f"bad snappy data: {exc}") from None
    if written != length:
        raise CompressionError("bad snappy data: length does not match its preamble")
    out += buffer


def _bounded(decompress_into: Callable[[bytes, bytearray], Any], codec: str, data: bytes, max_size: int) -> bytearray:
    """Decompress into a bounded buffer (cramjam stops when it is full), growing it 8x up to
    ``max_size``: the memory and work spent on a bomb are bounded by the cap."""
    size = min(max_size, max(_FIRST_GUESS_MIN, _FIRST_GUESS_RATIO * len(data)))
    while True:
        buffer = bytearray(size + 1)  # one spare byte: a full buffer means "more follows"
        try:
            written = int(decompress_into(data, buffer))
        except Exception as exc:  # noqa: BLE001 - anything the codec raises is corrupt input
            if "buffer" not in str(exc):
                raise CompressionError(f"bad {codec} data: {exc}") from None
            written = len(buffer)
        if written <= size:
            del buffer[written:]
            return buffer
        if size >= max_size:
            raise _too_large(codec, max_size)
        size = min(max_size, size * 8)
