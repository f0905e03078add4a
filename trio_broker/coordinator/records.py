"""The ``__consumer_offsets`` record formats and the minimal v2 batch codec the coordinator needs.

Keys and values use Kafka's own schemas (``OffsetCommitKey`` v1, ``OffsetCommitValue`` v3,
``GroupMetadataKey`` v2, ``GroupMetadataValue`` v3), so Kafka's tools can read our log. A ``None``
value is a tombstone: the offset or group was deleted.

Only the coordinator writes this topic and it writes uncompressed batches; reading back decodes
those batches record by record, which is fine at start-up (never on the produce/fetch path).
"""

from __future__ import annotations

import struct
import time
import zlib
from collections.abc import Iterator

import attrs
import crc32c

OFFSETS_TOPIC = "__consumer_offsets"

_OFFSET_KEY_VERSION = 1
_GROUP_KEY_VERSION = 2
_OFFSET_VALUE_VERSION = 3
_GROUP_VALUE_VERSION = 3


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for index in range(0, len(data), 2):
        h = (31 * h + ((data[index] << 8) | data[index + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode) % offsets.topic.num.partitions``."""
    h = java_string_hash(group_id)
    return (0 if h == -(2**31) else abs(h)) % num_partitions


# ----------------------------------------------------------------------- primitive writers
class _Writer:
    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def int8(self, v: int) -> _Writer:
        self.parts.append(struct.pack(">b", v))
        return self

    def int16(self, v: int) -> _Writer:
        self.parts.append(struct.pack(">h", v))
        return self

    def int32(self, v: int) -> _Writer:
        self.parts.append(struct.pack(">i", v))
        return self

    def int64(self, v: int) -> _Writer:
        self.parts.append(struct.pack(">q", v))
        return self

    def string(self, v: str | None) -> _Writer:
        if v is None:
            return self.int16(-1)
        data = v.encode("utf-8")
        self.int16(len(data))
        self.parts.append(data)
        return self

    def bytes_(self, v: bytes | None) -> _Writer:
        if v is None:
            return self.int32(-1)
        self.int32(len(v))
        self.parts.append(v)
        return self

    def getvalue(self) -> bytes:
        return b"".join(self.parts)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _unpack(self, fmt: str, size: int) -> int:
        if self.pos + size > len(self.data):
            raise ValueError("truncated record")
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return int(value)

    def int16(self) -> int:
        return self._unpack(">h", 2)

    def int32(self) -> int:
        return self._unpack(">i", 4)

    def int64(self) -> int:
        return self._unpack(">q", 8)

    def string(self) -> str | None:
        length = self.int16()
        if length < 0:
            return None
        return self._take(length).decode("utf-8")

    def bytes_(self) -> bytes | None:
        length = self.int32()
        if length < 0:
            return None
        return self._take(length)

    def _take(self, length: int) -> bytes:
        if self.pos + length > len(self.data):
            raise ValueError("truncated record")
        chunk = self.data[self.pos:self.pos + length]
        self.pos += length
        return chunk


# -------------------------------------------------------------------------- keys and values
@attrs.frozen
class OffsetKey:
    group_id: str
    topic: str
    partition: int


@attrs.frozen
class GroupKey:
    group_id: str


@attrs.frozen
class OffsetValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int


@attrs.frozen
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@attrs.frozen
class GroupValue:
    protocol_type: str
    generation_id: int
    protocol_name: str | None
    leader_id: str | None
    state_timestamp_ms: int
    members: tuple[MemberValue, ...]


def encode_offset_key(key: OffsetKey) -> bytes:
    return (_Writer().int16(_OFFSET_KEY_VERSION).string(key.group_id).string(key.topic)
            .int32(key.partition).getvalue())


def encode_group_key(key: GroupKey) -> bytes:
    return _Writer().int16(_GROUP_KEY_VERSION).string(key.group_id).getvalue()


def encode_offset_value(value: OffsetValue) -> bytes:
    return (_Writer().int16(_OFFSET_VALUE_VERSION).int64(value.offset).int32(value.leader_epoch)
            .string(value.metadata).int64(value.commit_timestamp_ms).getvalue())


def encode_group_value(value: GroupValue) -> bytes:
    w = (_Writer().int16(_GROUP_VALUE_VERSION).string(value.protocol_type)
         .int32(value.generation_id).string(value.protocol_name).string(value.leader_id)
         .int64(value.state_timestamp_ms).int32(len(value.members)))
    for m in value.members:
        (w.string(m.member_id).string(m.group_instance_id).string(m.client_id)
         .string(m.client_host).int32(m.rebalance_timeout_ms).int32(m.session_timeout_ms)
         .bytes_(m.subscription).bytes_(m.assignment))
    return w.getvalue()


def decode_key(data: bytes) -> OffsetKey | GroupKey:
    """Parse a record key; versions 0/1 are offset keys, 2 a group key (as in Kafka)."""
    r = _Reader(data)
    version = r.int16()
    if version in (0, 1):
        group, topic = r.string(), r.string()
        partition = r.int32()
        if group is None or topic is None:
            raise ValueError("null in offset key")
        return OffsetKey(group, topic, partition)
    if version == 2:
        group = r.string()
        if group is None:
            raise ValueError("null group in group key")
        return GroupKey(group)
    raise ValueError(f"unknown key version {version}")


def decode_offset_value(data: bytes) -> OffsetValue:
    r = _Reader(data)
    version = r.int16()
    if not 0 <= version <= 4:
        raise ValueError(f"unknown offset value version {version}")
    offset = r.int64()
    leader_epoch = r.int32() if version >= 3 else -1
    metadata = r.string() or ""
    commit_timestamp = r.int64()
    return OffsetValue(offset, leader_epoch, metadata, commit_timestamp)


def decode_group_value(data: bytes) -> GroupValue:
    r = _Reader(data)
    version = r.int16()
    if not 0 <= version <= 3:
        raise ValueError(f"unknown group value version {version}")
    protocol_type = r.string() or ""
    generation = r.int32()
    protocol = r.string()
    leader = r.string()
    state_timestamp = r.int64() if version >= 2 else -1
    members = []
    for _ in range(max(r.int32(), 0)):
        member_id = r.string() or ""
        instance_id = r.string() if version >= 3 else None
        client_id = r.string() or ""
        client_host = r.string() or ""
        rebalance_timeout = r.int32() if version >= 1 else -1
        session_timeout = r.int32()
        if version == 0:
            rebalance_timeout = session_timeout
        subscription = r.bytes_() or b""
        assignment = r.bytes_() or b""
        members.append(MemberValue(member_id, instance_id, client_id, client_host,
                                   rebalance_timeout, session_timeout, subscription, assignment))
    return GroupValue(protocol_type, generation, protocol, leader, state_timestamp,
                      tuple(members))


# ------------------------------------------------------------------------- record batches
_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
BATCH_HEADER_SIZE = _BATCH_HEADER.size  # 61
_CRC_START = 21  # attributes onward are covered by the CRC


def _varint(value: int) -> bytes:
    value = (value << 1) ^ (value >> 63)  # zig-zag
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = 0
    raw = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")
    return (raw >> 1) ^ -(raw & 1), pos


def build_batch(records: list[tuple[bytes, bytes | None]], timestamp_ms: int | None = None) -> bytes:
    """One uncompressed magic-2 batch of ``(key, value)`` records (``None`` value: tombstone).

    The base offset is 0; the log assigns the real one when appending.
    """
    if not records:
        raise ValueError("a batch needs at least one record")
    ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    body = bytearray()
    for delta, (key, value) in enumerate(records):
        rec = bytearray(b"\x00")  # attributes
        rec += _varint(0)  # timestamp delta
        rec += _varint(delta)
        rec += _varint(len(key)) + key
        if value is None:
            rec += _varint(-1)
        else:
            rec += _varint(len(value)) + value
        rec += _varint(0)  # headers
        body += _varint(len(rec)) + rec
    header_after_crc = struct.pack(">hiqqqhii", 0, len(records) - 1, ts, ts, -1, -1, -1,
                                   len(records))
    crc = crc32c.crc32c(header_after_crc + bytes(body))
    batch_length = BATCH_HEADER_SIZE - 12 + len(body)
    return struct.pack(">qiibI", 0, batch_length, -1, 2, crc) + header_after_crc + bytes(body)


@attrs.frozen
class StoredRecord:
    offset: int
    key: bytes | None
    value: bytes | None


def iter_batches(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    """``(base_offset, last_offset, batch_bytes)`` of each whole batch in ``data``."""
    pos = 0
    while pos + 12 <= len(data):
        base_offset, length = struct.unpack_from(">qi", data, pos)
        end = pos + 12 + length
        if length < BATCH_HEADER_SIZE - 12 or end > len(data):
            return
        (last_delta,) = struct.unpack_from(">i", data, pos + 23)
        yield base_offset, base_offset + last_delta, data[pos:end]
        pos = end


def decode_batch(batch: bytes) -> list[StoredRecord]:
    """The records of one batch (gzip-compressed batches are inflated; others are skipped)."""
    (base_offset, _length, _epoch, magic, crc, attributes, _last_delta, _base_ts, _max_ts,
     _pid, _pepoch, _seq, count) = _BATCH_HEADER.unpack_from(batch, 0)
    if magic != 2 or crc32c.crc32c(batch[_CRC_START:]) != crc:
        raise ValueError("corrupt batch")
    if attributes & 0x20:  # control batch (transaction markers)
        return []
    payload = batch[BATCH_HEADER_SIZE:]
    codec = attributes & 0x07
    if codec == 1:
        payload = zlib.decompress(payload, 16 + zlib.MAX_WBITS)
    elif codec != 0:
        raise ValueError(f"unsupported compression codec {codec}")
    records = []
    pos = 0
    for _ in range(count):
        length, pos = _read_varint(payload, pos)
        end = pos + length
        pos += 1  # attributes
        _ts_delta, pos = _read_varint(payload, pos)
        offset_delta, pos = _read_varint(payload, pos)
        key_len, pos = _read_varint(payload, pos)
        key = None if key_len < 0 else payload[pos:pos + key_len]
        pos += max(key_len, 0)
        value_len, pos = _read_varint(payload, pos)
        value = None if value_len < 0 else payload[pos:pos + value_len]
        records.append(StoredRecord(base_offset + offset_delta, key, value))
        pos = end
    return records
