"""``__transaction_state`` records in Kafka's format (``TransactionLogKey`` v0 and
``TransactionLogValue`` v0), so the log reads like Kafka's.

Key: ``version i16 (0), transactional_id string``. Value: ``version i16 (0), producer_id i64,
producer_epoch i16, transaction_timeout_ms i32, transaction_status i8, transaction_partitions
[topic string, partition_ids [i32]] (null when none), last_update_timestamp_ms i64,
start_timestamp_ms i64``. A null value is a tombstone (an expired transactional id). The topic is compacted.
"""

from __future__ import annotations

import struct

from ..records import _Reader, _Writer, partition_for
from .state import TxnMetadata, TxnState

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


def encode_value(meta: TxnMetadata) -> bytes:
    w = _Writer().int16(0).int64(meta.producer_id).int16(meta.producer_epoch)
    w.int32(meta.timeout_ms).int8(int(meta.state))
    if not meta.partitions:
        w.int32(-1)
    else:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(meta.partitions):
            by_topic.setdefault(topic, []).append(partition)
        w.int32(len(by_topic))
        for topic, parts in by_topic.items():
            w.string(topic).int32(len(parts))
            for p in parts:
                w.int32(p)
    return w.int64(meta.last_update_ms).int64(meta.start_ms).getvalue()


def decode_value(transactional_id: str, data: bytes) -> TxnMetadata:
    reader = _Reader(data)
    version = reader.int16()
    if version not in (0, 1):
        raise ValueError(f"unknown transaction log value version {version}")
    if version == 1:
        raise ValueError("flexible transaction log values are not read here")
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
