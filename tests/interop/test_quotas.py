"""Client quotas against unmodified librdkafka clients (confluent-kafka), on the real
``trio_broker run`` command: a producer and a consumer under a 200 KB/s byte-rate quota take as
long as the quota says and see throttle callbacks; an unthrottled client keeps its speed.

The broker runs with ``quota.window.num=2`` (windows of 1 s) so that the tests stay short.
Kafka's Rate averages over at least ``num - 1`` windows, so a fresh producer gets about one
window's worth through at once and is then paced at the quota; a consumer's fetches are capped
at one window's worth and paced likewise. Moving ``B`` bytes should take about ``B / quota``
seconds (a little less for a producer, a little more for a consumer, whose throttled fetches
come back empty and cost a round trip); the tests accept 0.6 to 1.6 times that, the measured
figures are printed.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import trio
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from tests.server.test_client_quotas import alter

pytestmark = pytest.mark.interop

QUOTA = 200_000.0  # bytes per second
TOTAL = 1_000_000  # bytes of record values moved by each client
MESSAGE = 10_000
SETTINGS = {"quota.window.num": "2", "quota.window.size.seconds": "1"}
LOW, HIGH = 0.6, 1.6


def expected_seconds(total: float) -> float:
    return total / QUOTA


def set_quota(bootstrap: str, client_id: str, key: str, value: float) -> None:
    port = int(bootstrap.rpartition(":")[2])
    result = trio.run(alter, port, {"client-id": client_id}, {key: value})
    assert [code for code, _ in result] == [ErrorCode.none]


def create_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, 1, 1)]).values():
        future.result(timeout=20)


def produce_all(bootstrap: str, topic: str, client_id: str, throttles: list[Any]) -> float:
    """Produce TOTAL bytes in MESSAGE-byte records; seconds until every one is acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id,
                         "linger.ms": 5, "acks": 1, "throttle_cb": throttles.append,
                         # small batches: many requests, each charged when it arrives (and
                         # no batch larger than what the consumer quota lets through at once)
                         "batch.size": 32768})
    producer.list_topics(timeout=20)  # connect first: time only the data
    payload = b"p" * MESSAGE
    failures: list[Any] = []
    started = time.monotonic()
    for _ in range(TOTAL // MESSAGE):
        while True:
            try:
                producer.produce(topic, payload,
                                 on_delivery=lambda err, _msg: err and failures.append(err))
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(60) == 0
    elapsed = time.monotonic() - started
    assert not failures
    return elapsed


def consume_all(bootstrap: str, topic: str, client_id: str, throttles: list[Any]) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": client_id,
                         "group.id": f"g-{client_id}", "enable.auto.commit": False,
                         "throttle_cb": throttles.append})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = 0
    started = time.monotonic()
    deadline = started + 60
    while got < TOTAL and time.monotonic() < deadline:
        msg = consumer.poll(0.1)
        if msg is not None and msg.error() is None:
            got += len(msg.value())
    elapsed = time.monotonic() - started
    consumer.close()
    assert got == TOTAL
    return elapsed


def test_producer_under_producer_byte_rate(broker_process: Any) -> None:
    broker = broker_process(SETTINGS)
    create_topic(broker.bootstrap, "quota-p")
    set_quota(broker.bootstrap, "slow-producer", "producer_byte_rate", QUOTA)
    throttles: list[Any] = []
    free_throttles: list[Any] = []
    free_seconds: list[float] = []
    # the unthrottled producer runs on the same broker at the same time
    free = threading.Thread(target=lambda: free_seconds.append(
        produce_all(broker.bootstrap, "quota-p", "free-producer", free_throttles)))
    free.start()
    elapsed = produce_all(broker.bootstrap, "quota-p", "slow-producer", throttles)
    free.join(60)
    expected = expected_seconds(TOTAL)
    print(f"\nproducer at {QUOTA:.0f} B/s: {TOTAL} bytes in {elapsed:.2f} s "
          f"(expected {expected:.2f} s), {len(throttles)} throttle callbacks; "
          f"unthrottled producer: {free_seconds[0]:.2f} s")
    assert LOW * expected <= elapsed <= HIGH * expected
    # librdkafka calls throttle_cb for each throttled response (and once more at 0 when the
    # throttling stops)
    assert any(t.throttle_time > 0 for t in throttles)
    assert free_seconds[0] < expected * LOW and not free_throttles
    started = broker.events("throttle_started")
    assert {e["client_id"] for e in started} == {"slow-producer"}
    assert {e["quota_type"] for e in started} == {"producer_byte_rate"}


def test_consumer_under_consumer_byte_rate(broker_process: Any) -> None:
    broker = broker_process(SETTINGS)
    create_topic(broker.bootstrap, "quota-c")
    produce_all(broker.bootstrap, "quota-c", "writer", [])
    set_quota(broker.bootstrap, "slow-consumer", "consumer_byte_rate", QUOTA)
    throttles: list[Any] = []
    free_seconds: list[float] = []
    free_throttles: list[Any] = []
    free = threading.Thread(target=lambda: free_seconds.append(
        consume_all(broker.bootstrap, "quota-c", "free-consumer", free_throttles)))
    free.start()
    elapsed = consume_all(broker.bootstrap, "quota-c", "slow-consumer", throttles)
    free.join(60)
    expected = expected_seconds(TOTAL)
    print(f"\nconsumer at {QUOTA:.0f} B/s: {TOTAL} bytes in {elapsed:.2f} s "
          f"(expected {expected:.2f} s), {len(throttles)} throttle callbacks; "
          f"unthrottled consumer: {free_seconds[0]:.2f} s")
    assert LOW * expected <= elapsed <= HIGH * expected
    assert any(t.throttle_time > 0 for t in throttles)
    assert free_seconds[0] < expected * LOW and not free_throttles
    started = broker.events("throttle_started")
    assert {e["client_id"] for e in started} == {"slow-consumer"}
    assert {e["quota_type"] for e in started} == {"consumer_byte_rate"}
