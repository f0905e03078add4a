"""The KIP-848 group state machine and assignors, sans-IO (no trio, no storage)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_broker.coordinator.assignors import range_assignor, uniform_assignor
from trio_broker.coordinator.consumer_group import (
    STABLE,
    UNRELEASED,
    UNREVOKED,
    ConsumerGroup,
    GroupSettings,
    HeartbeatError,
    HeartbeatRequest,
)

TOPICS = {"t": 6}


def tps(*pairs: tuple[str, int]) -> frozenset[tuple[str, int]]:
    return frozenset(pairs)


def t(*partitions: int) -> frozenset[tuple[str, int]]:
    return frozenset(("t", p) for p in partitions)


def join(group: ConsumerGroup, member: str, topics: tuple[str, ...] = ("t",), **kw: object
         ) -> object:
    return group.heartbeat(HeartbeatRequest(member, 0, subscribed_topic_names=topics, **kw),
                           TOPICS)  # type: ignore[arg-type]


def beat(group: ConsumerGroup, member: str, owned: frozenset[tuple[str, int]] | None = None,
         epoch: int | None = None) -> object:
    current = group.members[member].member_epoch if epoch is None else epoch
    return group.heartbeat(HeartbeatRequest(member, current, owned=owned), TOPICS)


# ------------------------------------------------------------------------------ assignors
def test_range_assignor_exact_assignment() -> None:
    subs = {"a": frozenset({"x", "y"}), "b": frozenset({"x", "y"}), "c": frozenset({"x"})}
    out = range_assignor(subs, {"x": 7, "y": 3}, {})
    assert out == {"a": frozenset({("x", 0), ("x", 1), ("x", 2), ("y", 0), ("y", 1)}),
                   "b": frozenset({("x", 3), ("x", 4), ("y", 2)}),
                   "c": frozenset({("x", 5), ("x", 6)})}


def test_uniform_assignor_exact_and_sticky() -> None:
    subs = {m: frozenset({"t"}) for m in "abc"}
    first = uniform_assignor(subs, {"t": 6}, {})
    assert first == {"a": t(0, 1), "b": t(2, 3), "c": t(4, 5)}
    # c leaves: a and b keep what they had and split c's partitions.
    second = uniform_assignor({m: frozenset({"t"}) for m in "ab"}, {"t": 6}, first)
    assert second == {"a": t(0, 1, 4), "b": t(2, 3, 5)}
    # d joins: everyone keeps two of their partitions, d gets the rest.
    third = uniform_assignor({m: frozenset({"t"}) for m in "abd"}, {"t": 6}, second)
    assert third["a"] <= second["a"] and third["b"] <= second["b"]
    assert sorted(len(v) for v in third.values()) == [2, 2, 2]


@settings(max_examples=200, deadline=None)
@given(members=st.lists(st.sampled_from("abcdef"), min_size=1, max_size=6, unique=True),
       counts=st.dictionaries(st.sampled_from(["x", "y", "z"]), st.integers(0, 9), min_size=1),
       data=st.data())
def test_assignors_give_each_partition_to_exactly_one_subscriber(
        members: list[str], counts: dict[str, int], data: st.DataObject) -> None:
    topics = sorted(counts)
    subs = {m: frozenset(data.draw(st.lists(st.sampled_from(topics), min_size=1, unique=True)))
            for m in members}
    previous = data.draw(st.dictionaries(st.sampled_from(members), st.frozensets(
        st.tuples(st.sampled_from(topics), st.integers(0, 9)))))
    for assignor in (uniform_assignor, range_assignor):
        out = assignor(subs, counts, previous)
        owners: dict[tuple[str, int], str] = {}
        for member, parts in out.items():
            for tp in parts:
                assert tp not in owners
                assert tp[0] in subs[member] and 0 <= tp[1] < counts[tp[0]]
                owners[tp] = member
        subscribed = {tp for s in subs.values() for topic in s
                      for tp in ((topic, p) for p in range(counts[topic]))}
        assert set(owners) == subscribed
    if len(set(subs.values())) == 1:
        sizes = [len(p) for p in uniform_assignor(subs, counts, previous).values()]
        assert max(sizes) - min(sizes) <= 1


# --------------------------------------------------------------------------- state machine
def test_first_member_gets_everything_and_epochs_move() -> None:
    group = ConsumerGroup("g", GroupSettings(heartbeat_interval_ms=1234))
    result = join(group, "a")
    assert result.member_epoch == 1 and result.assignment == t(*range(6))  # type: ignore
    assert result.heartbeat_interval_ms == 1234  # type: ignore[attr-defined]
    assert group.group_epoch == 1 and group.assignment_epoch == 1 and group.state == "stable"
    # An unchanged heartbeat sends no assignment.
    assert beat(group, "a").assignment is None  # type: ignore[attr-defined]


def test_revocation_before_assignment() -> None:
    group = ConsumerGroup("g", GroupSettings())
    join(group, "a")
    joined = join(group, "b")
    # b's target is half of the topic, but a still holds all of it: b gets nothing yet.
    assert joined.member_epoch == 2 and joined.assignment == frozenset()  # type: ignore
    assert group.members["b"].state == UNRELEASED
    # a is told to keep only its target; its epoch stays until it has revoked.
    result = beat(group, "a", owned=t(*range(6)))
    a_target = group.target["a"]
    assert result.assignment == a_target and result.member_epoch == 1  # type: ignore
    assert group.members["a"].state == UNREVOKED
    # b asks again: still nothing, the revoked partitions are not released yet.
    assert beat(group, "b", owned=frozenset()).assignment == frozenset()  # type: ignore
    # a reports that it revoked: it moves to epoch 2, and then b gets its partitions.
    result = beat(group, "a", owned=a_target)
    assert result.member_epoch == 2 and group.members["a"].state == STABLE  # type: ignore
    result = beat(group, "b", owned=frozenset())
    assert result.assignment == group.target["b"]  # type: ignore[attr-defined]
    assert group.members["b"].state == STABLE and group.state == "stable"


def test_stale_epoch_is_fenced_and_unknown_member_refused() -> None:
    group = ConsumerGroup("g", GroupSettings())
    join(group, "a")
    join(group, "b")
    beat(group, "a", owned=t(*range(6)))
    beat(group, "a", owned=group.target["a"])  # a now at epoch 2, previous epoch 1
    with pytest.raises(HeartbeatError) as fenced:
        beat(group, "a", epoch=5)
    assert fenced.value.code == "fenced_member_epoch"
    # A retried heartbeat at the previous epoch is tolerated when it owns nothing new.
    assert beat(group, "a", owned=group.target["a"], epoch=1).member_epoch == 2  # type: ignore
    with pytest.raises(HeartbeatError) as unknown:
        beat(group, "zz", epoch=3)
    assert unknown.value.code == "unknown_member_id"


def test_errors_as_kafka_answers() -> None:
    group = ConsumerGroup("g", GroupSettings(max_size=1, assignors=("range",)))
    with pytest.raises(HeartbeatError) as bad:
        group.heartbeat(HeartbeatRequest("a", 0), TOPICS)
    assert bad.value.code == "invalid_request"
    with pytest.raises(HeartbeatError) as assignor:
        join(group, "a", server_assignor="uniform")
    assert assignor.value.code == "unsupported_assignor"
    join(group, "a")
    with pytest.raises(HeartbeatError) as full:
        join(group, "b")
    assert full.value.code == "group_max_size_reached"
    with pytest.raises(HeartbeatError) as regex:
        group.heartbeat(HeartbeatRequest("a", 1, subscribed_topic_regex="("), TOPICS)
    assert regex.value.code == "invalid_regular_expression"


def test_leave_and_static_member_rejoin() -> None:
    group = ConsumerGroup("g", GroupSettings())
    join(group, "a", instance_id="i-a")
    join(group, "b")
    beat(group, "a", owned=t(*range(6)))
    beat(group, "a", owned=group.target["a"])
    beat(group, "b", owned=frozenset())
    a_target = group.target["a"]
    epoch = group.group_epoch
    # The static member leaves for a while (-2): no rebalance, its partitions wait for it.
    group.heartbeat(HeartbeatRequest("a", -2), TOPICS)
    assert group.group_epoch == epoch and group.target["a"] == a_target
    # It comes back with a new member id and takes over its old assignment.
    result = join(group, "a2", instance_id="i-a")
    assert "a" not in group.members and group.target["a2"] == a_target
    assert result.assignment == a_target and group.group_epoch == epoch  # type: ignore
    # b leaves (-1): the group epoch goes up and a2's target becomes everything.
    group.heartbeat(HeartbeatRequest("b", -1), TOPICS)
    assert "b" not in group.members and group.group_epoch == epoch + 1
    assert beat(group, "a2", owned=a_target).assignment == t(*range(6))  # type: ignore


def test_regex_subscription_follows_new_topics() -> None:
    group = ConsumerGroup("g", GroupSettings())
    topics = {"orders-eu": 2, "other": 3}
    first = group.heartbeat(HeartbeatRequest("a", 0, subscribed_topic_regex="orders-.*"), topics)
    assert first.assignment == tps(("orders-eu", 0), ("orders-eu", 1))  # type: ignore
    topics["orders-us"] = 1
    result = group.heartbeat(HeartbeatRequest("a", 1), topics)
    assert ("orders-us", 0) in result.assignment and result.member_epoch == 2  # type: ignore


@pytest.mark.timeout(30)
def test_regex_matching_takes_linear_time_as_kafkas_re2() -> None:
    # A backtracking engine takes 2**n steps for (a+)+ against "a"*n + "-" (a legal topic
    # name): one heartbeat held the whole broker. RE2 answers at once, as RE2/J does in Kafka,
    # and refuses what RE2/J refuses (backreferences, lookarounds).
    group = ConsumerGroup("g", GroupSettings())
    topics = {"a" * 64 + "-": 1, "aaa": 2}
    first = group.heartbeat(HeartbeatRequest("a", 0, subscribed_topic_regex="(a+)+"), topics)
    assert first.assignment == tps(("aaa", 0), ("aaa", 1))  # type: ignore
    for pattern in (r"(a)\1", "(?=a).*", "(?<!b)a"):
        with pytest.raises(HeartbeatError) as refused:
            group.heartbeat(HeartbeatRequest("b", 0, subscribed_topic_regex=pattern), topics)
        assert refused.value.code == "invalid_regular_expression"
        assert refused.value.message


def test_regex_matches_only_topics_the_principal_may_describe() -> None:
    # Kafka resolves a regex against the topics its member's principal may DESCRIBE.
    group = ConsumerGroup("g", GroupSettings())
    topics = {"allowed-a": 2, "secret": 3}

    def allowed(topic: str) -> bool:
        return topic.startswith("allowed-")

    first = group.heartbeat(HeartbeatRequest("a", 0, subscribed_topic_regex=".*",
                                             topic_authorized=allowed), topics)
    assert first.assignment == tps(("allowed-a", 0), ("allowed-a", 1))  # type: ignore
    assert group.subscribed_topics == {"allowed-a": 2}
    topics.update({"allowed-b": 1, "secret-2": 1})
    grown = group.heartbeat(HeartbeatRequest("a", 1, topic_authorized=allowed), topics)
    assert grown.assignment == tps(("allowed-a", 0), ("allowed-a", 1),  # type: ignore
                                   ("allowed-b", 0))
    assert group.members["a"].regex_topics == ("allowed-a", "allowed-b")
    # The resolution survives a restart (it is part of the snapshot, through JSON).
    restored = ConsumerGroup.restore("g", GroupSettings(),
                                     json.loads(json.dumps(group.snapshot())))
    assert restored.members == group.members
    # Without an authorizer every matching topic counts.
    open_group = ConsumerGroup("g", GroupSettings())
    everything = open_group.heartbeat(HeartbeatRequest("a", 0, subscribed_topic_regex=".*"),
                                      topics)
    assert {tp[0] for tp in everything.assignment or ()} == set(topics)


def test_snapshot_round_trip() -> None:
    group = ConsumerGroup("g", GroupSettings())
    join(group, "a", instance_id="i")
    join(group, "b")
    beat(group, "a", owned=t(*range(6)))
    restored = ConsumerGroup.restore("g", GroupSettings(), group.snapshot())
    assert restored.snapshot() == group.snapshot()
    assert restored.members == group.members and restored.static_members == {"i": "a"}
    # The cheap change detector agrees with the snapshot: a no-op heartbeat changes neither.
    token, snapshot = group.state_token(), group.snapshot()
    beat(group, "b", owned=frozenset())
    beat(group, "b", owned=frozenset())
    token, snapshot = group.state_token(), group.snapshot()
    beat(group, "b", owned=frozenset())
    assert group.state_token() == token and group.snapshot() == snapshot
    beat(group, "a", owned=group.target["a"])
    assert group.state_token() != token and group.snapshot() != snapshot


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["join", "beat", "leave", "lazy", "grow"]),
                          st.sampled_from("abcd")), min_size=1, max_size=40))
def test_a_partition_is_never_owned_by_two_members(steps: list[tuple[str, str]]) -> None:
    """Members that join, leave, heartbeat (reporting exactly what they were told to keep) or
    heartbeat without revoking, and topics that grow: at no point do two members hold (own or
    still revoke) the same partition."""
    group = ConsumerGroup("g", GroupSettings())
    topics = {"t": 4, "u": 2}
    owned: dict[str, frozenset[tuple[str, int]]] = {}  # what each client really holds
    for action, member in steps:
        try:
            if action == "join" and member not in group.members:
                result = group.heartbeat(HeartbeatRequest(
                    member, 0, subscribed_topic_names=("t", "u")), topics)
                owned[member] = result.assignment or frozenset()
            elif action == "leave" and member in group.members:
                group.heartbeat(HeartbeatRequest(member, -1), topics)
                owned.pop(member, None)
            elif action in ("beat", "lazy") and member in group.members:
                # "lazy" reports its old partitions: it has not finished revoking.
                epoch = group.members[member].member_epoch
                result = group.heartbeat(HeartbeatRequest(member, epoch, owned=owned[member]),
                                         topics)
                if action == "beat" and result.assignment is not None:
                    owned[member] = result.assignment
            elif action == "grow":
                topics["t"] += 1
        except HeartbeatError as exc:
            # Every request above is one a well-behaved client sends (a join of a new member,
            # a leave or a heartbeat of a present member at its current epoch, in a group
            # without a size limit): none is legitimately refused, so every refusal is a bug.
            pytest.fail(f"{action} of {member} refused with {exc.code}: {exc.message}")
        # The client holds what it was told; the coordinator counts it as held until revoked.
        for m, parts in owned.items():
            held = group.members[m].assigned | group.members[m].revoking
            assert parts <= held
        seen: dict[tuple[str, int], str] = {}
        for m in group.members.values():
            for tp in m.assigned | m.revoking:
                assert tp not in seen, f"{tp} held by {seen[tp]} and {m.member_id}"
                seen[tp] = m.member_id
        # The counts kept as members come and go name what the members subscribe to.
        walked = {n for m in group.members.values() for n in m.subscribed_topic_names}
        assert group.subscribed_metadata(topics) == {n: topics[n] for n in sorted(walked)}
        # What is written: the snapshot's JSON, whichever member texts were kept encoded.
        assert group.encoded_snapshot() == json.dumps(group.snapshot(), sort_keys=True).encode()
