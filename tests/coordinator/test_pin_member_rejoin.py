"""JoinGroup from a member the group knows, as Kafka's ``GroupCoordinator`` answers it
(``doCurrentMemberJoinGroup``), and the checks before any group is looked at
(``handleJoinGroup``: the coordinator's state): what the mutation run over ``coordinator/classic_join`` found unpinned
in the fast selection (docs/development.md, "Sixth run").

- A duplicate JoinGroup during CompletingRebalance (its answer was lost) is answered at once
  with the current generation; with other protocols it starts a rebalance.
- In a Stable group a follower rejoining with the same protocols gets the current generation
  back without a rebalance; the leader, or a member with other protocols, rebalances.
- A member that sends another JoinGroup while its first one waits has the first one answered
  REBALANCE_IN_PROGRESS.
- A new member that waits in a rebalance longer than the new-member join timeout (KIP-394,
  5 minutes) is removed; an old member waiting is not.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode as E

from tests.coordinator.test_classic_state import Driver
from trio_broker.coordinator.classic_join import NEW_MEMBER_JOIN_TIMEOUT_MS
from trio_broker.coordinator.classic_state import join_key, member_key
from trio_broker.coordinator.group import GroupState, JoinResult


def completing_pair(d: Driver, **kw: object) -> tuple[str, str]:
    """Two members past the join phase of generation 1 (CompletingRebalance): leader, follower.
    ``kw``: more fields of both members' joins."""
    first = d.join(**kw).reply.member_id  # type: ignore[union-attr]
    second = d.join(client_id="d", **kw).reply.member_id  # type: ignore[union-attr]
    one = d.join(first, protocols=[("range", b"m1")], **kw)
    two = d.join(second, client_id="d", **kw)
    d.finish_join()
    assert one.ticket is not None and two.ticket is not None
    assert d.core.groups["g"].state is GroupState.COMPLETING_REBALANCE
    leader = d.answers[one.ticket].leader_id
    return leader, second if leader == first else first


def test_the_precheck_refuses_until_the_coordinator_serves() -> None:
    # (Its argument checks are in test_pin_group_rules.py.)
    d = Driver()
    joins = d.joins
    assert joins.join_precheck("g", 10_000) == E.none
    d.core.resigned = True
    assert joins.join_precheck("g", 10_000) == E.not_coordinator
    d.core.running = False
    assert joins.join_precheck("g", 10_000) == E.coordinator_not_available
    d.core.loaded = False
    assert joins.join_precheck("g", 10_000) == E.coordinator_load_in_progress


def test_a_known_member_id_with_another_instances_id_is_fenced() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    d.stable_static_group()
    other, _ = d.join_new()
    assert d.join(other, group_instance_id="i1").reply == JoinResult(
        E.fenced_instance_id, other)


def test_an_unknown_member_id_is_echoed_with_unknown_member_id() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    d.stable_group_of_one()
    assert d.join("stranger").reply == JoinResult(E.unknown_member_id, "stranger")


def test_a_duplicate_join_while_completing_is_answered_with_the_current_generation() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    leader, follower = completing_pair(d)
    again = d.join(leader, protocols=[("range", b"m1")])
    assert again.reply == JoinResult(
        E.none, leader, 1, "consumer", "range", leader,
        d.core.groups["g"].members_view())
    assert len(again.reply.members) == 2  # type: ignore[union-attr]
    follower_again = d.join(follower, client_id="d")
    assert follower_again.reply == JoinResult(E.none, follower, 1, "consumer", "range", leader,
                                              ())
    assert d.core.groups["g"].state is GroupState.COMPLETING_REBALANCE


def test_a_join_with_other_protocols_while_completing_rebalances() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    leader, follower = completing_pair(d)
    changed = d.join(follower, client_id="d", protocols=[("range", b"other")])
    assert changed.reply is None and changed.ticket is not None
    group = d.core.groups["g"]
    assert group.state is GroupState.PREPARING_REBALANCE
    assert group.members[follower].protocols == [("range", b"other")]
    rejoined = d.join(leader, protocols=[("range", b"m1")])
    assert d.answers[changed.ticket].generation_id == 2
    assert rejoined.ticket is not None and d.answers[rejoined.ticket].generation_id == 2


def test_a_follower_rejoining_a_stable_group_unchanged_gets_the_current_generation() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    leader, follower = completing_pair(d)
    d.sync(leader, 1, {leader: b"a", follower: b"b"})
    d.sync(follower, 1)
    d.flush()
    assert d.core.groups["g"].state is GroupState.STABLE
    again = d.join(follower, client_id="d")
    assert again.reply == JoinResult(E.none, follower, 1, "consumer", "range", leader, ())
    assert d.core.groups["g"].state is GroupState.STABLE
    # The leader rejoining rebalances, even unchanged (its assignor may see new metadata).
    led = d.join(leader, protocols=[("range", b"m1")])
    assert led.reply is None and d.core.groups["g"].state is GroupState.PREPARING_REBALANCE


def test_a_second_join_while_the_first_waits_answers_the_first_rebalance_in_progress() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    leader, follower = completing_pair(d)
    first = d.join(follower, client_id="d", protocols=[("range", b"other")])
    assert first.ticket is not None and first.ticket not in d.answers
    second = d.join(follower, client_id="d", protocols=[("range", b"other")])
    assert d.answers[first.ticket] == JoinResult(E.rebalance_in_progress, follower)
    assert second.ticket is not None and second.ticket not in d.answers


def test_a_new_member_waiting_past_the_new_member_timeout_is_removed() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    # The old members' rebalance timeout is longer than the new-member join timeout.
    leader, follower = completing_pair(d, rebalance_timeout_ms=600_000)
    d.sync(leader, 1, {leader: b"a", follower: b"b"})
    d.sync(follower, 1)
    d.flush()
    newcomer, waiting = d.join_new(client_id="n")
    assert d.timers[member_key("g", newcomer)] == NEW_MEMBER_JOIN_TIMEOUT_MS
    assert d.timers[join_key("g")] == 600_000
    rejoined = d.join(leader, protocols=[("range", b"m1")], rebalance_timeout_ms=600_000)
    d.fire(member_key("g", newcomer))
    group = d.core.groups["g"]
    assert newcomer not in group.members
    assert waiting.ticket is not None
    assert d.answers[waiting.ticket] == JoinResult(E.unknown_member_id, newcomer)
    assert "member_expired" in d.events
    # An old member waiting in the same rebalance is only touched by its session timer.
    d.fire(member_key("g", leader))
    assert leader in group.members and d.timers[member_key("g", leader)] == 10_000
    assert rejoined.ticket is not None and rejoined.ticket not in d.answers
    assert group.state is GroupState.PREPARING_REBALANCE
