"""JoinGroup's refusals before a member is added, in the classic group coordinator's sans-IO
core, as Kafka's ``GroupCoordinator.handleJoinGroup`` gives them: a member id the coordinator
does not know for a group it does not know, a dead group, and ``group.max.size``, which refuses
only a member the group does not know yet (a member, or a static instance, already in the group
may rejoin a full group). The mutation run over ``coordinator/classic_join`` found these
unpinned (docs/development.md, ``ClassicJoins.join_group``)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from tests.coordinator.test_classic_state import Driver
from trio_broker.coordinator.group import GroupState, JoinResult

E = ErrorCode


def test_a_member_id_for_an_unknown_group_is_unknown_member_id() -> None:
    d = Driver()
    assert d.join("someone").reply == JoinResult(E.unknown_member_id, "someone")
    assert "g" not in d.core.groups


def test_a_dead_group_answers_coordinator_not_available() -> None:
    d = Driver()
    member_id = d.stable_group_of_one()
    d.core.groups["g"].state = GroupState.DEAD
    assert d.join(member_id).reply == JoinResult(E.coordinator_not_available, member_id)


def test_a_full_group_refuses_only_members_it_does_not_know() -> None:
    d = Driver(max_size=1, initial_rebalance_delay_ms=0)
    member_id = d.stable_static_group()
    # A new member: refused, its (empty) member id echoed.
    assert d.join().reply == JoinResult(E.group_max_size_reached, "")
    assert d.join("stranger", group_instance_id=None).reply == JoinResult(
        E.group_max_size_reached, "stranger")
    # The member itself rejoining, and its static instance coming back under no member id:
    # neither is refused.
    again = d.join(member_id, group_instance_id="i1")
    assert again.reply is None or again.reply.error != E.group_max_size_reached
    restarted = d.join(group_instance_id="i1")
    assert restarted.reply is None or restarted.reply.error != E.group_max_size_reached
    assert len(d.core.groups["g"].members) == 1
