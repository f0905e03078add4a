"""The classic group protocol's rules, sans-IO: the rebalance transitions, what happens when a
timer expires, SyncGroup, Heartbeat and LeaveGroup (Kafka's ``GroupCoordinator`` and
``GroupMetadata`` state machine), and the :class:`Decision` every rule answers with.

No Trio here. :class:`ClassicGroups` changes :class:`~.group.Group` and :class:`~.group.Member`
values synchronously and answers each call with a :class:`Decision`: the answer now, or the
*ticket* of an answer that comes later; answers to tickets handed out before; timers to arm or
cancel by key; records to write to ``__consumer_offsets`` (each with what to do once written);
log events to emit. The shell (:class:`~trio_broker.coordinator.coordinator.GroupCoordinator`)
carries a decision out and never decides anything itself. JoinGroup's rules (:mod:`.classic_join`)
and the offset and admin rules (:mod:`.classic_offsets`) build on these.

Timer keys: ``("member", group, member)`` the session timeout (a heartbeat moves it),
``("pending", group, member)`` a member id handed out with MEMBER_ID_REQUIRED,
``("join", group)`` the join phase (rebalance timeout, or the initial delay of an empty group),
``("sync", group)`` the sync phase (rebalance timeout for SyncGroup).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, NamedTuple, Protocol, TypeVar, runtime_checkable

import attrs
from kio.schema.errors import ErrorCode

from .group import (
    VALID_PREVIOUS_STATES,
    Group,
    GroupState,
    JoinResult,
    Member,
    SyncResult,
)
from .records import (
    GroupKey,
    GroupValue,
    MemberValue,
    encode_group_key,
    encode_group_value,
    partition_for,
)

E = ErrorCode
R = TypeVar("R")

TimerKey = tuple[str, ...]
Records = tuple[tuple[bytes, bytes | None], ...]


@runtime_checkable
class EncodedLater(Protocol):
    """Records given as values and encoded by the writer, in a worker thread when there are
    thousands (an OffsetCommit of 100,000 partitions must not hold the event loop)."""

    def __len__(self) -> int: ...

    def encode(self) -> Records: ...


def member_key(group_id: str, member_id: str) -> TimerKey:
    return ("member", group_id, member_id)


def pending_key(group_id: str, member_id: str) -> TimerKey:
    return ("pending", group_id, member_id)


def join_key(group_id: str) -> TimerKey:
    return ("join", group_id)


def sync_key(group_id: str) -> TimerKey:
    return ("sync", group_id)


@attrs.frozen
class Rules:
    """The settings the classic rules depend on (Kafka's config names in the comments)."""

    min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    max_size: int = 2**31 - 1  # group.max.size
    initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    num_partitions: int = 50  # offsets.topic.num.partitions

    @classmethod
    def from_config(cls, config: Any) -> Rules:
        return cls(config.group_min_session_timeout_ms, config.group_max_session_timeout_ms,
                   config.group_max_size, config.group_initial_rebalance_delay_ms,
                   config.offset_metadata_max_bytes, config.offsets_topic_num_partitions)


@attrs.frozen
class Event:
    """A structured log event to emit (a name of the log schema and its fields)."""

    name: str
    fields: Mapping[str, object]


@attrs.frozen
class Write:
    """Records for one ``__consumer_offsets`` partition, and what follows once they are written
    (``then`` goes back to :meth:`ClassicGroups.written` with the write's error code)."""

    partition: int
    records: Records | EncodedLater
    #: The answer when the batch is over ``message.max.bytes``: Kafka's for offsets
    #: (``storeOffsets``), unless the write stores a group's metadata (``storeGroup``).
    too_large: int = E.invalid_commit_offset_size
    then: FollowUp | None = None


class Decision(NamedTuple, Generic[R]):
    """What the shell does after one call: answer ``reply`` now, or keep the request waiting on
    ``ticket``; deliver ``answers`` to waiting tickets; arm (delay in ms) or cancel (None) the
    ``timers``; queue the ``writes`` in order; emit the ``events``.

    (A named tuple rather than an attrs class: one is built per request, a heartbeat's too.)"""

    reply: R | None = None
    ticket: int | None = None
    answers: tuple[tuple[int, object], ...] = ()
    timers: tuple[tuple[TimerKey, int | None], ...] = ()
    writes: tuple[Write, ...] = ()
    events: tuple[Event, ...] = ()
    #: Classic groups forgotten (a consumer-protocol group of the id may go with them).
    removed_groups: tuple[str, ...] = ()


class Effects:
    """Collects the effects of one call while the rules run; :meth:`decide` freezes them."""

    __slots__ = ("answers", "events", "removed_groups", "timers", "writes")

    def __init__(self) -> None:
        self.answers: list[tuple[int, object]] = []
        self.timers: dict[TimerKey, int | None] = {}
        self.writes: list[Write] = []
        self.events: list[Event] = []
        self.removed_groups: list[str] = []

    def emit(self, name: str, **fields: object) -> None:
        self.events.append(Event(name, fields))

    def answer(self, ticket: int, value: object) -> None:
        self.answers.append((ticket, value))

    # The last word on a key is the one that counts (the keys are independent timers, so
    # their order in the decision does not matter).
    def arm(self, key: TimerKey, delay_ms: int) -> None:
        self.timers[key] = delay_ms

    def cancel(self, key: TimerKey) -> None:
        self.timers[key] = None

    def write(self, write: Write) -> None:
        self.writes.append(write)

    def decide(self, reply: R | None = None, ticket: int | None = None) -> Decision[R]:
        return Decision(reply, ticket, tuple(self.answers) if self.answers else (),
                        tuple(self.timers.items()) if self.timers else (),
                        tuple(self.writes) if self.writes else (),
                        tuple(self.events) if self.events else (),
                        tuple(self.removed_groups) if self.removed_groups else ())


@attrs.frozen(eq=False)
class LeaderSynced:
    """After the leader's assignment is stored: complete the sync of that generation."""

    group: Group
    generation: int
    assignment: Mapping[str, bytes]


@attrs.frozen
class AnswerError:
    """After a write: answer ``ticket`` with the write's error code."""

    ticket: int


class Finish(Protocol):
    """A follow-up that carries its own rule (those of :mod:`.classic_join` and
    :mod:`.classic_offsets`)."""

    def finish(self, fx: Effects, error: int) -> None: ...


FollowUp = AnswerError | LeaderSynced | Finish


def group_record(group: Group, assignment: Mapping[str, bytes] | None = None
                 ) -> tuple[bytes, bytes | None]:
    """The group's metadata record (Kafka's ``GroupMetadataManager.storeGroup``)."""
    members = []
    for member in group.members.values():
        try:
            subscription = member.metadata_for(group.protocol_name or "")
        except KeyError:
            subscription = b""
        members.append(MemberValue(
            member.member_id, member.group_instance_id, member.client_id, member.client_host,
            member.rebalance_timeout_ms, member.session_timeout_ms, subscription,
            (assignment or {}).get(member.member_id, member.assignment)))
    value = GroupValue(group.protocol_type or "", group.generation_id, group.protocol_name,
                       group.leader_id, group.state_timestamp_ms, tuple(members))
    return encode_group_key(GroupKey(group.group_id)), encode_group_value(value)


def restore_group(group_id: str, value: GroupValue | None, offsets: Mapping[Any, Any],
                  now_ms: int) -> Group:
    """A group as ``__consumer_offsets`` last stored it: Stable with its members, or Empty."""
    group = Group(group_id, state_timestamp_ms=now_ms)
    group.offsets = dict(offsets)
    if value is not None:
        group.generation_id = value.generation_id
        group.protocol_name = value.protocol_name
        if value.state_timestamp_ms >= 0:
            group.state_timestamp_ms = value.state_timestamp_ms
        for m in value.members:
            group.add_member(Member(
                member_id=m.member_id, group_instance_id=m.group_instance_id,
                client_id=m.client_id, client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                session_timeout_ms=m.session_timeout_ms, protocol_type=value.protocol_type,
                protocols=[(value.protocol_name or "", m.subscription)],
                assignment=m.assignment))
        group.protocol_type = value.protocol_type or None
        group.leader_id = value.leader_id if value.leader_id in group.members else \
            next(iter(group.members), None)
        if group.members:
            group.state = GroupState.STABLE
            group.subscribed_topics = group.compute_subscribed_topics()
    return group


def validate_member(group: Group, member_id: str, instance_id: str | None) -> int:
    """Kafka's ``validateCurrentMember``: fenced static instance, then unknown member."""
    if instance_id is not None:
        current = group.static_member_id(instance_id)
        if current is not None and current != member_id:
            return E.fenced_instance_id
    if member_id not in group.members:
        return E.unknown_member_id
    return E.none


def _new_uuid() -> str:
    return str(uuid.uuid4())


class ClassicGroups:
    """Every classic group of one coordinator, the rebalance state machine and the rules of
    SyncGroup, Heartbeat and LeaveGroup (JoinGroup's are in :mod:`.classic_join`).

    ``wall_ms`` is the wall clock (ms; stored state timestamps), ``monotonic`` a clock in
    seconds (rebalance durations), ``new_uuid`` the source of new member ids. ``loaded``,
    ``running`` and ``resigned`` are set by the shell and decide which requests are served.
    """

    def __init__(self, rules: Rules, *, wall_ms: Callable[[], int] | None = None,
                 monotonic: Callable[[], float] = time.monotonic,
                 new_uuid: Callable[[], str] = _new_uuid) -> None:
        self.rules = rules
        self.groups: dict[str, Group] = {}
        self.num_partitions = rules.num_partitions
        self.loaded = False
        self.running = False
        self.resigned = False
        self.wall_ms = wall_ms or (lambda: int(time.time() * 1000))
        self._monotonic = monotonic
        self.new_uuid = new_uuid
        self._last_ticket = 0

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def unavailable(self) -> int:
        """The error of a request that needs the coordinator loaded and running (0: none)."""
        if not self.loaded:
            return E.coordinator_load_in_progress
        if not self.running:
            return E.coordinator_not_available
        return E.none

    def new_ticket(self) -> int:
        """A ticket for an answer that comes with a later decision."""
        self._last_ticket += 1
        return self._last_ticket

    # ------------------------------------------------------------------- life cycle
    def restore(self, metadata: Mapping[str, GroupValue | None],
                offsets: Mapping[str, Mapping[Any, Any]]) -> int:
        """Rebuild the groups ``__consumer_offsets`` holds; returns how many there are."""
        count = 0
        for group_id in sorted(set(offsets) | set(metadata)):
            group_offsets = offsets.get(group_id, {})
            value = metadata.get(group_id)
            if value is None and not group_offsets:
                continue
            self.groups[group_id] = restore_group(group_id, value, group_offsets, self.wall_ms())
            count += 1
        return count

    def start_timers(self) -> Decision[None]:
        """The shell starts running: a session timer for every member loaded."""
        fx = Effects()
        for group in self.groups.values():
            for member in group.members.values():
                fx.arm(member_key(group.group_id, member.member_id), member.session_timeout_ms)
        return fx.decide()

    def resign(self) -> Decision[None]:
        """Kafka's ``onResignation``: whoever waits learns this node no longer coordinates."""
        self.resigned = True
        return self.answer_waiters()

    def answer_waiters(self) -> Decision[None]:
        fx = Effects()
        for group in self.groups.values():
            for member in group.members.values():
                self.answer_join(fx, member, JoinResult(E.not_coordinator, member.member_id))
                self.answer_sync(fx, member, SyncResult(E.not_coordinator))
        return fx.decide()

    # ------------------------------------------------------------------- building blocks
    def transition(self, fx: Effects, group: Group, new_state: GroupState) -> None:
        old = group.state
        if old not in VALID_PREVIOUS_STATES[new_state]:
            raise RuntimeError(f"group {group.group_id}: illegal transition {old.value} -> "
                               f"{new_state.value}")
        group.state = new_state
        group.state_timestamp_ms = self.wall_ms()
        fx.emit("group_state_changed", group_id=group.group_id, old_state=old.value,
                new_state=new_state.value, generation=group.generation_id)

    def touch(self, fx: Effects, group: Group, member: Member) -> None:
        """A sign of life: the member's session deadline moves."""
        fx.arm(member_key(group.group_id, member.member_id), member.session_timeout_ms)

    def store_group(self, fx: Effects, group: Group,
                    assignment: Mapping[str, bytes] | None = None,
                    then: FollowUp | None = None) -> None:
        # Kafka's storeGroup: metadata too large to store is UNKNOWN_SERVER_ERROR.
        fx.write(Write(self.partition_for(group.group_id), (group_record(group, assignment),),
                       E.unknown_server_error, then))

    @staticmethod
    def answer_join(fx: Effects, member: Member, result: JoinResult) -> None:
        if member.join_ticket is not None:
            fx.answer(member.join_ticket, result)
            member.join_ticket = None

    @staticmethod
    def answer_sync(fx: Effects, member: Member, result: SyncResult) -> None:
        if member.sync_ticket is not None:
            fx.answer(member.sync_ticket, result)
            member.sync_ticket = None

    # ------------------------------------------------------------------- SyncGroup
    def sync_group(self, *, group_id: str, generation_id: int, member_id: str,
                   group_instance_id: str | None, protocol_type: str | None,
                   protocol_name: str | None, assignments: Mapping[str, bytes]
                   ) -> Decision[SyncResult]:
        fx = Effects()

        def fail(error: int) -> Decision[SyncResult]:
            return fx.decide(SyncResult(error))

        error = self.unavailable()
        if error:
            return fail(error)
        if self.resigned:
            return fail(E.not_coordinator)
        if not group_id:
            return fail(E.invalid_group_id)
        group = self.groups.get(group_id)
        if group is None:
            return fail(E.unknown_member_id)
        if group.state is GroupState.DEAD:
            return fail(E.coordinator_not_available)
        error = validate_member(group, member_id, group_instance_id)
        if error:
            return fail(error)
        if generation_id != group.generation_id:
            return fail(E.illegal_generation)
        if (protocol_type is not None and protocol_type != group.protocol_type) or \
                (protocol_name is not None and protocol_name != group.protocol_name):
            return fail(E.inconsistent_group_protocol)
        member = group.members[member_id]
        if group.state is GroupState.EMPTY:
            return fail(E.unknown_member_id)
        if group.state is GroupState.PREPARING_REBALANCE:
            return fail(E.rebalance_in_progress)
        leader = group.is_leader(member_id)
        fx.emit("group_sync", group_id=group_id, member_id=member_id, generation=generation_id,
                is_leader=leader, state=group.state.value)
        group.pending_sync.discard(member_id)
        self.touch(fx, group, member)
        if group.state is GroupState.STABLE:
            return fx.decide(SyncResult(E.none, member.assignment, group.protocol_type,
                                        group.protocol_name))
        # CompletingRebalance: wait for the leader's assignment.
        self.answer_sync(fx, member, SyncResult(E.rebalance_in_progress))
        ticket = member.sync_ticket = self.new_ticket()
        if leader:
            assignment = {m: bytes(assignments.get(m, b"")) for m in group.members}
            self.store_group(fx, group, assignment,
                             LeaderSynced(group, group.generation_id, assignment))
        return fx.decide(ticket=ticket)

    def _leader_synced(self, fx: Effects, then: LeaderSynced, error: int) -> None:
        group = then.group
        # Another member may have joined meanwhile: only this generation's sync may finish.
        if group.state is not GroupState.COMPLETING_REBALANCE or \
                group.generation_id != then.generation:
            return
        if error:
            self._reset_and_propagate_assignment_error(fx, group, error)
            self.maybe_prepare_rebalance(fx, group, f"storing the assignment failed ({error})")
            return
        for member in group.members.values():
            member.assignment = then.assignment.get(member.member_id, b"")
            self.answer_sync(fx, member, SyncResult(E.none, member.assignment,
                                                     group.protocol_type, group.protocol_name))
        self.transition(fx, group, GroupState.STABLE)
        self._emit_rebalance_completed(fx, group)

    # ------------------------------------------------------------------- Heartbeat
    def heartbeat(self, *, group_id: str, member_id: str, group_instance_id: str | None,
                  generation_id: int) -> Decision[int]:
        # The most frequent request: its decision is built directly (no Effects).
        if not self.loaded:
            return Decision(E.coordinator_load_in_progress)
        if not group_id:
            return Decision(E.invalid_group_id)
        group = self.groups.get(group_id)
        if group is None:
            return Decision(E.unknown_member_id)
        if group.state is GroupState.DEAD:
            return Decision(E.coordinator_not_available)
        error = validate_member(group, member_id, group_instance_id)
        if error:
            return Decision(error)
        if generation_id != group.generation_id:
            return Decision(E.illegal_generation)
        if group.state is GroupState.EMPTY:
            return Decision(E.unknown_member_id)
        # A sign of life (as touch()): the session deadline moves.
        timers = ((member_key(group_id, member_id),
                   group.members[member_id].session_timeout_ms),)
        if group.state is GroupState.PREPARING_REBALANCE:
            return Decision(E.rebalance_in_progress, timers=timers)
        return Decision(E.none, timers=timers)

    # ------------------------------------------------------------------ LeaveGroup
    def leave_group(self, group_id: str, members: Sequence[tuple[str, str | None, str | None]]
                    ) -> Decision[tuple[int, list[int]]]:
        """LeaveGroup for ``(member_id, group_instance_id, reason)`` entries: the top-level
        error and one error per entry."""
        fx = Effects()

        def fail(top: int, each: int) -> Decision[tuple[int, list[int]]]:
            return fx.decide((top, [each] * len(members)))

        if not self.loaded:
            return fail(E.coordinator_load_in_progress, E.coordinator_load_in_progress)
        if not group_id:
            # Kafka's isValidGroupId: only the offset and admin APIs accept the empty group id.
            return fail(E.invalid_group_id, E.invalid_group_id)
        group = self.groups.get(group_id)
        if group is None:
            return fail(E.none, E.unknown_member_id)
        if group.state is GroupState.DEAD:
            return fail(E.coordinator_not_available, E.coordinator_not_available)
        errors = [self._leave_one(fx, group, member_id, instance_id, reason or "")
                  for member_id, instance_id, reason in members]
        return fx.decide((E.none, errors))

    def _leave_one(self, fx: Effects, group: Group, member_id: str, instance_id: str | None,
                   reason: str) -> int:
        if not member_id:
            # Administrative removal by group.instance.id (KIP-345).
            current = group.static_member_id(instance_id)
            if current is None:
                return E.unknown_member_id
            member_id = current
        elif member_id in group.pending_members:
            group.pending_members.discard(member_id)
            fx.cancel(pending_key(group.group_id, member_id))
            fx.emit("member_left", group_id=group.group_id, member_id=member_id,
                    group_instance_id=instance_id or "", reason=reason or "pending member left")
            self.try_complete_join(fx, group)
            return E.none
        else:
            error = validate_member(group, member_id, instance_id)
            if error:
                return error
        member = group.members[member_id]
        fx.emit("member_left", group_id=group.group_id, member_id=member_id,
                group_instance_id=member.group_instance_id or "", reason=reason)
        self._remove_member_and_update_group(
            fx, group, member, f"member {member_id} left" + (f" ({reason})" if reason else ""))
        return E.none

    # ------------------------------------------------------------------- timers
    def timer_fired(self, key: TimerKey) -> Decision[None]:
        """A deadline armed by an earlier decision passed (and was not moved or cancelled)."""
        fx = Effects()
        kind, group_id = key[0], key[1]
        group = self.groups.get(group_id)
        if group is not None:
            if kind == "member":
                self._member_expired(fx, group, key[2])
            elif kind == "pending":
                self._pending_member_expired(fx, group, key[2])
            elif kind == "join":
                self._join_phase_over(fx, group)
            elif kind == "sync":
                self._sync_phase_over(fx, group)
        return fx.decide()

    def _member_expired(self, fx: Effects, group: Group, member_id: str) -> None:
        member = group.members.get(member_id)
        if member is None:
            return
        if not member.is_new and (member.awaiting_join or member.awaiting_sync):
            # Members waiting in a rebalance are bounded by the rebalance timeout.
            self.touch(fx, group, member)
            return
        reason = "new_member_join_timeout" if member.is_new else "session_timeout"
        fx.emit("member_expired", group_id=group.group_id, member_id=member_id,
                group_instance_id=member.group_instance_id or "", reason=reason,
                state=group.state.value)
        self._remove_member_and_update_group(fx, group, member, f"{reason} of {member_id}")

    def _pending_member_expired(self, fx: Effects, group: Group, member_id: str) -> None:
        if member_id not in group.pending_members:
            return
        group.pending_members.discard(member_id)
        fx.emit("member_expired", group_id=group.group_id, member_id=member_id,
                group_instance_id="", reason="pending_member_timeout", state=group.state.value)
        self.try_complete_join(fx, group)

    def _start_join_timer(self, fx: Effects, group: Group, delay_ms: int, *, initial: bool,
                          remaining_ms: int = 0) -> None:
        group.join_is_initial = initial
        group.join_remaining_ms = remaining_ms
        fx.arm(join_key(group.group_id), delay_ms)

    def _cancel_join_timer(self, fx: Effects, group: Group) -> None:
        fx.cancel(join_key(group.group_id))
        group.join_is_initial = False
        group.join_remaining_ms = 0

    def _join_phase_over(self, fx: Effects, group: Group) -> None:
        if group.state is not GroupState.PREPARING_REBALANCE:
            return
        remaining = group.join_remaining_ms
        if group.join_is_initial and group.new_member_added and remaining > 0:
            # Kafka's InitialDelayedJoin: members keep arriving, wait a little longer.
            group.new_member_added = False
            delay = min(self.rules.initial_rebalance_delay_ms, remaining)
            self._start_join_timer(fx, group, delay, initial=True,
                                   remaining_ms=remaining - delay)
            return
        self._complete_join(fx, group)

    def _start_sync_timer(self, fx: Effects, group: Group) -> None:
        group.sync_generation = group.generation_id
        fx.arm(sync_key(group.group_id), group.rebalance_timeout_ms)

    def _cancel_sync_timer(self, fx: Effects, group: Group) -> None:
        if group.sync_generation is not None:
            fx.cancel(sync_key(group.group_id))
            group.sync_generation = None

    def _sync_phase_over(self, fx: Effects, group: Group) -> None:
        if group.sync_generation != group.generation_id:
            return
        group.sync_generation = None
        if group.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        missing = [group.members[m] for m in sorted(group.pending_sync) if m in group.members]
        if not missing:
            return
        for member in missing:
            fx.emit("member_expired", group_id=group.group_id, member_id=member.member_id,
                    group_instance_id=member.group_instance_id or "", reason="sync_timeout",
                    state=group.state.value)
            self._drop_member(fx, group, member)
        self.prepare_rebalance(
            fx, group, "members did not sync within the rebalance timeout: "
            + ",".join(m.member_id for m in missing))

    # ------------------------------------------------------------------- rebalances
    def maybe_prepare_rebalance(self, fx: Effects, group: Group, reason: str) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            self.prepare_rebalance(fx, group, reason)

    def prepare_rebalance(self, fx: Effects, group: Group, reason: str) -> None:
        previous = group.state
        if previous is GroupState.COMPLETING_REBALANCE:
            self._reset_and_propagate_assignment_error(fx, group, E.rebalance_in_progress)
        self._cancel_sync_timer(fx, group)
        group.pending_sync.clear()
        self.transition(fx, group, GroupState.PREPARING_REBALANCE)
        group.rebalance_started_at = self._monotonic()
        fx.emit("rebalance_started", group_id=group.group_id, reason=reason,
                generation=group.generation_id, members=len(group.members),
                previous_state=previous.value)
        self._cancel_join_timer(fx, group)
        if previous is GroupState.EMPTY:
            delay = self.rules.initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms - delay, 0)
            group.new_member_added = False
            self._start_join_timer(fx, group, delay, initial=True, remaining_ms=remaining)
        else:
            self._start_join_timer(fx, group, group.rebalance_timeout_ms, initial=False)
            # Kafka's tryCompleteElseWatch: a rebalance nobody has to rejoin for (the last
            # member left or expired) ends now, not after the rebalance timeout.
            self.try_complete_join(fx, group)

    def try_complete_join(self, fx: Effects, group: Group) -> None:
        """Complete the join phase early once everyone has rejoined (not during the initial delay)."""
        if group.state is GroupState.PREPARING_REBALANCE and not group.join_is_initial \
                and group.all_members_joined():
            self._complete_join(fx, group)

    def _complete_join(self, fx: Effects, group: Group) -> None:
        """Kafka's ``onCompleteJoin``: drop who did not rejoin, start the next generation."""
        self._cancel_join_timer(fx, group)
        for member in group.not_yet_rejoined():
            if not member.is_static:
                fx.emit("member_expired", group_id=group.group_id, member_id=member.member_id,
                        group_instance_id="", reason="rebalance_timeout", state=group.state.value)
                self._drop_member(fx, group, member)
        if group.state is GroupState.DEAD:
            return
        if group.members and not self._elect_joined_leader(group):
            # Only static members that have not rejoined remain: wait for them (or for their
            # session timeouts) another rebalance timeout.
            self._start_join_timer(fx, group, group.rebalance_timeout_ms, initial=False)
            return
        group.generation_id += 1
        if group.members:
            group.protocol_name = group.select_protocol()
            group.subscribed_topics = group.compute_subscribed_topics()
            self.transition(fx, group, GroupState.COMPLETING_REBALANCE)
        else:
            group.protocol_name = None
            group.subscribed_topics = None
            self.transition(fx, group, GroupState.EMPTY)
            self.store_group(fx, group, {})
            self._emit_rebalance_completed(fx, group)
            return
        protocol = group.protocol_name or ""
        leader_view = group.members_view()
        group.pending_sync = set(group.members)
        for member in group.members.values():
            self.answer_join(fx, member, JoinResult(
                E.none, member.member_id, group.generation_id, group.protocol_type,
                protocol, group.leader_id or "",
                leader_view if group.is_leader(member.member_id) else ()))
            member.is_new = False
            self.touch(fx, group, member)
        self._start_sync_timer(fx, group)

    @staticmethod
    def _elect_joined_leader(group: Group) -> bool:
        leader = group.members.get(group.leader_id or "")
        if leader is not None and leader.awaiting_join:
            return True
        for member in group.members.values():
            if member.awaiting_join:
                group.leader_id = member.member_id
                return True
        return False

    def _emit_rebalance_completed(self, fx: Effects, group: Group) -> None:
        fx.emit("rebalance_completed", group_id=group.group_id, generation=group.generation_id,
                protocol=group.protocol_name or "", leader=group.leader_id or "",
                members=len(group.members), state=group.state.value,
                duration_ms=round((self._monotonic() - group.rebalance_started_at) * 1000, 3))

    def _reset_and_propagate_assignment_error(self, fx: Effects, group: Group, error: int
                                              ) -> None:
        for member in group.members.values():
            member.assignment = b""
            self.answer_sync(fx, member, SyncResult(error))

    def _drop_member(self, fx: Effects, group: Group, member: Member) -> None:
        """Remove a member without triggering anything (callers decide what follows)."""
        fx.cancel(member_key(group.group_id, member.member_id))
        self.answer_join(fx, member, JoinResult(E.unknown_member_id, member.member_id))
        self.answer_sync(fx, member, SyncResult(E.unknown_member_id))
        group.remove_member(member.member_id)

    def _remove_member_and_update_group(self, fx: Effects, group: Group, member: Member,
                                        reason: str) -> None:
        self._drop_member(fx, group, member)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self.maybe_prepare_rebalance(fx, group, reason)
        elif group.state is GroupState.PREPARING_REBALANCE:
            self.try_complete_join(fx, group)

    # ------------------------------------------------------------------- writes done
    def written(self, then: FollowUp, error: int) -> Decision[None]:
        """A write of an earlier decision is done (``error`` 0: stored)."""
        fx = Effects()
        if isinstance(then, AnswerError):
            fx.answer(then.ticket, error)
        elif isinstance(then, LeaderSynced):
            self._leader_synced(fx, then, error)
        else:
            then.finish(fx, error)
        return fx.decide()
