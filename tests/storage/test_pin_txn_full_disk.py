"""The transaction index on a full disk: an aborted transaction's entry that cannot be written
leaves no torn entry behind, is written whole once the disk has room, and is forgotten when the
log start passes it. The mutation run left these open (docs/development.md)."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from trio_broker.protocol import records as rb
from trio_broker.storage import txn_index as ti

PID = 7


def _data_batch(pid: int, offset: int) -> rb.BatchHeader:
    batch = rb.build_batch([(None, b"v", (), 1)], producer_id=pid, base_offset=offset,
                           attributes=rb.TRANSACTIONAL_BIT)
    return rb.decode_header(batch)


def _abort(index: ti.TransactionIndex, pid: int, first: int, marker: int) -> None:
    """A transaction of ``pid`` opened at ``first`` and aborted by a marker at ``marker``."""
    index.on_batch(_data_batch(pid, first), None, 0)
    header = rb.decode_header(ti.build_marker(pid, 0, False, 1))
    index.on_batch(header._replace(base_offset=marker), ti.ABORT, 0)


class FullDisk:
    """``os.write`` for the index: a short write (part of the entry, then no room) while full."""

    def __init__(self) -> None:
        self.full = True
        self.real = os.write

    def __call__(self, fd: int, data: Any) -> int:
        if self.full:
            return self.real(fd, bytes(data)[:10])
        return self.real(fd, data)


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> FullDisk:
    full = FullDisk()
    monkeypatch.setattr(ti.os, "write", full)
    return full


def _entries(tmp_path: Path) -> list[tuple[int, int, int, int, int]]:
    data = b"".join(p.read_bytes() for p in sorted(tmp_path.glob("*.txnindex")))
    return [ti._ENTRY.unpack_from(data, at) for at in range(0, len(data), ti._ENTRY.size)]


def test_a_short_write_leaves_no_torn_entry_and_the_entry_is_written_later(
        tmp_path: Path, disk: FullDisk) -> None:
    index = ti.TransactionIndex(tmp_path, {})
    with pytest.raises(OSError) as raised:
        _abort(index, PID, 10, 12)
    assert raised.value.errno == errno.ENOSPC
    assert (tmp_path / f"{0:020d}.txnindex").stat().st_size == 0  # truncated back
    assert [a.first_offset for a in index.aborted] == [10]  # known in memory meanwhile
    with pytest.raises(OSError):
        index.write_unwritten()  # still full: still refused
    disk.full = False
    index.write_unwritten()
    assert _entries(tmp_path) == [(0, PID, 10, 12, 13)]
    index.write_unwritten()  # nothing left: written once
    assert len(_entries(tmp_path)) == 1
    reloaded = ti.TransactionIndex(tmp_path, {})
    reloaded.load(0, 100)
    assert [(a.first_offset, a.last_offset) for a in reloaded.aborted] == [(10, 12)]


def test_the_log_start_passing_an_unwritten_entry_forgets_it(
        tmp_path: Path, disk: FullDisk) -> None:
    index = ti.TransactionIndex(tmp_path, {})
    for pid, first, marker in ((1, 0, 2), (2, 5, 8)):
        with pytest.raises(OSError):
            _abort(index, pid, first, marker)
    index.on_log_start_advanced(3)  # past the first transaction, not the second
    disk.full = False
    index.write_unwritten()
    assert [(pid, first, last) for _, pid, first, last, _ in _entries(tmp_path)] == [(2, 5, 8)]


def test_an_entry_ending_at_the_log_start_is_kept(tmp_path: Path, disk: FullDisk) -> None:
    index = ti.TransactionIndex(tmp_path, {})
    with pytest.raises(OSError):
        _abort(index, PID, 0, 4)
    index.on_log_start_advanced(4)
    disk.full = False
    index.write_unwritten()
    assert [(first, last) for _, _, first, last, _ in _entries(tmp_path)] == [(0, 4)]
