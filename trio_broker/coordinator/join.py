"""JoinGroup for the classic group coordinator, as a mixin of
:class:`~trio_broker.coordinator.coordinator.GroupCoordinator`: new, known and static members,
KIP-394's MEMBER_ID_REQUIRED, and the rebalance a join starts.

It holds no state of its own; the attributes and methods it uses are declared below for the type
checker and provided by ``GroupCoordinator``.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import trio
from kio.schema.errors import ErrorCode

from ..observability.log import emit
from .group import Group, GroupState, JoinResult, Member, Pending, SyncResult, resolved

if TYPE_CHECKING:
    from ..config import BrokerConfig
    from .consumer_coordinator import ConsumerGroups

E = ErrorCode

#: How long a new member may wait in its first join before it is dropped (Kafka's
#: ``GroupCoordinator.NewMemberJoinTimeoutMs``).
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000


class GroupJoins:
    """JoinGroup of :class:`GroupCoordinator` (a mixin)."""

    if TYPE_CHECKING:
        config: BrokerConfig
        consumer_groups: ConsumerGroups
        _groups: dict[str, Group]
        _loaded: bool
        _resigned: bool
        _nursery: trio.Nursery | None

        def _now_ms(self) -> int: ...
        def _spawn(self, fn: Callable[..., Awaitable[None]], *args: Any) -> None: ...
        async def _watch_pending_member(self, group: Group, member_id: str,
                                        scope: trio.CancelScope) -> None: ...
        def _start_member_timer(self, group: Group, member: Member, timeout_ms: int) -> None: ...
        def _touch(self, member: Member, timeout_ms: int | None = None) -> None: ...
        def _maybe_prepare_rebalance(self, group: Group, reason: str) -> None: ...
        def _prepare_rebalance(self, group: Group, reason: str) -> None: ...
        def _try_complete_join(self, group: Group) -> None: ...
        def _store_group(self, group: Group, assignment: Mapping[str, bytes] | None = None
                         ) -> Pending[int]: ...

    # ------------------------------------------------------------------- JoinGroup
    def join_group(self, *, group_id: str, member_id: str, group_instance_id: str | None,
                   client_id: str, client_host: str, session_timeout_ms: int,
                   rebalance_timeout_ms: int, protocol_type: str,
                   protocols: Sequence[tuple[str, bytes]], require_known_member_id: bool,
                   reason: str | None = None) -> Pending[JoinResult]:
        """Handle one JoinGroup. The result may be pending: the caller waits on it."""
        protocol_list = [(name, bytes(metadata)) for name, metadata in protocols]

        def fail(error: int, mid: str = member_id) -> Pending[JoinResult]:
            return resolved(JoinResult(error, mid))

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
            scope = trio.CancelScope(deadline=trio.current_time() + join.session_timeout_ms / 1000)
            group.pending_members[new_id] = scope
            self._spawn(self._watch_pending_member, group, new_id, scope)
            return resolved(JoinResult(E.member_id_required, new_id))
        return self._add_member_and_rebalance(group, new_id, join)

    def _join_current_member(self, group: Group, join: _JoinArgs) -> Pending[JoinResult]:
        member_id = join.member_id
        if member_id in group.pending_members:
            group.pending_members.pop(member_id).cancel()
            return self._add_member_and_rebalance(group, member_id, join)
        error = self._validate_member(group, member_id, join.group_instance_id)
        if error:
            return resolved(JoinResult(error, member_id))
        member = group.members[member_id]
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            return self._update_member_and_rebalance(group, member, join)
        if state is GroupState.COMPLETING_REBALANCE:
            if member.matches(join.protocols):
                # A duplicate join (the response was lost): answer with the current generation.
                return resolved(self._current_join_result(group, member))
            return self._update_member_and_rebalance(group, member, join)
        if state is GroupState.STABLE:
            if group.is_leader(member_id) or not member.matches(join.protocols):
                return self._update_member_and_rebalance(group, member, join)
            return resolved(self._current_join_result(group, member))
        return resolved(JoinResult(E.unknown_member_id, member_id))

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
