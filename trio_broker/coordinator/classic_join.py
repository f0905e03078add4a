"""The rules of JoinGroup, sans-IO: new, known and static members, KIP-394's MEMBER_ID_REQUIRED,
and the rebalance a join starts (Kafka's ``GroupCoordinator.handleJoinGroup``).

No Trio here. :class:`ClassicJoins` works over the groups of a
:class:`~.classic_state.ClassicGroups` and answers a :class:`~.classic_state.Decision`: a reply
now (an error, MEMBER_ID_REQUIRED, a duplicate join answered from the current generation), or the
ticket the join waits on until the join phase completes.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
from kio.schema.errors import ErrorCode

from .classic_state import (
    ClassicGroups,
    Decision,
    Effects,
    member_key,
    pending_key,
    validate_member,
)
from .group import Group, GroupState, JoinResult, Member, SyncResult

E = ErrorCode

#: How long a new member may wait in its first join before it is dropped (Kafka's
#: ``GroupCoordinator.NewMemberJoinTimeoutMs``).
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000


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
    #: JoinGroup v9+ (KIP-814): the answer may tell the leader to skip the assignment.
    skips_assignment: bool


@attrs.frozen(eq=False)
class StaticRejoined:
    """After a restarted static member's new id is stored: answer its join (Kafka reverts the
    replacement when the write fails)."""

    group: Group
    member: Member
    ticket: int
    leader: str
    old_id: str
    old_protocols: list[tuple[str, bytes]]
    #: The join was v9+ (KIP-814).
    skips_assignment: bool

    def finish(self, fx: Effects, error: int) -> None:
        """Kafka's ``updateStaticMemberThenRebalanceOrCompleteJoin`` once the group is
        stored: the group stays as it is, so no member may reassign. Below JoinGroup v9 the
        answer names the old leader id (a restarted leader does not see itself as leader);
        from v9 a restarted leader is told it leads, gets the members to watch their
        metadata, and ``skip_assignment``."""
        group, member = self.group, self.member
        if error:
            if group.members.get(member.member_id) is member and member.group_instance_id:
                fx.cancel(member_key(group.group_id, member.member_id))
                group.replace_static_member(member.group_instance_id, member.member_id,
                                            self.old_id)
                member.protocols = self.old_protocols
                fx.arm(member_key(group.group_id, member.member_id), member.session_timeout_ms)
            fx.answer(self.ticket, JoinResult(error, "", group.generation_id,
                                              group.protocol_type, group.protocol_name,
                                              self.leader))
            return
        if self.skips_assignment:
            leads = group.is_leader(member.member_id)
            fx.answer(self.ticket, JoinResult(
                E.none, member.member_id, group.generation_id, group.protocol_type,
                group.protocol_name, group.leader_id or "",
                group.members_view() if leads else (), skip_assignment=leads))
            return
        fx.answer(self.ticket, JoinResult(E.none, member.member_id, group.generation_id,
                                          group.protocol_type, group.protocol_name, self.leader,
                                          ()))


class ClassicJoins:
    """JoinGroup over the groups of ``core``."""

    def __init__(self, core: ClassicGroups) -> None:
        self.core = core

    def join_precheck(self, group_id: str, session_timeout_ms: int) -> int:
        """The checks of a JoinGroup before the consumer-protocol groups are asked (0: pass)."""
        error = self.core.unavailable()
        if error:
            return error
        if self.core.resigned:
            return E.not_coordinator
        if not group_id:
            return E.invalid_group_id
        if not (self.core.rules.min_session_timeout_ms <= session_timeout_ms
                <= self.core.rules.max_session_timeout_ms):
            return E.invalid_session_timeout
        return E.none

    def join_group(self, *, group_id: str, member_id: str, group_instance_id: str | None,
                   client_id: str, client_host: str, session_timeout_ms: int,
                   rebalance_timeout_ms: int, protocol_type: str,
                   protocols: Sequence[tuple[str, bytes]], require_known_member_id: bool,
                   reason: str | None = None, skips_assignment: bool = False
                   ) -> Decision[JoinResult]:
        """One JoinGroup (after :meth:`join_precheck` passed)."""
        fx = Effects()
        protocol_list = [(name, bytes(metadata)) for name, metadata in protocols]
        group = self.core.groups.get(group_id)
        if group is None:
            if member_id:
                return fx.decide(JoinResult(E.unknown_member_id, member_id))
            group = Group(group_id, state_timestamp_ms=self.core.wall_ms())
            self.core.groups[group_id] = group
        if group.state is GroupState.DEAD:
            return fx.decide(JoinResult(E.coordinator_not_available, member_id))
        known = member_id in group.members or group.static_member_id(group_instance_id) is not None
        if not known and len(group.members) >= self.core.rules.max_size:
            return fx.decide(JoinResult(E.group_max_size_reached, member_id))
        if not group.supports_protocols(protocol_type, protocol_list):
            return fx.decide(JoinResult(E.inconsistent_group_protocol, member_id))
        join = _JoinArgs(member_id, group_instance_id, client_id, client_host,
                         session_timeout_ms, rebalance_timeout_ms, protocol_type, protocol_list,
                         reason or "", skips_assignment)
        if not member_id:
            reply, ticket = self._join_new_member(fx, group, join, require_known_member_id)
        else:
            reply, ticket = self._join_current_member(fx, group, join)
        self.core.try_complete_join(fx, group)
        return fx.decide(reply, ticket)

    def _join_new_member(self, fx: Effects, group: Group, join: _JoinArgs,
                         require_known_member_id: bool) -> tuple[JoinResult | None, int | None]:
        new_id = f"{join.group_instance_id or join.client_id}-{self.core.new_uuid()}"
        if join.group_instance_id is not None:
            old_id = group.static_member_id(join.group_instance_id)
            if old_id is not None:
                return None, self._update_static_member(fx, group, old_id, new_id, join)
            return None, self._add_member_and_rebalance(fx, group, new_id, join)
        if require_known_member_id:
            # KIP-394: hand out the id first; the member joins for real with it.
            group.pending_members.add(new_id)
            fx.arm(pending_key(group.group_id, new_id), join.session_timeout_ms)
            return JoinResult(E.member_id_required, new_id), None
        return None, self._add_member_and_rebalance(fx, group, new_id, join)

    def _join_current_member(self, fx: Effects, group: Group, join: _JoinArgs
                             ) -> tuple[JoinResult | None, int | None]:
        member_id = join.member_id
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            fx.cancel(pending_key(group.group_id, member_id))
            return None, self._add_member_and_rebalance(fx, group, member_id, join)
        error = validate_member(group, member_id, join.group_instance_id)
        if error:
            return JoinResult(error, member_id), None
        member = group.members[member_id]
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            return None, self._update_member_and_rebalance(fx, group, member, join)
        if state is GroupState.COMPLETING_REBALANCE:
            if member.matches(join.protocols):
                # A duplicate join (the response was lost): answer with the current generation.
                return self._current_join_result(group, member), None
            return None, self._update_member_and_rebalance(fx, group, member, join)
        if state is GroupState.STABLE:
            if group.is_leader(member_id) or not member.matches(join.protocols):
                return None, self._update_member_and_rebalance(fx, group, member, join)
            return self._current_join_result(group, member), None
        return JoinResult(E.unknown_member_id, member_id), None

    @staticmethod
    def _current_join_result(group: Group, member: Member) -> JoinResult:
        members = group.members_view() if group.is_leader(member.member_id) else ()
        return JoinResult(E.none, member.member_id, group.generation_id, group.protocol_type,
                          group.protocol_name or "", group.leader_id or "", members)

    def _add_member_and_rebalance(self, fx: Effects, group: Group, member_id: str,
                                  join: _JoinArgs) -> int:
        member = Member(
            member_id=member_id, group_instance_id=join.group_instance_id,
            client_id=join.client_id, client_host=join.client_host,
            rebalance_timeout_ms=join.rebalance_timeout_ms,
            session_timeout_ms=join.session_timeout_ms, protocol_type=join.protocol_type,
            protocols=join.protocols, is_new=True)
        ticket = member.join_ticket = self.core.new_ticket()
        group.add_member(member)
        if group.state is GroupState.PREPARING_REBALANCE and group.generation_id == 0:
            group.new_member_added = True
        fx.arm(member_key(group.group_id, member_id), NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._emit_join(fx, group, member, join.reason)
        self.core.maybe_prepare_rebalance(
            fx, group, f"adding new member {member_id}"
            + (f" ({join.reason})" if join.reason else ""))
        return ticket

    def _update_member_and_rebalance(self, fx: Effects, group: Group, member: Member,
                                     join: _JoinArgs) -> int:
        ticket = self._update_member(fx, member, join)
        self._emit_join(fx, group, member, join.reason)
        self.core.maybe_prepare_rebalance(
            fx, group, f"updating metadata of member {member.member_id}"
            + (f" ({join.reason})" if join.reason else ""))
        return ticket

    def _update_member(self, fx: Effects, member: Member, join: _JoinArgs) -> int:
        member.protocols = join.protocols
        member.rebalance_timeout_ms = join.rebalance_timeout_ms
        member.session_timeout_ms = join.session_timeout_ms
        member.client_id = join.client_id
        member.client_host = join.client_host
        # The client gave up on its previous join and sent another one.
        self.core.answer_join(fx, member, JoinResult(E.rebalance_in_progress, member.member_id))
        ticket = member.join_ticket = self.core.new_ticket()
        return ticket

    def _update_static_member(self, fx: Effects, group: Group, old_id: str, new_id: str,
                              join: _JoinArgs) -> int:
        """Kafka's ``updateStaticMemberAndRebalance``: a restarted static member takes over."""
        instance_id = join.group_instance_id
        assert instance_id is not None
        member = group.members[old_id]
        current_leader = group.leader_id or ""
        # The old incarnation is fenced: its waiting requests learn it.
        self.core.answer_join(fx, member, JoinResult(E.fenced_instance_id, old_id))
        self.core.answer_sync(fx, member, SyncResult(E.fenced_instance_id))
        group.replace_static_member(instance_id, old_id, new_id)
        fx.cancel(member_key(group.group_id, old_id))
        old_protocols = member.protocols
        ticket = self._update_member(fx, member, join)
        self.core.touch(fx, group, member)
        state = group.state
        rebalance = True
        if state is GroupState.STABLE:
            if group.protocol_name == group.select_protocol():
                rebalance = False
                # Keep the group as it is (every member's assignment too): persist the new
                # member id and answer with the old leader id, so that no member (even if it
                # was the leader) reassigns.
                member.join_ticket = None
                self.core.store_group(fx, group, then=StaticRejoined(
                    group, member, ticket, current_leader, old_id, old_protocols,
                    join.skips_assignment))
            else:
                self.core.maybe_prepare_rebalance(
                    fx, group, f"static member {instance_id} rejoined with other protocols")
        elif state is GroupState.COMPLETING_REBALANCE:
            self.core.prepare_rebalance(
                fx, group, f"static member {instance_id} rejoined during sync")
        fx.emit("static_member_replaced", group_id=group.group_id, group_instance_id=instance_id,
                old_member_id=old_id, member_id=new_id, rebalance=rebalance)
        return ticket

    @staticmethod
    def _emit_join(fx: Effects, group: Group, member: Member, reason: str) -> None:
        fx.emit("group_join", group_id=group.group_id, member_id=member.member_id,
                group_instance_id=member.group_instance_id or "", client_id=member.client_id,
                client_host=member.client_host, protocol_type=member.protocol_type,
                protocols=",".join(member.protocol_names()),
                session_timeout_ms=member.session_timeout_ms,
                rebalance_timeout_ms=member.rebalance_timeout_ms,
                generation=group.generation_id, state=group.state.value, reason=reason)
