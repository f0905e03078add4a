"""The classic group coordinator: Kafka's ``GroupCoordinator`` on Trio, as a shell around the
sans-IO rules.

Who decides and who does:

* :mod:`.classic_state` (rebalances, timers expiring, sync, heartbeat, leave),
  :mod:`.classic_join` (JoinGroup) and :mod:`.classic_offsets` (commits, fetches, deletions,
  expiry) decide, without Trio; each call answers a :class:`~.classic_state.Decision`;
* this shell carries decisions out: a request that must wait for the rest of its group (or for
  a write) gets a :class:`~.waiting.Pending` for its ticket, which the handler parks on
  (``ctx.park``) so no handler task is held; timers are :class:`~.waiting.KeyedTimers`, one
  cancel scope per key in this coordinator's nursery; records go to :class:`~.storage.OffsetsStore`,
  whose single writer task writes them in the order the state changed, and the write's
  follow-up goes back to the rules before anyone waiting on it runs; events are emitted.

All group state changes are synchronous (no ``await`` while a group is inconsistent), so no locks
are needed. The KIP-848 groups (:class:`~.consumer_coordinator.ConsumerGroups`) live beside the
classic ones and reach this shell only through its :class:`~.consumer_coordinator.GroupHost`
face.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from functools import partial
from itertools import islice
from typing import Any, TypeVar

import trio
from kio.schema.errors import ErrorCode

from ..config import BrokerConfig
from ..observability.log import emit, emit_recorded
from ..offload import Steps
from ..storage.manager import LogManager
from .classic_join import NEW_MEMBER_JOIN_TIMEOUT_MS, ClassicJoins
from .classic_offsets import CheckedEntries, ClassicOffsets, check_entries
from .classic_state import (
    ClassicGroups,
    Decision,
    FollowUp,
    Rules,
    TimerKey,
    Write,
)
from .consumer_coordinator import ConsumerGroups
from .group import CommittedOffset, Group, JoinResult, SyncResult
from .internal_topic import every, guarded
from .storage import OFFSETS_TOPIC_CONFIGS, OffsetsStore
from .summaries import (
    GroupListing,
    GroupSummary,
    MemberSummary,
    OffsetCommitEntry,
    TopicPartition,
)
from .waiting import KeyedTimers, Pending, resolved

# The value classes live in .summaries, OFFSETS_TOPIC_CONFIGS in .storage and the join timeout
# in .classic_join; they stay importable from here.
__all__ = [
    "NEW_MEMBER_JOIN_TIMEOUT_MS",
    "OFFSETS_TOPIC_CONFIGS",
    "GroupCoordinator",
    "GroupListing",
    "GroupSummary",
    "MemberSummary",
    "OffsetCommitEntry",
    "TopicPartition",
]

E = ErrorCode
T = TypeVar("T")

#: An OffsetCommit of this many partitions or more has them checked a slice of
#: ``CHECK_SLICE`` at a time, the event loop free between slices (docs/architecture.md).
CHECK_IN_SLICES_FROM = 1024
CHECK_SLICE = 512


class GroupCoordinator:
    """The broker's group coordinator (one node: it coordinates every group).

    ``load()`` reads ``__consumer_offsets`` (creating it when missing); ``run()`` owns the timers
    and the writer task and must be running while requests are served::

        coordinator = GroupCoordinator(config, log_manager)
        await nursery.start(coordinator.run)   # loads first if load() was not called
    """

    def __init__(self, config: BrokerConfig, log_manager: LogManager, *,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.log_manager = log_manager
        self._wall_clock = wall_clock
        self.store = OffsetsStore(config, log_manager)
        #: The classic groups and their membership rules.
        self.state = ClassicGroups(Rules.from_config(config), wall_ms=self.now_ms,
                                   monotonic=trio.current_time)
        #: The JoinGroup rules, and the offset and admin rules, over the same groups.
        self.joins = ClassicJoins(self.state)
        self.offset_rules = ClassicOffsets(self.state)
        self.timers: KeyedTimers[TimerKey] = KeyedTimers(self._timer_fired)
        self._waiters: dict[int, Pending[Any]] = {}
        self._nursery: trio.Nursery | None = None
        #: The KIP-848 consumer-protocol groups (their offsets live in the classic groups).
        self.consumer_groups = ConsumerGroups(config, log_manager, self, self.state.groups)

    # ------------------------------------------------------------------ life cycle
    @property
    def groups(self) -> Mapping[str, Group]:
        """Every group this coordinator knows (read-only view, for tests and tools)."""
        return self.state.groups

    @property
    def is_loaded(self) -> bool:
        return self.state.loaded

    @property
    def is_active(self) -> bool:
        """Loaded and running: requests can be served."""
        return self.state.loaded and self._nursery is not None

    @property
    def is_resigned(self) -> bool:
        return self.state.resigned

    def partition_for(self, group_id: str) -> int:
        return self.state.partition_for(group_id)

    def now_ms(self) -> int:
        return int(self._wall_clock() * 1000)

    def load(self) -> None:
        """Create ``__consumer_offsets`` if needed and rebuild groups and offsets from it."""
        if self.state.loaded:
            return
        started = time.perf_counter()
        loaded = self.store.load(self.consumer_groups.load_record)
        self.state.num_partitions = loaded.num_partitions
        count = self.state.restore(loaded.metadata, loaded.offsets)
        self.consumer_groups.finish_load()
        self.state.loaded = True
        emit("groups_loaded", partitions=loaded.num_partitions, groups=count,
             offsets=sum(len(o) for o in loaded.offsets.values()), records=loaded.records,
             duration_ms=round((time.perf_counter() - started) * 1000, 3))

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Own the timers, the writer and offset expiry until cancelled."""
        if not self.state.loaded:
            self.load()
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self.state.running = True
                self.timers.start(self.spawn)
                nursery.start_soon(guarded, self.store.run_writer)
                nursery.start_soon(guarded, self._expire_offsets_periodically)
                self._apply(self.state.start_timers())
                self.consumer_groups.start()
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._nursery = None
            self.state.running = False
            self.timers.stop()
            # Whoever still waits learns that this node no longer coordinates the group.
            self._apply(self.state.answer_waiters())

    def resign(self) -> None:
        """Stop coordinating joins and syncs (broker shutdown), as Kafka's ``onResignation``:
        parked JoinGroup and SyncGroup requests, and any that come after, get NOT_COORDINATOR at
        once instead of holding the shutdown until the rest of their group shows up."""
        self._apply(self.state.resign())

    def spawn(self, fn: Callable[..., Awaitable[None]], *args: Any) -> None:
        if self._nursery is None:
            raise RuntimeError("the group coordinator is not running")
        self._nursery.start_soon(guarded, fn, *args)

    def enqueue_batch(self, partition: int, batch: bytes) -> Pending[int]:
        return self.store.enqueue_batch(partition, batch)

    # ------------------------------------------- for transaction/offsets.py (not ours to edit)
    @property
    def _groups(self) -> dict[str, Group]:
        return self.state.groups

    def _enqueue(self, partition: int, records: Sequence[tuple[bytes, bytes | None]]
                 ) -> Pending[int]:
        return self.store.enqueue(partition, records, timestamp_ms=self.now_ms())

    def _ensure_offsets_topic(self) -> None:
        self.store.ensure_topic()

    # ---------------------------------------------------------- carrying decisions out
    def _apply(self, decision: Decision[Any]) -> None:
        for event in decision.events:
            emit_recorded(event.name, event.fields)
        for key, delay_ms in decision.timers:
            if delay_ms is None:
                self.timers.cancel(key)
            else:
                self.timers.arm(key, delay_ms)
        for write in decision.writes:
            self._write(write)
        for ticket, value in decision.answers:
            waiter = self._waiters.pop(ticket, None)
            if waiter is not None:
                waiter.set(value)
        for group_id in decision.removed_groups:
            self.consumer_groups.remove_if_empty(group_id)

    def _outcome(self, decision: Decision[T]) -> Pending[T]:
        """Carry ``decision`` out; the answer now, or a Pending for its ticket."""
        if decision.ticket is None:
            assert decision.reply is not None
            pending = resolved(decision.reply)
        else:
            pending = self._waiters[decision.ticket] = Pending()
        self._apply(decision)
        return pending

    def _reply(self, decision: Decision[T]) -> T:
        self._apply(decision)
        assert decision.reply is not None
        return decision.reply

    def _write(self, write: Write) -> None:
        on_done = None if write.then is None else partial(self._written, write.then)
        self.store.enqueue(write.partition, write.records, timestamp_ms=self.now_ms(),
                           too_large=write.too_large, on_done=on_done)

    def _written(self, then: FollowUp, error: int) -> None:
        self._apply(self.state.written(then, error))

    def _timer_fired(self, key: TimerKey) -> None:
        self._apply(self.state.timer_fired(key))

    def _partition_count(self, topic: str) -> int | None:
        info = self.log_manager.topics.get(topic)
        return None if info is None else int(info.num_partitions)

    # ------------------------------------------------------------------- membership
    def join_group(self, *, group_id: str, member_id: str, group_instance_id: str | None,
                   client_id: str, client_host: str, session_timeout_ms: int,
                   rebalance_timeout_ms: int, protocol_type: str,
                   protocols: Sequence[tuple[str, bytes]], require_known_member_id: bool,
                   reason: str | None = None, skips_assignment: bool = False
                   ) -> Pending[JoinResult]:
        """Handle one JoinGroup. The result may be pending: the caller waits on it.
        ``skips_assignment``: the request is v9+ (KIP-814)."""
        error = self.joins.join_precheck(group_id, session_timeout_ms)
        if not error and self.consumer_groups.refuses_classic(group_id):
            error = E.inconsistent_group_protocol
        if error:
            return resolved(JoinResult(error, member_id))
        return self._outcome(self.joins.join_group(
            group_id=group_id, member_id=member_id, group_instance_id=group_instance_id,
            client_id=client_id, client_host=client_host, session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms, protocol_type=protocol_type,
            protocols=protocols, require_known_member_id=require_known_member_id,
            reason=reason, skips_assignment=skips_assignment))

    def sync_group(self, *, group_id: str, generation_id: int, member_id: str,
                   group_instance_id: str | None, protocol_type: str | None,
                   protocol_name: str | None, assignments: Mapping[str, bytes]
                   ) -> Pending[SyncResult]:
        """Handle one SyncGroup. The result may be pending: the caller waits on it."""
        return self._outcome(self.state.sync_group(
            group_id=group_id, generation_id=generation_id, member_id=member_id,
            group_instance_id=group_instance_id, protocol_type=protocol_type,
            protocol_name=protocol_name, assignments=assignments))

    def heartbeat(self, *, group_id: str, member_id: str, group_instance_id: str | None,
                  generation_id: int) -> int:
        """Handle one Heartbeat; returns the error code."""
        return self._reply(self.state.heartbeat(
            group_id=group_id, member_id=member_id, group_instance_id=group_instance_id,
            generation_id=generation_id))

    def leave_group(self, group_id: str, members: Sequence[tuple[str, str | None, str | None]]
                    ) -> tuple[int, list[int]]:
        """Handle LeaveGroup for ``(member_id, group_instance_id, reason)`` entries.

        Returns the top-level error and one error per entry.
        """
        return self._reply(self.state.leave_group(group_id, members))

    # ---------------------------------------------------------------------- offsets
    async def commit_offsets(self, *, group_id: str, generation_id: int, member_id: str,
                             group_instance_id: str | None,
                             offsets: Mapping[TopicPartition, OffsetCommitEntry]
                             ) -> dict[TopicPartition, int]:
        """Commit offsets (members, or simple consumers with generation -1); per-partition errors."""
        error = self.state.unavailable()
        if error:
            return dict.fromkeys(offsets, error)
        consumer_check = self.consumer_groups.check_commit(group_id, generation_id, member_id)
        if consumer_check is not None:
            if consumer_check:
                return dict.fromkeys(offsets, consumer_check)
            # A consumer group's member checked out: its offsets are stored as a simple
            # commit in the group's offsets-only entry.
            generation_id, member_id, group_instance_id = -1, "", None
        checked = None
        if len(offsets) >= CHECK_IN_SLICES_FROM:
            checked = await self._check_in_slices(offsets)
        decision = self.offset_rules.commit_offsets(
            group_id=group_id, generation_id=generation_id, member_id=member_id,
            group_instance_id=group_instance_id, offsets=offsets,
            partitions=self._partition_count, checked=checked)
        return await self._outcome(decision).wait()

    async def _check_in_slices(self, offsets: Mapping[TopicPartition, OffsetCommitEntry]
                               ) -> CheckedEntries:
        """A huge commit's per-partition checks, a slice at a time with the event loop free
        between slices (the group's own checks follow in one go: they do not grow)."""
        checked = CheckedEntries(self.state.wall_ms())
        entries = iter(offsets.items())
        steps = Steps()
        max_bytes = self.state.rules.offset_metadata_max_bytes
        while piece := list(islice(entries, CHECK_SLICE)):
            check_entries(piece, self._partition_count, max_bytes, checked)
            await steps.tick()
        return checked

    def fetch_offsets(self, group_id: str, partitions: Sequence[TopicPartition] | None
                      ) -> tuple[int, dict[TopicPartition, CommittedOffset | None]]:
        """Committed offsets of ``partitions`` (all the group has when None)."""
        return self.offset_rules.fetch_offsets(group_id, partitions)

    async def delete_offsets(self, group_id: str, partitions: Sequence[TopicPartition]
                             ) -> tuple[int, dict[TopicPartition, int]]:
        """Delete committed offsets of partitions the group does not consume (KIP-496)."""
        decision = self.offset_rules.delete_offsets(group_id, partitions, self._partition_count)
        return await self._outcome(decision).wait()

    def list_groups(self, states: Iterable[str] = ()) -> tuple[int, list[GroupListing]]:
        return self.offset_rules.list_groups(states)

    def describe_group(self, group_id: str) -> GroupSummary:
        return self.offset_rules.describe_group(group_id)

    async def delete_groups(self, group_ids: Sequence[str]) -> dict[str, int]:
        results: dict[str, int] = {}
        for group_id in group_ids:
            results[group_id] = await self._outcome(
                self.offset_rules.delete_group(group_id)).wait()
        return results

    def forget_topic(self, topic: str) -> int:
        """Kafka's ``onPartitionsDeleted``: a deleted topic's committed offsets leave every
        group; returns how many offsets were removed (see
        :meth:`~.classic_offsets.ClassicOffsets.forget_topic`)."""
        return self._reply(self.offset_rules.forget_topic(topic))

    async def _expire_offsets_periodically(self) -> None:
        await every(self.config.offsets_retention_check_interval_ms, self.expire_offsets)

    def expire_offsets(self) -> int:
        """Kafka's ``cleanupGroupMetadata``: expire old offsets, drop empty groups without any.

        Returns how many offsets expired.
        """
        retention = self.config.offsets_retention_minutes * 60 * 1000
        total = self._reply(self.offset_rules.expire_offsets(
            retention, self.consumer_groups.expired_offsets))
        # Consumer groups (KIP-848) without offsets have no classic entry: an empty one goes
        # too, or every group id a consumer ever joined with stays for good.
        for group_id in [g for g in self.consumer_groups.groups if g not in self.state.groups]:
            if self.consumer_groups.remove_if_empty(group_id):
                emit("group_deleted", group_id=group_id, reason="empty group")
        return total
