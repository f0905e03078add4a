"""Kafka v2 record batches, sans-IO: the 61-byte batch header, validation, offset assignment.

The broker keeps record batches as the client sent them. On the hot path only the fixed header is
decoded (``struct``), the CRC-32C is checked over the bytes from ``attributes`` to the end, and
the base offset (plus, for ``LogAppendTime`` topics, the max timestamp and the timestamp-type
attribute bit) is rewritten in place in a copy, with the CRC recomputed. Records are never
decoded record by record there.

:func:`build_batch` and :func:`decode_records` encode and decode records (every codec is
decoded, through :mod:`.compression`, with a cap on the decompressed size); they serve the group
coordinator (which writes and replays its own log), ListOffsets by timestamp, and the tests.

Layout of the header (all big-endian)::

    0  baseOffset i64        27 baseTimestamp i64
    8  batchLength i32       35 maxTimestamp i64
    12 partitionLeaderEpoch  43 producerId i64
    16 magic i8              51 producerEpoch i16
    17 crc u32               53 baseSequence i32
    21 attributes i16        57 recordCount i32
    23 lastOffsetDelta i32   61 records...
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import attrs
import crc32c

from . import compression

# The codec numbers live with the codecs; re-exported here, where batches are read.
from .compression import COMPRESSION_GZIP as COMPRESSION_GZIP
from .compression import COMPRESSION_LZ4 as COMPRESSION_LZ4
from .compression import COMPRESSION_NONE as COMPRESSION_NONE
from .compression import COMPRESSION_SNAPPY as COMPRESSION_SNAPPY
from .compression import COMPRESSION_ZSTD as COMPRESSION_ZSTD
from .compression import DEFAULT_DECOMPRESSED_LIMIT as DEFAULT_DECOMPRESSED_LIMIT

HEADER_SIZE = 61
#: batchLength counts the bytes after the length field itself.
LOG_OVERHEAD = 12
#: The smallest valid ``batchLength`` (a header with no records).
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
MAGIC = 2

PARTITION_LEADER_EPOCH_OFFSET = 12
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAX_TIMESTAMP_OFFSET = 35

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08  # 1 = LogAppendTime
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1
INT32_MAX = 2**31 - 1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET_AND_LENGTH = struct.Struct(">qi")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class RecordBatchError(Exception):
    """A batch Kafka would refuse. ``kind`` names the Kafka error: ``corrupt_message``
    (bad CRC, torn or undersized data), ``invalid_record`` (bad magic, inconsistent counts,
    control batches from clients) or ``message_too_large``."""

    def __init__(self, kind: str, message: str) -> None:
        self.kind = kind
        self.message = message
        super().__init__(f"{kind}: {message}")


class BatchHeader(NamedTuple):
    """The decoded fixed header of one v2 record batch.

    A named tuple rather than a frozen attrs class: one is built for every produced batch, and
    a frozen class's ``__init__`` sets its 13 fields one ``object.__setattr__`` at a time
    (~0.9 µs against ~0.15 µs for a tuple made straight from the ``struct`` unpack).
    """

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes of the whole batch, header included."""
        return self.batch_length + LOG_OVERHEAD

    def assigned(self, base_offset: int, max_timestamp: int, leader_epoch: int) -> BatchHeader:
        """This header with the offset, max timestamp and leader epoch the log gave the batch
        (``attrs.evolve`` looks every field up by name: several times slower per append)."""
        return _new_header(BatchHeader, (
            base_offset, self.batch_length, leader_epoch, self.magic, self.crc,
            self.attributes, self.last_offset_delta, self.base_timestamp, max_timestamp,
            self.producer_id, self.producer_epoch, self.base_sequence, self.record_count))

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_BIT)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record; sequences wrap at INT32_MAX as in Kafka."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        last = self.base_sequence + self.last_offset_delta
        return last - INT32_MAX - 1 if last > INT32_MAX else last


#: ``tuple.__new__``: a header straight from the unpacked tuple (``BatchHeader(*values)`` goes
#: through the named tuple's Python-level ``__new__``).
_new_header: Any = tuple.__new__


def decode_header(data: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Decode the 61-byte header at ``position`` (no validation beyond having the bytes)."""
    if len(data) - position < HEADER_SIZE:
        raise RecordBatchError("corrupt_message", "truncated record batch header")
    return _new_header(BatchHeader, _HEADER.unpack_from(data, position))


def peek_offset_and_length(data: bytes | bytearray | memoryview, position: int = 0
                           ) -> tuple[int, int]:
    """``(baseOffset, batchLength)`` at ``position``: the 12 bytes needed to walk a log."""
    base, length = _OFFSET_AND_LENGTH.unpack_from(data, position)
    return int(base), int(length)


def compute_crc(batch: bytes | bytearray | memoryview) -> int:
    """CRC-32C of a batch as stored in its header (from ``attributes`` to the end)."""
    return int(crc32c.crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]))


def iter_batches(data: bytes | bytearray | memoryview) -> Iterator[tuple[int, int]]:
    """``(position, size)`` of each complete batch in ``data``; stops at a torn tail.

    Only the 12-byte offset/length prefix is read, so this is cheap enough for fetch trimming.
    """
    position = 0
    end = len(data)
    while end - position >= LOG_OVERHEAD:
        _, length = _OFFSET_AND_LENGTH.unpack_from(data, position)
        size = length + LOG_OVERHEAD
        if length < MIN_BATCH_LENGTH or position + size > end:
            return
        yield position, size
        position += size


def validate_batch(batch: bytes | bytearray | memoryview, *, max_size: int | None = None,
                   from_client: bool = True) -> BatchHeader:
    """Check one complete batch as Kafka does at batch level; return its header.

    Checks: size against the header's length field and ``max_size``, magic 2, CRC-32C, record
    count against ``lastOffsetDelta`` (for stored batches: at most the offset range, since
    compaction removes records), and (for client batches) that it is not a control batch.
    """
    size = len(batch)
    if size < HEADER_SIZE:
        raise RecordBatchError("corrupt_message",
                               f"record batch of {size} bytes is smaller than the header")
    # Runs for every produced batch: the header's properties (size, is_control,
    # has_producer_id), decode_header and compute_crc are written out here.
    header: BatchHeader = _new_header(BatchHeader, _HEADER.unpack_from(batch, 0))
    if header.batch_length < MIN_BATCH_LENGTH:
        raise RecordBatchError("corrupt_message",
                               f"record batch length {header.batch_length} is below the minimum")
    if header.batch_length + LOG_OVERHEAD != size:
        raise RecordBatchError("corrupt_message",
                               f"record batch length {header.size} does not match {size} bytes")
    if max_size is not None and size > max_size:
        raise RecordBatchError("message_too_large",
                               f"record batch of {size} bytes exceeds the limit of {max_size}")
    if header.magic != MAGIC:
        raise RecordBatchError("invalid_record",
                               f"magic {header.magic} is not supported (only v2 batches)")
    crc = crc32c.crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:])
    if crc != header.crc:
        raise RecordBatchError("corrupt_message",
                               f"record batch CRC {header.crc} does not match computed {crc}")
    if from_client and (header.record_count <= 0
                        or header.last_offset_delta != header.record_count - 1):
        raise RecordBatchError(
            "invalid_record",
            f"inconsistent batch: {header.record_count} records, lastOffsetDelta "
            f"{header.last_offset_delta}")
    if not from_client and not 0 <= header.record_count <= header.last_offset_delta + 1:
        # Compaction (the log cleaner) leaves batches with fewer records than their offset
        # range, or none at all (Kafka keeps a producer's last batch as an empty header).
        raise RecordBatchError(
            "invalid_record",
            f"inconsistent batch: {header.record_count} records, lastOffsetDelta "
            f"{header.last_offset_delta}")
    control = header.attributes & CONTROL_BIT
    if from_client and control:
        raise RecordBatchError("invalid_record", "clients may not send control batches")
    if header.producer_id >= 0 and header.base_sequence < 0 and not control:
        # A batch with a producer id needs a sequence; Kafka's LogValidator rejects one without.
        raise RecordBatchError("invalid_record", "idempotent batch without a base sequence")
    return header


def split_batches(data: bytes | bytearray | memoryview, *, max_size: int | None = None,
                  from_client: bool = True) -> list[tuple[int, BatchHeader]]:
    """Validate every batch of a ``records`` blob; ``(position, header)`` of each.

    Trailing bytes that do not form a whole batch are an error (CORRUPT_MESSAGE): a producer
    never sends a partial batch, so such bytes are corruption, never a torn write we may drop.
    """
    end = len(data)
    if end == 0:
        raise RecordBatchError("corrupt_message", "no record batch in the request")
    if end >= HEADER_SIZE:
        _, length = _OFFSET_AND_LENGTH.unpack_from(data, 0)
        if length + LOG_OVERHEAD == end and length >= MIN_BATCH_LENGTH:
            # Exactly one batch (every Produce v3+): validated in place, without views.
            return [(0, validate_batch(data, max_size=max_size, from_client=from_client))]
    view = memoryview(data)
    batches: list[tuple[int, BatchHeader]] = []
    position = 0
    while position < end:
        if end - position < HEADER_SIZE:
            raise RecordBatchError("corrupt_message", "truncated record batch")
        _, length = _OFFSET_AND_LENGTH.unpack_from(view, position)
        size = length + LOG_OVERHEAD
        if length < MIN_BATCH_LENGTH or position + size > end:
            if max_size is not None and size > max_size and length >= MIN_BATCH_LENGTH:
                raise RecordBatchError(
                    "message_too_large",
                    f"record batch of {size} bytes exceeds the limit of {max_size}")
            raise RecordBatchError("corrupt_message", "truncated record batch")
        header = validate_batch(view[position:position + size], max_size=max_size,
                                from_client=from_client)
        batches.append((position, header))
        position += size
    return batches


def assign_offset(batch: bytearray, position: int, base_offset: int,
                  log_append_time: int | None = None, leader_epoch: int | None = None) -> None:
    """Rewrite, in place, the base offset of the batch at ``position`` (and, given
    ``leader_epoch``, its partition leader epoch, as Kafka's LogValidator stamps it).

    With ``log_append_time`` (epoch milliseconds) the max timestamp and the timestamp-type bit
    are set too, and the CRC (which covers them) is recomputed; the base offset and the leader
    epoch lie outside the CRC, so a CreateTime batch needs no new CRC.
    """
    _I64.pack_into(batch, position, base_offset)
    if leader_epoch is not None:
        _I32.pack_into(batch, position + PARTITION_LEADER_EPOCH_OFFSET, leader_epoch)
    if log_append_time is not None:
        (attributes,) = _I16.unpack_from(batch, position + ATTRIBUTES_OFFSET)
        _I16.pack_into(batch, position + ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_BIT)
        _I64.pack_into(batch, position + MAX_TIMESTAMP_OFFSET, log_append_time)
        (_, length) = _OFFSET_AND_LENGTH.unpack_from(batch, position)
        end = position + length + LOG_OVERHEAD
        crc = crc32c.crc32c(memoryview(batch)[position + ATTRIBUTES_OFFSET:end])
        _U32.pack_into(batch, position + CRC_OFFSET, crc)


def records_max_timestamp(batch: bytes | bytearray | memoryview, position: int,
                          header: BatchHeader,
                          max_decompressed: int = DEFAULT_DECOMPRESSED_LIMIT) -> int:
    """The largest record timestamp of the batch at ``position`` (Kafka's LogValidator derives
    it from the records rather than trusting the header)."""
    return records_timestamp_bounds(batch, position, header, max_decompressed)[1]


def records_timestamp_bounds(batch: bytes | bytearray | memoryview, position: int,
                             header: BatchHeader,
                             max_decompressed: int = DEFAULT_DECOMPRESSED_LIMIT,
                             payload: bytes | memoryview | None = None) -> tuple[int, int]:
    """``(smallest, largest)`` record timestamp of the batch at ``position``; compressed
    records are decompressed first (at most ``max_decompressed`` bytes), unless the caller
    already holds them decompressed (``payload``).

    Only each record's length and timestamp delta are read (varints); the rest is skipped.
    Records running past the batch are CORRUPT_MESSAGE, bytes left after the declared count
    INVALID_RECORD, as in Kafka.
    """
    if header.compression == COMPRESSION_NONE:
        data: bytes | bytearray | memoryview = batch
        at = position + HEADER_SIZE
        end = position + header.size
    else:
        data = payload if payload is not None else records_payload(
            memoryview(batch)[position:position + header.size], header, max_decompressed)
        at, end = 0, len(data)
    largest = -(1 << 63)
    smallest = 1 << 63
    try:
        for _ in range(header.record_count):
            # record length, then (after the attributes byte) the timestamp delta: zigzag
            # varints, one- and two-byte ones (records under 8 KiB, deltas under 8 s) inline
            byte = data[at]
            if byte < 0x80:
                length = (byte >> 1) ^ -(byte & 1)
                at += 1
            elif data[at + 1] < 0x80:
                raw = (byte & 0x7F) | (data[at + 1] << 7)
                length = (raw >> 1) ^ -(raw & 1)
                at += 2
            else:
                length, at = _read_varint_at(data, at, end)
            after = at + length
            if length < 2 or after > end:
                raise RecordBatchError("corrupt_message", "record runs past the batch")
            byte = data[at + 1]
            if byte < 0x80:
                delta = (byte >> 1) ^ -(byte & 1)
            elif at + 2 < after and data[at + 2] < 0x80:
                raw = (byte & 0x7F) | (data[at + 2] << 7)
                delta = (raw >> 1) ^ -(raw & 1)
            else:
                delta, _ = _read_varint_at(data, at + 1, after)
            if delta > largest:
                largest = delta
            if delta < smallest:
                smallest = delta
            at = after
    except IndexError:
        raise RecordBatchError("corrupt_message", "record runs past the batch") from None
    if at != end:
        # Kafka's RecordIterator: bytes after the declared count of records mean the count is
        # wrong (a batch claiming 1 record but carrying 2 would take one offset for both).
        raise RecordBatchError("invalid_record",
                               "Incorrect declared batch size, records still remaining in file")
    return header.base_timestamp + smallest, header.base_timestamp + largest


def _read_varint_at(data: bytes | bytearray | memoryview, at: int, end: int) -> tuple[int, int]:
    raw = shift = 0
    while True:
        if at >= end or shift > 63:
            raise RecordBatchError("corrupt_message", "bad varint in record")
        byte = data[at]
        at += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), at
        shift += 7


def set_max_timestamp(batch: bytearray, position: int, max_timestamp: int) -> None:
    """Rewrite the max timestamp of the batch at ``position`` and recompute its CRC."""
    _I64.pack_into(batch, position + MAX_TIMESTAMP_OFFSET, max_timestamp)
    (_, length) = _OFFSET_AND_LENGTH.unpack_from(batch, position)
    end = position + length + LOG_OVERHEAD
    crc = crc32c.crc32c(memoryview(batch)[position + ATTRIBUTES_OFFSET:end])
    _U32.pack_into(batch, position + CRC_OFFSET, crc)


# ------------------------------------------------------------------ record encoding (cold path)
def _zigzag(value: int) -> int:
    return (value << 1) ^ (value >> 63)


def write_varint(out: bytearray, value: int) -> None:
    """Append ``value`` as a zigzag varint (record fields; the cleaner's rewritten records)."""
    value = _zigzag(value) & 0xFFFFFFFFFFFFFFFF
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _read_varint(data: bytes | memoryview, position: int) -> tuple[int, int]:
    shift = 0
    raw = 0
    while True:
        if position >= len(data) or shift > 63:
            raise RecordBatchError("corrupt_message", "bad varint in record")
        byte = data[position]
        position += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
    return (raw >> 1) ^ -(raw & 1), position


def _write_bytes(out: bytearray, value: bytes | None) -> None:
    if value is None:
        write_varint(out, -1)
    else:
        write_varint(out, len(value))
        out += value


def _read_bytes(data: bytes | memoryview, position: int) -> tuple[bytes | None, int]:
    length, position = _read_varint(data, position)
    if length < 0:
        return None, position
    if position + length > len(data):
        raise RecordBatchError("corrupt_message", "record field runs past the batch")
    return bytes(data[position:position + length]), position + length


@attrs.frozen
class Record:
    """One decoded record (cold path only)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


RecordInput = tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes | None]], int]


def build_batch(records: Sequence[RecordInput], *, base_offset: int = 0,
                producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
                base_sequence: int = NO_SEQUENCE, partition_leader_epoch: int = -1,
                attributes: int = 0) -> bytes:
    """Encode a v2 batch of ``(key, value, headers, timestamp_ms)`` records.

    ``attributes`` may carry the transactional and control bits and a codec (the records are
    then compressed as Kafka writes them). The CRC is computed.
    """
    if not records:
        raise ValueError("a record batch needs at least one record")
    base_timestamp = records[0][3]
    max_timestamp = max(r[3] for r in records)
    body = bytearray()
    for delta, (key, value, headers, timestamp) in enumerate(records):
        rec = bytearray()
        rec.append(0)  # record attributes, unused
        write_varint(rec, timestamp - base_timestamp)
        write_varint(rec, delta)
        _write_bytes(rec, key)
        _write_bytes(rec, value)
        write_varint(rec, len(headers))
        for header_key, header_value in headers:
            _write_bytes(rec, header_key.encode("utf-8"))
            _write_bytes(rec, header_value)
        write_varint(body, len(rec))
        body += rec
    codec = attributes & COMPRESSION_MASK
    batch = bytearray(HEADER_SIZE) + (compression.compress(codec, body) if codec else body)
    _HEADER.pack_into(
        batch, 0, base_offset, len(batch) - LOG_OVERHEAD, partition_leader_epoch, MAGIC, 0,
        attributes, len(records) - 1, base_timestamp, max_timestamp, producer_id,
        producer_epoch, base_sequence, len(records),
    )
    _U32.pack_into(batch, CRC_OFFSET, compute_crc(batch))
    return bytes(batch)


def records_payload(batch: bytes | bytearray | memoryview, header: BatchHeader,
                    max_decompressed: int = DEFAULT_DECOMPRESSED_LIMIT
                    ) -> bytes | memoryview:
    """The records bytes of one batch, decompressed (at most ``max_decompressed`` bytes; more
    is ``corrupt_message``, as is anything the codec cannot decode)."""
    payload = memoryview(batch)[HEADER_SIZE:header.size]
    if header.compression == COMPRESSION_NONE:
        return payload
    try:
        return compression.decompress(header.compression, payload, max_decompressed)
    except compression.CompressionError as exc:
        raise RecordBatchError("corrupt_message", str(exc)) from None


def decode_records(batch: bytes | memoryview,
                   max_decompressed: int = DEFAULT_DECOMPRESSED_LIMIT) -> list[Record]:
    """Decode every record of one batch (any codec). Cold paths only.

    Record timestamps follow Kafka: the batch's max timestamp for LogAppendTime batches,
    otherwise base timestamp + delta.
    """
    header = decode_header(batch)
    data = records_payload(batch, header, max_decompressed)
    records: list[Record] = []
    position = 0
    for _ in range(header.record_count):
        length, position = _read_varint(data, position)
        end = position + length
        if length < 0 or end > len(data):
            raise RecordBatchError("corrupt_message", "record runs past the batch")
        position += 1  # attributes
        ts_delta, position = _read_varint(data, position)
        offset_delta, position = _read_varint(data, position)
        key, position = _read_bytes(data, position)
        value, position = _read_bytes(data, position)
        count, position = _read_varint(data, position)
        headers: list[tuple[str, bytes | None]] = []
        for _h in range(max(count, 0)):
            raw_key, position = _read_bytes(data, position)
            header_value, position = _read_bytes(data, position)
            headers.append(((raw_key or b"").decode("utf-8", "replace"), header_value))
        if position != end:
            raise RecordBatchError("corrupt_message", "record length does not match its fields")
        timestamp = (header.max_timestamp if header.log_append_time
                     else header.base_timestamp + ts_delta)
        records.append(Record(header.base_offset + offset_delta, timestamp, key, value,
                              tuple(headers)))
    return records
