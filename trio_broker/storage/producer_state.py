"""Idempotent-producer state of one partition (Kafka's ``ProducerStateManager``), and the
broker-wide producer id allocator.

Per producer id the partition remembers the epoch and the last five batches written
(first/last sequence, first/last offset, timestamp): a retried batch that matches one of them is
a duplicate and is answered with the original offsets; any other batch must continue the
sequence. Everything needed comes from the batch header, so replaying a log to rebuild the
state reads headers only.

The state is saved as a snapshot file ``<offset>.snapshot`` (JSON) when a segment rolls and at
clean shutdown; on open, the newest snapshot at or below the log end is loaded and the batches
after it are replayed.
"""

from __future__ import annotations

import json
import os
from collections import deque
from pathlib import Path

import attrs

from ..protocol import records as rb
from .errors import InvalidProducerEpoch, OutOfOrderSequence, ProducerRefusal, StorageError

MAX_BATCHES_PER_PRODUCER = 5
SNAPSHOT_SUFFIX = ".snapshot"


@attrs.frozen
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@attrs.define
class ProducerEntry:
    producer_id: int
    epoch: int
    batches: deque[BatchMetadata] = attrs.field(
        factory=lambda: deque(maxlen=MAX_BATCHES_PER_PRODUCER))
    last_timestamp: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else rb.NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == rb.INT32_MAX)


def snapshot_files(directory: Path) -> list[tuple[int, Path]]:
    """A partition directory's snapshot files, ``(offset, path)`` oldest first."""
    found = []
    for path in directory.glob(f"*{SNAPSHOT_SUFFIX}"):
        try:
            found.append((int(path.name[: -len(SNAPSHOT_SUFFIX)]), path))
        except ValueError:
            continue
    return sorted(found)


@attrs.frozen
class SnapshotJob:
    """A copy of one partition's producer state at ``offset``, to be written as its snapshot
    file (:meth:`ProducerStateManager.snapshot_job`); ``write`` touches nothing shared."""

    path: Path
    offset: int
    #: ``(producer id, epoch, last timestamp, batches)`` per producer.
    producers: tuple[tuple[int, int, int, tuple[BatchMetadata, ...]], ...]
    txns: dict[int, int]
    keep: int

    def write(self) -> None:
        """Write the file (through a temporary one and a rename) and delete all but the
        newest ``keep`` snapshots."""
        payload = {
            "version": 1,
            "offset": self.offset,
            "producers": [
                {"id": producer_id, "epoch": epoch, "last_timestamp": last_timestamp,
                 "batches": [attrs.astuple(b) for b in batches]}
                for producer_id, epoch, last_timestamp, batches in self.producers
            ],
            "txns": {str(pid): first for pid, first in self.txns.items()},
        }
        tmp = self.path.with_suffix(".snapshot.tmp")
        tmp.write_text(json.dumps(payload), encoding="utf-8")
        os.replace(tmp, self.path)
        for _, old in snapshot_files(self.path.parent)[:-self.keep]:
            old.unlink(missing_ok=True)


class ProducerStateManager:
    """Producer entries of one partition."""

    def __init__(self, directory: Path, topic: str = "", partition: int = -1) -> None:
        self.directory = directory
        #: The partition, named in refusals (:meth:`check`).
        self.topic = topic
        self.partition = partition
        self.producers: dict[int, ProducerEntry] = {}
        #: The log offset up to which this state reflects the log.
        self.map_end_offset = 0
        #: ``{producer_id: first offset of its open transaction}``, shared with the partition's
        #: :class:`~.txn_index.TransactionIndex` and saved in snapshots (Kafka's
        #: ``currentTxnFirstOffset``).
        self.ongoing_txns: dict[int, int] = {}
        #: The offset of the snapshot file that holds exactly this state (-1: none does).
        self._snapshot_at = -1

    # ---------------------------------------------------------------------------- checking
    def find_duplicate(self, header: rb.BatchHeader) -> BatchMetadata | None:
        entry = self.producers.get(header.producer_id)
        if entry is None or entry.epoch != header.producer_epoch:
            return None
        for meta in entry.batches:
            if meta.first_seq == header.base_sequence and meta.last_seq == header.last_sequence:
                return meta
        return None

    def check(self, header: rb.BatchHeader, pending: dict[int, tuple[int, int]],
              offset: int = -1) -> None:
        """Raise unless the batch may be appended (Kafka's ``ProducerAppendInfo`` checks).

        ``pending`` holds ``{producer_id: (epoch, last_seq)}`` of earlier batches of the same
        request, so a request carrying several batches of one producer is checked in order.
        ``offset``: where the batch would go (the log end), named in the error's message as
        Kafka names it. The error carries a :class:`~.errors.ProducerRefusal`.
        """
        current = self.producers.get(header.producer_id)
        epoch, last_seq = pending.get(header.producer_id, (
            (current.epoch, current.last_seq) if current is not None
            else (rb.NO_PRODUCER_EPOCH, rb.NO_SEQUENCE)))
        if header.producer_epoch < epoch:
            raise InvalidProducerEpoch(
                f"Epoch {header.producer_epoch} of producer {header.producer_id} at offset "
                f"{offset} in partition {self.topic}-{self.partition} is older than the "
                f"current epoch {epoch}",
                self._refusal("INVALID_PRODUCER_EPOCH", header, epoch, -1))
        if header.producer_epoch != epoch:
            if header.base_sequence != 0 and epoch != rb.NO_PRODUCER_EPOCH:
                raise OutOfOrderSequence(
                    f"Invalid sequence number for new epoch of producer {header.producer_id} "
                    f"at offset {offset} in partition {self.topic}-{self.partition}: "
                    f"{header.producer_epoch} (request epoch), {header.base_sequence} "
                    f"(seq. number), {epoch} (current producer epoch)",
                    self._refusal("OUT_OF_ORDER_SEQUENCE_NUMBER", header, epoch, 0))
        elif epoch != rb.NO_PRODUCER_EPOCH and not _in_sequence(last_seq,
                                                                 header.base_sequence):
            # Kafka's checkSequence: only a producer the partition knows no epoch of may start
            # anywhere. One known with no batch (a marker of a bumped epoch cleared them: a
            # fence, a timed-out transaction) starts at 0, as -1 + 1. A marker of the same
            # epoch keeps the batches: the sequence goes on across COMMIT and ABORT (issue 36).
            # The refusal names last_seq + 1 as expected (0 after no batch).
            raise OutOfOrderSequence(
                f"Out of order sequence number for producer {header.producer_id} at offset "
                f"{offset} in partition {self.topic}-{self.partition}: "
                f"{header.base_sequence} (incoming seq. number), {last_seq} "
                "(current end sequence number)",
                self._refusal("OUT_OF_ORDER_SEQUENCE_NUMBER", header, epoch,
                              0 if last_seq == rb.INT32_MAX else last_seq + 1))
        pending[header.producer_id] = (header.producer_epoch, header.last_sequence)

    def _refusal(self, error: str, header: rb.BatchHeader, current_epoch: int,
                 expected_seq: int) -> ProducerRefusal:
        return ProducerRefusal(error, self.topic, self.partition, header.producer_id,
                               header.producer_epoch, current_epoch, expected_seq,
                               header.base_sequence)

    # ---------------------------------------------------------------------------- updating
    def update(self, header: rb.BatchHeader) -> None:
        """Record an appended batch (already offset-assigned)."""
        if header.producer_id < 0:
            return
        entry = self.producers.get(header.producer_id)
        if entry is None or entry.epoch != header.producer_epoch:
            entry = ProducerEntry(header.producer_id, header.producer_epoch)
            self.producers[header.producer_id] = entry
        if header.is_control:
            # A transaction marker moves the epoch on but carries no sequence (Kafka).
            entry.last_timestamp = max(entry.last_timestamp, header.max_timestamp)
            self.map_end_offset = header.next_offset
            return
        entry.batches.append(BatchMetadata(
            header.base_sequence, header.last_sequence, header.base_offset, header.last_offset,
            header.max_timestamp))
        entry.last_timestamp = max(entry.last_timestamp, header.max_timestamp)
        self.map_end_offset = header.next_offset

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        # A producer with an open transaction is kept (the LSO depends on it), as in Kafka.
        expired = [pid for pid, e in self.producers.items()
                   if now_ms - e.last_timestamp >= expiration_ms
                   and pid not in self.ongoing_txns]
        for pid in expired:
            del self.producers[pid]
        if expired:
            self._snapshot_at = -1
        return len(expired)

    def on_log_start_advanced(self, log_start: int) -> None:
        """Forget producers whose every batch was deleted by retention (as Kafka does)."""
        for pid in [pid for pid, e in self.producers.items() if e.last_offset < log_start]:
            del self.producers[pid]
            self._snapshot_at = -1

    def truncate(self) -> None:
        self.producers.clear()
        self.ongoing_txns.clear()
        self.map_end_offset = 0
        self._snapshot_at = -1

    # --------------------------------------------------------------------------- snapshots
    def write_snapshot(self, keep: int = 2) -> None:
        """Save the state at ``map_end_offset`` and keep only the newest ``keep`` snapshots.

        As Kafka's ``takeSnapshot``, nothing is written when the newest snapshot already holds
        this state: a clean shutdown of 10,000 idle partitions wrote 10,000 files (8 s, past
        the graceful shutdown deadline) every time."""
        job = self.snapshot_job(keep)
        if job is not None:
            job.write()
            self.snapshot_written(job)

    def snapshot_job(self, keep: int = 2) -> SnapshotJob | None:
        """The state at ``map_end_offset`` copied into a :class:`SnapshotJob`, whose ``write``
        may run in a worker thread while this state moves on (a roll under write pressure:
        creating and renaming files waits for the disk); None when the newest snapshot
        already holds this state. :meth:`snapshot_written` records a written job."""
        offset = self.map_end_offset
        path = self.directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"
        if self._snapshot_at == offset and path.exists():
            return None
        # The entries' deques change with every append; their batches are frozen.
        producers = tuple((e.producer_id, e.epoch, e.last_timestamp, tuple(e.batches))
                          for e in self.producers.values())
        return SnapshotJob(path, offset, producers, dict(self.ongoing_txns), keep)

    def snapshot_written(self, job: SnapshotJob) -> None:
        """``job`` is on disk: no new snapshot until the state moves past it."""
        if job.offset == self.map_end_offset:
            self._snapshot_at = job.offset

    def snapshot_files(self) -> list[tuple[int, Path]]:
        return snapshot_files(self.directory)

    def load_snapshot(self, max_offset: int, min_offset: int) -> bool:
        """Load the newest readable snapshot within ``[min_offset, max_offset]``; delete
        snapshots beyond the log end (they describe data that recovery truncated)."""
        for offset, path in reversed(self.snapshot_files()):
            if offset > max_offset:
                path.unlink(missing_ok=True)
                continue
            if offset < min_offset:
                break
            try:
                payload = json.loads(path.read_text(encoding="utf-8"))
                producers = {}
                for item in payload["producers"]:
                    entry = ProducerEntry(int(item["id"]), int(item["epoch"]),
                                          last_timestamp=int(item["last_timestamp"]))
                    for batch in item["batches"]:
                        entry.batches.append(BatchMetadata(*(int(v) for v in batch)))
                    producers[entry.producer_id] = entry
                txns = {int(pid): int(first) for pid, first in payload.get("txns", {}).items()}
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                path.unlink(missing_ok=True)
                continue
            self.producers = producers
            self.ongoing_txns.clear()
            self.ongoing_txns.update(txns)
            self.map_end_offset = self._snapshot_at = offset
            return True
        self.producers = {}
        self.ongoing_txns.clear()
        self.map_end_offset = min_offset
        return False


class ProducerIdAllocator:
    """Hands out producer ids, persisting the next free block so ids are never reused.

    The file holds the first id of the next unallocated block; a block of ``block_size`` ids
    is reserved (and the file rewritten, fsynced) before any id of it is handed out.
    """

    def __init__(self, path: Path, block_size: int = 1000, *, floor: int = 0) -> None:
        """``floor``: above every producer id the logs still know. A missing file (a first
        start, or lost) never hands out an id a partition still has state for: a new producer
        given a known id with sequence 0 would be answered "duplicate", its records dropped."""
        self.path = path
        self.block_size = block_size
        try:
            text = path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            text = ""
        try:
            stored = int(text or 0)
        except ValueError:
            stored = -1
        if stored < 0:
            raise StorageError(
                f"{path} is corrupt ({text[:40]!r} is not a producer id); remove it to restart "
                "the ids above those the partitions know")
        self._block_end = self._next = max(stored, floor)

    def allocate(self) -> int:
        if self._next >= self._block_end:
            end = self._next + self.block_size
            tmp = self.path.with_suffix(".tmp")
            with open(tmp, "w", encoding="utf-8") as handle:
                handle.write(f"{end}\n")
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.path)
            self._block_end = end
        pid = self._next
        self._next += 1
        return pid
