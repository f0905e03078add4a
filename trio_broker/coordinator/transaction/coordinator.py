"""The transaction coordinator on Trio: Kafka's ``TransactionCoordinator`` for one node.

Decisions come from the sans-IO :mod:`.state`; this module does the I/O in the order Kafka
does it:

* every state change is written to ``__transaction_state`` (the transactional id's partition)
  before it becomes current and before the client is answered;
* ending a transaction writes PrepareCommit/PrepareAbort, then a COMMIT/ABORT marker to every
  partition of the transaction (and commits or drops its pending offsets), then
  CompleteCommit/CompleteAbort;
* at start-up the log is replayed (newest record per id wins) and any PrepareCommit or
  PrepareAbort found is completed, so a crash between the two phases loses nothing;
* a task wakes every ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` and aborts
  transactions open longer than their timeout, fencing their producer (epoch bump); another
  removes transactional ids idle past ``transactional.id.expiration.ms``.

Transaction version 2 (KIP-890 part 2, a client sending EndTxn v5): a produce or TxnOffsetCommit
adds its partition to the transaction itself (:meth:`TransactionCoordinator.add_produced_partition`),
and each commit or abort bumps the producer's epoch (:func:`.state.end_transaction_v2`); the
markers carry the bumped epoch, which fences any late write of the transaction that ended.

A transactional id has at most one state change in flight (``_busy``); a request that finds one
gets CONCURRENT_TRANSACTIONS and the client retries, as against Kafka.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any

import attrs
import trio
from kio.schema.errors import ErrorCode

from ...config import BrokerConfig
from ...observability.log import emit
from ...protocol import records as rb
from ...storage.txn_index import build_marker
from ..coordinator import GroupCoordinator, OffsetCommitEntry
from ..internal_topic import ensure_topic_async, every, guarded, read_batches
from ..records import OFFSETS_TOPIC
from . import state as sm
from .offsets import TxnOffsets
from .records import (
    TRANSACTION_TOPIC,
    TRANSACTION_TOPIC_CONFIGS,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    txn_partition_for,
)
from .state import TxnMetadata, TxnState

E = ErrorCode
TopicPartition = tuple[str, int]
#: The longest a transaction's second phase may hold a shutdown (seconds).
_FINISH_LIMIT_S = 10.0


@attrs.frozen
class InitResult:
    """An answer that names the producer to go on with: InitProducerId's, EndTxn v5's."""

    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


class TransactionCoordinator:
    """Transactional ids, their producers and their transactions.

    ``run()`` loads ``__transaction_state``, completes interrupted transactions, and owns the
    timeout and expiration tasks; it must be running while requests are served.
    """

    def __init__(self, config: BrokerConfig, log_manager: Any, groups: GroupCoordinator, *,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.log_manager = log_manager
        self.groups = groups
        self._wall_clock = wall_clock
        self._txns: dict[str, TxnMetadata] = {}
        self._busy: set[str] = set()
        self._loaded = False
        self._nursery: trio.Nursery | None = None
        self._num_partitions = config.transaction_state_log_num_partitions
        self.offsets = TxnOffsets(groups, log_manager)

    # ------------------------------------------------------------------ life cycle
    @property
    def transactions(self) -> Mapping[str, TxnMetadata]:
        """Every transactional id's current state (read-only view, for tests and tools)."""
        return self._txns

    @property
    def is_active(self) -> bool:
        return self._loaded and self._nursery is not None

    def _now_ms(self) -> int:
        return int(self._wall_clock() * 1000)

    def partition_for(self, transactional_id: str) -> int:
        return txn_partition_for(transactional_id, self._num_partitions)

    def load(self) -> None:
        """Rebuild every transactional id from ``__transaction_state``, and the pending
        transactional offsets from ``__consumer_offsets``."""
        if self._loaded:
            return
        started = time.perf_counter()
        lm = self.log_manager
        info = lm.topics.get(TRANSACTION_TOPIC)
        if info is not None:
            self._num_partitions = info.num_partitions
            records = 0
            for partition in range(info.num_partitions):
                for key, value in self._read_partition(partition):
                    records += 1
                    try:
                        txn_id = decode_key(key)
                        if value is None:
                            self._txns.pop(txn_id, None)
                        else:
                            self._txns[txn_id] = decode_value(txn_id, value)
                    except ValueError:
                        continue  # an unreadable record is skipped, as Kafka skips them
        self.offsets.load()
        self._loaded = True
        emit("transactions_loaded", transactions=len(self._txns),
             pending=sum(1 for m in self._txns.values() if m.in_prepare),
             duration_ms=round((time.perf_counter() - started) * 1000, 3))

    def _read_partition(self, partition: int) -> Iterator[tuple[bytes, bytes | None]]:
        for header, batch in read_batches(self.log_manager, TRANSACTION_TOPIC, partition, 0,
                                          self.config.transaction_state_log_load_buffer_size):
            if rb.compute_crc(batch) != header.crc or header.is_control:
                continue
            try:
                decoded = rb.decode_records(batch)
            except rb.RecordBatchError:
                continue
            for record in decoded:
                if record.key is not None:
                    yield record.key, record.value

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Load, complete interrupted transactions, and run the timers until cancelled."""
        if not self._loaded:
            self.load()
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                for meta in list(self._txns.values()):
                    if meta.in_prepare:
                        # Crashed between the phases: finish what the log says was decided.
                        self._busy.add(meta.transactional_id)
                        nursery.start_soon(self._guarded, self._finish, meta)
                nursery.start_soon(self._guarded, self._abort_timed_out_periodically)
                nursery.start_soon(self._guarded, self._expire_periodically)
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._nursery = None

    _guarded = staticmethod(guarded)

    # ---------------------------------------------------------------------- writes
    async def _write(self, meta: TxnMetadata, *, tombstone: bool = False) -> ErrorCode:
        """Append the new state of ``meta``'s id to ``__transaction_state``."""
        now = self._now_ms()
        value = None if tombstone else encode_value(meta)
        batch = rb.build_batch([(encode_key(meta.transactional_id), value, (), now)])
        lm = self.log_manager
        try:
            await ensure_topic_async(lm, TRANSACTION_TOPIC, self._num_partitions,
                                     TRANSACTION_TOPIC_CONFIGS,
                                     self.config.transaction_state_log_segment_bytes)
            await lm.append(TRANSACTION_TOPIC, self.partition_for(meta.transactional_id),
                            batch, producer_check=False)
        except Exception as exc:  # storage failure: the client retries
            emit("coordinator_write_failed", partition=self.partition_for(
                meta.transactional_id), error=repr(exc))
            return E.coordinator_not_available
        if tombstone:
            self._txns.pop(meta.transactional_id, None)
        else:
            self._txns[meta.transactional_id] = meta
        return E.none

    def _ready(self) -> ErrorCode:
        if not self._loaded:
            return E.coordinator_load_in_progress
        if self._nursery is None:
            return E.coordinator_not_available
        return E.none

    def _admit(self, transactional_id: str) -> ErrorCode:
        """Whether a state change of ``transactional_id`` may start now: the coordinator is
        ready and no other change of that id is in flight (AddPartitions, EndTxn)."""
        error = self._ready()
        if error:
            return error
        if transactional_id in self._busy:
            return E.concurrent_transactions
        return E.none

    # -------------------------------------------------------------- InitProducerId
    async def init_producer_id(self, transactional_id: str, timeout_ms: int,
                               producer_id: int = -1, producer_epoch: int = -1, *,
                               enable_two_phase_commit: bool = False,
                               keep_prepared_txn: bool = False) -> InitResult:
        """A producer id and epoch for a transactional producer, fencing older ones.

        Two-phase commit (KIP-939, InitProducerId v6) is not implemented: this broker is a Kafka
        broker with ``transaction.two.phase.commit.enable=false``, whose coordinator answers a
        request to enable it TRANSACTIONAL_ID_AUTHORIZATION_FAILED and one to keep a prepared
        transaction UNSUPPORTED_VERSION (Kafka 4.1's ``TransactionCoordinator``)."""
        error = self._ready()
        if error:
            return InitResult(error)
        if not transactional_id:
            return InitResult(E.invalid_request)
        if enable_two_phase_commit:
            return InitResult(E.transactional_id_authorization_failed)
        if keep_prepared_txn:
            return InitResult(E.unsupported_version)
        if not sm.validate_timeout(timeout_ms, self.config.transaction_max_timeout_ms):
            return InitResult(E.invalid_transaction_timeout)
        if transactional_id in self._busy:
            return InitResult(E.concurrent_transactions)
        meta = self._txns.get(transactional_id)
        new_pid = -1
        if meta is None or meta.producer_epoch >= sm.MAX_EPOCH:
            try:
                new_pid = self.log_manager.allocate_producer_id()
            except Exception:  # the id block could not be written: retriable
                return InitResult(E.coordinator_not_available)
        decision = sm.init_producer_id(
            meta, transactional_id=transactional_id, timeout_ms=timeout_ms,
            expected_pid=producer_id, expected_epoch=producer_epoch, new_producer_id=new_pid,
            now_ms=self._now_ms())
        if decision.write is None:
            if decision.error or meta is None:
                return InitResult(decision.error)
            return InitResult(E.none, meta.producer_id, meta.producer_epoch)
        write = decision.write
        self._busy.add(transactional_id)
        try:
            error = await self._write(write)
        finally:
            if not decision.fence or error:
                self._busy.discard(transactional_id)
        if error:
            return InitResult(error)
        if decision.fence:
            assert meta is not None
            emit("transaction_fenced", transactional_id=transactional_id,
                 producer_id=meta.producer_id, producer_epoch=meta.producer_epoch,
                 new_epoch=write.producer_epoch, partitions=len(meta.partitions),
                 reason="init_producer_id")
            self._spawn(self._finish, write)
            return InitResult(E.concurrent_transactions)
        return InitResult(E.none, write.producer_id, write.producer_epoch)

    # ------------------------------------------------------- AddPartitions / Offsets
    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: Iterable[TopicPartition],
                             client_transaction_version: int = 0) -> ErrorCode:
        """Add partitions to the producer's transaction (starting it if none is open)."""
        error = self._admit(transactional_id)
        if error:
            return error
        meta = self._txns.get(transactional_id)
        decision = sm.add_partitions(meta, producer_id, producer_epoch, frozenset(partitions),
                                     self._now_ms(), client_transaction_version)
        if decision.write is None:
            return decision.error
        assert meta is not None
        self._busy.add(transactional_id)
        try:
            error = await self._write(decision.write)
        finally:
            self._busy.discard(transactional_id)
        if not error and meta.state is not TxnState.ONGOING:
            emit("transaction_started", transactional_id=transactional_id,
                 producer_id=producer_id, producer_epoch=producer_epoch,
                 partitions=len(decision.write.partitions))
        return error

    def verify_produce(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       topic: str, partition: int) -> ErrorCode:
        """KIP-890 part 1: a transactional batch is accepted only for a partition already in
        the producer's ongoing transaction, so a stray write cannot open a transaction that no
        marker will ever close (a "hanging" transaction holding the LSO forever). The codes are
        the coordinator's (Kafka's handleVerifyPartitionsInTransaction); the produce handler
        translates them for its client's version."""
        if not self.is_active:
            return E.none  # no coordinator running (an embedded test broker): nothing to check
        error, meta = self._verifiable(transactional_id, producer_id, producer_epoch)
        if error:
            return error
        assert meta is not None
        if meta.state is not TxnState.ONGOING or (topic, partition) not in meta.partitions:
            return E.transaction_abortable
        return E.none

    def _verifiable(self, transactional_id: str, producer_id: int, producer_epoch: int
                    ) -> tuple[ErrorCode, TxnMetadata | None]:
        """Kafka's checks before verifying partitions: the producer's id, its exact epoch, no
        transaction being ended; the metadata when they pass."""
        meta = self._txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return E.invalid_producer_id_mapping, None
        if producer_epoch != meta.producer_epoch:
            # Newer too (Kafka's verification answers PRODUCER_FENCED unless exactly equal): a
            # forged epoch written first would fence the real producer on the partition.
            return E.producer_fenced, None
        if meta.in_prepare:
            return E.concurrent_transactions, None
        return E.none, meta

    async def add_produced_partition(self, transactional_id: str, producer_id: int,
                                     producer_epoch: int, topic: str, partition: int
                                     ) -> ErrorCode:
        """Transaction version 2 (Produce v12+): the partition of a transactional batch joins
        the producer's transaction (starting one) instead of being refused, as Kafka's
        AddPartitionsToTxnManager does with its ``addPartition`` operation."""
        error = self.verify_produce(transactional_id, producer_id, producer_epoch, topic,
                                    partition)
        if error is not E.transaction_abortable:
            return error
        return await self.add_partitions(transactional_id, producer_id, producer_epoch,
                                         [(topic, partition)], sm.TV2)

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn v4+ ``verify_only`` (Kafka 3.9's
        handleVerifyPartitionsInTransaction): whether each partition is already in the
        producer's transaction, TRANSACTION_ABORTABLE if not; nothing is changed."""
        wanted = list(partitions)
        if not transactional_id:
            return dict.fromkeys(wanted, E.invalid_request)
        error = self._ready()
        meta = None
        if not error:
            error, meta = self._verifiable(transactional_id, producer_id, producer_epoch)
        if error:
            return dict.fromkeys(wanted, error)
        assert meta is not None
        return {tp: E.none if tp in meta.partitions else E.transaction_abortable for tp in wanted}

    def offsets_partition(self, group_id: str) -> TopicPartition:
        """The ``__consumer_offsets`` partition AddOffsetsToTxn adds for a group."""
        return OFFSETS_TOPIC, self.groups.partition_for(group_id)

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          group_id: str, client_transaction_version: int = 0) -> ErrorCode:
        return await self.add_partitions(transactional_id, producer_id, producer_epoch,
                                         [self.offsets_partition(group_id)],
                                         client_transaction_version)

    async def txn_offset_commit(self, *, transactional_id: str, group_id: str, producer_id: int,
                                producer_epoch: int, generation_id: int, member_id: str,
                                group_instance_id: str | None,
                                offsets: Mapping[TopicPartition, OffsetCommitEntry],
                                add_partition: bool = False
                                ) -> dict[TopicPartition, ErrorCode]:
        """TxnOffsetCommit: offsets that the group sees only if the transaction commits. With
        ``add_partition`` (v5+, transaction version 2) the group's offsets partition joins the
        transaction here, with no AddOffsetsToTxn before."""

        def everywhere(error: ErrorCode) -> dict[TopicPartition, ErrorCode]:
            return dict.fromkeys(offsets, error)

        error = self._ready()
        if error:
            return everywhere(error)
        meta = self._txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return everywhere(E.invalid_producer_id_mapping)
        if producer_epoch != meta.producer_epoch:
            # What Kafka's append to __consumer_offsets answers a stale epoch.
            return everywhere(E.invalid_producer_epoch if producer_epoch < meta.producer_epoch
                              else E.producer_fenced)
        if add_partition and not meta.in_prepare and (
                meta.state is not TxnState.ONGOING
                or self.offsets_partition(group_id) not in meta.partitions):
            error = await self.add_offsets(transactional_id, producer_id, producer_epoch,
                                           group_id, sm.TV2)
            if error:
                return everywhere(error)
            meta = self._txns.get(transactional_id)
            if meta is None:  # expired while the write was in flight
                return everywhere(E.invalid_producer_id_mapping)
        if (meta.state is not TxnState.ONGOING
                or self.offsets_partition(group_id) not in meta.partitions):
            # AddOffsetsToTxn must come first, or the offsets would never be completed.
            return everywhere(E.invalid_txn_state if not meta.in_prepare
                              else E.concurrent_transactions)
        error = self.offsets.validate(group_id, generation_id, member_id, group_instance_id)
        if error:
            return everywhere(error)
        return await self.offsets.add(group_id, producer_id, producer_epoch, offsets,
                                      self._now_ms())

    # ---------------------------------------------------------------------- EndTxn
    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                      commit: bool) -> ErrorCode:
        """Commit or abort: PrepareX written, markers written, CompleteX written, answer."""
        error = self._admit(transactional_id)
        if error:
            return error
        meta = self._txns.get(transactional_id)
        return await self._end(sm.end_transaction(meta, producer_id, producer_epoch, commit,
                                                  self._now_ms()))

    async def end_txn_v2(self, transactional_id: str, producer_id: int, producer_epoch: int,
                         commit: bool) -> InitResult:
        """EndTxn v5+ (transaction version 2): as :meth:`end_txn`, with the epoch bumped; the
        answer carries the producer id and epoch the client goes on with."""
        error = self._admit(transactional_id)
        if error:
            return InitResult(error)
        meta = self._txns.get(transactional_id)
        new_pid = -1
        if meta is not None and meta.producer_epoch >= sm.MAX_EPOCH:
            try:
                new_pid = self.log_manager.allocate_producer_id()
            except Exception:  # the id block could not be written: retriable
                return InitResult(E.coordinator_not_available)
        decision = sm.end_transaction_v2(meta, producer_id, producer_epoch, commit,
                                         self._now_ms(), new_pid)
        if decision.write is None:
            if decision.error or meta is None:
                return InitResult(decision.error)
            return InitResult(E.none, *sm.client_producer(meta))  # a retry: as it stands now
        error = await self._end(decision)
        if error:
            return InitResult(error)
        return InitResult(E.none, *sm.client_producer(decision.write))

    async def _end(self, decision: sm.Decision) -> ErrorCode:
        """Write an EndTxn's PrepareX (``decision.write``), then its second phase."""
        if decision.write is None:
            return decision.error
        transactional_id = decision.write.transactional_id
        self._busy.add(transactional_id)
        try:
            error = await self._write(decision.write)
        except BaseException:
            self._busy.discard(transactional_id)
            raise
        if error:
            self._busy.discard(transactional_id)
            return error
        # The client is answered after the markers (Kafka answers after the prepare; waiting
        # here makes a committed transaction readable when commit_transaction() returns).
        await self._finish(decision.write)
        return E.none

    async def _finish(self, meta: TxnMetadata) -> None:
        """Second phase: markers to every partition, then CompleteCommit/CompleteAbort.
        ``meta`` is a written PrepareCommit/PrepareAbort; its id is in ``_busy``."""
        commit = meta.state is TxnState.PREPARE_COMMIT
        txn_id = meta.transactional_id
        error: ErrorCode = E.coordinator_not_available
        try:
            # Once started, the markers are all written, even through a shutdown: a half-written
            # set would leave partitions with different outcomes until the next restart. The
            # deadline bounds that (a stopped group coordinator never answers its writes).
            with trio.CancelScope(shield=True,
                                  deadline=trio.current_time() + _FINISH_LIMIT_S):
                if await self._write_markers(meta, commit):
                    done = sm.complete(meta, self._now_ms())
                    error = await self._write(done)
        finally:
            self._busy.discard(txn_id)
        if error:
            # PrepareX stays current: the timeout task writes the markers again (Kafka retries
            # them until they are written), and so does a restart. Completing with a marker
            # missing would leave that partition's transaction open forever, its LSO stuck.
            return
        duration = self._now_ms() - meta.start_ms if meta.start_ms >= 0 else -1
        fields = dict(transactional_id=txn_id, producer_id=meta.producer_id,
                      producer_epoch=meta.producer_epoch, partitions=len(meta.partitions),
                      topic_names=",".join(sorted({t for t, _ in meta.partitions})),
                      duration_ms=float(duration))
        if commit:
            emit("transaction_committed", **fields)
        else:
            emit("transaction_aborted", **fields)

    async def _write_markers(self, meta: TxnMetadata, commit: bool) -> bool:
        """A marker to every partition of the transaction; whether all were written."""
        lm = self.log_manager
        written = True
        now = self._now_ms()
        marker = build_marker(meta.producer_id, meta.producer_epoch, commit, now)
        for topic, partition in sorted(meta.partitions):
            if topic == OFFSETS_TOPIC:
                error = await self.offsets.complete(meta.producer_id, meta.producer_epoch,
                                                    partition, commit, now)
                if error:
                    written = False
                    emit("transaction_marker_failed", transactional_id=meta.transactional_id,
                         topic=topic, partition=partition, error=error.name)
                continue
            if lm.get_partition(topic, partition) is None:
                continue  # deleted since it joined the transaction: nothing to mark
            try:
                await lm.append(topic, partition, marker, producer_check=False)
            except Exception as exc:
                written = False
                emit("transaction_marker_failed", transactional_id=meta.transactional_id,
                     topic=topic, partition=partition, error=repr(exc))
        return written

    def _spawn(self, fn: Callable[..., Awaitable[None]], *args: Any) -> None:
        if self._nursery is None:
            raise RuntimeError("the transaction coordinator is not running")
        self._nursery.start_soon(self._guarded, fn, *args)

    # --------------------------------------------------------------- timers
    async def _abort_timed_out_periodically(self) -> None:
        await every(self.config.transaction_abort_timed_out_transaction_cleanup_interval_ms,
                    self.abort_timed_out)

    async def abort_timed_out(self) -> int:
        """Abort every transaction open longer than its timeout (the number aborted), and retry
        the second phase of any left in PrepareCommit/PrepareAbort."""
        count = 0
        now = self._now_ms()
        for txn_id, meta in list(self._txns.items()):
            if txn_id in self._busy:
                continue
            if meta.in_prepare:
                # A second phase that failed (a storage error): try it again.
                self._busy.add(txn_id)
                self._spawn(self._finish, meta)
                continue
            abort = sm.timed_out_abort(meta, now)
            if abort is None:
                continue
            self._busy.add(txn_id)
            error = await self._write(abort)
            if error:
                self._busy.discard(txn_id)
                continue
            emit("transaction_timed_out", transactional_id=txn_id, producer_id=meta.producer_id,
                 producer_epoch=meta.producer_epoch, partitions=len(meta.partitions),
                 timeout_ms=meta.timeout_ms, duration_ms=float(now - meta.start_ms))
            count += 1
            self._spawn(self._finish, abort)
        return count

    async def _expire_periodically(self) -> None:
        await every(self.config.transaction_remove_expired_transaction_cleanup_interval_ms,
                    self.expire_transactional_ids)

    async def expire_transactional_ids(self) -> int:
        """Remove ids idle past ``transactional.id.expiration.ms`` (a tombstone each)."""
        now = self._now_ms()
        expiration = self.config.transactional_id_expiration_ms
        count = 0
        for txn_id, meta in list(self._txns.items()):
            if txn_id in self._busy or not sm.expired(meta, now, expiration):
                continue
            if not await self._write(meta, tombstone=True):
                count += 1
                emit("transactional_id_expired", transactional_id=txn_id,
                     producer_id=meta.producer_id, producer_epoch=meta.producer_epoch)
        return count

    # ----------------------------------------------------------------- describing
    def describe(self, transactional_id: str) -> tuple[ErrorCode, TxnMetadata | None]:
        error = self._ready()
        if error:
            return error, None
        meta = self._txns.get(transactional_id)
        return (E.transactional_id_not_found, None) if meta is None else (E.none, meta)

    def list(self, states: Iterable[str] = (), producer_ids: Iterable[int] = (),
             min_duration_ms: int = -1) -> tuple[ErrorCode, list[TxnMetadata]]:
        """ListTransactions' filters: Kafka state names, producer ids, KIP-994 duration."""
        error = self._ready()
        if error:
            return error, []
        wanted_states = set(states)
        wanted_pids = set(producer_ids)
        now = self._now_ms()
        found = []
        for meta in self._txns.values():
            if wanted_states and meta.state.kafka_name not in wanted_states:
                continue
            if wanted_pids and meta.producer_id not in wanted_pids:
                continue
            if min_duration_ms >= 0 and (meta.start_ms < 0
                                         or now - meta.start_ms < min_duration_ms):
                continue
            found.append(meta)
        return E.none, sorted(found, key=lambda m: m.transactional_id)
