"""The classic group rules driven synchronously: no nursery, no clock but the test's, every
effect read off the returned decisions (the timers a decision arms are fired by hand)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from trio_broker.coordinator.classic_join import NEW_MEMBER_JOIN_TIMEOUT_MS, ClassicJoins
from trio_broker.coordinator.classic_offsets import ClassicOffsets
from trio_broker.coordinator.classic_state import (
    ClassicGroups,
    Decision,
    Event,
    LeaderSynced,
    Rules,
    join_key,
    member_key,
    pending_key,
    sync_key,
)
from trio_broker.coordinator.group import GroupState, JoinResult, SyncResult
from trio_broker.coordinator.summaries import OffsetCommitEntry

E = ErrorCode


class Driver:
    """Plays the shell: keeps what decisions ask for so the test can look and act."""

    def __init__(self, **rules: Any) -> None:
        self.now = 1_000_000
        #: Added to the monotonic clock (s): a fraction of a millisecond, for durations.
        self.monotonic_extra = 0.0
        ids = itertools.count(1)
        self.core = ClassicGroups(Rules(**{"min_session_timeout_ms": 1000, **rules}),
                                  wall_ms=lambda: self.now,
                                  monotonic=lambda: self.now / 1000 + self.monotonic_extra,
                                  new_uuid=lambda: f"u{next(ids)}")
        self.core.loaded = self.core.running = True
        self.joins = ClassicJoins(self.core)
        self.offsets = ClassicOffsets(self.core)
        self.timers: dict[tuple[str, ...], int] = {}
        self.writes: list[Any] = []
        self.answers: dict[int, Any] = {}
        self.events: list[str] = []
        #: Every event emitted, with its fields.
        self.logged: list[Event] = []

    def take(self, decision: Decision[Any]) -> Decision[Any]:
        for key, delay in decision.timers:
            if delay is None:
                self.timers.pop(key, None)
            else:
                self.timers[key] = delay
        self.writes.extend(decision.writes)
        self.answers.update(decision.answers)
        self.events.extend(e.name for e in decision.events)
        self.logged.extend(decision.events)
        return decision

    def fire(self, key: tuple[str, ...]) -> Decision[Any]:
        assert key in self.timers, f"{key} is not armed"
        del self.timers[key]
        return self.take(self.core.timer_fired(key))

    def flush(self, error: int = 0) -> None:
        """The writer: every queued write is done with ``error``."""
        while self.writes:
            write = self.writes.pop(0)
            if write.then is not None:
                self.take(self.core.written(write.then, error))

    def join(self, member_id: str = "", **kw: Any) -> Decision[JoinResult]:
        args: dict[str, Any] = {
            "group_id": "g", "member_id": member_id, "group_instance_id": None,
            "client_id": "c", "client_host": "/h", "session_timeout_ms": 10_000,
            "rebalance_timeout_ms": 30_000, "protocol_type": "consumer",
            "protocols": [("range", b"m")], "require_known_member_id": True, **kw}
        assert self.joins.join_precheck(args["group_id"], args["session_timeout_ms"]) == 0
        return self.take(self.joins.join_group(**args))

    def join_new(self, **kw: Any) -> tuple[str, Decision[JoinResult]]:
        """A new member: handed an id (KIP-394), then joining with it and the same ``kw``. Its
        member id and the join's decision."""
        member_id: str = self.join(**kw).reply.member_id  # type: ignore[union-attr]
        return member_id, self.join(member_id, **kw)

    def sync(self, member_id: str, generation: int, assignments: dict[str, bytes] | None = None,
             **fields: Any) -> Decision[SyncResult]:
        """SyncGroup; ``fields`` override the request's other fields."""
        args: dict[str, Any] = {
            "group_id": "g", "generation_id": generation, "member_id": member_id,
            "group_instance_id": None, "protocol_type": "consumer", "protocol_name": None,
            "assignments": assignments or {}, **fields}
        return self.take(self.core.sync_group(**args))

    def finish_join(self) -> None:
        """Fire the join timer until the join phase is over (the initial delay may extend)."""
        while self.core.groups["g"].state is GroupState.PREPARING_REBALANCE:
            self.fire(join_key("g"))

    def stable_static_group(self) -> str:
        """A Stable group of one static member (instance ``i1``, metadata ``m``, assignment
        ``a``): its member id."""
        joined = self.join(group_instance_id="i1")
        self.finish_join()
        assert joined.ticket is not None
        member_id: str = self.answers.pop(joined.ticket).member_id
        self.sync(member_id, self.core.groups["g"].generation_id, {member_id: b"a"})
        self.flush()
        return member_id

    def stable_group_of_one(self, metadata: bytes = b"m") -> str:
        """A Stable group of one member, joined with ``metadata`` for "range": its id."""
        protocols = [("range", metadata)]
        member_id = self.join(protocols=protocols).reply.member_id  # type: ignore[union-attr]
        joined = self.join(member_id, protocols=protocols)
        self.fire(join_key("g"))
        assert joined.ticket is not None
        generation = self.answers.pop(joined.ticket).generation_id
        synced = self.sync(member_id, generation, {member_id: b"a"})
        self.flush()
        assert synced.ticket is not None
        assert self.answers.pop(synced.ticket).assignment == b"a"
        return member_id


def test_a_new_member_is_handed_an_id_and_a_pending_timer() -> None:
    d = Driver()
    first = d.join()
    assert first.reply is not None and first.reply.error == E.member_id_required
    member_id = first.reply.member_id
    assert member_id == "c-u1"
    assert d.timers == {pending_key("g", member_id): 10_000}
    assert d.core.groups["g"].pending_members == {member_id}


def test_a_join_waits_for_the_initial_delay_then_answers_its_ticket() -> None:
    d = Driver(initial_rebalance_delay_ms=3000)
    member_id = d.join().reply.member_id  # type: ignore[union-attr]
    joined = d.join(member_id)
    assert joined.reply is None and joined.ticket is not None
    assert d.timers[join_key("g")] == 3000
    assert d.timers[member_key("g", member_id)] == NEW_MEMBER_JOIN_TIMEOUT_MS
    assert pending_key("g", member_id) not in d.timers
    assert d.core.groups["g"].state is GroupState.PREPARING_REBALANCE
    d.fire(join_key("g"))  # no one else came: the delay is not extended
    result = d.answers[joined.ticket]
    assert (result.error, result.generation_id, result.leader_id) == (E.none, 1, member_id)
    assert d.core.groups["g"].state is GroupState.COMPLETING_REBALANCE
    assert d.timers[member_key("g", member_id)] == 10_000  # now the session timeout
    assert d.timers[sync_key("g")] == 30_000


def test_the_leaders_sync_completes_once_its_assignment_is_written() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    member_id = d.join().reply.member_id  # type: ignore[union-attr]
    d.join(member_id)
    d.fire(join_key("g"))
    synced = d.sync(member_id, 1, {member_id: b"assignment"})
    assert synced.ticket is not None and synced.ticket not in d.answers
    [write] = d.writes
    assert isinstance(write.then, LeaderSynced)
    assert d.core.groups["g"].state is GroupState.COMPLETING_REBALANCE
    d.flush()
    assert d.answers[synced.ticket] == SyncResult(E.none, b"assignment", "consumer", "range")
    assert d.core.groups["g"].state is GroupState.STABLE
    assert "rebalance_completed" in d.events


def test_a_failed_assignment_write_fails_the_sync_and_rebalances() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    member_id = d.join().reply.member_id  # type: ignore[union-attr]
    d.join(member_id)
    d.fire(join_key("g"))
    synced = d.sync(member_id, 1, {member_id: b"x"})
    d.flush(E.coordinator_not_available)
    assert synced.ticket is not None
    assert d.answers[synced.ticket] == SyncResult(E.coordinator_not_available)
    assert d.core.groups["g"].state is GroupState.PREPARING_REBALANCE
    assert join_key("g") in d.timers and sync_key("g") not in d.timers


def test_a_heartbeat_moves_the_session_deadline() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    member_id = d.stable_group_of_one()
    d.timers.clear()
    beat = d.take(d.core.heartbeat(group_id="g", member_id=member_id, group_instance_id=None,
                                   generation_id=1))
    assert beat.reply == E.none
    assert d.timers == {member_key("g", member_id): 10_000}
    stale = d.core.heartbeat(group_id="g", member_id=member_id, group_instance_id=None,
                             generation_id=0)
    assert stale.reply == E.illegal_generation and stale.timers == ()


def test_a_session_timeout_empties_the_group_and_stores_it() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    member_id = d.stable_group_of_one()
    d.writes.clear()
    d.fire(member_key("g", member_id))
    group = d.core.groups["g"]
    assert member_id not in group.members
    assert "member_expired" in d.events
    # Nobody is left to rejoin: the rebalance ends at once (Kafka's tryCompleteElseWatch), not
    # after the rebalance timeout, and the group is stored Empty.
    assert group.state is GroupState.EMPTY and group.generation_id == 2
    assert join_key("g") not in d.timers
    [write] = d.writes  # the empty group's metadata
    assert write.partition == d.core.partition_for("g")


def test_a_member_waiting_in_a_rebalance_outlives_its_session_timeout() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    a = d.stable_group_of_one()
    b = d.join().reply.member_id  # type: ignore[union-attr]
    d.join(b)  # a new member: the group rebalances
    rejoin = d.join(a)
    assert rejoin.ticket is not None
    assert a in d.core.groups["g"].members
    # Everyone rejoined: the join phase completed at once.
    assert d.answers[rejoin.ticket].generation_id == 2
    assert d.core.groups["g"].state is GroupState.COMPLETING_REBALANCE
    synced = d.sync(b, 2)
    assert synced.ticket is not None
    # b waits on its sync: its session timer fires and is armed again instead of expiring it.
    d.fire(member_key("g", b))
    assert b in d.core.groups["g"].members
    assert d.timers[member_key("g", b)] == 10_000


def test_leaving_cancels_the_members_timer() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    member_id = d.stable_group_of_one()
    left = d.take(d.core.leave_group("g", [(member_id, None, "bye")]))
    assert left.reply == (E.none, [E.none])
    assert (member_key("g", member_id), None) in left.timers
    assert member_key("g", member_id) not in d.timers


def test_an_unclaimed_member_id_expires() -> None:
    d = Driver()
    member_id = d.join().reply.member_id  # type: ignore[union-attr]
    d.fire(pending_key("g", member_id))
    assert not d.core.groups["g"].pending_members
    assert "member_expired" in d.events


def test_a_static_member_restarting_keeps_the_group_stable() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    first = d.join(group_instance_id="i1")
    assert first.ticket is not None
    d.fire(join_key("g"))
    old_id = d.answers[first.ticket].member_id
    d.sync(old_id, 1, {old_id: b"a"})
    d.flush()
    again = d.join(group_instance_id="i1")
    assert again.ticket is not None and again.ticket not in d.answers
    assert member_key("g", old_id) not in d.timers
    new_id = d.core.groups["g"].static_member_id("i1")
    assert new_id is not None and new_id != old_id and d.timers[member_key("g", new_id)] == 10_000
    d.flush()
    result = d.answers[again.ticket]
    assert (result.error, result.member_id, result.leader_id) == (E.none, new_id, old_id)
    assert d.core.groups["g"].state is GroupState.STABLE


def test_resigning_answers_every_waiting_request() -> None:
    d = Driver(initial_rebalance_delay_ms=3000)
    member_id = d.join().reply.member_id  # type: ignore[union-attr]
    joined = d.join(member_id)
    d.take(d.core.resign())
    assert joined.ticket is not None
    assert d.answers[joined.ticket] == JoinResult(E.not_coordinator, member_id)
    assert not d.core.groups["g"].members[member_id].awaiting_join
    assert d.joins.join_precheck("g", 10_000) == E.not_coordinator


@pytest.mark.parametrize("error", [E.none, E.coordinator_not_available])
def test_a_commit_is_answered_once_written(error: ErrorCode) -> None:
    d = Driver()
    committed = d.take(d.offsets.commit_offsets(
        group_id="simple", generation_id=-1, member_id="", group_instance_id=None,
        offsets={("t", 0): OffsetCommitEntry(5), ("t", 9): OffsetCommitEntry(6)},
        partitions={"t": 2}.get))
    assert committed.ticket is not None
    assert d.core.groups["simple"].offsets == {}
    d.flush(error)
    assert d.answers[committed.ticket] == {("t", 0): error, ("t", 9): E.unknown_topic_or_partition}
    stored = d.core.groups["simple"].offsets
    assert (stored[("t", 0)].offset if stored else None) == (5 if not error else None)
    assert "offsets_committed" in d.events


def test_a_commit_with_nothing_to_write_is_answered_now() -> None:
    d = Driver()
    committed = d.offsets.commit_offsets(
        group_id="simple", generation_id=-1, member_id="", group_instance_id=None,
        offsets={("gone", 0): OffsetCommitEntry(1)}, partitions=lambda topic: None)
    assert committed.reply == {("gone", 0): E.unknown_topic_or_partition}
    assert committed.ticket is None and committed.writes == ()
