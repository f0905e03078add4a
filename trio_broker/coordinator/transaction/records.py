"""``__transaction_state`` records in Kafka's format (``TransactionLogKey`` v0 and
``TransactionLogValue`` v0), so the log reads like Kafka's.

Key: ``version i16 (0), transactional_id string``. Value: ``version i16 (0), producer_id i64,
producer_epoch i16, transaction_timeout_ms i32, transaction_status i8, transaction_partitions
[topic string, partition_ids [i32]] (null when none), last_update_timestamp_ms i64,
start_timestamp_ms i64``. A null value is a tombstone (an expired transactional id). The topic is compacted.

A transaction of a version-2 client (KIP-890 part 2) is written as ``TransactionLogValue`` v1,
Kafka 4.0's flexible form: the same fields in compact encoding, plus the tagged fields
PreviousProducerId (0), NextProducerId (1) and ClientTransactionVersion (2) that carry its epoch
rotation across a restart. Every other state stays v0, readable by Kafka 3.x tools.
"""

from __future__ import annotations

import io
import struct

from kio.serial import readers, writers
from kio.serial.errors import SerialError
from kio.static.primitive import i8, i16, i32, i64, uvarint

from ..records import _Reader, _Writer, partition_for
from .state import NO_PRODUCER_ID, TxnMetadata, TxnState

TRANSACTION_TOPIC = "__transaction_state"

#: Topic configs of ``__transaction_state``: compacted, as in Kafka (the newest record per
#: transactional id is the state; an expired id's tombstone goes after delete.retention.ms).
TRANSACTION_TOPIC_CONFIGS = {"cleanup.policy": "compact"}


def txn_partition_for(transactional_id: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(transactionalId.hashCode) % transaction.state.log.num.partitions``."""
    return partition_for(transactional_id, num_partitions)


def encode_key(transactional_id: str) -> bytes:
    return _Writer().int16(0).string(transactional_id).getvalue()


def decode_key(data: bytes) -> str:
    reader = _Reader(data)
    version = reader.int16()
    if version != 0:
        raise ValueError(f"unknown transaction log key version {version}")
    txn_id = reader.string()
    if txn_id is None:
        raise ValueError("null transactional id")
    return txn_id


def _by_topic(meta: TxnMetadata) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(meta.partitions):
        by_topic.setdefault(topic, []).append(partition)
    return by_topic


def _is_v2(meta: TxnMetadata) -> bool:
    return (meta.client_transaction_version != 0 or meta.previous_producer_id != NO_PRODUCER_ID
            or meta.next_producer_id != NO_PRODUCER_ID)


def encode_value(meta: TxnMetadata) -> bytes:
    if _is_v2(meta):
        return _encode_value_v1(meta)
    w = _Writer().int16(0).int64(meta.producer_id).int16(meta.producer_epoch)
    w.int32(meta.timeout_ms).int8(int(meta.state))
    if not meta.partitions:
        w.int32(-1)
    else:
        by_topic = _by_topic(meta)
        w.int32(len(by_topic))
        for topic, parts in by_topic.items():
            w.string(topic).int32(len(parts))
            for p in parts:
                w.int32(p)
    return w.int64(meta.last_update_ms).int64(meta.start_ms).getvalue()


def _encode_value_v1(meta: TxnMetadata) -> bytes:
    out = io.BytesIO()

    def count(n: int) -> None:
        writers.write_unsigned_varint(out, uvarint(n))

    writers.write_int16(out, i16(1))
    writers.write_int64(out, i64(meta.producer_id))
    writers.write_int16(out, i16(meta.producer_epoch))
    writers.write_int32(out, i32(meta.timeout_ms))
    writers.write_int8(out, i8(int(meta.state)))
    by_topic = _by_topic(meta)
    count(len(by_topic) + 1 if by_topic else 0)  # compact: length + 1, 0 is null (none)
    for topic, parts in by_topic.items():
        writers.write_compact_string(out, topic)
        count(len(parts) + 1)
        for p in parts:
            writers.write_int32(out, i32(p))
        count(0)  # the entry's tagged fields: none
    writers.write_int64(out, i64(meta.last_update_ms))
    writers.write_int64(out, i64(meta.start_ms))
    tagged = []
    if meta.previous_producer_id != NO_PRODUCER_ID:
        tagged.append((0, struct.pack(">q", meta.previous_producer_id)))
    if meta.next_producer_id != NO_PRODUCER_ID:
        tagged.append((1, struct.pack(">q", meta.next_producer_id)))
    if meta.client_transaction_version:
        tagged.append((2, struct.pack(">h", meta.client_transaction_version)))
    count(len(tagged))
    for tag, data in tagged:
        count(tag)
        count(len(data))
        out.write(data)
    return out.getvalue()


def decode_value(transactional_id: str, data: bytes) -> TxnMetadata:
    reader = _Reader(data)
    version = reader.int16()
    if version not in (0, 1):
        raise ValueError(f"unknown transaction log value version {version}")
    if version == 1:
        return _decode_value_v1(transactional_id, data)
    producer_id = reader.int64()
    epoch = reader.int16()
    timeout = reader.int32()
    (status,) = struct.unpack(">b", reader._take(1))
    count = reader.int32()
    partitions: set[tuple[str, int]] = set()
    for _ in range(max(count, 0)):
        topic = reader.string() or ""
        for _p in range(max(reader.int32(), 0)):
            partitions.add((topic, reader.int32()))
    last_update = reader.int64()
    start = reader.int64()
    return TxnMetadata(transactional_id, producer_id, epoch, timeout, TxnState(status),
                       frozenset(partitions), start, last_update)


class _FlexibleReader:
    """kio's readers over one record, each read bounded by the record's length."""

    def __init__(self, data: bytes) -> None:
        self.data = memoryview(data)
        self.pos = 0

    def read(self, reader: object) -> int:
        value, size = reader(self.data, self.pos)  # type: ignore[operator]
        self.pos += size
        if self.pos > len(self.data):
            raise ValueError("truncated transaction log value")
        return int(value)

    def string(self) -> str:
        value, size = readers.read_compact_string(self.data, self.pos)
        self.pos += size
        if self.pos > len(self.data):
            raise ValueError("truncated transaction log value")
        return str(value)

    def count(self) -> int:
        """A compact array's or tagged section's length, bounded by the bytes left."""
        length = self.read(readers.read_unsigned_varint)
        if length > len(self.data) - self.pos + 1:
            raise ValueError("transaction log value: a length past its end")
        return length


def _decode_value_v1(transactional_id: str, data: bytes) -> TxnMetadata:
    try:
        r = _FlexibleReader(data)
        r.read(readers.read_int16)
        producer_id = r.read(readers.read_int64)
        epoch = r.read(readers.read_int16)
        timeout = r.read(readers.read_int32)
        status = r.read(readers.read_int8)
        partitions: set[tuple[str, int]] = set()
        for _ in range(max(r.count() - 1, 0)):
            topic = r.string()
            for _p in range(max(r.count() - 1, 0)):
                partitions.add((topic, r.read(readers.read_int32)))
            _skip_tagged(r)
        last_update = r.read(readers.read_int64)
        start = r.read(readers.read_int64)
        tags = {0: NO_PRODUCER_ID, 1: NO_PRODUCER_ID, 2: 0}
        for _ in range(r.count()):
            tag = r.read(readers.read_unsigned_varint)
            size = r.count()
            end = r.pos + size
            if tag in tags:
                tags[tag] = r.read(readers.read_int16 if tag == 2 else readers.read_int64)
            r.pos = end
        if r.pos > len(data):
            raise ValueError("truncated transaction log value")
        return TxnMetadata(transactional_id, producer_id, epoch, timeout, TxnState(status),
                           frozenset(partitions), start, last_update,
                           previous_producer_id=tags[0], next_producer_id=tags[1],
                           client_transaction_version=tags[2])
    except (SerialError, IndexError, struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"unreadable transaction log value: {exc}") from None


def _skip_tagged(r: _FlexibleReader) -> None:
    for _ in range(r.count()):
        r.read(readers.read_unsigned_varint)
        r.pos += r.count()
