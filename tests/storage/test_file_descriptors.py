"""File descriptors: what a partition holds, and creation that runs out of them.

A broker that accepted a CreatePartitions it could not open ran out of descriptors, recorded
partitions it never made, and could not start again. Creation is now all or nothing, and a
partition holds one descriptor until it is written to (Kafka's count: its indexes are
memory-mapped and their descriptors closed).
"""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from trio_broker.storage import LogManager
from trio_broker.storage import errors as se

from .test_storage import batch, crash, make, read_all, reopen


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@contextmanager
def descriptors_left(count: int) -> Iterator[None]:
    """Lower this process's soft limit so that only ``count`` more files can be opened."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # The listing's own descriptor is closed again: open_fds() counts one too many.
    resource.setrlimit(resource.RLIMIT_NOFILE, (open_fds() - 1 + count, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def partition_dirs(root: Path, topic: str) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.rpartition("-")[0] == topic)


async def test_an_unwritten_partition_holds_one_descriptor(tmp_path: Path) -> None:
    lm = make(tmp_path, log_index_interval_bytes="1")
    before = open_fds()
    lm.create_topic("idle", 40)
    assert open_fds() - before == 40
    # Written with an index entry per batch: the active segment's two index files open.
    await lm.append("idle", 0, batch([b"a"]))
    await lm.append("idle", 0, batch([b"b"]))
    assert open_fds() - before == 42
    # Rolled: the old segment keeps its .log (fetches read it), not its indexes.
    log = lm.get_partition("idle", 0)
    assert log is not None
    log.roll()
    assert len(log.segments) == 2
    assert open_fds() - before == 41
    await lm.append("idle", 0, batch([b"c"]))
    assert [v for _, v in read_all(lm, "idle")] == [b"a", b"b", b"c"]
    lm = reopen(lm)
    assert [v for _, v in read_all(lm, "idle")] == [b"a", b"b", b"c"]
    lm.close()


async def test_the_indexes_of_a_rolled_segment_survive_a_flush_and_restart(tmp_path: Path
                                                                        ) -> None:
    lm = make(tmp_path, log_index_interval_bytes="1")
    lm.create_topic("t", 1)
    for value in (b"a", b"b", b"c"):
        await lm.append("t", 0, batch([value]))
    log = lm.get_partition("t", 0)
    assert log is not None
    old = log.active
    log.roll()
    old.fsync()  # the released index files are synced through a file opened for it
    entries = list(old.offset_index.offsets)
    assert len(entries) >= 2  # an entry per batch once the first interval has passed
    assert old.offset_index.path.stat().st_size == len(entries) * 8
    lm = reopen(lm, after_crash=True)
    log = lm.get_partition("t", 0)
    assert log is not None
    assert list(log.segments[0].offset_index.offsets) == entries
    assert [v for _, v in read_all(lm, "t")] == [b"a", b"b", b"c"]
    lm.close()


def test_a_topic_that_cannot_be_opened_is_not_created(tmp_path: Path, log_events: Any) -> None:
    lm = make(tmp_path)
    before = open_fds()
    with descriptors_left(25), pytest.raises(se.StorageError) as raised:
        lm.create_topic("wide", 100)
    assert "none of the 100 new partitions were created" in raised.value.message
    assert "wide" not in lm.topics
    assert open_fds() == before
    assert partition_dirs(tmp_path, "wide") == []
    (event,) = log_events.events("partition_create_failed")
    assert event["topic"] == "wide" and event["partitions"] == 100
    assert 0 < event["created"] < 100
    # With descriptors to spare the same request succeeds.
    lm.create_topic("wide", 100)
    assert lm.topics["wide"].num_partitions == 100
    lm.close()


async def test_partitions_that_cannot_be_opened_are_not_added(tmp_path: Path) -> None:
    lm = make(tmp_path)
    lm.create_topic("grow", 2)
    await lm.append("grow", 1, batch([b"kept"]))
    before = open_fds()
    with descriptors_left(25), pytest.raises(se.StorageError):
        lm.create_partitions("grow", 200)
    assert lm.topics["grow"].num_partitions == 2
    assert open_fds() == before
    assert partition_dirs(tmp_path, "grow") == ["grow-0", "grow-1"]
    # The metadata on disk agrees: a restart opens the two partitions, data intact.
    lm = reopen(lm)
    assert lm.topics["grow"].num_partitions == 2
    assert [v for _, v in read_all(lm, "grow", 1)] == [b"kept"]
    lm.create_partitions("grow", 5)
    assert partition_dirs(tmp_path, "grow") == [f"grow-{i}" for i in range(5)]
    lm.close()


def test_a_topic_whose_metadata_cannot_be_written_is_not_created(tmp_path: Path) -> None:
    """The partitions open, then the topic metadata cannot be written (a file-size limit
    stands in for a full disk): the logs go again and the topic is not there."""
    lm = make(tmp_path)
    lm.create_topic("first", 1)
    metadata = (tmp_path / "topics.json").read_bytes()
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    # Room for the empty files of new partitions, not for metadata naming another topic.
    resource.setrlimit(resource.RLIMIT_FSIZE, (len(metadata), hard))
    try:
        with pytest.raises(se.StorageError) as raised:
            lm.create_topic("second", 3)
        with pytest.raises(se.StorageError):
            lm.create_partitions("first", 10)  # one digit more than the metadata has room for
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert "Could not record topic 'second'" in raised.value.message
    assert set(lm.topics) == {"first"} and lm.topics["first"].num_partitions == 1
    assert partition_dirs(tmp_path, "second") == []
    assert partition_dirs(tmp_path, "first") == ["first-0"]
    assert (tmp_path / "topics.json").read_bytes() == metadata
    lm = reopen(lm)
    assert set(lm.topics) == {"first"}
    lm.create_topic("second", 3)
    lm.close()


async def test_a_roll_without_a_descriptor_is_a_storage_error_and_keeps_the_log(
        tmp_path: Path, log_events: Any) -> None:
    """A segment roll that cannot open the new segment's files (the process's open-file limit,
    reached by a partition of thousands of small segments) fails that append with
    KAFKA_STORAGE_ERROR, as Kafka's roll does, not UNKNOWN_SERVER_ERROR from a bare OSError;
    the old segment stays active and the next append after descriptors return rolls."""
    lm = make(tmp_path, log_segment_bytes="200")
    lm.create_topic("small", 1)
    await lm.append("small", 0, batch([b"a" * 100]))
    with descriptors_left(0), pytest.raises(se.KafkaStorageError) as raised:
        await lm.append("small", 0, batch([b"b" * 100]))
    assert "Error while rolling log segment for small-0" in raised.value.message
    (event,) = log_events.events("log_roll_failed")
    assert event["topic"] == "small" and event["partition"] == 0 and event["segment"] == 1
    log = lm.get_partition("small", 0)
    assert log is not None and len(log.segments) == 1
    await lm.append("small", 0, batch([b"c" * 100]))
    assert len(log.segments) == 2
    assert [v for _, v in read_all(lm, "small")] == [b"a" * 100, b"c" * 100]
    lm = reopen(lm, after_crash=True)
    assert [v for _, v in read_all(lm, "small")] == [b"a" * 100, b"c" * 100]
    lm.close()


async def test_partitions_recovered_after_a_crash_hold_one_descriptor(tmp_path: Path) -> None:
    """Recovery rebuilds the indexes of the segments it scans; their files were left open, so
    after a kill -9 a broker needed three descriptors per written partition (10,000 partitions
    ran under a 20,000 limit and could then not start again)."""
    lm = make(tmp_path, log_index_interval_bytes="1")
    lm.create_topic("many", 30)
    for partition in range(30):
        for value in (b"a", b"b", b"c"):
            await lm.append("many", partition, batch([value]))
    log = lm.get_partition("many", 0)
    assert log is not None
    log.roll()
    await lm.append("many", 0, batch([b"d"]))
    crash(lm)
    closed = open_fds()
    lm = LogManager(lm.config)
    lm.open()
    # One per partition, one more for the rolled segment of many-0, and the lock: what a
    # running broker holds, not three per recovered segment.
    assert open_fds() - closed == 30 + 1 + 1
    assert [v for _, v in read_all(lm, "many", 0)] == [b"a", b"b", b"c", b"d"]
    await lm.append("many", 1, batch([b"e"]))  # the released index files reopen
    lm = reopen(lm, after_crash=True)
    assert [v for _, v in read_all(lm, "many", 1)] == [b"a", b"b", b"c", b"e"]
    index = lm.get_partition("many", 1).segments[0].offset_index  # type: ignore[union-attr]
    assert index.path.stat().st_size == len(index.offsets) * 8 == 3 * 8
    lm.close()
