"""The storage side of the classic group coordinator: loading groups and offsets from
``__consumer_offsets`` at start-up, and the single writer task every state change goes through
(in the order the state changed). :class:`OffsetsStore` is owned by the
:class:`~trio_broker.coordinator.coordinator.GroupCoordinator`; it decides nothing about groups.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any

import attrs
import trio
from kio.schema.errors import ErrorCode

from ..config import BrokerConfig
from ..observability.log import emit
from ..offload import in_worker
from ..protocol.records import (
    Record,
    RecordBatchError,
    build_batch,
    compute_crc,
    decode_header,
    decode_records,
    iter_batches,
)
from ..storage.manager import LogManager
from .classic_state import EncodedLater
from .group import CommittedOffset
from .internal_topic import ensure_topic, ensure_topic_async
from .records import (
    OFFSETS_TOPIC,
    GroupValue,
    OffsetKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
)
from .summaries import TopicPartition
from .waiting import Pending

E = ErrorCode

#: Largest read while loading ``__consumer_offsets``.
_LOAD_READ_BYTES = 4 * 1024 * 1024

#: Topic configs of ``__consumer_offsets``, as Kafka creates it: compacted (the newest record
#: per group and per committed partition survives; tombstones go after delete.retention.ms),
#: with ``offsets.topic.segment.bytes`` as its segment size.
OFFSETS_TOPIC_CONFIGS = {"cleanup.policy": "compact"}


#: A write of this many records or more is encoded in a worker thread (an OffsetCommit of
#: thousands of partitions, their tombstones when the topic goes): docs/architecture.md.
ENCODE_IN_WORKER_FROM = 1024


@attrs.frozen
class _Write:
    partition: int
    #: The batch, or what builds it (called by the writer, in order).
    batch: bytes | Callable[[], bytes]
    done: Pending[int]
    #: The answer when the batch is over ``message.max.bytes``: Kafka's for offsets
    #: (``storeOffsets``), unless the write stores a group's metadata (``storeGroup``).
    too_large: int = E.invalid_commit_offset_size
    #: Called with the error code once written, before anyone waiting on ``done`` runs.
    on_done: Callable[[int], None] | None = None
    #: How many records the batch holds (to decide where it is built).
    count: int = 1

    async def encoded(self) -> bytes:
        batch = self.batch
        if isinstance(batch, bytes):
            return batch
        if self.count >= ENCODE_IN_WORKER_FROM:
            return await in_worker(None, batch)
        return batch()


def _build(records: Sequence[tuple[bytes, bytes | None]] | EncodedLater, timestamp_ms: int
           ) -> bytes:
    encoded = records.encode() if isinstance(records, EncodedLater) else records
    return build_batch([(key, value, (), timestamp_ms) for key, value in encoded])


@attrs.frozen
class Loaded:
    """What ``__consumer_offsets`` holds for the classic groups, per group id."""

    num_partitions: int
    offsets: dict[str, dict[TopicPartition, CommittedOffset]]
    metadata: dict[str, GroupValue | None]
    records: int


class OffsetsStore:
    """``__consumer_offsets`` for the group coordinator: loading and the ordered writer."""

    def __init__(self, config: BrokerConfig, log_manager: LogManager) -> None:
        self.config = config
        self.log_manager = log_manager
        self.num_partitions = config.offsets_topic_num_partitions
        self._send, self._receive = trio.open_memory_channel[_Write](math.inf)

    # ------------------------------------------------------------------- loading
    def load(self, take_record: Callable[[bytes, bytes | None], bool]) -> Loaded:
        """Create nothing, read everything: the classic groups' records, after offering each
        record to ``take_record`` (the consumer-protocol groups take their snapshots)."""
        lm = self.log_manager
        info = lm.topics.get(OFFSETS_TOPIC)
        # Created on the first write, as Kafka creates it on first use: a broker that never
        # sees a group does not pay for its partitions at start-up.
        self.num_partitions = (info.num_partitions if info is not None
                               else self.config.offsets_topic_num_partitions)
        if info is not None and "compact" not in info.configs.get("cleanup.policy", ""):
            # Created by a version without compaction (retention off, growing forever):
            # from now on it is compacted as Kafka's is.
            lm.alter_topic_config(OFFSETS_TOPIC, {"cleanup.policy": "compact",
                                                  "retention.ms": None, "retention.bytes": None},
                                  incremental=True)
        offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        metadata: dict[str, GroupValue | None] = {}
        records = 0
        for partition in range(self.num_partitions if info is not None else 0):
            for record in self._read_partition(partition):
                records += 1
                try:
                    if record.key is None or take_record(record.key, record.value):
                        continue
                    key = decode_key(record.key)
                    if isinstance(key, OffsetKey):
                        group_offsets = offsets.setdefault(key.group_id, {})
                        tp = (key.topic, key.partition)
                        if record.value is None:
                            group_offsets.pop(tp, None)
                        else:
                            value = decode_offset_value(record.value)
                            group_offsets[tp] = CommittedOffset(
                                value.offset, value.leader_epoch, value.metadata,
                                value.commit_timestamp_ms)
                    else:
                        metadata[key.group_id] = (None if record.value is None
                                                  else decode_group_value(record.value))
                except ValueError:
                    continue  # a record we cannot read is skipped, as Kafka skips unknown keys
        return Loaded(self.num_partitions, offsets, metadata, records)

    def _read_partition(self, partition: int) -> Iterable[Any]:
        lm = self.log_manager
        log = lm.get_partition(OFFSETS_TOPIC, partition)
        if log is None:
            return
        offset = 0
        while True:
            result = lm.read(OFFSETS_TOPIC, partition, offset, _LOAD_READ_BYTES)
            offset = max(offset, result.log_start_offset)
            if not result.records:
                break
            advanced = False
            data = memoryview(result.records)
            for position, size in iter_batches(data):
                batch = data[position:position + size]
                header = decode_header(batch)
                last = header.last_offset
                if last < offset:
                    continue
                stored: list[Record] = []
                # A batch that does not check out is skipped, never fatal (Kafka skips what
                # it cannot read when loading this topic).
                # Transactional commits stay pending until they commit (transaction/offsets.py).
                if compute_crc(batch) == header.crc and not header.is_transactional:
                    try:
                        stored = decode_records(batch)
                    except RecordBatchError:
                        stored = []
                for record in stored:
                    if record.offset >= offset:
                        yield record
                offset = last + 1
                advanced = True
            if not advanced or offset >= result.high_watermark:
                break

    # ---------------------------------------------------------------------- writes
    def enqueue(self, partition: int,
                records: Sequence[tuple[bytes, bytes | None]] | EncodedLater, *,
                timestamp_ms: int, too_large: int = E.invalid_commit_offset_size,
                on_done: Callable[[int], None] | None = None) -> Pending[int]:
        """Queue records for one partition as one batch, built by the writer; the result is
        the write's error."""
        return self.enqueue_batch(partition, partial(_build, records, timestamp_ms),
                                  too_large=too_large, on_done=on_done, count=len(records))

    def enqueue_batch(self, partition: int, batch: bytes | Callable[[], bytes], *,
                      too_large: int = E.invalid_commit_offset_size,
                      on_done: Callable[[int], None] | None = None,
                      count: int = 1) -> Pending[int]:
        """Queue one batch (or what builds it) for ``__consumer_offsets``."""
        done: Pending[int] = Pending()
        self._send.send_nowait(_Write(partition, batch, done, too_large, on_done, count))
        return done

    def ensure_topic(self) -> None:
        ensure_topic(self.log_manager, OFFSETS_TOPIC, self.num_partitions,
                     OFFSETS_TOPIC_CONFIGS, self.config.offsets_topic_segment_bytes)

    async def run_writer(self) -> None:
        """Write what was queued, in order, until cancelled."""
        async for item in self._receive:
            try:
                await ensure_topic_async(self.log_manager, OFFSETS_TOPIC, self.num_partitions,
                                         OFFSETS_TOPIC_CONFIGS,
                                         self.config.offsets_topic_segment_bytes)
                await self.log_manager.append(OFFSETS_TOPIC, item.partition,
                                              await item.encoded(), producer_check=False)
            except Exception as exc:  # storage failures become retriable coordinator errors
                code = getattr(exc, "error_code", None)
                emit("coordinator_write_failed", partition=item.partition, error=repr(exc))
                error = item.too_large if code == E.message_too_large \
                    else E.coordinator_not_available
            else:
                error = E.none
            if item.on_done is not None:
                try:
                    item.on_done(error)
                except Exception as exc:  # a bug in one follow-up must not stop the writer
                    emit("background_task_failed", task="write_follow_up",
                         error=type(exc).__name__, detail=repr(exc))
            item.done.set(error)
            del item  # an idle writer keeps no write (nor what its follow-up holds) alive
