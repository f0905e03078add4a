"""The classic group coordinator: Kafka's ``GroupCoordinator`` on Trio.

All group state changes are synchronous (no ``await`` while a group is inconsistent), so no locks
are needed. What waits is expressed with Trio primitives:

* a JoinGroup or SyncGroup that must wait for the rest of the group returns a :class:`Pending`
  that the handler parks on (``ctx.park``), so no handler task is held;
* every deadline is a cancel scope in a task of the coordinator's own nursery: one per member
  (session timeout; a heartbeat moves the deadline), one per member id handed out with
  MEMBER_ID_REQUIRED, one per group for the join phase (rebalance timeout, or
  ``group.initial.rebalance.delay.ms`` for an empty group) and one for the sync phase;
* writes to ``__consumer_offsets`` go through one writer task, in the order the state changed.

This module holds membership (SyncGroup, Heartbeat, LeaveGroup, timers, rebalances); JoinGroup
is in :mod:`.join`, loading and writing ``__consumer_offsets`` in :mod:`.storage` and the offsets
and admin requests in :mod:`.offsets`, as mixins :class:`GroupCoordinator` inherits.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import trio
from kio.schema.errors import ErrorCode

from ..config import BrokerConfig
from ..observability.log import emit
from .consumer_coordinator import ConsumerGroups
from .group import (
    VALID_PREVIOUS_STATES,
    Group,
    GroupState,
    JoinResult,
    Member,
    Pending,
    SyncResult,
    resolved,
)
from .internal_topic import guarded
from .join import NEW_MEMBER_JOIN_TIMEOUT_MS, GroupJoins
from .offsets import GroupOffsets
from .records import partition_for
from .storage import OFFSETS_TOPIC_CONFIGS, GroupStorage, _Write
from .summaries import (
    GroupListing,
    GroupSummary,
    MemberSummary,
    OffsetCommitEntry,
    TopicPartition,
)

# The value classes moved to .summaries and OFFSETS_TOPIC_CONFIGS to .storage; they stay
# importable from here.
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

def _now() -> float:
    return trio.current_time()


class GroupCoordinator(GroupJoins, GroupStorage, GroupOffsets):
    """The broker's group coordinator (one node: it coordinates every group).

    ``load()`` reads ``__consumer_offsets`` (creating it when missing); ``run()`` owns the timers
    and the writer task and must be running while requests are served::

        coordinator = GroupCoordinator(config, log_manager)
        await nursery.start(coordinator.run)   # loads first if load() was not called
    """

    def __init__(self, config: BrokerConfig, log_manager: Any, *,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.log_manager = log_manager
        self._wall_clock = wall_clock
        self._groups: dict[str, Group] = {}
        self._loaded = False
        self._resigned = False
        self._nursery: trio.Nursery | None = None
        self._write_send, self._write_receive = trio.open_memory_channel[_Write](math.inf)
        self._num_partitions = config.offsets_topic_num_partitions
        #: The KIP-848 consumer-protocol groups (their offsets live in ``_groups``).
        self.consumer_groups = ConsumerGroups(self)

    # ------------------------------------------------------------------ life cycle
    @property
    def groups(self) -> Mapping[str, Group]:
        """Every group this coordinator knows (read-only view, for tests and tools)."""
        return self._groups

    @property
    def is_active(self) -> bool:
        """Loaded and running: requests can be served."""
        return self._loaded and self._nursery is not None

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self._num_partitions)

    def _now_ms(self) -> int:
        return int(self._wall_clock() * 1000)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Own the timers, the writer and offset expiry until cancelled."""
        if not self._loaded:
            self.load()
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._guarded, self._writer)
                nursery.start_soon(self._guarded, self._expire_offsets_periodically)
                for group in self._groups.values():
                    for member in group.members.values():
                        self._start_member_timer(group, member, member.session_timeout_ms)
                self.consumer_groups.start()
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._nursery = None
            self._answer_waiters()

    def resign(self) -> None:
        """Stop coordinating joins and syncs (broker shutdown), as Kafka's ``onResignation``:
        parked JoinGroup and SyncGroup requests, and any that come after, get NOT_COORDINATOR at
        once instead of holding the shutdown until the rest of their group shows up."""
        self._resigned = True
        self._answer_waiters()

    def _answer_waiters(self) -> None:
        # Whoever still waits learns that this node no longer coordinates the group.
        for group in self._groups.values():
            for member in group.members.values():
                if member.join_waiter is not None:
                    member.join_waiter.set(JoinResult(E.not_coordinator, member.member_id))
                if member.sync_waiter is not None:
                    member.sync_waiter.set(SyncResult(E.not_coordinator))

    def _spawn(self, fn: Callable[..., Awaitable[None]], *args: Any) -> None:
        self._tasks.start_soon(self._guarded, fn, *args)

    _guarded = staticmethod(guarded)

    @property
    def _tasks(self) -> trio.Nursery:
        if self._nursery is None:
            raise RuntimeError("the group coordinator is not running")
        return self._nursery

    # ------------------------------------------------------------------- states
    def _transition(self, group: Group, new_state: GroupState) -> None:
        old = group.state
        if old not in VALID_PREVIOUS_STATES[new_state]:
            raise RuntimeError(f"group {group.group_id}: illegal transition {old.value} -> "
                               f"{new_state.value}")
        group.state = new_state
        group.state_timestamp_ms = self._now_ms()
        emit("group_state_changed", group_id=group.group_id, old_state=old.value,
             new_state=new_state.value, generation=group.generation_id)

    # --------------------------------------------------------------------- timers
    def _start_member_timer(self, group: Group, member: Member, timeout_ms: int) -> None:
        member.timer = trio.CancelScope(deadline=_now() + timeout_ms / 1000)
        self._spawn(self._watch_member, group, member)

    def _touch(self, member: Member, timeout_ms: int | None = None) -> None:
        """A sign of life: move the member's session deadline (the timer task keeps running)."""
        if member.timer is not None:
            member.timer.deadline = _now() + (timeout_ms or member.session_timeout_ms) / 1000

    async def _watch_member(self, group: Group, member: Member) -> None:
        with member.lifetime:
            while True:
                scope = member.timer
                assert scope is not None
                with scope:
                    await trio.sleep_forever()
                if group.members.get(member.member_id) is not member:
                    return
                if scope.deadline > _now():
                    # A heartbeat moved the deadline just as it expired: keep watching.
                    member.timer = trio.CancelScope(deadline=scope.deadline)
                    continue
                if not member.is_new and (member.awaiting_join or member.awaiting_sync):
                    # Members waiting in a rebalance are bounded by the rebalance timeout.
                    member.timer = trio.CancelScope(
                        deadline=_now() + member.session_timeout_ms / 1000)
                    continue
                reason = "new_member_join_timeout" if member.is_new else "session_timeout"
                emit("member_expired", group_id=group.group_id, member_id=member.member_id,
                     group_instance_id=member.group_instance_id or "", reason=reason,
                     state=group.state.value)
                self._remove_member_and_update_group(group, member, f"{reason} of "
                                                     f"{member.member_id}")
                return

    def _stop_member(self, member: Member) -> None:
        member.lifetime.cancel()

    async def _watch_pending_member(self, group: Group, member_id: str,
                                    scope: trio.CancelScope) -> None:
        with scope:
            await trio.sleep_forever()
        if group.pending_members.get(member_id) is scope:
            del group.pending_members[member_id]
            emit("member_expired", group_id=group.group_id, member_id=member_id,
                 group_instance_id="", reason="pending_member_timeout", state=group.state.value)
            self._try_complete_join(group)

    def _start_join_timer(self, group: Group, delay_ms: int, *, initial: bool,
                          remaining_ms: int = 0) -> None:
        scope = trio.CancelScope(deadline=_now() + delay_ms / 1000)
        group.join_timer = scope
        group.join_is_initial = initial
        self._spawn(self._watch_join, group, scope, initial, remaining_ms)

    def _cancel_join_timer(self, group: Group) -> None:
        if group.join_timer is not None:
            group.join_timer.cancel()
            group.join_timer = None
        group.join_is_initial = False

    async def _watch_join(self, group: Group, scope: trio.CancelScope, initial: bool,
                          remaining_ms: int) -> None:
        with scope:
            await trio.sleep_forever()
        if group.join_timer is not scope or group.state is not GroupState.PREPARING_REBALANCE:
            return
        if initial and group.new_member_added and remaining_ms > 0:
            # Kafka's InitialDelayedJoin: members keep arriving, wait a little longer.
            group.new_member_added = False
            delay = min(self.config.group_initial_rebalance_delay_ms, remaining_ms)
            self._start_join_timer(group, delay, initial=True, remaining_ms=remaining_ms - delay)
            return
        self._complete_join(group)

    def _start_sync_timer(self, group: Group) -> None:
        if group.sync_timer is not None:
            group.sync_timer.cancel()
        scope = trio.CancelScope(deadline=_now() + group.rebalance_timeout_ms / 1000)
        group.sync_timer = scope
        self._spawn(self._watch_sync, group, scope, group.generation_id)

    async def _watch_sync(self, group: Group, scope: trio.CancelScope, generation: int) -> None:
        with scope:
            await trio.sleep_forever()
        if group.sync_timer is not scope or group.generation_id != generation:
            return
        group.sync_timer = None
        if group.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        missing = [group.members[m] for m in sorted(group.pending_sync) if m in group.members]
        if not missing:
            return
        for member in missing:
            emit("member_expired", group_id=group.group_id, member_id=member.member_id,
                 group_instance_id=member.group_instance_id or "", reason="sync_timeout",
                 state=group.state.value)
            self._drop_member(group, member)
        self._prepare_rebalance(
            group, "members did not sync within the rebalance timeout: "
            + ",".join(m.member_id for m in missing))

    # ------------------------------------------------------------------- rebalances
    def _maybe_prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        previous = group.state
        if previous is GroupState.COMPLETING_REBALANCE:
            self._reset_and_propagate_assignment_error(group, E.rebalance_in_progress)
        if group.sync_timer is not None:
            group.sync_timer.cancel()
            group.sync_timer = None
        group.pending_sync.clear()
        self._transition(group, GroupState.PREPARING_REBALANCE)
        group.rebalance_started_at = _now()
        emit("rebalance_started", group_id=group.group_id, reason=reason,
             generation=group.generation_id, members=len(group.members),
             previous_state=previous.value)
        self._cancel_join_timer(group)
        if previous is GroupState.EMPTY:
            delay = self.config.group_initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms - delay, 0)
            group.new_member_added = False
            self._start_join_timer(group, delay, initial=True, remaining_ms=remaining)
        else:
            self._start_join_timer(group, group.rebalance_timeout_ms, initial=False)

    def _try_complete_join(self, group: Group) -> None:
        """Complete the join phase early once everyone has rejoined (not during the initial delay)."""
        if group.state is GroupState.PREPARING_REBALANCE and not group.join_is_initial \
                and group.all_members_joined():
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        """Kafka's ``onCompleteJoin``: drop who did not rejoin, start the next generation."""
        self._cancel_join_timer(group)
        for member in group.not_yet_rejoined():
            if not member.is_static:
                emit("member_expired", group_id=group.group_id, member_id=member.member_id,
                     group_instance_id="", reason="rebalance_timeout", state=group.state.value)
                self._drop_member(group, member)
        if group.state is GroupState.DEAD:
            return
        if group.members and not self._elect_joined_leader(group):
            # Only static members that have not rejoined remain: wait for them (or for their
            # session timeouts) another rebalance timeout.
            self._start_join_timer(group, group.rebalance_timeout_ms, initial=False)
            return
        group.generation_id += 1
        if group.members:
            group.protocol_name = group.select_protocol()
            group.subscribed_topics = group.compute_subscribed_topics()
            self._transition(group, GroupState.COMPLETING_REBALANCE)
        else:
            group.protocol_name = None
            group.subscribed_topics = None
            self._transition(group, GroupState.EMPTY)
        if group.state is GroupState.EMPTY:
            self._store_group(group, {})
            self._emit_rebalance_completed(group)
            return
        protocol = group.protocol_name or ""
        leader_view = tuple((m.member_id, m.group_instance_id, m.metadata_for(protocol))
                            for m in group.members.values())
        group.pending_sync = set(group.members)
        for member in group.members.values():
            if member.join_waiter is not None and not member.join_waiter.done:
                member.join_waiter.set(JoinResult(
                    E.none, member.member_id, group.generation_id, group.protocol_type,
                    protocol, group.leader_id or "",
                    leader_view if group.is_leader(member.member_id) else ()))
            member.is_new = False
            self._touch(member)
        self._start_sync_timer(group)

    def _elect_joined_leader(self, group: Group) -> bool:
        leader = group.members.get(group.leader_id or "")
        if leader is not None and leader.awaiting_join:
            return True
        for member in group.members.values():
            if member.awaiting_join:
                group.leader_id = member.member_id
                return True
        return False

    def _emit_rebalance_completed(self, group: Group) -> None:
        emit("rebalance_completed", group_id=group.group_id, generation=group.generation_id,
             protocol=group.protocol_name or "", leader=group.leader_id or "",
             members=len(group.members), state=group.state.value,
             duration_ms=round((_now() - group.rebalance_started_at) * 1000, 3))

    def _reset_and_propagate_assignment_error(self, group: Group, error: int) -> None:
        for member in group.members.values():
            member.assignment = b""
            if member.sync_waiter is not None:
                member.sync_waiter.set(SyncResult(error))
                member.sync_waiter = None

    def _drop_member(self, group: Group, member: Member) -> None:
        """Remove a member without triggering anything (callers decide what follows)."""
        self._stop_member(member)
        if member.join_waiter is not None:
            member.join_waiter.set(JoinResult(E.unknown_member_id, member.member_id))
        if member.sync_waiter is not None:
            member.sync_waiter.set(SyncResult(E.unknown_member_id))
        group.remove_member(member.member_id)

    def _remove_member_and_update_group(self, group: Group, member: Member, reason: str) -> None:
        self._drop_member(group, member)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, reason)
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group)

    # ------------------------------------------------------------------- SyncGroup
    def sync_group(self, *, group_id: str, generation_id: int, member_id: str,
                   group_instance_id: str | None, protocol_type: str | None,
                   protocol_name: str | None, assignments: Mapping[str, bytes]
                   ) -> Pending[SyncResult]:
        """Handle one SyncGroup. The result may be pending: the caller waits on it."""
        if not self._loaded:
            return resolved(SyncResult(E.coordinator_load_in_progress))
        if self._nursery is None:
            return resolved(SyncResult(E.coordinator_not_available))
        if self._resigned:
            return resolved(SyncResult(E.not_coordinator))
        if not group_id:
            return resolved(SyncResult(E.invalid_group_id))
        group = self._groups.get(group_id)
        if group is None:
            return resolved(SyncResult(E.unknown_member_id))
        if group.state is GroupState.DEAD:
            return resolved(SyncResult(E.coordinator_not_available))
        error = self._validate_member(group, member_id, group_instance_id)
        if error:
            return resolved(SyncResult(error))
        if generation_id != group.generation_id:
            return resolved(SyncResult(E.illegal_generation))
        if (protocol_type is not None and protocol_type != group.protocol_type) or \
                (protocol_name is not None and protocol_name != group.protocol_name):
            return resolved(SyncResult(E.inconsistent_group_protocol))
        member = group.members[member_id]
        if group.state is GroupState.EMPTY:
            return resolved(SyncResult(E.unknown_member_id))
        if group.state is GroupState.PREPARING_REBALANCE:
            return resolved(SyncResult(E.rebalance_in_progress))
        leader = group.is_leader(member_id)
        emit("group_sync", group_id=group_id, member_id=member_id, generation=generation_id,
             is_leader=leader, state=group.state.value)
        group.pending_sync.discard(member_id)
        self._touch(member)
        if group.state is GroupState.STABLE:
            return resolved(SyncResult(E.none, member.assignment, group.protocol_type,
                                    group.protocol_name))
        # CompletingRebalance: wait for the leader's assignment.
        if member.sync_waiter is not None:
            member.sync_waiter.set(SyncResult(E.rebalance_in_progress))
        waiter: Pending[SyncResult] = Pending()
        member.sync_waiter = waiter
        if leader:
            assignment = {m: bytes(assignments.get(m, b"")) for m in group.members}
            done = self._store_group(group, assignment)
            self._spawn(self._finish_leader_sync, group, group.generation_id, assignment,
                        done)
        return waiter

    async def _finish_leader_sync(self, group: Group, generation: int,
                                  assignment: Mapping[str, bytes], done: Pending[int]) -> None:
        error = await done.wait()
        # Another member may have joined meanwhile: only this generation's sync may finish.
        if group.state is not GroupState.COMPLETING_REBALANCE or \
                group.generation_id != generation:
            return
        if error:
            self._reset_and_propagate_assignment_error(group, error)
            self._maybe_prepare_rebalance(group, f"storing the assignment failed ({error})")
            return
        for member in group.members.values():
            member.assignment = assignment.get(member.member_id, b"")
            if member.sync_waiter is not None:
                member.sync_waiter.set(SyncResult(E.none, member.assignment,
                                                  group.protocol_type, group.protocol_name))
                member.sync_waiter = None
        self._transition(group, GroupState.STABLE)
        self._emit_rebalance_completed(group)

    # ------------------------------------------------------------------- Heartbeat
    def heartbeat(self, *, group_id: str, member_id: str, group_instance_id: str | None,
                  generation_id: int) -> int:
        """Handle one Heartbeat; returns the error code."""
        if not self._loaded:
            return E.coordinator_load_in_progress
        if not group_id:
            return E.invalid_group_id
        group = self._groups.get(group_id)
        if group is None:
            return E.unknown_member_id
        if group.state is GroupState.DEAD:
            return E.coordinator_not_available
        error = self._validate_member(group, member_id, group_instance_id)
        if error:
            return error
        if generation_id != group.generation_id:
            return E.illegal_generation
        if group.state is GroupState.EMPTY:
            return E.unknown_member_id
        self._touch(group.members[member_id])
        if group.state is GroupState.PREPARING_REBALANCE:
            return E.rebalance_in_progress
        return E.none

    # ------------------------------------------------------------------ LeaveGroup
    def leave_group(self, group_id: str, members: Sequence[tuple[str, str | None, str | None]]
                    ) -> tuple[int, list[int]]:
        """Handle LeaveGroup for ``(member_id, group_instance_id, reason)`` entries.

        Returns the top-level error and one error per entry.
        """
        if not self._loaded:
            return E.coordinator_load_in_progress, [E.coordinator_load_in_progress] * len(members)
        if not group_id:
            # Kafka's isValidGroupId: only the offset and admin APIs accept the empty group id.
            return E.invalid_group_id, [E.invalid_group_id] * len(members)
        group = self._groups.get(group_id)
        if group is None:
            return E.none, [E.unknown_member_id] * len(members)
        if group.state is GroupState.DEAD:
            return E.coordinator_not_available, [E.coordinator_not_available] * len(members)
        errors = []
        for member_id, instance_id, reason in members:
            errors.append(self._leave_one(group, member_id, instance_id, reason or ""))
        return E.none, errors

    def _leave_one(self, group: Group, member_id: str, instance_id: str | None,
                   reason: str) -> int:
        if not member_id:
            # Administrative removal by group.instance.id (KIP-345).
            current = group.static_member_id(instance_id)
            if current is None:
                return E.unknown_member_id
            member_id = current
        elif member_id in group.pending_members:
            group.pending_members.pop(member_id).cancel()
            emit("member_left", group_id=group.group_id, member_id=member_id,
                 group_instance_id=instance_id or "", reason=reason or "pending member left")
            self._try_complete_join(group)
            return E.none
        else:
            error = self._validate_member(group, member_id, instance_id)
            if error:
                return error
        member = group.members[member_id]
        emit("member_left", group_id=group.group_id, member_id=member_id,
             group_instance_id=member.group_instance_id or "", reason=reason)
        self._remove_member_and_update_group(
            group, member, f"member {member_id} left" + (f" ({reason})" if reason else ""))
        return E.none
