"""Kafka's transaction state machine, sans-IO (no Trio; pure functions over frozen values).

Every request of a transactional producer is decided here: given the current
:class:`TxnMetadata` of a transactional id, each function answers either an error code or the
metadata to write to ``__transaction_state`` (the coordinator writes it, then makes it current).
The rules follow Kafka's ``TransactionCoordinator`` and ``TransactionMetadata``.

Two generations of clients end transactions differently. Up to EndTxn v4 (transaction version
0/1) the epoch stays for the producer's life. From EndTxn v5 (``transaction.version`` 2, KIP-890
part 2) every commit or abort bumps it, so that a late write of the previous transaction is
fenced by its epoch; the answer carries the new epoch, an exhausted epoch moves to a new producer
id when the transaction completes, and a retry is told apart from the next transaction's end by
its epoch (one less than the current), Kafka 4.0's table in :func:`end_transaction_v2`.
"""

from __future__ import annotations

import enum

import attrs
from kio.schema.errors import ErrorCode

E = ErrorCode

#: Kafka bumps to a new producer id when the epoch would pass this (``Short.MaxValue - 1``).
MAX_EPOCH = 32766
NO_PRODUCER_ID = -1
NO_EPOCH = -1
#: ``transaction.version`` 2: the client bumps its epoch per transaction (KIP-890 part 2).
TV2 = 2

TopicPartition = tuple[str, int]


class TxnState(enum.IntEnum):
    """Kafka's ``TransactionState`` ids (as written in ``__transaction_state``)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name Kafka's DescribeTransactions and ListTransactions use."""
        return "".join(part.capitalize() for part in self.name.split("_"))


#: Kafka's valid previous states of each state.
VALID_PREVIOUS = {
    TxnState.EMPTY: {TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT},
    TxnState.ONGOING: {TxnState.ONGOING, TxnState.EMPTY, TxnState.COMPLETE_COMMIT,
                       TxnState.COMPLETE_ABORT},
    TxnState.PREPARE_COMMIT: {TxnState.ONGOING},
    # Kafka 4.0: with transaction version 2 an abort needs no open transaction (the client
    # cannot know whether its produce added a partition).
    TxnState.PREPARE_ABORT: {TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE, TxnState.EMPTY,
                             TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT},
    TxnState.COMPLETE_COMMIT: {TxnState.PREPARE_COMMIT},
    TxnState.COMPLETE_ABORT: {TxnState.PREPARE_ABORT},
    TxnState.DEAD: {TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT},
    TxnState.PREPARE_EPOCH_FENCE: {TxnState.ONGOING},
}


@attrs.frozen
class TxnMetadata:
    """One transactional id's state (Kafka's ``TransactionMetadata``)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition] = frozenset()
    #: When the current transaction began (wall ms), -1 when none is open.
    start_ms: int = -1
    last_update_ms: int = -1
    #: The epoch before the last bump (KIP-360 retries of InitProducerId), -1 if none.
    last_producer_epoch: int = NO_EPOCH
    #: The producer id before the last rotation at the end of a transaction (version 2).
    previous_producer_id: int = NO_PRODUCER_ID
    #: The producer id a PrepareCommit/PrepareAbort of an exhausted epoch moves to when it
    #: completes (version 2), -1 if none.
    next_producer_id: int = NO_PRODUCER_ID
    #: The transaction version of the client's last state change (0, or :data:`TV2`).
    client_transaction_version: int = 0

    def transition(self, state: TxnState, now_ms: int, **changes: object) -> TxnMetadata:
        if self.state not in VALID_PREVIOUS[state]:
            raise ValueError(f"illegal transaction transition {self.state.name} -> {state.name}")
        return attrs.evolve(self, state=state, last_update_ms=now_ms, **changes)  # type: ignore[arg-type]

    @property
    def in_prepare(self) -> bool:
        return self.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


@attrs.frozen
class Decision:
    """What to do: answer ``error`` now, or write ``write`` and then answer ``error``.

    ``fence`` marks an InitProducerId that found an open transaction: the coordinator aborts it
    (with ``write``, a PrepareAbort under a bumped epoch) and the client retries.
    """

    error: ErrorCode = E.none
    write: TxnMetadata | None = None
    fence: bool = False


def validate_timeout(timeout_ms: int, max_timeout_ms: int) -> bool:
    return 0 < timeout_ms <= max_timeout_ms


def _bumped(meta: TxnMetadata, new_producer_id: int, now_ms: int, timeout_ms: int
            ) -> TxnMetadata:
    if meta.producer_epoch >= MAX_EPOCH:
        # Epoch exhausted: a fresh producer id starting at epoch 0 (Kafka).
        return meta.transition(TxnState.EMPTY, now_ms, producer_id=new_producer_id,
                               producer_epoch=0, last_producer_epoch=NO_EPOCH,
                               timeout_ms=timeout_ms, partitions=frozenset(), start_ms=-1)
    return meta.transition(TxnState.EMPTY, now_ms, producer_epoch=meta.producer_epoch + 1,
                           last_producer_epoch=meta.producer_epoch, timeout_ms=timeout_ms,
                           partitions=frozenset(), start_ms=-1)


def init_producer_id(meta: TxnMetadata | None, *, transactional_id: str, timeout_ms: int,
                     expected_pid: int, expected_epoch: int, new_producer_id: int,
                     now_ms: int) -> Decision:
    """InitProducerId with a transactional id (the timeout is already validated)."""
    if meta is None:
        return Decision(write=TxnMetadata(transactional_id, new_producer_id, 0, timeout_ms,
                                          TxnState.EMPTY, last_update_ms=now_ms))
    if expected_pid != NO_PRODUCER_ID and not (
            expected_pid == meta.producer_id
            and expected_epoch in (meta.producer_epoch, meta.last_producer_epoch)):
        # KIP-360: a producer re-initialising with an id and epoch that are no longer current.
        return Decision(E.producer_fenced)
    if meta.in_prepare or meta.state in (TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE):
        return Decision(E.concurrent_transactions)
    if meta.state is TxnState.ONGOING:
        # Fence the current producer: abort its transaction under a bumped epoch; the client
        # retries on CONCURRENT_TRANSACTIONS and then gets the next epoch.
        fenced = attrs.evolve(meta, state=TxnState.PREPARE_EPOCH_FENCE, last_update_ms=now_ms)
        epoch = meta.producer_epoch + 1 if meta.producer_epoch < MAX_EPOCH else MAX_EPOCH
        return Decision(E.concurrent_transactions,
                        fenced.transition(TxnState.PREPARE_ABORT, now_ms, producer_epoch=epoch,
                                          last_producer_epoch=meta.producer_epoch),
                        fence=True)
    if (expected_pid != NO_PRODUCER_ID and expected_epoch == meta.last_producer_epoch
            and meta.state is TxnState.EMPTY):
        # A retry of a bump that already happened: answer the current epoch again.
        return Decision()
    return Decision(write=_bumped(meta, new_producer_id, now_ms, timeout_ms))


def _check_producer(meta: TxnMetadata | None, producer_id: int, epoch: int) -> ErrorCode:
    if meta is None or meta.producer_id != producer_id:
        return E.invalid_producer_id_mapping
    if epoch != meta.producer_epoch:
        return E.producer_fenced
    if meta.in_prepare or meta.state in (TxnState.PREPARE_EPOCH_FENCE, TxnState.DEAD):
        return E.concurrent_transactions
    return E.none


def add_partitions(meta: TxnMetadata | None, producer_id: int, epoch: int,
                   partitions: frozenset[TopicPartition], now_ms: int,
                   client_transaction_version: int = 0) -> Decision:
    """AddPartitionsToTxn (and AddOffsetsToTxn, with the group's offsets partition); with
    transaction version 2, a produce or TxnOffsetCommit adding its partition implicitly."""
    error = _check_producer(meta, producer_id, epoch)
    if error:
        return Decision(error)
    assert meta is not None
    if meta.state is TxnState.ONGOING and partitions <= meta.partitions:
        return Decision()
    start = meta.start_ms if meta.state is TxnState.ONGOING else now_ms
    return Decision(write=meta.transition(TxnState.ONGOING, now_ms,
                                          partitions=meta.partitions | partitions,
                                          start_ms=start,
                                          client_transaction_version=client_transaction_version))


def end_transaction(meta: TxnMetadata | None, producer_id: int, epoch: int, commit: bool,
                    now_ms: int) -> Decision:
    """EndTxn from the client: PrepareCommit / PrepareAbort, or the answer to a retry."""
    if meta is None or meta.producer_id != producer_id:
        return Decision(E.invalid_producer_id_mapping)
    if epoch != meta.producer_epoch:
        return Decision(E.producer_fenced)
    state = meta.state
    if state is TxnState.ONGOING:
        target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        return Decision(write=meta.transition(target, now_ms))
    if state is TxnState.COMPLETE_COMMIT:
        return Decision(E.none if commit else E.invalid_txn_state)
    if state is TxnState.COMPLETE_ABORT:
        return Decision(E.invalid_txn_state if commit else E.none)
    if state is TxnState.PREPARE_COMMIT:
        return Decision(E.concurrent_transactions if commit else E.invalid_txn_state)
    if state is TxnState.PREPARE_ABORT:
        return Decision(E.invalid_txn_state if commit else E.concurrent_transactions)
    return Decision(E.invalid_txn_state)


def end_transaction_v2(meta: TxnMetadata | None, producer_id: int, epoch: int, commit: bool,
                       now_ms: int, new_producer_id: int = NO_PRODUCER_ID) -> Decision:
    """EndTxn v5+ (transaction version 2): the prepare bumps the epoch. ``new_producer_id`` is
    the id an exhausted epoch (:data:`MAX_EPOCH`) moves to. Kafka 4.0's table, where *retry*
    is the epoch one below the current (or the last of a rotated id) and *current* the epoch:

    ============== ============== ============== ============== ==============
    state          abort, retry   abort, current commit, retry  commit, current
    ============== ============== ============== ============== ==============
    Empty          fenced         bump           fenced         invalid state
    CompleteAbort  none           bump           invalid state  invalid state
    CompleteCommit invalid state  bump           none           invalid state
    ============== ============== ============== ============== ==============
    """
    if meta is None:
        return Decision(E.invalid_producer_id_mapping)
    retry_on_overflow = (meta.previous_producer_id == producer_id and epoch == MAX_EPOCH
                         and meta.producer_epoch == 0)
    retry_on_bump = meta.producer_epoch == epoch + 1
    state = meta.state
    completed = state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
    if meta.in_prepare:
        valid = retry_on_bump
    elif completed:
        valid = retry_on_bump or retry_on_overflow or epoch == meta.producer_epoch
    else:
        valid = epoch == meta.producer_epoch
    if meta.producer_id != producer_id and not retry_on_overflow:
        return Decision(E.invalid_producer_id_mapping)
    if not valid:
        return Decision(E.producer_fenced)
    retry = retry_on_bump or retry_on_overflow
    if state is TxnState.ONGOING:
        target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        return Decision(write=_prepare_with_bump(meta, target, now_ms, new_producer_id,
                                                 meta.start_ms))
    if state is TxnState.PREPARE_COMMIT:
        return Decision(E.concurrent_transactions if commit else E.invalid_txn_state)
    if state is TxnState.PREPARE_ABORT:
        return Decision(E.invalid_txn_state if commit else E.concurrent_transactions)
    if state is TxnState.EMPTY or completed:
        if retry:
            ended_so = (state is TxnState.COMPLETE_COMMIT) == commit and completed
            return Decision(E.none if ended_so else E.invalid_txn_state)
        if commit:
            return Decision(E.invalid_txn_state)
        # An abort with nothing open: markers to no partition, but the epoch moves on.
        return Decision(write=_prepare_with_bump(meta, TxnState.PREPARE_ABORT, now_ms,
                                                 new_producer_id, now_ms))
    return Decision(E.invalid_txn_state)


def _prepare_with_bump(meta: TxnMetadata, target: TxnState, now_ms: int, new_producer_id: int,
                       start_ms: int) -> TxnMetadata:
    exhausted = meta.producer_epoch >= MAX_EPOCH
    return meta.transition(target, now_ms, producer_epoch=meta.producer_epoch + 1,
                           last_producer_epoch=meta.producer_epoch, start_ms=start_ms,
                           next_producer_id=new_producer_id if exhausted else NO_PRODUCER_ID,
                           client_transaction_version=TV2)


def client_producer(meta: TxnMetadata) -> tuple[int, int]:
    """The producer id and epoch a version-2 client continues with after ``meta`` (a
    PrepareX just written, or the current state): an exhausted epoch's next id at epoch 0."""
    if meta.next_producer_id != NO_PRODUCER_ID:
        return meta.next_producer_id, 0
    return meta.producer_id, meta.producer_epoch


def complete(meta: TxnMetadata, now_ms: int) -> TxnMetadata:
    """After the markers: CompleteCommit / CompleteAbort, with no partitions; a version-2
    transaction that exhausted its epoch moves to its next producer id at epoch 0."""
    target = (TxnState.COMPLETE_COMMIT if meta.state is TxnState.PREPARE_COMMIT
              else TxnState.COMPLETE_ABORT)
    if meta.next_producer_id != NO_PRODUCER_ID:
        return meta.transition(target, now_ms, partitions=frozenset(), start_ms=-1,
                               producer_id=meta.next_producer_id, producer_epoch=0,
                               previous_producer_id=meta.producer_id,
                               next_producer_id=NO_PRODUCER_ID)
    return meta.transition(target, now_ms, partitions=frozenset(), start_ms=-1)


def timed_out_abort(meta: TxnMetadata, now_ms: int) -> TxnMetadata | None:
    """The PrepareAbort the coordinator writes for an expired transaction (epoch bumped, as
    Kafka's ``prepareFenceProducerEpoch``, so the abandoned producer is fenced), or None."""
    if meta.state is not TxnState.ONGOING or meta.start_ms < 0:
        return None
    if now_ms - meta.start_ms <= meta.timeout_ms:
        return None
    epoch = meta.producer_epoch + 1 if meta.producer_epoch < MAX_EPOCH else MAX_EPOCH
    fenced = attrs.evolve(meta, state=TxnState.PREPARE_EPOCH_FENCE)
    return fenced.transition(TxnState.PREPARE_ABORT, now_ms, producer_epoch=epoch,
                             last_producer_epoch=meta.producer_epoch)


def expired(meta: TxnMetadata, now_ms: int, expiration_ms: int) -> bool:
    """``transactional.id.expiration.ms``: an idle id with no open transaction."""
    return (meta.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
            and now_ms - meta.last_update_ms >= expiration_ms)
