"""Log compaction (Kafka's LogCleaner): the offset map, the record filter and the copying.

Nothing here awaits: :mod:`.log_cleaner` owns the schedule (Trio tasks), picks a log, takes a
:class:`CleanPlan` snapshot on the event loop, runs :func:`build_offset_map` and
:func:`clean_group` in a worker thread, then installs each cleaned segment with
:func:`install_cleaned` back on the event loop.

A clean, as Kafka's:

1. **Map** the dirty section (from the cleaner checkpoint to the first uncleanable offset): key
   hash (MD5, 16 bytes) to the newest offset, in an open-addressing table of fixed size (Kafka's
   ``SkimpyOffsetMap``, 24 bytes a slot), bounded by ``log.cleaner.dedupe.buffer.size``. When
   the table is full, mapping stops at a segment boundary and the rest waits for the next clean.
2. **Copy** every closed segment below the mapped end, in groups of adjacent segments that fit
   in one segment, into ``<base>.log.cleaned`` (with its ``.index.cleaned`` and
   ``.timeindex.cleaned``), keeping a record only if it is the newest of its key (offset at or
   above the map's), it has a key, and (tombstones) its batch's delete horizon has not passed.
   Batches are rewritten as Kafka's ``MemoryRecords.filterTo``: same base offset, last offset
   delta, producer id/epoch, base sequence and leader epoch; a batch whose records all went is
   dropped, unless it is its producer's last batch (kept as an empty header, so idempotent
   producer state survives a reload). Records stay bytes: only each record's key, value-null
   flag and timestamp delta are read; compressed payloads (every codec, through
   :mod:`trio_broker.protocol.compression`) are decompressed and compressed again with their
   codec; control batches, and a batch past the decompression cap (only after a lower
   ``max.message.bytes``), are kept as they are.
3. **Swap** (crash-safe, Kafka's suffix protocol): the ``.cleaned`` files are fsynced and
   renamed to ``.swap`` (the commit point), the replaced segments are deleted, the ``.swap``
   files renamed to their final names. At start-up (:func:`recover_swaps`) ``.cleaned`` files
   are deleted (the clean never happened) and ``.swap`` files completed (the clean happened).

Tombstones follow KIP-534: the first clean that keeps a tombstone stamps its batch with a
delete horizon (the batch's base timestamp becomes ``now + delete.retention.ms``, attribute bit
0x40, record timestamp deltas rewritten so record timestamps do not change); a later clean
after the horizon drops it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import struct
import time
from array import array
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import attrs

from ..observability.log import emit
from ..protocol import compression
from ..protocol import records as rb
from .segment import Segment, segment_name

#: Kafka's DefaultRecordBatch.DELETE_HORIZON_FLAG_MASK.
DELETE_HORIZON_BIT = 0x40
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
#: Kafka's SkimpyOffsetMap: a 16-byte MD5 digest and an 8-byte offset a slot, at most 90% full.
MAP_ENTRY_BYTES = 24
MAP_LOAD_FACTOR = 0.9
#: Test-only fault hook: SIGKILL this process at the named point of a swap.
FAULT_ENV = "TRIO_BROKER_CLEANER_FAULT"
_READ_CHUNK = 1 << 20
_HEADER = struct.Struct(">qiibIhiqqqhii")
_U32 = struct.Struct(">I")


class CleanerError(Exception):
    """A log cannot be cleaned (the offset map cannot hold one dirty segment)."""


class _Breather:
    """Called once a batch by the worker thread: every millisecond of work it lets go of the
    GIL (``time.sleep(0)``) so the event loop thread, if it waits for it, runs at once
    instead of after the 5 ms switch interval (or several, on a busy machine)."""

    def __init__(self) -> None:
        self._last = time.perf_counter()

    def __call__(self) -> None:
        now = time.perf_counter()
        if now - self._last > 0.001:
            time.sleep(0)
            self._last = time.perf_counter()


def _fault(point: str) -> None:
    """Kill the process at ``point`` when the test-only fault hook names it."""
    if os.environ.get(FAULT_ENV) == point:
        os.kill(os.getpid(), signal.SIGKILL)


# ------------------------------------------------------------------------------ offset map
class OffsetMap:
    """Key hash to newest offset, in fixed memory (Kafka's ``SkimpyOffsetMap``): linear
    probing over ``slots`` 16-byte MD5 digests and their offsets. Digest collisions (2^-128)
    are accepted as Kafka accepts them."""

    def __init__(self, slots: int) -> None:
        self.slots = max(slots, 16)
        self.capacity = int(self.slots * MAP_LOAD_FACTOR)
        self._digests = bytearray(16 * self.slots)
        self._offsets = array("q", bytes(8 * self.slots))
        self._used = bytearray(self.slots)
        self.size = 0

    @property
    def full(self) -> bool:
        return self.size >= self.capacity

    def _slot(self, digest: bytes) -> int:
        slot = int.from_bytes(digest[:8], "big") % self.slots
        digests, used = self._digests, self._used
        while used[slot] and digests[16 * slot:16 * slot + 16] != digest:
            slot = (slot + 1) % self.slots
        return slot

    def put(self, key: bytes, offset: int) -> None:
        digest = hashlib.md5(key, usedforsecurity=False).digest()
        slot = self._slot(digest)
        if not self._used[slot]:
            self._used[slot] = 1
            self._digests[16 * slot:16 * slot + 16] = digest
            self.size += 1
        self._offsets[slot] = offset

    def get(self, key: bytes) -> int:
        """The newest mapped offset of ``key``, or -1."""
        slot = self._slot(hashlib.md5(key, usedforsecurity=False).digest())
        return self._offsets[slot] if self._used[slot] else -1


def map_slots(dedupe_buffer_size: int, threads: int, records_hint: int) -> int:
    """Slots of one cleaner's map: its share of the buffer, or less when the dirty section
    cannot need that many (the table is allocated per clean)."""
    bound = dedupe_buffer_size // max(threads, 1) // MAP_ENTRY_BYTES
    wanted = int(max(records_hint, 1) / MAP_LOAD_FACTOR) + 16
    return max(16, min(bound, wanted))


# ------------------------------------------------------------------------- record parsing
def _varint(data: bytes | memoryview, at: int) -> tuple[int, int]:
    raw = shift = 0
    while True:
        byte = data[at]
        at += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), at
        shift += 7
        if shift > 63:
            raise rb.RecordBatchError("corrupt_message", "bad varint in record")


@attrs.frozen
class RecordSpan:
    """Where one record lies in a (decompressed) records payload, and what compaction reads."""

    start: int  # the record's length varint
    end: int
    timestamp_delta: int
    after_timestamp: int  # first byte after the timestamp delta (the offset delta)
    offset_delta: int
    key: bytes | None
    tombstone: bool


def iter_records(payload: bytes | memoryview, count: int) -> Iterator[RecordSpan]:
    """Every record of a records payload, reading only lengths, deltas, key and value length.

    One-byte varints (the common case for small records) are decoded inline."""
    at = 0
    size = len(payload)
    try:
        for _ in range(count):
            start = at
            byte = payload[at]
            if byte < 0x80:
                length, at = (byte >> 1) ^ -(byte & 1), at + 1
            else:
                length, at = _varint(payload, at)
            end = at + length
            if length < 0 or end > size:
                raise rb.RecordBatchError("corrupt_message", "record runs past the batch")
            byte = payload[at + 1]
            if byte < 0x80:
                ts_delta, after_ts = (byte >> 1) ^ -(byte & 1), at + 2
            else:
                ts_delta, after_ts = _varint(payload, at + 1)
            byte = payload[after_ts]
            if byte < 0x80:
                offset_delta, at = (byte >> 1) ^ -(byte & 1), after_ts + 1
            else:
                offset_delta, at = _varint(payload, after_ts)
            byte = payload[at]
            if byte < 0x80:
                key_length, at = (byte >> 1) ^ -(byte & 1), at + 1
            else:
                key_length, at = _varint(payload, at)
            key = None
            if key_length >= 0:
                key = bytes(payload[at:at + key_length])
                at += key_length
            yield RecordSpan(start, end, ts_delta, after_ts, offset_delta, key,
                             payload[at] == 1)  # value length -1 is the one-byte varint 1
            at = end
    except IndexError:
        raise rb.RecordBatchError("corrupt_message", "record runs past the batch") from None


def _payload(batch: bytes | memoryview, header: rb.BatchHeader, max_decompressed: int
             ) -> bytes | memoryview | None:
    """The records payload of a stored batch, or None when it decompresses past the cap (it
    was accepted under a higher ``max.message.bytes``: kept as it is, never lost)."""
    try:
        return compression.decompress(header.compression,
                                      memoryview(batch)[rb.HEADER_SIZE:header.size],
                                      max_decompressed)
    except compression.CompressionError as exc:
        if exc.too_large:
            return None
        raise rb.RecordBatchError("corrupt_message", str(exc)) from None


def batch_has_keyless_record(data: bytes | bytearray | memoryview, position: int,
                             header: rb.BatchHeader,
                             max_decompressed: int = rb.DEFAULT_DECOMPRESSED_LIMIT) -> bool:
    """Produce into a compacted topic: does the batch hold a record without a key? (Compressed
    records are decompressed, at most ``max_decompressed`` bytes: more is CORRUPT_MESSAGE.)"""
    batch = memoryview(data)[position:position + header.size]
    return payload_has_keyless_record(rb.records_payload(batch, header, max_decompressed), header)


def payload_has_keyless_record(payload: bytes | memoryview, header: rb.BatchHeader
                               ) -> bool:
    """As :func:`batch_has_keyless_record`, given the batch's records already decompressed."""
    return any(span.key is None for span in iter_records(payload, header.record_count))


# ---------------------------------------------------------------------------- the filter
@attrs.define
class CleanStats:
    """Counts of one clean (Kafka's CleanerStats)."""

    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_removed: int = 0
    tombstones_retained: int = 0
    #: The earliest delete horizon of a tombstone still kept (-1: none).
    earliest_horizon: int = -1

    def kept_tombstone(self, horizon: int) -> None:
        self.tombstones_retained += 1
        if self.earliest_horizon < 0 or horizon < self.earliest_horizon:
            self.earliest_horizon = horizon


def _finish(out: bytearray) -> bytes:
    _U32.pack_into(out, rb.CRC_OFFSET, rb.compute_crc(out))
    return bytes(out)


def empty_batch(header: rb.BatchHeader, *, keep_producer: bool = True) -> bytes:
    """Kafka's ``DefaultRecordBatch.writeEmptyHeader``: the batch's offsets, producer and
    timestamps with no records."""
    attributes = header.attributes & (rb.TIMESTAMP_TYPE_BIT | (
        rb.TRANSACTIONAL_BIT if keep_producer else 0))
    out = bytearray(rb.HEADER_SIZE)
    _HEADER.pack_into(
        out, 0, header.base_offset, rb.MIN_BATCH_LENGTH, header.partition_leader_epoch,
        rb.MAGIC, 0, attributes, header.last_offset_delta, header.max_timestamp,
        header.max_timestamp,
        header.producer_id if keep_producer else rb.NO_PRODUCER_ID,
        header.producer_epoch if keep_producer else rb.NO_PRODUCER_EPOCH,
        header.base_sequence if keep_producer else rb.NO_SEQUENCE, 0)
    return _finish(out)


def filter_batch(batch: bytes, header: rb.BatchHeader, offset_map: OffsetMap, *, now: int,
                 delete_retention_ms: int, producer_last_offsets: Mapping[int, int],
                 stats: CleanStats,
                 max_decompressed: int = rb.DEFAULT_DECOMPRESSED_LIMIT) -> bytes | None:
    """The batch as the cleaned log keeps it: ``batch`` itself, a rewritten batch, or None.

    ``producer_last_offsets``: each producer id's last batch's last offset (Kafka keeps that
    batch, empty if need be, so the producer's sequence survives a reload).
    """
    payload = None if header.is_control else _payload(batch, header, max_decompressed)
    if payload is None:
        return batch  # control batches (and batches past the cap) are kept as they are
    has_horizon = bool(header.attributes & DELETE_HORIZON_BIT)
    tombstones_expire = has_horizon and now >= header.base_timestamp
    retained: list[RecordSpan] = []
    tombstones = 0
    for span in iter_records(payload, header.record_count):
        stats.records_read += 1
        if span.key is None:
            continue  # Kafka's cleaner drops records without a key from a compacted log
        if header.base_offset + span.offset_delta < offset_map.get(span.key):
            continue  # a newer record with this key exists
        if span.tombstone:
            if tombstones_expire:
                continue
            tombstones += 1
        retained.append(span)
    stats.records_removed += header.record_count - len(retained)
    horizon = header.base_timestamp if has_horizon else now + delete_retention_ms
    if tombstones:
        for _ in range(tombstones):
            stats.kept_tombstone(horizon)
    if not retained:
        if header.has_producer_id and producer_last_offsets.get(header.producer_id) \
                == header.last_offset:
            return empty_batch(header)
        return None
    stamp = tombstones > 0 and not has_horizon
    if len(retained) == header.record_count and not stamp:
        return batch
    base_timestamp = horizon if stamp else header.base_timestamp
    body = bytearray()
    max_timestamp = rb.NO_TIMESTAMP
    for span in retained:
        timestamp = header.base_timestamp + span.timestamp_delta
        max_timestamp = max(max_timestamp, timestamp)
        if not stamp:
            body += payload[span.start:span.end]
            continue
        attributes_at = _length_end(payload, span.start)
        record = bytearray(payload[attributes_at:attributes_at + 1])
        rb.write_varint(record, timestamp - base_timestamp)
        record += payload[span.after_timestamp:span.end]
        rb.write_varint(body, len(record))
        body += record
    if header.log_append_time:
        max_timestamp = header.max_timestamp
    attributes = header.attributes | (DELETE_HORIZON_BIT if stamp else 0)
    # Kafka's filterTo writes the retained records with the batch's own codec.
    records_bytes: bytes | bytearray = (compression.compress(header.compression, body)
                                        if header.compression else body)
    out = bytearray(rb.HEADER_SIZE) + records_bytes
    _HEADER.pack_into(
        out, 0, header.base_offset, len(out) - rb.LOG_OVERHEAD, header.partition_leader_epoch,
        rb.MAGIC, 0, attributes, header.last_offset_delta, base_timestamp, max_timestamp,
        header.producer_id, header.producer_epoch, header.base_sequence, len(retained))
    return _finish(out)


def _length_end(payload: bytes | memoryview, start: int) -> int:
    """First byte after the record length varint at ``start``."""
    _, at = _varint(payload, start)
    return at


# --------------------------------------------------------------------------------- plans
@attrs.frozen
class SourceSegment:
    """A closed segment as the cleaner thread reads it (by path, through its own descriptor,
    so retention closing the broker's descriptor cannot disturb it)."""

    base_offset: int
    path: Path
    size: int
    next_offset: int


@attrs.frozen
class CleanPlan:
    """What one clean works on, snapshot on the event loop."""

    topic: str
    partition: int
    directory: Path
    first_dirty: int
    #: Segments from the log start to the first uncleanable offset, oldest first.
    segments: tuple[SourceSegment, ...]
    now: int
    delete_retention_ms: int
    segment_bytes: int
    index_max_bytes: int
    index_interval_bytes: int
    producer_last_offsets: Mapping[int, int]
    map_slots: int
    #: ``(producer_id, first_offset, last_offset)`` of aborted transactions: their records
    #: are left out of the offset map, so they never make a committed record obsolete.
    aborted: tuple[tuple[int, int, int], ...] = ()
    #: Cap on one batch's decompressed records (from the topic's ``max.message.bytes``).
    max_decompressed: int = rb.DEFAULT_DECOMPRESSED_LIMIT


def iter_file_batches(path: Path, size: int) -> Iterator[tuple[bytes, rb.BatchHeader]]:
    """Every batch of the first ``size`` bytes of a segment file, read in 1 MiB chunks."""
    fd = os.open(path, os.O_RDONLY)
    try:
        position = 0
        while position + rb.HEADER_SIZE <= size:
            chunk = os.pread(fd, min(_READ_CHUNK, size - position), position)
            _, length = rb.peek_offset_and_length(chunk)
            if length + rb.LOG_OVERHEAD > len(chunk):
                chunk = os.pread(fd, length + rb.LOG_OVERHEAD, position)
            consumed = 0
            for at, batch_size in rb.iter_batches(chunk):
                batch = chunk[at:at + batch_size]
                yield batch, rb.decode_header(batch)
                consumed = at + batch_size
            if consumed == 0:
                return  # a torn tail: recovery's business, not the cleaner's
            position += consumed
    finally:
        os.close(fd)


def build_offset_map(plan: CleanPlan) -> tuple[OffsetMap, int]:
    """Map the dirty section; returns the map and the offset it is complete up to (a segment
    base: records from there on are left for the next clean). Runs in a worker thread."""
    offset_map = OffsetMap(plan.map_slots)
    dirty = [s for s in plan.segments if s.base_offset >= plan.first_dirty]
    end = plan.segments[-1].next_offset if plan.segments else plan.first_dirty
    breathe = _Breather()
    for index, segment in enumerate(dirty):
        for batch, header in iter_file_batches(segment.path, segment.size):
            breathe()
            if header.is_control or (header.is_transactional and _aborted(plan, header)):
                continue
            payload = _payload(batch, header, plan.max_decompressed)
            if payload is None:
                continue
            for span in iter_records(payload, header.record_count):
                if span.key is not None:
                    offset_map.put(span.key, header.base_offset + span.offset_delta)
            if offset_map.full:
                break
        if offset_map.full:
            # Entries of a partly mapped segment are newer than anything below it, so they
            # only ever make older records obsolete: keeping them is safe.
            if index == 0:
                raise CleanerError(
                    f"the offset map ({offset_map.slots} slots) cannot hold one dirty segment "
                    f"of {plan.topic}-{plan.partition}: raise log.cleaner.dedupe.buffer.size")
            end = segment.base_offset
            break
    return offset_map, end


def _aborted(plan: CleanPlan, header: rb.BatchHeader) -> bool:
    pid, offset = header.producer_id, header.base_offset
    return any(p == pid and first <= offset <= last for p, first, last in plan.aborted)


def group_segments(segments: Sequence[SourceSegment], max_size: int
                   ) -> list[list[SourceSegment]]:
    """Kafka's ``groupSegmentsBySize``: adjacent segments whose total size fits in one segment
    and whose offsets fit one index (relative offsets are 32-bit)."""
    groups: list[list[SourceSegment]] = []
    rest = list(segments)
    while rest:
        group = [rest.pop(0)]
        size = group[0].size
        while rest and size + rest[0].size <= max_size \
                and rest[0].next_offset - 1 - group[0].base_offset <= rb.INT32_MAX:
            size += rest[0].size
            group.append(rest.pop(0))
        groups.append(group)
    return groups


def cleaned_paths(directory: Path, base: int, suffix: str) -> list[Path]:
    """The index files first and the log last: the log's rename is the commit of a step."""
    name = segment_name(base)
    return [directory / f"{name}.index{suffix}", directory / f"{name}.timeindex{suffix}",
            directory / f"{name}.log{suffix}"]


def clean_group(plan: CleanPlan, group: Sequence[SourceSegment], offset_map: OffsetMap,
                stats: CleanStats) -> Path:
    """Copy ``group`` into ``<base>.log.cleaned`` (indexes included, fsynced); returns the
    log path. Runs in a worker thread.

    The group's last batch is always represented (as an empty header if all its records went),
    so the cleaned segment's offset range is the group's: crash recovery of a ``.swap`` knows
    exactly which old segments it replaces.
    """
    base = group[0].base_offset
    for path in cleaned_paths(plan.directory, base, CLEANED_SUFFIX):
        path.unlink(missing_ok=True)
    cleaned = Segment(plan.directory, base, index_max_bytes=plan.index_max_bytes,
                      index_interval_bytes=plan.index_interval_bytes, created_ms=plan.now,
                      suffix=CLEANED_SUFFIX)
    try:
        last: rb.BatchHeader | None = None
        wrote_last = False
        breathe = _Breather()
        for source in group:
            stats.bytes_read += source.size
            out = bytearray()
            positions: list[tuple[int, rb.BatchHeader]] = []
            for batch, header in iter_file_batches(source.path, source.size):
                breathe()
                kept = filter_batch(batch, header, offset_map, now=plan.now,
                                    delete_retention_ms=plan.delete_retention_ms,
                                    producer_last_offsets=plan.producer_last_offsets,
                                    stats=stats, max_decompressed=plan.max_decompressed)
                last, wrote_last = header, kept is not None
                if kept is not None:
                    positions.append((len(out), rb.decode_header(kept)))
                    out += kept
            if positions:
                cleaned.append(out, positions)
        if last is not None and not wrote_last:
            marker = empty_batch(last, keep_producer=False)
            cleaned.append(marker, [(0, rb.decode_header(marker))])
        cleaned.on_inactive()
        cleaned.fsync()
        stats.bytes_written += cleaned.size
        path = cleaned.log_path
    finally:
        cleaned.close()
    # Kafka gives the cleaned segment the last replaced one's modification time (time-based
    # retention of compact,delete logs falls back to it for segments without timestamps).
    with contextlib.suppress(OSError):
        stat = os.stat(group[-1].path)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    return path


def discard_cleaned(directory: Path, base: int) -> None:
    for path in cleaned_paths(directory, base, CLEANED_SUFFIX):
        with contextlib.suppress(OSError):
            path.unlink()


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def swap_in(directory: Path, base: int, old: Sequence[Segment]) -> list[Path]:
    """The swap of Kafka's ``replaceSegments`` (synchronous, on the event loop: the caller
    replaces the segments in memory in the same step, so no reader sees a half-swapped log).

    ``.cleaned`` to ``.swap`` (the log file last: its ``.swap`` commits the clean), the
    replaced segments renamed ``.deleted`` (:meth:`Segment.retire`), ``.swap`` to the final
    names (the log file last again). Returns the ``.deleted`` files, for the caller to unlink
    off the event loop; the next start-up removes any a crash left."""
    for cleaned, swap in zip(cleaned_paths(directory, base, CLEANED_SUFFIX),
                             cleaned_paths(directory, base, SWAP_SUFFIX), strict=True):
        os.replace(cleaned, swap)
    _fault("swapped")
    retired: list[Path] = []
    for segment in old:
        retired += segment.retire()
    _fault("deleted")
    for swap, final in zip(cleaned_paths(directory, base, SWAP_SUFFIX),
                           cleaned_paths(directory, base, ""), strict=True):
        os.replace(swap, final)
    _fault("renamed")
    return retired


def _swap_end(path: Path) -> int:
    end = -1
    for _, header in iter_file_batches(path, path.stat().st_size):
        end = header.next_offset
    return end


def recover_swaps(directory: Path, topic: str, partition: int) -> None:
    """Start-up: finish or forget an interrupted clean (before the segments are loaded).

    ``.cleaned`` files were never committed: deleted. A ``<base>.log.swap`` was: every segment
    whose base offset lies in its offset range is deleted and the ``.swap`` files renamed.
    Index ``.swap`` files without a log ``.swap`` are leftovers: deleted (indexes are rebuilt).
    """
    for path in directory.glob("*" + CLEANED_SUFFIX):
        path.unlink(missing_ok=True)
    for swap in sorted(directory.glob("*.log" + SWAP_SUFFIX)):
        stem = swap.name.split(".")[0]
        if not stem.isdigit():
            continue
        base = int(stem)
        end = _swap_end(swap)
        if end <= base:
            # No batch in it: a committed clean always holds at least its group's last batch
            # (clean_group), so this is damage, not a commit. Installing it would delete the
            # segment at its base with every record in it; keep the old segments instead.
            for path in cleaned_paths(directory, base, SWAP_SUFFIX):
                path.unlink(missing_ok=True)
            emit("log_cleaning_failed", topic=topic, partition=partition,
                 error=f"{swap.name} holds no record batch: discarded, old segments kept")
            continue
        for log in directory.glob("*.log"):
            other = log.name[:-4]
            if other.isdigit() and base <= int(other) < end:
                for path in cleaned_paths(directory, int(other), ""):
                    path.unlink(missing_ok=True)
        for swapped, final in zip(cleaned_paths(directory, base, SWAP_SUFFIX),
                                  cleaned_paths(directory, base, ""), strict=True):
            if swapped.exists():
                os.replace(swapped, final)
        emit("log_cleaner_swap_recovered", topic=topic, partition=partition, segment=base,
             end_offset=end)
    for path in directory.glob("*" + SWAP_SUFFIX):
        path.unlink(missing_ok=True)
