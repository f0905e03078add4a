"""Consumer groups with unmodified clients: confluent-kafka (range and cooperative-sticky),
kafka-python, aiokafka, kcat ``-G`` and the AdminClient, against ``trio_broker run``.

Small session timeouts and ``group.initial.rebalance.delay.ms=0`` keep rebalances quick; every
wait is bounded by a deadline so a broken coordinator fails a test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = [pytest.mark.interop, pytest.mark.timeout(90)]

KCAT = shutil.which("kcat") or "/usr/bin/kcat"
GROUP_OVERRIDES = {"group.min.session.timeout.ms": "1000"}


def wait_until(condition: Callable[[], bool], timeout: float, step: Callable[[], None],
               what: str | Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        step()
        if condition():
            return
    raise AssertionError(f"timed out waiting for {what() if callable(what) else what}")


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions)]).values():
        future.result(10)


def produce(bootstrap: str, topic: str, values: list[str], partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, value in enumerate(values):
        producer.produce(topic, value=value.encode(), partition=i % partitions)
    assert producer.flush(15) == 0


def consumer(bootstrap: str, group: str, name: str, **extra: Any) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
                     "session.timeout.ms": 6000, "heartbeat.interval.ms": 300,
                     "auto.offset.reset": "earliest", **extra})


def assignment_sizes(consumers: list[Consumer]) -> list[int]:
    return sorted(len(c.assignment()) for c in consumers)


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_confluent_group_splits_rebalances_and_reads_everything(
        broker_process: Any, strategy: str) -> None:
    process = broker_process(GROUP_OVERRIDES)
    bootstrap = process.bootstrap
    topic = f"six-{strategy}"
    create_topic(bootstrap, topic, 6)
    first = [f"first-{i}" for i in range(60)]
    produce(bootstrap, topic, first, 6)
    consumers = [consumer(bootstrap, f"group-{strategy}", f"c{i}",
                          **{"partition.assignment.strategy": strategy}) for i in range(3)]
    seen: dict[tuple[int, int], str] = {}

    def poll(members: list[Consumer]) -> Callable[[], None]:
        def step() -> None:
            for c in members:
                message = c.poll(0.05)
                if message is not None and message.error() is None:
                    seen[(message.partition(), message.offset())] = message.value().decode()
        return step

    for c in consumers:
        c.subscribe([topic])
    wait_until(lambda: assignment_sizes(consumers) == [2, 2, 2] and len(seen) == 60, 30,
               poll(consumers), "three consumers with two partitions each")
    owned = [{tp.partition for tp in c.assignment()} for c in consumers]
    assert set().union(*owned) == set(range(6))
    consumers[2].close()
    remaining = consumers[:2]
    wait_until(lambda: assignment_sizes(remaining) == [3, 3], 30, poll(remaining),
               "two consumers with three partitions each")
    second = [f"second-{i}" for i in range(30)]
    produce(bootstrap, topic, second, 6)
    wait_until(lambda: len(seen) == 90, 30, poll(remaining), "every record")
    assert sorted(seen.values()) == sorted(first + second)
    for c in remaining:
        c.close()
    assert process.events("rebalance_completed")
    assert not [e for e in process.events() if e["level"] == "error"]


def test_restarted_consumer_resumes_at_committed_offsets(broker_process: Any) -> None:
    process = broker_process(GROUP_OVERRIDES)
    bootstrap = process.bootstrap
    create_topic(bootstrap, "resume", 1)
    produce(bootstrap, "resume", [f"v{i}" for i in range(50)], 1)
    c = consumer(bootstrap, "resumers", "first", **{"enable.auto.commit": False})
    c.subscribe(["resume"])
    read: list[int] = []

    def step() -> None:
        message = c.poll(0.1)
        if message is not None and message.error() is None and len(read) < 20:
            read.append(message.offset())

    wait_until(lambda: len(read) >= 20, 30, step, "twenty records")
    c.commit(offsets=[TopicPartition("resume", 0, 20, "checkpoint")], asynchronous=False)
    c.close()

    again = consumer(bootstrap, "resumers", "second", **{"enable.auto.commit": False})
    committed = again.committed([TopicPartition("resume", 0)], timeout=10)
    assert committed[0].offset == 20
    assert committed[0].metadata == "checkpoint"
    again.subscribe(["resume"])
    firsts: list[int] = []

    def step2() -> None:
        message = again.poll(0.1)
        if message is not None and message.error() is None:
            firsts.append(message.offset())

    wait_until(lambda: bool(firsts), 30, step2, "the first record after the restart")
    assert firsts[0] == 20
    again.close()


def test_offsets_and_groups_survive_broker_restart(broker_process: Any) -> None:
    process = broker_process(GROUP_OVERRIDES)
    bootstrap = process.bootstrap
    create_topic(bootstrap, "durable", 3)
    c = consumer(bootstrap, "durables", "c", **{"enable.auto.commit": False})
    c.commit(offsets=[TopicPartition("durable", p, 100 + p) for p in range(3)],
             asynchronous=False)
    c.close()
    process.restart()
    after = consumer(bootstrap, "durables", "after")
    committed = after.committed([TopicPartition("durable", p) for p in range(3)], timeout=10)
    assert [tp.offset for tp in committed] == [100, 101, 102]
    after.close()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    listed = admin.list_consumer_groups().result(10)
    assert "durables" in {g.group_id for g in listed.valid}
    # Killed without a clean shutdown, the offsets are still there.
    c2 = consumer(bootstrap, "durables", "c2", **{"enable.auto.commit": False})
    c2.commit(offsets=[TopicPartition("durable", 0, 500)], asynchronous=False)
    c2.close()
    process.kill()
    process.start()
    check = consumer(bootstrap, "durables", "check")
    assert check.committed([TopicPartition("durable", 0)], timeout=10)[0].offset == 500
    check.close()


def test_admin_client_lists_describes_and_deletes_groups(broker_process: Any) -> None:
    process = broker_process(GROUP_OVERRIDES)
    bootstrap = process.bootstrap
    create_topic(bootstrap, "admin-topic", 2)
    produce(bootstrap, "admin-topic", ["a", "b", "c", "d"], 2)
    members = [consumer(bootstrap, "described", f"m{i}") for i in range(2)]
    for c in members:
        c.subscribe(["admin-topic"])
    wait_until(lambda: assignment_sizes(members) == [1, 1], 30,
               lambda: [c.poll(0.05) for c in members] and None, "a stable group of two")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    listed = admin.list_consumer_groups().result(10)
    states = {g.group_id: g.state.name for g in listed.valid}
    assert states["described"] == "STABLE"
    described = admin.describe_consumer_groups(["described"])["described"].result(10)
    assert described.state.name == "STABLE"
    assert described.partition_assignor == "range"
    assert sorted(m.client_id for m in described.members) == ["m0", "m1"]
    assigned = sorted(tp.partition for m in described.members
                      for tp in m.assignment.topic_partitions)
    assert assigned == [0, 1]
    # A group with members cannot be deleted.
    with pytest.raises(Exception) as refused:
        admin.delete_consumer_groups(["described"])["described"].result(10)
    assert "NON_EMPTY_GROUP" in str(refused.value) or "not empty" in str(refused.value).lower()
    for c in members:
        c.close()
    wait_until(lambda: admin.describe_consumer_groups(["described"])["described"].result(10)
               .state.name == "EMPTY", 15, lambda: time.sleep(0.1), "an empty group")
    admin.delete_consumer_groups(["described"])["described"].result(10)
    listed = admin.list_consumer_groups().result(10)
    assert "described" not in {g.group_id for g in listed.valid}


def test_kafka_python_group(broker_process: Any) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer

    process = broker_process(GROUP_OVERRIDES)
    bootstrap = process.bootstrap
    create_topic(bootstrap, "kp", 4)
    values = [f"kp-{i}" for i in range(40)]
    produce(bootstrap, "kp", values, 4)
    consumers = [KafkaConsumer("kp", bootstrap_servers=bootstrap, group_id="kp-group",
                               client_id=f"kp{i}", auto_offset_reset="earliest",
                               session_timeout_ms=6000, heartbeat_interval_ms=300,
                               enable_auto_commit=False)
                 for i in range(2)]
    # Work around a kafka-python 3.0.12 client bug (not the broker's): a consumer that joins
    # before its metadata knows the topic assigns nothing as leader, then rejoins once the
    # metadata arrives (a rejoin asked for by its metadata snapshot, so rejoin_needed stays
    # False). If poll() times out while that JoinGroup is parked (the broker rightly holds it
    # until the follower rejoins after its next heartbeat, ~300 ms), the leader's own
    # assignment makes need_rejoin() False while the join task is still in flight, so the
    # finished JoinGroup/SyncGroup result is never consumed (the Java client checks
    # rejoinNeededOrPending): no partitions applied, heartbeats left disabled, and the
    # broker expires it after session.timeout.ms, leaving the other member all 4 partitions.
    # A blocking metadata fetch before the first poll gives each consumer the topic up front,
    # so no metadata-driven leader rejoin happens; rebalances still run through the broker.
    for c in consumers:
        assert "kp" in c.topics()
    seen: dict[tuple[int, int], str] = {}
    stop = threading.Event()

    # kafka-python consumers are polled from their own threads, as applications do (polling
    # two from one thread can starve one of them of its coordinator I/O).
    def run(c: Any) -> None:
        while not stop.is_set():
            for records in c.poll(timeout_ms=100).values():
                for r in records:
                    seen[(r.partition, r.offset)] = r.value.decode()

    threads = [threading.Thread(target=run, args=(c,), daemon=True) for c in consumers]
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: sorted(len(c.assignment()) for c in consumers) == [2, 2]
                   and len(seen) == 40, 40, lambda: time.sleep(0.05),
                   lambda: f"kafka-python consumers sharing the topic: "
                   f"{[c.assignment() for c in consumers]}, {len(seen)} records")
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
    assert sorted(seen.values()) == sorted(values)
    for c in consumers:
        c.commit()
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    listed = {g["group_id"]: g for g in admin.list_groups()}
    assert listed["kp-group"]["protocol_type"] == "consumer"
    assert listed["kp-group"]["group_state"] == "Stable"
    offsets = admin.list_group_offsets({"kp-group": None})["kp-group"]
    assert sum(meta.offset for meta in offsets.values()) == 40
    described = admin.describe_groups(["kp-group"])["kp-group"]
    assert described["group_state"] == "Stable" and len(described["members"]) == 2
    admin.close()
    for c in consumers:
        c.close()


def test_aiokafka_group(broker_process: Any) -> None:
    from aiokafka import AIOKafkaConsumer

    process = broker_process(GROUP_OVERRIDES)
    bootstrap = process.bootstrap
    create_topic(bootstrap, "aio", 4)
    values = [f"aio-{i}" for i in range(40)]
    produce(bootstrap, "aio", values, 4)

    async def run() -> tuple[dict[tuple[int, int], str], list[int]]:
        consumers = [AIOKafkaConsumer("aio", bootstrap_servers=bootstrap, group_id="aio-group",
                                      client_id=f"aio{i}", auto_offset_reset="earliest",
                                      session_timeout_ms=6000, heartbeat_interval_ms=300)
                     for i in range(2)]
        for c in consumers:
            await c.start()
        seen: dict[tuple[int, int], str] = {}
        try:
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline:
                for c in consumers:
                    batch = await c.getmany(timeout_ms=100)
                    for records in batch.values():
                        for r in records:
                            seen[(r.partition, r.offset)] = r.value.decode()
                sizes = sorted(len(c.assignment()) for c in consumers)
                if sizes == [2, 2] and len(seen) == 40:
                    break
            for c in consumers:
                await c.commit()
            return seen, sorted(len(c.assignment()) for c in consumers)
        finally:
            for c in consumers:
                await c.stop()

    seen, sizes = asyncio.run(run())
    assert sizes == [2, 2]
    assert sorted(seen.values()) == sorted(values)
    check = consumer(bootstrap, "aio-group", "check")
    committed = check.committed([TopicPartition("aio", p) for p in range(4)], timeout=10)
    assert sum(tp.offset for tp in committed) == 40
    check.close()


def test_kcat_balanced_consumer(broker_process: Any) -> None:
    process = broker_process(GROUP_OVERRIDES)
    bootstrap = process.bootstrap
    create_topic(bootstrap, "kcat-group", 2)
    values = [f"kc-{i}" for i in range(10)]
    produce(bootstrap, "kcat-group", values, 2)
    group = f"kcat-{uuid.uuid4().hex[:6]}"
    result = subprocess.run(
        [KCAT, "-b", bootstrap, "-G", group, "-c", "10", "-f", "%s\\n",
         "-X", "auto.offset.reset=earliest", "-X", "session.timeout.ms=6000", "kcat-group"],
        capture_output=True, timeout=40, check=False)
    assert result.returncode == 0, result.stderr.decode()
    assert sorted(result.stdout.decode().split()) == sorted(values)
    # kcat committed what it read: a second run of the group has nothing left to read.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    offsets = admin.list_consumer_group_offsets(
        [_group_request(group)])[group].result(10)
    assert sum(tp.offset for tp in offsets.topic_partitions if tp.offset >= 0) == 10


def _group_request(group: str) -> Any:
    from confluent_kafka import ConsumerGroupTopicPartitions

    return ConsumerGroupTopicPartitions(group)


def test_group_errors_reach_clients(broker_process: Any) -> None:
    """A consumer asking for an unsupported session timeout gets Kafka's error."""
    process = broker_process()  # group.min.session.timeout.ms stays 6000
    create_topic(process.bootstrap, "err", 1)
    c = consumer(process.bootstrap, "errors", "e", **{"session.timeout.ms": 1000})
    c.subscribe(["err"])
    errors: list[Any] = []

    def step() -> None:
        message = c.poll(0.1)
        if message is not None and message.error() is not None:
            errors.append(message.error())

    wait_until(lambda: bool(errors), 20, step, "an error")
    assert errors[0].code() == KafkaError.INVALID_SESSION_TIMEOUT
    c.close()
