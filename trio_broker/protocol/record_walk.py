"""Walk the records of a compressed v2 batch as they inflate, failing early (sans-IO).

Kafka's ``LogValidator`` never inflates a compressed batch in one go: it streams the records out
of the codec's input stream (``DefaultRecord.readFrom``) and stops at the first record that does
not parse. A batch of 128 MiB of zeros therefore fails at its first record, after a few
kilobytes of output. :func:`summarize_compressed` does the same: the codec's output is pulled a
piece (about :data:`PIECE` bytes) at a time, every record's fields are read against its declared
length, and the first inconsistency ends the walk.

Two bounds hold whatever the client sent:

* ``limit``: one batch's decompressed records (:func:`.compression.decompressed_limit`);
* a :class:`WalkBudget` shared by every batch of one request, so that many batches together
  cannot cost more than the request's budget (see ``docs/architecture.md``). With
  ``defer=True`` the budget is the caller's allowance for work *on the event loop*: when it runs
  out, :class:`Deferred` tells the caller to walk the batch again in a worker thread.

The codecs (zlib, python-zstandard, python-lz4, cramjam's snappy) release the GIL while they
inflate, so a walk in a worker thread leaves the event loop free except for the Python-level
record parsing, which Python's GIL switch interval interleaves with the loop.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Iterator

import attrs
import lz4.frame
import zstandard

from . import compression
from .records import (
    COMPRESSION_MASK,
    HEADER_SIZE,
    BatchHeader,
    RecordBatchError,
    records_timestamp_bounds,
    split_batches,
)

#: Output pulled from a codec per step.
PIECE = 64 * 1024
#: Consumed bytes kept at the front of the buffer before it is compacted.
_COMPACT_AT = 1 << 20


class Deferred(Exception):
    """The walk needs more than the caller's inline allowance: walk again in a worker thread."""


@attrs.define
class WalkBudget:
    """Decompressed bytes one request may still cost (shared by its batches)."""

    remaining: int
    #: True: running out raises :class:`Deferred`; False: the batch is CORRUPT_MESSAGE.
    defer: bool = False

    def spend(self, size: int) -> None:
        self.remaining -= size
        if self.remaining < 0:
            if self.defer:
                raise Deferred
            raise RecordBatchError(
                "corrupt_message",
                "the request's compressed records decompress past its budget")


@attrs.frozen
class RecordsSummary:
    """What the log needs from a batch's records: the timestamp bounds (base timestamp plus
    the smallest and largest delta) and whether a record has no key (compacted topics refuse
    it)."""

    min_timestamp: int
    max_timestamp: int
    #: None: not known (the batch was read for lengths and timestamps only).
    keyless: bool | None


def request_budget(limit: int, record_bytes: int) -> int:
    """The decompressed bytes one Produce request may cost: ``DECOMPRESSION_RATIO`` times the
    records it carries, and never less than one batch's ``limit`` (so a single batch keeps its
    own cap). A request of many small bombs is bounded by its own size, not by the number of
    batches times the per-batch cap."""
    return max(limit, compression.DECOMPRESSION_RATIO * record_bytes)


# -------------------------------------------------------------------------------- codecs
def _pieces(codec: int, data: bytes, limit: int) -> Iterator[bytes]:
    """The decompressed records, a piece of at most about :data:`PIECE` bytes at a time."""
    if codec == compression.COMPRESSION_GZIP:
        return _gzip_pieces(data)
    if codec == compression.COMPRESSION_ZSTD:
        return _zstd_pieces(data)
    if codec == compression.COMPRESSION_LZ4:
        return _lz4_pieces(data)
    if codec == compression.COMPRESSION_SNAPPY:
        return _snappy_pieces(data, limit)
    raise RecordBatchError("corrupt_message", f"unknown compression type {codec}")


def _gzip_pieces(data: bytes) -> Iterator[bytes]:
    rest = data
    try:
        while True:
            # Concatenated members are read; trailing bytes that are not a member are
            # ignored (GZIPInputStream), as in compression._gunzip.
            inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
            pending = rest
            while not inflater.eof:
                piece = inflater.decompress(pending, PIECE)
                pending = inflater.unconsumed_tail
                if piece:
                    yield piece
                elif not pending:
                    raise RecordBatchError("corrupt_message", "bad gzip data: truncated stream")
            rest = inflater.unused_data
            if not rest.startswith(b"\x1f\x8b"):
                return
    except zlib.error as exc:
        raise RecordBatchError("corrupt_message", f"bad gzip data: {exc}") from None


_local = threading.local()


def _zstd_pieces(data: bytes) -> Iterator[bytes]:
    # A decompressor per thread: building one costs more than a small batch's records, and
    # one may be reused but not shared between threads.
    decompressor = getattr(_local, "zstd", None)
    if decompressor is None:
        decompressor = _local.zstd = zstandard.ZstdDecompressor()
    reader = decompressor.stream_reader(data, read_across_frames=True)
    try:
        while piece := reader.read(PIECE):
            yield piece
    except zstandard.ZstdError as exc:
        raise RecordBatchError("corrupt_message", f"bad zstd data: {exc}") from None


def _lz4_pieces(data: bytes) -> Iterator[bytes]:
    if len(data) >= 5 and data[:4] == b"\x04\x22\x4d\x18" and not data[4] & 0x20:
        raise RecordBatchError("corrupt_message", "lz4 frame with dependent blocks (Kafka "
                                                  "reads only independent blocks)")
    inflater = lz4.frame.LZ4FrameDecompressor()
    pending = data
    try:
        while not inflater.eof:
            piece = inflater.decompress(pending, max_length=PIECE)
            pending = b""
            if piece:
                yield piece
            elif inflater.needs_input:
                raise RecordBatchError("corrupt_message", "bad lz4 data: truncated frame")
    except RuntimeError as exc:  # python-lz4 reports bad frames as RuntimeError
        raise RecordBatchError("corrupt_message", f"bad lz4 data: {exc}") from None


def _snappy_pieces(data: bytes, limit: int) -> Iterator[bytes]:
    # xerial framing: one 32 KiB-input chunk at a time; a raw block (at most about 21 times
    # its compressed size, which message.max.bytes bounds) in one piece.
    try:
        for chunk in compression.snappy_chunks(memoryview(data)):
            yield bytes(compression.unsnappy_block(chunk, limit))
    except compression.CompressionError as exc:
        raise RecordBatchError("corrupt_message", str(exc)) from None


# ------------------------------------------------------------------------------ the walk
class _Stream:
    """The decompressed records as a byte stream read from the front."""

    __slots__ = ("buffer", "limit", "pieces", "position", "budget", "total")

    def __init__(self, pieces: Iterator[bytes | memoryview], limit: int, budget: WalkBudget
                 ) -> None:
        self.pieces = pieces
        self.limit = limit
        self.budget = budget
        self.buffer = bytearray()
        self.position = 0
        self.total = 0

    def _pull(self) -> bytes | memoryview:
        piece = next(self.pieces, b"")
        if piece:
            self.total += len(piece)
            if self.total > self.limit:
                raise RecordBatchError(
                    "corrupt_message",
                    f"records decompress past the limit of {self.limit} bytes")
            self.budget.spend(len(piece))
        return piece

    def more(self) -> bool:
        """Append the next piece to the buffer; False at the end of the records."""
        piece = self._pull()
        if not piece:
            return False
        if self.position >= _COMPACT_AT:
            del self.buffer[:self.position]
            self.position = 0
        self.buffer += piece
        return True

    def byte(self) -> int:
        if self.position >= len(self.buffer) and not self.more():
            raise RecordBatchError("corrupt_message", "record runs past the batch")
        value = self.buffer[self.position]
        self.position += 1
        return value

    def varint(self) -> int:
        """A zigzag varint (Kafka's ``ByteUtils.readVarint``/``readVarlong``)."""
        raw = shift = 0
        while True:
            byte = self.byte()
            raw |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return (raw >> 1) ^ -(raw & 1)
            shift += 7
            if shift > 63:
                raise RecordBatchError("corrupt_message", "bad varint in record")

    def skip(self, size: int) -> None:
        """Skip ``size`` bytes (a key, a value), pulling pieces without keeping them."""
        available = len(self.buffer) - self.position
        if size <= available:
            self.position += size
            return
        size -= available
        self.buffer.clear()
        self.position = 0
        while size > 0:
            piece = self._pull()
            if not piece:
                raise RecordBatchError("corrupt_message", "record runs past the batch")
            if len(piece) > size:
                self.buffer += piece[size:]
            size -= len(piece)

    @property
    def consumed(self) -> int:
        """Bytes of the records read so far."""
        return self.total - (len(self.buffer) - self.position)

    def at_end(self) -> bool:
        return self.position >= len(self.buffer) and not self.more()


def summarize(batch: bytes | memoryview, header: BatchHeader, *, limit: int,
              budget: WalkBudget) -> RecordsSummary:
    """Walk every record of one batch (``batch`` holds exactly that batch) as Kafka's
    ``DefaultRecord.readFrom`` reads them, streaming a compressed batch out of its codec: each
    record's fields must fill its declared length exactly (CORRUPT_MESSAGE otherwise, at the
    first record that does not), the records must end where the declared count does
    (INVALID_RECORD when bytes remain), at most ``limit`` bytes inflate, and ``budget`` is
    charged for the records' bytes walked."""
    payload = memoryview(batch)[HEADER_SIZE:header.size]
    pieces: Iterator[bytes | memoryview]
    if header.attributes & COMPRESSION_MASK:
        pieces = _pieces(header.compression, bytes(payload), limit)
    else:
        pieces = iter((payload,))
    stream = _Stream(pieces, limit, budget)
    smallest = 1 << 63
    largest = -(1 << 63)
    keyless = False
    buffer = stream.buffer
    for _ in range(header.record_count):
        # A record whose bytes are all in the buffer (most of them) is read in place; one that
        # spans pieces, or a large one, field by field from the stream.
        at = stream.position
        if len(buffer) - at < 10:
            stream.more()
            buffer = stream.buffer
            at = stream.position
        size = len(buffer)
        if at < size and buffer[at] < 0x80:
            byte = buffer[at]
            length = (byte >> 1) ^ -(byte & 1)
            body = at + 1
        elif at + 1 < size and buffer[at + 1] < 0x80:
            raw = (buffer[at] & 0x7F) | (buffer[at + 1] << 7)
            length = (raw >> 1) ^ -(raw & 1)
            body = at + 2
        else:
            try:
                length, body = _varint(buffer, at, size)
            except IndexError:
                length = stream.varint()
                body = -1
        if length < 0:
            raise RecordBatchError("corrupt_message", f"invalid record size {length}")
        if body >= 0 and body + length <= size:
            delta, no_key = _record_in_place(buffer, body, body + length)
            stream.position = body + length
        else:
            if body >= 0:
                stream.position = body
            delta, no_key = _record_streamed(stream, length)
            buffer = stream.buffer
        if delta < smallest:
            smallest = delta
        if delta > largest:
            largest = delta
        if no_key:
            keyless = True
    if not stream.at_end():
        raise RecordBatchError("invalid_record",
                               "Incorrect declared batch size, records still remaining in file")
    base = header.base_timestamp
    return RecordsSummary(base + smallest, base + largest, keyless)


def _varint(data: bytearray, at: int, end: int) -> tuple[int, int]:
    """``(value, position after)`` of the zigzag varint at ``at``; IndexError when it runs
    past ``end`` (the caller reads on from the stream)."""
    byte = data[at]
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), at + 1
    raw = byte & 0x7F
    shift = 7
    while True:
        at += 1
        if at >= end:
            raise IndexError
        byte = data[at]
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), at + 1
        shift += 7
        if shift > 63:
            raise RecordBatchError("corrupt_message", "bad varint in record")


def _wrong_size(length: int, read: int) -> RecordBatchError:
    return RecordBatchError(
        "corrupt_message",
        f"invalid record size: expected to read {length} bytes in record payload, but instead "
        f"read {read}")


def _record_in_place(data: bytearray, at: int, end: int) -> tuple[int, bool]:
    """``(timestamp delta, keyless)`` of the record occupying ``data[at:end]``. One- and
    two-byte varints (the usual deltas, lengths and counts) are read inline: this runs for
    every record of every compressed batch."""
    start = at
    try:
        byte = data[at + 1]  # after the attributes byte
        if byte < 0x80:
            delta = (byte >> 1) ^ -(byte & 1)
            at += 2
        elif data[at + 2] < 0x80:
            raw = (byte & 0x7F) | (data[at + 2] << 7)
            delta = (raw >> 1) ^ -(raw & 1)
            at += 3
        else:
            delta, at = _varint(data, at + 1, end)
        if data[at] < 0x80:  # offset delta
            at += 1
        elif data[at + 1] < 0x80:
            at += 2
        else:
            _, at = _varint(data, at, end)
        byte = data[at]
        if byte < 0x80:
            key = (byte >> 1) ^ -(byte & 1)
            at += 1
        else:
            key, at = _varint(data, at, end)
        if key > 0:
            at += key
        byte = data[at]
        if byte < 0x80:
            value = (byte >> 1) ^ -(byte & 1)
            at += 1
        elif data[at + 1] < 0x80:
            raw = (byte & 0x7F) | (data[at + 1] << 7)
            value = (raw >> 1) ^ -(raw & 1)
            at += 2
        else:
            value, at = _varint(data, at, end)
        if value > 0:
            at += value
        byte = data[at]
        if byte < 0x80:
            headers = (byte >> 1) ^ -(byte & 1)
            at += 1
        else:
            headers, at = _varint(data, at, end)
        if headers < 0:
            raise RecordBatchError("corrupt_message", f"invalid negative header count {headers}")
        for _ in range(headers):
            if at >= end:
                break
            size, at = _varint(data, at, end)
            if size < 0:
                raise RecordBatchError("corrupt_message", "invalid negative header key size")
            at += size
            size, at = _varint(data, at, end)
            if size > 0:
                at += size
    except IndexError:
        raise _wrong_size(end - start, end - start + 1) from None
    if at != end:
        raise _wrong_size(end - start, at - start)
    return delta, key < 0


def _record_streamed(stream: _Stream, length: int) -> tuple[int, bool]:
    """As :func:`_record_in_place`, for a record that is not whole in the buffer."""
    start = stream.consumed
    stream.byte()  # attributes
    delta = stream.varint()
    stream.varint()  # offset delta
    key = stream.varint()
    if key > 0:
        stream.skip(key)
    value = stream.varint()
    if value > 0:
        stream.skip(value)
    headers = stream.varint()
    if headers < 0:
        raise RecordBatchError("corrupt_message", f"invalid negative header count {headers}")
    for _ in range(headers):
        if stream.consumed - start >= length:
            break
        size = stream.varint()
        if size < 0:
            raise RecordBatchError("corrupt_message", "invalid negative header key size")
        stream.skip(size)
        size = stream.varint()
        if size > 0:
            stream.skip(size)
    if stream.consumed - start != length:
        raise _wrong_size(length, stream.consumed - start)
    return delta, key < 0


@attrs.frozen
class CheckedRecords:
    """A ``records`` blob validated ahead of its append (in a worker thread, when it is heavy):
    its batches as :func:`.records.split_batches` returns them and each batch's
    :class:`RecordsSummary` by position, for the limits it was checked against (the log uses it
    only while its configuration still has them)."""

    batches: list[tuple[int, BatchHeader]]
    summaries: dict[int, RecordsSummary]
    max_size: int
    limit: int


def check_records(records: bytes, *, max_size: int, limit: int, budget: WalkBudget
                  ) -> CheckedRecords:
    """Everything :meth:`PartitionLog.append` checks of a client's records that grows with
    them (the batches' CRCs, every record), done ahead: a
    :class:`~.records.RecordBatchError` (or :class:`Deferred`) for what it refuses.

    With an inline allowance (``budget.defer``: on the event loop) a compressed batch is
    inflated whole, at most to what the allowance has left, and its records' lengths and
    timestamps are read as an uncompressed batch's are (the cheaper walk: most batches of
    real producers end here); one that inflates past it is walked again in a worker thread,
    streamed and field by field (:func:`summarize`)."""
    batches = split_batches(records, max_size=max_size)
    view = memoryview(records)
    summaries = {
        position: (_summarize_whole(view[position:position + header.size], header, limit,
                                    budget)
                   if budget.defer else
                   summarize(view[position:position + header.size], header, limit=limit,
                             budget=budget))
        for position, header in batches}
    return CheckedRecords(batches, summaries, max_size, limit)


def _summarize_whole(batch: memoryview, header: BatchHeader, limit: int, budget: WalkBudget
                     ) -> RecordsSummary:
    cap = min(limit, budget.remaining)
    payload: bytes | memoryview
    if header.attributes & COMPRESSION_MASK:
        try:
            payload = compression.decompress(header.compression, batch[HEADER_SIZE:header.size],
                                             cap)
        except compression.CompressionError as exc:
            if exc.too_large and cap < limit:
                raise Deferred from None
            raise RecordBatchError("corrupt_message", str(exc)) from None
    else:
        payload = batch[HEADER_SIZE:header.size]
    budget.spend(len(payload))
    smallest, largest = records_timestamp_bounds(batch, 0, header, limit, payload=payload)
    return RecordsSummary(smallest, largest, None)
