"""OffsetCommit, OffsetDelete, DeleteGroups and the removal of offsets (a deleted topic,
retention) in the classic coordinator's sans-IO core, as Kafka's ``GroupCoordinator`` and
``GroupMetadataManager`` have them: what the mutation run over ``coordinator/classic_offsets``
found unpinned in the fast selection (docs/development.md, "Sixth run").

- ``validateOffsetCommit``: a commit naming a generation (even 0), a member id or an instance
  id is a member's and is checked as one (fenced instance, unknown member, generation); only a
  commit naming none of them is a simple consumer's, accepted by an Empty group alone.
- A commit moves the committing member's session deadline; it keeps an OffsetCommit v1
  timestamp (0 too), and a simple consumer's first commit creates the group at that time.
- Every offsets_committed line counts what was asked and what was refused.
- OffsetDelete answers while loading, for a group of another protocol, with nothing stored, and
  when its tombstones fail; DeleteGroups, a deleted topic and retention say why a group went.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode as E

from tests.coordinator.test_classic_state import Driver
from tests.coordinator.test_pin_group_rules import TOPICS, commit
from trio_broker.coordinator.classic_state import member_key
from trio_broker.coordinator.group import CommittedOffset, GroupState
from trio_broker.coordinator.records import GroupKey, OffsetKey, decode_key


def test_a_generation_of_zero_for_an_unknown_group_is_illegal_generation() -> None:
    d = Driver()
    assert commit(d, {("t", 0): 5}, generation=0) == {("t", 0): E.illegal_generation}
    assert "g" not in d.core.groups


def test_a_simple_consumers_first_commit_creates_the_group_at_that_time() -> None:
    d = Driver()
    d.now = 1_234_567
    assert commit(d, {("t", 0): 5}) == {("t", 0): E.none}
    group = d.core.groups["g"]
    assert (group.state, group.state_timestamp_ms, group.protocol_type) == (
        GroupState.EMPTY, 1_234_567, None)


def test_a_commit_naming_a_member_is_checked_as_a_members() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    static = d.stable_static_group()
    # Another member id under i1's instance id: fenced, before anything else.
    assert commit(d, {("t", 0): 1}, generation=1, member_id="other", instance="i1") == {
        ("t", 0): E.fenced_instance_id}
    assert commit(d, {("t", 0): 1}, generation=1, member_id=static, instance="i1") == {
        ("t", 0): E.none}


def test_a_commit_to_an_empty_group_naming_a_generation_or_an_instance_is_a_members() -> None:
    d = Driver()
    commit(d, {("t", 0): 1})  # an Empty group (a simple consumer's)
    # Generation 0 with no member id, or an instance id alone: checked as members, unknown.
    assert commit(d, {("t", 0): 2}, generation=0) == {("t", 0): E.unknown_member_id}
    assert commit(d, {("t", 0): 2}, instance="i9") == {("t", 0): E.unknown_member_id}
    assert commit(d, {("t", 0): 2}, member_id="m") == {("t", 0): E.unknown_member_id}
    assert commit(d, {("t", 0): 2}) == {("t", 0): E.none}


def test_a_members_commit_moves_its_session_deadline() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    member = d.stable_group_of_one()
    d.timers.clear()
    assert commit(d, {("t", 0): 1}, generation=1, member_id=member) == {("t", 0): E.none}
    assert d.timers == {member_key("g", member): 10_000}


def test_a_v1_commit_keeps_its_own_timestamp_even_zero() -> None:
    d = Driver()
    d.now = 9_000
    commit(d, {("t", 0): (1, -1, "", 12_345), ("t", 1): (2, -1, "", 0),
               ("t", 2): (3, -1, "", -1)})
    stamps = {tp: c.commit_timestamp_ms for tp, c in d.core.groups["g"].offsets.items()}
    assert stamps == {("t", 0): 12_345, ("t", 1): 0, ("t", 2): 9_000}


def committed_lines(d: Driver) -> list[dict[str, Any]]:
    lines = [dict(e.fields) for e in d.logged if e.name == "offsets_committed"]
    d.logged.clear()
    return lines


def test_the_committed_line_counts_what_was_asked_and_refused() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    member = d.stable_group_of_one()
    d.logged.clear()
    commit(d, {("t", 0): 1, ("t", 1): 2, ("nope", 0): 3}, generation=1, member_id=member)
    assert committed_lines(d) == [{"group_id": "g", "member_id": member, "generation": 1,
                                   "partitions": 3, "errors": 1}]
    # Nothing accepted: answered at once, and logged all the same.
    commit(d, {("nope", 0): 1, ("nope", 1): 1}, generation=1, member_id=member)
    assert committed_lines(d) == [{"group_id": "g", "member_id": member, "generation": 1,
                                   "partitions": 2, "errors": 2}]


def delete(d: Driver, partitions: list[tuple[str, int]], *, flush_error: int = 0) -> Any:
    decision = d.take(d.offsets.delete_offsets("g", partitions, TOPICS))
    if decision.ticket is None:
        return decision.reply
    d.flush(flush_error)
    return d.answers.pop(decision.ticket)


def test_offset_delete_answers() -> None:
    d = Driver()
    commit(d, {("t", 0): 1, ("t", 1): 2})
    # Nothing stored for the partitions named: answered at once, nothing written.
    assert delete(d, [("t", 2)]) == (E.none, {("t", 2): E.none})
    assert d.writes == []
    # The last partition of a topic exists, the next one does not.
    assert delete(d, [("t", 3), ("u", 0), ("u", 1)]) == (
        E.none, {("t", 3): E.unknown_topic_or_partition, ("u", 0): E.none,
                 ("u", 1): E.unknown_topic_or_partition})
    # The tombstones' write fails: the error, and the offsets stay.
    assert delete(d, [("t", 0)], flush_error=E.not_coordinator) == (E.not_coordinator, {})
    assert set(d.core.groups["g"].offsets) == {("t", 0), ("t", 1)}
    d.core.loaded = False
    assert delete(d, [("t", 0)]) == (E.coordinator_load_in_progress, {})


def test_offset_delete_refuses_a_non_empty_group_of_another_protocol() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    member, _ = d.join_new(protocol_type="connect")
    assert delete(d, [("t", 0)]) == (E.non_empty_group, {})


def test_offset_delete_writes_the_groups_tombstones() -> None:
    d = Driver()
    commit(d, {("t", 0): 1, ("t", 1): 2})
    decision = d.offsets.delete_offsets("g", [("t", 1)], TOPICS)
    [write] = decision.writes
    assert [(decode_key(k), v) for k, v in write.records.encode()] == [
        (OffsetKey("g", "t", 1), None)]


def test_an_offset_gone_before_its_tombstone_is_written_is_no_error() -> None:
    d = Driver()
    commit(d, {("t", 0): 1, ("u", 0): 2})
    decision = d.take(d.offsets.delete_offsets("g", [("t", 0)], TOPICS))
    d.take(d.offsets.forget_topic("t"))  # the topic is deleted meanwhile
    d.flush()
    assert decision.ticket is not None
    assert d.answers[decision.ticket] == (E.none, {("t", 0): E.none})
    assert set(d.core.groups["g"].offsets) == {("u", 0)}


def deleted_lines(d: Driver) -> list[dict[str, Any]]:
    lines = [dict(e.fields) for e in d.logged if e.name == "group_deleted"]
    d.logged.clear()
    return lines


def test_delete_groups_answers_while_loading_and_says_why_a_group_went() -> None:
    d = Driver()
    commit(d, {("t", 0): 1})
    d.core.loaded = False
    assert d.offsets.delete_group("g").reply == E.coordinator_load_in_progress
    d.core.loaded = True
    d.logged.clear()
    deleted = d.take(d.offsets.delete_group("g"))
    assert deleted_lines(d) == [{"group_id": "g", "reason": "DeleteGroups"}]
    [write] = d.writes
    assert [decode_key(k) for k, _ in write.records.encode()] == [
        OffsetKey("g", "t", 0), GroupKey("g")]
    d.flush()
    assert deleted.ticket is not None and d.answers == {deleted.ticket: E.none}


def test_a_deleted_topic_leaves_every_group_and_takes_the_empty_ones() -> None:
    d = Driver()
    commit(d, {("u", 0): 1}, group="other")  # first, and without the topic
    commit(d, {("t", 0): 1, ("t", 1): 1}, group="g")
    commit(d, {("t", 0): 1, ("u", 0): 1}, group="h")
    d.logged.clear()
    removed = d.take(d.offsets.forget_topic("t"))
    assert removed.reply == 3
    assert sorted(d.core.groups) == ["h", "other"]
    assert deleted_lines(d) == [{"group_id": "g", "reason": "topic deleted"}]
    d.flush()
    assert d.answers == {}  # nobody waits for these tombstones
    d.core.running = False
    assert d.offsets.forget_topic("u").reply == 0


def test_retention_counts_every_groups_expired_offsets_and_says_why_groups_went() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    member = d.stable_group_of_one()
    d.take(d.core.leave_group("g", [(member, None, None)]))  # Empty, without offsets
    commit(d, {("t", 0): 1, ("t", 1): 1}, group="a")
    commit(d, {("t", 2): 1}, group="b")
    d.now += 1000
    d.logged.clear()
    expired = d.take(d.offsets.expire_offsets(1000, lambda *_: None))
    assert expired.reply == 3
    assert [(line["group_id"], line["reason"]) for line in deleted_lines(d)] == [
        ("g", "empty group"), ("a", "offsets expired"), ("b", "offsets expired")]


def test_stored_offsets_keep_what_was_committed() -> None:
    d = Driver()
    d.now = 50
    commit(d, {("t", 0): (7, 3, "meta", -1)})
    assert d.core.groups["g"].offsets == {("t", 0): CommittedOffset(7, 3, "meta", 50)}
