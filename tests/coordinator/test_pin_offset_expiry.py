"""Offset expiry of classic groups, the boundaries the mutation run found unpinned
(docs/development.md, "Mutation testing"), driven synchronously through the sans-IO rules as
tests/coordinator/test_pin_group_rules.py does (which pins the simple and the emptied group).

Kafka's rule (group-coordinator ``ClassicGroup.offsetExpirationCondition`` and
``isSubscribedToTopic``, ``OffsetMetadataManager.cleanupExpiredOffsets``): while a consumer
group has members, its offsets expire only if it is Stable and its members' subscriptions could
be parsed, and then only those of topics nobody subscribes to, ``offsets.retention.ms`` after
their commit, inclusive. Otherwise (rebalancing, subscriptions unknown) nothing expires."""

from __future__ import annotations

from typing import Any

from tests.coordinator.test_classic_state import Driver
from tests.coordinator.test_pin_group_rules import commit
from trio_broker.coordinator.group import GroupState
from trio_broker.testing.client import subscription

RETENTION_MS = 1000


def _expire(d: Driver) -> int:
    expired = d.take(d.offsets.expire_offsets(RETENTION_MS, lambda *args: None)).reply
    assert expired is not None
    return expired


def stable_group(d: Driver, metadata: bytes) -> tuple[str, int]:
    """A Stable group of one member joined with ``metadata``: its id and generation."""
    member_id = d.stable_group_of_one(metadata)
    group = d.core.groups["g"]
    assert group.state is GroupState.STABLE
    return member_id, group.generation_id


def test_a_stable_groups_unsubscribed_offsets_expire_at_the_retention_inclusive() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    member_id, generation = stable_group(d, subscription("t"))
    commit(d, {("t", 0): 1, ("u", 0): 2}, generation=generation, member_id=member_id)
    d.now += RETENTION_MS - 1
    assert _expire(d) == 0
    d.now += 1
    assert _expire(d) == 1
    assert set(d.core.groups["g"].offsets) == {("t", 0)}
    d.now += 100 * RETENTION_MS
    assert _expire(d) == 0  # the subscribed topic's offset never expires while Stable


def test_a_stable_group_whose_subscriptions_cannot_be_parsed_keeps_every_offset() -> None:
    """Kafka cannot tell which topics such a group reads: it expires none of its offsets."""
    d = Driver(initial_rebalance_delay_ms=0)
    member_id, generation = stable_group(d, b"not a consumer subscription")
    assert d.core.groups["g"].subscribed_topics is None
    commit(d, {("t", 0): 1, ("u", 0): 2}, generation=generation, member_id=member_id)
    d.now += 100 * RETENTION_MS
    assert _expire(d) == 0
    assert set(d.core.groups["g"].offsets) == {("t", 0), ("u", 0)}


def test_a_rebalancing_group_keeps_every_offset() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    member_id, generation = stable_group(d, subscription("t"))
    commit(d, {("t", 0): 1, ("u", 0): 2}, generation=generation, member_id=member_id)
    # A changed subscription: a new generation, waiting for the leader's assignment.
    d.join(member_id, protocols=[("range", subscription("t", "v"))])
    state: Any = d.core.groups["g"].state
    assert state is GroupState.COMPLETING_REBALANCE
    d.now += 100 * RETENTION_MS
    assert _expire(d) == 0
    assert set(d.core.groups["g"].offsets) == {("t", 0), ("u", 0)}
