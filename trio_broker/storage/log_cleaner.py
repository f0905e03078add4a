"""The log cleaner's schedule (Kafka's LogCleaner and LogCleanerManager): Trio tasks under the
storage nursery that pick the filthiest compacted log and clean it (see :mod:`.cleaner`).

Threads: the map building and copying (decoding records, MD5 of every key, CRC-32C, gzip,
reading and writing whole segments) run in a worker thread (``trio.to_thread.run_sync``).
They take seconds on big logs; on the event loop they would stall every connection for that
long. In a thread they still share the GIL, but the interpreter switches threads every 5 ms,
so request latency grows by milliseconds instead of seconds, and the disk waits release the
GIL entirely. The plan (which segments) is taken and the swap (renames, deletes, the
in-memory segment list) done on the event loop, between awaits, so appends, fetches,
retention and topic deletion never see a half-replaced log.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ..observability.log import emit
from .cleaner import (
    CleanerError,
    CleanPlan,
    CleanStats,
    SourceSegment,
    build_offset_map,
    clean_group,
    discard_cleaned,
    fsync_directory,
    group_segments,
    map_slots,
    swap_in,
)
from .durable import write_durably
from .log import PartitionLog, now_ms
from .segment import Segment, unlink_all

if TYPE_CHECKING:
    from .manager import LogManager

CHECKPOINT_FILE = "cleaner-offset-checkpoint"


@attrs.frozen
class Candidate:
    """A compacted log and how dirty it is (Kafka's LogToClean)."""

    log: PartitionLog
    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    dirty_bytes: int
    ratio: float
    tombstones_due: bool
    lag_exceeded: bool


@attrs.define
class CleanerStats:
    """What the metrics report (Kafka's per-thread ``lastStats`` and the manager's gauge)."""

    #: Per cleaner task: (seconds of its last clean, bytes read, bytes written).
    last: dict[int, tuple[float, int, int]] = attrs.field(factory=dict)
    max_dirty_ratio: float = 0.0

    @property
    def max_clean_time_secs(self) -> float:
        return max((s for s, _, _ in self.last.values()), default=0.0)

    @property
    def recopy_percent(self) -> float:
        read = sum(r for _, r, _ in self.last.values())
        written = sum(w for _, _, w in self.last.values())
        return 100.0 * written / max(read, 1)


class LogCleaner:
    """Cleans the compacted logs of one :class:`LogManager`."""

    def __init__(self, manager: LogManager) -> None:
        self.manager = manager
        self.config = manager.config
        #: Wall clock (ms) for compaction lags and delete horizons; tests replace it.
        self.wall_clock: Callable[[], int] = now_ms
        #: First dirty offset per partition (Kafka's cleaner-offset-checkpoint).
        self.checkpoints: dict[tuple[str, int], int] = {}
        self.in_progress: set[tuple[str, int]] = set()
        self.uncleanable: set[tuple[str, int]] = set()
        #: Earliest delete horizon of a tombstone kept by the last clean of a partition.
        self.horizons: dict[tuple[str, int], int] = {}
        self.stats = CleanerStats()
        self._checkpoint_lock = threading.Lock()

    @property
    def checkpoint_path(self) -> Path:
        return self.manager.data_dir / CHECKPOINT_FILE

    def load(self) -> None:
        self.checkpoints = self.manager._read_checkpoint(CHECKPOINT_FILE)

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """``log.cleaner.threads`` cleaner tasks, each cleaning the filthiest log it can grab
        and sleeping ``log.cleaner.backoff.ms`` when none needs cleaning."""
        async with trio.open_nursery() as nursery:
            for index in range(self.config.log_cleaner_threads):
                nursery.start_soon(self._cleaner_task, index)
            task_status.started()

    async def _cleaner_task(self, index: int) -> None:
        while True:
            try:
                cleaned = await self.clean_once(index)
            except Exception as exc:  # a bug costs one round, never the cleaner or the broker
                emit("background_task_failed", task="log_cleaner", error=type(exc).__name__,
                     detail=repr(exc))
                cleaned = False
            if not cleaned:
                await trio.sleep(self.config.log_cleaner_backoff_ms / 1000)

    # -------------------------------------------------------------------------- choosing
    def candidate(self, log: PartitionLog, now: int) -> Candidate | None:
        """How dirty ``log`` is; None if it is not compacted or has nothing closed."""
        config = log.config
        if not config.compact or len(log.segments) < 2:
            return None
        key = (log.topic, log.partition)
        first_dirty = self.checkpoints.get(key, log.log_start_offset)
        if not log.log_start_offset <= first_dirty <= log.log_end_offset:
            first_dirty = log.log_start_offset  # truncated or deleted under the checkpoint
        closed = log.segments[:-1]
        uncleanable = log.active.base_offset
        lso = log.last_stable_offset
        for segment in closed:
            if segment.next_offset > lso:
                # Kafka cleans only below the last stable offset: open transactions stay.
                uncleanable = min(uncleanable, segment.base_offset)
                break
        if config.min_compaction_lag_ms > 0:
            for segment in closed:
                if segment.base_offset >= first_dirty and \
                        segment.max_timestamp > now - config.min_compaction_lag_ms:
                    uncleanable = segment.base_offset
                    break
        clean = sum(s.size for s in closed if s.base_offset < first_dirty)
        dirty = sum(s.size for s in closed if first_dirty <= s.base_offset < uncleanable)
        ratio = dirty / (clean + dirty) if clean + dirty else 0.0
        first_dirty_segments = [s for s in closed if first_dirty <= s.base_offset < uncleanable]
        lag_exceeded = bool(first_dirty_segments) and first_dirty_segments[0].roll_base_ms >= 0 \
            and now - first_dirty_segments[0].roll_base_ms > config.max_compaction_lag_ms
        horizon = self.horizons.get(key, -1)
        return Candidate(log, first_dirty, uncleanable, clean, dirty, ratio,
                         horizon >= 0 and now >= horizon, lag_exceeded)

    def grab_filthiest(self, now: int) -> Candidate | None:
        """Kafka's ``grabFilthiestCompactedLog``: of the logs that need cleaning (dirty ratio
        above ``min.cleanable.dirty.ratio``, or dirty data past ``max.compaction.lag.ms``, or
        kept tombstones past their delete horizon), the dirtiest not being cleaned."""
        best: Candidate | None = None
        max_ratio = 0.0
        for log in self.manager.all_partitions():
            key = (log.topic, log.partition)
            if key in self.in_progress or key in self.uncleanable:
                continue
            found = self.candidate(log, now)
            if found is None:
                continue
            max_ratio = max(max_ratio, found.ratio)
            wanted = (found.dirty_bytes > 0 and (found.ratio > log.config.min_cleanable_ratio
                                                 or found.lag_exceeded)) \
                or found.tombstones_due
            if wanted and (best is None or found.ratio > best.ratio):
                best = found
        self.stats.max_dirty_ratio = max_ratio
        if best is not None:
            self.in_progress.add((best.log.topic, best.log.partition))
        return best

    # --------------------------------------------------------------------------- cleaning
    async def clean_once(self, index: int = 0) -> bool:
        """Clean the filthiest log, if one needs it. True if one was worked on (cleaned, or
        its copy discarded because the log changed meanwhile); False if none needed it or
        the clean failed (the task then backs off)."""
        now = self.wall_clock()
        found = self.grab_filthiest(now)
        if found is None:
            return False
        log = found.log
        key = (log.topic, log.partition)
        try:
            await self._clean(found, now, index)
        except (CleanerError, OSError) as exc:
            if isinstance(exc, CleanerError):
                self.uncleanable.add(key)  # Kafka's markPartitionUncleanable
            if self.manager.get_partition(*key) is log:
                emit("log_cleaning_failed", topic=log.topic, partition=log.partition,
                     error=str(exc))
            # else the topic was deleted under the copy: nothing failed that still exists
            return False  # back off: a failing disk must not be retried in a tight loop
        finally:
            self.in_progress.discard(key)
        return True

    def _plan(self, found: Candidate, now: int) -> tuple[CleanPlan, dict[int, Segment]]:
        log = found.log
        config = log.config
        segments = [s for s in log.segments[:-1] if s.base_offset < found.first_uncleanable]
        dirty_records = sum(s.next_offset - s.base_offset for s in segments
                            if s.base_offset >= found.first_dirty)
        sources = tuple(SourceSegment(s.base_offset, s.log_path, s.size, s.next_offset)
                        for s in segments)
        producers = {pid: entry.last_offset
                     for pid, entry in log.producer_state.producers.items()}
        plan = CleanPlan(
            log.topic, log.partition, log.directory, found.first_dirty, sources, now,
            config.delete_retention_ms, config.segment_bytes, config.segment_index_bytes,
            config.index_interval_bytes, producers,
            map_slots(self.config.log_cleaner_dedupe_buffer_size,
                      self.config.log_cleaner_threads, dirty_records),
            log.txn_index.aborted_ranges(), log.decompressed_limit)
        return plan, {s.base_offset: s for s in segments}

    async def _clean(self, found: Candidate, now: int, index: int) -> None:
        started = time.perf_counter()
        log = found.log
        plan, objects = self._plan(found, now)
        offset_map, end = await trio.to_thread.run_sync(build_offset_map, plan)
        stats = CleanStats()
        to_clean = [s for s in plan.segments if s.base_offset < end]
        replaced = installed = 0
        bytes_before = bytes_after = 0
        for group in group_segments(to_clean, plan.segment_bytes):
            await trio.to_thread.run_sync(clean_group, plan, group, offset_map, stats)
            old = [objects[s.base_offset] for s in group]
            if self.manager.get_partition(log.topic, log.partition) is not log \
                    or not log.has_segments(old):
                # Retention, DeleteRecords or topic deletion changed the log meanwhile.
                discard_cleaned(plan.directory, group[0].base_offset)
                return
            new, retired = self._install(log, old, group[0].base_offset)
            await trio.to_thread.run_sync(unlink_all, retired)
            replaced += len(old)
            installed += 1
            bytes_before += sum(s.size for s in group)
            bytes_after += new.size
        await trio.to_thread.run_sync(fsync_directory, plan.directory)
        key = (log.topic, log.partition)
        self.checkpoints[key] = end
        if stats.earliest_horizon >= 0:
            self.horizons[key] = stats.earliest_horizon
        else:
            self.horizons.pop(key, None)
        await trio.to_thread.run_sync(self.write_checkpoints)
        elapsed = time.perf_counter() - started
        self.stats.last[index] = (elapsed, stats.bytes_read, stats.bytes_written)
        emit("log_cleaned", topic=log.topic, partition=log.partition,
             first_dirty_offset=plan.first_dirty, end_offset=end, segments_before=replaced,
             segments_after=installed, bytes_before=bytes_before, bytes_after=bytes_after,
             records_removed=stats.records_removed, tombstones_retained=stats.tombstones_retained,
             map_entries=offset_map.size, duration_ms=round(elapsed * 1000, 3))

    def _install(self, log: PartitionLog, old: list[Segment], base: int
                 ) -> tuple[Segment, list[Path]]:
        """Swap the cleaned files in and the new segment into the log, in one synchronous
        step (no await: nobody sees the log between the two); the new segment and the
        replaced segments' files to unlink (renamed ``.deleted``)."""
        retired = swap_in(log.directory, base, old)
        next_base = log.segments[log.segments.index(old[-1]) + 1].base_offset
        new = Segment(log.directory, base, index_max_bytes=log.config.segment_index_bytes,
                      index_interval_bytes=log.config.index_interval_bytes,
                      created_ms=now_ms())
        if not (new.load_indexes(next_base) and new.scan_tail()):
            new.recover(base)
        log.replace_segments(old, new)
        return new, retired

    # ------------------------------------------------------------------------ checkpoint
    def write_checkpoints(self) -> None:
        """Kafka's ``cleaner-offset-checkpoint`` (first dirty offset per partition)."""
        with self._checkpoint_lock:
            live = {key: offset for key, offset in list(self.checkpoints.items())
                    if self.manager.get_partition(*key) is not None}
            lines = ["0", str(len(live))] + [f"{t} {p} {o}" for (t, p), o in live.items()]
            with contextlib.suppress(FileNotFoundError):
                write_durably(self.checkpoint_path, "\n".join(lines) + "\n")

    def forget(self, topic: str) -> bool:
        """A deleted topic's partitions start dirty from scratch, and cleanable, if the name
        comes back (Kafka's ``maintainUncleanablePartitions`` drops deleted partitions too).
        True if a checkpoint went (the checkpoint file is then out of date)."""
        self.uncleanable.difference_update([k for k in self.uncleanable if k[0] == topic])
        for key in [k for k in self.horizons if k[0] == topic]:
            del self.horizons[key]
        gone = [k for k in self.checkpoints if k[0] == topic]
        for key in gone:
            del self.checkpoints[key]
        return bool(gone)
