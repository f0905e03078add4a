"""DescribeGroups over a real socket, as Kafka 4's group coordinator answers it: classic groups
only; an unknown group, or a consumer (KIP-848) group, is a Dead group with no error below v6 and
GROUP_ID_NOT_FOUND with Kafka's message from v6 (KIP-1043)."""

from __future__ import annotations

import datetime
import sys
from typing import Any

import pytest
from kio.schema.errors import ErrorCode as E

from tests.kafka_wire import WireClient
from trio_broker.protocol.codec import request_schema

pytestmark = pytest.mark.timeout(30)

OFFSET_COMMIT, DESCRIBE_GROUPS, HEARTBEAT = 8, 15, 68


def mod(api_key: int, version: int) -> Any:
    return sys.modules[request_schema(api_key, version).__module__]


async def describe(client: WireClient, version: int, *groups: str) -> list[tuple[Any, ...]]:
    m = mod(DESCRIBE_GROUPS, version)
    extra = {"include_authorized_operations": False} if version >= 3 else {}
    answer = await client.request(DESCRIBE_GROUPS, version, m.DescribeGroupsRequest(
        groups=groups, **extra))
    return [(g.group_id, g.error_code, getattr(g, "error_message", None), g.group_state)
            for g in answer.groups]


async def test_describe_groups_v5_and_v6(broker: Any) -> None:
    broker.broker.log_manager.create_topic("t", 1)
    client = await WireClient.connect(broker.port)
    try:
        # A classic group holding offsets only (a simple commit): Empty, described at every
        # version.
        m = mod(OFFSET_COMMIT, 8)
        await client.request(OFFSET_COMMIT, 8, m.OffsetCommitRequest(
            group_id="simple", generation_id_or_member_epoch=-1, member_id="",
            group_instance_id=None, topics=(m.OffsetCommitRequestTopic(name="t", partitions=(
                m.OffsetCommitRequestPartition(partition_index=0, committed_offset=1,
                                               committed_leader_epoch=-1,
                                               committed_metadata=""),)),)))
        h = mod(HEARTBEAT, 0)
        joined = await client.request(HEARTBEAT, 0, h.ConsumerGroupHeartbeatRequest(
            group_id="modern", member_id="", member_epoch=0,
            rebalance_timeout=datetime.timedelta(seconds=30), subscribed_topic_names=("t",),
            topic_partitions=()))
        assert joined.error_code is E.none
        for version in (0, 5):
            assert await describe(client, version, "simple", "missing", "modern") == [
                ("simple", E.none, None, "Empty"), ("missing", E.none, None, "Dead"),
                ("modern", E.none, None, "Dead")]
        assert await describe(client, 6, "simple", "missing", "modern") == [
            ("simple", E.none, None, "Empty"),
            ("missing", E.group_id_not_found, "Group missing not found.", "Dead"),
            ("modern", E.group_id_not_found, "Group modern is not a classic group.", "Dead")]
    finally:
        await client.aclose()
