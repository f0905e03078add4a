"""Rolling a partition's active segment, on the loop and off it: the roll and its line, no
roll of an empty segment, a roll that cannot create its files (Kafka's "Error while rolling log
segment", the old segment staying active), a producer snapshot that cannot be written (logged,
the roll done), and a partition deleted while a worker thread rolls or writes for it (Kafka's
"does not host this topic-partition"). The mutation run over ``storage/log`` found these
unpinned (docs/development.md, "Eighth run")."""

from __future__ import annotations

import errno
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.storage.test_storage import make, new_partition
from trio_broker.protocol import records as rb
from trio_broker.storage import LogManager
from trio_broker.storage import errors as se
from trio_broker.storage import log as log_module
from trio_broker.storage.log import PartitionLog, now_ms


def one(value: bytes) -> bytes:
    return rb.build_batch([(None, value, [], now_ms())])


def partition(lm: LogManager) -> PartitionLog:
    log = new_partition(lm)
    log.append(one(b"a"), from_client=False, producer_check=False)
    log.append(one(b"b"), from_client=False, producer_check=False)
    return log


async def roll(log: PartitionLog, off_loop: bool) -> None:
    if off_loop:
        async with log.write_lock:
            await log.roll_off_loop()
    else:
        log.roll()


@pytest.mark.parametrize("off_loop", [False, True])
async def test_a_roll_starts_a_segment_at_the_log_end_and_says_so(
        tmp_path: Path, off_loop: bool, log_events: Any) -> None:
    lm = make(tmp_path)
    log = partition(lm)
    size = log.active.size
    await roll(log, off_loop)
    assert [s.base_offset for s in log.segments] == [0, 2]
    [line] = log_events.events("log_segment_rolled")
    assert {k: line[k] for k in ("topic", "partition", "segment", "previous_size")} == {
        "topic": "t", "partition": 0, "segment": 2, "previous_size": size}
    # The new segment is empty: rolling again changes nothing.
    await roll(log, off_loop)
    assert [s.base_offset for s in log.segments] == [0, 2]
    assert len(log_events.events("log_segment_rolled")) == 1
    lm.close()


@pytest.mark.parametrize("off_loop", [False, True])
async def test_a_roll_that_cannot_create_its_files_keeps_the_old_segment(
        tmp_path: Path, off_loop: bool, monkeypatch: pytest.MonkeyPatch,
        log_events: Any) -> None:
    lm = make(tmp_path)
    log = partition(lm)

    def no_descriptor(base: int) -> Any:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(log, "_new_segment", no_descriptor)
    with pytest.raises(se.KafkaStorageError) as out:
        await roll(log, off_loop)
    assert str(out.value) == ("Error while rolling log segment for t-0 in dir "
                              f"{tmp_path}: [Errno 24] Too many open files")
    [line] = log_events.events("log_roll_failed")
    assert {k: line[k] for k in ("topic", "partition", "segment", "error")} == {
        "topic": "t", "partition": 0, "segment": 2, "error": "[Errno 24] Too many open files"}
    assert [s.base_offset for s in log.segments] == [0]
    lm.close()


@pytest.mark.parametrize("off_loop", [False, True])
async def test_a_snapshot_that_cannot_be_written_is_logged_and_the_roll_done(
        tmp_path: Path, off_loop: bool, monkeypatch: pytest.MonkeyPatch,
        log_events: Any) -> None:
    lm = make(tmp_path)
    log = partition(lm)
    log.append(rb.build_batch([(None, b"p", [], now_ms())], producer_id=5, producer_epoch=0,
                              base_sequence=0), from_client=False, producer_check=False)

    def full(*args: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    state = log.producer_state
    monkeypatch.setattr(state, "write_snapshot", full)
    monkeypatch.setattr(state, "snapshot_job", lambda: SimpleNamespace(write=full))
    await roll(log, off_loop)
    assert [s.base_offset for s in log.segments] == [0, 3]
    [line] = log_events.events("log_flush_failed")
    assert (line["topic"], line["partition"], line["error"]) == (
        "t", 0, "producer snapshot: [Errno 28] No space left on device")
    lm.close()


async def test_a_partition_deleted_while_a_worker_rolls_for_it_is_not_hosted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lm = make(tmp_path)
    log = partition(lm)
    real = log._new_segment

    def deleted_meanwhile(base: int) -> Any:
        segment = real(base)
        log.closed = True
        return segment

    monkeypatch.setattr(log, "_new_segment", deleted_meanwhile)
    with pytest.raises(se.UnknownTopicOrPartition,
                       match="^This server does not host this topic-partition: t-0$"):
        await roll(log, off_loop=True)
    assert [s.base_offset for s in log.segments] == [0]

    def deleted_then_failed(base: int) -> Any:
        log.closed = True
        raise OSError(errno.ENOENT, "No such file or directory")

    log.closed = False
    monkeypatch.setattr(log, "_new_segment", deleted_then_failed)
    with pytest.raises(se.UnknownTopicOrPartition, match="t-0$"):
        await roll(log, off_loop=True)
    log.closed = False
    lm.close()


async def test_a_partition_deleted_while_a_worker_writes_for_it_is_not_hosted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lm = make(tmp_path)
    log = partition(lm)
    real = log_module.write_detached

    def deleted_meanwhile(fd: int, data: Any) -> None:
        real(fd, data)
        log.closed = True

    monkeypatch.setattr(log_module, "write_detached", deleted_meanwhile)
    with pytest.raises(se.UnknownTopicOrPartition,
                       match="^This server does not host this topic-partition: t-0$"):
        async with log.write_lock:
            await log.append_off_loop(one(b"c"))
    log.closed = False
    lm.close()
