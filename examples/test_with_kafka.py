"""What a project copies to test its Kafka code against a real broker, in-process.

    pip install 'trio-broker[testing]' confluent-kafka aiokafka
    pytest examples/test_with_kafka.py            # the plugin loads itself once installed
    pytest -p trio_broker.testing examples/test_with_kafka.py   # from a source checkout

``kafka_broker`` starts a broker for each test in a background thread (port 0, a temporary data
directory) and stops it afterwards; ``trio_kafka_broker`` runs one inside a Trio test, so
``autojump_clock`` makes broker time virtual. See docs/testing.md.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import trio
from confluent_kafka import Consumer, KafkaError, Producer

from trio_broker.testing import error


def produce(bootstrap: str, topic: str, values: list[bytes], **settings: object) -> list[object]:
    """The application code under test: produce and report each delivery's error (or None)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, **settings})
    outcomes: list[object] = []
    for value in values:
        producer.produce(topic, value=value, on_delivery=lambda err, msg: outcomes.append(err))
    assert producer.flush(30) == 0
    return outcomes


def test_round_trip(kafka_broker):
    kafka_broker.create_topic("orders", partitions=2)
    assert produce(kafka_broker.bootstrap_servers, "orders", [b"a", b"b"]) == [None, None]

    # What the broker stored, read without a client.
    assert sorted(r.value for r in kafka_broker.records("orders")) == [b"a", b"b"]

    consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap_servers,
                         "group.id": "billing", "auto.offset.reset": "earliest"})
    consumer.subscribe(["orders"])
    seen: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(seen) < 2 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen.append(message.value())
    consumer.commit(asynchronous=False)
    consumer.close()
    assert sorted(seen) == [b"a", b"b"]
    assert sum(kafka_broker.committed("billing").values()) == 2
    assert kafka_broker.events("group_join", group_id="billing")


def test_retry_after_leader_change(kafka_broker):
    kafka_broker.create_topic("orders")
    # The first Produce is answered as by a broker that lost leadership: the client retries.
    with kafka_broker.intercept("Produce", error("NOT_LEADER_OR_FOLLOWER"), times=1) as lost:
        assert produce(kafka_broker.bootstrap_servers, "orders", [b"once"]) == [None]
    assert lost.applied == 1
    assert [r.value for r in kafka_broker.records("orders")] == [b"once"]


def test_permanent_error_reaches_the_application(kafka_broker):
    kafka_broker.create_topic("orders")
    kafka_broker.intercept("Produce", error("TOPIC_AUTHORIZATION_FAILED"))
    [outcome] = produce(kafka_broker.bootstrap_servers, "orders", [b"x"])
    assert outcome.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert kafka_broker.records("orders") == []


def test_broker_crash(kafka_broker):
    kafka_broker.create_topic("orders")
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers, "linger.ms": 0})
    producer.produce("orders", value=b"before")
    assert producer.flush(30) == 0
    kafka_broker.restart(kill=True)  # no clean shutdown: the broker recovers its log
    producer.produce("orders", value=b"after")
    assert producer.flush(30) == 0
    assert [r.value for r in kafka_broker.records("orders")] == [b"before", b"after"]
    # The restarted broker found no clean-shutdown marker.
    assert kafka_broker.events("log_manager_opened")[-1]["clean_shutdown"] is False


@pytest.mark.kafka_broker_config(**{"auto.create.topics.enable": "false"})
def test_asyncio_client(kafka_broker):
    from aiokafka import AIOKafkaProducer

    kafka_broker.create_topic("events")

    async def main() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=kafka_broker.bootstrap_servers)
        await producer.start()
        try:
            await producer.send_and_wait("events", b"hello", key=b"k")
        finally:
            await producer.stop()

    asyncio.run(main())
    [record] = kafka_broker.records("events")
    assert (record.key, record.value) == (b"k", b"hello")


@pytest.mark.trio
async def test_session_timeout_in_virtual_time(trio_kafka_broker, autojump_clock):
    async with await trio_kafka_broker.client() as client:
        member = await client.join_group("billing", ["orders"], session_timeout_ms=45_000)
        await client.sync_group(member, {member.member_id: b""})
        joined_at = trio.current_time()
        # No heartbeats: the coordinator expires the member 45 s later, instantly in wall time.
        await trio_kafka_broker.wait_for_event("member_expired", group_id="billing")
        assert trio.current_time() - joined_at == 45.0
