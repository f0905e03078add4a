"""The classic group's rebalance rules that the mutation run over ``coordinator/classic_state``
found unpinned in the fast selection (docs/development.md, "Sixth run"), as Kafka's
``GroupCoordinator`` has them:

- the initial rebalance delay (``InitialDelayedJoin``) extends by at most
  ``group.initial.rebalance.delay.ms`` while members keep coming, never past the rebalance
  timeout, and completes early only after it;
- the leader keeps its place when it rejoined; when it did not (a static leader), a member
  that did leads (``maybeElectNewJoinedLeader``);
- members waiting for SyncGroup learn REBALANCE_IN_PROGRESS when the group rebalances,
  UNKNOWN_MEMBER_ID when they are removed and NOT_COORDINATOR when the coordinator resigns;
- a stored assignment of an earlier generation completes nothing;
- a pending member's expiry ends a join that waited only for it;
- Heartbeat and LeaveGroup refuse while loading, for an empty group id and for a dead group.
"""

from __future__ import annotations

import time

from kio.schema.errors import ErrorCode as E

from tests.coordinator.test_classic_state import Driver
from trio_broker.config import load_config
from trio_broker.coordinator.classic_state import (
    ClassicGroups,
    Rules,
    join_key,
    pending_key,
)
from trio_broker.coordinator.group import GroupState, SyncResult


def join_new(d: Driver, client_id: str, **kw: object) -> int:
    """A new member joins (id handed out, then the join): its join's ticket."""
    ticket = d.join_new(client_id=client_id, **kw)[1].ticket
    assert ticket is not None
    return ticket


def test_the_initial_delay_extends_while_members_come_up_to_the_rebalance_timeout() -> None:
    # Kafka's InitialDelayedJoin: each extension is min(delay, what is left of the rebalance
    # timeout), and there is none once nothing is left.
    d = Driver(initial_rebalance_delay_ms=3000)
    tickets = [join_new(d, "c0", rebalance_timeout_ms=6001)]
    delays = [d.timers[join_key("g")]]
    for n in range(1, 4):
        # A member joins during the delay; the group waits, even with everyone joined.
        tickets.append(join_new(d, f"c{n}", rebalance_timeout_ms=6001))
        assert d.core.groups["g"].state is GroupState.PREPARING_REBALANCE
        d.fire(join_key("g"))
        if join_key("g") in d.timers:
            delays.append(d.timers[join_key("g")])
    assert delays == [3000, 3000, 1]
    assert d.core.groups["g"].state is GroupState.COMPLETING_REBALANCE
    assert all(d.answers[t].generation_id == 1 for t in tickets)


def test_the_initial_delay_is_not_extended_past_a_rebalance_timeout_as_short() -> None:
    d = Driver(initial_rebalance_delay_ms=3000)
    join_new(d, "c0", rebalance_timeout_ms=3000)
    join_new(d, "c1", rebalance_timeout_ms=3000)
    d.fire(join_key("g"))
    assert join_key("g") not in d.timers
    assert d.core.groups["g"].state is GroupState.COMPLETING_REBALANCE


def static_pair(d: Driver) -> tuple[str, str]:
    """A Stable group of static members i1 (the leader) and i2: their member ids."""
    first, second = d.join(group_instance_id="i1"), d.join(group_instance_id="i2")
    d.finish_join()
    assert first.ticket is not None and second.ticket is not None
    leader, follower = d.answers[first.ticket].member_id, d.answers[second.ticket].member_id
    d.sync(leader, 1, {leader: b"a1", follower: b"a2"})
    d.sync(follower, 1)
    d.flush()
    return leader, follower


def test_a_leader_that_rejoined_stays_leader_wherever_it_is_among_the_members() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    static_pair(d)
    d.join(group_instance_id="i1")  # restarted: i1 now comes after i2 among the members
    d.flush()
    group = d.core.groups["g"]
    leader = group.static_member_id("i1") or ""
    follower = group.static_member_id("i2") or ""
    assert list(group.members) == [follower, leader] and group.leader_id == leader
    moved = d.join(follower, group_instance_id="i2", protocols=[("range", b"new")])
    led = d.join(leader, group_instance_id="i1")
    assert moved.ticket is not None and led.ticket is not None
    assert d.answers[moved.ticket].leader_id == leader
    assert d.answers[led.ticket].members != ()


def test_a_member_that_rejoined_leads_when_the_static_leader_did_not() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    leader, follower = static_pair(d)
    moved = d.join(follower, group_instance_id="i2", protocols=[("range", b"new")])
    d.fire(join_key("g"))  # the rebalance timeout: i1 never rejoined, but is static
    group = d.core.groups["g"]
    assert moved.ticket is not None
    answer = d.answers[moved.ticket]
    assert (answer.generation_id, answer.leader_id, group.leader_id) == (2, follower, follower)
    assert [m for m, _, _ in answer.members] == [leader, follower]
    assert leader in group.members and group.state is GroupState.COMPLETING_REBALANCE


def completing(d: Driver) -> tuple[str, str, int]:
    """Two dynamic members in CompletingRebalance, the follower's SyncGroup waiting for the
    leader's: leader, follower, the follower's sync ticket."""
    one, two = join_new(d, "c1"), join_new(d, "c2")
    d.finish_join()
    leader = d.answers[one].leader_id
    follower = d.answers[two].member_id if d.answers[two].member_id != leader \
        else d.answers[one].member_id
    waiting = d.sync(follower, 1)
    assert waiting.ticket is not None and waiting.ticket not in d.answers
    return leader, follower, waiting.ticket


def test_a_rebalance_answers_a_waiting_sync_rebalance_in_progress() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    _, _, ticket = completing(d)
    join_new(d, "c3")
    assert d.answers[ticket] == SyncResult(E.rebalance_in_progress)
    assert d.core.groups["g"].state is GroupState.PREPARING_REBALANCE


def test_a_member_removed_while_its_sync_waits_is_answered_unknown_member_id() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    _, follower, ticket = completing(d)
    left = d.take(d.core.leave_group("g", [(follower, None, None)]))
    assert left.reply == (E.none, [E.none])
    assert d.answers[ticket] == SyncResult(E.unknown_member_id)


def test_a_resigning_coordinator_answers_a_waiting_sync_not_coordinator() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    _, _, ticket = completing(d)
    d.take(d.core.resign())
    assert d.answers[ticket] == SyncResult(E.not_coordinator)


def test_an_earlier_generations_stored_assignment_completes_nothing() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    leader, follower, _ = completing(d)
    d.sync(leader, 1, {leader: b"old-a", follower: b"old-b"})
    stored_later = list(d.writes)
    d.writes.clear()
    # Before generation 1's assignment is stored, the group moves on to generation 2.
    newcomer = join_new(d, "c3")
    d.join(leader)
    d.join(follower, client_id="c2")
    group = d.core.groups["g"]
    assert d.answers[newcomer].generation_id == 2
    assert group.state is GroupState.COMPLETING_REBALANCE
    d.writes.extend(stored_later)
    d.flush()
    assert group.state is GroupState.COMPLETING_REBALANCE and group.generation_id == 2
    assert all(m.assignment == b"" for m in group.members.values())


def test_a_pending_members_expiry_ends_a_join_that_waited_only_for_it() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    member_id = d.stable_group_of_one()
    pending = d.join().reply.member_id  # type: ignore[union-attr]
    rejoined = d.join(member_id)  # the group rebalances and waits for the pending member
    assert d.core.groups["g"].state is GroupState.PREPARING_REBALANCE
    d.fire(pending_key("g", pending))
    assert rejoined.ticket is not None and d.answers[rejoined.ticket].generation_id == 2
    assert pending not in d.core.groups["g"].pending_members


def test_heartbeat_and_leave_group_refuse_while_loading_and_for_a_dead_group() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    member_id = d.stable_group_of_one()

    def beat(group_id: str = "g") -> object:
        return d.core.heartbeat(group_id=group_id, member_id=member_id,
                                group_instance_id=None, generation_id=1).reply

    def leave(group_id: str = "g") -> object:
        return d.core.leave_group(group_id, [(member_id, None, None), ("x", None, None)]).reply

    assert beat("") == E.invalid_group_id
    assert leave("") == (E.invalid_group_id, [E.invalid_group_id] * 2)
    d.core.loaded = False
    assert beat() == E.coordinator_load_in_progress
    assert leave() == (E.coordinator_load_in_progress, [E.coordinator_load_in_progress] * 2)
    d.core.loaded = True
    d.core.groups["g"].state = GroupState.DEAD
    assert beat() == E.coordinator_not_available
    assert leave() == (E.coordinator_not_available, [E.coordinator_not_available] * 2)


def test_a_new_coordinator_serves_nothing_until_loaded_and_running() -> None:
    core = ClassicGroups(Rules())
    assert core.unavailable() == E.coordinator_load_in_progress
    core.loaded = True
    assert core.unavailable() == E.coordinator_not_available
    core.running = True
    assert core.unavailable() == E.none and not core.resigned
    # Its default wall clock is the time in milliseconds.
    before = int(time.time() * 1000)
    assert before <= core.wall_ms() <= int(time.time() * 1000)


def test_the_rules_come_from_the_brokers_config() -> None:
    config = load_config({
        "group.min.session.timeout.ms": "1000", "group.max.session.timeout.ms": "90000",
        "group.max.size": "7", "group.initial.rebalance.delay.ms": "10",
        "offset.metadata.max.bytes": "99", "offsets.topic.num.partitions": "5"})
    assert Rules.from_config(config) == Rules(1000, 90_000, 7, 10, 99, 5)
