"""``trio_broker analyze --follow DIR``: per-minute aggregates with Spark Structured Streaming.

Spark's file source treats every file as immutable: it reads a file once, when it first sees it,
so it would miss lines appended to the live ``broker.log`` and would read a rotated file again
under each new name (``.1``, ``.2``, ...). :class:`LogTailer` bridges the two: it follows the
live log files of DIR (by inode, so a rotation loses and repeats nothing) and spools each poll's
complete lines into a new immutable chunk file, which is what the streaming query reads.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import attrs

from .schema import CORRUPT_RECORD, log_schema

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pyspark.sql import DataFrame, SparkSession

#: Live (not rotated) log files: ``x.log``, ``x.jsonl``, ``x.ndjson``, ``x.json``.
LIVE_FILE_RE = re.compile(r"^[^._].*\.(log|jsonl|ndjson|json)$")

BatchHandler = Callable[["DataFrame", int], None]


@attrs.define
class _Followed:
    inode: int
    handle: IO[bytes]
    pending: bytes = b""


@attrs.define
class LogTailer:
    """Follows the live log files of ``directory`` and spools complete lines into ``spool``.

    Each :meth:`poll` reads what was appended since the last one; a file replaced by rotation is
    read to its end through the still-open handle before the new file is opened, so every line
    is spooled exactly once. Chunk files are written under a hidden name and renamed, because
    Spark ignores names starting with a dot and must never see a half-written chunk.
    """

    directory: Path
    spool: Path
    from_start: bool = True
    _files: dict[str, _Followed] = attrs.field(factory=dict)
    #: Inodes not to read whole: files that were in the directory at the first poll (history),
    #: and every file already followed or read.
    _known: set[int] | None = None
    _sequence: int = 0
    lines: int = 0

    def _open(self, path: Path, *, at_end: bool) -> _Followed | None:
        try:
            handle = path.open("rb")
        except FileNotFoundError:
            return None
        if at_end:
            handle.seek(0, os.SEEK_END)
        inode = os.fstat(handle.fileno()).st_ino
        self._remember(inode)
        return _Followed(inode, handle)

    def _drain(self, followed: _Followed, *, final: bool) -> list[bytes]:
        data = followed.pending + followed.handle.read()
        if final:
            followed.pending = b""
            # A torn last line of a closed file is kept: Spark will count it as malformed.
            return [line for line in data.split(b"\n") if line.strip()]
        complete, _, followed.pending = data.rpartition(b"\n")
        return [line for line in complete.split(b"\n") if line.strip()] if complete else []

    def _rotated(self, path: Path, *, skip_known: bool) -> list[Path]:
        """The rotated files of ``path``, newest (``x.log.1``) first, known ones left out or not."""
        rotated: list[tuple[int, Path]] = []
        for candidate in path.parent.glob(path.name + ".*"):
            suffix = candidate.name[len(path.name) + 1:]
            if suffix.isdigit():
                rotated.append((int(suffix), candidate))
        rotated.sort()
        result = []
        for _index, candidate in rotated:
            try:
                inode = candidate.stat().st_ino
            except FileNotFoundError:
                continue
            if not skip_known or self._known is None or inode not in self._known:
                result.append(candidate)
        return result

    def _read_whole(self, files: list[Path]) -> list[bytes]:
        lines: list[bytes] = []
        for file in files:
            try:
                with file.open("rb") as handle:
                    self._remember(os.fstat(handle.fileno()).st_ino)
                    data = handle.read()
            except FileNotFoundError:
                continue
            lines.extend(line for line in data.split(b"\n") if line.strip())
        return lines

    def _remember(self, inode: int) -> None:
        if self._known is not None:
            self._known.add(inode)

    def _missed_rotations(self, path: Path, old_inode: int) -> list[bytes]:
        """Files that were live and rotated away between two polls, read oldest first.

        Rotation renames ``x.log`` to ``x.log.1`` and shifts older ones up, so the files newer
        than the one we followed are the rotated ones with a smaller index than its own (all of
        them, if it was already deleted).
        """
        newer: list[Path] = []
        for candidate in self._rotated(path, skip_known=False):
            try:
                if candidate.stat().st_ino == old_inode:
                    break
            except FileNotFoundError:
                continue
            newer.append(candidate)
        # By position, not by the known set: rotation may have deleted a file we read and
        # handed its inode number to a new one in the same interval.
        return self._read_whole(list(reversed(newer)))

    def poll(self) -> list[bytes]:
        """Read new complete lines from every live file and spool them; returns them too."""
        self.spool.mkdir(parents=True, exist_ok=True)
        collected: list[bytes] = []
        listing = list(self.directory.iterdir()) if self.directory.is_dir() else []
        inodes = set()
        for entry in listing:
            with contextlib.suppress(FileNotFoundError):
                inodes.add(entry.stat().st_ino)
        first_poll = self._known is None
        # Forget files once gone: the file system may give their inode to a new file.
        self._known = inodes if self._known is None else self._known & inodes
        present = {p.name: p for p in listing if p.is_file() and LIVE_FILE_RE.match(p.name)}
        for name, path in present.items():
            followed = self._files.get(name)
            if followed is None:
                if not first_poll:
                    # A log that appeared after we started: whatever it already rotated away
                    # is new too (a broker starting up fast, a slow first poll).
                    collected.extend(self._read_whole(
                        list(reversed(self._rotated(path, skip_known=True)))))
                opened = self._open(path, at_end=first_poll and not self.from_start)
                if opened is not None:
                    self._files[name] = opened
                continue
            try:
                inode = path.stat().st_ino
            except FileNotFoundError:
                continue
            if inode != followed.inode:  # rotated: finish the old file, then start the new one
                collected.extend(self._drain(followed, final=True))
                followed.handle.close()
                collected.extend(self._missed_rotations(path, followed.inode))
                opened = self._open(path, at_end=False)
                if opened is None:
                    del self._files[name]
                    continue
                self._files[name] = opened
        for followed in self._files.values():
            # A name missing now is kept: rotation renames the live file before creating the
            # new one, and the next poll sees the new inode and reads the rest by position.
            collected.extend(self._drain(followed, final=False))
        if collected:
            self._spool(collected)
        return collected

    def _spool(self, lines: list[bytes]) -> None:
        self._sequence += 1
        name = f"chunk-{time.time_ns()}-{self._sequence:08d}.jsonl"
        hidden = self.spool / f".{name}.tmp"
        hidden.write_bytes(b"\n".join(lines) + b"\n")
        os.replace(hidden, self.spool / name)
        self.lines += len(lines)

    def close(self) -> None:
        """Spool what is left (a torn last line included: Spark counts it), close the files."""
        rest: list[bytes] = []
        for followed in self._files.values():
            rest.extend(self._drain(followed, final=True))
            followed.handle.close()
        self._files.clear()
        if rest:
            self._spool(rest)


#: How late a line may arrive (behind the latest event time seen) and still update its minute:
#: a later one is dropped by Spark's watermark, and counted (:class:`LateRows`).
LATE_CUTOFF = "10 minutes"


def minute_aggregates(lines: DataFrame, watermark: str = LATE_CUTOFF) -> DataFrame:
    """Per-minute, per-broker aggregates of a (streaming) DataFrame of log lines.

    Malformed lines have no event time; they are counted in the minute they were read.
    """
    from pyspark.sql import functions as F

    event = F.col("event")

    def count_of(name: str) -> Any:
        # ``event`` is null on malformed lines: count them as "not this event", not as null.
        return F.try_sum(F.when(event == name, 1).otherwise(0))

    return (lines
            .withColumn("event_time", F.coalesce(F.col("ts"), F.current_timestamp()))
            .withWatermark("event_time", watermark)
            .groupBy(F.window("event_time", "1 minute"), F.col("broker"))
            .agg(count_of("request").alias("requests"),
                 F.try_sum(F.when(event == "request", F.col("error").isNotNull()
                              & ~F.col("error").isin("NONE", "")).cast("long")).alias("errors"),
                 F.percentile_approx(F.when(event == "request", F.col("total_ms")), 0.95, 10000)
                 .alias("p95_total_ms"),
                 F.max(F.when(event == "request", F.col("request_queue_ms")))
                 .alias("max_request_queue_ms"),
                 F.try_sum(F.when(event == "request", F.col("request_bytes"))).alias("request_bytes"),
                 count_of("connection_accepted").alias("accepted"),
                 count_of("connection_rejected").alias("rejected"),
                 count_of("connection_muted").alias("mutes"),
                 count_of("throttle_started").alias("throttles"),
                 F.min("network_processor_avg_idle_percent").alias("min_network_idle_percent"),
                 F.max("request_queue_size").alias("max_request_queue_size"),
                 F.try_sum(F.col(CORRUPT_RECORD).isNotNull().cast("long")).alias("malformed"))
            .select(F.col("window.start").alias("minute"), "broker", "requests", "errors",
                    "p95_total_ms", "max_request_queue_ms", "request_bytes", "accepted",
                    "rejected", "mutes", "throttles", "min_network_idle_percent",
                    "max_request_queue_size", "malformed"))


def print_batch(frame: DataFrame, batch_id: int) -> None:
    """The console sink: the minutes this micro-batch updated, as a plain table."""
    from .jobs import collect_rows

    rows = collect_rows(frame.orderBy("minute", "broker"))
    if not rows:
        return
    columns = frame.columns
    cells = [["" if row[c] is None else str(row[c]) for c in columns] for row in rows]
    widths = [max(len(c), *(len(line[i]) for line in cells)) for i, c in enumerate(columns)]
    print(f"-- batch {batch_id}: {len(rows)} minute(s) updated")
    print("  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True)))
    for line in cells:
        print("  ".join(v.rjust(w) for v, w in zip(line, widths, strict=True)))
    sys.stdout.flush()


def parquet_sink(out: Path) -> BatchHandler:
    """A sink appending each micro-batch's updated minutes, with its batch id, to Parquet.

    A minute may appear in several batches; its row with the highest ``batch_id`` is current.
    """
    def write(frame: DataFrame, batch_id: int) -> None:
        from pyspark.sql import functions as F

        frame.withColumn("batch_id", F.lit(batch_id)).write.mode("append") \
            .parquet(str(out / "minute_aggregates.parquet"))
    return write


@attrs.define
class LateRows:
    """Lines dropped as later than :data:`LATE_CUTOFF`, summed over the query's progress
    reports (Spark's ``numRowsDroppedByWatermark``), each micro-batch counted once."""

    dropped: int = 0
    _seen: set[int] = attrs.field(factory=set)

    def update(self, query: Any) -> int:
        """Add the batches reported since the last call; returns the total so far. Called more
        often than Spark's report buffer (100 batches) fills, so none is missed."""
        for report in query.recentProgress:
            batch = report.batchId
            if batch in self._seen:
                continue
            self._seen.add(batch)
            self.dropped += sum(operator.numRowsDroppedByWatermark
                                for operator in report.stateOperators)
        return self.dropped


def follow(spark: SparkSession, directory: Path, *, work: Path, on_batch: BatchHandler,
           trigger_seconds: float = 5.0, stop: threading.Event | None = None,
           timeout: float | None = None, from_start: bool = True,
           progress: Callable[[str], None] | None = None,
           late: LateRows | None = None) -> int:
    """Run the streaming job until ``stop`` is set, ``timeout`` passes, or Ctrl-C.

    ``work`` holds the spool of chunk files and the checkpoint. Returns the lines spooled.
    A line whose event time is more than :data:`LATE_CUTOFF` behind the latest one seen when
    it arrives is dropped by the watermark and counted: the progress lines and the last one
    say how many (``late``, when given, receives the count).
    """
    from pyspark.sql import functions as F

    spool = work / "spool"
    spool.mkdir(parents=True, exist_ok=True)
    tailer = LogTailer(directory, spool, from_start=from_start)
    poll_interval = min(1.0, max(trigger_seconds / 2, 0.1))
    polling = threading.Event()
    batches = 0
    late_rows = late if late is not None else LateRows()

    def poll_until_stopped() -> None:
        # Its own thread: starting the query takes seconds, and the live file must be followed
        # meanwhile (rotation could otherwise delete lines before they are read).
        while True:
            tailer.poll()
            if polling.wait(poll_interval):
                return

    def handle(frame: DataFrame, batch_id: int) -> None:
        nonlocal batches
        on_batch(frame, batch_id)
        batches += 1
        if progress is not None:
            progress(f"batch {batch_id}: {tailer.lines} line(s) followed from {directory} "
                     f"so far, {late_rows.dropped} dropped as late")

    tailer.poll()  # open the files (and spool what they hold) before Spark lists the spool
    poller = threading.Thread(target=poll_until_stopped, name="trio-broker-follow", daemon=True)
    poller.start()
    deadline = None if timeout is None else time.monotonic() + timeout
    stop_event = stop if stop is not None else threading.Event()
    query = None
    try:
        lines = (spark.readStream.schema(log_schema())
                 .option("mode", "PERMISSIVE")
                 .option("columnNameOfCorruptRecord", CORRUPT_RECORD)
                 .json(str(spool))
                 .withColumn("ts", F.try_to_timestamp(F.col("timestamp"))))
        query = (minute_aggregates(lines).writeStream
                 .outputMode("update")
                 .foreachBatch(handle)
                 .option("checkpointLocation", str(work / "checkpoint"))
                 .trigger(processingTime=f"{max(trigger_seconds, 0.1)} seconds")
                 .start())
        while not stop_event.is_set() and query.isActive:
            if deadline is not None and time.monotonic() >= deadline:
                break
            stop_event.wait(poll_interval)
            late_rows.update(query)
        polling.set()
        poller.join()
        tailer.close()  # the last lines, a torn one included
        if query.isActive:
            query.processAllAvailable()
            late_rows.update(query)
    except KeyboardInterrupt:
        pass
    finally:
        polling.set()
        poller.join()
        tailer.close()
        if query is not None:
            query.stop()
        if progress is not None:
            progress(f"stopped: {tailer.lines} line(s) followed from {directory} in "
                     f"{batches} batch(es); {late_rows.dropped} line(s) dropped as later than "
                     f"{LATE_CUTOFF} behind the newest")
    exception = query.exception() if query is not None else None
    if exception is not None:
        raise RuntimeError(f"the streaming query failed: {exception}")
    return tailer.lines
