"""A write or an fsync that fails (a full disk, an I/O error): the append is refused with
KAFKA_STORAGE_ERROR and leaves no partial batch behind (the segment is cut back to where it
was, so the next append takes the same offsets and every acknowledged record reads back), and a
failed flush is logged and moves no recovery point. The mutation run over ``storage/log`` found
no test of these paths (docs/development.md, "Eighth run")."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from tests.storage.test_storage import make, new_partition, read_all
from trio_broker.protocol import records as rb
from trio_broker.storage import errors as se
from trio_broker.storage import log as log_module
from trio_broker.storage import segment as segment_module
from trio_broker.storage.log import now_ms


class FullDisk:
    """``os.write`` that writes 10 bytes of what it is given, then fails with ENOSPC."""

    def __init__(self) -> None:
        self.real = os.write
        self.full = False

    def __call__(self, fd: int, data: Any) -> int:
        if not self.full:
            return self.real(fd, data)
        if getattr(self, "wrote", False):
            raise OSError(errno.ENOSPC, "No space left on device")
        self.wrote = True
        return self.real(fd, bytes(data)[:10])


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> FullDisk:
    full = FullDisk()
    monkeypatch.setattr(segment_module.os, "write", full)
    return full


def one(value: bytes) -> bytes:
    return rb.build_batch([(None, value, [], now_ms())])


@pytest.mark.parametrize("off_loop", [False, True])
async def test_a_failed_write_leaves_nothing_behind(tmp_path: Path, disk: FullDisk,
                                                    off_loop: bool) -> None:
    lm = make(tmp_path)
    log = new_partition(lm)

    async def append(data: bytes) -> int:
        assert log is not None
        if off_loop:
            async with log.write_lock:
                return (await log.append_off_loop(data)).base_offset
        return log.append(data).base_offset

    assert await append(one(b"kept")) == 0
    size = log.active.size
    disk.full = True
    with pytest.raises(se.KafkaStorageError) as failed:
        await append(one(b"lost"))
    assert str(failed.value).startswith(f"write to {log.active.log_path} failed: ")
    assert "No space left on device" in str(failed.value)
    assert log.active.size == size == os.path.getsize(log.active.log_path)
    assert log.log_end_offset == 1 and not log.failed
    disk.full = False
    assert await append(one(b"next")) == 1
    assert read_all(lm, "t") == [(0, b"kept"), (1, b"next")]
    lm.close()


async def test_a_failed_fsync_is_logged_and_moves_no_recovery_point(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, log_events: Any) -> None:
    lm = make(tmp_path)
    log = new_partition(lm)
    log.append(one(b"a"))
    before = (log.recovery_point, log.unflushed_messages, log.last_flush_ms)

    def broken(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(log_module.os, "fsync", broken)
    monkeypatch.setattr(segment_module.os, "fsync", broken)
    with pytest.raises(se.KafkaStorageError, match=r"^fsync failed: \[Errno 5\] Input/output"):
        await log.flush()
    assert (log.recovery_point, log.unflushed_messages, log.last_flush_ms) == before
    [line] = log_events.events("log_flush_failed")
    assert (line["topic"], line["partition"], line["error"]) == (
        "t", 0, "[Errno 5] Input/output error")
    monkeypatch.undo()
    started = now_ms()
    await log.flush()
    assert (log.recovery_point, log.unflushed_messages) == (1, 0)
    assert started <= log.last_flush_ms <= now_ms()
    lm.close()


def test_a_write_that_cannot_be_cut_back_marks_the_log_failed(tmp_path: Path) -> None:
    # The cut back itself fails (here: a size the kernel refuses):
    # the log is marked failed (its partition goes offline, as at Kafka's
    # log directory failure).
    lm = make(tmp_path)
    log = new_partition(lm)
    segment = log.active
    with pytest.raises(se.KafkaStorageError):
        log._fail_append(segment, -1, OSError(errno.EIO, "boom"))
    assert log.failed
    lm.close()
