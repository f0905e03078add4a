"""The transaction coordinator over the real LogManager and group coordinator, on the autojump
clock: the state machine, fencing, timeouts, markers, the LSO and ``.txnindex``, pending
transactional offsets, and the completion of an interrupted PrepareCommit after a restart.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode as E

from trio_broker.config import load_config
from trio_broker.coordinator import GroupCoordinator, OffsetCommitEntry
from trio_broker.coordinator.records import OFFSETS_TOPIC
from trio_broker.coordinator.transaction import TransactionCoordinator, TxnState
from trio_broker.coordinator.transaction import state as sm
from trio_broker.coordinator.transaction.records import (
    TRANSACTION_TOPIC,
    decode_key,
    decode_value,
    encode_value,
)
from trio_broker.protocol import records as rb
from trio_broker.storage.manager import LogManager
from trio_broker.storage.txn_index import ABORT, COMMIT, TXN_INDEX_SUFFIX, control_type

EPOCH = 1_700_000_000.0
pytestmark = pytest.mark.timeout(30)


@attrs.define
class TxnHarness:
    """Storage, the group coordinator and the transaction coordinator, started together."""

    data_dir: Path
    overrides: dict[str, str] = attrs.field(factory=dict)
    lm: LogManager | None = None
    groups: GroupCoordinator | None = None
    txn: TransactionCoordinator | None = None
    scope: trio.CancelScope | None = None

    async def start(self, nursery: trio.Nursery) -> TransactionCoordinator:
        config = load_config({"log.dirs": str(self.data_dir),
                              "offsets.topic.num.partitions": "3",
                              "transaction.state.log.num.partitions": "3",
                              "group.initial.rebalance.delay.ms": "0", **self.overrides})
        self.lm = LogManager(config)
        self.lm.open()
        clock = lambda: EPOCH + trio.current_time()  # noqa: E731
        self.groups = GroupCoordinator(config, self.lm, wall_clock=clock)
        self.txn = TransactionCoordinator(config, self.lm, self.groups, wall_clock=clock)
        self.scope = trio.CancelScope()
        await nursery.start(self._run)
        return self.txn

    async def _run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        assert self.scope is not None and self.groups is not None and self.txn is not None
        with self.scope:
            async with trio.open_nursery() as inner:
                await inner.start(self.groups.run)
                await inner.start(self.txn.run)
                task_status.started()

    async def stop(self) -> None:
        assert self.scope is not None and self.lm is not None
        self.scope.cancel()
        await trio.testing.wait_all_tasks_blocked()
        self.lm.close()

    def append_txn(self, topic: str, partition: int, pid: int, epoch: int, seq: int,
                   *values: bytes) -> None:
        assert self.lm is not None
        batch = rb.build_batch([(None, v, (), int(EPOCH * 1000)) for v in values],
                               producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                               attributes=rb.TRANSACTIONAL_BIT)
        self.lm.get_partition(topic, partition).append(batch)  # type: ignore[union-attr]

    def batches(self, topic: str, partition: int) -> list[tuple[rb.BatchHeader, int | None]]:
        """Every batch's header, and the marker type of control batches."""
        assert self.lm is not None
        log = self.lm.get_partition(topic, partition)
        assert log is not None
        data = log.read(0, 1 << 20).records
        out = []
        view = memoryview(data)
        for position, size in rb.iter_batches(view):
            batch = bytes(view[position:position + size])
            header = rb.decode_header(batch)
            out.append((header, control_type(batch) if header.is_control else None))
        return out


@pytest.fixture
def harness(tmp_path: Path) -> TxnHarness:
    return TxnHarness(tmp_path / "data")


# --------------------------------------------------------------- sans-IO state machine
def test_state_machine_follows_kafkas_transitions() -> None:
    meta = sm.init_producer_id(None, transactional_id="t", timeout_ms=1000, expected_pid=-1,
                               expected_epoch=-1, new_producer_id=7, now_ms=1).write
    assert meta is not None and (meta.producer_id, meta.producer_epoch) == (7, 0)
    assert meta.state is TxnState.EMPTY
    assert sm.add_partitions(meta, 8, 0, frozenset({("a", 0)}), 2).error \
        is E.invalid_producer_id_mapping
    assert sm.add_partitions(meta, 7, 1, frozenset({("a", 0)}), 2).error is E.producer_fenced
    ongoing = sm.add_partitions(meta, 7, 0, frozenset({("a", 0)}), 2).write
    assert ongoing is not None and ongoing.state is TxnState.ONGOING and ongoing.start_ms == 2
    # Adding a partition already in the transaction writes nothing.
    assert sm.add_partitions(ongoing, 7, 0, frozenset({("a", 0)}), 3) == sm.Decision()
    assert sm.end_transaction(ongoing, 7, 0, True, 4).write.state is TxnState.PREPARE_COMMIT
    prepared = sm.end_transaction(ongoing, 7, 0, False, 4).write
    assert prepared.state is TxnState.PREPARE_ABORT
    # Retries while the markers are written, and of a completed end.
    assert sm.end_transaction(prepared, 7, 0, False, 5).error is E.concurrent_transactions
    assert sm.end_transaction(prepared, 7, 0, True, 5).error is E.invalid_txn_state
    done = sm.complete(prepared, 6)
    assert done.state is TxnState.COMPLETE_ABORT and not done.partitions
    assert sm.end_transaction(done, 7, 0, False, 7).error is E.none
    assert sm.end_transaction(done, 7, 0, True, 7).error is E.invalid_txn_state
    assert sm.end_transaction(meta, 7, 0, True, 7).error is E.invalid_txn_state
    with pytest.raises(ValueError):
        done.transition(TxnState.PREPARE_COMMIT, 8)
    # A new producer bumps the epoch; one with an open transaction fences it first.
    bumped = sm.init_producer_id(done, transactional_id="t", timeout_ms=1000, expected_pid=-1,
                                 expected_epoch=-1, new_producer_id=-1, now_ms=9).write
    assert bumped is not None and bumped.producer_epoch == 1
    fence = sm.init_producer_id(ongoing, transactional_id="t", timeout_ms=1000,
                                expected_pid=-1, expected_epoch=-1, new_producer_id=-1,
                                now_ms=9)
    assert fence.fence and fence.error is E.concurrent_transactions
    assert fence.write is not None and fence.write.state is TxnState.PREPARE_ABORT
    assert fence.write.producer_epoch == 1
    # KIP-360: re-initialising with an id/epoch that is not current is fenced.
    assert sm.init_producer_id(bumped, transactional_id="t", timeout_ms=1000, expected_pid=7,
                               expected_epoch=5, new_producer_id=-1, now_ms=9).error \
        is E.producer_fenced
    # An exhausted epoch moves to a new producer id.
    worn = attrs.evolve(done, producer_epoch=sm.MAX_EPOCH)
    fresh = sm.init_producer_id(worn, transactional_id="t", timeout_ms=1000, expected_pid=-1,
                                expected_epoch=-1, new_producer_id=99, now_ms=9).write
    assert fresh is not None and (fresh.producer_id, fresh.producer_epoch) == (99, 0)


def test_log_value_round_trips_in_kafkas_layout() -> None:
    meta = sm.TxnMetadata("tx", 5, 3, 60000, TxnState.ONGOING,
                          frozenset({("a", 0), ("a", 2), ("b", 1)}), 1000, 2000)
    data = encode_value(meta)
    assert data[:2] == b"\x00\x00"  # version 0
    assert decode_value("tx", data) == attrs.evolve(meta, last_producer_epoch=-1)
    assert decode_value("tx", encode_value(attrs.evolve(meta, partitions=frozenset()))
                        ).partitions == frozenset()


# --------------------------------------------------------------- coordinator, in process
async def init(txn: TransactionCoordinator, txn_id: str, timeout_ms: int = 60000
               ) -> tuple[int, int]:
    result = await txn.init_producer_id(txn_id, timeout_ms)
    assert result.error is E.none, result
    return result.producer_id, result.producer_epoch


async def test_commit_writes_markers_and_moves_the_lso(
        harness: TxnHarness, nursery: trio.Nursery, autojump_clock: Any,
        log_events: Any) -> None:
    txn = await harness.start(nursery)
    assert harness.lm is not None
    harness.lm.create_topic("t", 2)
    pid, epoch = await init(txn, "tx")
    assert await txn.add_partitions("tx", pid, epoch, [("t", 0), ("t", 1)]) is E.none
    harness.append_txn("t", 0, pid, epoch, 0, b"a", b"b")
    log = harness.lm.get_partition("t", 0)
    assert log is not None
    assert (log.last_stable_offset, log.high_watermark) == (0, 2)
    assert log.producer_state.ongoing_txns == {pid: 0}
    assert await txn.end_txn("tx", pid, epoch, True) is E.none
    assert txn.transactions["tx"].state is TxnState.COMPLETE_COMMIT
    assert log.last_stable_offset == log.high_watermark == 3
    assert [kind for _, kind in harness.batches("t", 0)] == [None, COMMIT]
    assert [kind for _, kind in harness.batches("t", 1)] == [COMMIT]
    assert log.txn_index.aborted == []
    assert log_events.events("transaction_committed", transactional_id="tx")
    # A retried EndTxn is answered the same; the other outcome is refused.
    assert await txn.end_txn("tx", pid, epoch, True) is E.none
    assert await txn.end_txn("tx", pid, epoch, False) is E.invalid_txn_state


async def test_abort_indexes_the_aborted_transaction_in_kafkas_txnindex(
        harness: TxnHarness, nursery: trio.Nursery, autojump_clock: Any) -> None:
    txn = await harness.start(nursery)
    assert harness.lm is not None
    harness.lm.create_topic("t", 1)
    harness.lm.get_partition("t", 0).append(  # type: ignore[union-attr]
        rb.build_batch([(None, b"plain", (), 1)]))
    pid, epoch = await init(txn, "tx")
    assert await txn.add_partitions("tx", pid, epoch, [("t", 0)]) is E.none
    harness.append_txn("t", 0, pid, epoch, 0, b"x", b"y", b"z")
    assert await txn.end_txn("tx", pid, epoch, False) is E.none
    log = harness.lm.get_partition("t", 0)
    assert log is not None
    [aborted] = log.txn_index.aborted
    assert (aborted.producer_id, aborted.first_offset, aborted.last_offset) == (pid, 1, 4)
    files = list(log.directory.glob(f"*{TXN_INDEX_SUFFIX}"))
    assert [f.read_bytes() for f in files] == [
        (0).to_bytes(2, "big") + pid.to_bytes(8, "big") + (1).to_bytes(8, "big")
        + (4).to_bytes(8, "big") + (5).to_bytes(8, "big")]
    assert log.txn_index.aborted_between(0, 0) == []
    assert log.txn_index.aborted_between(0, 5) == [aborted]
    await harness.stop()
    # Reopened: the index is read back.
    lm = LogManager(harness.lm.config)
    lm.open()
    try:
        reopened = lm.get_partition("t", 0)
        assert reopened is not None
        assert reopened.txn_index.aborted == [aborted]
        assert reopened.last_stable_offset == reopened.high_watermark == 5
    finally:
        lm.close()


async def test_second_producer_fences_the_first_and_aborts_its_transaction(
        harness: TxnHarness, nursery: trio.Nursery, autojump_clock: Any,
        log_events: Any) -> None:
    txn = await harness.start(nursery)
    assert harness.lm is not None
    harness.lm.create_topic("t", 1)
    pid, epoch = await init(txn, "tx")
    assert await txn.add_partitions("tx", pid, epoch, [("t", 0)]) is E.none
    harness.append_txn("t", 0, pid, epoch, 0, b"old")
    first = await txn.init_producer_id("tx", 60000)
    assert first.error is E.concurrent_transactions  # the client retries
    await trio.testing.wait_all_tasks_blocked()
    second = await txn.init_producer_id("tx", 60000)
    assert second.error is E.none
    assert (second.producer_id, second.producer_epoch) == (pid, epoch + 2)
    assert [kind for _, kind in harness.batches("t", 0)] == [None, ABORT]
    # The old producer is fenced everywhere.
    assert await txn.add_partitions("tx", pid, epoch, [("t", 0)]) is E.producer_fenced
    assert await txn.end_txn("tx", pid, epoch, True) is E.producer_fenced
    with pytest.raises(Exception, match="older than the current epoch"):
        harness.append_txn("t", 0, pid, epoch, 1, b"late")
    assert log_events.events("transaction_fenced", transactional_id="tx")


async def test_transaction_timeout_aborts_and_fences(
        tmp_path: Path, nursery: trio.Nursery, autojump_clock: Any, log_events: Any) -> None:
    harness = TxnHarness(tmp_path / "data", {
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000"})
    txn = await harness.start(nursery)
    assert harness.lm is not None
    harness.lm.create_topic("t", 1)
    pid, epoch = await init(txn, "tx", timeout_ms=5000)
    assert await txn.add_partitions("tx", pid, epoch, [("t", 0)]) is E.none
    harness.append_txn("t", 0, pid, epoch, 0, b"abandoned")
    log = harness.lm.get_partition("t", 0)
    assert log is not None
    await trio.sleep(4.5)
    assert txn.transactions["tx"].state is TxnState.ONGOING
    assert log.last_stable_offset == 0
    await trio.sleep(2)
    await trio.testing.wait_all_tasks_blocked()
    meta = txn.transactions["tx"]
    assert meta.state is TxnState.COMPLETE_ABORT
    assert meta.producer_epoch == epoch + 1
    assert log.last_stable_offset == log.high_watermark == 2
    assert [a.first_offset for a in log.txn_index.aborted] == [0]
    assert log_events.events("transaction_timed_out", transactional_id="tx")
    assert await txn.end_txn("tx", pid, epoch, True) is E.producer_fenced


async def test_timeout_is_validated_against_the_maximum(
        harness: TxnHarness, nursery: trio.Nursery, autojump_clock: Any) -> None:
    txn = await harness.start(nursery)
    assert (await txn.init_producer_id("tx", 900001)).error is E.invalid_transaction_timeout
    assert (await txn.init_producer_id("tx", 0)).error is E.invalid_transaction_timeout
    assert (await txn.init_producer_id("", 1000)).error is E.invalid_request


async def test_txn_offsets_are_visible_only_after_commit(
        harness: TxnHarness, nursery: trio.Nursery, autojump_clock: Any) -> None:
    txn = await harness.start(nursery)
    assert harness.lm is not None and harness.groups is not None
    harness.lm.create_topic("t", 1)
    pid, epoch = await init(txn, "tx")
    offsets = {("t", 0): OffsetCommitEntry(42)}
    kwargs = dict(transactional_id="tx", group_id="g", producer_id=pid, producer_epoch=epoch,
                  generation_id=-1, member_id="", group_instance_id=None, offsets=offsets)
    # Without AddOffsetsToTxn first the commit could never complete.
    assert await txn.txn_offset_commit(**kwargs) == {("t", 0): E.invalid_txn_state}
    assert await txn.add_offsets("tx", pid, epoch, "g") is E.none
    assert await txn.txn_offset_commit(**kwargs) == {("t", 0): E.none}
    assert harness.groups.fetch_offsets("g", [("t", 0)])[1] == {("t", 0): None}
    assert await txn.end_txn("tx", pid, epoch, True) is E.none
    found = harness.groups.fetch_offsets("g", [("t", 0)])[1][("t", 0)]
    assert found is not None and found.offset == 42
    # Aborted ones never show.
    pid, epoch = txn.transactions["tx"].producer_id, txn.transactions["tx"].producer_epoch
    assert await txn.add_offsets("tx", pid, epoch, "g") is E.none
    assert await txn.txn_offset_commit(**{**kwargs, "offsets": {
        ("t", 0): OffsetCommitEntry(99)}}) == {("t", 0): E.none}
    assert await txn.end_txn("tx", pid, epoch, False) is E.none
    found = harness.groups.fetch_offsets("g", [("t", 0)])[1][("t", 0)]
    assert found is not None and found.offset == 42


async def test_interrupted_prepare_commit_is_completed_after_a_restart(
        tmp_path: Path, nursery: trio.Nursery, autojump_clock: Any, log_events: Any) -> None:
    harness = TxnHarness(tmp_path / "data")
    txn = await harness.start(nursery)
    assert harness.lm is not None
    harness.lm.create_topic("t", 2)
    pid, epoch = await init(txn, "tx")
    assert await txn.add_partitions("tx", pid, epoch, [("t", 0), ("t", 1)]) is E.none
    assert await txn.add_offsets("tx", pid, epoch, "g") is E.none
    assert await txn.txn_offset_commit(
        transactional_id="tx", group_id="g", producer_id=pid, producer_epoch=epoch,
        generation_id=-1, member_id="", group_instance_id=None,
        offsets={("t", 1): OffsetCommitEntry(7)}) == {("t", 1): E.none}
    harness.append_txn("t", 0, pid, epoch, 0, b"a")
    harness.append_txn("t", 1, pid, epoch, 0, b"b")
    # The crash: PrepareCommit is in the log, no marker was written.
    meta = txn.transactions["tx"]
    assert await txn._write(meta.transition(TxnState.PREPARE_COMMIT, 0)) is E.none
    await harness.stop()

    restarted = TxnHarness(tmp_path / "data")
    txn = await restarted.start(nursery)
    await trio.testing.wait_all_tasks_blocked()
    assert restarted.lm is not None and restarted.groups is not None
    assert log_events.events("transactions_loaded", pending=1)
    assert txn.transactions["tx"].state is TxnState.COMPLETE_COMMIT
    for partition in (0, 1):
        assert [kind for _, kind in restarted.batches("t", partition)] == [None, COMMIT]
        log = restarted.lm.get_partition("t", partition)
        assert log is not None and log.last_stable_offset == log.high_watermark == 2
    found = restarted.groups.fetch_offsets("g", [("t", 1)])[1][("t", 1)]
    assert found is not None and found.offset == 7
    await restarted.stop()
    # And the committed offset survives one more restart as an ordinary commit.
    again = TxnHarness(tmp_path / "data")
    await again.start(nursery)
    assert again.groups is not None
    found = again.groups.fetch_offsets("g", [("t", 1)])[1][("t", 1)]
    assert found is not None and found.offset == 7
    assert TRANSACTION_TOPIC in again.lm.topics  # type: ignore[union-attr]
    assert OFFSETS_TOPIC in again.lm.topics  # type: ignore[union-attr]
    await again.stop()


async def test_describe_list_and_expire(
        tmp_path: Path, nursery: trio.Nursery, autojump_clock: Any, log_events: Any) -> None:
    harness = TxnHarness(tmp_path / "data", {
        "transactional.id.expiration.ms": "10000",
        "transaction.remove.expired.transaction.cleanup.interval.ms": "1000"})
    txn = await harness.start(nursery)
    assert harness.lm is not None
    harness.lm.create_topic("t", 1)
    pid, epoch = await init(txn, "idle")
    busy_pid, busy_epoch = await init(txn, "busy")
    assert await txn.add_partitions("busy", busy_pid, busy_epoch, [("t", 0)]) is E.none
    assert txn.describe("nope")[0] is E.transactional_id_not_found
    code, meta = txn.describe("busy")
    assert code is E.none and meta is not None and meta.partitions == {("t", 0)}
    assert [m.transactional_id for m in txn.list(["Ongoing"])[1]] == ["busy"]
    assert [m.transactional_id for m in txn.list([], [pid])[1]] == ["idle"]
    await trio.sleep(12)
    # The idle id expired; the one with an open transaction (60 s timeout) stays.
    assert "idle" not in txn.transactions
    assert txn.transactions["busy"].state is TxnState.ONGOING
    assert log_events.events("transactional_id_expired", transactional_id="idle")


# ------------------------------------------------------------------ robustness of readers
@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(data=st.binary(max_size=200))
def test_log_readers_refuse_garbage_with_value_error(data: bytes) -> None:
    """Whatever bytes a damaged log holds, the loaders see ValueError (skipped), never a crash."""
    for decode in (decode_key, lambda raw: decode_value("tx", raw)):
        with contextlib.suppress(ValueError):
            decode(data)
    assert control_type(data) in (None, ABORT, COMMIT)


# -------------------------------------------------------------- storage across restarts
def _txn(pid: int, *values: bytes, seq: int = 0) -> bytes:
    return rb.build_batch([(None, v, (), 1_700_000_000_000) for v in values], producer_id=pid,
                          producer_epoch=0, base_sequence=seq, attributes=rb.TRANSACTIONAL_BIT)


def _one_partition(tmp_path: Path) -> tuple[Any, LogManager, Any]:
    """A LogManager on ``tmp_path/data`` with topic ``t`` of one partition: config, manager,
    the partition's log."""
    config = load_config({"log.dirs": str(tmp_path / "data")})
    lm = LogManager(config)
    lm.open()
    lm.create_topic("t", 1)
    log = lm.get_partition("t", 0)
    assert log is not None
    return config, lm, log


@pytest.mark.parametrize("clean", [True, False])
def test_open_transactions_survive_a_restart_through_snapshots_and_replay(
        tmp_path: Path, clean: bool) -> None:
    """An open transaction before a roll (kept in the producer snapshot) and one after it
    (found by replay) both hold the LSO after a restart, clean or not; their markers free it."""
    from trio_broker.storage.txn_index import build_marker

    config, lm, log = _one_partition(tmp_path)
    log.append(_txn(1, b"a"))                  # offset 0, producer 1 opens
    log.roll()                                 # snapshot at 1 holds {1: 0}
    log.append(_txn(2, b"b"))                  # offset 1, producer 2 opens
    log.append(build_marker(2, 0, False, 1), from_client=False, producer_check=False)  # 2
    log.append(_txn(3, b"c"))                  # offset 3, producer 3 opens
    assert (log.last_stable_offset, log.high_watermark) == (0, 4)
    if clean:
        lm.close()
    else:
        log.flush_sync()
        for partition_log in lm.all_partitions():
            partition_log.close()
        lm._release_lock()
    lm = LogManager(config)
    lm.open()
    try:
        log = lm.get_partition("t", 0)
        assert log is not None
        assert log.producer_state.ongoing_txns == {1: 0, 3: 3}
        assert [(a.producer_id, a.first_offset, a.last_offset) for a in log.txn_index.aborted
                ] == [(2, 1, 2)]
        assert log.last_stable_offset == 0
        log.append(build_marker(1, 0, True, 2), from_client=False, producer_check=False)
        assert log.last_stable_offset == 3
        log.append(build_marker(3, 0, True, 2), from_client=False, producer_check=False)
        assert log.last_stable_offset == log.high_watermark == 6
    finally:
        lm.close()


@pytest.mark.parametrize("end", ["commit", "abort"])
def test_the_lso_of_an_open_transaction_is_its_first_offset(tmp_path: Path, end: str) -> None:
    """The LSO of an open transaction is the first offset of its FIRST batch, not of its
    latest one: later batches of the same transaction (with other data between) must not move
    it, or read_committed consumers would read its earlier, undecided records. After a crash
    (replay) it is still there; the marker frees it, past the marker."""
    from trio_broker.storage.txn_index import build_marker

    def plain(*values: bytes) -> bytes:
        return rb.build_batch([(None, v, (), 1_700_000_000_000) for v in values])

    config, lm, log = _one_partition(tmp_path)
    try:
        assert log.append(plain(b"p0", b"p1")).base_offset == 0      # 0-1, no transaction
        assert log.last_stable_offset == log.high_watermark == 2
        assert log.append(_txn(7, b"t0", b"t1")).base_offset == 2    # 2-3, producer 7 opens
        assert (log.last_stable_offset, log.high_watermark) == (2, 4)
        assert log.append(plain(b"p2")).base_offset == 4             # 4
        assert log.append(_txn(7, b"t2", seq=2)).base_offset == 5    # 5, same transaction
        assert (log.last_stable_offset, log.high_watermark) == (2, 6)
        assert log.append(_txn(7, b"t3", b"t4", seq=3)).base_offset == 6  # 6-7, same
        assert (log.last_stable_offset, log.high_watermark) == (2, 8)
        assert log.producer_state.ongoing_txns == {7: 2}
        assert log.read(0, 1 << 20).last_stable_offset == 2
        # A crash: the producer state is rebuilt by replaying the batches.
        log.flush_sync()
        for partition_log in lm.all_partitions():
            partition_log.close()
        lm._release_lock()
        lm = LogManager(config)
        lm.open()
        log = lm.get_partition("t", 0)
        assert log is not None
        assert (log.last_stable_offset, log.high_watermark) == (2, 8)
        log.append(build_marker(7, 0, end == "commit", 1), from_client=False,
                   producer_check=False)                              # 8, the marker
        assert log.last_stable_offset == log.high_watermark == 9
        assert log.producer_state.ongoing_txns == {}
        aborted = [(a.producer_id, a.first_offset, a.last_offset) for a in log.txn_index.aborted]
        assert aborted == ([(7, 2, 8)] if end == "abort" else [])
    finally:
        lm.close()


async def test_compaction_respects_aborted_and_open_transactions(tmp_path: Path) -> None:
    """The cleaner cleans only below the LSO, and an aborted record never makes the committed
    record of its key obsolete (Kafka's cleaner drops aborted data; here it is kept and
    read_committed consumers keep filtering it with the aborted-transaction index)."""
    from trio_broker.storage.txn_index import build_marker

    def rec(key: bytes, value: bytes) -> Any:
        return (key, value, (), int(EPOCH * 1000))

    lm = LogManager(load_config({"log.dirs": str(tmp_path / "data")}))
    lm.open()
    lm.create_topic("c", 1, {"cleanup.policy": "compact", "segment.bytes": "400"})
    log = lm.get_partition("c", 0)
    assert log is not None
    committed = (await lm.append("c", 0, rb.build_batch([rec(b"k", b"committed")]))).base_offset
    # An aborted transaction rewrites the key.
    await lm.append("c", 0, rb.build_batch([rec(b"k", b"aborted")], producer_id=9,
                                           producer_epoch=0, base_sequence=0,
                                           attributes=rb.TRANSACTIONAL_BIT))
    log.append(build_marker(9, 0, False, 1), from_client=False, producer_check=False)
    for i in range(12):  # closed segments below the LSO
        await lm.append("c", 0, rb.build_batch([rec(b"p", b"plain-%d" % i)]))
    # An open transaction rewrites another key; later plain records roll segments past it.
    open_first = (await lm.append("c", 0, rb.build_batch(
        [rec(b"o", b"open")], producer_id=10, producer_epoch=0, base_sequence=0,
        attributes=rb.TRANSACTIONAL_BIT))).base_offset
    for i in range(30):
        await lm.append("c", 0, rb.build_batch([rec(b"o", b"plain-%d" % i)]))
    assert len(log.segments) > 3 and log.last_stable_offset == open_first
    assert await lm.cleaner.clean_once()
    kept = [(r.offset, r.value) for _, batch in _batches_of(log)
            for r in rb.decode_records(batch)]
    assert (committed, b"committed") in kept
    assert [v for _, v in kept if v is not None and v.startswith(b"plain")][0] != b"plain-0"
    # Nothing at or after the LSO was cleaned: the open transaction's record is still there.
    later = log.read(open_first, 1 << 20).records
    assert rb.decode_records(later[:rb.decode_header(later).size])[0].value == b"open"
    lm.close()


def _batches_of(log: Any) -> list[tuple[rb.BatchHeader, bytes]]:
    """Every batch of every segment."""
    out: list[tuple[rb.BatchHeader, bytes]] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        view = memoryview(log.read(offset, 1 << 20).records)
        for p, n in rb.iter_batches(view):
            out.append((rb.decode_header(view[p:p + n]), bytes(view[p:p + n])))
        offset = out[-1][0].last_offset + 1
    return out


@pytest.mark.parametrize("freed_before_close", [True, False])
def test_an_aborted_transaction_whose_index_append_failed_is_not_lost(
        tmp_path: Path, freed_before_close: bool) -> None:
    """The ABORT marker is in the log but its ``.txnindex`` entry could not be appended (a
    full disk; here a directory in the file's place). A producer snapshot past the marker would
    keep the next start from replaying it, and read_committed consumers would then read the
    aborted records: the entry is written before any snapshot (at a roll or the clean
    shutdown), and while it cannot be, no snapshot is taken (the shutdown is not clean, so the
    next start replays the marker and writes the entry)."""
    from trio_broker.storage.txn_index import build_marker

    config, lm, log = _one_partition(tmp_path)
    log.append(_txn(1, b"aborted"))                                     # offset 0
    blocker = log.directory / f"{0:020d}{TXN_INDEX_SUFFIX}"
    blocker.mkdir()
    with pytest.raises(OSError):
        log.append(build_marker(1, 0, False, 1), from_client=False, producer_check=False)
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in log.txn_index.aborted
            ] == [(1, 0, 1)]
    log.roll()                                 # no snapshot past the marker while unwritten
    log.append(rb.build_batch([(None, b"plain", (), 1_700_000_000_000)]))   # offset 2
    if freed_before_close:
        blocker.rmdir()
    lm.close()
    if not freed_before_close:
        blocker.rmdir()
    assert (tmp_path / "data" / ".kafka_cleanshutdown").exists() is freed_before_close
    lm = LogManager(config)
    lm.open()
    try:
        log = lm.get_partition("t", 0)
        assert log is not None
        assert [(a.producer_id, a.first_offset, a.last_offset) for a in log.txn_index.aborted
                ] == [(1, 0, 1)]
        assert log.last_stable_offset == log.high_watermark == 3
    finally:
        lm.close()
    # Written to its file: a third start finds it without any replay.
    lm = LogManager(config)
    lm.open()
    try:
        log = lm.get_partition("t", 0)
        assert log is not None and len(log.txn_index.aborted) == 1
    finally:
        lm.close()
