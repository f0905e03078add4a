"""Transaction version 2's EndTxn rules (KIP-890 part 2), sans-IO: Kafka 4.0's table of retries
against the state, the epoch bump of every end, the move to a new producer id when the epoch
is exhausted, and the flexible ``TransactionLogValue`` v1 that keeps them across a restart."""

from __future__ import annotations

import contextlib
import random

import attrs
import pytest
from kio.schema.errors import ErrorCode as E

from trio_broker.coordinator.transaction import state as sm
from trio_broker.coordinator.transaction.records import decode_value, encode_value
from trio_broker.coordinator.transaction.state import TxnMetadata, TxnState

PID, NEW_PID = 7, 99


def meta(state: TxnState, epoch: int = 5, **changes: object) -> TxnMetadata:
    partitions = frozenset({("t", 0)}) if state is TxnState.ONGOING else frozenset()
    return TxnMetadata("tx", PID, epoch, 60_000, state, partitions,
                       start_ms=1 if partitions else -1, last_update_ms=1, **changes)  # type: ignore[arg-type]


def end(current: TxnMetadata, epoch: int, commit: bool, pid: int = PID) -> sm.Decision:
    return sm.end_transaction_v2(current, pid, epoch, commit, 10, NEW_PID)


BUMP = "bump"


@pytest.mark.parametrize(("state", "retry", "commit", "expected"), [
    # Kafka 4.0's table (TransactionCoordinator.endTransaction, transaction version 2).
    (TxnState.EMPTY, True, False, E.producer_fenced),
    (TxnState.EMPTY, False, False, BUMP),
    (TxnState.EMPTY, True, True, E.producer_fenced),
    (TxnState.EMPTY, False, True, E.invalid_txn_state),
    (TxnState.COMPLETE_ABORT, True, False, E.none),
    (TxnState.COMPLETE_ABORT, False, False, BUMP),
    (TxnState.COMPLETE_ABORT, True, True, E.invalid_txn_state),
    (TxnState.COMPLETE_ABORT, False, True, E.invalid_txn_state),
    (TxnState.COMPLETE_COMMIT, True, False, E.invalid_txn_state),
    (TxnState.COMPLETE_COMMIT, False, False, BUMP),
    (TxnState.COMPLETE_COMMIT, True, True, E.none),
    (TxnState.COMPLETE_COMMIT, False, True, E.invalid_txn_state),
    # An open transaction ends at its own epoch only; a prepared one answers a retry.
    (TxnState.ONGOING, False, True, BUMP),
    (TxnState.ONGOING, True, True, E.producer_fenced),
    (TxnState.PREPARE_COMMIT, True, True, E.concurrent_transactions),
    (TxnState.PREPARE_COMMIT, True, False, E.invalid_txn_state),
    (TxnState.PREPARE_ABORT, True, False, E.concurrent_transactions),
    (TxnState.PREPARE_COMMIT, False, True, E.producer_fenced),
])
def test_end_txn_v2_table(state: TxnState, retry: bool, commit: bool, expected: object
                          ) -> None:
    decision = end(meta(state), 4 if retry else 5, commit)
    if expected == BUMP:
        assert decision.error is E.none and decision.write is not None
        written = decision.write
        target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        assert (written.state, written.producer_id, written.producer_epoch,
                written.last_producer_epoch, written.client_transaction_version) == (
            target, PID, 6, 5, sm.TV2)
        assert sm.client_producer(written) == (PID, 6)
        done = sm.complete(written, 11)
        assert (done.producer_id, done.producer_epoch, done.partitions) == (PID, 6, frozenset())
    else:
        assert decision == sm.Decision(expected)  # type: ignore[arg-type]


def test_other_producers_and_epochs_are_refused() -> None:
    assert end(meta(TxnState.ONGOING), 5, True, pid=8).error is E.invalid_producer_id_mapping
    assert end(None, 5, True).error is E.invalid_producer_id_mapping  # type: ignore[arg-type]
    assert end(meta(TxnState.COMPLETE_COMMIT), 6, True).error is E.producer_fenced
    assert end(meta(TxnState.COMPLETE_COMMIT), 3, True).error is E.producer_fenced


def test_an_exhausted_epoch_moves_to_a_new_producer_id() -> None:
    decision = end(meta(TxnState.ONGOING, epoch=sm.MAX_EPOCH), sm.MAX_EPOCH, True)
    prepared = decision.write
    assert prepared is not None
    # The markers go out under the old id at the last epoch; the client goes on with the new
    # id at epoch 0, which the completion makes current.
    assert (prepared.producer_id, prepared.producer_epoch, prepared.next_producer_id) == (
        PID, sm.MAX_EPOCH + 1, NEW_PID)
    assert sm.client_producer(prepared) == (NEW_PID, 0)
    done = sm.complete(prepared, 11)
    assert (done.producer_id, done.producer_epoch, done.previous_producer_id,
            done.next_producer_id) == (NEW_PID, 0, PID, -1)
    # A retry of that EndTxn names the old id and its last epoch: answered, not fenced.
    assert end(done, sm.MAX_EPOCH, True, pid=PID) == sm.Decision()
    assert end(done, sm.MAX_EPOCH, False, pid=PID).error is E.invalid_txn_state
    assert end(done, sm.MAX_EPOCH - 1, True, pid=PID).error is E.invalid_producer_id_mapping
    # Below the last epoch nothing rotates.
    assert end(meta(TxnState.ONGOING, epoch=3), 3, True).write.next_producer_id == -1  # type: ignore[union-attr]


def test_version_2_states_are_written_as_flexible_v1_and_read_back() -> None:
    prepared = end(meta(TxnState.ONGOING, epoch=sm.MAX_EPOCH), sm.MAX_EPOCH, True).write
    assert prepared is not None
    # last_producer_epoch is not in Kafka's record (v0 or v1): it is not kept either.
    for value in (prepared, sm.complete(prepared, 11),
                  meta(TxnState.EMPTY, client_transaction_version=2)):
        stored = attrs.evolve(value, last_producer_epoch=-1)
        data = encode_value(stored)
        assert data[:2] == b"\x00\x01"
        assert decode_value("tx", data) == stored
    # A state of an older client stays v0, readable by Kafka 3.x tools.
    assert encode_value(meta(TxnState.ONGOING))[:2] == b"\x00\x00"


def test_a_damaged_v1_value_is_a_value_error() -> None:
    prepared = end(meta(TxnState.ONGOING, epoch=sm.MAX_EPOCH), sm.MAX_EPOCH, True).write
    assert prepared is not None
    data = encode_value(prepared)
    rng = random.Random(3)
    for cut in range(2, len(data)):
        with pytest.raises(ValueError):
            decode_value("tx", data[:cut])
    # Any other exception (kio's, struct's, an unknown state) would stop the coordinator's
    # load, which skips a record only on ValueError.
    for _ in range(2000):
        damaged = bytearray(data)
        damaged[rng.randrange(2, len(damaged))] = rng.randrange(256)
        with contextlib.suppress(ValueError):
            decode_value("tx", bytes(damaged))
