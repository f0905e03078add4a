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

This module holds membership (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, timers, rebalances);
loading and writing ``__consumer_offsets`` are in :mod:`.storage` and the offsets and admin
requests in :mod:`.offsets`, as mixins :class:`GroupCoordinator` inherits.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import attrs
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
)
from .internal_topic import guarded
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

#: How long a new member may wait in its first join before it is dropped (Kafka's
#: ``GroupCoordinator.NewMemberJoinTimeoutMs``).
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000


def _now() -> float:
    return trio.current_time()


class GroupCoordinator(GroupStorage, GroupOffsets):
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

    # ------------------------------------------------------------------- JoinGroup
    def join_group(self, *, group_id: str, member_id: str, group_instance_id: str | None,
                   client_id: str, client_host: str, session_timeout_ms: int,
                   rebalance_timeout_ms: int, protocol_type: str,
                   protocols: Sequence[tuple[str, bytes]], require_known_member_id: bool,
                   reason: str | None = None) -> Pending[JoinResult]:
        """Handle one JoinGroup. The result may be pending: the caller waits on it."""
        protocol_list = [(name, bytes(metadata)) for name, metadata in protocols]

        def fail(error: int, mid: str = member_id) -> Pending[JoinResult]:
            return _done(JoinResult(error, mid))

        if not self._loaded:
            return fail(E.coordinator_load_in_progress)
        if self._nursery is None:
            return fail(E.coordinator_not_available)
        if self._resigned:
            return fail(E.not_coordinator)
        if not group_id:
            return fail(E.invalid_group_id)
        if not (self.config.group_min_session_timeout_ms <= session_timeout_ms
                <= self.config.group_max_session_timeout_ms):
            return fail(E.invalid_session_timeout)
        if self.consumer_groups.refuses_classic(group_id):
            return fail(E.inconsistent_group_protocol)
        group = self._groups.get(group_id)
        if group is None:
            if member_id:
                return fail(E.unknown_member_id)
            group = self._groups[group_id] = Group(group_id, state_timestamp_ms=self._now_ms())
        if group.state is GroupState.DEAD:
            return fail(E.coordinator_not_available)
        known = member_id in group.members or group.static_member_id(group_instance_id) is not None
        if not known and len(group.members) >= self.config.group_max_size:
            return fail(E.group_max_size_reached)
        if not group.supports_protocols(protocol_type, protocol_list):
            return fail(E.inconsistent_group_protocol)
        join = _JoinArgs(member_id, group_instance_id, client_id, client_host,
                         session_timeout_ms, rebalance_timeout_ms, protocol_type, protocol_list,
                         reason or "")
        if not member_id:
            result = self._join_new_member(group, join, require_known_member_id)
        else:
            result = self._join_current_member(group, join)
        self._try_complete_join(group)
        return result

    def _join_new_member(self, group: Group, join: _JoinArgs, require_known_member_id: bool
                         ) -> Pending[JoinResult]:
        new_id = f"{join.group_instance_id or join.client_id}-{uuid.uuid4()}"
        if join.group_instance_id is not None:
            old_id = group.static_member_id(join.group_instance_id)
            if old_id is not None:
                return self._update_static_member(group, old_id, new_id, join)
            return self._add_member_and_rebalance(group, new_id, join)
        if require_known_member_id:
            # KIP-394: hand out the id first; the member joins for real with it.
            scope = trio.CancelScope(deadline=_now() + join.session_timeout_ms / 1000)
            group.pending_members[new_id] = scope
            self._spawn(self._watch_pending_member, group, new_id, scope)
            return _done(JoinResult(E.member_id_required, new_id))
        return self._add_member_and_rebalance(group, new_id, join)

    def _join_current_member(self, group: Group, join: _JoinArgs) -> Pending[JoinResult]:
        member_id = join.member_id
        if member_id in group.pending_members:
            group.pending_members.pop(member_id).cancel()
            return self._add_member_and_rebalance(group, member_id, join)
        error = self._validate_member(group, member_id, join.group_instance_id)
        if error:
            return _done(JoinResult(error, member_id))
        member = group.members[member_id]
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            return self._update_member_and_rebalance(group, member, join)
        if state is GroupState.COMPLETING_REBALANCE:
            if member.matches(join.protocols):
                # A duplicate join (the response was lost): answer with the current generation.
                return _done(self._current_join_result(group, member))
            return self._update_member_and_rebalance(group, member, join)
        if state is GroupState.STABLE:
            if group.is_leader(member_id) or not member.matches(join.protocols):
                return self._update_member_and_rebalance(group, member, join)
            return _done(self._current_join_result(group, member))
        return _done(JoinResult(E.unknown_member_id, member_id))

    def _current_join_result(self, group: Group, member: Member) -> JoinResult:
        protocol = group.protocol_name or ""
        members: tuple[tuple[str, str | None, bytes], ...] = ()
        if group.is_leader(member.member_id):
            members = tuple((m.member_id, m.group_instance_id, m.metadata_for(protocol))
                            for m in group.members.values())
        return JoinResult(E.none, member.member_id, group.generation_id, group.protocol_type,
                          protocol, group.leader_id or "", members)

    def _validate_member(self, group: Group, member_id: str, instance_id: str | None) -> int:
        """Kafka's ``validateCurrentMember``: fenced static instance, then unknown member."""
        if instance_id is not None:
            current = group.static_member_id(instance_id)
            if current is not None and current != member_id:
                return E.fenced_instance_id
        if member_id not in group.members:
            return E.unknown_member_id
        return E.none

    def _add_member_and_rebalance(self, group: Group, member_id: str, join: _JoinArgs
                                  ) -> Pending[JoinResult]:
        member = Member(
            member_id=member_id, group_instance_id=join.group_instance_id,
            client_id=join.client_id, client_host=join.client_host,
            rebalance_timeout_ms=join.rebalance_timeout_ms,
            session_timeout_ms=join.session_timeout_ms, protocol_type=join.protocol_type,
            protocols=join.protocols, is_new=True)
        waiter: Pending[JoinResult] = Pending()
        member.join_waiter = waiter
        group.add_member(member)
        if group.state is GroupState.PREPARING_REBALANCE and group.generation_id == 0:
            group.new_member_added = True
        self._start_member_timer(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._emit_join(group, member, join.reason)
        self._maybe_prepare_rebalance(group, f"adding new member {member_id}"
                                      + (f" ({join.reason})" if join.reason else ""))
        return waiter

    def _update_member_and_rebalance(self, group: Group, member: Member, join: _JoinArgs
                                     ) -> Pending[JoinResult]:
        self._update_member(member, join)
        waiter = member.join_waiter
        assert waiter is not None
        self._emit_join(group, member, join.reason)
        self._maybe_prepare_rebalance(group, f"updating metadata of member {member.member_id}"
                                      + (f" ({join.reason})" if join.reason else ""))
        return waiter

    def _update_member(self, member: Member, join: _JoinArgs) -> None:
        member.protocols = join.protocols
        member.rebalance_timeout_ms = join.rebalance_timeout_ms
        member.session_timeout_ms = join.session_timeout_ms
        member.client_id = join.client_id
        member.client_host = join.client_host
        if member.join_waiter is not None and not member.join_waiter.done:
            # The client gave up on its previous join and sent another one.
            member.join_waiter.set(JoinResult(E.rebalance_in_progress, member.member_id))
        member.join_waiter = Pending()

    def _update_static_member(self, group: Group, old_id: str, new_id: str, join: _JoinArgs
                              ) -> Pending[JoinResult]:
        """Kafka's ``updateStaticMemberAndRebalance``: a restarted static member takes over."""
        instance_id = join.group_instance_id
        assert instance_id is not None
        member = group.members[old_id]
        current_leader = group.leader_id or ""
        # The old incarnation is fenced: its waiting requests learn it.
        if member.join_waiter is not None:
            member.join_waiter.set(JoinResult(E.fenced_instance_id, old_id))
        if member.sync_waiter is not None:
            member.sync_waiter.set(SyncResult(E.fenced_instance_id))
            member.sync_waiter = None
        group.replace_static_member(instance_id, old_id, new_id)
        old_protocols = member.protocols
        self._update_member(member, join)
        self._touch(member)
        waiter = member.join_waiter
        assert waiter is not None
        state = group.state
        rebalance = True
        if state is GroupState.STABLE:
            if group.protocol_name == group.select_protocol():
                rebalance = False
                # Keep the group as it is: persist the new member id and answer with the old
                # leader id, so that no member (even if it was the leader) reassigns.
                member.join_waiter = None
                assignment = {m.member_id: m.assignment for m in group.members.values()}
                done = self._store_group(group, assignment)
                self._spawn(self._answer_static_rejoin, group, member, waiter, done,
                            current_leader, old_id, old_protocols)
            else:
                self._maybe_prepare_rebalance(
                    group, f"static member {instance_id} rejoined with other protocols")
        elif state is GroupState.COMPLETING_REBALANCE:
            self._prepare_rebalance(group, f"static member {instance_id} rejoined during sync")
        emit("static_member_replaced", group_id=group.group_id, group_instance_id=instance_id,
             old_member_id=old_id, member_id=new_id, rebalance=rebalance)
        return waiter

    async def _answer_static_rejoin(self, group: Group, member: Member,
                                    waiter: Pending[JoinResult], done: Pending[int],
                                    leader: str, old_id: str,
                                    old_protocols: list[tuple[str, bytes]]) -> None:
        error = await done.wait()
        if error:
            # Kafka reverts the replacement when the write fails.
            if group.members.get(member.member_id) is member and member.group_instance_id:
                group.replace_static_member(member.group_instance_id, member.member_id, old_id)
                member.protocols = old_protocols
            waiter.set(JoinResult(error, member.member_id))
            return
        waiter.set(JoinResult(E.none, member.member_id, group.generation_id, group.protocol_type,
                              group.protocol_name, leader, ()))

    def _emit_join(self, group: Group, member: Member, reason: str) -> None:
        emit("group_join", group_id=group.group_id, member_id=member.member_id,
             group_instance_id=member.group_instance_id or "", client_id=member.client_id,
             client_host=member.client_host, protocol_type=member.protocol_type,
             protocols=",".join(member.protocol_names()),
             session_timeout_ms=member.session_timeout_ms,
             rebalance_timeout_ms=member.rebalance_timeout_ms, generation=group.generation_id,
             state=group.state.value, reason=reason)

    # ------------------------------------------------------------------- SyncGroup
    def sync_group(self, *, group_id: str, generation_id: int, member_id: str,
                   group_instance_id: str | None, protocol_type: str | None,
                   protocol_name: str | None, assignments: Mapping[str, bytes]
                   ) -> Pending[SyncResult]:
        """Handle one SyncGroup. The result may be pending: the caller waits on it."""
        if not self._loaded:
            return _done(SyncResult(E.coordinator_load_in_progress))
        if self._nursery is None:
            return _done(SyncResult(E.coordinator_not_available))
        if self._resigned:
            return _done(SyncResult(E.not_coordinator))
        group = self._groups.get(group_id)
        if group is None:
            return _done(SyncResult(E.unknown_member_id))
        if group.state is GroupState.DEAD:
            return _done(SyncResult(E.coordinator_not_available))
        error = self._validate_member(group, member_id, group_instance_id)
        if error:
            return _done(SyncResult(error))
        if generation_id != group.generation_id:
            return _done(SyncResult(E.illegal_generation))
        if (protocol_type is not None and protocol_type != group.protocol_type) or \
                (protocol_name is not None and protocol_name != group.protocol_name):
            return _done(SyncResult(E.inconsistent_group_protocol))
        member = group.members[member_id]
        if group.state is GroupState.EMPTY:
            return _done(SyncResult(E.unknown_member_id))
        if group.state is GroupState.PREPARING_REBALANCE:
            return _done(SyncResult(E.rebalance_in_progress))
        leader = group.is_leader(member_id)
        emit("group_sync", group_id=group_id, member_id=member_id, generation=generation_id,
             is_leader=leader, state=group.state.value)
        group.pending_sync.discard(member_id)
        self._touch(member)
        if group.state is GroupState.STABLE:
            return _done(SyncResult(E.none, member.assignment, group.protocol_type,
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


@attrs.frozen
class _JoinArgs:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    reason: str


def _done(value: Any) -> Any:
    pending: Pending[Any] = Pending()
    pending.set(value)
    return pending
