"""The transaction index's rules, sans-IO but for its files in a temporary directory: the
markers it writes (clients parse them), which aborted transactions a read_committed Fetch
lists, and what advancing the log start forgets. Each test kills mutants that survived
``nox -s mutation`` (docs/development.md)."""

from __future__ import annotations

import struct
from pathlib import Path

import attrs

from trio_broker.protocol import records as rb
from trio_broker.storage import txn_index as ti
from trio_broker.storage.cleaner import empty_batch

KEY, VALUE = struct.Struct(">hh"), struct.Struct(">hi")
PID = 7


def test_markers_are_version_0_control_records_without_a_sequence() -> None:
    """Kafka's EndTransactionMarker: key (version 0, type), value (version 0, coordinator
    epoch); a transactional control batch with base sequence -1."""
    for commit, kind in ((True, ti.COMMIT), (False, ti.ABORT)):
        marker = ti.build_marker(PID, 3, commit, 1_000)
        header = rb.decode_header(marker)
        assert header.is_transactional and header.is_control
        assert (header.producer_id, header.producer_epoch, header.base_sequence) == (PID, 3, -1)
        (record,) = rb.decode_records(marker)
        assert record.key == KEY.pack(0, kind)
        assert record.value == VALUE.pack(0, 0)
        assert ti.control_type(marker) == kind
    (record,) = rb.decode_records(ti.build_marker(PID, 3, True, 1_000, coordinator_epoch=9))
    assert record.value == VALUE.pack(0, 9)


def _control(key: bytes | None) -> bytes:
    return rb.build_batch([(key, VALUE.pack(0, 0), (), 1)], producer_id=PID,
                          attributes=rb.TRANSACTIONAL_BIT | rb.CONTROL_BIT)


def test_control_records_other_than_commit_and_abort_are_not_markers() -> None:
    assert ti.control_type(_control(None)) is None
    assert ti.control_type(_control(b"\x00")) is None
    assert ti.control_type(_control(KEY.pack(0, 2))) is None  # LEADER_CHANGE
    assert ti.control_type(_control(KEY.pack(0, ti.ABORT))) == ti.ABORT


def test_the_last_offset_of_nothing_is_minus_one_and_empty_batches_count() -> None:
    assert ti.last_offset_of(b"") == -1
    emptied = empty_batch(rb.decode_header(rb.build_batch([(None, b"v", (), 1)] * 3,
                                                          base_offset=4)))
    assert ti.last_offset_of(emptied) == 6
    assert ti.last_offset_of(rb.build_batch([(None, b"v", (), 1)], base_offset=0) + emptied) == 6


def index(tmp_path: Path, *aborted: tuple[int, int]) -> ti.TransactionIndex:
    idx = ti.TransactionIndex(tmp_path, {})
    idx.aborted = [ti.AbortedTxn(PID, first, last, last + 1) for first, last in aborted]
    return idx


def test_aborted_transactions_overlapping_the_fetched_range_are_listed(tmp_path: Path) -> None:
    idx = index(tmp_path, (10, 20))
    assert idx.aborted_between(20, 30) == idx.aborted  # ends at the fetch offset
    assert idx.aborted_between(0, 10) == idx.aborted  # starts at the last offset fetched
    assert idx.aborted_between(21, 30) == []
    assert idx.aborted_between(0, 9) == []


@attrs.frozen
class Region:
    """A zero-copy file region as committed_view sees it: only its length."""

    size: int

    def __len__(self) -> int:
        return self.size


def entry(producer_id: int, first_offset: int) -> tuple[int, int]:
    return producer_id, first_offset


def test_committed_view_of_a_file_region_lists_aborts_up_to_the_lso(tmp_path: Path) -> None:
    idx = index(tmp_path, (0, 0), (5, 8), (12, 14))
    region = Region(100)
    assert ti.committed_view(idx, region, 0, 12, entry) == (region, ((PID, 0), (PID, 5)))
    assert ti.committed_view(idx, region, 0, 1, entry) == (region, ((PID, 0),))
    assert ti.committed_view(idx, Region(0), 0, 12, entry) == (Region(0), ())
    # bytes: only the batches below the LSO are kept, and the aborts among them listed
    records = rb.build_batch([(None, b"v", (), 1)], base_offset=0)
    assert ti.committed_view(idx, records, 0, 1, entry) == (records, ((PID, 0),))
    assert ti.committed_view(idx, records, 0, 0, entry) == (b"", ())


def _abort(idx: ti.TransactionIndex, first: int, last: int, segment_base: int) -> None:
    data = rb.build_batch([(None, b"v", (), 1)] * (last - first), base_offset=first,
                          producer_id=PID, attributes=rb.TRANSACTIONAL_BIT)
    idx.on_batch(rb.decode_header(data), None, segment_base)
    marker = bytearray(ti.build_marker(PID, 0, False, 1))
    rb.assign_offset(marker, 0, last)
    idx.on_batch(rb.decode_header(bytes(marker)), ti.ABORT, segment_base)


def test_advancing_the_log_start_forgets_only_what_lies_wholly_below_it(tmp_path: Path
                                                                          ) -> None:
    idx = ti.TransactionIndex(tmp_path, {})
    _abort(idx, 0, 3, 0)
    _abort(idx, 4, 9, 4)
    _abort(idx, 10, 12, 10)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) == 3
    assert [(a.first_offset, a.last_offset) for a in idx.aborted] == [(0, 3), (4, 9), (10, 12)]
    idx.on_log_start_advanced(9)
    # (4, 9) ends at the new log start: still needed by a fetch from offset 9.
    assert [(a.first_offset, a.last_offset) for a in idx.aborted] == [(4, 9), (10, 12)]
    assert sorted(p.name for p in tmp_path.iterdir()) == files[1:]
    idx.on_log_start_advanced(10)
    assert [(a.first_offset, a.last_offset) for a in idx.aborted] == [(10, 12)]
    assert sorted(p.name for p in tmp_path.iterdir()) == files[2:]
    reloaded = ti.TransactionIndex(tmp_path, {})
    reloaded.load(10, 13)
    assert reloaded.aborted == idx.aborted


def test_an_idempotent_batch_outside_a_transaction_opens_none(tmp_path: Path) -> None:
    """Only transactional batches open a transaction (and hold the LSO back)."""
    idx = ti.TransactionIndex(tmp_path, {})
    idempotent = rb.build_batch([(None, b"v", (), 1)], producer_id=PID, producer_epoch=0,
                                base_sequence=0)
    idx.on_batch(rb.decode_header(idempotent), None, 0)
    assert idx.ongoing == {}
    transactional = rb.build_batch([(None, b"v", (), 1)], base_offset=1, producer_id=PID,
                                   producer_epoch=0, base_sequence=1,
                                   attributes=rb.TRANSACTIONAL_BIT)
    idx.on_batch(rb.decode_header(transactional), None, 0)
    assert idx.ongoing == {PID: 1}


def test_an_index_file_is_kept_while_any_of_its_entries_is_above_the_log_start(
        tmp_path: Path) -> None:
    """Several aborted transactions in one segment's file: each entry is read, not the first
    one only."""
    idx = ti.TransactionIndex(tmp_path, {})
    _abort(idx, 0, 2, 0)
    _abort(idx, 3, 5, 0)
    _abort(idx, 6, 9, 0)
    (path,) = tmp_path.iterdir()
    idx.on_log_start_advanced(4)
    assert path.exists()
    reloaded = ti.TransactionIndex(tmp_path, {})
    reloaded.load(4, 10)
    assert [(a.first_offset, a.last_offset) for a in reloaded.aborted] == [(3, 5), (6, 9)]
    idx.on_log_start_advanced(10)
    assert not path.exists()
