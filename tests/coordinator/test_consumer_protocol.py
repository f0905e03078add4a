"""The KIP-848 consumer groups inside a running GroupCoordinator over the real LogManager, on
the autojump clock: session expiry, offsets with member epochs, the classic/consumer boundary,
reload from ``__consumer_offsets``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
from kio.schema.errors import ErrorCode as E

from tests.coordinator.group_harness import Harness
from trio_broker.config import load_config
from trio_broker.coordinator import OffsetCommitEntry
from trio_broker.coordinator.consumer_coordinator import encode_snapshot_key
from trio_broker.coordinator.consumer_group import HeartbeatRequest
from trio_broker.protocol import records as rb
from trio_broker.storage.manager import LogManager

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    return Harness(tmp_path / "data", {"group.consumer.session.timeout.ms": "10000",
                                       "group.consumer.heartbeat.interval.ms": "1000"})


async def beat(h: Harness, member: str, epoch: int, group: str = "g", **kw: Any) -> Any:
    return await h.coord.consumer_groups.heartbeat(group, HeartbeatRequest(member, epoch, **kw))


async def keep_alive(h: Harness, member: str) -> None:
    while True:
        group = h.coord.consumer_groups.groups["g"]
        m = group.members[member]
        await beat(h, member, m.member_epoch, owned=m.assigned)
        await trio.sleep(1)


async def test_session_expiry_fences_a_silent_member(
        harness: Harness, nursery: trio.Nursery, autojump_clock: Any, log_events: Any) -> None:
    await harness.start(nursery)
    harness.create_topic("t", 4)
    error, _, first = await beat(harness, "a", 0, subscribed_topic_names=("t",))
    assert error == 0 and first.member_epoch == 1 and first.heartbeat_interval_ms == 1000
    error, _, second = await beat(harness, "b", 0, subscribed_topic_names=("t",))
    assert error == 0
    nursery.start_soon(keep_alive, harness, "a")
    await trio.sleep(9)
    group = harness.coord.consumer_groups.groups["g"]
    assert set(group.members) == {"a", "b"}
    await trio.sleep(2.5)  # b has been silent for 11.5 s > 10 s; a has heartbeat since
    assert set(group.members) == {"a"}
    fenced = log_events.events("group_member_fenced")
    assert fenced and fenced[0]["member_id"] == "b"
    assert group.members["a"].assigned == frozenset(("t", p) for p in range(4))
    # b's late heartbeat is refused: it must rejoin with epoch 0.
    error, _, _ = await beat(harness, "b", second.member_epoch)
    assert error == E.unknown_member_id


async def test_offsets_check_member_epochs_and_survive_a_restart(
        harness: Harness, nursery: trio.Nursery, autojump_clock: Any, tmp_path: Path) -> None:
    coord = await harness.start(nursery)
    harness.create_topic("t", 2)
    _, _, joined = await beat(harness, "a", 0, subscribed_topic_names=("t",),
                              server_assignor="range")
    commit = {("t", 0): OffsetCommitEntry(42)}
    stale = await coord.commit_offsets(group_id="g", generation_id=joined.member_epoch + 1,
                                       member_id="a", group_instance_id=None, offsets=commit)
    assert stale == {("t", 0): E.stale_member_epoch}
    unknown = await coord.commit_offsets(group_id="g", generation_id=1, member_id="zz",
                                         group_instance_id=None, offsets=commit)
    assert unknown == {("t", 0): E.unknown_member_id}
    ok = await coord.commit_offsets(group_id="g", generation_id=joined.member_epoch,
                                    member_id="a", group_instance_id=None, offsets=commit)
    assert ok == {("t", 0): 0}
    assert coord.fetch_offsets("g", [("t", 0)])[1][("t", 0)].offset == 42  # type: ignore
    # A classic member is refused while the consumer group has members.
    classic = await harness.join("g")
    assert classic.error == E.inconsistent_group_protocol
    before = coord.consumer_groups.groups["g"].snapshot()
    await harness.stop()

    again = Harness(harness.data_dir, harness.overrides)
    async with trio.open_nursery() as inner:
        coord2 = await again.start(inner)
        restored = coord2.consumer_groups.groups["g"]
        assert restored.snapshot() == before
        assert restored.assignor_name == "range"
        assert coord2.fetch_offsets("g", [("t", 0)])[1][("t", 0)].offset == 42  # type: ignore
        # The restored member carries on at its epoch.
        error, _, result = await beat(again, "a", joined.member_epoch,
                                      owned=frozenset({("t", 0), ("t", 1)}))
        assert error == 0 and result.member_epoch == joined.member_epoch
        # It leaves; the empty group can then be taken over by a classic member.
        error, _, _ = await beat(again, "a", -1)
        assert error == 0 and not restored.members
        join = await again.join("g")
        assert join.error == E.member_id_required
        inner.cancel_scope.cancel()


@pytest.mark.parametrize("snapshot", [b"{}", b"5", b'{"group_epoch": "x"}', b"[1, 2]"])
async def test_a_damaged_group_snapshot_is_skipped_at_load(
        harness: Harness, nursery: trio.Nursery, autojump_clock: Any, log_events: Any,
        snapshot: bytes) -> None:
    """A snapshot record that is JSON but not a group (damaged on disk) used to end the
    coordinator's load with a KeyError/TypeError, and the broker's start-up with a traceback.
    It is skipped as Kafka skips a record it cannot load; the offsets stay."""
    coord = await harness.start(nursery)
    harness.create_topic("t", 2)
    _, _, joined = await beat(harness, "a", 0, subscribed_topic_names=("t",))
    ok = await coord.commit_offsets(group_id="g", generation_id=joined.member_epoch,
                                    member_id="a", group_instance_id=None,
                                    offsets={("t", 0): OffsetCommitEntry(42)})
    assert ok == {("t", 0): 0}
    await harness.stop()
    lm = LogManager(load_config({"log.dirs": str(harness.data_dir)}))
    lm.open()
    damaged = rb.build_batch([(encode_snapshot_key("g"), snapshot, [], 0)])
    await lm.append("__consumer_offsets", coord.partition_for("g"), damaged,
                    producer_check=False)
    lm.close()

    again = Harness(harness.data_dir, harness.overrides)
    async with trio.open_nursery() as inner:
        coord2 = await again.start(inner)
        assert "g" not in coord2.consumer_groups.groups
        assert [e["group_id"] for e in log_events.events("group_load_skipped")] == ["g"]
        assert coord2.fetch_offsets("g", [("t", 0)])[1][("t", 0)].offset == 42  # type: ignore
        error, _, rejoined = await beat(again, "a", 0, subscribed_topic_names=("t",))
        assert error == 0 and rejoined.member_epoch > 0
        inner.cancel_scope.cancel()


async def test_consumer_member_refused_in_a_classic_group(
        harness: Harness, nursery: trio.Nursery, autojump_clock: Any) -> None:
    await harness.start(nursery)
    harness.create_topic("t", 2)
    await harness.join_new("cg")
    error, message, _ = await beat(harness, "a", 0, group="cg", subscribed_topic_names=("t",))
    assert error == E.group_id_not_found and "not a consumer group" in (message or "")


async def test_a_member_that_never_revokes_is_fenced_after_its_rebalance_timeout(
        harness: Harness, nursery: trio.Nursery, autojump_clock: Any, log_events: Any) -> None:
    await harness.start(nursery)
    harness.create_topic("t", 4)
    everything = frozenset(("t", p) for p in range(4))
    await beat(harness, "a", 0, subscribed_topic_names=("t",), rebalance_timeout_ms=5000)
    _, _, b = await beat(harness, "b", 0, subscribed_topic_names=("t",))
    group = harness.coord.consumer_groups.groups["g"]
    # a is asked to give up half but keeps reporting everything (it never revokes).
    for _ in range(4):
        error, _, _ = await beat(harness, "a", 1, owned=everything)
        assert error == 0
        await beat(harness, "b", b.member_epoch, owned=frozenset())
        await trio.sleep(1)
    assert "a" in group.members
    await trio.sleep(2)
    assert "a" not in group.members
    fenced = log_events.events("group_member_fenced")
    assert fenced and "rebalance timeout" in fenced[0]["reason"]
    # b now gets every partition.
    error, _, result = await beat(harness, "b", b.member_epoch, owned=frozenset())
    assert error == 0 and result.assignment == everything


async def test_offsets_of_an_active_consumer_group_expire_only_for_unsubscribed_topics(
        tmp_path: Path, nursery: trio.Nursery, autojump_clock: Any) -> None:
    # A session longer than the retention keeps the member without heartbeats.
    harness = Harness(tmp_path / "data", {"group.consumer.session.timeout.ms": "900000000"})
    coord = await harness.start(nursery)
    harness.create_topic("t", 1)
    harness.create_topic("old", 1)
    _, _, joined = await beat(harness, "a", 0, subscribed_topic_names=("t",))
    offsets = {("t", 0): OffsetCommitEntry(5), ("old", 0): OffsetCommitEntry(9)}
    await coord.commit_offsets(group_id="g", generation_id=joined.member_epoch, member_id="a",
                               group_instance_id=None, offsets=offsets)
    await trio.sleep(8 * 24 * 3600)  # past offsets.retention.minutes (7 days)
    coord.expire_offsets()
    found = coord.fetch_offsets("g", [("t", 0), ("old", 0)])[1]
    assert found[("t", 0)] is not None and found[("old", 0)] is None


async def test_an_empty_classic_group_becomes_a_consumer_group_keeping_its_offsets(
        harness: Harness, nursery: trio.Nursery, autojump_clock: Any) -> None:
    coord = await harness.start(nursery)
    harness.create_topic("t", 1)
    joined = await harness.join_new("g")
    synced = await harness.sync("g", joined.generation_id, joined.member_id,
                                {joined.member_id: b""})
    assert synced.error == 0
    await coord.commit_offsets(group_id="g", generation_id=joined.generation_id,
                               member_id=joined.member_id, group_instance_id=None,
                               offsets={("t", 0): OffsetCommitEntry(7)})
    assert coord.leave_group("g", [(joined.member_id, None, None)])[1] == [0]
    error, _, result = await beat(harness, "a", 0, subscribed_topic_names=("t",))
    assert error == 0 and result.assignment == frozenset({("t", 0)})
    assert coord.fetch_offsets("g", [("t", 0)])[1][("t", 0)].offset == 7  # type: ignore


async def test_a_group_larger_than_one_uncompressed_record_is_stored_and_restored(
        tmp_path: Path, autojump_clock: Any) -> None:
    """A snapshot is one record in a zstd batch: a group whose JSON is several times
    message.max.bytes (about 2,000 members at Kafka's 1 MB) still joins, and a restart brings
    every member back with its assignment."""
    overrides = {"message.max.bytes": "50000", "group.consumer.session.timeout.ms": "600000"}
    harness = Harness(tmp_path / "data", overrides)
    async with trio.open_nursery() as nursery:
        await harness.start(nursery)
        harness.create_topic("t", 8)
        for index in range(400):
            error, message, _ = await beat(harness, f"member-{index:04d}-of-a-large-group", 0,
                                           subscribed_topic_names=("t",))
            assert error == 0, message
        group = harness.coord.consumer_groups.groups["g"]
        assert len(group.encoded_snapshot()) > 3 * 50000
        before = group.snapshot()
        await harness.stop()
    again = Harness(harness.data_dir, overrides)
    async with trio.open_nursery() as nursery:
        await again.start(nursery)
        restored = again.coord.consumer_groups.groups["g"]
        assert len(restored.members) == 400 and restored.snapshot() == before
        nursery.cancel_scope.cancel()


async def test_empty_consumer_groups_are_removed_by_the_retention_check(
        tmp_path: Path, nursery: trio.Nursery, autojump_clock: Any, log_events: Any) -> None:
    # A consumer joining and leaving with a new group id each time (the soak probe: 1,000
    # ids, 1,000 groups kept for good). As Kafka's cleanupGroupMetadata, the retention check
    # drops an empty group without offsets at once, and one with offsets when they expire.
    harness = Harness(tmp_path / "data", {"offsets.retention.minutes": "1",
                                          "offsets.retention.check.interval.ms": "1000"})
    coord = await harness.start(nursery)
    harness.create_topic("t", 1)
    for n in range(20):
        group = f"g{n}"
        _, _, joined = await beat(harness, "a", 0, group, subscribed_topic_names=("t",))
        assert (await beat(harness, "a", -1, group))[0] == 0
        if n % 2:
            await coord.commit_offsets(group_id=group, generation_id=-1, member_id="",
                                       group_instance_id=None,
                                       offsets={("t", 0): OffsetCommitEntry(n)})
    _, _, kept = await beat(harness, "a", 0, "active", subscribed_topic_names=("t",))
    await trio.sleep(2)
    assert set(coord.consumer_groups.groups) == {"active"} | {f"g{n}" for n in range(1, 20, 2)}
    assert log_events.events("group_deleted", group_id="g0")
    await beat(harness, "a", kept.member_epoch, "active", owned=kept.assignment)
    nursery.start_soon(keep_alive_in, harness, "active", "a")
    await trio.sleep(61)
    assert list(coord.consumer_groups.groups) == ["active"]
    assert not coord.groups.keys() - {"active"}
    await harness.stop()

    # Their tombstones are written: a restart does not bring them back.
    again = Harness(harness.data_dir, harness.overrides)
    async with trio.open_nursery() as inner:
        coord2 = await again.start(inner)
        assert list(coord2.consumer_groups.groups) == ["active"]
        inner.cancel_scope.cancel()


async def keep_alive_in(h: Harness, group_id: str, member: str) -> None:
    while True:
        m = h.coord.consumer_groups.groups[group_id].members[member]
        await beat(h, member, m.member_epoch, group_id, owned=m.assigned)
        await trio.sleep(1)
