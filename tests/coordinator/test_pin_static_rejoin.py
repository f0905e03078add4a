"""A static member (KIP-345) restarting into a Stable group with unchanged metadata: the answer
to its JoinGroup, which the mutation run found unpinned (docs/development.md, "Mutation
testing"), and the revert when storing its new member id fails. Driven synchronously through
the sans-IO rules, as tests/coordinator/test_classic_state.py does.

Kafka (``GroupMetadataManager.updateStaticMemberThenRebalanceOrCompleteJoin``): no rebalance;
once the group is stored the member gets its new id, the group's generation, protocol type and
name. Before JoinGroup v9 the answer has no member list and the leader id the group had before
the replacement, so that a restarted leader (whose new id is not that one) does not run the
assignor while the group is Stable. From v9 (KIP-814) a restarted leader is told it leads, with
the members (to keep watching their metadata) and ``skip_assignment``. A failed store puts the
old member id back and answers the error with an empty member id."""

from __future__ import annotations

from kio.schema.errors import ErrorCode as E

from tests.coordinator.test_classic_state import Driver
from trio_broker.coordinator.classic_state import join_key, member_key
from trio_broker.coordinator.group import GroupState, JoinResult, SyncResult


def static_group(d: Driver) -> tuple[str, str]:
    """A Stable group of two static members, i1 (the leader) and i2: their member ids."""
    first = d.join(group_instance_id="i1")
    second = d.join(group_instance_id="i2")
    assert first.ticket is not None and second.ticket is not None
    while first.ticket not in d.answers:  # the initial delay, extended once for i2
        d.fire(join_key("g"))
    leader, follower = d.answers[first.ticket].member_id, d.answers[second.ticket].member_id
    assert d.answers[first.ticket].leader_id == leader
    d.sync(leader, 1, {leader: b"for-i1", follower: b"for-i2"})
    d.sync(follower, 1)
    d.flush()
    assert d.core.groups["g"].state is GroupState.STABLE
    return leader, follower


def test_a_restarted_static_leader_is_answered_with_the_old_leader_id_and_no_members() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    old_leader, follower = static_group(d)
    again = d.join(group_instance_id="i1")
    assert again.ticket is not None and again.ticket not in d.answers  # until stored
    d.flush()
    result = d.answers[again.ticket]
    new_id = d.core.groups["g"].static_member_id("i1")
    assert new_id not in (None, old_leader)
    assert (result.error, result.member_id, result.generation_id, result.protocol_type,
            result.protocol_name, result.leader_id, result.members) == (
        E.none, new_id, 1, "consumer", "range", old_leader, ())
    group = d.core.groups["g"]
    assert (group.state, group.generation_id) == (GroupState.STABLE, 1)
    # No reassignment: SyncGroup under the new id answers the assignment the old id had.
    synced = d.sync(new_id or "", 1)
    d.flush()
    assert synced.reply is not None and synced.reply.assignment == b"for-i1"


def test_a_restarted_static_follower_is_answered_without_a_rebalance() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    leader, old_follower = static_group(d)
    again = d.join(group_instance_id="i2")
    d.flush()
    assert again.ticket is not None
    result = d.answers[again.ticket]
    new_id = d.core.groups["g"].static_member_id("i2")
    assert (result.error, result.member_id, result.generation_id, result.leader_id,
            result.members) == (E.none, new_id, 1, leader, ())
    assert d.core.groups["g"].state is GroupState.STABLE


def test_a_static_rejoin_whose_store_fails_gives_the_member_its_old_id_back() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    old_leader, _ = static_group(d)
    again = d.join(group_instance_id="i1", protocols=[("range", b"m")])
    new_id = d.core.groups["g"].static_member_id("i1")
    d.flush(E.coordinator_not_available)
    assert again.ticket is not None
    failed = d.answers[again.ticket]
    assert (failed.error, failed.member_id, failed.generation_id, failed.protocol_name,
            failed.leader_id, failed.members, failed.skip_assignment) == (
        E.coordinator_not_available, "", 1, "range", old_leader, (), False)
    group = d.core.groups["g"]
    assert group.static_member_id("i1") == old_leader and new_id not in group.members
    assert group.leader_id == old_leader
    # Its session timer runs under the old id again, and the old id still heartbeats.
    assert member_key("g", old_leader) in d.timers
    assert member_key("g", new_id or "") not in d.timers
    assert d.core.heartbeat(group_id="g", member_id=old_leader, group_instance_id="i1",
                            generation_id=1).reply == E.none


def test_a_restarted_static_leader_at_join_group_v9_leads_and_skips_the_assignment() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    old_leader, follower = static_group(d)
    again = d.join(group_instance_id="i1", skips_assignment=True)
    d.flush()
    assert again.ticket is not None
    result = d.answers[again.ticket]
    new_id = d.core.groups["g"].static_member_id("i1")
    assert new_id not in (None, old_leader)
    assert (result.error, result.member_id, result.generation_id, result.leader_id,
            result.skip_assignment) == (E.none, new_id, 1, new_id, True)
    assert sorted((mid, iid) for mid, iid, _ in result.members) == sorted(
        [(new_id, "i1"), (follower, "i2")])
    group = d.core.groups["g"]
    assert (group.state, group.generation_id, group.leader_id) == (GroupState.STABLE, 1, new_id)


def test_a_restarted_static_follower_at_join_group_v9_does_not_skip_or_lead() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    leader, _ = static_group(d)
    again = d.join(group_instance_id="i2", skips_assignment=True)
    d.flush()
    assert again.ticket is not None
    result = d.answers[again.ticket]
    assert (result.error, result.leader_id, result.members, result.skip_assignment) == (
        E.none, leader, (), False)


# The old incarnation is fenced (Kafka's updateStaticMemberAndRebalance): whatever it still
# waits for is answered FENCED_INSTANCE_ID under its old id.
def test_a_restart_fences_the_old_incarnations_waiting_join() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    old_leader, _ = static_group(d)
    newcomer = d.join().reply.member_id  # type: ignore[union-attr]
    d.join(newcomer)  # a new member: the group prepares a rebalance
    old_join = d.join(old_leader, group_instance_id="i1")
    assert old_join.ticket is not None and old_join.ticket not in d.answers
    restarted = d.join(group_instance_id="i1")
    assert d.answers[old_join.ticket] == JoinResult(E.fenced_instance_id, old_leader)
    # The new incarnation takes the old one's place in the same rebalance.
    group = d.core.groups["g"]
    assert group.state is GroupState.PREPARING_REBALANCE
    assert restarted.ticket is not None and restarted.ticket not in d.answers
    assert group.static_member_id("i1") not in (None, old_leader)


def test_a_restart_during_the_sync_fences_the_old_incarnations_sync_and_rebalances() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    d.join(group_instance_id="i1")
    second = d.join(group_instance_id="i2")
    d.finish_join()
    assert second.ticket is not None
    follower = d.answers[second.ticket].member_id
    waiting = d.sync(follower, 1)  # the leader has not sent the assignment yet
    assert waiting.ticket is not None and waiting.ticket not in d.answers
    d.join(group_instance_id="i2")
    assert d.answers[waiting.ticket] == SyncResult(E.fenced_instance_id)
    assert d.core.groups["g"].state is GroupState.PREPARING_REBALANCE


def test_the_next_rebalance_waits_for_a_static_member_that_took_over() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    d.stable_static_group()
    d.join(group_instance_id="i1")
    d.flush()  # taken over without a rebalance; no join of its own is waiting now
    newcomer, joined = d.join_new()
    group = d.core.groups["g"]
    assert group.state is GroupState.PREPARING_REBALANCE
    assert joined.ticket is not None and joined.ticket not in d.answers
    new_id = group.static_member_id("i1") or ""
    d.join(new_id, group_instance_id="i1")
    assert group.state is GroupState.COMPLETING_REBALANCE
    assert d.answers[joined.ticket].generation_id == 2


def test_a_failed_store_gives_the_member_its_old_metadata_back() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    old_id = d.stable_static_group()
    again = d.join(group_instance_id="i1", protocols=[("range", b"changed")])
    d.flush(E.coordinator_not_available)
    assert again.ticket is not None
    failed = d.answers[again.ticket]
    assert (failed.error, failed.protocol_type, failed.protocol_name) == (
        E.coordinator_not_available, "consumer", "range")
    member = d.core.groups["g"].members[old_id]
    assert member.protocols == [("range", b"m")]


def test_a_failed_store_after_the_member_was_removed_changes_nothing() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    d.stable_static_group()
    again = d.join(group_instance_id="i1")
    # An administrator removes the instance (KIP-345) before the store is done.
    removed = d.take(d.core.leave_group("g", [("", "i1", "admin")]))
    assert removed.reply == (E.none, [E.none])
    d.flush(E.coordinator_not_available)
    assert again.ticket is not None
    assert d.answers[again.ticket].error == E.coordinator_not_available
    group = d.core.groups["g"]
    assert (group.state, group.members, group.static_members) == (GroupState.EMPTY, {}, {})


def test_a_restarted_static_leaders_v9_answer_names_the_groups_protocol() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    static_group(d)
    again = d.join(group_instance_id="i1", skips_assignment=True)
    d.flush()
    assert again.ticket is not None
    result = d.answers[again.ticket]
    assert (result.protocol_type, result.protocol_name) == ("consumer", "range")
