"""The ``__consumer_offsets`` record formats and the minimal v2 batch codec the coordinator needs.

Keys and values use Kafka's own schemas (``OffsetCommitKey`` v1, ``OffsetCommitValue`` v3,
``GroupMetadataKey`` v2, ``GroupMetadataValue`` v3), so Kafka's tools can read our log. A ``None``
value is a tombstone: the offset or group was deleted.

Only the coordinator writes this topic and it writes uncompressed batches; reading back decodes
those batches record by record, which is fine at start-up (never on the produce/fetch path).
"""

from __future__ import annotations

import struct

import attrs

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
