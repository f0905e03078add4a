"""A handler that fails is answered with the API's error response; the connection is kept.

Over a real socket to the in-process broker: one handler in the registry is replaced by one that
raises (the only stand-in; the pool, codec, connection and error responses are the real ones),
and the client must get Kafka's answer (``AbstractRequest.getErrorResponse``: UNKNOWN_SERVER_ERROR
per topic, partition or at the top), then be served on the same connection, with one
``request_failed`` event carrying the traceback. Produce with acks=0 has no response to carry
the error, so its connection is closed, as Kafka's ``sendErrorOrCloseConnection`` does.
"""

from __future__ import annotations

import datetime
import sys
from collections.abc import Callable
from typing import Any

import attrs
import pytest
import trio
from kio.schema.errors import ErrorCode

from tests.kafka_wire import API_VERSIONS_V3, WireClient
from trio_broker.protocol.codec import request_schema
from trio_broker.protocol.records import build_batch
from trio_broker.server import registry
from trio_broker.server.context import Parked

PRODUCE, FETCH, METADATA, OFFSET_COMMIT, JOIN_GROUP, API_VERSIONS = 0, 1, 3, 8, 11, 18
E = ErrorCode.unknown_server_error


def mod(api_key: int, version: int) -> Any:
    return sys.modules[request_schema(api_key, version).__module__]


def produce(acks: int) -> Any:
    m = mod(PRODUCE, 9)
    return m.ProduceRequest(
        transactional_id=None, acks=acks, timeout=datetime.timedelta(seconds=5),
        topic_data=(m.TopicProduceData(name="t", partition_data=(
            m.PartitionProduceData(index=0, records=build_batch([(b"k", b"v", [], 1)])),
            m.PartitionProduceData(index=1, records=build_batch([(b"k", b"v", [], 1)])))),))


def fetch(max_wait_ms: int = 0) -> Any:
    m = mod(FETCH, 12)
    return m.FetchRequest(
        max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1, session_id=0,
        session_epoch=-1, rack_id="", forgotten_topics_data=(),
        topics=(m.FetchTopic(topic="t", partitions=(
            m.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),
            m.FetchPartition(partition=1, fetch_offset=0, partition_max_bytes=1 << 20))),))


def metadata() -> Any:
    m = mod(METADATA, 12)
    return m.MetadataRequest(topics=(m.MetadataRequestTopic(topic_id=None, name="t"),),
                             allow_auto_topic_creation=False,
                             include_topic_authorized_operations=False)


def offset_commit() -> Any:
    m = mod(OFFSET_COMMIT, 8)
    return m.OffsetCommitRequest(
        group_id="g", generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=(m.OffsetCommitRequestTopic(name="t", partitions=(
            m.OffsetCommitRequestPartition(partition_index=0, committed_offset=5,
                                           committed_metadata=None),
            m.OffsetCommitRequestPartition(partition_index=1, committed_offset=7,
                                           committed_metadata=None))),))


def join_group() -> Any:
    m = mod(JOIN_GROUP, 9)
    return m.JoinGroupRequest(
        group_id="g", session_timeout=datetime.timedelta(seconds=10),
        rebalance_timeout=datetime.timedelta(seconds=10), member_id="",
        group_instance_id=None, protocol_type="consumer",
        protocols=(m.JoinGroupRequestProtocol(name="range", metadata=b""),), reason=None)


def produce_errors(r: Any) -> list[Any]:
    return [(t.name, p.index, p.error_code, p.base_offset)
            for t in r.responses for p in t.partition_responses]


def fetch_errors(r: Any) -> list[Any]:
    return [r.error_code] + [(t.topic, p.partition_index, p.error_code, p.high_watermark)
                             for t in r.responses for p in t.partitions]


def metadata_errors(r: Any) -> list[Any]:
    return [(t.name, t.error_code, t.partitions) for t in r.topics]


def commit_errors(r: Any) -> list[Any]:
    return [(t.name, p.partition_index, p.error_code) for t in r.topics for p in t.partitions]


def join_errors(r: Any) -> list[Any]:
    return [r.error_code, r.generation_id, r.member_id, r.members]


CASES: list[tuple[str, int, int, Callable[[], Any], Callable[[Any], list[Any]], list[Any]]] = [
    ("Produce", PRODUCE, 9, lambda: produce(acks=1), produce_errors,
     [("t", 0, E, -1), ("t", 1, E, -1)]),
    ("Fetch", FETCH, 12, fetch, fetch_errors, [E, ("t", 0, E, -1), ("t", 1, E, -1)]),
    ("Metadata", METADATA, 12, metadata, metadata_errors, [("t", E, ())]),
    ("OffsetCommit", OFFSET_COMMIT, 8, offset_commit, commit_errors,
     [("t", 0, E), ("t", 1, E)]),
    ("JoinGroup", JOIN_GROUP, 9, join_group, join_errors, [E, -1, "", ()]),
]


def fail_handler(monkeypatch: pytest.MonkeyPatch, api_key: int, *, when_parked: bool = False
                 ) -> None:
    """Replace one API's handler in the registry with one that raises (at once, or in the
    parked wait of a request the real handler parks)."""
    original = registry.handlers()[api_key]

    async def failing(ctx: Any, body: Any) -> Any:
        if when_parked:
            result = await original.handle(ctx, body)
            assert isinstance(result, Parked), "the request was expected to park"

            async def wait() -> Any:
                raise RuntimeError(f"injected failure while parked {api_key}")

            return ctx.park(wait)
        raise RuntimeError(f"injected failure {api_key}")

    monkeypatch.setitem(registry._HANDLERS, api_key, attrs.evolve(original, handle=failing))


async def assert_connection_still_serves(client: WireClient) -> None:
    body = await client.request(API_VERSIONS, 3, API_VERSIONS_V3)
    assert body.error_code == ErrorCode.none and body.api_keys


@pytest.mark.parametrize(("name", "api_key", "version", "request_body", "errors", "expected"),
                         CASES, ids=[case[0] for case in CASES])
async def test_failed_handler_is_answered_with_the_error_response(
        broker: Any, monkeypatch: pytest.MonkeyPatch, log_events: Any, name: str, api_key: int,
        version: int, request_body: Callable[[], Any], errors: Callable[[Any], list[Any]],
        expected: list[Any]) -> None:
    broker.broker.log_manager.create_topic("t", 2)
    fail_handler(monkeypatch, api_key)
    with trio.fail_after(10):
        client = await WireClient.connect(broker.port)
        answer = await client.request(api_key, version, request_body())
        assert errors(answer) == expected
        await assert_connection_still_serves(client)
        [failed] = await log_events.wait_for("request_failed", api=name)
        assert failed["error"] == "RuntimeError"
        assert "Traceback (most recent call last)" in failed["traceback"]
        assert f"injected failure {api_key}" in failed["traceback"]
        assert "in failing" in failed["traceback"]  # the frame that raised
        [line] = await log_events.wait_for("request", api=name)
        assert line["error"] == "UNKNOWN_SERVER_ERROR" and line["response_action"] == "send"
        assert not log_events.events("connection_closed")
        await client.aclose()


async def test_failure_in_a_parked_wait_is_answered_too(
        broker: Any, monkeypatch: pytest.MonkeyPatch, log_events: Any) -> None:
    """A long-poll Fetch parks; its wait (in the purgatory) fails: same answer, same connection."""
    broker.broker.log_manager.create_topic("t", 2)
    fail_handler(monkeypatch, FETCH, when_parked=True)
    with trio.fail_after(10):
        client = await WireClient.connect(broker.port)
        answer = await client.request(FETCH, 12, fetch(max_wait_ms=5000))
        assert fetch_errors(answer) == [E, ("t", 0, E, -1), ("t", 1, E, -1)]
        await assert_connection_still_serves(client)
        [failed] = await log_events.wait_for("request_failed", api="Fetch")
        assert "injected failure while parked" in failed["traceback"]


async def test_produce_acks_0_failure_closes_the_connection(
        broker: Any, monkeypatch: pytest.MonkeyPatch, log_events: Any) -> None:
    """No response carries an acks=0 error: Kafka closes the connection so the producer
    notices (getErrorResponse returns null → CloseConnectionResponse)."""
    broker.broker.log_manager.create_topic("t", 2)
    fail_handler(monkeypatch, PRODUCE)
    with trio.fail_after(10):
        client = await WireClient.connect(broker.port)
        await client.send(PRODUCE, 9, produce(acks=0))
        assert await client.closed_by_peer()
        [failed] = await log_events.wait_for("request_failed", api="Produce")
        assert "injected failure 0" in failed["traceback"]
        await log_events.wait_for("connection_closed", reason="handler")
        other = await WireClient.connect(broker.port)
        await assert_connection_still_serves(other)


async def test_deliberate_close_still_closes(broker: Any, log_events: Any) -> None:
    """CloseConnection raised by a handler (acks=0 produce to a missing topic) is not a failure:
    the connection closes, no request_failed."""
    with trio.fail_after(10):
        client = await WireClient.connect(broker.port)
        await client.send(PRODUCE, 9, produce(acks=0))  # topic "t" does not exist
        assert await client.closed_by_peer()
        await log_events.wait_for("connection_closed", reason="handler")
        assert not log_events.events("request_failed")
