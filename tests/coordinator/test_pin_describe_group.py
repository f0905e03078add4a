"""DescribeGroups' answer for a classic group, field by field, as Kafka's
``ClassicGroup.summary`` gives it: nothing but the error while the coordinator loads; an
unknown group as Dead with empty fields; a Stable group's protocol, members (static instance
ids included), their metadata for that protocol and their assignments; a group in a
rebalance without protocol, metadata or assignments (neither is settled). The mutation run
over ``coordinator/classic_offsets`` found these fields unpinned (docs/development.md,
``ClassicOffsets.describe_group``)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from tests.coordinator.test_classic_state import Driver
from trio_broker.coordinator.summaries import GroupSummary, MemberSummary

E = ErrorCode


def test_a_loading_coordinator_answers_only_the_error() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    d.stable_static_group()
    d.core.loaded = False
    assert d.offsets.describe_group("g") == GroupSummary(
        E.coordinator_load_in_progress, "g", "", "", "", ())


def test_an_unknown_group_is_dead_with_empty_fields() -> None:
    assert Driver().offsets.describe_group("nope") == GroupSummary(
        E.none, "nope", "Dead", "", "", ())


def test_a_stable_group_names_its_protocol_members_metadata_and_assignments() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    member_id = d.stable_static_group()
    assert d.offsets.describe_group("g") == GroupSummary(
        E.none, "g", "Stable", "consumer", "range",
        (MemberSummary(member_id, "i1", "c", "/h", b"m", b"a"),))


def test_a_rebalancing_group_has_no_protocol_metadata_or_assignment_yet() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    member_id = d.stable_static_group()
    d.join(member_id, group_instance_id="i1", protocols=[("range", b"new")])  # a rebalance
    assert d.offsets.describe_group("g") == GroupSummary(
        E.none, "g", "CompletingRebalance", "consumer", "",
        (MemberSummary(member_id, "i1", "c", "/h", b"", b""),))


def test_a_group_made_by_a_simple_consumers_commit_is_empty_without_a_protocol_type() -> None:
    from tests.coordinator.test_pin_group_rules import commit

    d = Driver()
    assert commit(d, {("t", 0): 5}, group="simple") == {("t", 0): E.none}
    assert d.offsets.describe_group("simple") == GroupSummary(
        E.none, "simple", "Empty", "", "", ())
