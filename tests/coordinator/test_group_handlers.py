"""The group and offset APIs over a real socket, in every version a client may pick.

Real clients use one version each; these tests send the others (v0 JoinGroup, v1 OffsetFetch,
v0-2 LeaveGroup, batched FindCoordinator...) and check the answers decode and say the right thing.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from kio.schema.errors import ErrorCode as E

from tests.kafka_wire import WireClient
from trio_broker.protocol.codec import request_schema
from trio_broker.testing.client import subscription

FIND_COORDINATOR, JOIN, HEARTBEAT, LEAVE, SYNC = 10, 11, 12, 13, 14
OFFSET_COMMIT, OFFSET_FETCH, DESCRIBE, LIST, DELETE, OFFSET_DELETE = 8, 9, 15, 16, 42, 47


def req(api_key: int, version: int, **fields: Any) -> Any:
    """A request body of that version from the fields it has (nested classes by name)."""
    import dataclasses

    cls = request_schema(api_key, version)
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in fields.items() if k in names})


def nested(api_key: int, version: int, class_name: str, **fields: Any) -> Any:
    import dataclasses
    import sys

    module = sys.modules[request_schema(api_key, version).__module__]
    cls = getattr(module, class_name)
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in fields.items() if k in names})


def ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


@pytest.fixture
async def broker(start_broker: Any) -> Any:
    # Few __consumer_offsets partitions: quicker to create at every start.
    return await start_broker(**{"offsets.topic.num.partitions": "3"})


@pytest.fixture
async def client(broker: Any) -> Any:
    wire = await WireClient.connect(broker.port)
    yield wire
    await wire.aclose()


@pytest.mark.parametrize("version", range(0, 5))
async def test_find_coordinator_versions(broker: Any, client: Any, version: int) -> None:
    if version >= 4:
        body = req(FIND_COORDINATOR, version, key_type=0, coordinator_keys=("a", "b"))
        response = await client.request(FIND_COORDINATOR, version, body)
        assert [(c.key, c.node_id, c.host, c.port, c.error_code) for c in response.coordinators] \
            == [(k, 1, "127.0.0.1", broker.port, E.none) for k in ("a", "b")]
        bad = req(FIND_COORDINATOR, version, key_type=7, coordinator_keys=("a",))
        response = await client.request(FIND_COORDINATOR, version, bad)
        assert response.coordinators[0].error_code == E.invalid_request
    else:
        body = req(FIND_COORDINATOR, version, key="group", key_type=0)
        response = await client.request(FIND_COORDINATOR, version, body)
        assert (response.error_code, response.node_id, response.host, response.port) == (
            E.none, 1, "127.0.0.1", broker.port)


def join_body(version: int, member_id: str = "", group: str = "g", **kw: Any) -> Any:
    protocol = nested(JOIN, version, "JoinGroupRequestProtocol", name="range",
                      metadata=subscription("t"))
    return req(JOIN, version, group_id=group, session_timeout=ms(6000),
               rebalance_timeout=ms(10000), member_id=member_id, protocol_type="consumer",
               protocols=(protocol,), **kw)


@pytest.mark.parametrize("version", range(0, 10))
async def test_join_sync_heartbeat_leave_every_version(client: Any, version: int) -> None:
    group = f"g{version}"
    response = await client.request(JOIN, version, join_body(version, group=group))
    if version >= 4:
        assert response.error_code == E.member_id_required
        response = await client.request(JOIN, version,
                                        join_body(version, response.member_id, group=group))
    assert response.error_code == E.none
    member = response.member_id
    assert response.generation_id == 1 and response.leader == member
    assert response.protocol_name == "range"
    assert [m.member_id for m in response.members] == [member]
    sync_version = min(version, 5)
    assignment = nested(SYNC, sync_version, "SyncGroupRequestAssignment", member_id=member,
                        assignment=b"\x00\x01")
    sync = await client.request(SYNC, sync_version, req(
        SYNC, sync_version, group_id=group, generation_id=1, member_id=member,
        protocol_type="consumer", protocol_name="range", assignments=(assignment,)))
    assert (sync.error_code, sync.assignment) == (E.none, b"\x00\x01")
    hb_version = min(version, 4)
    beat = await client.request(HEARTBEAT, hb_version, req(
        HEARTBEAT, hb_version, group_id=group, generation_id=1, member_id=member))
    assert beat.error_code == E.none
    beat = await client.request(HEARTBEAT, hb_version, req(
        HEARTBEAT, hb_version, group_id=group, generation_id=9, member_id=member))
    assert beat.error_code == E.illegal_generation
    leave_version = min(version, 5)
    if leave_version >= 3:
        identity = nested(LEAVE, leave_version, "MemberIdentity", member_id=member,
                          reason="bye")
        ghost = nested(LEAVE, leave_version, "MemberIdentity", member_id="ghost")
        left = await client.request(LEAVE, leave_version, req(
            LEAVE, leave_version, group_id=group, members=(identity, ghost)))
        assert left.error_code == E.none
        assert [(m.member_id, m.error_code) for m in left.members] == [
            (member, E.none), ("ghost", E.unknown_member_id)]
    else:
        left = await client.request(LEAVE, leave_version, req(
            LEAVE, leave_version, group_id=group, member_id=member))
        assert left.error_code == E.none
        left = await client.request(LEAVE, leave_version, req(
            LEAVE, leave_version, group_id=group, member_id=member))
        assert left.error_code == E.unknown_member_id


async def test_inconsistent_protocols_and_session_timeouts(client: Any) -> None:
    bad = req(JOIN, 5, group_id="g", session_timeout=ms(10), rebalance_timeout=ms(10000),
              member_id="", protocol_type="consumer", protocols=())
    assert (await client.request(JOIN, 5, bad)).error_code == E.invalid_session_timeout
    empty = req(JOIN, 5, group_id="g", session_timeout=ms(6000), rebalance_timeout=ms(10000),
                member_id="", protocol_type="consumer", protocols=())
    assert (await client.request(JOIN, 5, empty)).error_code == E.inconsistent_group_protocol


async def test_empty_group_id_is_invalid_group_id_for_membership_apis(client: Any) -> None:
    # Kafka's isValidGroupId: only the offset and admin APIs accept "" (backwards compatibility).
    join = req(JOIN, 5, group_id="", session_timeout=ms(6000), rebalance_timeout=ms(10000),
               member_id="", protocol_type="consumer", protocols=())
    assert (await client.request(JOIN, 5, join)).error_code == E.invalid_group_id
    sync = req(SYNC, 5, group_id="", generation_id=1, member_id="m", protocol_type=None,
               protocol_name=None, assignments=())
    assert (await client.request(SYNC, 5, sync)).error_code == E.invalid_group_id
    beat = req(HEARTBEAT, 4, group_id="", generation_id=1, member_id="m")
    assert (await client.request(HEARTBEAT, 4, beat)).error_code == E.invalid_group_id
    leave = req(LEAVE, 1, group_id="", member_id="m")
    assert (await client.request(LEAVE, 1, leave)).error_code == E.invalid_group_id


async def commit(client: Any, version: int, group: str, offsets: dict[tuple[str, int], int],
                 generation: int = -1, member: str = "") -> Any:
    topics = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append(nested(
            OFFSET_COMMIT, version, "OffsetCommitRequestPartition", partition_index=partition,
            committed_offset=offset, committed_leader_epoch=-1,
            committed_metadata=f"m{offset}"))
    body = req(OFFSET_COMMIT, version, group_id=group, generation_id_or_member_epoch=generation,
               member_id=member, topics=tuple(
                   nested(OFFSET_COMMIT, version, "OffsetCommitRequestTopic", name=t,
                          partitions=tuple(ps)) for t, ps in topics.items()))
    return await client.request(OFFSET_COMMIT, version, body)


async def create_topic(broker: Any, name: str, partitions: int) -> None:
    broker.broker.log_manager.create_topic(name, partitions)


@pytest.mark.parametrize("version", range(2, 9))
async def test_offset_commit_and_fetch_versions(broker: Any, client: Any, version: int) -> None:
    await create_topic(broker, "t", 2)
    group = f"simple-{version}"
    response = await commit(client, version, group, {("t", 0): 5, ("t", 1): 6, ("nope", 0): 1})
    errors = {(t.name, p.partition_index): p.error_code
              for t in response.topics for p in t.partitions}
    assert errors == {("t", 0): E.none, ("t", 1): E.none,
                      ("nope", 0): E.unknown_topic_or_partition}
    fetch_version = min(version, 8) if version > 1 else 1
    if fetch_version >= 8:
        groups = (nested(OFFSET_FETCH, 8, "OffsetFetchRequestGroup", group_id=group, topics=None),
                  nested(OFFSET_FETCH, 8, "OffsetFetchRequestGroup", group_id="unknown",
                         topics=(nested(OFFSET_FETCH, 8, "OffsetFetchRequestTopics", name="t",
                                        partition_indexes=(0,)),)))
        fetched = await client.request(OFFSET_FETCH, 8, req(OFFSET_FETCH, 8, groups=groups))
        first, second = fetched.groups
        assert {(t.name, p.partition_index): (p.committed_offset, p.metadata)
                for t in first.topics for p in t.partitions} == {
            ("t", 0): (5, "m5"), ("t", 1): (6, "m6")}
        assert [(p.committed_offset, p.metadata) for t in second.topics
                for p in t.partitions] == [(-1, "")]
    else:
        topic = nested(OFFSET_FETCH, fetch_version, "OffsetFetchRequestTopic", name="t",
                       partition_indexes=(0, 1))
        fetched = await client.request(OFFSET_FETCH, fetch_version, req(
            OFFSET_FETCH, fetch_version, group_id=group, topics=(topic,)))
        assert [(p.partition_index, p.committed_offset, p.metadata)
                for t in fetched.topics for p in t.partitions] == [(0, 5, "m5"), (1, 6, "m6")]


async def test_offset_fetch_v1_and_all_topics_v7(broker: Any, client: Any) -> None:
    await create_topic(broker, "t", 1)
    await commit(client, 8, "grp", {("t", 0): 3})
    topic = nested(OFFSET_FETCH, 1, "OffsetFetchRequestTopic", name="t", partition_indexes=(0,))
    v1 = await client.request(OFFSET_FETCH, 1, req(OFFSET_FETCH, 1, group_id="grp",
                                                   topics=(topic,)))
    assert v1.topics[0].partitions[0].committed_offset == 3
    v7 = await client.request(OFFSET_FETCH, 7, req(OFFSET_FETCH, 7, group_id="grp", topics=None))
    assert v7.error_code == E.none
    assert [(t.name, p.committed_offset) for t in v7.topics for p in t.partitions] == [("t", 3)]


@pytest.mark.parametrize("version", range(0, 6))
async def test_list_describe_delete_versions(broker: Any, client: Any, version: int) -> None:
    await create_topic(broker, "t", 1)
    await commit(client, 8, "simple", {("t", 0): 1})
    listed = await client.request(LIST, version, req(LIST, version, states_filter=()))
    assert [g.group_id for g in listed.groups] == ["simple"]
    if version >= 4:
        stable_only = await client.request(LIST, version, req(LIST, version,
                                                              states_filter=("Stable",)))
        assert stable_only.groups == ()
        assert listed.groups[0].group_state == "Empty"
    if version >= 5:
        other = await client.request(LIST, version, req(LIST, version, types_filter=("consumer",)))
        assert other.groups == ()
    described = await client.request(DESCRIBE, version, req(
        DESCRIBE, version, groups=("simple", "missing"), include_authorized_operations=True))
    assert [(g.group_id, g.group_state, g.error_code) for g in described.groups] == [
        ("simple", "Empty", E.none), ("missing", "Dead", E.none)]
    delete_version = min(version, 2)
    deleted = await client.request(DELETE, delete_version, req(
        DELETE, delete_version, groups_names=("simple", "missing")))
    assert [(r.group_id, r.error_code) for r in deleted.results] == [
        ("simple", E.none), ("missing", E.group_id_not_found)]


async def test_offset_delete(broker: Any, client: Any) -> None:
    await create_topic(broker, "t", 2)
    await commit(client, 8, "od", {("t", 0): 1, ("t", 1): 2})
    body = req(OFFSET_DELETE, 0, group_id="od", topics=(
        nested(OFFSET_DELETE, 0, "OffsetDeleteRequestTopic", name="t", partitions=(
            nested(OFFSET_DELETE, 0, "OffsetDeleteRequestPartition", partition_index=0),)),))
    response = await client.request(OFFSET_DELETE, 0, body)
    assert response.error_code == E.none
    assert response.topics[0].partitions[0].error_code == E.none
    missing = req(OFFSET_DELETE, 0, group_id="nobody", topics=())
    assert (await client.request(OFFSET_DELETE, 0, missing)).error_code == E.group_id_not_found
    topic = nested(OFFSET_FETCH, 6, "OffsetFetchRequestTopic", name="t", partition_indexes=(0, 1))
    fetched = await client.request(OFFSET_FETCH, 6, req(OFFSET_FETCH, 6, group_id="od",
                                                        topics=(topic,)))
    assert [p.committed_offset for t in fetched.topics for p in t.partitions] == [-1, 2]


async def test_waiting_join_does_not_block_handlers(broker: Any) -> None:
    """A JoinGroup parked in the coordinator leaves the handler pool free."""
    import trio

    first = await WireClient.connect(broker.port)
    second = await WireClient.connect(broker.port)
    response = await first.request(JOIN, 5, join_body(5, group="wait"))
    member = response.member_id
    joined = await first.request(JOIN, 5, join_body(5, member, group="wait"))
    await first.request(SYNC, 5, req(SYNC, 5, group_id="wait", generation_id=1,
                                     member_id=member, assignments=()))
    # A second member joins and waits until the first rejoins.
    pending = await second.request(JOIN, 5, join_body(5, group="wait"))
    await second.send(JOIN, 5, join_body(5, pending.member_id, group="wait"))
    with trio.move_on_after(0.3) as waited:
        await second.receive()
    assert waited.cancelled_caught
    # Meanwhile other requests are served at once (num.io.threads does not matter).
    beat = await first.request(HEARTBEAT, 4, req(HEARTBEAT, 4, group_id="wait",
                                                 generation_id=1, member_id=member))
    assert beat.error_code == E.rebalance_in_progress
    rejoined = await first.request(JOIN, 5, join_body(5, member, group="wait"))
    _, other = await second.receive()
    assert rejoined.generation_id == other.generation_id == joined.generation_id + 1
    await first.aclose()
    await second.aclose()


async def test_deleting_a_topic_removes_its_committed_offsets(start_broker: Any) -> None:
    # Kafka's onPartitionsDeleted. Topics created and deleted under churn otherwise stayed in
    # every group that committed to them (the soak probe: 2,000 offsets of 1,000 deleted
    # topics in one group), and a topic created again would resume from the old offsets.
    import uuid

    first = await start_broker(**{"offsets.topic.num.partitions": "3"})
    await create_topic(first, "t", 2)
    await create_topic(first, "kept", 1)
    async with await WireClient.connect(first.port) as client:
        await commit(client, 8, "only-t", {("t", 0): 5, ("t", 1): 6})
        await commit(client, 8, "both", {("t", 0): 7, ("kept", 0): 8})
        deleted = await client.request(20, 6, req(20, 6, timeout=ms(30000), topics=(
            nested(20, 6, "DeleteTopicState", name="t", topic_id=uuid.UUID(int=0)),)))
        assert deleted.responses[0].error_code == E.none

        async def committed(group: str) -> list[tuple[str, int, int]]:
            found = await client.request(OFFSET_FETCH, 7, req(OFFSET_FETCH, 7, group_id=group,
                                                              topics=None))
            return [(t.name, p.partition_index, p.committed_offset)
                    for t in found.topics for p in t.partitions]

        assert await committed("both") == [("kept", 0, 8)]
        listed = await client.request(LIST, 4, req(LIST, 4, states_filter=()))
        assert [g.group_id for g in listed.groups] == ["both"]
        await create_topic(first, "t", 2)
        assert await committed("only-t") == []
    data = str(first.config.data_dir)
    await first.shutdown()

    # The tombstones were written: a restart does not bring the offsets back.
    again = await start_broker(**{"offsets.topic.num.partitions": "3", "log.dirs": data})
    assert set(again.broker.group_coordinator.groups) == {"both"}
    assert list(again.broker.group_coordinator.groups["both"].offsets) == [("kept", 0)]
