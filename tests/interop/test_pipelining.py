"""librdkafka's pipelining against the real ``trio_broker run`` (issue 9: a connection stalled).

confluent-kafka sending one record per request (``batch.num.messages=1``, ``linger.ms=0``) keeps
thousands of tiny Produce requests in flight on one connection (librdkafka's default has no
in-flight limit). With the default socket buffers this stalled the connection in about one run
of two (``python -m bench.stall_repro``); every round here must deliver every record, in order.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.interop

RECORDS = 20_000
ROUNDS = 3
#: A healthy round takes a few seconds; a stalled one never finishes.
ROUND_TIMEOUT = 40.0


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)],
                                  request_timeout=30)
    futures[topic].result(timeout=30)


def produce_one_per_request(bootstrap: str, topic: str, count: int) -> dict[int, int]:
    """Offset of each record index, as acknowledged; raises if any delivery failed."""
    producer = Producer({
        "bootstrap.servers": bootstrap,
        "batch.num.messages": 1,
        "linger.ms": 0,
        "acks": 1,
        "message.timeout.ms": int(ROUND_TIMEOUT * 1000),
        "queue.buffering.max.messages": count,
    })
    offsets: dict[int, int] = {}
    errors: list[str] = []

    def report(error: Any, message: Any) -> None:
        if error is not None:
            errors.append(str(error))
            return
        offsets[int(message.value().decode())] = message.offset()

    for index in range(count):
        producer.produce(topic, str(index).encode(), partition=0, on_delivery=report)
        if index % 1000 == 0:
            producer.poll(0)
    remaining = producer.flush(ROUND_TIMEOUT + 5)
    assert not errors, errors[:5]
    assert remaining == 0, f"{remaining} records never acknowledged"
    return offsets


@pytest.mark.timeout(ROUNDS * (ROUND_TIMEOUT + 20) + 30)
def test_one_record_per_request_never_stalls(broker_process: Any) -> None:
    process = broker_process()  # default socket buffers (Kafka's 102400)
    for round_ in range(ROUNDS):
        topic = f"one-per-request-{round_}"
        create_topic(process.bootstrap, topic)
        started = time.monotonic()
        offsets = produce_one_per_request(process.bootstrap, topic, RECORDS)
        elapsed = time.monotonic() - started
        # Every record acknowledged once, at the offset of its position: nothing lost,
        # duplicated or reordered by a retry.
        assert offsets == {index: index for index in range(RECORDS)}, f"round {round_}"
        assert elapsed < ROUND_TIMEOUT
    assert not process.events("connection_send_stalled")
    closed = process.events("connection_closed")
    assert not [e for e in closed if e["reason"] == "send_stalled"]
