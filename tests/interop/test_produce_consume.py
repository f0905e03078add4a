"""Produce and consume round trips with unmodified clients: confluent-kafka, kafka-python,
aiokafka and kcat.

Every test checks that the reader gets back exactly what the writer sent: keys, values, headers
and timestamps, in order, at dense offsets starting at 0 in every partition, and that the
offsets the producer was acknowledged with are the offsets the consumer reads them at. Consumers
use assign + seek (no consumer group). The last tests run the real ``trio_broker run`` command
and restart it (SIGTERM) or kill it (SIGKILL, with ``log.flush.interval.messages=1``).

Client calls run in worker threads with their own timeouts, so a broken broker fails a test
instead of hanging it.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

import attrs
import pytest
import trio
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.interop

TIMEOUT = 20.0
PARTITIONS = 3
KCAT = shutil.which("kcat") or "/usr/bin/kcat"


@attrs.frozen
class Rec:
    """One record as written and as read back. ``timestamp`` None: set by the client (now)."""

    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int | None
    offset: int = -1


def make_records(count: int, *, tag: str = "r", partitions: int = PARTITIONS,
                 explicit_timestamps: bool = True) -> list[Rec]:
    """Varied records: small and large values (compressible), headers, a null key and value."""
    base = int(time.time() * 1000) - 10_000
    records = []
    for i in range(count):
        key: bytes | None = f"{tag}-key-{i % 7}".encode()
        value: bytes | None = f"{tag}-value-{i}-".encode() + (b"x" * (i * 37 % 3000))
        if i == 3:
            key = None
        if i == 5:
            value = None
        headers = (("index", str(i).encode()), ("tag", tag.encode())) if i % 4 else ()
        records.append(Rec(i % partitions, key, value, headers,
                           base + i if explicit_timestamps else None))
    return records


def assert_round_trip(written: list[Rec], read: Iterable[Rec], *, start: int = 0,
                      earliest_ts: int = 0) -> None:
    """``read`` holds exactly ``written``, in order per partition, at dense offsets."""
    by_partition: dict[int, list[Rec]] = defaultdict(list)
    for rec in read:
        by_partition[rec.partition].append(rec)
    expected: dict[int, list[Rec]] = defaultdict(list)
    for rec in written:
        expected[rec.partition].append(rec)
    assert set(by_partition) == set(expected), "partitions differ"
    for partition, want in expected.items():
        got = by_partition[partition]
        assert [r.offset for r in got] == list(range(start, start + len(want))), partition
        for w, g in zip(want, got, strict=True):
            assert (g.key, g.value, g.headers) == (w.key, w.value, w.headers), (partition, g)
            if w.timestamp is not None:
                assert g.timestamp == w.timestamp, (partition, g)
            else:
                assert earliest_ts <= (g.timestamp or 0) <= time.time() * 1000 + 1000
        if want[0].offset >= 0:  # the producer's acknowledged offsets
            assert [w.offset for w in want] == [g.offset for g in got], partition


async def in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    with trio.fail_after(TIMEOUT * 4):
        return await trio.to_thread.run_sync(fn, *args, abandon_on_cancel=True)


def create_topic(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions,
                                            replication_factor=1)], request_timeout=TIMEOUT)
    futures[topic].result(timeout=TIMEOUT)


# ------------------------------------------------------------------------- confluent-kafka
def confluent_produce(bootstrap: str, topic: str, records: list[Rec],
                      compression: str = "none") -> list[Rec]:
    producer = Producer({
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "compression.type": compression,
        "linger.ms": 5,
        "message.timeout.ms": int(TIMEOUT * 1000),
    })
    acked: dict[int, int] = {}
    errors: list[str] = []

    def report(index: int) -> Callable[[Any, Any], None]:
        def delivered(error: Any, message: Any) -> None:
            if error is not None:
                errors.append(str(error))
            else:
                acked[index] = message.offset()
        return delivered

    for index, rec in enumerate(records):
        producer.produce(topic, key=rec.key, value=rec.value, partition=rec.partition,
                         headers=list(rec.headers) or None, timestamp=rec.timestamp or 0,
                         on_delivery=report(index))
        producer.poll(0)
    assert producer.flush(TIMEOUT) == 0, "undelivered records"
    assert not errors, errors
    return [attrs.evolve(rec, offset=acked[i]) for i, rec in enumerate(records)]


def confluent_consume(bootstrap: str, topic: str, count: int,
                      partitions: int = PARTITIONS) -> list[Rec]:
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "interop-assign-only",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
    })
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    records: list[Rec] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + TIMEOUT
    try:
        while time.monotonic() < deadline and (len(records) < count or len(at_end) < partitions):
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error() is not None:
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                at_end.add(message.partition())
                continue
            at_end.discard(message.partition())
            records.append(Rec(message.partition(), message.key(), message.value(),
                               tuple(message.headers() or ()), message.timestamp()[1],
                               message.offset()))
    finally:
        consumer.close()
    return records


# ---------------------------------------------------------------------------- kafka-python
def kafka_python_produce(bootstrap: str, topic: str, records: list[Rec]) -> list[Rec]:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5,
                             compression_type="gzip", request_timeout_ms=int(TIMEOUT * 1000))
    try:
        futures = [producer.send(topic, key=rec.key, value=rec.value, partition=rec.partition,
                                 timestamp_ms=rec.timestamp, headers=list(rec.headers))
                   for rec in records]
        producer.flush(timeout=TIMEOUT)
        offsets = [f.get(timeout=TIMEOUT).offset for f in futures]
    finally:
        producer.close(timeout=TIMEOUT)
    return [attrs.evolve(rec, offset=o) for rec, o in zip(records, offsets, strict=True)]


def kafka_python_consume(bootstrap: str, topic: str, count: int,
                         partitions: int = PARTITIONS) -> list[Rec]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             request_timeout_ms=int(TIMEOUT * 1000))
    try:
        assigned = [KpTopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(assigned)
        consumer.seek_to_beginning(*assigned)
        records: list[Rec] = []
        deadline = time.monotonic() + TIMEOUT
        while len(records) < count and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=200).values():
                records += [Rec(m.partition, m.key, m.value, tuple(m.headers or ()),
                                m.timestamp, m.offset) for m in batch]
    finally:
        consumer.close()
    return records


# -------------------------------------------------------------------------------- aiokafka
def aiokafka_produce(bootstrap: str, topic: str, records: list[Rec]) -> list[Rec]:
    from aiokafka import AIOKafkaProducer

    async def run() -> list[int]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True,
                                    acks="all", compression_type="gzip",
                                    request_timeout_ms=int(TIMEOUT * 1000))
        await asyncio.wait_for(producer.start(), TIMEOUT)
        try:
            futures = [await producer.send(topic, key=rec.key, value=rec.value,
                                           partition=rec.partition, timestamp_ms=rec.timestamp,
                                           headers=list(rec.headers))
                       for rec in records]
            return [(await asyncio.wait_for(f, TIMEOUT)).offset for f in futures]
        finally:
            await producer.stop()

    offsets = asyncio.run(run())
    return [attrs.evolve(rec, offset=o) for rec, o in zip(records, offsets, strict=True)]


def aiokafka_consume(bootstrap: str, topic: str, count: int,
                     partitions: int = PARTITIONS) -> list[Rec]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as AioTopicPartition

    async def run() -> list[Rec]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                    enable_auto_commit=False, auto_offset_reset="earliest",
                                    request_timeout_ms=int(TIMEOUT * 1000))
        await asyncio.wait_for(consumer.start(), TIMEOUT)
        try:
            assigned = [AioTopicPartition(topic, p) for p in range(partitions)]
            consumer.assign(assigned)
            await consumer.seek_to_beginning(*assigned)
            records: list[Rec] = []
            deadline = time.monotonic() + TIMEOUT
            while len(records) < count and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=200)
                for batch in batches.values():
                    records += [Rec(m.partition, m.key, m.value, tuple(m.headers or ()),
                                    m.timestamp, m.offset) for m in batch]
            return records
        finally:
            await consumer.stop()

    return asyncio.run(run())


# ------------------------------------------------------------------------------------ kcat
def kcat_produce(bootstrap: str, topic: str, records: list[Rec]) -> list[Rec]:
    """``kcat -P``, one run per partition. kcat sets the timestamps and one header for all."""
    by_partition: dict[int, list[Rec]] = defaultdict(list)
    for rec in records:
        assert rec.key is not None and rec.value is not None
        assert rec.headers == (("source", b"kcat"),) and rec.timestamp is None
        by_partition[rec.partition].append(rec)
    for partition, recs in by_partition.items():
        lines = b"".join(r.key + b"\t" + r.value + b"\n" for r in recs)  # type: ignore[operator]
        subprocess.run(
            [KCAT, "-P", "-b", bootstrap, "-t", topic, "-p", str(partition), "-K", "\t",
             "-H", "source=kcat", "-X", "acks=all", "-X", "enable.idempotence=true"],
            input=lines, check=True, timeout=TIMEOUT, capture_output=True)
    return records


def kcat_consume(bootstrap: str, topic: str, count: int,
                 partitions: int = PARTITIONS) -> list[Rec]:
    """``kcat -C -e``: every partition from the beginning to its end, as JSON lines."""
    done = subprocess.run(
        [KCAT, "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-J", "-q"],
        check=True, timeout=TIMEOUT, capture_output=True)
    records = []
    for line in done.stdout.decode().splitlines():
        item = json.loads(line)
        raw = item.get("headers") or []
        headers = tuple((raw[i], raw[i + 1].encode()) for i in range(0, len(raw), 2))
        key = item.get("key")
        payload = item.get("payload")
        records.append(Rec(item["partition"], None if key is None else key.encode(),
                           None if payload is None else payload.encode(), headers, item["ts"],
                           item["offset"]))
    assert len(records) == count, f"kcat read {len(records)} of {count}"
    return records


# ----------------------------------------------------------------------------------- tests
def assert_no_refusals(log_events: Any) -> None:
    for event in ("invalid_request", "request_failed"):
        assert log_events.events(event) == [], event


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
async def test_confluent_idempotent_acks_all(broker: Any, log_events: Any,
                                             compression: str) -> None:
    topic = f"confluent-{compression}"
    await in_thread(create_topic, broker.bootstrap, topic)
    records = make_records(60, tag=compression)
    written = await in_thread(confluent_produce, broker.bootstrap, topic, records, compression)
    read = await in_thread(confluent_consume, broker.bootstrap, topic, len(records))
    assert_round_trip(written, read)
    assert_no_refusals(log_events)


@pytest.mark.parametrize("client", ["kafka-python", "aiokafka"])
async def test_python_client_round_trip(broker: Any, log_events: Any, client: str) -> None:
    produce, consume = {
        "kafka-python": (kafka_python_produce, kafka_python_consume),
        "aiokafka": (aiokafka_produce, aiokafka_consume),
    }[client]
    await in_thread(create_topic, broker.bootstrap, client)
    records = make_records(40, tag=client)
    written = await in_thread(produce, broker.bootstrap, client, records)
    read = await in_thread(consume, broker.bootstrap, client, len(records))
    assert_round_trip(written, read)
    assert_no_refusals(log_events)


async def test_kcat_round_trip(broker: Any, log_events: Any) -> None:
    topic = "kcat"
    await in_thread(create_topic, broker.bootstrap, topic)
    before = int(time.time() * 1000) - 1
    records = [Rec(i % PARTITIONS, f"k{i}".encode(), f"kcat value {i} ".encode() * (i % 5 + 1),
                   (("source", b"kcat"),), None) for i in range(30)]
    written = await in_thread(kcat_produce, broker.bootstrap, topic, records)
    read = await in_thread(kcat_consume, broker.bootstrap, topic, len(records))
    assert_round_trip(written, read, earliest_ts=before)
    assert_no_refusals(log_events)


async def test_every_client_reads_what_confluent_wrote(broker: Any, log_events: Any) -> None:
    topic = "shared"
    await in_thread(create_topic, broker.bootstrap, topic)
    # kcat's JSON output cannot tell a null from an absent key, so keys and values are set.
    records = [attrs.evolve(r, key=r.key or b"k", value=r.value or b"v")
               for r in make_records(45, tag="shared")]
    # gzip: the Python clients decompress lz4, snappy and zstd only with optional libraries.
    written = await in_thread(confluent_produce, broker.bootstrap, topic, records, "gzip")
    for consume in (confluent_consume, kafka_python_consume, aiokafka_consume, kcat_consume):
        read = await in_thread(consume, broker.bootstrap, topic, len(records))
        assert_round_trip(written, read)
    assert_no_refusals(log_events)


# ------------------------------------------------------- the real process: restart and crash
def test_data_survives_a_restart(broker_process: Any) -> None:
    process = broker_process()
    topic = "durable"
    create_topic(process.bootstrap, topic)
    first = confluent_produce(process.bootstrap, topic, make_records(30, tag="before"), "gzip")
    assert process.stop() == 0
    process.start()
    assert_round_trip(first, confluent_consume(process.bootstrap, topic, len(first)))
    # Appends continue at the next offsets after the restart.
    second = confluent_produce(process.bootstrap, topic, make_records(30, tag="after"), "gzip")
    per_partition = len(first) // PARTITIONS
    assert_round_trip(second, [r for r in kafka_python_consume(process.bootstrap, topic, 60)
                               if r.offset >= per_partition], start=per_partition)


def test_acknowledged_data_survives_sigkill(broker_process: Any) -> None:
    process = broker_process({"log.flush.interval.messages": "1"})
    topic = "crash"
    create_topic(process.bootstrap, topic)
    written = confluent_produce(process.bootstrap, topic, make_records(45, tag="crash"), "snappy")
    process.kill()
    process.start()
    assert_round_trip(written, confluent_consume(process.bootstrap, topic, len(written)))
    more = confluent_produce(process.bootstrap, topic, make_records(3, tag="again"), "none")
    assert [r.offset for r in more] == [len(written) // PARTITIONS] * 3


def test_examples_run_against_the_broker(broker_process: Any) -> None:
    """examples/admin.py, producer.py and consumer.py work as the README shows them."""
    import sys
    from pathlib import Path

    examples = Path(__file__).resolve().parents[2] / "examples"
    process = broker_process()

    def example(name: str, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, str(examples / name), "--bootstrap", process.bootstrap, *args],
            capture_output=True, timeout=TIMEOUT * 2, check=False)
        assert done.returncode == 0, done.stderr.decode()
        return done.stdout.decode()

    tour = example("admin.py")
    assert "example: 3 partition(s)" in tour
    assert "retention.ms = 3600000  (dynamic_topic_config)" in tour
    produced = example("producer.py", "--topic", "example", "--count", "9")
    assert len(produced.splitlines()) == 9
    lines = produced.splitlines()
    partition = max(range(3), key=lambda p: sum(x.startswith(f"example[{p}]@") for x in lines))
    in_partition = [x for x in lines if x.startswith(f"example[{partition}]@")]
    assert len(in_partition) >= 2
    consumed = example("consumer.py", "--topic", "example", "--partition", str(partition),
                       "--offset", "1").splitlines()
    assert len(consumed) == len(in_partition) - 1
    assert consumed[0].startswith(f"example[{partition}]@1 ")
    example("admin.py", "partitions", "example", "4")
    assert "example: 4 partition(s)" in example("admin.py", "list")
    example("admin.py", "delete", "example")
    assert "example:" not in example("admin.py", "list")


def test_examples_without_a_broker_say_so_in_one_line() -> None:
    """A new user's first mistake (no broker started): one line and status 1, no traceback."""
    import sys
    from pathlib import Path

    from tests.conftest import free_port

    examples = Path(__file__).resolve().parents[2] / "examples"
    nowhere = f"127.0.0.1:{free_port()}"
    runs = [(args[0], subprocess.Popen(
        [sys.executable, str(examples / args[0]), "--bootstrap", nowhere, *args[1:]],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        for args in (("admin.py", "--timeout", "2", "list"), ("admin.py", "--timeout", "2"),
                     ("consumer_group.py",), ("exactly_once.py",))]
    for name, process in runs:
        _, err = process.communicate(timeout=TIMEOUT * 2)
        lines = [x for x in err.decode().splitlines() if not x.startswith("%")]  # librdkafka's
        assert (process.returncode, len(lines)) == (1, 1), (name, err.decode())
        assert lines[0].startswith(f"{name}: ") and nowhere in lines[0], lines
