"""One partition's log: an ordered list of segments in ``<topic>-<partition>/``.

Appends are synchronous from offset assignment to the write, so appends to one partition never
interleave (Trio runs one task at a time and nothing here awaits); the caller awaits the flush
afterwards when the flush policy asks for one.
"""

from __future__ import annotations

import bisect
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Literal, NamedTuple, overload

import attrs
import trio

from ..config import LONG_MAX
from ..observability.log import emit
from ..offload import in_worker
from ..protocol import records as rb
from ..protocol.compression import decompressed_limit
from ..protocol.record_walk import (
    CheckedRecords,
    RecordsSummary,
    WalkBudget,
    summarize,
)
from .cleaner import payload_has_keyless_record, recover_swaps
from .errors import (
    InvalidRecord,
    InvalidTimestamp,
    KafkaStorageError,
    OffsetOutOfRange,
    PolicyViolation,
    RecordListTooLarge,
    UnknownTopicOrPartition,
    batch_error,
)
from .producer_state import ProducerStateManager, SnapshotJob
from .segment import DELETED_SUFFIX, Segment, SegmentRegion, write_detached
from .topic_config import LogConfig
from .txn_index import TransactionIndex, control_type

#: The one leader epoch of every partition: this node has led it since offset 0. Metadata,
#: ListOffsets, OffsetForLeaderEpoch report it, and every appended batch carries it.
LEADER_EPOCH = 0


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class AppendResult(NamedTuple):
    """Where a produce request's records landed.

    A named tuple (one per produced batch): a frozen attrs class's ``__init__`` costs twice
    as much per request."""

    base_offset: int
    #: Broker time stamped on the batches (LogAppendTime topics), else -1.
    log_append_time: int
    log_start_offset: int
    #: The last offset written (for flush accounting and tests).
    last_offset: int = -1
    duplicate: bool = False


class PreparedAppend(NamedTuple):
    """An append with its records checked, its offsets assigned (in ``data``, a copy) and its
    segment chosen, not yet written (:meth:`PartitionLog.prepare_append`)."""

    data: bytearray
    segment: Segment
    #: The batches' positions and assigned headers, for the producer state and the
    #: transaction index; empty for a lone batch without a producer.
    assigned: list[tuple[int, rb.BatchHeader]]
    base_offset: int
    last_offset: int
    max_timestamp: int
    #: Broker time stamped on the batches (LogAppendTime topics), else -1.
    append_time: int
    messages: int
    transactional: bool


@attrs.frozen
class ReadResult:
    """Whole batches read from one partition, with the partition's offsets."""

    records: bytes
    high_watermark: int
    log_start_offset: int
    last_stable_offset: int


@attrs.frozen
class RegionReadResult:
    """As :class:`ReadResult`, from ``read(..., region=True)``: the batches are left in the
    segment file (zero-copy fetch) unless there are none (``b""``)."""

    records: bytes | SegmentRegion
    high_watermark: int
    log_start_offset: int
    last_stable_offset: int


class PartitionLog:
    """The segments, offsets, producer state and flush state of one partition."""

    def __init__(self, topic: str, partition: int, directory: Path, config: LogConfig) -> None:
        self.topic = topic
        self.partition = partition
        self.directory = directory
        self.config = config
        self.segments: list[Segment] = []
        self._bases: list[int] = []
        self.log_start_offset = 0
        self.recovery_point = 0
        self.unflushed_messages = 0
        self.last_flush_ms = now_ms()
        self.producer_state = ProducerStateManager(directory, topic, partition)
        self.txn_index = TransactionIndex(directory, self.producer_state.ongoing_txns)
        #: Events of parked fetches waiting for the next append (set and cleared on append).
        self.waiters: set[trio.Event] = set()
        self.failed = False
        #: True once closed (its topic deleted, the broker stopping).
        self.closed = False
        self._flush_lock = trio.Lock()
        #: Held by an append whose bytes a worker thread writes, and taken by every append
        #: while it is held (:meth:`LogManager.append`), so offsets are taken in turn.
        self.write_lock = trio.Lock()

    # ------------------------------------------------------------------------------ opening
    def open(self, *, clean: bool, recovery_point: int | None,
             log_start_offset: int | None = None) -> None:
        """Load the segments found on disk; recover those that may hold unflushed data.

        A clean shutdown trusts every index (checked for sanity, rebuilt when broken). After a
        crash, every segment from the one holding the recovery point on is scanned batch by
        batch (CRC included); the first invalid or torn batch and everything after it are cut.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        for pattern in ("*.tmp", f"*{DELETED_SUFFIX}"):
            # Debris: half-written files, and segments deleted before a crash (Kafka's loader
            # removes its .deleted files too).
            for leftover in self.directory.glob(pattern):
                leftover.unlink(missing_ok=True)
        recover_swaps(self.directory, self.topic, self.partition)
        # Only Kafka's names (20 digits): "5.log" would otherwise open (and create) an empty
        # 00000000000000000005.log next to the file it was named after.
        bases = sorted(int(p.name[:-4]) for p in self.directory.glob("*.log")
                       if len(p.name) == 24 and p.name[:-4].isdigit())
        # Indexes without a log are debris of a deleted segment.
        for pattern in ("*.index", "*.timeindex"):
            for path in self.directory.glob(pattern):
                stem = path.name.split(".")[0]
                if not stem.isdigit() or int(stem) not in bases:
                    path.unlink(missing_ok=True)
        created = now_ms()
        for base in bases:
            self._add_segment(Segment(
                self.directory, base, index_max_bytes=self.config.segment_index_bytes,
                index_interval_bytes=self.config.index_interval_bytes, created_ms=created))
        if not self.segments:
            # A new log: nothing on disk to trust or recover (and its index files were just
            # created, so checking them would report a false "rebuilt").
            self._add_segment(self._new_segment(0))
            self.log_start_offset = self.recovery_point = self.log_end_offset
            self._load_producer_state()
            return
        # Without a recorded recovery point, a crash means every segment is suspect.
        point = recovery_point if recovery_point is not None and recovery_point >= 0 else 0
        for index, segment in enumerate(self.segments):
            is_last = index == len(self.segments) - 1
            next_base = self.segments[index + 1].base_offset if not is_last else None
            needs_recovery = not clean and (next_base is None or next_base > point)
            if not needs_recovery:
                indexed = segment.load_indexes(
                    next_base if next_base is not None else 2**63 - 1)
                if indexed and segment.scan_tail():
                    continue
                if not indexed:
                    emit("log_index_rebuilt", topic=self.topic, partition=self.partition,
                         segment=segment.base_offset)
            truncated, reason = segment.recover(segment.base_offset)
            if truncated:
                emit("log_tail_truncated", topic=self.topic, partition=self.partition,
                     segment=segment.base_offset, bytes=truncated, reason=reason or "")
                if needs_recovery:
                    # Kafka's recoverLog: unflushed segments after a corrupt one cannot
                    # follow on from it, drop them. A flushed (or cleanly closed) segment
                    # found damaged is cut alone: the later ones were written and synced
                    # after it was whole, and hold acknowledged data.
                    for later in self.segments[index + 1:]:
                        later.delete()
                    del self.segments[index + 1:]
                    break
        # A segment left empty before the last (a damaged one cut to nothing, a stray file
        # overlapping its neighbours) holds nothing, and reads must not stop in it.
        for segment in [s for s in self.segments[:-1] if s.size == 0]:
            self.segments.remove(segment)
            segment.delete()
            emit("log_segment_deleted", topic=self.topic, partition=self.partition,
                 segment=segment.base_offset, size=0, reason="empty_after_recovery")
        self._bases = [s.base_offset for s in self.segments]
        # Kafka's log-start-offset checkpoint: DeleteRecords may have moved it into a segment.
        self.log_start_offset = min(max(self.segments[0].base_offset, log_start_offset or 0),
                                    self.log_end_offset)
        self.recovery_point = self.log_end_offset if clean else min(point, self.log_end_offset)
        self._load_producer_state()

    def _load_producer_state(self) -> None:
        state = self.producer_state
        state.load_snapshot(self.log_end_offset, self.log_start_offset)
        self.txn_index.load(self.log_start_offset, self.log_end_offset)
        start = max(state.map_end_offset, self.log_start_offset)
        for header in self.iter_headers(start):
            if header.has_producer_id:
                state.update(header)
                if header.is_transactional:
                    kind = control_type(self.read(header.base_offset, header.size).records[
                        :header.size]) if header.is_control else None
                    self.txn_index.on_batch(header, kind,
                                            self.segment_for(header.base_offset).base_offset)
        state.map_end_offset = self.log_end_offset

    def _new_segment(self, base: int) -> Segment:
        return Segment(self.directory, base, index_max_bytes=self.config.segment_index_bytes,
                       index_interval_bytes=self.config.index_interval_bytes,
                       created_ms=now_ms())

    def _add_segment(self, segment: Segment) -> None:
        self.segments.append(segment)
        self._bases.append(segment.base_offset)

    # ---------------------------------------------------------------------------- offsets
    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.active.next_offset

    @property
    def high_watermark(self) -> int:
        # One replica: everything appended is committed.
        return self.active.next_offset

    @property
    def last_stable_offset(self) -> int:
        """Below the oldest open transaction (read_committed consumers stop there)."""
        return self.txn_index.last_stable_offset(self.high_watermark)

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # ----------------------------------------------------------------------------- append
    def append(self, records: bytes, *, from_client: bool = True, producer_check: bool = True,
               checked: CheckedRecords | None = None) -> AppendResult:
        """Validate, assign offsets, write. Synchronous: nothing may run in between.

        ``checked``: the records already validated by :func:`.record_walk.check_records` (a
        produce handler does the heavy part in a worker thread); used while this log's limits
        are still the ones it was checked against."""
        prepared = self.prepare_append(records, from_client=from_client,
                                       producer_check=producer_check, checked=checked)
        if isinstance(prepared, AppendResult):  # a retried batch, answered as the first time
            return prepared
        segment = prepared.segment
        try:
            segment.write(prepared.data)
        except OSError as exc:
            self._fail_append(segment, segment.size, exc)
        return self._finish_append(prepared)

    async def append_off_loop(self, records: bytes, *, from_client: bool = True,
                              producer_check: bool = True, checked: CheckedRecords | None = None
                              ) -> AppendResult:
        """:meth:`append` with the bytes written by a worker thread: a large write can wait
        for the kernel's writeback (dirty-page throttling) for milliseconds, which on the event
        loop every connection would wait out; in Kafka a request-handler thread writes. The
        caller holds :attr:`write_lock` (no other append may take offsets meanwhile); readers
        see the records once they are written and accounted for, never in between. A roll
        that the append's size makes due is done first, off the loop too
        (:meth:`roll_off_loop`)."""
        if self.roll_due(len(records)):
            await self.roll_off_loop()
        prepared = self.prepare_append(records, from_client=from_client,
                                       producer_check=producer_check, checked=checked)
        if isinstance(prepared, AppendResult):
            return prepared
        segment = prepared.segment
        try:
            await in_worker(None, write_detached, segment.fd, prepared.data)
        except OSError as exc:
            self._fail_append(segment, segment.size, exc)
        if self.closed:  # deleted while the thread wrote (into the unlinked file)
            raise UnknownTopicOrPartition.not_hosted(self.topic, self.partition)
        return self._finish_append(prepared)

    def prepare_append(self, records: bytes, *, from_client: bool, producer_check: bool,
                       checked: CheckedRecords | None) -> PreparedAppend | AppendResult:
        """:meth:`append` up to the write: the records validated, their offsets assigned in a
        copy, the segment rolled if due; a retried batch's first result instead."""
        # Runs for every produced batch: attributes are read once into locals, and the common
        # case (one batch, no producer id, CreateTime) takes no detours.
        if self.failed:
            raise KafkaStorageError(f"partition {self.topic}-{self.partition} is offline")
        config = self.config
        summaries: dict[int, RecordsSummary] = {}
        # Records checked ahead passed a client's rules, the strictest: whoever appends them.
        if (checked is not None and checked.max_size == config.max_message_bytes
                and checked.limit == self.decompressed_limit):
            batches = checked.batches
            summaries = checked.summaries
        else:
            try:
                batches = rb.split_batches(records, max_size=config.max_message_bytes,
                                           from_client=from_client)
            except rb.RecordBatchError as exc:
                raise batch_error(exc) from None
        size = len(records)
        if size > config.segment_bytes:
            # UnifiedLog.append: an append must fit in one segment.
            raise RecordListTooLarge(
                f"Message batch size is {size} bytes in append to partition "
                f"{self.topic}-{self.partition} which exceeds the maximum configured segment "
                f"size of {config.segment_bytes}.")
        if from_client and config.compact:
            self._require_keys(records, batches, summaries)
        state = self.producer_state
        if producer_check:
            pending: dict[int, tuple[int, int]] = {}
            for _, header in batches:
                if header.producer_id >= 0:
                    # Kafka answers a retried batch with the offsets it got the first time,
                    # and writes nothing of the request (UnifiedLog's
                    # analyzeAndValidateProducerState: any batch of it, in turn).
                    duplicate = state.find_duplicate(header)
                    if duplicate is not None:
                        return AppendResult(duplicate.first_offset, -1, self.log_start_offset,
                                            duplicate.last_offset, duplicate=True)
                    state.check(header, pending, self.segments[-1].next_offset)
        stamp = now_ms() if config.log_append_time else None
        data = bytearray(records)
        segment = self.segments[-1]
        next_offset = base_offset = segment.next_offset
        assigned: list[tuple[int, rb.BatchHeader]] = []
        messages = 0
        max_timestamp_of_all = -(1 << 63)
        transactional = False
        lone = len(batches) == 1
        for position, header in batches:
            if stamp is None:
                max_timestamp = self._derived_max_timestamp(data, position, header, summaries)
            else:
                max_timestamp = stamp
                # The header is all LogAppendTime rewrites, but the records are still walked
                # (a compressed batch once), as Kafka's LogValidator does: a corrupt one, a
                # wrong record count or a decompression bomb is refused, never stored.
                self._records_bounds(data, position, header, summaries)
            rb.assign_offset(data, position, next_offset, stamp, LEADER_EPOCH)
            if not (lone and header.producer_id < 0
                    and not header.attributes & rb.TRANSACTIONAL_BIT):
                # The producer state and the transaction index keep the assigned header; a
                # lone batch without a producer (most produce requests) needs no such object
                # (building one costs about as much as the segment write).
                header = header.assigned(next_offset, max_timestamp, LEADER_EPOCH)
                assigned.append((position, header))
            next_offset += header.last_offset_delta + 1
            messages += header.record_count
            if max_timestamp > max_timestamp_of_all:
                max_timestamp_of_all = max_timestamp
            if header.attributes & rb.TRANSACTIONAL_BIT:
                transactional = True
        if segment.size:
            # When to roll, written out (it runs per append). Kafka's time rule: with a
            # first-batch timestamp, the incoming batch's timestamp against it (replayed old
            # data rolls by its own clock); otherwise wall time since the segment was created,
            # and only then is the clock read.
            roll_base = segment.roll_base_ms
            waited = (max_timestamp_of_all - roll_base if roll_base > 0
                      else now_ms() - segment.created_ms)
            if (self.roll_due(size) or waited > config.segment_ms
                    or next_offset - 1 - segment.base_offset > rb.INT32_MAX):
                self.roll()
                segment = self.segments[-1]
        return PreparedAppend(data, segment, assigned, base_offset, next_offset - 1,
                              max_timestamp_of_all, stamp if stamp is not None else -1,
                              messages, transactional)

    def _finish_append(self, prepared: PreparedAppend) -> AppendResult:
        """After the write: the segment's size, index and end offset, the producer state,
        the transaction index, the flush count, the parked fetches."""
        assigned = prepared.assigned
        segment = prepared.segment
        if assigned:
            segment.record(len(prepared.data), assigned)
        else:
            segment.record_one(len(prepared.data), prepared.last_offset, prepared.max_timestamp)
        if assigned:
            state = self.producer_state
            for _, header in assigned:
                if header.producer_id >= 0:
                    state.update(header)
            if prepared.transactional:
                self.txn_index.track(prepared.data, assigned, prepared.segment.base_offset)
        self.unflushed_messages += prepared.messages
        if self.waiters:
            self._wake()
        return AppendResult(prepared.base_offset, prepared.append_time, self.log_start_offset,
                            prepared.last_offset)

    def _require_keys(self, records: bytes, batches: list[tuple[int, rb.BatchHeader]],
                      summaries: dict[int, RecordsSummary]) -> None:
        """Kafka's LogValidator.validateKey: a compacted topic refuses records without a key.
        Compressed batches are walked once: their summaries stay in ``summaries``."""
        view = memoryview(records)
        for position, header in batches:
            keyless: bool | None = None
            if position in summaries or header.attributes & rb.COMPRESSION_MASK:
                keyless = self._summary(records, position, header, summaries).keyless
            if keyless is None:  # read for lengths and timestamps only: the keys now
                keyless = payload_has_keyless_record(
                    rb.records_payload(view[position:position + header.size], header,
                                       self.decompressed_limit), header)
            if keyless:
                raise InvalidRecord(
                    "Compacted topic cannot accept message without key in topic partition "
                    f"{self.topic}-{self.partition}.")

    def _summary(self, data: bytes | bytearray, position: int, header: rb.BatchHeader,
                 summaries: dict[int, RecordsSummary]) -> RecordsSummary:
        """The batch at ``position`` walked (a compressed one streamed, failing at its first
        bad record: :mod:`~trio_broker.protocol.record_walk`), once per append."""
        summary = summaries.get(position)
        if summary is None:
            limit = self.decompressed_limit
            try:
                summary = summarize(
                    memoryview(data)[position:position + header.size], header, limit=limit,
                    budget=WalkBudget(limit))
            except rb.RecordBatchError as exc:
                raise batch_error(exc) from None
            summaries[position] = summary
        return summary

    def _records_bounds(self, data: bytearray, position: int, header: rb.BatchHeader,
                        summaries: dict[int, RecordsSummary]) -> tuple[int, int]:
        """The smallest and largest record timestamp of the batch at ``position``."""
        if position in summaries or header.attributes & rb.COMPRESSION_MASK:
            summary = self._summary(data, position, header, summaries)
            return summary.min_timestamp, summary.max_timestamp
        try:
            return rb.records_timestamp_bounds(data, position, header)
        except rb.RecordBatchError as exc:
            raise batch_error(exc) from None

    @property
    def decompressed_limit(self) -> int:
        """Cap on one batch's decompressed records (a decompression bomb is CORRUPT_MESSAGE)."""
        return decompressed_limit(self.config.max_message_bytes)

    def _derived_max_timestamp(self, data: bytearray, position: int, header: rb.BatchHeader,
                               summaries: dict[int, RecordsSummary]) -> int:
        """Kafka's LogValidator: the batch's max timestamp is the largest record timestamp,
        whatever the client wrote in the header (sarama and kafka-go may leave it unset); a
        wrong one is rewritten in place (CRC included) so the time index and readers agree.
        Record timestamps outside ``message.timestamp.{before,after}.max.ms`` of now are
        INVALID_TIMESTAMP (KIP-937)."""
        smallest, derived = self._records_bounds(data, position, header, summaries)
        config = self.config
        if config.timestamp_before_max_ms < LONG_MAX or config.timestamp_after_max_ms < LONG_MAX:
            now = now_ms()
            low = now - config.timestamp_before_max_ms
            high = now + config.timestamp_after_max_ms
            # Records without a timestamp (-1) are not checked, as in Kafka.
            for timestamp in (smallest, derived):
                if timestamp != rb.NO_TIMESTAMP and not low <= timestamp <= high:
                    raise InvalidTimestamp(
                        f"Timestamp {timestamp} of message in partition {self.topic}-"
                        f"{self.partition} is out of range. The timestamp should be within "
                        f"[{low}, {high}]")
        if derived != header.max_timestamp:
            rb.set_max_timestamp(data, position, derived)
        return derived

    def _fail_append(self, segment: Segment, size_before: int, exc: OSError) -> None:
        try:
            os.ftruncate(segment.fd, size_before)
            segment.size = size_before
        except OSError:
            self.failed = True
        raise KafkaStorageError(f"write to {segment.log_path} failed: {exc}") from exc

    def _wake(self) -> None:
        if self.waiters:
            waiters, self.waiters = self.waiters, set()
            for event in waiters:
                event.set()

    @property
    def needs_flush(self) -> bool:
        return self.unflushed_messages >= self.config.flush_messages

    def roll(self) -> Segment:
        """Start a new active segment at the log end (no-op when the active one is empty)."""
        old = self.active
        if old.size == 0:
            return old
        try:
            segment = self._new_segment(self.log_end_offset)
        except OSError as exc:
            raise self._roll_failed(exc) from exc
        self._activate(old, segment)
        try:
            self.write_snapshot()
        except OSError as exc:
            self._snapshot_failed(exc)
        self._rolled(old, segment)
        return segment

    def roll_due(self, size: int) -> bool:
        """Whether an append of ``size`` bytes rolls the active segment by its size or a full
        index (:meth:`prepare_append` applies these and the time rule, which needs the
        batches' timestamps)."""
        segment = self.segments[-1]
        return segment.size > 0 and (segment.size > self.config.segment_bytes - size
                                     or segment.offset_index.full or segment.time_index.full)

    async def roll_off_loop(self) -> None:
        """:meth:`roll` with the new segment's files created and the producer snapshot written
        by a worker thread: creating and renaming files waits for the file system's journal,
        behind the writeback of everything written before (hundreds of milliseconds under a
        bulk producer), which on the event loop every connection would wait out. The caller
        holds :attr:`write_lock`, as for :meth:`append_off_loop`."""
        old = self.active
        if old.size == 0:
            return
        try:
            segment = await in_worker(None, self._new_segment, self.log_end_offset)
        except OSError as exc:
            if self.closed:
                raise UnknownTopicOrPartition.not_hosted(self.topic, self.partition) from None
            raise self._roll_failed(exc) from exc
        if self.closed:  # deleted while the thread created the files
            segment.close()
            raise UnknownTopicOrPartition.not_hosted(self.topic, self.partition)
        self._activate(old, segment)
        job = self._snapshot_job()
        if job is not None:
            try:
                await in_worker(None, job.write)
            except OSError as exc:
                self._snapshot_failed(exc)
            else:
                self.producer_state.snapshot_written(job)
        self._rolled(old, segment)

    def _activate(self, old: Segment, segment: Segment) -> None:
        old.on_inactive()
        segment.next_offset = old.next_offset
        self._add_segment(segment)

    def _roll_failed(self, exc: OSError) -> KafkaStorageError:
        # No descriptor or no room for the new files: Kafka's KafkaStorageException
        # ("Error while rolling log segment"); the old segment stays active.
        emit("log_roll_failed", topic=self.topic, partition=self.partition,
             segment=self.log_end_offset, error=str(exc))
        return KafkaStorageError(f"Error while rolling log segment for {self.topic}-"
                                 f"{self.partition} in dir {self.directory.parent}: {exc}")

    def _snapshot_failed(self, exc: OSError) -> None:
        emit("log_flush_failed", topic=self.topic, partition=self.partition,
             error=f"producer snapshot: {exc}")

    def _rolled(self, old: Segment, segment: Segment) -> None:
        emit("log_segment_rolled", topic=self.topic, partition=self.partition,
             segment=segment.base_offset, previous_size=old.size)

    # ------------------------------------------------------------------------------ flush
    async def flush(self) -> None:
        """fsync every segment with unflushed data, off the event loop; then advance the
        recovery point (everything below it survives a crash and is not rescanned)."""
        async with self._flush_lock:
            target = self.log_end_offset
            segments = self._unflushed_segments()
            if not segments:
                return
            messages = self.unflushed_messages
            try:
                await trio.to_thread.run_sync(_fsync_all, segments)
            except OSError as exc:
                emit("log_flush_failed", topic=self.topic, partition=self.partition,
                     error=str(exc))
                raise KafkaStorageError(f"fsync failed: {exc}") from exc
            self.recovery_point = max(self.recovery_point, target)
            self.unflushed_messages = max(0, self.unflushed_messages - messages)
            self.last_flush_ms = now_ms()

    def flush_sync(self) -> None:
        """:meth:`flush` in the caller's thread (at close): as Kafka's ``flush``, only the
        segments past the recovery point, nothing when all was flushed."""
        _fsync_all(self._unflushed_segments())
        self.recovery_point = self.log_end_offset
        self.unflushed_messages = 0
        self.last_flush_ms = now_ms()

    def _unflushed_segments(self) -> list[Segment]:
        """The segments holding data past the recovery point (none when all was flushed)."""
        if self.log_end_offset <= self.recovery_point and not self.unflushed_messages:
            return []
        return [s for s in self.segments if s.next_offset > self.recovery_point
                or s is self.active]

    # ------------------------------------------------------------------------------- read
    def segment_for(self, offset: int) -> Segment:
        slot = bisect.bisect_right(self._bases, offset) - 1
        return self.segments[max(slot, 0)]

    @overload
    def read(self, offset: int, max_bytes: int, *, min_one_batch: bool = True,
             region: Literal[False] = False) -> ReadResult: ...

    @overload
    def read(self, offset: int, max_bytes: int, *, min_one_batch: bool = True,
             region: bool) -> ReadResult | RegionReadResult: ...

    def read(self, offset: int, max_bytes: int, *, min_one_batch: bool = True,
             region: bool = False) -> ReadResult | RegionReadResult:
        """Whole batches starting with the one holding ``offset``, from one segment (and the
        next ones when all it has left are compaction's record-less batches); with
        ``region``, left in the file as a :class:`SegmentRegion` (zero-copy fetch)."""
        end = self.log_end_offset
        if offset < self.log_start_offset or offset > end:
            raise OffsetOutOfRange(
                f"Offset {offset} is out of range for partition {self.topic}-{self.partition}: "
                f"log start {self.log_start_offset}, log end {end}")
        records: bytes | SegmentRegion = b""
        skipped = b""
        if offset < end:
            slot = bisect.bisect_right(self._bases, offset) - 1
            while slot < len(self.segments):
                segment = self.segments[slot]
                position = segment.find_position(offset)
                if position is not None:
                    if region:
                        records = segment.read_region(position, max_bytes,
                                                      min_one_batch) or b""
                    else:
                        records = segment.read(position, max_bytes, min_one_batch)
                    empties = _only_empty_batches(segment, position, records)
                    if empties is None or slot + 1 == len(self.segments) \
                            or len(empties) >= max_bytes:
                        break
                    # The rest of this segment is record-less batches the cleaner kept: read
                    # on into the next segment in the same answer, or a client sees nothing
                    # but empty batches fetch after fetch (librdkafka gives up after ten,
                    # "might be too large to fetch"). Kafka's cleaner leaves no such segments.
                    if isinstance(records, SegmentRegion):
                        records.release()
                    skipped += empties
                    max_bytes -= len(empties)
                    records = b""
                    offset = segment.next_offset
                slot += 1
        if skipped:
            if isinstance(records, SegmentRegion):
                found = records
                try:
                    records = found.read()
                finally:
                    found.release()
            records = skipped + records
        if region:
            return RegionReadResult(records, end, self.log_start_offset, self.last_stable_offset)
        assert isinstance(records, bytes)
        return ReadResult(records, end, self.log_start_offset, self.last_stable_offset)

    def iter_headers(self, start_offset: int) -> Iterator[rb.BatchHeader]:
        """Headers of every batch ending after ``start_offset`` (cold paths)."""
        slot = max(bisect.bisect_right(self._bases, start_offset) - 1, 0)
        for segment in self.segments[slot:]:
            position = segment.find_position(start_offset)
            if position is None:
                continue
            for _, header in segment.iter_headers(position):
                yield header

    # -------------------------------------------------------------------------- list offset
    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """The first record with a timestamp at or after ``timestamp``: ``(offset, ts)``."""
        for segment in self.segments:
            if segment.max_timestamp < timestamp:
                continue
            start = max(segment.time_index.lookup(timestamp), self.log_start_offset)
            position = segment.find_position(start)
            while position is not None and position < segment.size:
                header = rb.decode_header(segment.pread(rb.HEADER_SIZE, position))
                # A batch left without records by compaction keeps its max timestamp but has
                # no record to answer with: the search goes on, as in Kafka.
                if header.max_timestamp >= timestamp and header.record_count:
                    found = self._record_at_or_after(segment, position, header, timestamp,
                                                     self.log_start_offset)
                    if found is not None:
                        return found
                position += header.size
        return None

    def _record_at_or_after(self, segment: Segment, position: int, header: rb.BatchHeader,
                            timestamp: int, floor: int) -> tuple[int, int] | None:
        """The batch's first record at or after ``timestamp`` and offset ``floor``; None when
        it has none (its records that qualify lie below the floor, the log start: the search
        goes on, as Kafka's ``LogSegment.findOffsetByTimestamp``)."""
        if not header.log_append_time:
            try:
                for record in rb.decode_records(segment.pread(header.size, position),
                                                self.decompressed_limit):
                    if record.timestamp >= timestamp and record.offset >= floor:
                        return record.offset, record.timestamp
                return None
            except rb.RecordBatchError:
                pass  # undecodable since (a lower max.message.bytes): as LogAppendTime
        # The batch's granularity: its first offset at or past the floor, its max timestamp.
        return max(header.base_offset, floor), header.max_timestamp

    def max_timestamp_offset(self) -> tuple[int, int]:
        """Offset and timestamp of the record with the largest timestamp (KIP-734)."""
        best: Segment | None = None
        for segment in self.segments:
            if segment.max_timestamp >= 0 and (best is None
                                               or segment.max_timestamp > best.max_timestamp):
                best = segment
        if best is None:
            return -1, -1
        target = best.max_timestamp
        position = best.find_position(best.offset_of_max_timestamp)
        if position is not None:
            header = rb.decode_header(best.pread(rb.HEADER_SIZE, position))
            # Kafka's batch.offsetOfMaxTimestamp: the record's offset, below the log start
            # or not (UnifiedLog.fetchOffsetByTimestamp reads the segment's maximum so far).
            found = self._record_at_or_after(best, position, header, target, 0)
            if found is not None:
                return found
        return best.offset_of_max_timestamp, target

    # ---------------------------------------------------------------------------- retention
    def delete_records_before(self, offset: int, *, limit: int | None = None) -> int:
        """DeleteRecords: move the log start offset up to ``offset`` (-1: the high watermark).

        As Kafka's ``Partition.deleteRecordsOnLeader``: a negative offset or one past the high
        watermark is OFFSET_OUT_OF_RANGE; a lower offset than the current start changes nothing.
        Whole segments below the new start go at once (Kafka's retention pass does it a little
        later); at most ``limit`` of them here, the rest by :meth:`delete_breached_segments`.
        Returns the new log start offset (the response's low watermark); the caller persists
        it.
        """
        if not self.config.delete_enabled:
            raise PolicyViolation(
                f"Records of partition {self.topic}-{self.partition} can not be deleted due to "
                "the configured policy")
        target = self.high_watermark if offset == -1 else offset
        if target < 0 or target > self.high_watermark:
            raise OffsetOutOfRange(
                f"Cannot increment the log start offset to {target} of partition "
                f"{self.topic}-{self.partition} since it is larger than the high watermark "
                f"{self.high_watermark}" if target >= 0 else
                f"The offset {offset} for partition {self.topic}-{self.partition} is not valid")
        if target > self.log_start_offset:
            self.log_start_offset = target
            self.producer_state.on_log_start_advanced(target)
            self.txn_index.on_log_start_advanced(target)
            emit("log_start_offset_advanced", topic=self.topic, partition=self.partition,
                 log_start_offset=target, reason="delete_records")
            self.delete_breached_segments(limit)
        return self.log_start_offset

    def delete_breached_segments(self, limit: int | None = None,
                                 retired: list[Path] | None = None) -> int:
        """Delete (at most ``limit`` of) the segments wholly below the log start offset;
        how many were deleted. ``retired``: see :meth:`delete_old_segments`."""
        return self._delete_segments(_capped(self._breached_by_start(), limit),
                                     "log_start_offset", retired)

    def _breached_by_start(self) -> int:
        """How many leading segments lie wholly below the log start offset (Kafka's
        ``deleteLogStartOffsetBreachedSegments``: the next segment starts at or below it)."""
        count = 0
        for later in self.segments[1:]:
            if later.base_offset > self.log_start_offset:
                break
            count += 1
        return count

    def delete_old_segments(self, now: int, limit: int | None = None,
                            retired: list[Path] | None = None) -> int:
        """Kafka's retention: drop the oldest segments past ``retention.ms``, while the log
        exceeds ``retention.bytes``, or wholly below the log start offset (DeleteRecords).
        At most ``limit`` segments go in one call (the caller yields between calls).
        Returns the number of segments deleted. With ``retired``, their files are only
        renamed (:meth:`Segment.retire`) and the renamed paths added there for the caller to
        unlink off the event loop; else they are unlinked at once."""
        config = self.config
        if not config.delete_enabled:
            return 0
        deletable = self._breached_by_start()
        if config.retention_ms >= 0:
            by_time = 0
            for segment in self.segments:
                if segment is self.active and segment.size == 0:
                    break
                largest = segment.max_timestamp if segment.max_timestamp >= 0 else \
                    _mtime_ms(segment)
                if now - largest <= config.retention_ms:
                    break
                by_time += 1
            deletable = max(deletable, by_time)
        if config.retention_bytes >= 0:
            excess = self.size_bytes - config.retention_bytes
            by_size = 0
            for segment in self.segments:
                if segment.size == 0 or excess - segment.size < 0:
                    break
                excess -= segment.size
                by_size += 1
            deletable = max(deletable, by_size)
        return self._delete_segments(_capped(deletable, limit), "retention", retired)

    def _delete_segments(self, deletable: int, reason: str,
                         retired: list[Path] | None = None) -> int:
        if deletable == 0:
            return 0
        if deletable >= len(self.segments):
            self.roll()
        doomed = self.segments[:deletable]
        del self.segments[:deletable]
        del self._bases[:deletable]
        self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
        self.producer_state.on_log_start_advanced(self.log_start_offset)
        self.txn_index.on_log_start_advanced(self.log_start_offset)
        for segment in doomed:
            if retired is None:
                segment.delete()
            else:
                retired += segment.retire()
            emit("log_segment_deleted", topic=self.topic, partition=self.partition,
                 segment=segment.base_offset, size=segment.size, reason=reason)
        return len(doomed)

    def replace_segments(self, old: list[Segment], new: Segment) -> None:
        """Put ``new`` (a cleaned segment) in place of the adjacent segments ``old``, which
        the caller found still there (:meth:`has_segments`) with no await since."""
        start = self.segments.index(old[0])
        self.segments[start:start + len(old)] = [new]
        self._bases = [s.base_offset for s in self.segments]

    def has_segments(self, old: list[Segment]) -> bool:
        """Are ``old`` still adjacent closed segments of this log?"""
        if not old or old[0] not in self.segments:
            return False
        start = self.segments.index(old[0])
        return (self.segments[start:start + len(old)] == old
                and start + len(old) < len(self.segments))

    # ------------------------------------------------------------------------------ close
    def close(self) -> None:
        self.closed = True
        for segment in self.segments:
            segment.close()

    def write_snapshot(self) -> None:
        self._state_at_log_end()
        self.producer_state.write_snapshot()

    def _snapshot_job(self) -> SnapshotJob | None:
        self._state_at_log_end()
        return self.producer_state.snapshot_job()

    def _state_at_log_end(self) -> None:
        """Before a snapshot: the producer state as of the log end. An aborted transaction
        only in memory (its .txnindex append failed) is written first: a snapshot past its
        marker would keep the next start from replaying it."""
        self.txn_index.write_unwritten()
        self.producer_state.map_end_offset = self.log_end_offset

    def delete_files(self) -> None:
        self.close()
        shutil.rmtree(self.directory, ignore_errors=True)


def _capped(count: int, limit: int | None) -> int:
    return count if limit is None else min(count, limit)


def _only_empty_batches(segment: Segment, position: int, records: bytes | SegmentRegion
                        ) -> bytes | None:
    """The bytes of ``records`` if they are the whole rest of ``segment`` and nothing but
    record-less batches (compaction's markers, one header each), else None. Cheap when not:
    a length check decides for almost every read."""
    size = records.size if isinstance(records, SegmentRegion) else len(records)
    if not size or size % rb.HEADER_SIZE or position + size != segment.size:
        return None
    data = records if isinstance(records, bytes) else segment.pread(size, position)
    for start in range(0, size, rb.HEADER_SIZE):
        header = rb.decode_header(data, start)
        if header.size != rb.HEADER_SIZE or header.record_count:
            return None
    return data


def _fsync_all(segments: list[Segment]) -> None:
    for segment in segments:
        segment.fsync()
    # Newly created segment files must survive too: sync their directory entry.
    if segments:
        fd = os.open(segments[0].directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _mtime_ms(segment: Segment) -> int:
    try:
        return int(os.fstat(segment.fd).st_mtime * 1000)
    except OSError:
        return now_ms()
