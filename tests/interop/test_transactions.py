"""Transactions with unmodified clients: confluent-kafka's (librdkafka's) transactional
producer in a consume-transform-produce loop, fencing, a kill -9 of the broker mid-way, and
aiokafka's transactional producer; read_committed consumers see every committed record once and
no aborted one, read_uncommitted consumers see both.
"""

from __future__ import annotations

import asyncio
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


def log_ends(bootstrap: str, topic: str, isolation: str) -> list[int]:
    """ListOffsets latest of every partition: the LSO (read_committed) or the high watermark."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ends",
                         "isolation.level": isolation})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1]
                for p in range(PARTITIONS)]
    finally:
        consumer.close()


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


def test_confluent_kill_9_mid_transaction_then_restart(broker_process: Callable[..., Any]
                                                       ) -> None:
    """A committed transaction survives a crash; an open one is aborted by its timeout after
    the restart (its producer is gone), and a new producer with the same id carries on."""
    process = broker_process({"log.flush.interval.messages": "1",
                              "transaction.abort.timed.out.transaction.cleanup.interval.ms":
                                  "200"})
    bootstrap = process.bootstrap
    create_topic(bootstrap, "crash")
    producer = txn_producer(bootstrap, "crash-id", **{"transaction.timeout.ms": 3000})
    producer.init_transactions(15)
    producer.begin_transaction()
    for i in range(6):
        producer.produce("crash", value=f"kept-{i}".encode(), partition=i % PARTITIONS)
    producer.commit_transaction(15)
    producer.begin_transaction()
    for i in range(6):
        producer.produce("crash", value=f"open-{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(15) == 0
    process.kill()
    process.start()
    # The open transaction holds the LSO until the coordinator times it out and aborts it.
    deadline = time.monotonic() + 20
    while not process.events("transaction_timed_out") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert process.events("transaction_timed_out")
    second = txn_producer(bootstrap, "crash-id")
    second.init_transactions(30)
    second.begin_transaction()
    second.produce("crash", value=b"after", partition=0)
    second.commit_transaction(15)
    got = read_all(bootstrap, "crash", "read_committed", 7)
    assert sorted(v for _, v in got) == sorted([f"kept-{i}".encode() for i in range(6)]
                                               + [b"after"])
    everything = read_all(bootstrap, "crash", "read_uncommitted", 13)
    assert len(everything) == 13


def test_aiokafka_transactional_producer(broker_process: Callable[..., Any]) -> None:
    from aiokafka import AIOKafkaProducer

    process = broker_process()
    bootstrap = process.bootstrap
    create_topic(bootstrap, "aio-txn")

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="aio-id",
                                    request_timeout_ms=20000)
        await asyncio.wait_for(producer.start(), 20)
        try:
            async with producer.transaction():
                for i in range(6):
                    await producer.send("aio-txn", value=f"c-{i}".encode(),
                                        partition=i % PARTITIONS)
            await producer.begin_transaction()
            for i in range(6):
                await producer.send_and_wait("aio-txn", value=f"a-{i}".encode(),
                                             partition=i % PARTITIONS)
            await producer.abort_transaction()
            async with producer.transaction():
                await producer.send("aio-txn", value=b"c-last", partition=2)
        finally:
            await producer.stop()

    asyncio.run(asyncio.wait_for(run(), 60))
    got = read_all(bootstrap, "aio-txn", "read_committed", 7)
    assert sorted(v for _, v in got) == sorted([f"c-{i}".encode() for i in range(6)]
                                               + [b"c-last"])
    assert len(read_all(bootstrap, "aio-txn", "read_uncommitted", 13)) == 13
    # aiokafka's read_committed consumer filters the aborted records itself, too.
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as AioTopicPartition

    async def consume() -> list[bytes]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                    isolation_level="read_committed",
                                    auto_offset_reset="earliest")
        await consumer.start()
        try:
            consumer.assign([AioTopicPartition("aio-txn", p) for p in range(PARTITIONS)])
            values: list[bytes] = []
            deadline = time.monotonic() + 20
            while len(values) < 7 and time.monotonic() < deadline:
                for batch in (await consumer.getmany(timeout_ms=200)).values():
                    values += [m.value for m in batch]
            return values
        finally:
            await consumer.stop()

    assert sorted(asyncio.run(consume())) == sorted([f"c-{i}".encode() for i in range(6)]
                                                    + [b"c-last"])


def test_kafka_python_transactional_producer(broker_process: Callable[..., Any]) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition

    process = broker_process()
    bootstrap = process.bootstrap
    create_topic(bootstrap, "kp-txn")
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="kp-id")
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(4):
        producer.send("kp-txn", value=f"c-{i}".encode(), partition=i % PARTITIONS)
    producer.commit_transaction()
    producer.begin_transaction()
    for i in range(4):
        producer.send("kp-txn", value=f"a-{i}".encode(), partition=i % PARTITIONS)
    producer.flush()
    producer.abort_transaction()
    producer.close(10)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             consumer_timeout_ms=3000)
    consumer.assign([KTopicPartition("kp-txn", p) for p in range(PARTITIONS)])
    values = sorted(m.value for m in consumer)
    consumer.close()
    assert values == [f"c-{i}".encode() for i in range(4)]
    assert len(read_all(bootstrap, "kp-txn", "read_uncommitted", 8)) == 8


def test_exactly_once_example_runs(broker_process: Callable[..., Any]) -> None:
    import subprocess
    import sys
    from pathlib import Path

    process = broker_process()
    example = Path(__file__).resolve().parents[2] / "examples" / "exactly_once.py"
    result = subprocess.run([sys.executable, str(example), "--bootstrap", process.bootstrap,
                             "--count", "12"], capture_output=True, text=True, timeout=90)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "read_committed sees 12" in result.stdout


def test_a_marker_that_fails_to_write_is_written_again(broker_process: Callable[..., Any]
                                                       ) -> None:
    """A COMMIT marker that cannot be written (a file-size limit on the running broker stands
    in for a full disk; the transaction log is small enough to take its records) must not
    complete the transaction: it stays PrepareCommit and the marker is written again once it
    fits, as Kafka retries markers. Completing it without the marker left the partition's
    transaction open for good: its LSO stuck, the committed record never read_committed, even
    after a restart."""
    import resource

    process = broker_process({
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"})
    bootstrap = process.bootstrap
    create_topic(bootstrap, "full-marker", 1)
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    for _ in range(2000):  # the segment: the broker's largest file, its own log included
        plain.produce("full-marker", value=b"x" * 1000, partition=0)
    assert plain.flush(30) == 0
    producer = txn_producer(bootstrap, "full-marker-id")
    producer.init_transactions(15)
    producer.begin_transaction()
    producer.produce("full-marker", value=b"committed", partition=0)
    assert producer.flush(15) == 0
    segment = process.data_dir / "full-marker-0" / f"{0:020d}.log"
    assert process.process is not None
    pid = process.process.pid
    resource.prlimit(pid, resource.RLIMIT_FSIZE,
                     (segment.stat().st_size, resource.RLIM_INFINITY))
    producer.commit_transaction(15)  # PrepareCommit is written: the decision holds
    deadline = time.monotonic() + 20  # the broker's log is written by a thread
    while not process.events("transaction_marker_failed") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process.events("transaction_marker_failed")
    resource.prlimit(pid, resource.RLIMIT_FSIZE,
                     (resource.RLIM_INFINITY, resource.RLIM_INFINITY))

    def committed_values() -> list[bytes]:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4()}",
                             "isolation.level": "read_committed",
                             "enable.auto.commit": False, "enable.partition.eof": True})
        consumer.assign([TopicPartition("full-marker", 0, 2000)])
        values: list[bytes] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error() is None:
                values.append(message.value())
            elif message.error().code() == KafkaError._PARTITION_EOF and values:
                break
        consumer.close()
        return values

    assert committed_values() == [b"committed"]
    assert process.events("transaction_committed")
    process.restart()
    assert committed_values() == [b"committed"]


def test_kill_9_between_prepare_commit_and_a_marker_then_restart(
        broker_process: Callable[..., Any]) -> None:
    """A crash in the middle of EndTxn: PrepareCommit written, the group's offsets and one
    partition's marker written, the other partition's marker not (its segment cannot grow:
    a file-size limit), then kill -9. The restarted coordinator writes the missing markers, so
    read_committed sees every record of the transaction once, no LSO is left behind and the
    offsets sent with the transaction are the group's."""
    import resource

    process = broker_process({
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"})
    bootstrap = process.bootstrap
    create_topic(bootstrap, "mid-commit")
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    # Partition 0's segment (6 MB) must be the broker's largest file: the file-size limit below
    # is its size, and a log file that reached it first lost half a line.
    for _ in range(2000):
        plain.produce("mid-commit", value=b"x" * 3000, partition=0)
    assert plain.flush(30) == 0
    producer = txn_producer(bootstrap, "mid-commit-id")
    producer.init_transactions(15)
    producer.begin_transaction()
    for partition in range(PARTITIONS):
        producer.produce("mid-commit", value=b"txn-%d" % partition, partition=partition)
    assert producer.flush(15) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "mid-commit-group"})
    producer.send_offsets_to_transaction(
        [TopicPartition("mid-commit", p, 10 + p) for p in range(PARTITIONS)],
        consumer.consumer_group_metadata(), 15)
    consumer.close()
    segment = process.data_dir / "mid-commit-0" / f"{0:020d}.log"
    assert process.process is not None
    resource.prlimit(process.process.pid, resource.RLIMIT_FSIZE,
                     (segment.stat().st_size, resource.RLIM_INFINITY))
    producer.commit_transaction(15)
    deadline = time.monotonic() + 20  # the broker's log is written by a thread
    while not process.events("transaction_marker_failed") and time.monotonic() < deadline:
        time.sleep(0.05)
    failed = process.events("transaction_marker_failed")
    assert {(e["topic"], e["partition"]) for e in failed} == {("mid-commit", 0)}
    process.kill()
    process.start()

    got = read_all(bootstrap, "mid-commit", "read_committed", 2000 + PARTITIONS)
    assert sorted(v for _, v in got if v.startswith(b"txn-")) == [
        b"txn-%d" % p for p in range(PARTITIONS)]
    assert len(got) == 2000 + PARTITIONS
    # No partition's last stable offset is left behind its high watermark.
    assert log_ends(bootstrap, "mid-commit", "read_committed") == log_ends(
        bootstrap, "mid-commit", "read_uncommitted")
    assert committed(bootstrap, "mid-commit-group", "mid-commit") == {
        p: 10 + p for p in range(PARTITIONS)}
    assert process.events("transactions_loaded")[-1]["pending"] == 1


def test_pending_transactional_offsets_across_kill_9(broker_process: Callable[..., Any]
                                                     ) -> None:
    """TxnOffsetCommit, then kill -9 before EndTxn (raw frames, two producers, groups on
    different ``__consumer_offsets`` partitions). After the restart the offsets are still
    pending (UNSTABLE_OFFSET_COMMIT for require_stable); the producer that comes back commits
    its offsets, the one that does not is aborted by its timeout; and the outcome survives
    another crash."""
    import trio
    from kio.schema.errors import ErrorCode

    from tests.kafka_wire import WireClient
    from tests.server.test_transaction_frames import end_txn, init_pid, mod

    process = broker_process({
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
        "offsets.topic.num.partitions": "5"})
    create_topic(process.bootstrap, "pending", 1)
    groups = ["ga", "gb", "gc"]  # three different offsets partitions of five

    async def offset_fetch(client: WireClient, group: str) -> tuple[str, int]:
        m = mod(9, 8)
        answer = await client.request(9, 8, m.OffsetFetchRequest(
            require_stable=True, groups=(m.OffsetFetchRequestGroup(
                group_id=group, topics=(m.OffsetFetchRequestTopics(
                    name="pending", partition_indexes=(0,)),)),)))
        part = answer.groups[0].topics[0].partitions[0]
        return part.error_code.name, int(part.committed_offset)

    async def send_offsets(client: WireClient, txn_id: str, pid: int, epoch: int, group: str,
                           offset: int) -> None:
        m = mod(25, 3)
        assert (await client.request(25, 3, m.AddOffsetsToTxnRequest(
            transactional_id=txn_id, producer_id=pid, producer_epoch=epoch, group_id=group))
                ).error_code is ErrorCode.none
        m = mod(28, 3)
        answer = await client.request(28, 3, m.TxnOffsetCommitRequest(
            transactional_id=txn_id, group_id=group, producer_id=pid, producer_epoch=epoch,
            generation_id=-1, member_id="", group_instance_id=None,
            topics=(m.TxnOffsetCommitRequestTopic(name="pending", partitions=(
                m.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=offset,
                                                  committed_leader_epoch=-1,
                                                  committed_metadata=""),)),)))
        assert answer.topics[0].partitions[0].error_code is ErrorCode.none

    async def before_the_crash() -> tuple[int, int]:
        client = await WireClient.connect(process.port)
        try:
            init = await init_pid(client, "stays", 60000)
            stays = int(init.producer_id), int(init.producer_epoch)
            await send_offsets(client, "stays", *stays, "ga", 10)
            await send_offsets(client, "stays", *stays, "gb", 10)
            init = await init_pid(client, "leaves", 1000)
            await send_offsets(client, "leaves", int(init.producer_id),
                               int(init.producer_epoch), "gc", 20)
            return stays
        finally:
            await client.aclose()

    stays = trio.run(before_the_crash)
    process.kill()
    process.start()

    async def after_the_crash() -> None:
        client = await WireClient.connect(process.port)
        try:
            assert [await offset_fetch(client, g) for g in groups[:2]] == [
                ("unstable_offset_commit", -1)] * 2
            # Pending too until its 1 s timeout aborts it (which a slow restart may outlast).
            assert await offset_fetch(client, "gc") in (("unstable_offset_commit", -1),
                                                        ("none", -1))
            assert await end_txn(client, "stays", *stays, True) is ErrorCode.none
            while (await offset_fetch(client, "gc"))[0] == "unstable_offset_commit":
                await trio.sleep(0.1)  # until the abandoned transaction times out
            assert [await offset_fetch(client, g) for g in groups] == [
                ("none", 10), ("none", 10), ("none", -1)]
        finally:
            await client.aclose()

    trio.run(after_the_crash)
    process.kill()
    process.start()

    async def after_another_crash() -> None:
        client = await WireClient.connect(process.port)
        try:
            assert [await offset_fetch(client, g) for g in groups] == [
                ("none", 10), ("none", 10), ("none", -1)]
        finally:
            await client.aclose()

    trio.run(after_another_crash)
