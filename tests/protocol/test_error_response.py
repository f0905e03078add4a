"""The error response of every supported API and version (``protocol.error_response``).

Kafka's ``AbstractRequest.getErrorResponse`` is written by hand per request class; ours is one
rule over kio's schemas plus a few overrides. The expectations here are written from Kafka's
request classes, independently of the rule: which request arrays each response echoes, with
which identifying fields, and which values mean "no data".
"""

from __future__ import annotations

import dataclasses
import datetime
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.static.primitive import Records, i16, i32, i32Timedelta, i64

from trio_broker.protocol.codec import (
    DecodedRequest,
    api_name,
    decode_response,
    encode_response,
    request_schema,
)
from trio_broker.protocol.error_response import UNKNOWN_SERVER_ERROR_MESSAGE, error_response
from trio_broker.server.registry import supported_versions

# Produce needs record bytes; their content does not matter to an error response.
st.register_type_strategy(Records, st.one_of(st.none(), st.binary(max_size=20)))

API_VERSIONS = [(key, version) for key, (low, high) in supported_versions().items()
                for version in range(low, high + 1)]

# What Kafka's getErrorResponse echoes: (request array path, response array path,
# [(request field, response field)] compared entry by entry; "=" compares the value itself for
# arrays of plain values). Keyed by API key, then by the lowest version the line applies to.
Mirror = tuple[str, str, list[tuple[str, str]]]
MIRRORS: dict[int, list[tuple[int, int, Mirror]]] = {
    0: [(0, 12, ("topic_data", "responses", [("name", "name")])),
        (13, 99, ("topic_data", "responses", [("topic_id", "topic_id")])),  # KIP-516
        (0, 99, ("topic_data.partition_data", "responses.partition_responses",
                 [("index", "index")]))],
    1: [(0, 12, ("topics", "responses", [("topic", "topic")])),
        (0, 12, ("topics.partitions", "responses.partitions",
                 [("partition", "partition_index")]))],
    2: [(0, 99, ("topics", "topics", [("name", "name")])),
        (0, 99, ("topics.partitions", "topics.partitions",
                 [("partition_index", "partition_index")]))],
    3: [(0, 9, ("topics", "topics", [("name", "name")])),
        (10, 99, ("topics", "topics", [("name", "name"), ("topic_id", "topic_id")]))],
    8: [(0, 9, ("topics", "topics", [("name", "name")])),
        (10, 99, ("topics", "topics", [("topic_id", "topic_id")])),  # Kafka 4.1: by id
        (0, 99, ("topics.partitions", "topics.partitions",
                 [("partition_index", "partition_index")]))],
    9: [(0, 1, ("topics", "topics", [("name", "name")])),
        (0, 1, ("topics.partition_indexes", "topics.partitions", [("=", "partition_index")])),
        (8, 99, ("groups", "groups", [("group_id", "group_id")]))],
    10: [(4, 99, ("coordinator_keys", "coordinators", [("=", "key")]))],
    15: [(0, 99, ("groups", "groups", [("=", "group_id")]))],
    69: [(0, 99, ("group_ids", "groups", [("=", "group_id")]))],
    19: [(0, 99, ("topics", "topics", [("name", "name")]))],
    20: [(0, 5, ("topic_names", "responses", [("=", "name")])),
         (6, 99, ("topics", "responses", [("name", "name"), ("topic_id", "topic_id")]))],
    21: [(0, 99, ("topics", "topics", [("name", "name")])),
         (0, 99, ("topics.partitions", "topics.partitions",
                  [("partition_index", "partition_index")]))],
    23: [(0, 99, ("topics", "topics", [("topic", "topic")])),
         (0, 99, ("topics.partitions", "topics.partitions", [("partition", "partition")]))],
    32: [(0, 99, ("resources", "results",
                  [("resource_type", "resource_type"), ("resource_name", "resource_name")]))],
    33: [(0, 99, ("resources", "responses",
                  [("resource_type", "resource_type"), ("resource_name", "resource_name")]))],
    37: [(0, 99, ("topics", "results", [("name", "name")]))],
    42: [(0, 99, ("groups_names", "results", [("=", "group_id")]))],
    43: [(0, 99, ("topic_partitions", "replica_election_results", [("topic", "topic")])),
         (0, 99, ("topic_partitions.partitions", "replica_election_results.partition_result",
                  [("=", "partition_id")]))],
    44: [(0, 99, ("resources", "responses",
                  [("resource_type", "resource_type"), ("resource_name", "resource_name")]))],
    45: [(0, 99, ("topics", "responses", [("name", "name")])),
         (0, 99, ("topics.partitions", "responses.partitions",
                  [("partition_index", "partition_index")]))],
    # CreateAcls / DeleteAcls: nCopies of the error result, one per creation / filter.
    30: [(0, 99, ("creations", "results", []))],
    31: [(0, 99, ("filters", "filter_results", []))],
    49: [(0, 99, ("entries", "entries", [])),
         (0, 99, ("entries.entity", "entries.entity",
                  [("entity_type", "entity_type"), ("entity_name", "entity_name")]))],
    24: [(0, 3, ("v3_and_below_topics", "results_by_topic_v3_and_below", [("name", "name")])),
         (0, 3, ("v3_and_below_topics.partitions",
                 "results_by_topic_v3_and_below.results_by_partition",
                 [("=", "partition_index")]))],
    28: [(0, 99, ("topics", "topics", [("name", "name")])),
         (0, 99, ("topics.partitions", "topics.partitions",
                  [("partition_index", "partition_index")]))],
    65: [(0, 99, ("transactional_ids", "transaction_states", [("=", "transactional_id")]))],
    61: [(0, 99, ("topics", "topics", [("name", "name")])),
         (0, 99, ("topics.partition_indexes", "topics.partitions", [("=", "partition_index")]))],
    75: [(0, 99, ("topics", "topics", [("name", "name")]))],
    # WriteTxnMarkersRequest.getErrorResponse: every marker, topic and partition echoed.
    27: [(1, 99, ("markers", "markers", [("producer_id", "producer_id")])),
         (1, 99, ("markers.topics", "markers.topics", [("name", "name")])),
         (1, 99, ("markers.topics.partition_indexes", "markers.topics.partitions",
                  [("=", "partition_index")]))],
}
#: Response arrays Kafka leaves empty even though the request has entries to echo.
EMPTY: dict[int, list[tuple[int, int, str]]] = {
    1: [(13, 99, "responses")],  # Fetch v13+: the top-level error only
    75: [(0, 99, "topics.partitions")],  # DescribeTopicPartitions: no partitions
    9: [(2, 7, "topics"), (8, 99, "groups.topics")],  # OffsetFetch: top-level / group error only
    11: [(0, 99, "members")],  # JoinGroup
    13: [(0, 99, "members")],  # LeaveGroup: the top-level error only
    35: [(0, 99, "results")],  # DescribeLogDirs: the top-level error only
    46: [(0, 99, "topics")],   # ListPartitionReassignments: the top-level error only
    47: [(0, 99, "topics")],   # OffsetDelete: the top-level error only
    66: [(0, 99, "transaction_states")],  # ListTransactions: the top-level error only
    55: [(0, 99, "topics"), (2, 99, "nodes")],  # DescribeQuorum: getTopLevelErrorResponse
    57: [(0, 99, "results")],  # UpdateFeatures: createWithErrors, rows only on success
}


def _applies(table: dict[int, list[tuple[int, int, Any]]], key: int, version: int) -> list[Any]:
    return [entry for low, high, entry in table.get(key, []) if low <= version <= high]


def _walk(value: Any, path: str) -> Iterator[tuple[Any, Any]]:
    """(parent, child array) pairs at a dotted path of arrays."""
    head, _, rest = path.partition(".")
    items = getattr(value, head, None)
    if not rest:
        yield value, items
        return
    for item in items or ():
        yield from _walk(item, rest)


def _arrays(value: Any, path: str) -> list[tuple[Any, ...]]:
    return [tuple(items or ()) for _, items in _walk(value, path)]


def _error_codes(value: Any) -> Iterator[Any]:
    if not dataclasses.is_dataclass(value):
        return
    for f in dataclasses.fields(value):
        item = getattr(value, f.name)
        if f.metadata.get("kafka_type") == "error_code":
            yield item
        elif isinstance(item, tuple):
            for element in item:
                yield from _error_codes(element)
        elif dataclasses.is_dataclass(item):
            yield from _error_codes(item)


def _same_id(request_value: Any, response_value: Any) -> bool:
    # A null request name goes out as "" where the response needs a name (Metadata).
    return request_value == response_value or (request_value is None and response_value == "")


def _wire(api_key: int, version: int, body: Any) -> Any:
    """Encode as the broker sends it and decode as a client reads it."""
    request = DecodedRequest(api_key, version, 7, "client", None)
    framed = encode_response(request, body)
    if api_key == 38:
        # Kafka's -1 "no time" in its timestamps, which kio's reader refuses: read as 0.
        framed = framed.replace(b"\xff" * 8, b"\x00" * 8)
    correlation, decoded = decode_response(api_key, version, framed[4:])
    assert correlation == 7
    return decoded


@pytest.mark.parametrize(("api_key", "version"), API_VERSIONS,
                         ids=[f"{api_name(k)}-v{v}" for k, v in API_VERSIONS])
def test_error_response_of_every_api_and_version(api_key: int, version: int) -> None:
    @settings(max_examples=15, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(body=st.from_type(request_schema(api_key, version)))
    def check(body: Any) -> None:
        response = error_response(api_key, version, body)
        if api_key == 0 and body.acks == 0:
            assert response is None  # Kafka closes the connection instead
            return
        decoded = _wire(api_key, version, response)
        assert all(code == ErrorCode.unknown_server_error for code in _error_codes(decoded))
        if hasattr(decoded, "throttle_time"):
            assert decoded.throttle_time == datetime.timedelta(0)
        for request_path, response_path, ids in _applies(MIRRORS, api_key, version):
            requested = _arrays(body, request_path)
            answered = _arrays(decoded, response_path)
            assert len(requested) == len(answered), (request_path, response_path)
            for asked, got in zip(requested, answered, strict=True):
                assert len(asked) == len(got), (request_path, asked, got)
                for request_item, response_item in zip(asked, got, strict=True):
                    for request_field, response_field in ids:
                        expected = (request_item if request_field == "="
                                    else getattr(request_item, request_field))
                        assert _same_id(expected, getattr(response_item, response_field))
        for path in _applies(EMPTY, api_key, version):
            assert all(items == () for items in _arrays(decoded, path)), path

    check()


def test_every_api_with_arrays_to_echo_is_in_the_expectations() -> None:
    """A new API must get its Kafka expectations written here, not just pass silently."""
    with_arrays = {0, 1, 2, 3, 8, 9, 10, 11, 13, 15, 19, 20, 21, 23, 32, 35, 43, 45, 46, 61, 33, 37, 42, 44, 47, 49,
                   75, 30, 31, 24, 28, 65, 66, 69, 27,
                   50, 51,  # 50, 51: test_scram_credentials_error_responses
                   34}  # test_hand_written_error_responses
    # 68: ConsumerGroupHeartbeat answers one member, nothing to echo
    no_arrays = {12, 14, 16, 17, 18, 22, 25, 26, 29, 36, 48, 60, 68,  # nothing to echo (48: null)
                 55, 57,  # the top-level error only
                 38, 39, 40, 41, 74}  # 38: test_hand_written_error_responses
    assert set(supported_versions()) == with_arrays | no_arrays


def test_hand_written_error_responses() -> None:
    """AlterReplicaLogDirs answers every directory's topics in one flat list; CreateDelegationToken
    names ANONYMOUS and answers timestamps -1 (Kafka's ``prepareResponse``)."""
    m = _module(34, 2)
    body = m.AlterReplicaLogDirsRequest(dirs=(
        m.AlterReplicaLogDir(path="/a", topics=(
            m.AlterReplicaLogDirTopic(name="t", partitions=(i32(1), i32(2))),)),
        m.AlterReplicaLogDir(path="/b", topics=(
            m.AlterReplicaLogDirTopic(name="u", partitions=(i32(3),)),
            m.AlterReplicaLogDirTopic(name="t", partitions=(i32(0),))))))
    for version in (0, 1, 2):
        answer = _wire(34, version, error_response(34, version, body))
        assert [(t.topic_name, [(p.partition_index, p.error_code) for p in t.partitions])
                for t in answer.results] == [
            ("t", [(1, ErrorCode.unknown_server_error), (2, ErrorCode.unknown_server_error)]),
            ("u", [(3, ErrorCode.unknown_server_error)]),
            ("t", [(0, ErrorCode.unknown_server_error)])]
    for version in (0, 3):
        answer = error_response(38, version, None)
        assert (answer.principal_type, answer.principal_name, answer.token_id, answer.hmac) == (
            "User", "ANONYMOUS", "", b"")
        assert int(answer.max_timestamp.timestamp() * 1000) == -1
        if version >= 3:
            assert answer.token_requester_principal_name == "ANONYMOUS"


def _module(api_key: int, version: int) -> Any:
    return sys.modules[request_schema(api_key, version).__module__]


def test_produce_partitions_have_kafka_no_data_values() -> None:
    """ProduceRequest.getErrorResponse: INVALID_OFFSET, NO_TIMESTAMP, no record errors, and no
    message for UNKNOWN_SERVER_ERROR (ApiError.fromThrowable does not leak internals)."""
    p = _module(0, 9)
    body = p.ProduceRequest(acks=i16(-1), timeout=i32Timedelta.parse(datetime.timedelta(0)),
                            topic_data=(p.TopicProduceData(name="t", partition_data=(
                                p.PartitionProduceData(index=i32(2), records=b""),)),))
    partition = _wire(0, 9, error_response(0, 9, body)).responses[0].partition_responses[0]
    assert (partition.index, partition.error_code, partition.base_offset,
            partition.log_append_time, partition.log_start_offset, partition.record_errors,
            partition.error_message) == (2, ErrorCode.unknown_server_error, -1, None, -1, (),
                                         None)
    assert error_response(0, 9, attrs_replace(body, acks=i16(0))) is None


def attrs_replace(body: Any, **changes: Any) -> Any:
    return dataclasses.replace(body, **changes)


def test_fetch_partitions_and_session_id() -> None:
    """FetchRequest (v < 13): every partition with the error and high watermark -1, the top-level
    error too, the request's session id echoed, empty records."""
    f = _module(1, 12)
    body = f.FetchRequest(
        max_wait=i32Timedelta.parse(datetime.timedelta(seconds=1)), min_bytes=i32(1),
        session_id=i32(9), rack_id="",
        topics=(f.FetchTopic(topic="t", partitions=(f.FetchPartition(
            partition=i32(1), fetch_offset=i64(10), partition_max_bytes=i32(100)),)),),
        forgotten_topics_data=(f.ForgottenTopic(topic="x", partitions=(i32(4),)),))
    response = _wire(1, 12, error_response(1, 12, body))
    assert response.error_code == ErrorCode.unknown_server_error and response.session_id == 9
    [topic] = response.responses
    [partition] = topic.partitions
    assert (topic.topic, partition.partition_index, partition.high_watermark,
            partition.last_stable_offset, partition.log_start_offset,
            partition.preferred_read_replica, partition.records) == ("t", 1, -1, -1, -1, -1, b"")


def test_metadata_echoes_topics_without_partitions_or_brokers() -> None:
    m = _module(3, 12)
    topic_id = uuid.uuid4()
    body = m.MetadataRequest(topics=(m.MetadataRequestTopic(topic_id=None, name="a"),
                                     m.MetadataRequestTopic(topic_id=topic_id, name=None)),
                             include_topic_authorized_operations=False)
    response = _wire(3, 12, error_response(3, 12, body))
    assert response.brokers == () and response.controller_id == -1
    assert [(t.name, t.topic_id, t.partitions) for t in response.topics] == [
        ("a", None, ()), ("", topic_id, ())]
    everything = m.MetadataRequest(topics=None, include_topic_authorized_operations=False)
    assert _wire(3, 12, error_response(3, 12, everything)).topics == ()


def test_group_responses_use_kafka_unknown_values() -> None:
    """JoinGroupRequest: generation -1, empty leader and member id, protocol name null from
    v7 ("" before); OffsetFetch v1: offset -1 and metadata "" per partition."""
    j = _module(11, 9)
    join = j.JoinGroupRequest(group_id="g", session_timeout=i32Timedelta.parse(
        datetime.timedelta(seconds=10)), member_id="m", protocol_type="consumer",
        protocols=(j.JoinGroupRequestProtocol(name="range", metadata=b"x"),))
    response = _wire(11, 9, error_response(11, 9, join))
    assert (response.generation_id, response.leader, response.member_id,
            response.protocol_name, response.members) == (-1, "", "", None, ())
    j0 = _module(11, 0)
    join0 = j0.JoinGroupRequest(group_id="g", session_timeout=i32Timedelta.parse(
        datetime.timedelta(seconds=10)), member_id="m", protocol_type="consumer", protocols=())
    assert _wire(11, 0, error_response(11, 0, join0)).protocol_name == ""
    o = _module(9, 1)
    fetch = o.OffsetFetchRequest(group_id="g", topics=(
        o.OffsetFetchRequestTopic(name="t", partition_indexes=(i32(0), i32(3))),))
    partitions = _wire(9, 1, error_response(9, 1, fetch)).topics[0].partitions
    assert [(p.partition_index, p.committed_offset, p.metadata) for p in partitions] == [
        (0, -1, ""), (3, -1, "")]


def test_find_coordinator_and_describe_configs_carry_the_default_message() -> None:
    """These two set ``error.message()`` in Kafka; the coordinator is Node.noNode()."""
    c = _module(10, 4)
    response = _wire(10, 4, error_response(10, 4, c.FindCoordinatorRequest(
        coordinator_keys=("g1", "g2"))))
    assert [(x.key, x.node_id, x.host, x.port, x.error_message)
            for x in response.coordinators] == [
        ("g1", -1, "", -1, UNKNOWN_SERVER_ERROR_MESSAGE),
        ("g2", -1, "", -1, UNKNOWN_SERVER_ERROR_MESSAGE)]
    old = _wire(10, 2, error_response(10, 2, _module(10, 2).FindCoordinatorRequest(key="g")))
    assert (old.node_id, old.host, old.port, old.error_message) == (
        -1, "", -1, UNKNOWN_SERVER_ERROR_MESSAGE)
    d = _module(32, 4)
    described = _wire(32, 4, error_response(32, 4, d.DescribeConfigsRequest(resources=(
        d.DescribeConfigsResource(resource_type=2, resource_name="t",
                                  configuration_keys=("a",)),))))
    [result] = described.results
    assert (result.resource_type, result.resource_name, result.configs,
            result.error_message) == (2, "t", (), UNKNOWN_SERVER_ERROR_MESSAGE)


def test_describe_client_quotas_entries_are_null() -> None:
    d = _module(48, 1)
    body = d.DescribeClientQuotasRequest(components=(), strict=False)
    response = _wire(48, 1, error_response(48, 1, body))
    assert response.entries is None and response.error_code == ErrorCode.unknown_server_error


def test_api_versions_without_a_body() -> None:
    """An ApiVersions request of an unsupported version has no body; it is answered as v0."""
    response = _wire(18, 0, error_response(18, 0, None))
    assert response.error_code == ErrorCode.unknown_server_error and response.api_keys == ()


def test_scram_credentials_error_responses() -> None:
    """DescribeUserScramCredentialsRequest / AlterUserScramCredentialsRequest.getErrorResponse:
    Describe has a result per requested user (user unset) and the top-level error, Alter one
    result per distinct user of deletions and upsertions, sorted; both with error.message()."""
    d = _module(50, 0)
    body = d.DescribeUserScramCredentialsRequest(users=(d.UserName(name="b"),
                                                        d.UserName(name="a")))
    described = _wire(50, 0, error_response(50, 0, body))
    assert described.error_code == ErrorCode.unknown_server_error
    assert described.error_message == UNKNOWN_SERVER_ERROR_MESSAGE
    assert [(r.user, r.error_code, r.error_message) for r in described.results] == [
        ("", ErrorCode.unknown_server_error, UNKNOWN_SERVER_ERROR_MESSAGE)] * 2
    a = _module(51, 0)
    body = a.AlterUserScramCredentialsRequest(
        deletions=(a.ScramCredentialDeletion(name="zed", mechanism=1),),
        upsertions=(a.ScramCredentialUpsertion(name="amy", mechanism=1, iterations=4096,
                                               salt=b"s", salted_password=b"p"),
                    a.ScramCredentialUpsertion(name="zed", mechanism=2, iterations=4096,
                                               salt=b"s", salted_password=b"p")))
    altered = _wire(51, 0, error_response(51, 0, body))
    assert [(r.user, r.error_code, r.error_message) for r in altered.results] == [
        ("amy", ErrorCode.unknown_server_error, UNKNOWN_SERVER_ERROR_MESSAGE),
        ("zed", ErrorCode.unknown_server_error, UNKNOWN_SERVER_ERROR_MESSAGE)]


def test_sasl_authenticate_error_response_has_the_message() -> None:
    body = _module(36, 2).SaslAuthenticateRequest(auth_bytes=b"x")
    response = _wire(36, 2, error_response(36, 2, body))
    assert response.error_code == ErrorCode.unknown_server_error
    assert response.error_message == UNKNOWN_SERVER_ERROR_MESSAGE
    assert response.auth_bytes == b""
