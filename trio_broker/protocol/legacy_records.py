"""Kafka's message formats v0 and v1 (magic 0 and 1), sans-IO: parse, up-convert, down-convert.

Old clients (Produce v0-v2, Fetch v0-v3) speak *message sets*: a sequence of
``offset i64, size i32, message`` entries, where a message is::

    crc u32 | magic i8 | attributes i8 | [timestamp i64: magic 1] | key bytes | value bytes

``bytes`` is an i32 length (negative: null) and the data; the CRC is plain CRC-32 over magic to
the end. Attributes hold the codec (bits 0-2) and, for magic 1, the timestamp type (bit 3). A
compressed message (a *wrapper*) carries a null key and, as its value, the compressed inner
message set; Kafka allows one level of nesting only. Inner offsets are absolute for magic 0;
for magic 1 they are relative and the wrapper's offset is the absolute offset of the last inner
message.

The broker stores only v2 batches (:mod:`.records`), so:

* :func:`parse_message_set` reads a client's message set as Kafka 3.9's
  ``ByteBufferLogInputStream``/``AbstractLegacyRecordBatch``/``LogValidator`` do, with every length
  checked before use and inflation bounded by a :class:`~.record_walk.WalkBudget`;
* :func:`up_convert` builds the one v2 batch Kafka's ``LogValidator`` appends for it;
* :func:`down_convert` / :func:`down_converted_records` turn stored v2 batches into a message
  set an old fetcher reads (``RecordsUtil.downConvert``, ``LazyDownConversionRecords``).

Every refusal is a :class:`LegacyRecordError` (a :class:`~.records.RecordBatchError`: the produce
path maps its ``kind`` to the Kafka error as it does for v2 batches).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Sequence

import attrs

from . import compression
from . import records as rb
from .record_walk import Deferred, WalkBudget

MAGIC_V0 = 0
MAGIC_V1 = 1
#: offset i64 + size i32 before every message.
LOG_OVERHEAD = 12
#: LOG_OVERHEAD + crc + magic: the bytes needed to read an entry's magic.
HEADER_SIZE_UP_TO_MAGIC = 17
#: crc 4 + magic 1 + attributes 1 + key length 4 + value length 4.
RECORD_OVERHEAD_V0 = 14
#: ... plus the timestamp.
RECORD_OVERHEAD_V1 = 22
CODEC_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
NO_TIMESTAMP = -1

_OFFSET_SIZE = struct.Struct(">qi")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_HEAD_V0 = struct.Struct(">Ibb")
_HEAD_V1 = struct.Struct(">Ibbq")

# LZ4 frame header: magic, FLG, BD, [content size], HC (see _lz4_fix_header).
_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_CONTENT_SIZE_FLAG = 0x08


class LegacyRecordError(rb.RecordBatchError):
    """A message set Kafka would refuse; ``kind`` names the Kafka error (``corrupt_message``,
    ``invalid_record``, ``invalid_timestamp``, ``message_too_large``,
    ``unsupported_compression_type``)."""


@attrs.frozen
class LegacyMessage:
    """One message of a parsed message set (an inner one for a compressed set).

    ``offset`` is the absolute offset Kafka's reader gives it (the client's offsets: the log
    assigns its own on append). ``timestamp`` is the wrapper's for a LogAppendTime wrapper, as
    in Kafka's ``LegacyRecord`` with a wrapper timestamp, and -1 for magic 0.
    ``log_append_time`` is the timestamp type of the batch holding it (the wrapper, or the
    message itself when uncompressed): ``LogValidator`` judges timestamps by it."""

    offset: int
    magic: int
    timestamp: int
    log_append_time: bool
    key: bytes | None
    value: bytes | None


@attrs.frozen
class MessageSet:
    """A client's message set as Kafka reads it: the complete messages (a partial trailing
    message is dropped, as Kafka drops it), their common magic, and the codec of the wrapper
    (0 when uncompressed). ``valid_bytes`` counts the bytes of the complete entries."""

    magic: int
    codec: int
    messages: tuple[LegacyMessage, ...]
    valid_bytes: int


# ------------------------------------------------------------------------------ reading
def _corrupt(message: str) -> LegacyRecordError:
    return LegacyRecordError("corrupt_message", message)


def _invalid(message: str) -> LegacyRecordError:
    return LegacyRecordError("invalid_record", message)


@attrs.frozen
class _Entry:
    """One ``offset, size, message`` entry, CRC-checked, fields decoded."""

    offset: int
    magic: int
    attributes: int
    timestamp: int
    key: bytes | None
    value: bytes | None

    @property
    def codec(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def log_append_time(self) -> bool:
        return self.magic > MAGIC_V0 and bool(self.attributes & TIMESTAMP_TYPE_BIT)


def _read_message(data: bytes | memoryview, offset: int, start: int, size: int) -> _Entry:
    """The message of ``size`` bytes at ``start`` (after its offset/size prefix): Kafka's
    ``LegacyRecord.ensureValid`` (size, then CRC) and its field reads, each length checked
    against the message's bytes (Kafka would fail on an out-of-bounds slice)."""
    if size < RECORD_OVERHEAD_V0:
        raise _corrupt(f"Record is corrupt (crc could not be retrieved as the record is too "
                       f"small, size = {size})")
    end = start + size
    stored_crc = struct.unpack_from(">I", data, start)[0]
    computed = zlib.crc32(memoryview(data)[start + 4:end])
    if stored_crc != computed:
        raise _corrupt(f"Record is corrupt (stored crc = {stored_crc}, computed crc = "
                       f"{computed})")
    magic = data[start + 4]
    if magic == MAGIC_V0:
        _, _, attributes = _HEAD_V0.unpack_from(data, start)
        timestamp = NO_TIMESTAMP
        at = start + 6
    elif magic == MAGIC_V1:
        if size < RECORD_OVERHEAD_V1:
            raise _corrupt(f"magic 1 message of {size} bytes is below its overhead")
        _, _, attributes, timestamp = _HEAD_V1.unpack_from(data, start)
        at = start + 14
    else:
        # Inside a wrapper a v2 magic (or any other) is not a legacy message.
        raise _invalid(f"Record magic {magic} is not a legacy message's")
    key, at = _read_bytes(data, at, end)
    value, at = _read_bytes(data, at, end)
    # Bytes after the value are covered by the CRC and ignored, as Kafka ignores them.
    return _Entry(offset, magic, attributes, timestamp, key, value)


def _read_bytes(data: bytes | memoryview, at: int, end: int) -> tuple[bytes | None, int]:
    if end - at < 4:
        raise _corrupt("message field length runs past the message")
    (length,) = _I32.unpack_from(data, at)
    at += 4
    if length < 0:  # Kafka's sliceDelimited: any negative length is null
        return None, at
    if length > end - at:
        raise _corrupt(f"message field of {length} bytes runs past the message")
    return bytes(data[at:at + length]), at + length


def _outer_entries(data: bytes | memoryview, max_size: int | None
                   ) -> tuple[list[_Entry], int]:
    """The complete entries of a message set and the bytes they span (Kafka's
    ``ByteBufferLogInputStream.nextBatch`` then ``UnifiedLog.analyzeAndValidateRecords``: size
    floor, magic, a partial tail ignored, ``message.max.bytes``, then the CRC)."""
    entries: list[_Entry] = []
    position = 0
    end = len(data)
    while end - position >= LOG_OVERHEAD:
        offset, size = _OFFSET_SIZE.unpack_from(data, position)
        if size < RECORD_OVERHEAD_V0:
            raise _corrupt(f"Record size {size} is less than the minimum record overhead "
                           f"({RECORD_OVERHEAD_V0})")
        if end - position < HEADER_SIZE_UP_TO_MAGIC:
            break
        magic = data[position + 16]
        if magic > rb.MAGIC:  # a signed byte: negatives read as >= 128
            raise _corrupt(f"Invalid magic found in record: {struct.unpack('b', bytes([magic]))[0]}")
        if end - position < LOG_OVERHEAD + size:
            break  # a partial trailing message: ignored, as Kafka ignores it
        if max_size is not None and LOG_OVERHEAD + size > max_size:
            raise LegacyRecordError(
                "message_too_large",
                f"message of {LOG_OVERHEAD + size} bytes exceeds the limit of {max_size}")
        if magic == rb.MAGIC:
            raise _invalid("a v2 record batch inside a message set of magic 0/1: Batch magic 2 "
                           "is not the same as the first batch's magic byte")
        entries.append(_read_message(data, offset, position + LOG_OVERHEAD, size))
        position += LOG_OVERHEAD + size
    return entries, position


def first_magic(data: bytes | bytearray | memoryview) -> int | None:
    """The magic of the first entry of a Produce ``records`` blob (None when it is shorter than
    an entry's header): 2 goes to the v2 path (:mod:`.records`), 0 and 1 here. Produce v0-v2 may
    carry either; Kafka decides by the batches themselves, not by the request version."""
    if len(data) < HEADER_SIZE_UP_TO_MAGIC:
        return None
    return struct.unpack_from(">b", data, 16)[0]


def parse_message_set(data: bytes | bytearray | memoryview, *, budget: WalkBudget,
                      limit: int = rb.DEFAULT_DECOMPRESSED_LIMIT,
                      max_size: int | None = None) -> MessageSet:
    """Read a client's message set of magic 0 or 1 as Kafka 3.9 does on produce.

    ``budget`` is charged for every inflated byte (shared by the request's partitions, as
    :mod:`.record_walk`), ``limit`` caps one wrapper's inflated bytes, ``max_size`` is the
    topic's ``max.message.bytes`` for each entry. The first entry's magic is the set's; an
    empty result (no complete entry) is a set Kafka appends nothing for.
    """
    view = memoryview(data)
    entries, valid_bytes = _outer_entries(view, max_size)
    if not entries:
        return MessageSet(MAGIC_V0, 0, (), valid_bytes)
    codec = 0
    for entry in entries:
        if entry.codec:
            codec = entry.codec  # Kafka's sourceCompression: the last codec seen
    if codec and len(entries) > 1:
        raise _invalid("Compressed outer record has more than one batch")
    magic = entries[0].magic
    for entry in entries:
        if entry.magic != magic:
            raise _invalid(f"Batch magic {entry.magic} is not the same as the first batch's "
                           f"magic byte {magic}")
    if not codec:
        messages = tuple(LegacyMessage(e.offset, e.magic, e.timestamp, e.log_append_time,
                                       e.key, e.value) for e in entries)
        return MessageSet(magic, 0, messages, valid_bytes)
    return MessageSet(magic, codec, _inner_messages(entries[0], budget, limit), valid_bytes)


def _inner_messages(wrapper: _Entry, budget: WalkBudget, limit: int
                    ) -> tuple[LegacyMessage, ...]:
    """The messages of a compressed wrapper (Kafka's ``DeepRecordsIterator`` and the checks
    ``LogValidator.validateMessagesAndAssignOffsetsCompressed`` makes of each)."""
    if wrapper.codec == compression.COMPRESSION_ZSTD:
        raise _invalid("Invalid wrapper compressionType found in legacy deep record iterator "
                       f"{wrapper.magic}")
    if wrapper.codec > compression.COMPRESSION_ZSTD:
        raise _corrupt(f"unknown compression type {wrapper.codec}")
    if wrapper.value is None:
        raise _invalid("Found invalid compressed record set with null value "
                       f"(magic = {wrapper.magic})")
    payload = wrapper.value
    if wrapper.codec == compression.COMPRESSION_LZ4:
        payload = _lz4_fix_header(payload, wrapper.magic)
    cap = min(limit, max(budget.remaining, 0))
    try:
        inflated = compression.decompress(wrapper.codec, payload, cap)
    except compression.CompressionError as exc:
        if exc.too_large and cap < limit and budget.defer:
            raise Deferred from None
        raise _corrupt(str(exc)) from None
    budget.spend(len(inflated))
    # Inner entries: DataLogInputStream (size floor, a partial tail ignored), then per record
    # the nested-codec and magic checks (INVALID_RECORD, collected: Kafka reports them after
    # the walk) and the CRC (CORRUPT_MESSAGE at once).
    inner: list[_Entry] = []
    first_error: LegacyRecordError | None = None
    position = 0
    end = len(inflated)
    while end - position >= LOG_OVERHEAD:
        offset, size = _OFFSET_SIZE.unpack_from(inflated, position)
        if size < RECORD_OVERHEAD_V0:
            raise _corrupt("Record size is less than the minimum record overhead "
                           f"({RECORD_OVERHEAD_V0})")
        if end - position - LOG_OVERHEAD < size:
            break
        start = position + LOG_OVERHEAD
        position = start + size
        attributes = inflated[start + 5]
        if attributes & CODEC_MASK:
            first_error = first_error or _invalid(
                "Compressed outer record should not have an inner record with a compression "
                "attribute set")
            continue
        if inflated[start + 4] != wrapper.magic:
            first_error = first_error or _invalid(
                f"Record magic {inflated[start + 4]} does not match outer magic "
                f"{wrapper.magic}")
            continue
        inner.append(_read_message(inflated, offset, start, size))
    if first_error is not None:
        raise first_error
    if not inner:
        raise _invalid("Found invalid compressed record set with no inner records")
    if wrapper.magic == MAGIC_V1:
        last_inner = inner[-1].offset
        if wrapper.offset == 0:
            base = 0  # some librdkafka versions send a zero wrapper offset
        elif wrapper.offset < last_inner:
            raise _invalid(f"Found invalid wrapper offset in compressed v1 message set, wrapper "
                           f"offset '{wrapper.offset}' is less than the last inner message "
                           f"offset '{last_inner}' and it is not zero.")
        else:
            base = wrapper.offset - last_inner
    else:
        base = 0  # magic 0: inner offsets are absolute
    lat = wrapper.log_append_time
    return tuple(
        LegacyMessage(base + e.offset, e.magic,
                      wrapper.timestamp if lat and e.magic == MAGIC_V1 else e.timestamp,
                      lat, e.key, e.value)
        for e in inner)


# ------------------------------------------------------------------- lz4 frame header
_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _M32


def xxh32_short(data: bytes) -> int:
    """XXH32 (seed 0) of fewer than 16 bytes: all an LZ4 frame header checksum needs."""
    if len(data) >= 16:
        raise ValueError("xxh32_short takes fewer than 16 bytes")
    h = (_P5 + len(data)) & _M32
    at = 0
    while at + 4 <= len(data):
        (word,) = struct.unpack_from("<I", data, at)
        h = _rotl((h + word * _P3) & _M32, 17) * _P4 & _M32
        at += 4
    for byte in data[at:]:
        h = _rotl((h + byte * _P5) & _M32, 11) * _P1 & _M32
    h ^= h >> 15
    h = h * _P2 & _M32
    h ^= h >> 13
    h = h * _P3 & _M32
    return h ^ (h >> 16)


def _lz4_header_end(frame: bytes) -> int | None:
    """Position of the HC byte of an LZ4 frame, None when ``frame`` is not one."""
    if len(frame) < 7 or frame[:4] != _LZ4_MAGIC:
        return None
    hc_at = 6 + (8 if frame[4] & _LZ4_CONTENT_SIZE_FLAG else 0)
    return hc_at if hc_at < len(frame) else None


def _lz4_fix_header(frame: bytes, magic: int) -> bytes:
    """The frame with a checksum the codec accepts. Kafka before 0.10 wrote the header
    checksum over the magic bytes too; ``KafkaLZ4BlockInputStream`` ignores the checksum of a
    magic 0 frame and checks it (over FLG and BD only) for magic 1."""
    hc_at = _lz4_header_end(frame)
    if hc_at is None:
        return frame  # not a frame: the codec refuses it
    right = (xxh32_short(frame[4:hc_at]) >> 8) & 0xFF
    if frame[hc_at] == right:
        return frame
    if magic == MAGIC_V1:
        raise _corrupt("Stream frame descriptor corrupted")
    return frame[:hc_at] + bytes([right]) + frame[hc_at + 1:]


def _lz4_compress(data: bytes, magic: int) -> bytes:
    """LZ4 as Kafka writes it for ``magic``: magic 0 gets the old, broken header checksum
    (what a 0.9 consumer expects)."""
    frame = compression.compress(compression.COMPRESSION_LZ4, data)
    if magic != MAGIC_V0:
        return frame
    hc_at = _lz4_header_end(frame)
    assert hc_at is not None
    broken = (xxh32_short(frame[:hc_at]) >> 8) & 0xFF
    return frame[:hc_at] + bytes([broken]) + frame[hc_at + 1:]


# ------------------------------------------------------------------------- up-conversion
MAX_TIMESTAMP_WINDOW = 2**63 - 1


def up_convert(message_set: MessageSet, *, base_offset: int = 0,
               log_append_time: int | None = None, target_codec: int | None = None,
               now_ms: int = 0, timestamp_before_max_ms: int = MAX_TIMESTAMP_WINDOW,
               timestamp_after_max_ms: int = MAX_TIMESTAMP_WINDOW, compacted: bool = False,
               partition_leader_epoch: int = -1) -> bytes | None:
    """The one v2 batch Kafka's ``LogValidator`` appends for ``message_set`` (None when it
    holds no message: Kafka appends nothing).

    Offsets run from ``base_offset`` one per message (the client's offsets are ignored);
    timestamps are the messages' (-1 for magic 0); with ``log_append_time`` (epoch ms: the
    topic's ``message.timestamp.type=LogAppendTime``) the batch is marked LogAppendTime and
    its max timestamp is that time. The codec is ``target_codec`` (the topic's
    ``compression.type``) or, for ``producer``, the source's. The producer id is -1: old
    clients are neither idempotent nor transactional. Records are checked as
    ``LogValidator.validateRecord`` checks them: a key on compacted topics (INVALID_RECORD),
    CreateTime timestamps within the window around ``now_ms`` and no LogAppendTime from the
    producer (INVALID_TIMESTAMP, which wins when both occur).
    """
    if not message_set.messages:
        return None
    timestamp_error = key_error = None
    for index, message in enumerate(message_set.messages):
        if compacted and message.key is None:
            key_error = key_error or _invalid(
                f"Compacted topic cannot accept message without key (record {index})")
            continue
        if log_append_time is None and message.timestamp != NO_TIMESTAMP:
            diff = now_ms - message.timestamp
            if diff > timestamp_before_max_ms or -diff > timestamp_after_max_ms:
                timestamp_error = timestamp_error or LegacyRecordError(
                    "invalid_timestamp", f"Timestamp {message.timestamp} of message with "
                    f"offset {message.offset} is out of range")
        elif message.log_append_time:
            timestamp_error = timestamp_error or LegacyRecordError(
                "invalid_timestamp", "Producer should not set timestamp type to LogAppendTime.")
        if message.timestamp < NO_TIMESTAMP:
            # Kafka's MemoryRecordsBuilder throws (an unknown server error); refused here.
            timestamp_error = timestamp_error or LegacyRecordError(
                "invalid_timestamp", f"Invalid negative timestamp {message.timestamp}")
    if timestamp_error is not None:
        raise timestamp_error
    if key_error is not None:
        raise key_error
    codec = message_set.codec if target_codec is None else target_codec
    batch = rb.build_batch(
        [(m.key, m.value, (), m.timestamp) for m in message_set.messages],
        base_offset=base_offset, partition_leader_epoch=partition_leader_epoch,
        attributes=codec & rb.COMPRESSION_MASK)
    if log_append_time is None:
        return batch
    stamped = bytearray(batch)
    rb.assign_offset(stamped, 0, base_offset, log_append_time)
    return bytes(stamped)


# ----------------------------------------------------------------------- down-conversion
def encode_message(offset: int, magic: int, attributes: int, timestamp: int,
                   key: bytes | None, value: bytes | None) -> bytes:
    """One ``offset, size, message`` entry with its CRC (Kafka's ``LegacyRecord.write``)."""
    body = bytearray()
    body.append(magic)
    body.append(attributes)
    if magic == MAGIC_V1:
        body += _I64.pack(timestamp)
    for field in (key, value):
        if field is None:
            body += _I32.pack(-1)
        else:
            body += _I32.pack(len(field))
            body += field
    crc = zlib.crc32(body)
    return _OFFSET_SIZE.pack(offset, 4 + len(body)) + struct.pack(">I", crc) + bytes(body)


MessageInput = tuple[int, int, bytes | None, bytes | None]


def build_message_set(messages: Sequence[MessageInput], *, magic: int, codec: int = 0,
                      log_append_time: int | None = None) -> bytes:
    """A message set of ``(offset, timestamp, key, value)`` as Kafka's ``MemoryRecordsBuilder``
    writes one for ``magic``: one message each when uncompressed; else one wrapper at the last
    offset holding inner messages (offsets relative to the first for magic 1), with the max
    timestamp. ``log_append_time`` stamps every message (and the wrapper) with that time and
    the LogAppendTime bit (magic 1). Magic 0 carries no timestamps."""
    if magic not in (MAGIC_V0, MAGIC_V1):
        raise ValueError(f"magic {magic} is not a legacy one")
    if codec == compression.COMPRESSION_ZSTD or not 0 <= codec <= compression.COMPRESSION_ZSTD:
        raise ValueError(f"codec {codec} cannot be written below magic 2")
    if not messages:
        return b""
    lat_bit = TIMESTAMP_TYPE_BIT if log_append_time is not None and magic == MAGIC_V1 else 0
    out = bytearray()
    base = messages[0][0]
    max_timestamp = NO_TIMESTAMP
    for offset, timestamp, key, value in messages:
        if log_append_time is not None:
            timestamp = log_append_time
        max_timestamp = max(max_timestamp, timestamp)
        inner_offset = offset - base if codec and magic == MAGIC_V1 else offset
        out += encode_message(inner_offset, magic, lat_bit, timestamp, key, value)
    if not codec:
        return bytes(out)
    if codec == compression.COMPRESSION_LZ4:
        payload = _lz4_compress(bytes(out), magic)
    else:
        payload = compression.compress(codec, out)
    return encode_message(messages[-1][0], magic, codec | lat_bit, max_timestamp, None, payload)


def down_convert_batch(batch: bytes | memoryview, to_magic: int, first_offset: int, *,
                       limit: int = rb.DEFAULT_DECOMPRESSED_LIMIT) -> bytes:
    """One stored v2 batch as a message set of ``to_magic`` (Kafka's ``RecordsUtil.downConvert``):
    control batches vanish (old fetchers read uncommitted data, so aborted transactional
    records are delivered as any other), headers are dropped, an uncompressed batch loses its
    records below ``first_offset`` (each becomes its own message), a compressed one keeps them
    (the client skips them) and its codec; zstd cannot be expressed
    (``unsupported_compression_type``). A LogAppendTime batch's time is every message's."""
    header = rb.decode_header(batch)
    if header.is_control:
        return b""
    if header.compression == compression.COMPRESSION_ZSTD:
        raise LegacyRecordError("unsupported_compression_type",
                                "Down-conversion of zstandard-compressed batches is not supported")
    records = rb.decode_records(batch, limit)
    if not header.compression:
        records = [r for r in records if r.offset >= first_offset]
    if not records:
        return b""
    return build_message_set(
        [(r.offset, r.timestamp, r.key, r.value) for r in records], magic=to_magic,
        codec=header.compression,
        log_append_time=header.max_timestamp if header.log_append_time else None)


def down_convert(records: bytes | memoryview, to_magic: int, first_offset: int, *,
                 limit: int = rb.DEFAULT_DECOMPRESSED_LIMIT) -> Iterator[bytes]:
    """The converted message set of each stored batch of ``records`` in turn (empty ones,
    control batches, skipped): a fetch can stream them without converting all first."""
    view = memoryview(records)
    for position, size in rb.iter_batches(view):
        converted = down_convert_batch(view[position:position + size], to_magic, first_offset,
                                       limit=limit)
        if converted:
            yield converted


#: ``LazyDownConversionRecordsSend.MAX_READ_SIZE``: the largest overflow filler piece.
MAX_READ_SIZE = 128 * 1024
#: What Kafka sends when nothing converts: one offset/length header.
MIN_OVERFLOW_MESSAGE_LENGTH = LOG_OVERHEAD


def overflow_filler(size: int) -> bytes:
    """``size`` bytes of Kafka's "overflow batches": offset -1 and a length past the end, then
    zeros; a reader sees a partial trailing message and ignores it."""
    out = bytearray()
    while len(out) < size:
        remaining = size - len(out)
        piece = bytearray(max(LOG_OVERHEAD, min(remaining + 1, MAX_READ_SIZE)))
        _OFFSET_SIZE.pack_into(piece, 0, -1, max(remaining + 1, rb.HEADER_SIZE))
        out += piece[:remaining]
    return bytes(out)


def down_converted_records(records: bytes | memoryview, to_magic: int, first_offset: int, *,
                           limit: int = rb.DEFAULT_DECOMPRESSED_LIMIT) -> bytes:
    """What Kafka 3.9's ``LazyDownConversionRecords`` sends an old fetcher for ``records`` (the
    whole stored batches a read returned): its size is fixed before sending, as the larger of
    the stored bytes and the first converted batch, so that at least one batch goes out whole;
    converted bytes past it are cut (a partial last message, ignored by the client), a
    shortfall is filled with :func:`overflow_filler`. A zstd batch first is
    ``unsupported_compression_type`` (the partition's error); later, it ends the data.
    Unlike Kafka, a control batch before the first converted batch does not make that batch
    go out twice (Kafka's iterator skips one stored batch for the cached first chunk)."""
    chunks = down_convert(records, to_magic, first_offset, limit=limit)
    first = next(chunks, b"")
    if not first:
        # Nothing to send (no batch, or only control batches): Kafka still sends one
        # overflow header, which the client reads as nothing.
        return overflow_filler(MIN_OVERFLOW_MESSAGE_LENGTH)
    size = max(len(records), len(first))
    out = bytearray(first)
    try:
        for chunk in chunks:
            if len(out) >= size:
                break
            out += chunk
    except LegacyRecordError as exc:
        if exc.kind != "unsupported_compression_type":
            raise
    del out[size:]
    out += overflow_filler(size - len(out))
    return bytes(out)
