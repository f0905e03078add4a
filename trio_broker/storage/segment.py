"""One log segment: the ``.log`` file and its sparse ``.index`` and ``.timeindex``, in Kafka's
formats.

* ``.index``: entries of (offset relative to the segment's base offset i32, file position i32),
  8 bytes each, big-endian. As in Kafka, an entry names the *last* offset of the batch that
  starts at that position, and one is written once ``index.interval.bytes`` have been appended
  since the previous one.
* ``.timeindex``: entries of (max timestamp so far i64, relative offset i32), 12 bytes, written
  with the offset index entries whenever the max timestamp grew, plus one when the segment
  stops being active.

The index files are kept in memory as arrays too (lookups never touch the disk) and appended
to with plain writes; they are not preallocated or memory-mapped, so a file's length is always
its entry count times the entry size.

All file work here is synchronous: page-cache writes and reads of a few KiB are cheaper than a
thread hop. Only ``fsync`` (which waits for the disk) is sent to a thread, by the caller.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import struct
from array import array
from collections.abc import Iterator
from pathlib import Path

from ..protocol import records as rb
from ..protocol.regions import FileRegion, RegionInvalid

INDEX_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")
_PEEK = struct.Struct(">qi")
_LAST_DELTA = struct.Struct(">i")
_PEEK_SIZE = 27  # through lastOffsetDelta
_MAX_TS_AT = rb.MAX_TIMESTAMP_OFFSET
_SCAN_CHUNK = 1 << 20
#: Kafka's suffix of a deleted segment's files until they are unlinked.
DELETED_SUFFIX = ".deleted"


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


class _Index:
    """Shared mechanics of the two index files: an append-only file mirrored in memory.

    The file is held open only while entries are being written to it: opened at the first
    write, closed when the segment is rolled (:meth:`release`). Reads come from the memory
    copy, so a partition costs one file descriptor (its active ``.log``) until it takes
    data, and an inactive segment one: Kafka's count, where the index files are memory-mapped
    and their descriptors closed. Three per segment ran a broker with a few thousand
    partitions out of descriptors (docs/decisions.md, "File descriptors")."""

    entry: struct.Struct

    def __init__(self, path: Path, max_entries: int) -> None:
        self.path = path
        self.max_entries = max(max_entries, 1)
        self._fd = -1
        #: Written since the last fsync (which may need to reopen the file).
        self._dirty = False
        # The file exists from the start: a missing index means "rebuild" at the next open.
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644))

    def _file(self) -> int:
        fd = self._fd
        if fd < 0:
            fd = self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        return fd

    def _write(self, *values: int) -> None:
        os.write(self._file(), self.entry.pack(*values))
        self._dirty = True

    def _rewrite(self, payload: bytes) -> None:
        fd = self._file()
        os.ftruncate(fd, 0)
        if payload:
            os.write(fd, payload)
        self._dirty = True

    def fsync(self) -> None:
        if not self._dirty:
            return
        if self._fd >= 0:
            os.fsync(self._fd)
        else:  # released since the write: the file's pages are synced through a new one
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self._dirty = False

    def release(self) -> None:
        """Close the file until the next write (the segment is no longer appended to)."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    close = release


class OffsetIndex(_Index):
    """The sparse offset index of one segment."""

    entry = INDEX_ENTRY

    def __init__(self, path: Path, base_offset: int, max_entries: int) -> None:
        super().__init__(path, max_entries)
        self.base_offset = base_offset
        self.offsets = array("q")  # absolute offsets
        self.positions = array("q")

    @property
    def full(self) -> bool:
        return len(self.offsets) >= self.max_entries

    def append(self, offset: int, position: int) -> None:
        self._write(offset - self.base_offset, position)
        self.offsets.append(offset)
        self.positions.append(position)

    def lookup(self, offset: int) -> int:
        """File position from which to scan for ``offset`` (the last entry at or below it)."""
        slot = bisect.bisect_right(self.offsets, offset) - 1
        return self.positions[slot] if slot >= 0 else 0

    def load(self, log_size: int) -> bool:
        """Read the file; False (and nothing loaded) if it is not a sane index for the log."""
        data = self.path.read_bytes()
        if len(data) % self.entry.size:
            return False
        offsets = array("q")
        positions = array("q")
        last_offset, last_position = self.base_offset - 1, -1
        for relative, position in self.entry.iter_unpack(data):
            offset = self.base_offset + relative
            if offset <= last_offset or position <= last_position or position >= log_size:
                return False
            offsets.append(offset)
            positions.append(position)
            last_offset, last_position = offset, position
        self.offsets, self.positions = offsets, positions
        return True

    def reset(self) -> None:
        self._rewrite(b"")
        self.offsets = array("q")
        self.positions = array("q")


class TimeIndex(_Index):
    """The sparse time index of one segment."""

    entry = TIME_ENTRY

    def __init__(self, path: Path, base_offset: int, max_entries: int) -> None:
        super().__init__(path, max_entries)
        self.base_offset = base_offset
        self.timestamps = array("q")
        self.offsets = array("q")

    @property
    def full(self) -> bool:
        return len(self.timestamps) >= self.max_entries

    def maybe_append(self, timestamp: int, offset: int) -> None:
        if self.timestamps and timestamp <= self.timestamps[-1]:
            return
        self._write(timestamp, offset - self.base_offset)
        self.timestamps.append(timestamp)
        self.offsets.append(offset)

    def lookup(self, timestamp: int) -> int:
        """An offset from which to scan for the first record at or after ``timestamp``."""
        slot = bisect.bisect_left(self.timestamps, timestamp) - 1
        return self.offsets[slot] if slot >= 0 else self.base_offset

    def load(self, next_offset: int) -> bool:
        data = self.path.read_bytes()
        if len(data) % self.entry.size:
            return False
        timestamps = array("q")
        offsets = array("q")
        for timestamp, relative in self.entry.iter_unpack(data):
            offset = self.base_offset + relative
            if (timestamps and timestamp <= timestamps[-1]) or not (
                    self.base_offset <= offset < next_offset):
                return False
            timestamps.append(timestamp)
            offsets.append(offset)
        self.timestamps, self.offsets = timestamps, offsets
        return True

    def reset(self) -> None:
        self._rewrite(b"")
        self.timestamps = array("q")
        self.offsets = array("q")


class Segment:
    """A ``.log`` file with its indexes. Mutable; owned by one :class:`PartitionLog`."""

    def __init__(self, directory: Path, base_offset: int, *, index_max_bytes: int,
                 index_interval_bytes: int, created_ms: int, suffix: str = "") -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        name = segment_name(base_offset)
        # ``suffix`` (".cleaned") names the files of a segment the log cleaner is writing.
        self.log_path = directory / f"{name}.log{suffix}"
        self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.size = os.fstat(self.fd).st_size
        # A missing index file must be rebuilt (opening creates an empty one).
        self.indexes_existed = (directory / f"{name}.index{suffix}").exists() and (
            directory / f"{name}.timeindex{suffix}").exists()
        try:
            self.offset_index = OffsetIndex(directory / f"{name}.index{suffix}", base_offset,
                                            index_max_bytes // INDEX_ENTRY.size)
            self.time_index = TimeIndex(directory / f"{name}.timeindex{suffix}", base_offset,
                                        index_max_bytes // TIME_ENTRY.size)
        except OSError:
            os.close(self.fd)  # no descriptor left behind by a segment that was not made
            raise
        #: Offset after the last batch (for the active segment: the log end offset).
        self.next_offset = base_offset
        self.max_timestamp = rb.NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset
        self.created_ms = created_ms
        #: Kafka's rollingBasedTimestamp: the first batch's max timestamp (-1: none yet).
        self.roll_base_ms = -1
        self.bytes_since_index = 0
        #: Times the file was cut short: a region read before a cut no longer names its bytes.
        self.truncations = 0
        # Fetch responses being sent from ``fd`` (SegmentRegion): a close waits for the last.
        self._regions = 0
        self._closed = False

    # ------------------------------------------------------------------------------- append
    def write(self, data: bytes | bytearray) -> None:
        """Write already-offset-assigned batches at the end; :meth:`record` or
        :meth:`record_one` accounts for them."""
        _write_all(self.fd, data, len(data))

    def append(self, data: bytes | bytearray, batches: list[tuple[int, rb.BatchHeader]]) -> None:
        """:meth:`write` and :meth:`record` (the cleaner's rewritten segments)."""
        self.write(data)
        self.record(len(data), batches)

    def record(self, size: int, batches: list[tuple[int, rb.BatchHeader]]) -> None:
        """Account for already-offset-assigned batches once their ``size`` bytes are written
        (by :meth:`write`, or by a worker thread through :func:`write_detached`); ``batches``
        are their positions in the written bytes with their headers."""
        start = self.size
        if start == 0 and batches:
            self.roll_base_ms = batches[0][1].max_timestamp
        for position, header in batches:
            self._appended(start + position, header.last_offset, header.max_timestamp,
                           header.batch_length + rb.LOG_OVERHEAD)
        self.size = start + size
        self.next_offset = batches[-1][1].next_offset

    def record_one(self, size: int, last_offset: int, max_timestamp: int) -> None:
        """:meth:`record` of one batch, given its last offset and max timestamp: the log's
        path for a batch it keeps no header of."""
        start = self.size
        if start == 0:
            self.roll_base_ms = max_timestamp
        self._appended(start, last_offset, max_timestamp, size)
        self.size = start + size
        self.next_offset = last_offset + 1

    def _appended(self, position: int, last_offset: int, max_timestamp: int, length: int
                  ) -> None:
        """Account for one batch written at ``position``: the max timestamp, and an index
        entry only every index.interval.bytes, as Kafka's LogSegment.append."""
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = last_offset
        if self.bytes_since_index > self.index_interval_bytes:
            self.offset_index.append(last_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_index = 0
        self.bytes_since_index += length

    def on_inactive(self) -> None:
        """The segment was rolled: record its final max timestamp in the time index, and let
        go of the index files (reopened only if the segment is ever rewritten)."""
        if self.max_timestamp >= 0 and (not self.time_index.timestamps
                                        or self.time_index.timestamps[-1] < self.max_timestamp):
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.offset_index.release()
        self.time_index.release()

    # --------------------------------------------------------------------------------- read
    def pread(self, size: int, position: int) -> bytes:
        return os.pread(self.fd, size, position)

    def peek(self, position: int) -> tuple[int, int, int]:
        """``(base_offset, size, next_offset)`` of the batch at ``position``."""
        head = os.pread(self.fd, _PEEK_SIZE, position)
        if len(head) < _PEEK_SIZE:
            raise EOFError(position)
        base, length = _PEEK.unpack_from(head, 0)
        (delta,) = _LAST_DELTA.unpack_from(head, 23)
        return base, length + rb.LOG_OVERHEAD, base + delta + 1

    def find_position(self, offset: int) -> int | None:
        """Position of the first batch whose last offset is at or after ``offset``."""
        position = self.offset_index.lookup(offset)
        while position < self.size:
            _, size, next_offset = self.peek(position)
            if next_offset > offset:
                return position
            position += size
        return None

    def read(self, position: int, max_bytes: int, min_one_batch: bool) -> bytes:
        """Whole batches from ``position``, at most ``max_bytes`` unless ``min_one_batch`` and
        the first batch alone is larger."""
        available = self.size - position
        if available <= 0:
            return b""
        data = os.pread(self.fd, min(max_bytes, available), position)
        end = 0
        for batch_position, size in rb.iter_batches(data):
            end = batch_position + size
        if end == 0:
            if not min_one_batch:
                return b""
            _, size, _ = self.peek(position)
            return os.pread(self.fd, size, position)
        return data[:end] if end < len(data) else data

    def read_region(self, position: int, max_bytes: int, min_one_batch: bool
                    ) -> SegmentRegion | None:
        """As :meth:`read`, but the bytes stay in the file (zero-copy fetch); None for none.

        The end is found from batch headers only: the offset index gives a batch start at or
        before the limit (entries are at most ``index.interval.bytes`` apart), and 12-byte
        header peeks walk on from there.
        """
        available = self.size - position
        if available <= 0:
            return None
        limit = position + min(max_bytes, available)
        positions = self.offset_index.positions
        slot = bisect.bisect_right(positions, limit) - 1
        end = positions[slot] if slot >= 0 and positions[slot] > position else position
        while end < self.size:
            _, size, _ = self.peek(end)
            if end + size > limit:
                break
            end += size
        if end == position:
            if not min_one_batch:
                return None
            end = position + self.peek(position)[1]
        return SegmentRegion(self, position, end - position)

    def iter_headers(self, position: int = 0) -> Iterator[tuple[int, rb.BatchHeader]]:
        """Every batch header from ``position`` (a cold path: recovery and replay)."""
        while position + rb.HEADER_SIZE <= self.size:
            header = rb.decode_header(os.pread(self.fd, rb.HEADER_SIZE, position))
            yield position, header
            position += header.size

    # ----------------------------------------------------------------------------- recovery
    def load_indexes(self, next_offset: int) -> bool:
        """Load both indexes written for a cleanly closed segment; False if either is unusable.
        ``next_offset`` bounds the offsets they may name."""
        if not self.indexes_existed:
            return False
        return self.offset_index.load(self.size) and self.time_index.load(next_offset)

    def scan_tail(self) -> bool:
        """For a trusted segment: find the end state by reading headers after the last entry.

        False when those headers do not hold up: a batch torn off or running past the file, a
        zero-filled (preallocated) or garbage tail, an offset going backwards or beyond what
        the segment can index. A clean shutdown does not explain such a tail; the caller
        recovers the segment instead (trusting it would put the log end wherever the garbage
        says, and later appends after bytes no reader can pass)."""
        if self.size >= rb.HEADER_SIZE:
            first = rb.decode_header(self.pread(rb.HEADER_SIZE, 0))
            self.roll_base_ms = first.max_timestamp
        if self.time_index.timestamps:
            self.max_timestamp = self.time_index.timestamps[-1]
            self.offset_of_max_timestamp = self.time_index.offsets[-1]
        position = self.offset_index.positions[-1] if self.offset_index.positions else 0
        expected = self.base_offset
        while position < self.size:
            if position + rb.HEADER_SIZE > self.size:
                return False
            header = rb.decode_header(os.pread(self.fd, rb.HEADER_SIZE, position))
            if (header.batch_length < rb.MIN_BATCH_LENGTH or header.magic != rb.MAGIC
                    or position + header.size > self.size
                    or self._order_problem(header, expected) is not None):
                return False
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp = header.max_timestamp
                self.offset_of_max_timestamp = header.last_offset
            self.next_offset = expected = header.next_offset
            position += header.size
        return True

    def _order_problem(self, header: rb.BatchHeader, expected: int) -> str | None:
        """Why a batch cannot follow at ``expected`` in this segment, or None: its offsets go
        backwards, or are not indexable relative to the segment's base (Kafka's
        ``ensureOffsetInRange``: the base offset field is outside the CRC, and a flipped bit
        there must not move the log end by 2^60)."""
        if header.base_offset < expected:
            return f"offset {header.base_offset} goes backwards (expected {expected})"
        if header.last_offset_delta < 0 or not (
                0 <= header.last_offset - self.base_offset <= rb.INT32_MAX):
            return f"offset {header.last_offset} is out of range for segment {self.base_offset}"
        return None

    def recover(self, expected_base: int) -> tuple[int, str | None]:
        """Validate every batch (CRC included), rebuild both indexes and truncate whatever follows
        the last valid batch. Returns ``(bytes_truncated, reason or None)``."""
        self.offset_index.reset()
        self.time_index.reset()
        self.max_timestamp = rb.NO_TIMESTAMP
        self.offset_of_max_timestamp = self.base_offset
        self.bytes_since_index = 0
        self.next_offset = self.base_offset
        valid = 0
        reason: str | None = None
        expected = expected_base
        file_size = self.size
        while valid < file_size and reason is None:
            chunk = os.pread(self.fd, max(_SCAN_CHUNK, rb.HEADER_SIZE), valid)
            if len(chunk) < rb.LOG_OVERHEAD:
                reason = "torn batch header"
                break
            _, length = _PEEK.unpack_from(chunk, 0)
            if length < rb.MIN_BATCH_LENGTH or valid + length + rb.LOG_OVERHEAD > file_size:
                reason = "torn or undersized batch"
                break
            if length + rb.LOG_OVERHEAD > len(chunk):
                chunk = os.pread(self.fd, length + rb.LOG_OVERHEAD, valid)
            consumed = 0
            for position, size in rb.iter_batches(chunk):
                batch = memoryview(chunk)[position:position + size]
                try:
                    header = rb.validate_batch(batch, from_client=False)
                except rb.RecordBatchError as exc:
                    reason = exc.message
                    break
                reason = self._order_problem(header, expected)
                if reason is not None:
                    break
                self._index_recovered(valid + position, header)
                expected = header.next_offset
                consumed = position + size
            if consumed == 0 and reason is None:
                reason = "torn batch"
            valid += consumed
        truncated = file_size - valid
        if truncated:
            self.truncations += 1
            os.ftruncate(self.fd, valid)
            self.size = valid
        # Rebuilt: let go of the index files (the next entry reopens them), else every
        # segment recovered after a crash holds three descriptors where a running one holds
        # one, and a broker that ran with 10,000 partitions could not start again.
        self.offset_index.release()
        self.time_index.release()
        return truncated, reason

    def _index_recovered(self, position: int, header: rb.BatchHeader) -> None:
        if position == 0:
            self.roll_base_ms = header.max_timestamp
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = header.last_offset
        if self.bytes_since_index > self.index_interval_bytes:
            self.offset_index.append(header.last_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_index = 0
        self.bytes_since_index += header.size
        self.next_offset = header.next_offset

    def truncate_to(self, offset: int) -> None:
        """Drop every batch at or after ``offset`` (which must be a batch boundary)."""
        position = self.find_position(offset)
        if position is None:
            return
        self.truncations += 1
        os.ftruncate(self.fd, position)
        self.size = position
        self.recover(self.base_offset)

    # ------------------------------------------------------------------------------- files
    def fsync(self) -> None:
        os.fsync(self.fd)
        self.offset_index.fsync()
        self.time_index.fsync()

    def close(self) -> None:
        """Close the files; the ``.log`` descriptor stays open while fetch responses are still
        being sent from it (SegmentRegion), and closes with the last of them."""
        if self._closed:
            return
        self._closed = True
        for close in (self.offset_index.close, self.time_index.close):
            with contextlib.suppress(OSError):
                close()
        if not self._regions:
            with contextlib.suppress(OSError):
                os.close(self.fd)

    def _region_released(self) -> None:
        self._regions -= 1
        if not self._regions and self._closed:
            with contextlib.suppress(OSError):
                os.close(self.fd)

    def delete(self) -> None:
        """Close and unlink the files at once (start-up recovery; the broker's own deletions
        :meth:`retire` and unlink off the event loop)."""
        unlink_all(self.retire())

    def retire(self) -> list[Path]:
        """Close the files and rename them ``<name>.deleted`` (Kafka's ``asyncDeleteSegment``);
        the renamed paths, for the caller to unlink off the event loop (:func:`unlink_all`).

        A rename is one metadata update; the unlink of a large file frees its blocks and cached
        pages, 50-150 ms for 256 MiB on the development machine, which on the loop would hold
        every connection. Renamed first, the names are free at once (a segment of the same base
        offset, a topic created again under the same name), and a crash before the unlink
        leaves files the next start-up removes (:meth:`PartitionLog.open`)."""
        self.close()
        retired: list[Path] = []
        for path in (self.log_path, self.offset_index.path, self.time_index.path):
            target = path.with_name(path.name + DELETED_SUFFIX)
            try:
                os.replace(path, target)
            except FileNotFoundError:  # an index never written (no entry yet)
                continue
            retired.append(target)
        return retired


class SegmentRegion(FileRegion):
    """Bytes of one segment's ``.log`` file for a Fetch response, sent with ``sendfile``.

    The region reads through the segment's own descriptor, which the segment keeps open until
    its last region is released (docs/decisions.md, "zero-copy fetch"): retention may delete
    and close the segment while the response is being sent, and the open file keeps the
    unlinked bytes readable, as Kafka's ``.deleted`` rename with ``file.delete.delay.ms`` does.
    No descriptor per region: a client that never reads the responses of Fetches naming
    thousands of partitions would otherwise hold a descriptor per partition and response,
    and run the broker out of them (docs/development.md, "Front-end probes"). A truncation
    (which could let later appends overwrite the region's positions) is detected by
    :meth:`check`, which the writer calls before each ``sendfile``; the connection is then
    closed rather than sending other bytes.
    """

    __slots__ = ("fd", "position", "size", "_segment", "_truncations")

    def __init__(self, segment: Segment, position: int, size: int) -> None:
        self.fd = segment.fd
        segment._regions += 1
        self.position = position
        self.size = size
        self._segment = segment
        self._truncations = segment.truncations

    def check(self) -> None:
        if self._segment.truncations != self._truncations:
            raise RegionInvalid(f"segment {self._segment.log_path.name} was truncated")
        if self.fd < 0:
            raise RegionInvalid("region already released")

    def read(self, offset: int = 0, size: int | None = None) -> bytes:
        self.check()
        size = self.size - offset if size is None else size
        data = os.pread(self.fd, size, self.position + offset)
        if len(data) != size:
            raise RegionInvalid(f"read {len(data)} of {size} bytes")
        return data

    def release(self) -> None:
        if self.fd >= 0:
            self.fd = -1
            self._segment._region_released()

    def __del__(self) -> None:
        # A response dropped without an explicit release (e.g. a throttled fetch's first
        # answer) must not keep the segment's descriptor open.
        self.release()


def write_detached(fd: int, data: bytes | bytearray) -> None:
    """Write ``data`` at the end of the segment open as ``fd`` through a duplicate of ``fd``,
    for a worker thread: closing the segment meanwhile (its topic deleted) cannot make the
    write land in whatever file next gets that descriptor number."""
    own = os.dup(fd)
    try:
        _write_all(own, data, len(data))
    finally:
        os.close(own)


def unlink_all(paths: list[Path]) -> None:
    """Unlink retired segment files (:meth:`Segment.retire`); a worker thread's job."""
    for path in paths:
        path.unlink(missing_ok=True)


def _write_all(fd: int, data: bytes | bytearray, size: int) -> None:
    """One write per append; a short write (a full disk, a signal) continues where it ended."""
    written = os.write(fd, data)
    if written < size:
        view = memoryview(data)
        while written < size:
            written += os.write(fd, view[written:])
