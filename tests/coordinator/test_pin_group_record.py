"""What a classic group stores in ``__consumer_offsets`` and what a coordinator loading that
partition rebuilds from it (Kafka's ``GroupMetadataManager.storeGroup`` and
``loadGroupsAndOffsets``): a broker restart or a coordinator moving must give back the same
generation, protocol, leader and members, so that consumers rejoin without a rebalance and their
offsets stay. The mutation run over ``coordinator/classic_state`` found ``group_record``,
``restore_group`` and ``ClassicGroups.restore`` pinned only by wire-level tests outside the fast
selection (docs/development.md, "Sixth run")."""

from __future__ import annotations

from tests.coordinator.test_classic_state import Driver
from trio_broker.coordinator.classic_state import (
    group_record,
    join_key,
    member_key,
    restore_group,
)
from trio_broker.coordinator.group import CommittedOffset, Group, GroupState, Member
from trio_broker.coordinator.records import (
    GroupKey,
    GroupValue,
    MemberValue,
    decode_group_value,
    decode_key,
)
from trio_broker.testing.client import subscription

NOW = 1_700_000_000_000


def two_member_group(d: Driver) -> tuple[str, str]:
    """A Stable group: static ``i1`` (the leader) and a dynamic member, each preferring
    "roundrobin" over "range" with their own client id, host and timeouts. Their ids."""
    protocols = [("roundrobin", subscription("t1")), ("range", subscription("r"))]
    first = d.join(group_instance_id="i1", client_id="c1", client_host="/10.0.0.1",
                   session_timeout_ms=11_000, rebalance_timeout_ms=31_000, protocols=protocols)
    second_id = d.join(client_id="c2").reply.member_id  # type: ignore[union-attr]
    second = d.join(second_id, client_id="c2", client_host="/10.0.0.2",
                    session_timeout_ms=12_000, rebalance_timeout_ms=32_000,
                    protocols=[("roundrobin", subscription("t1", "t2")),
                               ("range", subscription("r2"))])
    d.finish_join()
    assert first.ticket is not None and second.ticket is not None
    leader = d.answers[first.ticket].member_id
    assert d.answers[first.ticket].leader_id == leader
    d.sync(leader, 1, {leader: b"for-leader", second_id: b"for-second"})
    d.sync(second_id, 1)
    d.flush()
    assert d.core.groups["g"].state is GroupState.STABLE
    return leader, second_id


def test_a_stable_group_is_stored_with_every_member_and_its_chosen_subscription() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    d.now = NOW
    leader, second = two_member_group(d)
    group = d.core.groups["g"]
    key, value = group_record(group)
    assert decode_key(key) == GroupKey("g")
    assert value is not None
    assert decode_group_value(value) == GroupValue(
        "consumer", 1, "roundrobin", leader, group.state_timestamp_ms, (
            MemberValue(leader, "i1", "c1", "/10.0.0.1", 31_000, 11_000, subscription("t1"),
                        b"for-leader"),
            MemberValue(second, None, "c2", "/10.0.0.2", 32_000, 12_000,
                        subscription("t1", "t2"), b"for-second")))
    assert group.state_timestamp_ms == NOW


def test_an_assignment_being_stored_replaces_only_the_members_it_names() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    leader, second = two_member_group(d)
    _, value = group_record(d.core.groups["g"], {second: b"new"})
    assert value is not None
    stored = decode_group_value(value)
    assert [m.assignment for m in stored.members] == [b"for-leader", b"new"]
    _, value = group_record(d.core.groups["g"], {})
    assert value is not None
    assert [m.assignment for m in decode_group_value(value).members] == [
        b"for-leader", b"for-second"]


def test_a_member_without_the_groups_protocol_is_stored_with_no_subscription() -> None:
    group = Group("g", state=GroupState.PREPARING_REBALANCE, protocol_type="consumer",
                  protocol_name="sticky")
    group.add_member(Member("m", None, "c", "/h", 30_000, 10_000, "consumer",
                            [("range", subscription("t"))], assignment=b"a"))
    _, value = group_record(group)
    assert value is not None
    [member] = decode_group_value(value).members
    assert (member.subscription, member.assignment) == (b"", b"a")


def test_an_empty_group_is_stored_without_protocol_type_name_or_leader() -> None:
    group = Group("simple", state_timestamp_ms=NOW)
    _, value = group_record(group)
    assert value is not None
    assert decode_group_value(value) == GroupValue("", 0, None, None, NOW, ())


def test_a_stored_stable_group_is_restored_stable_as_it_was() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    leader, second = two_member_group(d)
    before = d.core.groups["g"]
    offsets = {("t1", 0): CommittedOffset(5, -1, "meta", NOW)}
    _, value = group_record(before)
    assert value is not None
    after = restore_group("g", decode_group_value(value), offsets, NOW + 1)
    assert (after.state, after.generation_id, after.protocol_type, after.protocol_name,
            after.leader_id, after.state_timestamp_ms) == (
        GroupState.STABLE, 1, "consumer", "roundrobin", leader, before.state_timestamp_ms)
    assert list(after.members) == [leader, second]
    assert after.static_members == {"i1": leader}
    restored = after.members[second]
    assert (restored.group_instance_id, restored.client_id, restored.client_host,
            restored.rebalance_timeout_ms, restored.session_timeout_ms, restored.protocol_type,
            restored.protocols, restored.assignment) == (
        None, "c2", "/10.0.0.2", 32_000, 12_000, "consumer",
        [("roundrobin", subscription("t1", "t2"))], b"for-second")
    assert after.subscribed_topics == frozenset({"t1", "t2"})
    # The offsets are the group's own copy.
    assert after.offsets == offsets and after.offsets is not offsets
    # Stored again, it is the same record: nothing was lost on the way.
    assert group_record(after) == group_record(before)


def test_a_restored_group_keeps_serving_its_members_without_a_rebalance() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    leader, second = two_member_group(d)
    _, value = group_record(d.core.groups["g"])
    assert value is not None
    fresh = Driver(initial_rebalance_delay_ms=0)
    assert fresh.core.restore({"g": decode_group_value(value)}, {}) == 1
    beat = fresh.core.heartbeat(group_id="g", member_id=second, group_instance_id=None,
                                generation_id=1)
    assert beat.reply == 0
    synced = fresh.sync(second, 1)
    assert synced.reply is not None and synced.reply.assignment == b"for-second"


def test_a_record_without_a_state_time_takes_the_load_time() -> None:
    # Group value versions 0 and 1 have no state timestamp: decoded as -1.
    value = GroupValue("consumer", 3, "range", "m", -1, (
        MemberValue("m", None, "c", "/h", 30_000, 10_000, subscription("t"), b"a"),))
    assert restore_group("g", value, {}, NOW).state_timestamp_ms == NOW
    zero = GroupValue("consumer", 3, "range", "m", 0, value.members)
    assert restore_group("g", zero, {}, NOW).state_timestamp_ms == 0


def test_a_stored_leader_that_is_not_a_member_is_replaced_by_the_first_member() -> None:
    members = (MemberValue("a", None, "c", "/h", 30_000, 10_000, subscription("t"), b""),
               MemberValue("b", None, "c", "/h", 30_000, 10_000, subscription("t"), b""))
    assert restore_group("g", GroupValue("consumer", 2, "range", "gone", NOW, members), {},
                         NOW).leader_id == "a"
    assert restore_group("g", GroupValue("consumer", 2, "range", "b", NOW, members), {},
                         NOW).leader_id == "b"


def test_a_stored_empty_group_is_restored_empty_with_its_generation() -> None:
    offsets = {("t", 0): CommittedOffset(1, -1, "", NOW)}
    group = restore_group("g", GroupValue("", 4, None, None, NOW, ()), offsets, NOW + 5)
    assert (group.state, group.generation_id, group.protocol_type, group.protocol_name,
            group.leader_id, group.members, group.subscribed_topics, group.offsets) == (
        GroupState.EMPTY, 4, None, None, None, {}, None, offsets)
    assert group.state_timestamp_ms == NOW
    # Offsets without a group record: an Empty group of generation 0 (a simple consumer's).
    simple = restore_group("s", None, offsets, NOW)
    assert (simple.state, simple.generation_id, simple.protocol_type, simple.offsets) == (
        GroupState.EMPTY, 0, None, offsets)


def test_loading_skips_groups_deleted_since_and_counts_the_rest() -> None:
    d = Driver()
    offsets = {("t", 0): CommittedOffset(1, -1, "", NOW)}
    stable = GroupValue("consumer", 1, "range", "m", NOW, (
        MemberValue("m", None, "c", "/h", 30_000, 10_000, subscription("t"), b"a"),))
    count = d.core.restore(
        {"kept": stable, "deleted": None, "tombstoned-with-offsets": None},
        {"tombstoned-with-offsets": offsets, "only-offsets": offsets})
    assert count == 3
    assert sorted(d.core.groups) == ["kept", "only-offsets", "tombstoned-with-offsets"]
    assert d.core.groups["kept"].state is GroupState.STABLE
    assert d.core.groups["only-offsets"].offsets == offsets
    assert d.core.groups["only-offsets"].state_timestamp_ms == d.now  # the load time
    # A group loaded Stable arms its members' session timers when the shell starts.
    assert d.take(d.core.start_timers()).timers == ((member_key("kept", "m"), 10_000),)
    assert join_key("kept") not in d.timers
