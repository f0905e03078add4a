"""SyncGroup's answers in the classic group coordinator's sans-IO core, as Kafka's
``GroupCoordinator.handleSyncGroup`` gives them (KIP-394/KIP-559 included): the checks before
the group is looked at, an unknown group or member, a protocol the group does not use, a sync
during a rebalance, the answer in a Stable group, a second sync while waiting, and the
assignment of a member the leader left out. The mutation run over ``coordinator/classic_state``
found each of these unpinned (docs/development.md, ``ClassicGroups.sync_group``)."""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from tests.coordinator.test_classic_state import Driver
from trio_broker.coordinator.group import GroupState, SyncResult

E = ErrorCode


def sync(d: Driver, member_id: str, generation: int, *, instance_id: str | None = None,
         assignments: dict[str, bytes] | None = None, **fields: Any) -> Any:
    """SyncGroup naming the group's protocol (v5+) unless ``fields`` say otherwise."""
    return d.sync(member_id, generation, assignments, group_instance_id=instance_id,
                  **{"protocol_name": "range", **fields})


def refused(decision: Any) -> int:
    """The error of a SyncGroup answered at once."""
    assert decision.ticket is None and decision.reply is not None
    return int(decision.reply.error)


def completing_group_of_two(d: Driver) -> tuple[str, str, int]:
    """Two members joined, the join phase over: (leader, follower, generation), in
    CompletingRebalance."""
    ids = []
    for _ in range(2):
        member_id = d.join().reply.member_id  # type: ignore[union-attr]
        d.join(member_id)
        ids.append(member_id)
    d.finish_join()
    group = d.core.groups["g"]
    assert group.state is GroupState.COMPLETING_REBALANCE
    leader = group.leader_id
    assert leader is not None
    follower = next(m for m in ids if m != leader)
    return leader, follower, group.generation_id


@pytest.mark.parametrize(("loaded", "running", "error"), [
    (False, True, E.coordinator_load_in_progress),
    (True, False, E.coordinator_not_available),
])
def test_a_coordinator_not_ready_refuses_the_sync(loaded: bool, running: bool, error: int
                                                  ) -> None:
    d = Driver()
    member_id = d.stable_group_of_one()
    generation = d.core.groups["g"].generation_id
    d.core.loaded, d.core.running = loaded, running
    assert refused(sync(d, member_id, generation)) == error


def test_a_resigned_coordinator_answers_not_coordinator() -> None:
    d = Driver()
    member_id = d.stable_group_of_one()
    d.core.resigned = True
    assert refused(sync(d, member_id, d.core.groups["g"].generation_id)) == E.not_coordinator


def test_an_unknown_group_or_member_is_unknown_member_id() -> None:
    d = Driver()
    member_id = d.stable_group_of_one()
    generation = d.core.groups["g"].generation_id
    assert refused(sync(d, member_id, generation, group_id="nope")) == E.unknown_member_id
    assert refused(sync(d, "stranger", generation)) == E.unknown_member_id


def test_another_member_id_for_a_static_instance_is_fenced() -> None:
    """KIP-345: the instance id belongs to one member id; a sync naming it with another is
    FENCED_INSTANCE_ID, checked before the member id is looked up (an old id is no longer a
    member at all)."""
    d = Driver(initial_rebalance_delay_ms=0)
    joined = d.join(group_instance_id="i1")
    d.finish_join()
    assert joined.ticket is not None
    member_id = d.answers.pop(joined.ticket).member_id
    generation = d.core.groups["g"].generation_id
    assert refused(sync(d, "old-id", generation, instance_id="i1")) == E.fenced_instance_id
    assert refused(sync(d, "old-id", generation, instance_id="i2")) == E.unknown_member_id
    synced = sync(d, member_id, generation, instance_id="i1", assignments={member_id: b"s"})
    d.flush()
    assert d.answers.pop(synced.ticket) == SyncResult(E.none, b"s", "consumer", "range")


def test_a_dead_group_answers_coordinator_not_available() -> None:
    d = Driver()
    member_id = d.stable_group_of_one()
    group = d.core.groups["g"]
    group.state = GroupState.DEAD
    assert refused(sync(d, member_id, group.generation_id)) == E.coordinator_not_available


@pytest.mark.parametrize(("protocol_type", "protocol_name", "error"), [
    ("connect", "range", E.inconsistent_group_protocol),
    ("consumer", "roundrobin", E.inconsistent_group_protocol),
    ("connect", None, E.inconsistent_group_protocol),
    (None, "roundrobin", E.inconsistent_group_protocol),
    (None, None, E.none),  # before SyncGroup v5 the client names neither
    ("consumer", "range", E.none),
])
def test_a_sync_naming_another_protocol_is_refused(
        protocol_type: str | None, protocol_name: str | None, error: int) -> None:
    d = Driver()
    member_id = d.stable_group_of_one()
    decision = sync(d, member_id, d.core.groups["g"].generation_id,
                    protocol_type=protocol_type, protocol_name=protocol_name)
    assert refused(decision) == error


def test_a_stable_groups_sync_is_answered_at_once_with_the_assignment_and_protocol() -> None:
    d = Driver()
    member_id = d.stable_group_of_one()
    decision = sync(d, member_id, d.core.groups["g"].generation_id)
    assert decision.reply == SyncResult(E.none, b"a", "consumer", "range")
    assert "group_sync" in d.events


def test_a_sync_while_the_group_prepares_a_rebalance_is_rebalance_in_progress() -> None:
    d = Driver()
    member_id = d.stable_group_of_one()
    generation = d.core.groups["g"].generation_id
    d.join(d.join().reply.member_id)  # type: ignore[union-attr]  # a new member: a rebalance
    assert d.core.groups["g"].state is GroupState.PREPARING_REBALANCE
    assert refused(sync(d, member_id, generation)) == E.rebalance_in_progress


def test_a_second_sync_while_waiting_answers_the_first_with_rebalance_in_progress() -> None:
    d = Driver()
    leader, follower, generation = completing_group_of_two(d)
    first = sync(d, follower, generation)
    second = sync(d, follower, generation)
    assert first.ticket is not None and second.ticket is not None
    assert d.answers.pop(first.ticket) == SyncResult(E.rebalance_in_progress)
    assert second.ticket not in d.answers
    sync(d, leader, generation, assignments={leader: b"L", follower: b"F"})
    d.flush()
    assert d.answers.pop(second.ticket) == SyncResult(E.none, b"F", "consumer", "range")


def test_a_member_the_leader_left_out_gets_an_empty_assignment() -> None:
    d = Driver()
    leader, follower, generation = completing_group_of_two(d)
    waiting = sync(d, follower, generation)
    led = sync(d, leader, generation, assignments={leader: b"L"})
    d.flush()
    assert d.answers.pop(waiting.ticket) == SyncResult(E.none, b"", "consumer", "range")
    assert d.answers.pop(led.ticket) == SyncResult(E.none, b"L", "consumer", "range")
    assert d.core.groups["g"].members[follower].assignment == b""
