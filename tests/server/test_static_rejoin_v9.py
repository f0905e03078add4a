"""KIP-814 over the wire: a static leader restarting into a Stable group.

From JoinGroup v9 Kafka tells the restarted leader that it leads (its new member id as the
leader, the members listed) with ``skip_assignment``, so that it keeps watching the members'
metadata without reassigning; below v9 the answer names the old leader id and lists nobody
(``GroupMetadataManager.updateStaticMemberThenRebalanceOrCompleteJoin``)."""

from __future__ import annotations

import datetime
import sys
from typing import Any

import pytest
import trio
from kio.schema.errors import ErrorCode

from tests.kafka_wire import WireClient
from trio_broker.protocol.codec import request_schema

JOIN_GROUP, SYNC_GROUP = 11, 14


def join(version: int, instance: str, member_id: str = "") -> Any:
    m = sys.modules[request_schema(JOIN_GROUP, version).__module__]
    fields: dict[str, Any] = {}
    if version >= 8:
        fields["reason"] = None
    return m.JoinGroupRequest(
        group_id="g", session_timeout=datetime.timedelta(seconds=10),
        rebalance_timeout=datetime.timedelta(seconds=30), member_id=member_id,
        group_instance_id=instance, protocol_type="consumer",
        protocols=(m.JoinGroupRequestProtocol(name="range", metadata=instance.encode()),),
        **fields)


def sync(member_id: str, instance: str, assignments: dict[str, bytes]) -> Any:
    m = sys.modules[request_schema(SYNC_GROUP, 5).__module__]
    return m.SyncGroupRequest(
        group_id="g", generation_id=1, member_id=member_id, group_instance_id=instance,
        protocol_type="consumer", protocol_name="range",
        assignments=tuple(m.SyncGroupRequestAssignment(member_id=k, assignment=v)
                          for k, v in assignments.items()))


@pytest.mark.parametrize("version", [8, 9])
async def test_a_restarted_static_leader_is_told_it_leads_only_from_v9(
        start_broker: Any, version: int) -> None:
    running = await start_broker({"group.initial.rebalance.delay.ms": "0"})
    leader_client = await WireClient.connect(running.port)
    with trio.fail_after(30):
        first = await leader_client.request(JOIN_GROUP, version, join(version, "i1"))
        assert (first.error_code, first.leader) == (ErrorCode.none, first.member_id)
        synced = await leader_client.request(
            SYNC_GROUP, 5, sync(first.member_id, "i1", {first.member_id: b"all"}))
        assert (synced.error_code, synced.assignment) == (ErrorCode.none, b"all")
        # The leader restarts: a new connection, the same instance id, no member id.
        restarted = await WireClient.connect(running.port)
        again = await restarted.request(JOIN_GROUP, version, join(version, "i1"))
    assert again.error_code == ErrorCode.none
    assert again.member_id != first.member_id and again.generation_id == 1
    if version >= 9:
        assert (again.leader, again.skip_assignment) == (again.member_id, True)
        assert [(m.member_id, m.group_instance_id, m.metadata) for m in again.members] == [
            (again.member_id, "i1", b"i1")]
    else:  # v8 has no skip_assignment field
        assert (again.leader, again.members) == (first.member_id, ())
