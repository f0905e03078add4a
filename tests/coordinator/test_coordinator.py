"""The group coordinator's state machine and every timeout path, on the autojump clock.

Each test drives a real GroupCoordinator (over the real LogManager) the way the handlers do.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import trio
from kio.schema.consumer_protocol_subscription.v3.data import (
    ConsumerProtocolSubscription,
)
from kio.schema.consumer_protocol_subscription.v3.data import (
    TopicPartition as OwnedPartitions,
)
from kio.schema.errors import ErrorCode as E
from kio.schema.types import TopicName
from kio.serial import entity_writer
from kio.serial.writers import write_int16
from kio.static.primitive import i32

from tests.coordinator.group_harness import Harness, gather
from trio_broker.coordinator import GroupState, OffsetCommitEntry
from trio_broker.testing.client import assignment, subscription


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    return Harness(tmp_path / "data", {})


async def keep_alive(h: Harness, group: str, member_id: str, generation: int,
                     interval: float = 1.0) -> None:
    """Heartbeat like a live consumer until cancelled."""
    while True:
        h.heartbeat(group, member_id, generation)
        await trio.sleep(interval)


async def stable_pair(h: Harness, group: str = "g", **kw: Any) -> tuple[str, str, int]:
    """Two members, joined and synced: ``(leader, follower, generation)``."""
    a, b = await gather(lambda: h.join_new(group, client_id="a", **kw),
                        lambda: h.join_new(group, client_id="b", **kw))
    assert a.error == b.error == 0
    assert a.generation_id == b.generation_id
    leader = a.leader_id
    follower = b.member_id if leader == a.member_id else a.member_id
    assignments = {leader: b"for-leader", follower: b"for-follower"}
    results = await gather(lambda: h.sync(group, a.generation_id, leader, assignments),
                           lambda: h.sync(group, a.generation_id, follower))
    assert [r.assignment for r in results] == [b"for-leader", b"for-follower"]
    return leader, follower, a.generation_id


def kio_subscription(*topics: str, owned: dict[str, list[int]] | None = None,
                     generation: int = -1) -> bytes:
    """A ConsumerProtocolSubscription v3 as a current Java consumer sends it (the version, then
    the struct), encoded by kio: independent of the broker's own test helper and parser."""
    value = ConsumerProtocolSubscription(
        topics=topics, user_data=None,
        owned_partitions=tuple(
            OwnedPartitions(topic=TopicName(t), partitions=tuple(i32(p) for p in ps))
            for t, ps in (owned or {}).items()),
        generation_id=i32(generation), rack_id=None)
    buffer = io.BytesIO()
    write_int16(buffer, ConsumerProtocolSubscription.__version__)
    entity_writer(ConsumerProtocolSubscription)(buffer, value)
    return buffer.getvalue()


# ------------------------------------------------------------------------- basics
async def test_member_id_required_then_join_sync_heartbeat(
        harness: Harness, nursery: trio.Nursery, autojump_clock: Any, log_events: Any) -> None:
    coord = await harness.start(nursery)
    first = await harness.join("g")
    assert first.error == E.member_id_required
    assert first.member_id.startswith("client-")
    joined = await harness.join("g", first.member_id)
    assert joined.error == 0
    assert joined.generation_id == 1
    assert joined.leader_id == joined.member_id
    assert joined.protocol_name == "range"
    assert joined.members == ((joined.member_id, None, b"meta"),)
    assert coord.groups["g"].state is GroupState.COMPLETING_REBALANCE
    synced = await harness.sync("g", 1, joined.member_id, {joined.member_id: b"assignment"})
    assert synced.error == 0 and synced.assignment == b"assignment"
    assert synced.protocol_name == "range"
    assert coord.groups["g"].state is GroupState.STABLE
    assert harness.heartbeat("g", joined.member_id, 1) == 0
    summary = coord.describe_group("g")
    assert (summary.state, summary.protocol_type, summary.protocol_name) == (
        "Stable", "consumer", "range")
    assert summary.members[0].assignment == b"assignment"
    assert summary.members[0].metadata == b"meta"
    assert [e["new_state"] for e in log_events.events("group_state_changed", group_id="g")] == [
        "PreparingRebalance", "CompletingRebalance", "Stable"]
    assert log_events.events("rebalance_completed", group_id="g", state="Stable")


async def test_heartbeat_errors(harness: Harness, nursery: trio.Nursery,
                                autojump_clock: Any) -> None:
    await harness.start(nursery)
    leader, follower, gen = await stable_pair(harness)
    assert harness.heartbeat("nope", leader, gen) == E.unknown_member_id
    assert harness.heartbeat("g", "stranger", gen) == E.unknown_member_id
    assert harness.heartbeat("g", leader, gen + 5) == E.illegal_generation
    # A third member joins: the others learn of the rebalance through their heartbeats.
    nursery.start_soon(harness.join_new, "g")
    await trio.testing.wait_all_tasks_blocked()
    assert harness.heartbeat("g", leader, gen) == E.rebalance_in_progress
    sync = await harness.sync("g", gen, follower)
    assert sync.error == E.rebalance_in_progress


async def test_join_validation(harness: Harness, nursery: trio.Nursery,
                               autojump_clock: Any) -> None:
    await harness.start(nursery)
    assert (await harness.join("")).error == E.invalid_group_id
    assert (await harness.join("g", session_ms=10)).error == E.invalid_session_timeout
    assert (await harness.join("g", session_ms=10**8)).error == E.invalid_session_timeout
    assert (await harness.join("unknown", "some-member")).error == E.unknown_member_id
    await stable_pair(harness)
    bad = await harness.join("g", protocols=[("other", b"")], require_known=False)
    assert bad.error == E.inconsistent_group_protocol
    wrong_type = await harness.join("g", protocol_type="connect", require_known=False)
    assert wrong_type.error == E.inconsistent_group_protocol


async def test_protocol_selection_by_votes(harness: Harness, nursery: trio.Nursery,
                                           autojump_clock: Any) -> None:
    await harness.start(nursery)
    results = await gather(
        lambda: harness.join_new("g", protocols=[("range", b"r1"), ("roundrobin", b"rr1")]),
        lambda: harness.join_new("g", protocols=[("roundrobin", b"rr2"), ("range", b"r2")]),
        lambda: harness.join_new("g", protocols=[("roundrobin", b"rr3"), ("sticky", b"s3"),
                                                 ("range", b"r3")]))
    assert {r.protocol_name for r in results} == {"roundrobin"}
    leader = next(r for r in results if r.member_id == r.leader_id)
    assert sorted(m[2] for m in leader.members) == [b"rr1", b"rr2", b"rr3"]
    assert all(r.members == () for r in results if r is not leader)


async def test_group_max_size(harness: Harness, nursery: trio.Nursery,
                              autojump_clock: Any) -> None:
    harness.overrides["group.max.size"] = "2"
    await harness.start(nursery)
    await stable_pair(harness)
    third = await harness.join("g", require_known=False)
    assert third.error == E.group_max_size_reached


# --------------------------------------------------------------------- rebalances
async def test_second_member_triggers_rebalance(harness: Harness, nursery: trio.Nursery,
                                                autojump_clock: Any) -> None:
    await harness.start(nursery)
    a = await harness.join_new("g", client_id="a")
    await harness.sync("g", 1, a.member_id, {a.member_id: b"all"})
    results: dict[str, Any] = {}

    async def b_joins() -> None:
        results["b"] = await harness.join_new("g", client_id="b")

    nursery.start_soon(b_joins)
    await trio.testing.wait_all_tasks_blocked()
    assert harness.heartbeat("g", a.member_id, 1) == E.rebalance_in_progress
    a2 = await harness.join("g", a.member_id)
    await trio.testing.wait_all_tasks_blocked()
    b = results["b"]
    assert a2.generation_id == b.generation_id == 2
    assert a2.leader_id == a.member_id  # the leader stays the leader
    assert {m[0] for m in a2.members} == {a.member_id, b.member_id}
    s_a, s_b = await gather(
        lambda: harness.sync("g", 2, a.member_id, {a.member_id: b"0", b.member_id: b"1"}),
        lambda: harness.sync("g", 2, b.member_id))
    assert (s_a.assignment, s_b.assignment) == (b"0", b"1")


async def test_sync_group_of_a_stale_generation_is_refused(
        harness: Harness, nursery: trio.Nursery, autojump_clock: Any) -> None:
    """Issue 37, rule 3: a SyncGroup of an earlier generation never installs an assignment.

    The leader of generation N computed an assignment, then a rebalance made generation N+1;
    its late SyncGroup (generation N) must get ILLEGAL_GENERATION, or the members of N+1 would
    receive N's assignment and two consumers would own one partition."""
    coord = await harness.start(nursery)
    harness.create_topic("t", 3)
    protocols = [("range", kio_subscription("t"))]
    a, b = await gather(lambda: harness.join_new("g", client_id="a", protocols=protocols),
                        lambda: harness.join_new("g", client_id="b", protocols=protocols))
    old_gen, leader = a.generation_id, a.leader_id
    follower = b.member_id if leader == a.member_id else a.member_id
    old = {leader: assignment({"t": [0, 1]}), follower: assignment({"t": [2]})}
    synced = await gather(lambda: harness.sync("g", old_gen, leader, old),
                          lambda: harness.sync("g", old_gen, follower))
    assert [(s.error, s.assignment) for s in synced] == [(0, old[leader]), (0, old[follower])]

    # A third consumer joins: the group rebalances to generation N+1, same leader.
    joined: dict[str, Any] = {}

    async def newcomer_joins() -> None:
        joined["c"] = await harness.join_new("g", client_id="c", protocols=protocols)

    nursery.start_soon(newcomer_joins)
    await trio.testing.wait_all_tasks_blocked()
    assert harness.heartbeat("g", leader, old_gen) == E.rebalance_in_progress
    rejoined = await gather(lambda: harness.join("g", leader, protocols=protocols),
                            lambda: harness.join("g", follower, protocols=protocols))
    await trio.testing.wait_all_tasks_blocked()
    newcomer = joined["c"].member_id
    new_gen = old_gen + 1
    assert [r.generation_id for r in (*rejoined, joined["c"])] == [new_gen] * 3
    assert rejoined[0].leader_id == leader
    assert coord.groups["g"].state is GroupState.COMPLETING_REBALANCE

    # The followers of N+1 wait for the leader's assignment.
    followers: dict[str, Any] = {}

    async def follower_syncs(member_id: str) -> None:
        followers[member_id] = await harness.sync("g", new_gen, member_id)

    for member_id in (follower, newcomer):
        nursery.start_soon(follower_syncs, member_id)
    await trio.testing.wait_all_tasks_blocked()
    assert not followers

    # The leader's SyncGroup of generation N arrives late, with N's assignment: with it the
    # follower would keep partition 2, which N+1 gives the newcomer.
    stale = await harness.sync("g", old_gen, leader, old)
    assert stale.error == E.illegal_generation, stale
    await trio.testing.wait_all_tasks_blocked()
    assert not followers, f"a SyncGroup of generation {old_gen} ended the rebalance: {followers}"
    assert coord.groups["g"].state is GroupState.COMPLETING_REBALANCE

    new = {leader: assignment({"t": [0]}), follower: assignment({"t": [1]}),
           newcomer: assignment({"t": [2]})}
    mine = await harness.sync("g", new_gen, leader, new)
    await trio.testing.wait_all_tasks_blocked()
    received = {leader: (mine.error, mine.assignment),
                **{m: (r.error, r.assignment) for m, r in followers.items()}}
    assert received == {m: (0, part) for m, part in new.items()}
    assert coord.groups["g"].state is GroupState.STABLE
    assert coord.groups["g"].generation_id == new_gen

    # Once N+1 is Stable a SyncGroup of N is still refused and changes nothing.
    again = await harness.sync("g", old_gen, leader, old)
    assert again.error == E.illegal_generation, again
    assert {m.member_id: m.assignment for m in coord.describe_group("g").members} == new
    for member_id in new:
        assert (await harness.sync("g", new_gen, member_id)).assignment == new[member_id]


async def test_group_metadata_too_large_to_store_is_unknown_server_error(
        harness: Harness, nursery: trio.Nursery, autojump_clock: Any) -> None:
    """Kafka's storeGroup: an assignment whose group record is over the offsets topic's batch
    limit cannot be stored; the SyncGroup answers UNKNOWN_SERVER_ERROR (not the offset
    commit's INVALID_COMMIT_OFFSET_SIZE) and the group rebalances again, as in Kafka."""
    await harness.start(nursery)
    a = await harness.join_new("g", client_id="a")
    synced = await harness.sync("g", 1, a.member_id, {a.member_id: b"x" * (2 << 20)})
    assert synced.error == E.unknown_server_error
    assert harness.coord.groups["g"].state is GroupState.PREPARING_REBALANCE
    again = await harness.join("g", a.member_id)
    synced = await harness.sync("g", again.generation_id, a.member_id, {a.member_id: b"ok"})
    assert (synced.error, synced.assignment) == (E.none, b"ok")


async def test_session_expiry_mid_rebalance(harness: Harness, nursery: trio.Nursery,
                                            autojump_clock: Any, log_events: Any) -> None:
    """A member that neither rejoins nor heartbeats is dropped at its session timeout, and the
    rebalance completes then, long before the rebalance timeout."""
    await harness.start(nursery)
    leader, follower, gen = await stable_pair(harness, session_ms=10_000, rebalance_ms=60_000)
    start = trio.current_time()
    results: dict[str, Any] = {}

    async def newcomer() -> None:
        results["c"] = await harness.join_new("g", client_id="c", session_ms=10_000,
                                              rebalance_ms=60_000)

    nursery.start_soon(newcomer)
    await trio.testing.wait_all_tasks_blocked()
    rejoined = await harness.join("g", leader, session_ms=10_000, rebalance_ms=60_000)
    elapsed = trio.current_time() - start
    assert 9.9 <= elapsed <= 10.1, elapsed
    assert rejoined.generation_id == gen + 1
    await trio.testing.wait_all_tasks_blocked()  # the newcomer's join returns too
    assert results["c"].generation_id == gen + 1
    assert {m[0] for m in rejoined.members} == {leader, results["c"].member_id}
    expired = log_events.events("member_expired", member_id=follower)
    assert [e["reason"] for e in expired] == ["session_timeout"]
    assert expired[0]["state"] == "PreparingRebalance"


async def test_rebalance_timeout_drops_member_that_does_not_rejoin(
        harness: Harness, nursery: trio.Nursery, autojump_clock: Any, log_events: Any) -> None:
    """A member that keeps heartbeating but never rejoins is dropped at the rebalance timeout."""
    await harness.start(nursery)
    leader, follower, gen = await stable_pair(harness, session_ms=10_000, rebalance_ms=30_000)
    nursery.start_soon(keep_alive, harness, "g", follower, gen)
    start = trio.current_time()
    rejoined = await harness.join("g", leader, protocols=[("range", b"changed")],
                                  session_ms=10_000, rebalance_ms=30_000)
    assert trio.current_time() - start == pytest.approx(30.0)
    assert rejoined.generation_id == gen + 1
    assert [m[0] for m in rejoined.members] == [leader]
    assert log_events.events("member_expired", member_id=follower, reason="rebalance_timeout")
    assert harness.heartbeat("g", follower, gen) == E.unknown_member_id


async def test_member_that_never_syncs_is_removed(harness: Harness, nursery: trio.Nursery,
                                                  autojump_clock: Any, log_events: Any) -> None:
    """After the join, a member that never sends SyncGroup is removed at the rebalance timeout
    and the group rebalances without it."""
    await harness.start(nursery)
    kw = {"session_ms": 60_000, "rebalance_ms": 10_000}
    a, b = await gather(lambda: harness.join_new("g", client_id="a", **kw),
                        lambda: harness.join_new("g", client_id="b", **kw))
    leader = a.leader_id
    silent = b.member_id if leader == a.member_id else a.member_id
    start = trio.current_time()
    synced = await harness.sync("g", 1, leader, {leader: b"x", silent: b"y"})
    assert synced.assignment == b"x"
    nursery.start_soon(keep_alive, harness, "g", leader, 1)
    with trio.fail_after(60):
        while harness.coord.groups["g"].state is not GroupState.PREPARING_REBALANCE:
            await trio.sleep(0.5)
    assert trio.current_time() - start == pytest.approx(10.0, abs=0.6)
    assert log_events.events("member_expired", member_id=silent, reason="sync_timeout")
    assert silent not in harness.coord.groups["g"].members
    again = await harness.join("g", leader, **kw)
    assert again.generation_id == 2 and [m[0] for m in again.members] == [leader]


async def test_leader_leaves_during_rebalance(harness: Harness, nursery: trio.Nursery,
                                              autojump_clock: Any, log_events: Any) -> None:
    await harness.start(nursery)
    leader, follower, gen = await stable_pair(harness)
    results: dict[str, Any] = {}

    async def join(name: str, member_id: str = "") -> None:
        if member_id:
            results[name] = await harness.join("g", member_id)
        else:
            results[name] = await harness.join_new("g", client_id=name)

    nursery.start_soon(join, "c")
    await trio.testing.wait_all_tasks_blocked()
    nursery.start_soon(join, "b", follower)
    await trio.testing.wait_all_tasks_blocked()
    top, errors = harness.coord.leave_group("g", [(leader, None, "shutting down")])
    assert (top, errors) == (0, [0])
    await trio.testing.wait_all_tasks_blocked()
    b, c = results["b"], results["c"]
    assert b.generation_id == c.generation_id == gen + 1
    new_leader = b.leader_id
    assert new_leader in (follower, c.member_id) and new_leader != leader
    leader_view = b if b.member_id == new_leader else c
    assert {m[0] for m in leader_view.members} == {follower, c.member_id}
    assert log_events.events("member_left", member_id=leader, reason="shutting down")


async def test_leave_group_batch_and_static_removal(harness: Harness, nursery: trio.Nursery,
                                                    autojump_clock: Any) -> None:
    await harness.start(nursery)
    a, b = await gather(lambda: harness.join("g", instance="i-a", require_known=False),
                        lambda: harness.join("g", instance="i-b", require_known=False))
    await gather(lambda: harness.sync("g", 1, a.member_id, instance="i-a"),
                 lambda: harness.sync("g", 1, b.member_id, instance="i-b"))
    top, errors = harness.coord.leave_group("g", [
        ("", "i-a", None),                  # administrative removal by instance id
        (b.member_id, "i-wrong", None),     # unknown instance: member id decides
        ("ghost", None, None),
        ("", "i-unknown", None)])
    assert top == 0
    assert errors == [0, 0, E.unknown_member_id, E.unknown_member_id]
    await trio.testing.wait_all_tasks_blocked()
    group = harness.coord.groups["g"]
    assert group.state is GroupState.EMPTY and not group.members
    assert harness.coord.leave_group("nope", [("x", None, None)]) == (0, [E.unknown_member_id])


async def test_fenced_static_member(harness: Harness, nursery: trio.Nursery,
                                    autojump_clock: Any) -> None:
    await harness.start(nursery)
    a = await harness.join("g", instance="i-a", require_known=False)
    await harness.sync("g", 1, a.member_id, {a.member_id: b"p"}, instance="i-a")
    assert harness.heartbeat("g", "other-id", 1, instance="i-a") == E.fenced_instance_id
    assert harness.coord.leave_group("g", [("other-id", "i-a", None)]) == (
        0, [E.fenced_instance_id])


async def test_static_member_restart_without_rebalance(
        harness: Harness, nursery: trio.Nursery, autojump_clock: Any, log_events: Any) -> None:
    await harness.start(nursery)
    a, b = await gather(lambda: harness.join("g", instance="i-a", require_known=False),
                        lambda: harness.join("g", instance="i-b", require_known=False))
    leader = a.leader_id
    assign = {a.member_id: b"pa", b.member_id: b"pb"}
    await gather(lambda: harness.sync("g", 1, a.member_id, assign, instance="i-a"),
                 lambda: harness.sync("g", 1, b.member_id, assign, instance="i-b"))
    restarted_instance, old_id = ("i-b", b.member_id) if leader == a.member_id else (
        "i-a", a.member_id)
    # The process restarts and joins again with its instance id and no member id.
    again = await harness.join("g", instance=restarted_instance, require_known=True)
    assert again.error == 0
    assert again.member_id != old_id
    assert again.generation_id == 1  # no new generation
    assert again.leader_id == leader  # the old leader id: nobody reassigns
    assert again.members == ()
    group = harness.coord.groups["g"]
    assert group.state is GroupState.STABLE
    assert not log_events.events("rebalance_started", generation=1)
    sync = await harness.sync("g", 1, again.member_id, instance=restarted_instance)
    assert sync.assignment == (b"pb" if restarted_instance == "i-b" else b"pa")
    # The old incarnation is fenced.
    assert harness.heartbeat("g", old_id, 1, instance=restarted_instance) == \
        E.fenced_instance_id
    assert log_events.events("static_member_replaced", rebalance=False)


async def test_static_member_with_new_protocols_rebalances(
        harness: Harness, nursery: trio.Nursery, autojump_clock: Any) -> None:
    await harness.start(nursery)
    a = await harness.join("g", instance="i-a", require_known=False)
    await harness.sync("g", 1, a.member_id, {a.member_id: b"p"}, instance="i-a")
    # Protocols nobody else supports are refused (the old incarnation is still counted)...
    refused = await harness.join("g", instance="i-a", protocols=[("cooperative-sticky", b"")],
                                 require_known=False)
    assert refused.error == E.inconsistent_group_protocol
    # ...a new preference changes the group's protocol, which takes a rebalance.
    again = await harness.join("g", instance="i-a",
                               protocols=[("cooperative-sticky", b""), ("range", b"meta")],
                               require_known=False)
    assert again.generation_id == 2
    assert again.protocol_name == "cooperative-sticky"


async def test_static_member_expires_after_session_timeout(
        harness: Harness, nursery: trio.Nursery, autojump_clock: Any) -> None:
    await harness.start(nursery)
    a = await harness.join("g", instance="i-a", require_known=False, session_ms=5_000)
    await harness.sync("g", 1, a.member_id, instance="i-a")
    await trio.sleep(5.1)
    group = harness.coord.groups["g"]
    assert not group.members and group.state is GroupState.EMPTY


async def test_initial_rebalance_delay(harness: Harness, nursery: trio.Nursery,
                                       autojump_clock: Any) -> None:
    """An empty group waits group.initial.rebalance.delay.ms, and again while members arrive."""
    harness.overrides["group.initial.rebalance.delay.ms"] = "3000"
    await harness.start(nursery)
    start = trio.current_time()
    done: dict[str, float] = {}

    async def member(name: str, after: float) -> None:
        await trio.sleep(after)
        result = await harness.join_new("g", client_id=name)
        assert result.generation_id == 1
        done[name] = trio.current_time() - start

    async with trio.open_nursery() as inner:
        inner.start_soon(member, "a", 0)
        inner.start_soon(member, "b", 1)
    # 3 s after the first join a member had arrived, so the delay ran once more.
    assert done == {"a": pytest.approx(6.0), "b": pytest.approx(6.0)}


async def test_initial_delay_alone(harness: Harness, nursery: trio.Nursery,
                                   autojump_clock: Any) -> None:
    harness.overrides["group.initial.rebalance.delay.ms"] = "3000"
    await harness.start(nursery)
    start = trio.current_time()
    await harness.join_new("g")
    assert trio.current_time() - start == pytest.approx(3.0)


async def test_pending_member_expires(harness: Harness, nursery: trio.Nursery,
                                      autojump_clock: Any, log_events: Any) -> None:
    await harness.start(nursery)
    first = await harness.join("g", session_ms=4_000)
    assert first.error == E.member_id_required
    assert first.member_id in harness.coord.groups["g"].pending_members
    await trio.sleep(4.1)
    assert not harness.coord.groups["g"].pending_members
    assert log_events.events("member_expired", reason="pending_member_timeout")
    late = await harness.join("g", first.member_id)
    assert late.error == E.unknown_member_id


async def test_new_member_that_never_rejoins_after_rebalance_starts(
        harness: Harness, nursery: trio.Nursery, autojump_clock: Any) -> None:
    """The join of a lone member completes; sessions expire when heartbeats stop."""
    await harness.start(nursery)
    a = await harness.join_new("g", session_ms=3_000)
    await harness.sync("g", 1, a.member_id)
    await trio.sleep(2.5)
    assert harness.heartbeat("g", a.member_id, 1) == 0
    await trio.sleep(2.5)
    assert a.member_id in harness.coord.groups["g"].members  # the heartbeat moved the deadline
    await trio.sleep(1.0)
    assert a.member_id not in harness.coord.groups["g"].members


# ------------------------------------------------------------------------- offsets
async def test_simple_consumer_commit_and_fetch(harness: Harness, nursery: trio.Nursery,
                                                autojump_clock: Any) -> None:
    coord = await harness.start(nursery)
    harness.create_topic("t", 3)
    errors = await coord.commit_offsets(
        group_id="simple", generation_id=-1, member_id="", group_instance_id=None,
        offsets={("t", 0): OffsetCommitEntry(42, 3, "meta"), ("t", 1): OffsetCommitEntry(7),
                 ("t", 9): OffsetCommitEntry(1), ("missing", 0): OffsetCommitEntry(1)})
    assert errors == {("t", 0): 0, ("t", 1): 0, ("t", 9): E.unknown_topic_or_partition,
                      ("missing", 0): E.unknown_topic_or_partition}
    error, found = coord.fetch_offsets("simple", [("t", 0), ("t", 2)])
    assert error == 0
    assert found[("t", 2)] is None
    committed = found[("t", 0)]
    assert committed is not None
    assert (committed.offset, committed.leader_epoch, committed.metadata) == (42, 3, "meta")
    _, everything = coord.fetch_offsets("simple", None)
    assert sorted(everything) == [("t", 0), ("t", 1)]
    assert coord.list_groups()[1][0].state == "Empty"
    assert coord.list_groups()[1][0].protocol_type == ""
    # Unknown group: nothing committed, no error.
    assert coord.fetch_offsets("other", [("t", 0)]) == (0, {("t", 0): None})


async def test_member_commit_rules(harness: Harness, nursery: trio.Nursery,
                                   autojump_clock: Any) -> None:
    coord = await harness.start(nursery)
    harness.create_topic("t", 1)
    one = {("t", 0): OffsetCommitEntry(5)}
    leader, follower, gen = await stable_pair(harness)

    async def commit(member: str, generation: int, group: str = "g",
                     offsets: Any = one) -> Any:
        return await coord.commit_offsets(group_id=group, generation_id=generation,
                                          member_id=member, group_instance_id=None,
                                          offsets=offsets)

    assert await commit(leader, gen) == {("t", 0): 0}
    assert await commit(leader, gen + 1) == {("t", 0): E.illegal_generation}
    assert await commit("stranger", gen) == {("t", 0): E.unknown_member_id}
    # A simple commit while the group has members is refused.
    assert await commit("", -1) == {("t", 0): E.unknown_member_id}
    # A member commit to an unknown group cannot be of the current generation.
    assert await commit(leader, gen, group="elsewhere") == {("t", 0): E.illegal_generation}
    big = {("t", 0): OffsetCommitEntry(1, -1, "x" * 5000)}
    assert await commit(leader, gen, offsets=big) == {("t", 0): E.offset_metadata_too_large}
    # During CompletingRebalance commits are refused with REBALANCE_IN_PROGRESS.
    nursery.start_soon(harness.join, "g", follower)
    again = await harness.join("g", leader)
    assert coord.groups["g"].state is GroupState.COMPLETING_REBALANCE
    assert await commit(leader, again.generation_id) == {("t", 0): E.rebalance_in_progress}


async def test_delete_groups_and_offsets(harness: Harness, nursery: trio.Nursery,
                                         autojump_clock: Any) -> None:
    coord = await harness.start(nursery)
    harness.create_topic("t", 2)
    harness.create_topic("u", 1)
    a = await harness.join_new("g", protocols=[("range", subscription("t"))])
    await harness.sync("g", 1, a.member_id)
    await coord.commit_offsets(group_id="g", generation_id=1, member_id=a.member_id,
                               group_instance_id=None,
                               offsets={("t", 0): OffsetCommitEntry(1),
                                        ("u", 0): OffsetCommitEntry(2)})
    assert await coord.delete_groups(["g", "nope"]) == {
        "g": E.non_empty_group, "nope": E.group_id_not_found}
    # OffsetDelete: the subscribed topic is protected, the other one goes.
    error, results = await coord.delete_offsets("g", [("t", 0), ("u", 0), ("zz", 0)])
    assert error == 0
    assert results == {("t", 0): E.group_subscribed_to_topic, ("u", 0): 0,
                       ("zz", 0): E.unknown_topic_or_partition}
    assert coord.fetch_offsets("g", [("u", 0)])[1] == {("u", 0): None}
    assert await coord.delete_offsets("nope", [("t", 0)]) == (E.group_id_not_found, {})
    coord.leave_group("g", [(a.member_id, None, None)])
    await trio.testing.wait_all_tasks_blocked()
    assert coord.groups["g"].state is GroupState.EMPTY
    assert await coord.delete_groups(["g"]) == {"g": 0}
    assert "g" not in coord.groups
    assert await coord.delete_groups(["g"]) == {"g": E.group_id_not_found}
    assert coord.describe_group("g").state == "Dead"


async def test_list_groups_state_filter(harness: Harness, nursery: trio.Nursery,
                                        autojump_clock: Any) -> None:
    coord = await harness.start(nursery)
    harness.create_topic("t", 1)
    await stable_pair(harness, "stable-group")
    await coord.commit_offsets(group_id="simple", generation_id=-1, member_id="",
                               group_instance_id=None, offsets={("t", 0): OffsetCommitEntry(1)})
    _, everything = coord.list_groups()
    assert {(g.group_id, g.state) for g in everything} == {
        ("stable-group", "Stable"), ("simple", "Empty")}
    _, stable = coord.list_groups(["stable"])
    assert [g.group_id for g in stable] == ["stable-group"]


async def test_offsets_and_groups_survive_restart(tmp_path: Path, autojump_clock: Any) -> None:
    data = tmp_path / "data"
    first = Harness(data, {})
    async with trio.open_nursery() as nursery:
        coord = await first.start(nursery)
        first.create_topic("t", 2)
        leader, follower, gen = await stable_pair(first, session_ms=20_000)
        await coord.commit_offsets(group_id="g", generation_id=gen, member_id=leader,
                                   group_instance_id=None,
                                   offsets={("t", 0): OffsetCommitEntry(10, 1, "m0"),
                                            ("t", 1): OffsetCommitEntry(11)})
        await coord.commit_offsets(group_id="g", generation_id=gen, member_id=follower,
                                   group_instance_id=None,
                                   offsets={("t", 1): OffsetCommitEntry(12)})
        await coord.commit_offsets(group_id="gone", generation_id=-1, member_id="",
                                   group_instance_id=None,
                                   offsets={("t", 0): OffsetCommitEntry(1)})
        assert await coord.delete_groups(["gone"]) == {"gone": 0}
        await first.stop()
        nursery.cancel_scope.cancel()

    second = Harness(data, {})
    async with trio.open_nursery() as nursery:
        coord = await second.start(nursery)
        assert "gone" not in coord.groups
        group = coord.groups["g"]
        assert group.state is GroupState.STABLE
        assert group.generation_id == gen
        assert set(group.members) == {leader, follower}
        assert group.leader_id == leader
        assert group.members[follower].assignment == b"for-follower"
        _, found = coord.fetch_offsets("g", None)
        assert {tp: (c.offset, c.metadata) for tp, c in found.items() if c} == {
            ("t", 0): (10, "m0"), ("t", 1): (12, "")}
        # The members carry on with heartbeats after the restart...
        assert second.heartbeat("g", leader, gen) == 0
        # ...and one that never comes back expires after its session timeout.
        nursery.start_soon(keep_alive, second, "g", leader, gen)
        await trio.sleep(21)
        assert follower not in group.members
        assert group.state is GroupState.PREPARING_REBALANCE
        nursery.cancel_scope.cancel()


async def test_offsets_of_empty_groups_expire(harness: Harness, nursery: trio.Nursery,
                                              autojump_clock: Any, log_events: Any) -> None:
    harness.overrides.update({"offsets.retention.minutes": "1",
                              "offsets.retention.check.interval.ms": "1000"})
    coord = await harness.start(nursery)
    harness.create_topic("t", 1)
    one = {("t", 0): OffsetCommitEntry(3)}
    await coord.commit_offsets(group_id="simple", generation_id=-1, member_id="",
                               group_instance_id=None, offsets=one)
    # A real consumer subscription: with metadata the coordinator cannot parse, it treats every
    # topic as subscribed and keeps every offset, whatever the expiry rule.
    a = await harness.join_new("consumers", protocols=[("range", kio_subscription("t"))])
    await harness.sync("consumers", 1, a.member_id)
    assert coord.groups["consumers"].subscribed_topics == frozenset({"t"})
    await coord.commit_offsets(group_id="consumers", generation_id=1, member_id=a.member_id,
                               group_instance_id=None, offsets=one)
    nursery.start_soon(keep_alive, harness, "consumers", a.member_id, 1)
    await trio.sleep(61)
    # The simple group's offset is older than the retention: gone, with the group.
    assert "simple" not in coord.groups
    # The consumer group is Stable and subscribes to t: its offset stays.
    assert coord.groups["consumers"].state is GroupState.STABLE
    assert list(coord.fetch_offsets("consumers", None)[1]) == [("t", 0)]
    assert not log_events.events("offsets_expired", group_id="consumers")
    assert log_events.events("offsets_expired", group_id="simple")
    assert log_events.events("group_deleted", group_id="simple")


async def test_a_stable_group_keeps_the_offsets_of_the_topics_it_subscribes_to(
        harness: Harness, nursery: trio.Nursery, autojump_clock: Any, log_events: Any) -> None:
    """Issue 37, rule 4, Kafka's expiry rule for a Stable consumer group: past the retention
    the offsets of topics no member subscribes to expire; those of subscribed topics stay, how
    old their commit may be (the consumers still use them)."""
    harness.overrides.update({"offsets.retention.minutes": "1",
                              "offsets.retention.check.interval.ms": "1000"})
    coord = await harness.start(nursery)
    harness.create_topic("t", 2)
    harness.create_topic("u", 1)
    # Two consumers, both subscribed to t only, each with what Java sends (v3, owned partitions).
    a, b = await gather(
        lambda: harness.join_new("g", client_id="a",
                                 protocols=[("range", kio_subscription("t"))]),
        lambda: harness.join_new("g", client_id="b",
                                 protocols=[("range", kio_subscription("t", owned={"t": [1]},
                                                                      generation=4))]))
    gen, leader = a.generation_id, a.leader_id
    follower = b.member_id if leader == a.member_id else a.member_id
    parts = {leader: assignment({"t": [0]}), follower: assignment({"t": [1]})}
    synced = await gather(lambda: harness.sync("g", gen, leader, parts),
                          lambda: harness.sync("g", gen, follower))
    assert [s.error for s in synced] == [0, 0]
    group = coord.groups["g"]
    # The subscriptions were parsed (unparseable ones leave this None: every topic counts as
    # subscribed and nothing would ever expire, which would make this test pass for nothing).
    assert group.subscribed_topics == frozenset({"t"})
    assert not group.is_subscribed_to("u")
    # Offsets for t (subscribed) and u (once consumed, say, before a subscription change).
    errors = await coord.commit_offsets(
        group_id="g", generation_id=gen, member_id=leader, group_instance_id=None,
        offsets={("t", 0): OffsetCommitEntry(10), ("t", 1): OffsetCommitEntry(11),
                 ("u", 0): OffsetCommitEntry(12)})
    assert errors == {("t", 0): 0, ("t", 1): 0, ("u", 0): 0}
    nursery.start_soon(keep_alive, harness, "g", leader, gen)
    nursery.start_soon(keep_alive, harness, "g", follower, gen)

    await trio.sleep(30)  # half the retention: nothing expires yet
    assert sorted(coord.fetch_offsets("g", None)[1]) == [("t", 0), ("t", 1), ("u", 0)]
    await trio.sleep(31)  # past the retention (60 s) and a check (every second)
    assert group.state is GroupState.STABLE and group.generation_id == gen
    assert coord.groups["g"] is group
    error, kept = coord.fetch_offsets("g", None)
    assert error == 0
    # t is subscribed: its offsets stay, however old; u's expired.
    assert {tp: c.offset for tp, c in kept.items() if c is not None} == {
        ("t", 0): 10, ("t", 1): 11}
    assert coord.fetch_offsets("g", [("u", 0)])[1] == {("u", 0): None}
    assert [(e["partitions"], e["state"]) for e in
            log_events.events("offsets_expired", group_id="g")] == [(1, "Stable")]


async def test_a_group_removed_with_its_expired_offsets_stays_removed_after_a_restart(
        harness: Harness, nursery: trio.Nursery, autojump_clock: Any) -> None:
    # The soak probe: groups of expired offsets came back at every load, each offset record
    # without a tombstone (compaction kept them for good).
    harness.overrides.update({"offsets.retention.minutes": "1",
                              "offsets.retention.check.interval.ms": "1000"})
    coord = await harness.start(nursery)
    harness.create_topic("t", 1)
    for n in range(5):
        await coord.commit_offsets(group_id=f"g{n}", generation_id=-1, member_id="",
                                   group_instance_id=None, offsets={("t", 0): OffsetCommitEntry(n)})
    await trio.sleep(61)
    assert not coord.groups
    await harness.stop()

    again = Harness(harness.data_dir, harness.overrides)
    async with trio.open_nursery() as inner:
        assert not (await again.start(inner)).groups
        inner.cancel_scope.cancel()


def test_partition_for_matches_kafka() -> None:
    from trio_broker.coordinator.records import java_string_hash, partition_for

    assert java_string_hash("abc") == 96354
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("abc", 50) == 96354 % 50
    assert java_string_hash("\U0001F600") == (0xD83D * 31 + 0xDE00)
