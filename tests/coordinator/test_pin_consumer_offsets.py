"""The offset rules of KIP-848 consumer groups the mutation run found unpinned
(docs/development.md, "Mutation testing"): which member may commit, and when a consumer
group's offsets expire. Driven through a running GroupCoordinator on the autojump clock, as
tests/coordinator/test_consumer_protocol.py does; the retention boundary is asked of the
sans-IO rule with explicit times.

Kafka's expiry rule for these groups (group-coordinator ``OffsetMetadataManager
.cleanupExpiredOffsets``, ``ConsumerGroup.offsetExpirationCondition`` and
``isSubscribedToTopic``): an offset of a topic no member subscribes to (by name or by a regex
that matches it) expires ``offsets.retention.ms`` after its own commit, inclusive; an offset
of a subscribed topic never does; an empty group subscribes to nothing, so its offsets expire by
their commit time (not from when the group emptied, the classic rule)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
from kio.schema.errors import ErrorCode as E

from tests.coordinator.group_harness import Harness
from trio_broker.coordinator import OffsetCommitEntry
from trio_broker.coordinator.consumer_group import HeartbeatRequest

pytestmark = pytest.mark.timeout(30)

RETENTION_MS = 60_000  # offsets.retention.minutes = 1


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    # Sessions outlive the test: no heartbeats needed to keep the members.
    return Harness(tmp_path / "data", {"offsets.retention.minutes": "1",
                                       "group.consumer.session.timeout.ms": "900000000"})


async def beat(h: Harness, member: str, epoch: int, **kw: Any) -> Any:
    return await h.coord.consumer_groups.heartbeat("g", HeartbeatRequest(member, epoch, **kw))


async def commit(h: Harness, offsets: dict[tuple[str, int], int], *, epoch: int = -1,
                 member_id: str = "") -> dict[tuple[str, int], int]:
    return await h.coord.commit_offsets(
        group_id="g", generation_id=epoch, member_id=member_id, group_instance_id=None,
        offsets={tp: OffsetCommitEntry(o) for tp, o in offsets.items()})


def stored(h: Harness) -> set[tuple[str, int]]:
    return set(h.coord.groups["g"].offsets) if "g" in h.coord.groups else set()


# ------------------------------------------------------------------------------ OffsetCommit
async def test_a_consumer_groups_commit_is_checked_against_its_members(
        harness: Harness, nursery: trio.Nursery, autojump_clock: Any) -> None:
    """KIP-848's OffsetCommit check: a member commits with its id and current epoch; a commit
    naming no member is accepted only once the group is empty."""
    coord = await harness.start(nursery)
    harness.create_topic("t", 1)
    _, _, joined = await beat(harness, "a", 0, subscribed_topic_names=("t",))
    epoch = joined.member_epoch
    assert await commit(harness, {("t", 0): 1}) == {("t", 0): E.unknown_member_id}
    assert await commit(harness, {("t", 0): 1}, epoch=epoch + 1, member_id="a") == \
        {("t", 0): E.stale_member_epoch}
    assert await commit(harness, {("t", 0): 1}, epoch=epoch, member_id="b") == \
        {("t", 0): E.unknown_member_id}
    assert stored(harness) == set()
    assert await commit(harness, {("t", 0): 5}, epoch=epoch, member_id="a") == {("t", 0): 0}
    assert coord.fetch_offsets("g", [("t", 0)])[1][("t", 0)].offset == 5  # type: ignore[union-attr]
    assert (await beat(harness, "a", -1))[0] == 0  # leaves: the group is empty
    assert await commit(harness, {("t", 0): 6}) == {("t", 0): 0}
    assert coord.fetch_offsets("g", [("t", 0)])[1][("t", 0)].offset == 6  # type: ignore[union-attr]


# ------------------------------------------------------------------------------ expiry
async def test_a_consumer_groups_offsets_expire_only_for_topics_no_member_subscribes_to(
        harness: Harness, nursery: trio.Nursery, autojump_clock: Any) -> None:
    coord = await harness.start(nursery)
    for topic in ("t", "r1", "u"):
        harness.create_topic(topic, 1)
    _, _, a = await beat(harness, "a", 0, subscribed_topic_names=("t",))
    _, _, b = await beat(harness, "b", 0, subscribed_topic_regex="r.*")
    await commit(harness, {("t", 0): 1, ("r1", 0): 2, ("u", 0): 3},
                 epoch=a.member_epoch, member_id="a")
    offsets = coord.groups["g"].offsets
    committed_at = offsets[("u", 0)].commit_timestamp_ms
    rule = coord.consumer_groups.expired_offsets
    assert rule("g", offsets, committed_at + RETENTION_MS - 1, RETENTION_MS) == []
    assert rule("g", offsets, committed_at + RETENTION_MS, RETENTION_MS) == [("u", 0)]
    # Far past the retention, through the coordinator's own check: the subscribed topics
    # (by name, by regex) keep their offsets.
    await trio.sleep(10 * RETENTION_MS / 1000)
    coord.expire_offsets()
    assert stored(harness) == {("t", 0), ("r1", 0)}


async def test_an_emptied_consumer_groups_offsets_expire_by_their_commit_time(
        harness: Harness, nursery: trio.Nursery, autojump_clock: Any) -> None:
    """Unlike a classic group's, not counted from when the group emptied."""
    coord = await harness.start(nursery)
    harness.create_topic("t", 1)
    _, _, a = await beat(harness, "a", 0, subscribed_topic_names=("t",))
    await commit(harness, {("t", 0): 1}, epoch=a.member_epoch, member_id="a")
    await trio.sleep(RETENTION_MS / 1000 - 5)
    assert coord.expire_offsets() == 0  # subscribed, and younger than the retention anyway
    assert (await beat(harness, "a", -1))[0] == 0  # leaves
    await trio.sleep(5.5)  # the commit is past the retention; the group emptied 5.5 s ago
    assert coord.expire_offsets() == 1
    assert stored(harness) == set()
    assert "g" not in coord.consumer_groups.groups  # and the empty group goes with them
