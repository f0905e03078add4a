"""The storage layer's entry point: topics, their partition logs, and the background tasks.

On-disk layout under ``config.data_dir`` (Kafka's, plus one JSON file for topic metadata)::

    topics.json                         topic ids, partition counts, config overrides
    recovery-point-offset-checkpoint    Kafka's format: offsets below which data was fsynced
    log-start-offset-checkpoint         Kafka's format: log start offsets moved by DeleteRecords
    .kafka_cleanshutdown                present only between a clean close and the next open
    producer-id-block                   next unallocated producer id block
    cleaner-offset-checkpoint           Kafka's format: first dirty offset of compacted logs
    <topic>-<partition>/00000000000000000000.log|.index|.timeindex, <offset>.snapshot
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs
import trio

from ..config import BrokerConfig
from ..observability.log import emit
from ..offload import in_worker
from ..protocol.record_walk import CheckedRecords
from .durable import write_durably
from .errors import (
    InvalidPartitions,
    InvalidTopic,
    KafkaStorageError,
    OffsetOutOfRange,
    StorageError,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)
from .log import AppendResult, PartitionLog, ReadResult, now_ms
from .log_cleaner import LogCleaner
from .producer_state import ProducerIdAllocator
from .segment import unlink_all
from .topic_config import (
    INTERNAL_TOPICS,
    ConfigEntry,
    LogConfig,
    collision_key,
    describe_configs,
    validate_topic_configs,
    validate_topic_name,
)

TOPICS_FILE = "topics.json"
LOCK_FILE = ".lock"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_CHECKPOINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_CHECKPOINT_FILE = "log-start-offset-checkpoint"
PRODUCER_ID_FILE = "producer-id-block"
#: Kafka's log.flush.offset.checkpoint.interval.ms default.
CHECKPOINT_INTERVAL_S = 60.0
#: Kafka's producer.id.expiration.check.interval.ms default.
PRODUCER_EXPIRATION_CHECK_S = 600.0
MAX_PARTITIONS = 100_000
#: Segments retention or DeleteRecords deletes before letting other tasks run (each costs three
#: renames and a log line on the loop; the unlinks run in a worker thread).
DELETE_SEGMENTS_PER_STEP = 100
#: Appends of this many bytes or more go to a worker thread while writes stall
#: (:class:`WriteStalls`).
OFF_LOOP_WRITE_BYTES = 64 * 1024


@attrs.define
class WriteStalls:
    """When large appends are written by a worker thread (:meth:`PartitionLog.append_off_loop`).

    A producer writing faster than the disk takes dirty pages until the kernel throttles its
    writes (``balance_dirty_pages``): a megabyte ``os.write`` then sleeps 5-15 ms, and on the
    event loop every connection waited (measured: ~40% of a busy loop's time, the light
    producers' p99 at 24-140 ms). In Kafka a request-handler thread does the write. A thread
    hop costs ~170 µs of CPU per write on a small VM, though, which a disk that keeps up never
    pays back; so large appends are written on the loop until one takes longer than
    :data:`STALL_S`, then by a worker thread for :data:`HOLD_S`, as long as writes keep
    stalling. Times are real (``time.perf_counter``), not the loop's clock."""

    #: A large append slower than this was throttled (a megabyte normally takes ~1 ms).
    STALL_S = 0.004
    #: How long large appends stay off the loop after a stall.
    HOLD_S = 2.0
    _until: float = 0.0

    def off_loop(self, now: float) -> bool:
        """Whether a large append starting at ``now`` goes to a worker thread."""
        return now < self._until

    def observed(self, now: float, seconds: float) -> None:
        """A large append that started at ``now`` took ``seconds`` (on the loop or off it)."""
        if seconds > self.STALL_S:
            self._until = now + seconds + self.HOLD_S


EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3


@attrs.frozen
class TopicInfo:
    """A topic as every handler sees it."""

    name: str
    topic_id: uuid.UUID
    num_partitions: int
    configs: Mapping[str, str] = attrs.field(factory=dict)
    internal: bool = False


class LogManager:
    """Every topic and partition log of this broker (see the module docstring for the layout)."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.data_dir = config.data_dir
        self._topics: dict[str, TopicInfo] = {}
        #: Each topic's entry in the topics file, encoded when the topic changes.
        self._topic_entries: dict[str, str] = {}
        #: collision_key -> topic name, for CreateTopics' collision check (an entry whose topic
        #: is gone is stale, and checked on use).
        self._collision_names: dict[str, str] = {}
        #: Names being created or deleted in worker threads (:meth:`create_topic_async`,
        #: :meth:`delete_topic_async`): no second creation or deletion may start on them.
        self._reserved: set[str] = set()
        #: The topics file's text versions: each write takes the next number, and a writer
        #: whose version is older than the one on disk does not write (worker threads and the
        #: event loop both write it).
        self._topics_version = 0
        self._topics_written = 0
        self._topics_file_lock = threading.Lock()
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._log_configs: dict[str, LogConfig] = {}
        #: The flush scheduler's current sleep (:meth:`apply_broker_config` ends it).
        self._flush_nap: trio.CancelScope | None = None
        self._producer_ids: ProducerIdAllocator | None = None
        #: Where large appends are written (:class:`WriteStalls`).
        self.write_stalls = WriteStalls()
        self.clean_shutdown = False
        self._opened = False
        self._lock_fd: int | None = None
        #: One writer of the log-start checkpoint at a time (they share its ``.tmp`` file);
        #: a thread lock, since worker threads and the event loop (topic deletion) both write.
        self._log_starts_lock = threading.Lock()
        #: The log cleaner (compaction); its tasks run under :meth:`run`.
        self.cleaner = LogCleaner(self)

    # ------------------------------------------------------------------------- life cycle
    def open(self) -> None:
        """Create the data directory, load topics, recover logs after a crash."""
        started = time.perf_counter()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock_data_dir()
        try:
            self._load()
        except BaseException:
            # Nothing half-open left behind (a corrupt file named in the error can be fixed
            # and the directory opened again by this process).
            self.abandon()
            raise
        emit("log_manager_opened", data_dir=str(self.data_dir), topics=len(self._topics),
             partitions=len(self._logs), clean_shutdown=self.clean_shutdown,
             duration_ms=(time.perf_counter() - started) * 1000)

    def _load(self) -> None:
        marker = self.data_dir / CLEAN_SHUTDOWN_FILE
        self.clean_shutdown = marker.exists()
        points = self._read_checkpoint(RECOVERY_CHECKPOINT_FILE)
        starts = self._read_checkpoint(LOG_START_CHECKPOINT_FILE)
        self._topics = self._load_topics()
        self._collision_names = {collision_key(name): name for name in self._topics}
        self._encode_topics(*self._topics)
        for info in self._topics.values():
            self._log_configs[info.name] = LogConfig.build(self.config, info.configs)
            for partition in range(info.num_partitions):
                key = (info.name, partition)
                self._open_log(info.name, partition, points.get(key), starts.get(key))
        self._remove_strays()
        self.cleaner.load()
        known = [pid for log in self._logs.values() for pid in log.producer_state.producers]
        self._producer_ids = ProducerIdAllocator(self.data_dir / PRODUCER_ID_FILE,
                                                 floor=max(known, default=-1) + 1)
        # From here on, a crash must trigger recovery: the marker goes before any write.
        marker.unlink(missing_ok=True)
        self._write_recovery_points()
        self._opened = True

    def _lock_data_dir(self) -> None:
        """Kafka's ``.lock``: a second broker on the same directory would corrupt it (and its
        clean-shutdown marker would hide the first one's crash), so refuse to start."""
        fd = os.open(self.data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise KafkaStorageError(
                f"Failed to acquire lock on {self.data_dir / LOCK_FILE}: another process is "
                "using this data directory") from None
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _open_log(self, topic: str, partition: int, recovery_point: int | None,
                  log_start_offset: int | None = None) -> PartitionLog:
        log = PartitionLog(topic, partition, self.data_dir / f"{topic}-{partition}",
                           self._log_configs[topic])
        # Logs created by this run (new topics and partitions) have no previous run to recover
        # from: the clean-shutdown flag read at start-up is not theirs.
        try:
            log.open(clean=self.clean_shutdown or self._opened, recovery_point=recovery_point,
                     log_start_offset=log_start_offset)
        except BaseException:
            log.close()  # the segments it did open
            raise
        self._logs[(topic, partition)] = log
        return log

    def _add_partitions(self, info: TopicInfo, previous: TopicInfo | None,
                        partitions: range) -> None:
        """Open the new partitions' logs, then write the topic metadata naming them: all or
        none. If a log cannot be created (no file descriptor left, a full disk) or the metadata
        cannot be written, the logs made are closed and deleted and the metadata stays as it
        was, so it never names a partition the broker could not open (a broker restarted on
        such metadata would fail to start)."""
        created = 0
        try:
            for partition in partitions:
                self._open_log(info.name, partition, None)
                created += 1
            self._topics[info.name] = info
            if previous is None:
                self._collision_names[collision_key(info.name)] = info.name
            self._save_topics(info.name)
        except OSError as exc:
            if previous is None:
                self._topics.pop(info.name, None)
            else:
                self._topics[info.name] = previous
            self._encode_topics(info.name)
            # Those created, and the partial directory of the one that failed.
            self._discard_logs(info.name, range(
                partitions.start, partitions.start + min(created + 1, len(partitions))))
            recording = created == len(partitions)  # the logs were made, the metadata not
            failed = (f"Could not record topic '{info.name}'" if recording
                      else f"Could not create partition {partitions.start + created} of topic "
                           f"'{info.name}'")
            emit("partition_create_failed", topic=info.name, partitions=len(partitions),
                 created=created, error=f"topic metadata: {exc}" if recording else str(exc))
            raise StorageError(f"{failed} ({exc}); none of the {len(partitions)} new "
                               "partitions were created.") from exc

    def _open_new_logs(self, info: TopicInfo, partitions: range) -> list[PartitionLog]:
        """Create the new partitions' logs without publishing them (a worker thread's part of
        :meth:`_add_partitions_async`): all or none, as :meth:`_add_partitions`."""
        logs: list[PartitionLog] = []
        try:
            for partition in partitions:
                log = PartitionLog(info.name, partition, self.data_dir / f"{info.name}-{partition}",
                                   self._log_configs[info.name])
                logs.append(log)
                log.open(clean=True, recovery_point=None)
        except OSError as exc:
            for log in logs:
                log.delete_files()
            emit("partition_create_failed", topic=info.name, partitions=len(partitions),
                 created=len(logs) - 1, error=str(exc))
            raise StorageError(
                f"Could not create partition {partitions.start + len(logs) - 1} of topic "
                f"'{info.name}' ({exc}); none of the {len(partitions)} new partitions were "
                "created.") from exc
        return logs

    async def _add_partitions_async(self, info: TopicInfo, previous: TopicInfo | None,
                                    partitions: range) -> None:
        """:meth:`_add_partitions` with the file work in worker threads: the logs are created,
        then the topics file names them, then they are published (the order a crash must
        see: a topics file never names a partition whose directory does not exist)."""
        logs = await in_worker(None, self._open_new_logs, info, partitions)
        self._topic_entries[info.name] = _topic_entry(info)
        try:
            await in_worker(None, self._write_topics, *self._topics_snapshot())
        except OSError as exc:
            if previous is None:
                self._topic_entries.pop(info.name, None)
            else:
                self._topic_entries[info.name] = _topic_entry(previous)
            await in_worker(None, _delete_logs, logs)
            emit("partition_create_failed", topic=info.name, partitions=len(partitions),
                 created=len(partitions), error=f"topic metadata: {exc}")
            raise StorageError(f"Could not record topic '{info.name}' ({exc}); none of the "
                               f"{len(partitions)} new partitions were created.") from exc
        for log in logs:
            self._logs[(info.name, log.partition)] = log
        self._topics[info.name] = info
        if previous is None:
            self._collision_names[collision_key(info.name)] = info.name

    def _discard_logs(self, topic: str, partitions: range) -> None:
        for partition in partitions:
            log = self._logs.pop((topic, partition), None)
            if log is not None:
                log.delete_files()
            else:
                shutil.rmtree(self.data_dir / f"{topic}-{partition}", ignore_errors=True)

    def _load_topics(self) -> dict[str, TopicInfo]:
        path = self.data_dir / TOPICS_FILE
        topics: dict[str, TopicInfo] = {}
        if path.exists():
            try:
                payload = json.loads(path.read_text(encoding="utf-8"))
                for item in payload["topics"]:
                    info = TopicInfo(item["name"], uuid.UUID(item["topic_id"]),
                                     int(item["num_partitions"]),
                                     dict(item.get("configs", {})),
                                     bool(item.get("internal", False)))
                    validate_topic_name(info.name)  # a directory name: no "../"
                    if not 1 <= info.num_partitions <= MAX_PARTITIONS:
                        raise ValueError(f"topic '{info.name}' has {info.num_partitions} "
                                         f"partitions (allowed: 1 to {MAX_PARTITIONS})")
                    topics[info.name] = info
            except (ValueError, KeyError, TypeError, AttributeError, InvalidTopic) as exc:
                # As Kafka with a corrupt checkpoint or metadata file: refuse the directory,
                # naming the file (guessing the topics could resurrect deleted ones or lose
                # their configs and ids).
                raise KafkaStorageError(
                    f"{path} is corrupt ({type(exc).__name__}: {exc}); restore it from a backup "
                    "or remove it to adopt the partition directories with default configs"
                ) from None
            return topics
        # No metadata file (first start, or a data dir from elsewhere): adopt partition dirs.
        counts: dict[str, int] = {}
        for entry in self.data_dir.iterdir():
            topic, sep, number = entry.name.rpartition("-")
            if entry.is_dir() and sep and number.isdigit() and topic:
                counts[topic] = max(counts.get(topic, 0), int(number) + 1)
        for topic, count in counts.items():
            topics[topic] = TopicInfo(topic, uuid.uuid4(), count, {}, topic in INTERNAL_TOPICS)
        if topics:
            self._topics = topics
            self._save_topics(*topics)
        return topics

    def _remove_strays(self) -> None:
        """Partition directories of deleted topics (a crash mid-delete) are removed."""
        for entry in self.data_dir.iterdir():
            topic, sep, number = entry.name.rpartition("-")
            if not (entry.is_dir() and sep and number.isdigit()):
                continue
            if (topic, int(number)) not in self._logs:
                shutil.rmtree(entry, ignore_errors=True)
                emit("stray_partition_removed", directory=str(entry))

    def _encode_topics(self, *names: str) -> None:
        """Bring the topics file's entries of ``names`` up to date (a topic gone: removed)."""
        for name in names:
            info = self._topics.get(name)
            if info is None:
                self._topic_entries.pop(name, None)
            else:
                self._topic_entries[name] = _topic_entry(info)

    def _save_topics(self, *changed: str) -> None:
        """Write the topics file durably, the entries of the ``changed`` topics encoded anew.

        Only a changed topic's entry is encoded (json's C encoder): encoding every topic
        with indent= (the pure-Python encoder) on each change held the event loop, every
        connection, for 250 ms per created topic at 10,000 topics."""
        self._encode_topics(*changed)
        self._write_topics(*self._topics_snapshot())

    def _topics_snapshot(self) -> tuple[int, str]:
        """The topics file's next version and text, from the encoded entries."""
        self._topics_version += 1
        return self._topics_version, ('{"version": 1, "topics": [\n'
                                      + ",\n".join(self._topic_entries.values()) + "\n]}\n")

    def _write_topics(self, version: int, text: str) -> None:
        """Write one version of the topics file, unless a newer one is already written."""
        with self._topics_file_lock:
            if version > self._topics_written:
                write_durably(self.data_dir / TOPICS_FILE, text)
                self._topics_written = version

    def _read_checkpoint(self, name: str) -> dict[tuple[str, int], int]:
        """A Kafka offset checkpoint file (version, count, then ``topic partition offset``)."""
        points: dict[tuple[str, int], int] = {}
        path = self.data_dir / name
        try:
            lines = path.read_text("utf-8").splitlines()
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise KafkaStorageError(f"Cannot read checkpoint file {path}: {exc}") from None
        # Kafka's CheckpointFile reader: a malformed file is an error naming it (ignoring it
        # would bring back records DeleteRecords removed, or let the cleaner drop tombstones
        # again), never silently empty.
        try:
            if not lines or lines[0].strip() != "0":
                raise ValueError(f"unrecognized version {lines[0] if lines else ''!r}")
            count = int(lines[1])
            entries = [line for line in lines[2:] if line.strip()]
            if count != len(entries):
                raise ValueError(f"expected {count} entries but found {len(entries)}")
            for line in entries:
                topic, partition, offset = line.split()
                points[(topic, int(partition))] = int(offset)
        except (ValueError, IndexError) as exc:
            raise KafkaStorageError(
                f"Malformed checkpoint file {path} ({exc}); restore or remove it") from None
        return points

    def _write_recovery_points(self) -> None:
        lines = ["0", str(len(self._logs))]
        lines += [f"{t} {p} {log.recovery_point}" for (t, p), log in self._logs.items()]
        write_durably(self.data_dir / RECOVERY_CHECKPOINT_FILE, "\n".join(lines) + "\n")
        self._write_log_starts()

    def _write_log_starts(self) -> None:
        # The text is built under the lock, so of concurrent writers the last one to write
        # always writes the newest starts (an older snapshot never overwrites a newer one).
        with self._log_starts_lock:
            write_durably(self.data_dir / LOG_START_CHECKPOINT_FILE, self._log_starts_text())

    def _log_starts_text(self) -> str:
        """Kafka's log-start-offset checkpoint: only starts inside the first segment (the
        others are implied by the segment files)."""
        moved = [(t, p, log.log_start_offset) for (t, p), log in list(self._logs.items())
                 if log.log_start_offset > log.segments[0].base_offset]
        lines = ["0", str(len(moved))] + [f"{t} {p} {offset}" for t, p, offset in moved]
        return "\n".join(lines) + "\n"

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Background work under the broker's nursery: retention, time-based flush, recovery
        point checkpoints, producer expiry, the log cleaner. Cancelled at shutdown."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._periodic, self.config.log_retention_check_interval_ms / 1000,
                               self._retention_pass)
            nursery.start_soon(self._flush_loop)
            nursery.start_soon(self._periodic, CHECKPOINT_INTERVAL_S, self._checkpoint_pass)
            nursery.start_soon(self._periodic, PRODUCER_EXPIRATION_CHECK_S, self._expire_pass)
            if self.config.log_cleaner_enable:
                await nursery.start(self.cleaner.run)
            task_status.started()

    async def _periodic(self, interval_s: float, job: Any) -> None:
        while True:
            await trio.sleep(interval_s)
            try:
                await job()
            except Exception as exc:  # as Kafka's scheduler: log, keep the broker, retry later
                emit("background_task_failed", task=job.__name__, error=type(exc).__name__,
                     detail=repr(exc))

    async def _retention_pass(self) -> None:
        now = now_ms()
        for log in list(self._logs.values()):
            await self._delete_in_steps(log, functools.partial(log.delete_old_segments, now))
            await trio.lowlevel.checkpoint()

    async def _delete_in_steps(self, log: PartitionLog,
                               delete: Callable[[int, list[Path]], int]) -> None:
        """Call ``delete(limit, retired)`` (it deletes at most ``limit`` segments of ``log``,
        says how many, and adds their renamed files to ``retired``) until it deletes fewer,
        other tasks running between steps: deleting thousands of segments at once held the
        event loop for seconds. The files are unlinked by a worker thread (a 256 MiB segment's
        unlink held the loop for up to 150 ms). Stops if ``log`` is deleted meanwhile."""
        while self._logs.get((log.topic, log.partition)) is log:
            retired: list[Path] = []
            deleted = delete(DELETE_SEGMENTS_PER_STEP, retired)
            if retired:
                await trio.to_thread.run_sync(unlink_all, retired)
            if deleted < DELETE_SEGMENTS_PER_STEP:
                return
            await trio.lowlevel.checkpoint()

    async def _checkpoint_pass(self) -> None:
        await trio.to_thread.run_sync(self._write_recovery_points)

    async def _expire_pass(self) -> None:
        now = now_ms()
        for log in list(self._logs.values()):
            log.producer_state.remove_expired(now, self.config.producer_id_expiration_ms)

    async def _flush_loop(self) -> None:
        """Kafka's flush scheduler: fsync logs whose oldest unflushed data passed flush.ms."""
        while True:
            tick_ms = min([self.config.log_flush_scheduler_interval_ms]
                          + [c.flush_ms for c in self._log_configs.values()])
            # Huge values (the default: never) would overflow trio.sleep; sleep in long naps.
            # A broker config change ends the nap early (a lower flush.ms applies at once).
            with trio.move_on_after(min(max(tick_ms, 1) / 1000, 3600.0)) as self._flush_nap:
                await trio.sleep_forever()
            self._flush_nap = None
            now = now_ms()
            for log in list(self._logs.values()):
                if log.unflushed_messages and now - log.last_flush_ms >= log.config.flush_ms:
                    # A failure was reported by the log; the next tick retries.
                    with contextlib.suppress(StorageError):
                        await log.flush()

    def close(self) -> None:
        """Flush everything, save producer state and checkpoints, mark the shutdown clean."""
        clean = True
        for log in self._logs.values():
            try:
                log.flush_sync()
                log.write_snapshot()
            except OSError as exc:
                clean = False
                emit("log_flush_failed", topic=log.topic, partition=log.partition, error=str(exc))
            log.close()
        if self._opened and clean:
            self._write_recovery_points()
            (self.data_dir / CLEAN_SHUTDOWN_FILE).touch()
        self._logs.clear()
        self._opened = False
        self._release_lock()

    def abandon(self) -> None:
        """Let go of the files as a killed process does (``trio_broker.testing``'s
        ``restart(kill=True)``): nothing flushed, no snapshots or checkpoints, no clean-shutdown
        marker, so the next open recovers as after a crash."""
        for log in self._logs.values():
            log.close()
        self._logs.clear()
        self._opened = False
        self._release_lock()

    # ----------------------------------------------------------------------------- topics
    @property
    def topics(self) -> Mapping[str, TopicInfo]:
        return self._topics

    def names_by_id(self) -> dict[uuid.UUID, str]:
        """Every topic's name by its id (KIP-516), for a request that names topics by id:
        built once per request, never per entry."""
        return {info.topic_id: name for name, info in self._topics.items()}

    def create_topic(self, name: str, num_partitions: int, configs: Mapping[str, str] = {},  # noqa: B006
                     *, validate_only: bool = False, internal: bool = False) -> TopicInfo:
        """Create a topic and its (empty) partition logs, on the calling thread (the broker's
        own topics, auto-creation of ``num.partitions``; CreateTopics uses
        :meth:`create_topic_async`)."""
        info, log_config = self._new_topic(name, num_partitions, configs, internal)
        if validate_only:
            return info
        self._log_configs[name] = log_config
        try:
            self._add_partitions(info, None, range(num_partitions))
        except StorageError:
            del self._log_configs[name]
            raise
        emit("topic_created", topic=name, partitions=num_partitions, internal=info.internal,
             configs=json.dumps(dict(info.configs)))
        return info

    def is_reserved(self, name: str) -> bool:
        """True while ``name`` is being created or deleted in a worker thread."""
        return name in self._reserved

    async def create_topic_async(self, name: str, num_partitions: int,
                                 configs: Mapping[str, str], *, validate_only: bool = False,
                                 internal: bool = False) -> TopicInfo:
        """:meth:`create_topic` with the partition logs created and the topics file written in
        a worker thread (thousands of partitions take seconds of file creation). The name is
        reserved meanwhile, and the topic appears (to Metadata, Produce, ...) only once its
        logs exist and the topics file names it."""
        info, log_config = self._new_topic(name, num_partitions, configs, internal)
        if validate_only:
            return info
        self._reserved.add(name)
        self._collision_names[collision_key(name)] = name
        self._log_configs[name] = log_config
        try:
            await self._add_partitions_async(info, None, range(num_partitions))
        except BaseException:
            del self._log_configs[name]
            raise
        finally:
            self._reserved.discard(name)
        emit("topic_created", topic=name, partitions=num_partitions, internal=info.internal,
             configs=json.dumps(dict(info.configs)))
        return info

    def _new_topic(self, name: str, num_partitions: int, configs: Mapping[str, str],
                   internal: bool) -> tuple[TopicInfo, LogConfig]:
        """Validate a new topic as Kafka's controller does: its info and log configuration."""
        validate_topic_name(name)
        if name in self._topics:
            raise TopicAlreadyExists(f"Topic '{name}' already exists.")
        if name in self._reserved:
            raise TopicAlreadyExists(f"Topic '{name}' is being created or deleted.")
        other = self._collision_names.get(collision_key(name))
        if other is not None and (other in self._topics or other in self._reserved):
            raise InvalidTopic(f"Topic '{name}' collides with existing topic: {other}")
        if not 1 <= num_partitions <= MAX_PARTITIONS:
            raise InvalidPartitions(
                "Number of partitions was set to an invalid non-positive value."
                if num_partitions < 1 else f"Too many partitions: {num_partitions}")
        overrides = validate_topic_configs(configs)
        log_config = LogConfig.build(self.config, overrides)
        log_config.check()
        return TopicInfo(name, uuid.uuid4(), num_partitions, overrides,
                         internal or name in INTERNAL_TOPICS), log_config

    def delete_topic(self, name: str) -> None:
        """Delete a topic and its files on the calling thread (:meth:`delete_topic_async` is
        DeleteTopics')."""
        logs, forgot, moved_start = self._unpublish(name)
        self._save_topics(name)
        self._forget_files(logs, forgot, moved_start)
        emit("topic_deleted", topic=name)

    def _unpublish(self, name: str) -> tuple[list[PartitionLog], bool, bool]:
        """The topic gone for every request at once: its logs (woken, not yet deleted), whether
        the cleaner dropped a checkpoint of it, and whether a log start offset had moved."""
        info = self._require(name)
        del self._topics[name]
        logs = [log for partition in range(info.num_partitions)
                if (log := self._logs.pop((name, partition), None)) is not None]
        for log in logs:
            log._wake()
        self._log_configs.pop(name, None)
        moved_start = any(log.log_start_offset > log.segments[0].base_offset for log in logs)
        return logs, self.cleaner.forget(name), moved_start

    async def delete_topic_async(self, name: str) -> None:
        """:meth:`delete_topic` with the topics file and the partition directories (thousands
        of files) handled in worker threads. The topic is gone for every request at once; its
        name stays reserved until its files are."""
        logs, forgot, moved_start = self._unpublish(name)
        self._reserved.add(name)
        try:
            self._encode_topics(name)
            await in_worker(None, self._write_topics, *self._topics_snapshot())
            await in_worker(None, self._forget_files, logs, forgot, moved_start)
        finally:
            self._reserved.discard(name)
        emit("topic_deleted", topic=name)

    def _forget_files(self, logs: list[PartitionLog], cleaner_checkpoint: bool,
                      log_starts: bool) -> None:
        """A deleted topic's files gone, and the checkpoints that named its partitions
        rewritten (a topic re-created under the name must not inherit its start offsets)."""
        _delete_logs(logs)
        if cleaner_checkpoint:
            self.cleaner.write_checkpoints()
        if log_starts:
            self._write_log_starts()

    async def create_partitions_async(self, name: str, new_total: int, *,
                                      validate_only: bool = False) -> TopicInfo:
        """:meth:`create_partitions` with the new logs created in a worker thread."""
        info = self._require(name)
        updated = self._grown(info, new_total)
        if validate_only or name in self._reserved:
            if name in self._reserved:
                raise InvalidPartitions(f"Topic '{name}' is being changed; try again.")
            return updated
        self._reserved.add(name)
        try:
            await self._add_partitions_async(updated, info,
                                             range(info.num_partitions, new_total))
        finally:
            self._reserved.discard(name)
        emit("partitions_created", topic=name, partitions=new_total)
        return updated

    def create_partitions(self, name: str, new_total: int, *,
                          validate_only: bool = False) -> TopicInfo:
        info = self._require(name)
        updated = self._grown(info, new_total)
        if validate_only:
            return updated
        self._add_partitions(updated, info, range(info.num_partitions, new_total))
        emit("partitions_created", topic=name, partitions=new_total)
        return updated

    @staticmethod
    def _grown(info: TopicInfo, new_total: int) -> TopicInfo:
        """CreatePartitions' checks (Kafka's ``ReplicationControlManager``): ``info`` with
        ``new_total`` partitions."""
        if new_total < info.num_partitions:
            raise InvalidPartitions(
                f"Topic currently has {info.num_partitions} partitions, which is higher than "
                f"the requested {new_total}.")
        if new_total == info.num_partitions:
            raise InvalidPartitions(f"Topic already has {info.num_partitions} partitions.")
        if new_total > MAX_PARTITIONS:
            raise InvalidPartitions(f"Too many partitions: {new_total}")
        return attrs.evolve(info, num_partitions=new_total)

    def apply_broker_config(self, config: BrokerConfig) -> None:
        """New broker-level defaults (a dynamic broker config changed): every topic without an
        override of a key takes the new default at once, as Kafka's ``DynamicLogConfig``
        reconfigures each log; the flush scheduler re-reads its tick."""
        self.config = config
        for name, info in self._topics.items():
            log_config = LogConfig.build(config, info.configs)
            self._log_configs[name] = log_config
            for partition in range(info.num_partitions):
                log = self._logs.get((name, partition))
                if log is not None:
                    log.config = log_config
        if self._flush_nap is not None:
            self._flush_nap.cancel()

    def describe_topic_config(self, name: str) -> list[ConfigEntry]:
        return describe_configs(self.config, self._require(name).configs)

    def alter_topic_config(self, name: str, changes: Mapping[str, str | None], *,
                           incremental: bool, validate_only: bool = False) -> None:
        info = self._require(name)
        overrides = dict(info.configs) if incremental else {}
        for key, value in changes.items():
            if value is None:
                overrides.pop(key, None)
            else:
                overrides[key] = value
        overrides = validate_topic_configs(overrides)
        log_config = LogConfig.build(self.config, overrides)
        log_config.check()
        if validate_only:
            return
        self._topics[name] = attrs.evolve(info, configs=overrides)
        self._log_configs[name] = log_config
        self._save_topics(name)
        for partition in range(info.num_partitions):
            log = self._logs.get((name, partition))
            if log is not None:
                log.config = log_config
        emit("topic_config_changed", topic=name, configs=json.dumps(overrides))

    def _require(self, name: str) -> TopicInfo:
        info = self._topics.get(name)
        if info is None:
            raise UnknownTopicOrPartition(
                f"This server does not host this topic-partition: {name}")
        return info

    # ------------------------------------------------------------------------- data path
    def get_partition(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def _log(self, topic: str, partition: int) -> PartitionLog:
        log = self._logs.get((topic, partition))
        if log is None:
            raise UnknownTopicOrPartition.not_hosted(topic, partition)
        return log

    async def append(self, topic: str, partition: int, records: bytes, *,
                     producer_check: bool = True, checked: CheckedRecords | None = None
                     ) -> AppendResult:
        """Validate and append a ``records`` blob; flush when the policy says so.

        ``producer_check=False`` is for the broker's own writers (the group coordinator): no
        idempotence checks, and control batches are allowed. ``checked``: the records'
        heavy checks, done ahead (:meth:`PartitionLog.append`).
        """
        log = self._log(topic, partition)
        large = len(records) >= OFF_LOOP_WRITE_BYTES
        started = time.perf_counter() if large else 0.0
        if (not log.write_lock.locked() and not (large and self.write_stalls.off_loop(started))
                and not log.roll_due(len(records))):
            result = log.append(records, from_client=producer_check,
                                producer_check=producer_check, checked=checked)
        else:
            # Shielded, as the flush below: a produce handled inline must settle.
            with trio.CancelScope(shield=True):
                async with log.write_lock:
                    if log.closed:  # deleted while this append waited its turn
                        raise UnknownTopicOrPartition.not_hosted(topic, partition)
                    # A small append behind a large one (or one that rolls the segment) is
                    # written by a thread too: rare, and one way is simpler than two.
                    result = await log.append_off_loop(
                        records, from_client=producer_check, producer_check=producer_check,
                        checked=checked)
        if large:
            self.write_stalls.observed(started, time.perf_counter() - started)
        if log.needs_flush and not result.duplicate:
            # Shielded: the records are in the log, and the answer waits for the flush; a
            # produce handled inline relies on this being its only checkpoint
            # (RequestHandlerPool.handle_inline).
            with trio.CancelScope(shield=True):
                await log.flush()
        return result

    def read(self, topic: str, partition: int, offset: int, max_bytes: int, *,
             min_one_batch: bool = True) -> ReadResult:
        return self._log(topic, partition).read(offset, max_bytes, min_one_batch=min_one_batch)

    async def wait_for_data(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Return at the next append to any of ``partitions`` (or when one is deleted).

        Callers bound the wait themselves (``trio.move_on_after``), as Fetch's long poll does.
        """
        event = trio.Event()
        logs = [log for key in partitions if (log := self._logs.get(key)) is not None]
        for log in logs:
            log.waiters.add(event)
        try:
            await event.wait()
        finally:
            for log in logs:
                log.waiters.discard(event)

    def list_offset(self, topic: str, partition: int, timestamp: int) -> tuple[int, int]:
        """ListOffsets: ``(offset, timestamp)``; -2 earliest, -1 latest, -3 max timestamp;
        ``(-1, -1)`` when no record has a timestamp at or after the one asked for."""
        log = self._log(topic, partition)
        if timestamp == EARLIEST_TIMESTAMP:
            return log.log_start_offset, -1
        if timestamp == LATEST_TIMESTAMP:
            return log.high_watermark, -1
        if timestamp == MAX_TIMESTAMP:
            return log.max_timestamp_offset()
        if timestamp < 0:
            raise OffsetOutOfRange(f"Unsupported special timestamp {timestamp}")
        found = log.offset_for_timestamp(timestamp)
        return found if found is not None else (-1, -1)

    async def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """DeleteRecords: move the log start offset to ``offset`` (-1: the high watermark) and
        checkpoint it before answering, so a restart never resurrects deleted records.
        Returns the new log start offset."""
        log = self._log(topic, partition)
        before = log.log_start_offset
        # The segments below the new start go a batch at a time, other tasks running between.
        start = log.delete_records_before(offset, limit=0)
        await self._delete_in_steps(log, log.delete_breached_segments)
        if start != before:
            await trio.to_thread.run_sync(self._write_log_starts)
        return start

    async def flush(self, topic: str, partition: int) -> None:
        await self._log(topic, partition).flush()

    def allocate_producer_id(self) -> int:
        """A never-before-used producer id (InitProducerId)."""
        if self._producer_ids is None:
            raise StorageError("the log manager is not open")
        return self._producer_ids.allocate()

    def all_partitions(self) -> list[PartitionLog]:
        return list(self._logs.values())


def _topic_entry(info: TopicInfo) -> str:
    """A topic's entry in the topics file."""
    return json.dumps({"name": info.name, "topic_id": str(info.topic_id),
                       "num_partitions": info.num_partitions, "configs": dict(info.configs),
                       "internal": info.internal})


def _delete_logs(logs: list[PartitionLog]) -> None:
    for log in logs:
        log.delete_files()
