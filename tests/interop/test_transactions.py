"""Transactions with unmodified clients: confluent-kafka's (librdkafka's) transactional
producer in a consume-transform-produce loop, fencing, a kill -9 of the broker mid-way, and
aiokafka's transactional producer; read_committed consumers see every committed record once and
no aborted one, read_uncommitted consumers see both.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]

PARTITIONS = 3


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions)]).values():
        future.result(10)


def txn_producer(bootstrap: str, txn_id: str, **extra: Any) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                     "linger.ms": 5, **extra})


def read_all(bootstrap: str, topic: str, isolation: str, expected: int,
             timeout: float = 20.0) -> list[tuple[int, bytes]]:
    """Every record of ``topic`` (assign + earliest), waiting until ``expected`` are read and
    then a little longer for any extra record that must not be there."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4()}",
                         "isolation.level": isolation, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + timeout
    settle: float | None = None
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append((msg.partition(), msg.value()))
            if len(got) >= expected and settle is None:
                settle = time.monotonic() + 1.0
            if settle is not None and time.monotonic() > settle:
                break
    finally:
        consumer.close()
    return got


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        parts = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], 10)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in parts}


def test_confluent_commit_and_abort_read_committed_and_uncommitted(
        broker_process: Callable[..., Any]) -> None:
    process = broker_process()
    bootstrap = process.bootstrap
    source, sink = "txn-source", "txn-sink"
    create_topic(bootstrap, source)
    create_topic(bootstrap, sink)
    plain = Producer({"bootstrap.servers": bootstrap})
    for i in range(30):
        plain.produce(source, value=f"in-{i}".encode(), partition=i % PARTITIONS)
    assert plain.flush(10) == 0

    group = "ctp-group"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    consumer.subscribe([source])
    producer = txn_producer(bootstrap, "ctp-1")
    producer.init_transactions(15)
    committed_values: list[bytes] = []
    aborted_values: list[bytes] = []
    batch_no = 0
    seen = 0
    deadline = time.monotonic() + 60
    while seen < 30 and time.monotonic() < deadline:
        msgs = consumer.consume(10, 1.0)
        msgs = [m for m in msgs if m.error() is None]
        if not msgs:
            continue
        producer.begin_transaction()
        out = []
        for m in msgs:
            value = b"out-" + m.value()
            producer.produce(sink, value=value, partition=m.partition())
            out.append(value)
        abort = batch_no % 2 == 1
        if abort:
            # Flushed first, so the aborted records are in the log (abort_transaction purges
            # what is still queued in the client).
            assert producer.flush(15) == 0
            producer.abort_transaction(15)
            aborted_values += out
            # Re-read the same input: seek back to where this batch started.
            positions: dict[int, int] = {}
            for m in msgs:
                positions.setdefault(m.partition(), m.offset())
            for partition, offset in positions.items():
                consumer.seek(TopicPartition(source, partition, offset))
        else:
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata(),
                15)
            producer.commit_transaction(15)
            committed_values += out
            seen += len(msgs)
        batch_no += 1
    consumer.close()
    assert seen == 30
    assert batch_no >= 2, "at least one abort happened"

    got = read_all(bootstrap, sink, "read_committed", len(committed_values))
    assert sorted(v for _, v in got) == sorted(committed_values)
    assert len({v for _, v in got}) == 30  # every input exactly once
    everything = read_all(bootstrap, sink, "read_uncommitted",
                          len(committed_values) + len(aborted_values))
    assert sorted(v for _, v in everything) == sorted(committed_values + aborted_values)
    # The consumed positions were committed with the transactions.
    assert committed(bootstrap, group, source) == {p: 10 for p in range(PARTITIONS)}
    assert process.events("transaction_committed")
    assert process.events("transaction_aborted")


def test_confluent_second_producer_fences_the_first(broker_process: Callable[..., Any]) -> None:
    process = broker_process()
    bootstrap = process.bootstrap
    create_topic(bootstrap, "fence")
    first = txn_producer(bootstrap, "fence-id")
    first.init_transactions(15)
    first.begin_transaction()
    first.produce("fence", value=b"from-first", partition=0)
    first.flush(10)
    second = txn_producer(bootstrap, "fence-id")
    second.init_transactions(30)  # aborts the first's open transaction
    second.begin_transaction()
    second.produce("fence", value=b"from-second", partition=1)
    second.commit_transaction(15)
    with pytest.raises(KafkaException) as info:
        first.produce("fence", value=b"late", partition=2)
        first.commit_transaction(15)
    error = info.value.args[0]
    assert error.fatal() or error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                             KafkaError.INVALID_PRODUCER_EPOCH), error
    got = read_all(bootstrap, "fence", "read_committed", 1)
    assert [v for _, v in got] == [b"from-second"]
    assert process.events("transaction_fenced")
