"""The idempotent producer's rules, sans-IO (``ProducerStateManager``, ``ProducerIdAllocator``):
what counts as a retry (a duplicate, answered and not written), what is in sequence, which
producers retention forgets, and producer ids that are never handed out twice. A broken rule
drops or duplicates acknowledged records. Each test kills mutants that survived
``nox -s mutation`` (docs/development.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trio_broker.protocol import records as rb
from trio_broker.storage.errors import OutOfOrderSequence
from trio_broker.storage.producer_state import ProducerIdAllocator, ProducerStateManager
from trio_broker.storage.txn_index import build_marker

PID, EPOCH = 42, 0


def header(base_seq: int, count: int, base_offset: int = 0, epoch: int = EPOCH,
           pid: int = PID) -> rb.BatchHeader:
    data = rb.build_batch([(None, b"v", (), 1_000)] * count, base_offset=base_offset,
                          producer_id=pid, producer_epoch=epoch, base_sequence=base_seq)
    return rb.decode_header(data)


def appended(manager: ProducerStateManager, *batches: rb.BatchHeader) -> None:
    for batch in batches:
        manager.check(batch, {})
        manager.update(batch)


def test_a_duplicate_matches_both_ends_of_a_written_batch(tmp_path: Path) -> None:
    manager = ProducerStateManager(tmp_path)
    appended(manager, header(0, 5))
    assert manager.find_duplicate(header(0, 5)) is not None
    assert manager.find_duplicate(header(0, 2)) is None  # same first sequence only
    assert manager.find_duplicate(header(3, 2)) is None  # same last sequence only
    with pytest.raises(OutOfOrderSequence):
        manager.check(header(0, 2), {})


def test_sequence_zero_follows_only_the_largest_sequence(tmp_path: Path) -> None:
    manager = ProducerStateManager(tmp_path)
    appended(manager, header(0, 6))
    with pytest.raises(OutOfOrderSequence):
        manager.check(header(0, 1), {})
    wrapped = ProducerStateManager(tmp_path / "w")
    appended(wrapped, header(rb.INT32_MAX - 1, 2))
    wrapped.check(header(0, 1, base_offset=2), {})  # the sequence wraps after INT32_MAX


def test_batches_of_one_request_are_checked_against_each_other(tmp_path: Path) -> None:
    manager = ProducerStateManager(tmp_path)
    appended(manager, header(0, 2))
    pending: dict[int, tuple[int, int]] = {}
    manager.check(header(2, 3, base_offset=2), pending)
    assert pending == {PID: (EPOCH, 4)}
    manager.check(header(5, 1, base_offset=5), pending)  # follows the first, not the log
    with pytest.raises(OutOfOrderSequence):
        manager.check(header(2, 1, base_offset=6), pending)
    other: dict[int, tuple[int, int]] = {PID + 1: (EPOCH, 99)}
    manager.check(header(2, 1, base_offset=2), other)  # another producer's entry: ignored


def test_retention_forgets_a_producer_only_when_all_its_batches_are_gone(tmp_path: Path
                                                                          ) -> None:
    manager = ProducerStateManager(tmp_path)
    appended(manager, header(0, 3, base_offset=0))  # offsets 0-2
    manager.on_log_start_advanced(2)  # the batch ends at offset 2, still in the log: kept
    assert PID in manager.producers
    assert manager.find_duplicate(header(0, 3)) is not None
    manager.on_log_start_advanced(3)
    assert PID not in manager.producers


def test_producer_ids_are_unique_and_reserved_a_block_ahead(tmp_path: Path) -> None:
    path = tmp_path / "producer-id-block"
    allocator = ProducerIdAllocator(path, block_size=3)
    assert [allocator.allocate() for _ in range(3)] == [0, 1, 2]
    assert path.read_text(encoding="utf-8") == "3\n"
    assert allocator.allocate() == 3  # the block is used up: the next one is reserved first
    assert path.read_text(encoding="utf-8") == "6\n"
    assert not path.with_suffix(".tmp").exists()
    restarted = ProducerIdAllocator(path, block_size=3)
    assert restarted.allocate() == 6  # ids of a reserved block are never handed out again
    above = ProducerIdAllocator(tmp_path / "other", block_size=10, floor=50)
    assert [above.allocate() for _ in range(2)] == [50, 51]


def test_appends_and_markers_move_the_map_end_and_the_producer_clock(tmp_path: Path) -> None:
    """The snapshot is taken at ``map_end_offset``; expiry reads ``last_timestamp``."""
    manager = ProducerStateManager(tmp_path)
    appended(manager, header(0, 2))  # offsets 0-1, timestamps 1000
    assert manager.map_end_offset == 2
    marker = bytearray(build_marker(PID, EPOCH, True, 5_000))
    rb.assign_offset(marker, 0, 2)
    manager.update(rb.decode_header(bytes(marker)))
    assert manager.map_end_offset == 3
    assert manager.producers[PID].last_timestamp == 5_000


def test_a_snapshot_after_retention_forgot_a_producer_is_written_again(tmp_path: Path
                                                                        ) -> None:
    """The newest snapshot holds the forgotten producer: taking one at the same offset must
    rewrite it, or a restart brings the producer back (and its old sequences with it)."""
    manager = ProducerStateManager(tmp_path)
    appended(manager, header(0, 1, base_offset=0))  # offset 0: the map ends at 1
    manager.write_snapshot()
    manager.on_log_start_advanced(1)
    assert PID not in manager.producers
    manager.write_snapshot()
    restarted = ProducerStateManager(tmp_path)
    assert restarted.load_snapshot(max_offset=1, min_offset=1)
    assert PID not in restarted.producers
