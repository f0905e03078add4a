"""The end of a classic group's join phase in the sans-IO core (Kafka's ``onCompleteJoin``):
every member is answered with the new generation, the group's protocol type and name and the
leader's id, the leader alone with the members; and when only static members that have not
rejoined remain, nobody is answered and the phase waits another rebalance timeout for them
(KIP-345: a static member is not dropped for missing a rebalance). The mutation run over
``coordinator/classic_state`` found these unpinned (docs/development.md, ``_complete_join``)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from tests.coordinator.test_classic_state import Driver
from trio_broker.coordinator.classic_state import join_key
from trio_broker.coordinator.group import GroupState, JoinResult

E = ErrorCode
REBALANCE_TIMEOUT_MS = 30_000  # Driver.join's


def test_each_member_is_answered_with_the_generation_protocol_and_leader() -> None:
    d = Driver()
    tickets = {}
    for _ in range(2):
        member_id = d.join().reply.member_id  # type: ignore[union-attr]
        joined = d.join(member_id)
        assert joined.ticket is not None
        tickets[member_id] = joined.ticket
    d.finish_join()
    group = d.core.groups["g"]
    leader = group.leader_id
    assert leader is not None
    follower = next(m for m in tickets if m != leader)
    led = d.answers.pop(tickets[leader])
    assert (led.error, led.member_id, led.generation_id, led.protocol_type, led.protocol_name,
            led.leader_id) == (E.none, leader, 1, "consumer", "range", leader)
    assert sorted(member for member, _, _ in led.members) == sorted(tickets)
    assert d.answers.pop(tickets[follower]) == JoinResult(
        E.none, follower, 1, "consumer", "range", leader, ())


def test_only_static_members_not_rejoined_wait_another_rebalance_timeout() -> None:
    d = Driver()
    static = d.join(group_instance_id="i1")
    dynamic_id, dynamic = d.join_new()
    d.finish_join()
    group = d.core.groups["g"]
    assert static.ticket is not None and dynamic.ticket is not None
    static_id = d.answers.pop(static.ticket).member_id
    d.answers.pop(dynamic.ticket)
    d.sync(static_id, group.generation_id, {static_id: b"s", dynamic_id: b"d"})
    d.sync(dynamic_id, group.generation_id)
    d.flush()
    assert group.state is GroupState.STABLE
    generation = group.generation_id

    d.take(d.core.leave_group("g", [(dynamic_id, None, None)]))  # a rebalance begins
    assert group.state is GroupState.PREPARING_REBALANCE
    d.fire(join_key("g"))  # the static member did not rejoin: kept, and waited for again
    assert set(group.members) == {static_id}
    assert group.state is GroupState.PREPARING_REBALANCE
    assert group.generation_id == generation
    assert d.timers[join_key("g")] == REBALANCE_TIMEOUT_MS
    assert not group.join_is_initial
    rejoined = d.join(static_id, group_instance_id="i1")  # it comes back: the join completes
    assert rejoined.reply is None and rejoined.ticket is not None
    assert group.state is GroupState.COMPLETING_REBALANCE
    assert d.answers.pop(rejoined.ticket).generation_id == generation + 1


def test_a_group_whose_last_member_left_is_stored_empty_without_a_protocol() -> None:
    """Kafka's record of an Empty group: the protocol type stays, the protocol is null."""
    from trio_broker.coordinator.records import decode_group_value

    d = Driver()
    member_id = d.stable_group_of_one()
    generation = d.core.groups["g"].generation_id
    d.take(d.core.leave_group("g", [(member_id, None, None)]))
    assert d.core.groups["g"].state is GroupState.EMPTY
    (_key, value), = d.writes[-1].records
    assert value is not None
    stored = decode_group_value(value)
    assert (stored.protocol_type, stored.generation_id, stored.protocol_name, stored.members) == (
        "consumer", generation + 1, None, ())
