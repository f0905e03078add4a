"""OffsetCommit v9 and OffsetFetch v9 (KIP-848) over a real socket to the in-process broker,
answered as Kafka 3.9's group coordinator answers: a consumer group's member commits with v9+
only (UNSUPPORTED_VERSION below), and OffsetFetch v9's member id and epoch are checked against
the consumer group (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH as the group's error, no topics),
while a request naming no member, a classic group and an unknown group are not checked.
"""

from __future__ import annotations

import datetime
import sys
from typing import Any

import pytest
from kio.schema.errors import ErrorCode as E

from tests.kafka_wire import WireClient
from trio_broker.protocol.codec import request_schema

pytestmark = pytest.mark.timeout(30)

OFFSET_COMMIT, OFFSET_FETCH, HEARTBEAT = 8, 9, 68


def mod(api_key: int, version: int) -> Any:
    return sys.modules[request_schema(api_key, version).__module__]


async def join(client: WireClient) -> tuple[str, int]:
    m = mod(HEARTBEAT, 0)
    answer = await client.request(HEARTBEAT, 0, m.ConsumerGroupHeartbeatRequest(
        group_id="g", member_id="", member_epoch=0, rebalance_timeout=datetime.timedelta(
            seconds=30), subscribed_topic_names=("t",), topic_partitions=()))
    assert answer.error_code is E.none
    return answer.member_id, int(answer.member_epoch)


async def commit(client: WireClient, version: int, group: str, member_id: str, epoch: int,
                 offset: int) -> Any:
    m = mod(OFFSET_COMMIT, version)
    answer = await client.request(OFFSET_COMMIT, version, m.OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=epoch, member_id=member_id,
        **({"group_instance_id": None} if version >= 7 else {}), topics=(m.OffsetCommitRequestTopic(name="t", partitions=(
            m.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset,
                                           committed_leader_epoch=-1,
                                           committed_metadata=""),)),)))
    return answer.topics[0].partitions[0].error_code


async def fetch(client: WireClient, group: str, member_id: str | None, epoch: int
                ) -> tuple[Any, list[tuple[str, int, int]]]:
    m = mod(OFFSET_FETCH, 9)
    answer = await client.request(OFFSET_FETCH, 9, m.OffsetFetchRequest(
        groups=(m.OffsetFetchRequestGroup(group_id=group, member_id=member_id,
                                          member_epoch=epoch, topics=(
            m.OffsetFetchRequestTopics(name="t", partition_indexes=(0,)),)),),
        require_stable=False))
    group_answer = answer.groups[0]
    return group_answer.error_code, [(t.name, int(p.partition_index), int(p.committed_offset))
                                     for t in group_answer.topics for p in t.partitions]


async def test_offset_commit_and_fetch_v9_of_a_consumer_group(broker: Any) -> None:
    broker.broker.log_manager.create_topic("t", 1)
    client = await WireClient.connect(broker.port)
    try:
        member, epoch = await join(client)
        assert await commit(client, 9, "g", member, epoch, 5) is E.none
        assert await commit(client, 9, "g", member, epoch + 1, 6) is E.stale_member_epoch
        assert await commit(client, 9, "g", "nobody", epoch, 6) is E.unknown_member_id
        # The member below v9: Kafka 3.9 refuses it (validateOffsetCommit), v8 and v6 alike.
        assert await commit(client, 8, "g", member, epoch, 6) is E.unsupported_version
        assert await commit(client, 6, "g", member, epoch, 6) is E.unsupported_version
        # An unknown member below v9 is still UNKNOWN_MEMBER_ID (looked up first).
        assert await commit(client, 8, "g", "nobody", epoch, 6) is E.unknown_member_id
        # A simple commit while the group has members: refused at every version.
        assert await commit(client, 9, "g", "", -1, 6) is E.unknown_member_id

        assert await fetch(client, "g", member, epoch) == (E.none, [("t", 0, 5)])
        assert await fetch(client, "g", None, -1) == (E.none, [("t", 0, 5)])
        assert await fetch(client, "g", member, epoch + 1) == (E.stale_member_epoch, [])
        assert await fetch(client, "g", "nobody", epoch) == (E.unknown_member_id, [])
        # Classic and unknown groups ignore v9's member (ClassicGroup.validateOffsetFetch).
        assert await commit(client, 9, "classic", "", -1, 3) is E.none
        assert await fetch(client, "classic", "x", 4) == (E.none, [("t", 0, 3)])
        assert await fetch(client, "none", "x", 4) == (E.none, [("t", 0, -1)])
    finally:
        await client.aclose()
