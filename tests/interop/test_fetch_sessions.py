"""Incremental fetch sessions (KIP-227) and Fetch by topic id (KIP-516) with real clients and raw
frames.

kafka-python's consumer opens a session and then sends incremental fetches (the request log line
names the session id and epoch); the bytes it saves over 100 partitions are measured against
the same consumer on a broker with no session slots (``max.incremental.fetch.session.cache
.slots=0``, so every fetch is full). librdkafka 2.16 does not use sessions (it sends id 0, epoch
-1) but fetches by topic id (Fetch v16), produces with v10 and sends Metadata v13. The session errors are checked
with raw frames.
"""

from __future__ import annotations

import datetime
import statistics
import sys
import uuid
from typing import Any

import pytest
import trio
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kio.schema.errors import ErrorCode

from tests.kafka_wire import WireClient
from trio_broker.protocol import records as rb
from trio_broker.protocol.codec import request_schema
from trio_broker.storage.log import now_ms

pytestmark = pytest.mark.interop

TIMEOUT = 20.0
FETCH = 1
PARTITIONS = 100


async def fill(broker: Any, topic: str, partitions: int) -> None:
    lm = broker.broker.log_manager
    lm.create_topic(topic, partitions)
    for index in range(partitions):
        await lm.append(topic, index, rb.build_batch([(None, b"v%d" % index, [], now_ms())]))


def kafka_python_session(bootstrap: str, topic: str, idle_polls: int) -> int:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             fetch_max_wait_ms=50, request_timeout_ms=10000)
    consumer.assign([KafkaTopicPartition(topic, i) for i in range(PARTITIONS)])
    consumer.seek_to_beginning()
    got = 0
    for _ in range(200):
        got += sum(len(r) for r in consumer.poll(timeout_ms=200).values())
        if got >= PARTITIONS:
            break
    for _ in range(idle_polls):  # nothing new: incremental fetches answer nothing
        consumer.poll(timeout_ms=100)
    consumer.close()
    return got


def fetch_lines(log_events: Any, client: str, port: int | None = None) -> list[dict[str, Any]]:
    """The Fetch request lines of ``client`` (on the broker listening on ``port``)."""
    return [e for e in log_events.events("request", api="Fetch")
            if e["client_software_name"] == client
            and (port is None or e["connection_id"].startswith(f"127.0.0.1:{port}-"))]


async def test_kafka_python_fetches_incrementally_and_saves_bytes(
        start_broker: Any, log_events: Any) -> None:
    with trio.fail_after(TIMEOUT * 4):
        sessions = await start_broker()
        await fill(sessions, "many", PARTITIONS)
        got = await trio.to_thread.run_sync(kafka_python_session, sessions.bootstrap, "many", 10,
                                            abandon_on_cancel=True)
        assert got == PARTITIONS
        await sessions.shutdown()
        sessionless = await start_broker({"max.incremental.fetch.session.cache.slots": "0"})
        await fill(sessionless, "many", PARTITIONS)
        got = await trio.to_thread.run_sync(kafka_python_session, sessionless.bootstrap, "many",
                                            10, abandon_on_cancel=True)
        assert got == PARTITIONS
    with_sessions = fetch_lines(log_events, "kafka-python", sessions.port)
    full_only = fetch_lines(log_events, "kafka-python", sessionless.port)
    # one session, its epoch counting up: the request log shows the incremental fetches
    ids = {e["fetch_session_id"] for e in with_sessions if e["fetch_session_epoch"] > 0}
    epochs = [e["fetch_session_epoch"] for e in with_sessions if e["fetch_session_epoch"] > 0]
    assert len(ids) == 1 and 0 not in ids
    assert epochs == list(range(1, len(epochs) + 1)) and len(epochs) >= 10
    assert all(e["error"] == "NONE" for e in with_sessions + full_only)
    # without a slot the broker answers session id 0 and the client keeps sending full fetches
    assert all(e["fetch_session_epoch"] == 0 for e in full_only)

    def idle(lines: list[dict[str, Any]]) -> tuple[float, float]:
        tail = lines[-8:]  # the idle polls: no records in any answer
        return (statistics.median(e["request_bytes"] for e in tail),
                statistics.median(e["response_bytes"] for e in tail))

    incremental, full = idle(with_sessions), idle(full_only)
    print(f"\nidle fetch of {PARTITIONS} partitions, bytes (request, response): "
          f"incremental {incremental}, full {full}")
    # an idle incremental fetch names no partition and is answered with none
    assert incremental[0] < full[0] / 20 and incremental[1] < full[1] / 20


def librdkafka_session(bootstrap: str, topic: str) -> int:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    producer.produce(topic, value=b"produced", partition=0)
    producer.flush(TIMEOUT)
    assert len(producer) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "rd",
                         "fetch.wait.max.ms": 50})
    consumer.assign([TopicPartition(topic, i, 0) for i in range(4)])
    got = 0
    while got < 5:
        message = consumer.poll(TIMEOUT)
        assert message is not None and message.error() is None, message
        got += 1
    consumer.close()
    return got


async def test_librdkafka_produces_v10_and_fetches_by_topic_id_without_sessions(
        broker: Any, log_events: Any) -> None:
    with trio.fail_after(TIMEOUT * 3):
        await fill(broker, "rd", 4)
        assert await trio.to_thread.run_sync(librdkafka_session, broker.bootstrap, "rd",
                                             abandon_on_cancel=True) == 5
    produced = log_events.events("request", api="Produce")
    assert [(e["api_version"], e["error"]) for e in produced] == [(10, "NONE")]
    fetches = fetch_lines(log_events, "confluent-kafka-python")
    assert fetches and all(e["api_version"] >= 13 for e in fetches)  # KIP-516 topic ids
    assert all((e["fetch_session_id"], e["fetch_session_epoch"]) == (0, -1) for e in fetches)
    assert all(e["error"] == "NONE" for e in fetches)
    assert {e["api_version"] for e in log_events.events("request", api="Metadata")
            if e["client_software_name"] == "confluent-kafka-python"} == {13}
    assert len(broker.broker.fetch_sessions) == 0


def fetch_request(version: int, wants: dict[Any, int], *, session_id: int = 0, epoch: int = 0,
                  forget: dict[Any, list[int]] | None = None) -> Any:
    """Fetch of ``{(topic, partition): offset}``; topics are names, or ids from v13."""
    m = sys.modules[request_schema(FETCH, version).__module__]

    def topic(t: Any) -> dict[str, Any]:
        return {"topic_id": t} if version >= 13 else {"topic": t}

    topics: dict[Any, list[Any]] = {}
    for (name, partition), offset in wants.items():
        topics.setdefault(name, []).append(m.FetchPartition(
            partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20,
            current_leader_epoch=-1, last_fetched_epoch=-1, log_start_offset=-1))
    fields = dict(
        replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 20,
        isolation_level=0, session_id=session_id, session_epoch=epoch,
        topics=tuple(m.FetchTopic(**topic(n), partitions=tuple(p)) for n, p in topics.items()),
        forgotten_topics_data=tuple(m.ForgottenTopic(**topic(n), partitions=tuple(p))
                                    for n, p in (forget or {}).items()),
        rack_id="")
    # v15 moved replica_id into the (tagged) replica_state
    return m.FetchRequest(**{k: v for k, v in fields.items()
                             if k in m.FetchRequest.__dataclass_fields__})


@pytest.mark.parametrize("version", [12, 17])
async def test_session_errors_on_the_wire(broker: Any, version: int) -> None:
    with trio.fail_after(TIMEOUT):
        await fill(broker, "s", 2)
        topic = broker.broker.log_manager.topics["s"].topic_id if version >= 13 else "s"
        client = await WireClient.connect(broker.port)
        both = {(topic, 0): 0, (topic, 1): 0}
        full = await client.request(FETCH, version, fetch_request(version, both))
        assert full.error_code is ErrorCode.none and full.session_id != 0
        assert [len(p.records) > 0 for t in full.responses for p in t.partitions] == [True, True]
        session = full.session_id
        moved = {(topic, 0): 1, (topic, 1): 1}
        quiet = await client.request(FETCH, version, fetch_request(
            version, moved, session_id=session, epoch=1))
        assert (quiet.error_code, quiet.session_id, quiet.responses) == (
            ErrorCode.none, session, ())
        # a retried epoch, a skipped one, and a session that never existed
        for epoch, sid, code in ((1, session, ErrorCode.invalid_fetch_session_epoch),
                                 (3, session, ErrorCode.invalid_fetch_session_epoch),
                                 (1, session ^ 1, ErrorCode.fetch_session_id_not_found)):
            got = await client.request(FETCH, version, fetch_request(
                version, {}, session_id=sid, epoch=epoch))
            assert (got.error_code, got.session_id, got.responses) == (code, 0, ())
        # the session survived the errors; forgetting both partitions ends it
        gone = await client.request(FETCH, version, fetch_request(
            version, {}, session_id=session, epoch=2, forget={topic: [0, 1]}))
        assert (gone.error_code, gone.session_id) == (ErrorCode.none, 0)
        assert len(broker.broker.fetch_sessions) == 0
        # epoch -1: a full fetch that opens no session
        closing = await client.request(FETCH, version, fetch_request(version, both, epoch=-1))
        assert closing.session_id == 0 and len(closing.responses[0].partitions) == 2
        assert len(broker.broker.fetch_sessions) == 0
        if version >= 13:
            stranger = uuid.uuid4()
            got = await client.request(FETCH, version, fetch_request(
                version, {(stranger, 0): 0}, epoch=-1))
            assert got.responses[0].topic_id == stranger
            assert got.responses[0].partitions[0].error_code is ErrorCode.unknown_topic_id
        await client.aclose()
