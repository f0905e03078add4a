"""Transactions in one partition's log: open transactions, the last stable offset (LSO), the
aborted-transaction index (``.txnindex``) and the control batches (COMMIT/ABORT markers).

Kafka's ``ProducerStateManager`` tracks each producer's ongoing transaction (the offset of its
first transactional batch); the LSO is the smallest such first offset (or the high watermark when
no transaction is open). When an ABORT marker is written, the aborted transaction is appended to
the ``.txnindex`` file of the active segment, in Kafka's layout: 34-byte entries of
``version i16 (0), producerId i64, firstOffset i64, lastOffset i64, lastStableOffset i64``.
A read_committed Fetch reads only below the LSO and is told which aborted transactions overlap
what it got, so the client drops their records itself.

Markers are control batches: one record whose key is ``version i16 (0), type i16`` (0 ABORT,
1 COMMIT) and whose value is ``version i16 (0), coordinatorEpoch i32``.
"""

from __future__ import annotations

import errno
import os
import struct
from pathlib import Path
from typing import Any

import attrs

from ..protocol import records as rb

TXN_INDEX_SUFFIX = ".txnindex"
ABORT = 0
COMMIT = 1
_ENTRY = struct.Struct(">hqqqq")
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")


@attrs.frozen
class AbortedTxn:
    """One ``.txnindex`` entry: the aborted transaction's offsets."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def build_marker(producer_id: int, producer_epoch: int, commit: bool, timestamp_ms: int,
                 coordinator_epoch: int = 0) -> bytes:
    """A control batch holding one COMMIT or ABORT marker (offsets assigned on append)."""
    key = _CONTROL_KEY.pack(0, COMMIT if commit else ABORT)
    value = _CONTROL_VALUE.pack(0, coordinator_epoch)
    return rb.build_batch([(key, value, (), timestamp_ms)], producer_id=producer_id,
                          producer_epoch=producer_epoch, base_sequence=-1,
                          attributes=rb.TRANSACTIONAL_BIT | rb.CONTROL_BIT)


def control_type(batch: bytes | bytearray | memoryview) -> int | None:
    """ABORT, COMMIT, or None (an unknown control record) of a control batch."""
    try:
        records = rb.decode_records(bytes(batch))
    except rb.RecordBatchError:
        return None
    if not records or records[0].key is None or len(records[0].key) < _CONTROL_KEY.size:
        return None
    _, kind = _CONTROL_KEY.unpack_from(records[0].key)
    return kind if kind in (ABORT, COMMIT) else None


def trim_to(records: bytes, end_offset: int) -> bytes:
    """The leading whole batches of ``records`` that lie below ``end_offset`` (the LSO)."""
    view = memoryview(records)
    cut = 0
    for position, size in rb.iter_batches(view):
        if size < rb.HEADER_SIZE:
            break
        header = rb.decode_header(view[position:position + size])
        if header.last_offset >= end_offset:
            break
        cut = position + size
    return records if cut == len(records) else bytes(view[:cut])


def last_offset_of(records: bytes) -> int:
    """The last offset of the last whole batch in ``records`` (-1 when empty)."""
    last = -1
    view = memoryview(records)
    for position, size in rb.iter_batches(view):
        if size < rb.HEADER_SIZE:
            break
        last = rb.decode_header(view[position:position + size]).last_offset
    return last


def committed_view(index: TransactionIndex, records: Any, fetch_offset: int, lso: int,
                   entry: Any) -> tuple[Any, tuple[Any, ...]]:
    """What a read_committed Fetch answers: the batches below the LSO, and the aborted
    transactions overlapping them as ``entry(producer_id=, first_offset=)`` objects.

    ``records`` is bytes, or a zero-copy file region (protocol/regions.py) read while no
    transaction was open: then it lies below the LSO already, and the aborted transactions up
    to the LSO are listed (a superset clients ignore beyond their data, as Kafka's
    segment-bounded lookup may return)."""
    if isinstance(records, bytes):
        records = trim_to(records, lso)
        last = last_offset_of(records)
    else:
        last = lso - 1 if len(records) else -1
    if last < 0:
        return records, ()
    return records, tuple(entry(producer_id=a.producer_id, first_offset=a.first_offset)
                          for a in index.aborted_between(fetch_offset, last))


class TransactionIndex:
    """Open transactions and aborted transactions of one partition."""

    def __init__(self, directory: Path, ongoing: dict[int, int]) -> None:
        self.directory = directory
        #: ``{producer_id: first offset of its open transaction}`` (the producer state's dict,
        #: so its snapshots carry it).
        self.ongoing = ongoing
        self.aborted: list[AbortedTxn] = []
        #: Entries whose append to their file failed (a full disk), written again later.
        self._unwritten: list[tuple[int, AbortedTxn]] = []

    # ------------------------------------------------------------------------- updating
    def on_batch(self, header: rb.BatchHeader, kind: int | None, segment_base: int, *,
                 persist: bool = True) -> None:
        """Account for an appended (or replayed) batch; ``kind`` is the marker type of a
        control batch."""
        if not header.is_transactional or header.producer_id < 0:
            return
        pid = header.producer_id
        if not header.is_control:
            self.ongoing.setdefault(pid, header.base_offset)
            return
        first = self.ongoing.pop(pid, None)
        if kind != ABORT or first is None:
            return
        # Kafka's lastStableOffset of the entry: the oldest other open transaction, else just
        # past the marker.
        entry = AbortedTxn(pid, first, header.last_offset,
                           min(self.ongoing.values(), default=header.last_offset + 1))
        if any(a.producer_id == pid and a.last_offset == entry.last_offset for a in self.aborted):
            return  # replayed after a restart: already indexed
        self.aborted.append(entry)
        if persist:
            self._unwritten.append((segment_base, entry))
            self.write_unwritten()

    def last_stable_offset(self, high_watermark: int) -> int:
        """First offset of the oldest open transaction, else the high watermark."""
        return min(min(self.ongoing.values(), default=high_watermark), high_watermark)

    def aborted_between(self, fetch_offset: int, last_offset: int) -> list[AbortedTxn]:
        """Aborted transactions that overlap ``[fetch_offset, last_offset]``."""
        return [a for a in self.aborted
                if a.last_offset >= fetch_offset and a.first_offset <= last_offset]

    # ---------------------------------------------------------------------------- files
    def _path(self, segment_base: int) -> Path:
        return self.directory / f"{segment_base:020d}{TXN_INDEX_SUFFIX}"

    def write_unwritten(self) -> None:
        """Append the entries whose earlier append failed. Raises OSError while one still
        cannot be written: no producer snapshot may then be taken past its marker, or the next
        start would not replay the marker and the aborted records would read as committed."""
        while self._unwritten:
            segment_base, entry = self._unwritten[0]
            self._append_entry(segment_base, entry)
            del self._unwritten[0]

    def _append_entry(self, segment_base: int, entry: AbortedTxn) -> None:
        data = _ENTRY.pack(0, entry.producer_id, entry.first_offset, entry.last_offset,
                           entry.last_stable_offset)
        fd = os.open(self._path(segment_base), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            try:
                if os.write(fd, data) != len(data):
                    raise OSError(errno.ENOSPC, "short write", str(self._path(segment_base)))
            except OSError:
                os.ftruncate(fd, size)  # no torn entry: the retry appends a whole one
                raise
        finally:
            os.close(fd)

    def load(self, log_start: int, log_end: int) -> None:
        """Read every ``.txnindex``; drop entries beyond the log end (cut by recovery), and
        files whose entries all lie below the log start. A file is kept by its entries, not by
        its name: compaction may merge the segment it was named after into an earlier one."""
        self.aborted = []
        for path in sorted(self.directory.glob(f"*{TXN_INDEX_SUFFIX}")):
            if not path.name[: -len(TXN_INDEX_SUFFIX)].isdigit():
                path.unlink(missing_ok=True)
                continue
            data = path.read_bytes()
            kept = bytearray()
            live = False
            for at in range(0, len(data) - _ENTRY.size + 1, _ENTRY.size):
                _, pid, first, last, lso = _ENTRY.unpack_from(data, at)
                if last >= log_end:
                    continue
                kept += data[at:at + _ENTRY.size]
                if last >= log_start:
                    live = True
                    self.aborted.append(AbortedTxn(pid, first, last, lso))
            if not live:
                path.unlink(missing_ok=True)
            elif len(kept) != len(data):
                tmp = path.with_suffix(".txnindex.tmp")
                tmp.write_bytes(bytes(kept))
                os.replace(tmp, path)
        self.aborted.sort(key=lambda a: a.last_offset)

    def track(self, data: bytes | bytearray, assigned: list[tuple[int, rb.BatchHeader]],
              segment_base: int) -> None:
        """Account for the batches of one append (``(position in data, header)`` each)."""
        for position, header in assigned:
            if header.is_transactional:
                kind = control_type(data[position:position + header.size]) \
                    if header.is_control else None
                self.on_batch(header, kind, segment_base)

    def on_log_start_advanced(self, log_start: int) -> None:
        """Forget aborted transactions wholly below the new log start, and the index files
        that hold nothing else."""
        self.aborted = [a for a in self.aborted if a.last_offset >= log_start]
        self._unwritten = [(b, a) for b, a in self._unwritten if a.last_offset >= log_start]
        for path in self.directory.glob(f"*{TXN_INDEX_SUFFIX}"):
            data = path.read_bytes()
            if all(_ENTRY.unpack_from(data, at)[3] < log_start
                   for at in range(0, len(data) - _ENTRY.size + 1, _ENTRY.size)):
                path.unlink(missing_ok=True)

    def aborted_ranges(self) -> tuple[tuple[int, int, int], ...]:
        """``(producer_id, first_offset, last_offset)`` of every aborted transaction (for the
        cleaner: records of aborted transactions must not shadow committed ones)."""
        return tuple((a.producer_id, a.first_offset, a.last_offset) for a in self.aborted)

    def truncate(self) -> None:
        self.ongoing.clear()
        self.aborted.clear()
        self._unwritten.clear()
