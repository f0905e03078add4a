"""The classic group rules the mutation run found unpinned (docs/development.md, "Mutation
testing"): JoinGroup's argument checks, a rejoin with another protocol, static members
replaced, OffsetCommit's checks, OffsetDelete's answers, ListGroups' filter, DescribeGroups'
fields and what deleting a topic does to the groups. Each is driven synchronously through the
sans-IO rules, as tests/coordinator/test_classic_state.py does."""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from tests.coordinator.test_classic_state import Driver
from trio_broker.coordinator.classic_offsets import OffsetRecords
from trio_broker.coordinator.classic_state import join_key
from trio_broker.coordinator.group import GroupState
from trio_broker.coordinator.summaries import OffsetCommitEntry
from trio_broker.testing.client import subscription

E = ErrorCode
TOPICS = {"t": 3, "u": 1}.get


def commit(d: Driver, offsets: dict[tuple[str, int], Any], *, group: str = "g",
           generation: int = -1, member_id: str = "", instance: str | None = None) -> Any:
    """A commit's answer: at once, or once written (the writer succeeds)."""
    decision = d.take(d.offsets.commit_offsets(
        group_id=group, generation_id=generation, member_id=member_id,
        group_instance_id=instance,
        offsets={tp: OffsetCommitEntry(*v) if isinstance(v, tuple) else OffsetCommitEntry(v)
                 for tp, v in offsets.items()},
        partitions=TOPICS))
    if decision.ticket is None:
        return decision.reply
    d.flush()
    return d.answers.pop(decision.ticket)


# ------------------------------------------------------------------------------ JoinGroup
@pytest.mark.parametrize("timeout, error", [
    (999, E.invalid_session_timeout), (1000, E.none),
    (30_000, E.none), (30_001, E.invalid_session_timeout)])
def test_join_session_timeout_bounds_are_inclusive(timeout: int, error: int) -> None:
    d = Driver(max_session_timeout_ms=30_000)  # min 1000
    assert d.joins.join_precheck("g", timeout) == error


def test_join_refuses_an_empty_group_id() -> None:
    assert Driver().joins.join_precheck("", 10_000) == E.invalid_group_id


def test_a_member_rejoining_with_a_protocol_the_group_lacks_is_refused() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    member_id = d.stable_group_of_one()
    rejoin = d.join(member_id, protocols=[("sticky", b"m")])
    assert rejoin.reply is not None
    assert (rejoin.reply.error, rejoin.reply.member_id) == (E.inconsistent_group_protocol,
                                                           member_id)
    other_type = d.join(member_id, protocol_type="connect")
    assert other_type.reply is not None and other_type.reply.error == E.inconsistent_group_protocol
    assert d.core.groups["g"].state is GroupState.STABLE


def test_a_changed_subscription_reaches_the_leader() -> None:
    """A follower rejoining with new metadata starts a rebalance, and the leader's join
    answer carries the new metadata (the leader assigns from it)."""
    d = Driver(initial_rebalance_delay_ms=0)
    leader = d.stable_group_of_one()
    second = d.join().reply.member_id  # type: ignore[union-attr]
    leader_join = d.join(leader)
    follower_join = d.join(second)
    assert leader_join.ticket in d.answers and follower_join.ticket in d.answers
    generation = d.answers[leader_join.ticket].generation_id
    d.sync(leader, generation, {leader: b"a", second: b"b"})
    d.sync(second, generation)
    d.flush()
    again = d.join(second, protocols=[("range", b"new-subscription")])
    assert again.ticket is not None
    assert d.core.groups["g"].state is GroupState.PREPARING_REBALANCE
    lead = d.join(leader)
    result = d.answers[lead.ticket]  # type: ignore[index]
    assert dict((m, meta) for m, _, meta in result.members)[second] == b"new-subscription"


def test_a_static_member_with_new_metadata_is_replaced_and_fenced() -> None:
    """KIP-345: a static member rejoining without a member id gets a new id; the old id is
    fenced (FENCED_INSTANCE_ID), and the group keeps its assignment slot for it."""
    d = Driver(initial_rebalance_delay_ms=0)
    first = d.join(group_instance_id="i1")
    assert first.ticket is not None
    d.fire(join_key("g"))
    old_id = d.answers[first.ticket].member_id
    d.sync(old_id, 1, {old_id: b"a"})
    d.flush()
    again = d.join(group_instance_id="i1", protocols=[("range", b"other")])
    d.flush()
    new_id = d.core.groups["g"].static_member_id("i1")
    assert new_id not in (None, old_id)
    assert again.ticket is not None
    assert d.answers[again.ticket].member_id == new_id
    assert old_id not in d.core.groups["g"].members
    heartbeat = d.core.heartbeat(group_id="g", member_id=old_id, group_instance_id="i1",
                                 generation_id=1)
    assert heartbeat.reply == E.fenced_instance_id


# ---------------------------------------------------------------------------- OffsetCommit
@pytest.mark.parametrize("partition, error", [
    (-1, E.unknown_topic_or_partition), (0, E.none), (2, E.none),
    (3, E.unknown_topic_or_partition)])
def test_commit_partition_range(partition: int, error: int) -> None:
    assert commit(Driver(), {("t", partition): 5}) == {("t", partition): error}


def test_commit_to_an_unknown_topic() -> None:
    assert commit(Driver(), {("nope", 0): 5}) == {("nope", 0): E.unknown_topic_or_partition}


@pytest.mark.parametrize("size, error", [(4096, E.none), (4097, E.offset_metadata_too_large)])
def test_commit_metadata_limit_is_inclusive(size: int, error: int) -> None:
    d = Driver()  # offset.metadata.max.bytes 4096
    assert commit(d, {("t", 0): (5, -1, "m" * size)}) == {("t", 0): error}
    stored = d.core.groups["g"].offsets
    assert (("t", 0) in stored) is (error == E.none)


def test_simple_commit_stores_offset_epoch_metadata_and_time() -> None:
    d = Driver()
    assert commit(d, {("t", 1): (42, 7, "meta")}) == {("t", 1): E.none}
    stored = d.core.groups["g"].offsets[("t", 1)]
    assert (stored.offset, stored.leader_epoch, stored.metadata,
            stored.commit_timestamp_ms) == (42, 7, "meta", d.now)
    assert commit(d, {("t", 1): (43, -1, None)}) == {("t", 1): E.none}
    assert d.core.groups["g"].offsets[("t", 1)].metadata == ""


def test_a_simple_commit_while_the_group_has_members_is_refused() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    d.stable_group_of_one()
    assert commit(d, {("t", 0): 5}) == {("t", 0): E.unknown_member_id}


def test_a_members_commit_needs_its_generation() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    member_id = d.stable_group_of_one()
    generation = d.core.groups["g"].generation_id
    assert commit(d, {("t", 0): 5}, generation=generation + 1, member_id=member_id) == \
        {("t", 0): E.illegal_generation}
    assert commit(d, {("t", 0): 5}, generation=generation, member_id="stranger") == \
        {("t", 0): E.unknown_member_id}
    assert commit(d, {("t", 0): 5}, generation=generation, member_id=member_id) == \
        {("t", 0): E.none}


def test_a_members_commit_to_an_unknown_group_is_illegal_generation() -> None:
    assert commit(Driver(), {("t", 0): 5}, group="new", generation=1, member_id="m") == \
        {("t", 0): E.illegal_generation}


def test_a_commit_while_completing_the_rebalance_is_refused() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    first, joined = d.join_new()
    d.fire(join_key("g"))
    assert d.core.groups["g"].state is GroupState.COMPLETING_REBALANCE
    generation = d.answers[joined.ticket].generation_id  # type: ignore[index]
    assert commit(d, {("t", 0): 5}, generation=generation, member_id=first) == \
        {("t", 0): E.rebalance_in_progress}


# ---------------------------------------------------------------------------- OffsetDelete
def _delete(d: Driver, group: str, partitions: list[tuple[str, int]]) -> Any:
    decision = d.take(d.offsets.delete_offsets(group, partitions, TOPICS))
    if decision.ticket is None:
        return decision.reply
    d.flush()
    return d.answers.pop(decision.ticket)


def test_offset_delete_answers_per_partition_and_writes_tombstones() -> None:
    d = Driver()
    commit(d, {("t", 0): 5, ("t", 1): 6, ("u", 0): 7})
    answer = _delete(d, "g", [("t", 0), ("t", 7), ("u", 0), ("t", 2)])
    assert answer == (E.none, {("t", 0): E.none, ("t", 7): E.unknown_topic_or_partition,
                               ("u", 0): E.none, ("t", 2): E.none})
    assert set(d.core.groups["g"].offsets) == {("t", 1)}


def test_offset_delete_of_a_topic_the_stable_group_consumes_is_refused() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    member_id = d.join(protocols=[("range", subscription("t"))]).reply.member_id  # type: ignore[union-attr]
    joined = d.join(member_id, protocols=[("range", subscription("t"))])
    d.fire(join_key("g"))
    generation = d.answers[joined.ticket].generation_id  # type: ignore[index]
    d.sync(member_id, generation, {member_id: b"a"})
    d.flush()
    commit(d, {("t", 0): 5, ("u", 0): 6}, generation=generation, member_id=member_id)
    assert _delete(d, "g", [("t", 0), ("u", 0)]) == (
        E.none, {("t", 0): E.group_subscribed_to_topic, ("u", 0): E.none})


def test_offset_delete_of_an_unknown_group() -> None:
    assert _delete(Driver(), "nope", [("t", 0)]) == (E.group_id_not_found, {})


# ------------------------------------------------------------------- ListGroups, Describe
def test_list_groups_filters_by_state_ignoring_case() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    d.stable_group_of_one()
    commit(d, {("t", 0): 5}, group="simple")
    assert d.offsets.list_groups()[1] == [
        d.offsets.list_groups(["stable"])[1][0], d.offsets.list_groups(["EMPTY"])[1][0]]
    assert [g.group_id for g in d.offsets.list_groups(["Stable"])[1]] == ["g"]
    assert [g.group_id for g in d.offsets.list_groups(["empty"])[1]] == ["simple"]
    assert d.offsets.list_groups(["dead"])[1] == []


def test_describe_group_answers_members_and_their_assignment() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    member_id = d.stable_group_of_one()
    summary = d.offsets.describe_group("g")
    assert (summary.error, summary.state, summary.protocol_type, summary.protocol_name) == (
        E.none, "Stable", "consumer", "range")
    [member] = summary.members
    assert (member.member_id, member.client_id, member.client_host, member.metadata,
            member.assignment) == (member_id, "c", "/h", b"m", b"a")
    assert d.offsets.describe_group("nope").state == "Dead"


# ------------------------------------------------------------------------- deleted topics
def test_a_deleted_topics_offsets_leave_every_group_with_tombstones() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    commit(d, {("t", 0): 5, ("u", 0): 6}, group="a")
    commit(d, {("t", 1): 7}, group="b")
    removed = d.take(d.offsets.forget_topic("t"))
    assert removed.reply == 2
    assert set(d.core.groups["a"].offsets) == {("u", 0)}
    # b had nothing else: it goes, with its group tombstone.
    assert "b" not in d.core.groups and "b" in removed.removed_groups
    records = {w.records.group_id: w.records for w in d.writes
               if isinstance(w.records, OffsetRecords)}
    assert list(records["a"].removed) == [("t", 0)]
    assert set(records["b"].removed) == {("t", 1)} and records["b"].group_tombstone


# ------------------------------------------------------------------------ offset expiry
def _expire(d: Driver, retention: int, consumer: Any = None) -> int:
    return int(d.take(d.offsets.expire_offsets(
        retention, consumer or (lambda *args: None))).reply)


def test_a_simple_consumers_offsets_expire_each_from_its_own_commit() -> None:
    d = Driver()
    commit(d, {("t", 0): 1})
    d.now += 500
    commit(d, {("t", 1): 2})
    d.now += 499
    assert _expire(d, 1000) == 0  # the first is 999 ms old
    d.now += 1
    assert _expire(d, 1000) == 1  # exactly the retention: expired
    assert set(d.core.groups["g"].offsets) == {("t", 1)}
    d.now += 500
    assert _expire(d, 1000) == 1
    assert "g" not in d.core.groups  # nothing left: the group goes too


def test_an_empty_consumer_groups_offsets_expire_together_from_when_it_emptied() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    member_id = d.stable_group_of_one()
    generation = d.core.groups["g"].generation_id
    commit(d, {("t", 0): 1}, generation=generation, member_id=member_id)
    d.now += 10_000
    d.take(d.core.leave_group("g", [(member_id, None, None)]))
    if join_key("g") in d.timers:  # the rebalance the leave started completes with nobody
        d.fire(join_key("g"))
    d.flush()
    assert d.core.groups["g"].state is GroupState.EMPTY
    d.now += 999
    assert _expire(d, 1000) == 0  # the commit is older, but the group emptied 999 ms ago
    d.now += 1
    assert _expire(d, 1000) == 1


def test_a_stable_group_loses_only_offsets_of_topics_it_no_longer_subscribes_to() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    member_id = d.stable_group_of_one(subscription("t"))
    generation = d.core.groups["g"].generation_id
    commit(d, {("t", 0): 1, ("u", 0): 2}, generation=generation, member_id=member_id)
    d.now += 1000
    assert _expire(d, 1000) == 1
    assert set(d.core.groups["g"].offsets) == {("t", 0)}


def test_a_consumer_protocol_groups_expiry_is_the_consumer_groups_own() -> None:
    """The KIP-848 groups decide their own expiry: the classic rule is not applied to them."""
    d = Driver()
    commit(d, {("t", 0): 1, ("t", 1): 2})
    d.now += 10_000
    asked: list[tuple[str, int, int]] = []

    def consumer(group_id: str, offsets: Any, now: int, retention: int) -> Any:
        asked.append((group_id, now, retention))
        return [("t", 1)]

    assert _expire(d, 1000, consumer) == 1
    assert asked == [("g", d.now, 1000)]
    assert set(d.core.groups["g"].offsets) == {("t", 0)}


def test_delete_groups_writes_a_tombstone_per_offset_and_for_the_group() -> None:
    """Without them the next load brings the offsets (and the group) back."""
    d = Driver()
    commit(d, {("t", 0): 1, ("t", 2): 2, ("u", 0): 3})
    assert d.offsets.delete_group("nope").reply == E.group_id_not_found
    deleted = d.take(d.offsets.delete_group("g"))
    assert deleted.ticket is not None and "g" not in d.core.groups
    (write,) = d.writes
    assert isinstance(write.records, OffsetRecords)
    assert set(write.records.removed) == {("t", 0), ("t", 2), ("u", 0)}
    assert write.records.group_tombstone and not write.records.committed
    d.flush()
    assert d.answers[deleted.ticket] == E.none


def test_delete_groups_refuses_a_group_with_members() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    d.stable_group_of_one()
    assert d.offsets.delete_group("g").reply == E.non_empty_group
