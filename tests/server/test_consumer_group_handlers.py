"""ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69) over real sockets: frames captured
from librdkafka 2.16 (``group.protocol=consumer``) decoded through the pre-scan, then a member's
life in an in-process broker (join, describe, list, fence, leave)."""

from __future__ import annotations

import datetime
import random
import uuid
from typing import Any

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.consumer_group_describe.v0.request import ConsumerGroupDescribeRequest
from kio.schema.consumer_group_heartbeat.v1.request import (
    ConsumerGroupHeartbeatRequest,
    TopicPartitions,
)
from kio.schema.errors import ErrorCode as E
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.static.primitive import i32, i32Timedelta

from tests.kafka_wire import WireClient
from tests.server.test_acls import ON, Op, P, R, binding
from trio_broker.protocol.codec import decode_request
from trio_broker.server.registry import supported_versions

pytestmark = pytest.mark.timeout(30)

#: What librdkafka 2.16 sent (request payloads after the length prefix): its join (epoch 0,
#: topic names, an empty regex, server assignor ``range``, no owned partitions), a heartbeat
#: reporting its partitions, the AdminClient's ConsumerGroupDescribe v0, and its leave (-1).
LIBRDKAFKA_JOIN = bytes.fromhex(
    "0044000100000003000772646b61666b6100036764176941685647496679524f5739754373353258346c"
    "5341000000000000000493e002036433010672616e67650100")
LIBRDKAFKA_OWNED = bytes.fromhex(
    "0044000100000006000772646b61666b6100036764176941685647496679524f5739754373353258346c"
    "5341000000010000ffffffff0000000242434523b09b4345b5fee521d923637e04000000000000000100"
    "0000020000")
LIBRDKAFKA_DESCRIBE = bytes.fromhex("0045000000000005000772646b61666b6100020367640000")
LIBRDKAFKA_LEAVE = bytes.fromhex(
    "0044000100000007000772646b61666b6100036764176941685647496679524f5739754373353258346c"
    "5341ffffffff0000ffffffff0000000000")


def test_librdkafka_frames_decode_through_the_prescan() -> None:
    versions = supported_versions()
    join = decode_request(LIBRDKAFKA_JOIN, versions)
    assert (join.api_key, join.api_version) == (68, 1)
    body = join.body
    assert body.member_epoch == 0 and body.subscribed_topic_names == ("d3",)
    assert body.subscribed_topic_regex == "" and body.server_assignor == "range"
    assert body.rebalance_timeout == datetime.timedelta(minutes=5) and body.topic_partitions == ()
    owned = decode_request(LIBRDKAFKA_OWNED, versions).body
    assert owned.subscribed_topic_names is None and owned.member_epoch == 1
    assert [tuple(t.partitions) for t in owned.topic_partitions] == [(0, 1, 2)]
    describe = decode_request(LIBRDKAFKA_DESCRIBE, versions)
    assert (describe.api_key, describe.api_version) == (69, 0)
    assert describe.body.group_ids == ("gd",)
    assert decode_request(LIBRDKAFKA_LEAVE, versions).body.member_epoch == -1


def _heartbeat(member: str, epoch: int, **kw: Any) -> ConsumerGroupHeartbeatRequest:
    # A join carries its rebalance timeout and no partitions (Kafka refuses it otherwise).
    fields: dict[str, Any] = {"group_id": "g", "member_id": member, "member_epoch": i32(epoch),
                              "rebalance_timeout": i32Timedelta.parse(
                                  datetime.timedelta(milliseconds=300000 if epoch == 0 else -1)),
                              "topic_partitions": () if epoch == 0 else None, **kw}
    return ConsumerGroupHeartbeatRequest(**fields)


async def test_member_life_over_the_wire(start_broker: Any, autojump_clock: Any) -> None:
    broker = await start_broker({"group.consumer.heartbeat.interval.ms": "700"})
    broker.broker.log_manager.create_topic("t", 3)
    topic_id = broker.broker.log_manager.topics["t"].topic_id
    member = uuid.uuid4().hex
    async with await WireClient.connect(broker.port) as client:
        joined = await client.request(68, 1, _heartbeat(
            member, 0, subscribed_topic_names=("t",), subscribed_topic_regex="",
            server_assignor="uniform", topic_partitions=()))
        assert joined.error_code == E.none and joined.member_epoch == 1
        assert joined.heartbeat_interval == datetime.timedelta(milliseconds=700)
        assert [(t.topic_id, tuple(t.partitions)) for t in joined.assignment.topic_partitions] \
            == [(topic_id, (0, 1, 2))]
        steady = await client.request(68, 1, _heartbeat(member, 1))
        assert steady.error_code == E.none and steady.assignment is None
        fenced = await client.request(68, 1, _heartbeat(member, 7, topic_partitions=(
            TopicPartitions(topic_id=topic_id, partitions=(i32(0),)),)))
        assert fenced.error_code == E.fenced_member_epoch and fenced.error_message
        bad = await client.request(68, 1, _heartbeat(
            "other", 0, subscribed_topic_names=("t",), server_assignor="sticky"))
        assert bad.error_code == E.unsupported_assignor

        described = await client.request(69, 0, ConsumerGroupDescribeRequest(
            group_ids=("g", "nope"), include_authorized_operations=False))
        group, missing = described.groups
        assert group.error_code == E.none and group.group_state == "stable"
        assert group.group_epoch == group.assignment_epoch == 1
        assert group.assignor_name == "uniform"
        [m] = group.members
        assert m.member_id == member and m.subscribed_topic_names == ("t",)
        assert [t.topic_name for t in m.assignment.topic_partitions] == ["t"]
        assert missing.error_code == E.group_id_not_found

        listed = await client.request(16, 5, ListGroupsRequest(states_filter=(),
                                                               types_filter=("consumer",)))
        assert [(g.group_id, g.group_type, g.group_state) for g in listed.groups] == \
            [("g", "consumer", "Stable")]

        left = await client.request(68, 1, _heartbeat(member, -1))
        assert left.error_code == E.none and left.member_epoch == -1
        assert not broker.broker.group_coordinator.consumer_groups.groups["g"].members


async def test_malformed_heartbeats_are_invalid_request_as_kafka(start_broker: Any,
                                                                 autojump_clock: Any) -> None:
    # Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid, before any group state changes.
    broker = await start_broker()
    broker.broker.log_manager.create_topic("t", 3)
    topic_id = broker.broker.log_manager.topics["t"].topic_id
    claimed = (TopicPartitions(topic_id=topic_id, partitions=(i32(0), i32(1), i32(2))),)
    never = datetime.timedelta(milliseconds=-1)
    cases = [
        (_heartbeat("m", 0, subscribed_topic_names=("t",), rebalance_timeout=never),
         "RebalanceTimeoutMs must be provided in first request."),
        (_heartbeat("m", 0, subscribed_topic_names=("t",), topic_partitions=None),
         "TopicPartitions must be empty when (re-)joining."),
        (_heartbeat("m", 0, subscribed_topic_names=("t",), topic_partitions=claimed),
         "TopicPartitions must be empty when (re-)joining."),
        (_heartbeat("m", 0), "Either SubscribedTopicNames or SubscribedTopicRegex must be "
                             "non-null when (re-)joining."),
        (_heartbeat("m", -2), "InstanceId can't be null."),
        (_heartbeat("m", -5), "MemberEpoch is invalid."),
        (_heartbeat(" ", 1), "MemberId can't be empty."),
        (_heartbeat("m", 0, subscribed_topic_names=("t",), instance_id=""),
         "InstanceId can't be empty."),
        (_heartbeat("m", 0, subscribed_topic_names=("t",), rack_id=" "),
         "RackId can't be empty."),
        (_heartbeat("m", 0, subscribed_topic_names=("t",), group_id=" "),
         "GroupId can't be empty."),
    ]
    async with await WireClient.connect(broker.port) as client:
        for request, message in cases:
            answer = await client.request(68, 1, request)
            assert (answer.error_code, answer.error_message) == (E.invalid_request, message)
        assert not broker.broker.group_coordinator.consumer_groups.groups
        joined = await client.request(68, 1, _heartbeat("m", 0, subscribed_topic_names=("t",)))
        assert joined.error_code == E.none and joined.member_epoch == 1


async def test_heartbeat_whose_group_snapshot_is_too_large_changes_nothing(
        start_broker: Any, autojump_clock: Any) -> None:
    # The group is one __consumer_offsets record: a member whose subscription makes it larger
    # than message.max.bytes (compressed) is refused and rolled back, instead of staying in
    # the group and failing every later change of every member.
    broker = await start_broker({"message.max.bytes": "100000"})
    broker.broker.log_manager.create_topic("t", 3)
    async with await WireClient.connect(broker.port) as client:
        ok = await client.request(68, 1, _heartbeat("ok", 0, subscribed_topic_names=("t",)))
        assert ok.error_code == E.none and ok.member_epoch == 1
        # Random names: zstd cannot shrink them below the limit.
        draw = random.Random(5)
        names = tuple(f"{draw.getrandbits(96):024x}" for _ in range(10000))
        huge = await client.request(68, 1, _heartbeat("huge", 0, subscribed_topic_names=names))
        assert huge.error_code == E.unknown_server_error and "over the limit" in \
            huge.error_message
        group = broker.broker.group_coordinator.consumer_groups.groups["g"]
        assert set(group.members) == {"ok"} and group.group_epoch == 1
        steady = await client.request(68, 1, _heartbeat("ok", 1))
        assert steady.error_code == E.none and steady.member_epoch == 1
        other = await client.request(68, 1, _heartbeat("other", 0, subscribed_topic_names=("t",)))
        assert other.error_code == E.none and other.member_epoch == 2


async def test_consumer_protocol_switched_off(start_broker: Any, autojump_clock: Any) -> None:
    broker = await start_broker({"group.coordinator.rebalance.protocols": "classic"})
    async with await WireClient.connect(broker.port) as client:
        answer = await client.request(68, 1, _heartbeat(
            "m", 0, subscribed_topic_names=("t",), topic_partitions=()))
        assert answer.error_code == E.unsupported_version and answer.error_message


async def _advertised(port: int) -> set[int]:
    async with await WireClient.connect(port) as client:
        answer = await client.request(18, 3, ApiVersionsRequest(
            client_software_name="t", client_software_version="1"))
        assert answer.error_code == E.none
        return {int(k.api_key) for k in answer.api_keys}


@pytest.mark.parametrize(("protocols", "listed"), [("classic", False), ("classic,consumer", True)])
async def test_api_versions_lists_kip848_apis_only_when_enabled(
        start_broker: Any, autojump_clock: Any, protocols: str, listed: bool) -> None:
    # Kafka leaves ConsumerGroupHeartbeat/Describe out of ApiVersions without the protocol.
    broker = await start_broker({"group.coordinator.rebalance.protocols": protocols})
    keys = await _advertised(broker.port)
    assert 18 in keys and 11 in keys
    assert (68 in keys, 69 in keys) == (listed, listed)


async def test_acls_group_read_and_topic_describe(start_broker: Any, autojump_clock: Any) -> None:
    broker = await start_broker({**ON, "super.users": "User:admin"})
    broker.broker.log_manager.create_topic("t", 1)
    async with await WireClient.connect(broker.port) as client:
        join = _heartbeat("m", 0, subscribed_topic_names=("t",), topic_partitions=())
        denied = await client.request(68, 1, join)
        assert denied.error_code == E.group_authorization_failed
        # Added on the broker's authorizer directly (CreateAcls needs a super user).
        authorizer = broker.broker.authorizer
        authorizer.add([binding("g", Op.READ, rt=R.GROUP), binding("g", Op.DESCRIBE, rt=R.GROUP)],
                       "User:admin")
        no_topic = await client.request(68, 1, join)
        assert no_topic.error_code == E.topic_authorization_failed
        authorizer.add([binding("t", Op.DESCRIBE)], "User:admin")
        assert (await client.request(68, 1, join)).error_code == E.none
        described = await client.request(69, 0, ConsumerGroupDescribeRequest(
            group_ids=("g", "other"), include_authorized_operations=True))
        ours, other = described.groups
        assert ours.error_code == E.none and ours.authorized_operations == (1 << 3) | (1 << 8)
        assert other.error_code == E.group_authorization_failed


async def test_regex_subscription_filtered_by_topic_acls(start_broker: Any,
                                                         autojump_clock: Any) -> None:
    # Kafka 4 resolves a member's regex only against topics its principal may DESCRIBE.
    broker = await start_broker({**ON, "super.users": "User:admin"})
    for name, partitions in (("allowed-a", 2), ("allowed-b", 1), ("secret", 3)):
        broker.broker.log_manager.create_topic(name, partitions)
    broker.broker.authorizer.add(
        [binding("g", Op.READ, rt=R.GROUP),
         binding("allowed-", Op.DESCRIBE, pattern=P.PREFIXED),
         binding("allowed-", Op.READ, pattern=P.PREFIXED)], "User:admin")
    ids = {info.topic_id: name for name, info in broker.broker.log_manager.topics.items()}
    async with await WireClient.connect(broker.port) as client:
        joined = await client.request(68, 1, _heartbeat(
            "m", 0, subscribed_topic_regex=".*", topic_partitions=()))
        assert joined.error_code == E.none
        assigned = {(ids[t.topic_id], int(p)) for t in joined.assignment.topic_partitions
                    for p in t.partitions}
        assert assigned == {("allowed-a", 0), ("allowed-a", 1), ("allowed-b", 0)}
