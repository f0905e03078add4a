"""OffsetCommit v10 and OffsetFetch v10 (Kafka 4.1, KIP-848's topic ids) over a real socket to
the in-process broker, answered as Kafka's KafkaApis.handleOffsetCommitRequest and
fetchOffsetsForGroup / fetchAllOffsetsForGroup answer them: each topic is named by its id,
resolved to its name once per request; an id this broker has no topic of is UNKNOWN_TOPIC_ID for
each of its partitions, echoed back by id; authorization goes by the resolved name (an id of a
topic the client may not read or describe is TOPIC_AUTHORIZATION_FAILED); the offsets are the
same ones v9 reads and writes by name, and KIP-848's member checks apply as at v9.
"""

from __future__ import annotations

import sys
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode as E
from kio.static.primitive import i32

from tests.kafka_wire import WireClient
from tests.server.test_acls import ON, Op, R, binding
from tests.server.test_offsets_v9 import join
from trio_broker.protocol.codec import request_schema

pytestmark = pytest.mark.timeout(30)

OFFSET_COMMIT, OFFSET_FETCH = 8, 9
UNKNOWN = uuid.UUID("00000000-0000-0000-0000-00000000abcd")


def mod(api_key: int, version: int) -> Any:
    return sys.modules[request_schema(api_key, version).__module__]


def topic_id(running: Any, name: str) -> uuid.UUID:
    return running.broker.log_manager.topics[name].topic_id


async def commit(client: WireClient, version: int, entries: list[tuple[Any, int, int]],
                 group: str = "g", member_id: str = "", epoch: int = -1
                 ) -> list[tuple[Any, int, E]]:
    """Commit ``(topic name or id, partition, offset)`` entries, one topic entry each; the
    answer as ``(name or id, partition, error)``."""
    m = mod(OFFSET_COMMIT, version)
    key = "topic_id" if version >= 10 else "name"
    answer = await client.request(OFFSET_COMMIT, version, m.OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=i32(epoch), member_id=member_id,
        topics=tuple(m.OffsetCommitRequestTopic(**{key: topic}, partitions=(
            m.OffsetCommitRequestPartition(partition_index=i32(partition),
                                           committed_offset=offset,
                                           committed_metadata="m"),))
            for topic, partition, offset in entries)))
    return [(getattr(t, key), int(p.partition_index), p.error_code)
            for t in answer.topics for p in t.partitions]


async def fetch(client: WireClient, version: int, topics: list[tuple[Any, int]] | None,
                group: str = "g", member_id: str | None = None, epoch: int = -1
                ) -> tuple[E, list[tuple[Any, int, int, E]]]:
    """Fetch ``(topic name or id, partition)`` (None: everything the group has); the group's
    error and ``(name or id, partition, offset, error)`` in the answer's order."""
    m = mod(OFFSET_FETCH, version)
    key = "topic_id" if version >= 10 else "name"
    answer = await client.request(OFFSET_FETCH, version, m.OffsetFetchRequest(
        groups=(m.OffsetFetchRequestGroup(
            group_id=group, member_id=member_id, member_epoch=i32(epoch),
            topics=None if topics is None else tuple(
                m.OffsetFetchRequestTopics(**{key: topic}, partition_indexes=(i32(p),))
                for topic, p in topics)),),
        require_stable=False))
    group_answer = answer.groups[0]
    return group_answer.error_code, [
        (getattr(t, key), int(p.partition_index), int(p.committed_offset), p.error_code)
        for t in group_answer.topics for p in t.partitions]


async def test_v10_by_id_and_v9_by_name_read_each_others_offsets(broker: Any) -> None:
    lm = broker.broker.log_manager
    lm.create_topic("a", 2)
    lm.create_topic("b", 1)
    a, b = topic_id(broker, "a"), topic_id(broker, "b")
    client = await WireClient.connect(broker.port)
    try:
        assert await commit(client, 10, [(a, 0, 5), (a, 1, 6), (b, 0, 7)]) == [
            (a, 0, E.none), (a, 1, E.none), (b, 0, E.none)]
        # v9 reads them by name...
        assert await fetch(client, 9, [("a", 0), ("a", 1), ("b", 0)]) == (E.none, [
            ("a", 0, 5, E.none), ("a", 1, 6, E.none), ("b", 0, 7, E.none)])
        # ... and writes by name what v10 reads back by id, named or all at once.
        assert await commit(client, 9, [("a", 0, 50)]) == [("a", 0, E.none)]
        assert await fetch(client, 10, [(b, 0), (a, 0)]) == (E.none, [
            (b, 0, 7, E.none), (a, 0, 50, E.none)])
        assert await fetch(client, 10, None) == (E.none, [
            (a, 0, 50, E.none), (a, 1, 6, E.none), (b, 0, 7, E.none)])
        # A partition the topic has not: UNKNOWN_TOPIC_OR_PARTITION, as by name.
        assert await commit(client, 10, [(b, 3, 1)]) == [(b, 3, E.unknown_topic_or_partition)]
    finally:
        await client.aclose()


async def test_an_unknown_topic_id_is_unknown_topic_id_echoed_by_id(broker: Any) -> None:
    broker.broker.log_manager.create_topic("a", 1)
    a = topic_id(broker, "a")
    client = await WireClient.connect(broker.port)
    try:
        # Each partition of the unknown id fails; the known topic is committed all the same.
        assert await commit(client, 10, [(UNKNOWN, 0, 1), (a, 0, 2), (UNKNOWN, 4, 3)]) == [
            (UNKNOWN, 0, E.unknown_topic_id), (a, 0, E.none), (UNKNOWN, 4, E.unknown_topic_id)]
        # The zero id names no topic either (kio reads it as None).
        assert await commit(client, 10, [(None, 0, 1)]) == [(None, 0, E.unknown_topic_id)]
        # Fetch: the coordinator's answers first, then the ids it was not asked about.
        assert await fetch(client, 10, [(UNKNOWN, 0), (a, 0)]) == (E.none, [
            (a, 0, 2, E.none), (UNKNOWN, 0, -1, E.unknown_topic_id)])
    finally:
        await client.aclose()


async def test_the_lookup_of_ids_is_one_per_request(broker: Any) -> None:
    lm = broker.broker.log_manager
    for name in ("a", "b", "c"):
        lm.create_topic(name, 1)
    ids = [topic_id(broker, name) for name in ("a", "b", "c")]
    calls: list[int] = []
    real = lm.names_by_id

    def counted() -> dict[uuid.UUID, str]:
        calls.append(1)
        return real()

    lm.names_by_id = counted
    client = await WireClient.connect(broker.port)
    try:
        assert [e for *_, e in await commit(client, 10, [(i, 0, 1) for i in ids])] \
            == [E.none] * 3
        assert len(calls) == 1
        m = mod(OFFSET_FETCH, 10)
        answer = await client.request(OFFSET_FETCH, 10, m.OffsetFetchRequest(groups=tuple(
            m.OffsetFetchRequestGroup(group_id=group, topics=tuple(
                m.OffsetFetchRequestTopics(topic_id=i, partition_indexes=(i32(0),))
                for i in ids)) for group in ("g", "h")), require_stable=False))
        assert [[int(p.committed_offset) for t in g.topics for p in t.partitions]
                for g in answer.groups] == [[1, 1, 1], [-1, -1, -1]]
        assert len(calls) == 2
        # Below v10 no id is looked up.
        await commit(client, 9, [("a", 0, 2)])
        await fetch(client, 9, [("a", 0)])
        assert len(calls) == 2
    finally:
        await client.aclose()


async def test_v10_is_authorized_by_the_resolved_name(start_broker: Any) -> None:
    running = await start_broker(ON)
    for name in ("a", "b"):
        running.broker.log_manager.create_topic(name, 1)
    a, b = topic_id(running, "a"), topic_id(running, "b")
    authorizer = running.broker.authorizer
    client = await WireClient.connect(running.port)
    try:
        # Without READ on the group every partition fails, an unknown id's too.
        assert await commit(client, 10, [(a, 0, 5), (UNKNOWN, 0, 5)]) == [
            (a, 0, E.group_authorization_failed), (UNKNOWN, 0, E.group_authorization_failed)]
        assert await fetch(client, 10, [(a, 0)]) == (E.group_authorization_failed, [])
        authorizer.add([binding("g", Op.READ, rt=R.GROUP), binding("a", Op.READ)], "test")
        # An id of a topic the client may not read is resolved first, then refused by name:
        # TOPIC_AUTHORIZATION_FAILED (ids are not secret: Kafka's Metadata says as much);
        # an unknown id stays UNKNOWN_TOPIC_ID.
        assert await commit(client, 10, [(b, 0, 6), (a, 0, 5), (UNKNOWN, 0, 1)]) == [
            (b, 0, E.topic_authorization_failed), (a, 0, E.none),
            (UNKNOWN, 0, E.unknown_topic_id)]
        assert await fetch(client, 10, [(b, 0), (UNKNOWN, 0), (a, 0)]) == (E.none, [
            (a, 0, 5, E.none), (b, 0, -1, E.topic_authorization_failed),
            (UNKNOWN, 0, -1, E.unknown_topic_id)])
        # Everything: the topics the client may not describe are left out.
        assert await fetch(client, 10, None) == (E.none, [(a, 0, 5, E.none)])
        authorizer.add([binding("b", Op.READ)], "test")
        assert await commit(client, 10, [(b, 0, 6)]) == [(b, 0, E.none)]
        assert await fetch(client, 10, None) == (E.none, [(a, 0, 5, E.none), (b, 0, 6, E.none)])
    finally:
        await client.aclose()


async def test_kip_848_member_checks_apply_at_v10(broker: Any) -> None:
    broker.broker.log_manager.create_topic("t", 1)
    t = topic_id(broker, "t")
    client = await WireClient.connect(broker.port)
    try:
        member, epoch = await join(client)
        assert await commit(client, 10, [(t, 0, 5)], member_id=member, epoch=epoch) == [
            (t, 0, E.none)]
        assert await commit(client, 10, [(t, 0, 6)], member_id=member, epoch=epoch + 1) == [
            (t, 0, E.stale_member_epoch)]
        assert await commit(client, 10, [(t, 0, 6)], member_id="nobody", epoch=epoch) == [
            (t, 0, E.unknown_member_id)]
        # A simple commit while the group has members.
        assert await commit(client, 10, [(t, 0, 6)]) == [(t, 0, E.unknown_member_id)]
        assert await fetch(client, 10, [(t, 0)], member_id=member, epoch=epoch) == (
            E.none, [(t, 0, 5, E.none)])
        # The group's error alone, no topics (unknown ids included).
        assert await fetch(client, 10, [(t, 0), (UNKNOWN, 0)], member_id=member,
                           epoch=epoch + 1) == (E.stale_member_epoch, [])
        assert await fetch(client, 10, [(t, 0)], member_id="nobody", epoch=epoch) == (
            E.unknown_member_id, [])
    finally:
        await client.aclose()
