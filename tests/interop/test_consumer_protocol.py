"""The KIP-848 consumer group protocol with an unmodified client: confluent-kafka (librdkafka
2.16) with ``group.protocol=consumer`` against ``trio_broker run``.

Every wait is bounded by a deadline so a broken coordinator fails a test instead of hanging it.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from .test_groups import create_topic, produce, wait_until

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]

OVERRIDES = {"group.consumer.heartbeat.interval.ms": "300",
             "group.consumer.session.timeout.ms": "6000"}


def consumer(bootstrap: str, group: str, name: str, **extra: Any) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
                     "group.protocol": "consumer", "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, **extra})


class Reader:
    """Polls consumers, counts every record seen and commits what each consumer read."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        #: Records whose commit was refused (STALE_MEMBER_EPOCH while the member's epoch moved
        #: on): the only ones another member may read again.
        self.uncommitted: set[str] = set()

    def poll(self, members: list[Consumer]) -> Callable[[], None]:
        def step() -> None:
            for c in members:
                message = c.poll(0.05)
                if message is not None and message.error() is None:
                    value = message.value().decode()
                    self.counts[value] += 1
                    # Synchronous commit after each record: a record read is committed
                    # before the consumer can lose its partition, so nothing is read twice,
                    # unless the commit is refused because a rebalance moved the epoch on.
                    try:
                        c.commit(message=message, asynchronous=False)
                    except KafkaException as exc:
                        if exc.args[0].code() != KafkaError.STALE_MEMBER_EPOCH:
                            raise
                        self.uncommitted.add(value)
        return step


def test_three_consumers_read_every_record_once_while_members_join_and_leave(
        broker_process: Any) -> None:
    process = broker_process(OVERRIDES)
    bootstrap = process.bootstrap
    topic = f"twelve-{uuid.uuid4().hex[:6]}"
    group = f"kip848-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, 12)
    reader = Reader()
    batches = [[f"b{b}-{i}" for i in range(120)] for b in range(4)]
    expected: set[str] = set()

    def publish(index: int) -> None:
        produce(bootstrap, topic, batches[index], 12)
        expected.update(batches[index])

    def read_all(members: list[Consumer]) -> None:
        wait_until(lambda: expected <= set(reader.counts), 40, reader.poll(members),
                   lambda: f"{len(expected - set(reader.counts))} records not read")

    first = consumer(bootstrap, group, "c0")
    first.subscribe([topic])
    publish(0)
    read_all([first])
    assert len(first.assignment()) == 12

    # Two more members join: the partitions are split 4/4/4 and reading goes on.
    others = [consumer(bootstrap, group, f"c{i}") for i in (1, 2)]
    for c in others:
        c.subscribe([topic])
    members = [first, *others]
    wait_until(lambda: sorted(len(c.assignment()) for c in members) == [4, 4, 4], 40,
               reader.poll(members), lambda: f"assignments {[len(c.assignment()) for c in members]}")
    publish(1)
    read_all(members)

    # One leaves: the other two take over its partitions.
    others[0].close()
    members = [first, others[1]]
    wait_until(lambda: sorted(len(c.assignment()) for c in members) == [6, 6], 40,
               reader.poll(members), lambda: f"assignments {[len(c.assignment()) for c in members]}")
    publish(2)
    read_all(members)

    # After a broker restart the group and its offsets are still there.
    for c in members:
        c.close()
    process.restart()
    publish(3)
    members = [consumer(bootstrap, group, f"r{i}") for i in range(3)]
    for c in members:
        c.subscribe([topic])
    read_all(members)
    for c in members:
        c.close()
    assert set(reader.counts) == expected
    duplicates = {value for value, n in reader.counts.items() if n > 1}
    assert duplicates <= reader.uncommitted, \
        f"committed records read again: {sorted(duplicates - reader.uncommitted)[:10]}"
    joined = process.events("group_member_joined")
    assert len({e["member_id"] for e in joined}) >= 6
    assert process.events("assignment_changed")


def test_members_connected_through_a_kill_9_read_every_acknowledged_record(
        broker_process: Any) -> None:
    """Members that stay up while the broker is killed (SIGKILL) and restarted on the same
    port rejoin and read every record acknowledged before and after the crash; only records
    whose commit was refused by the restart are read again."""
    process = broker_process(OVERRIDES)
    bootstrap = process.bootstrap
    topic = f"crash-{uuid.uuid4().hex[:6]}"
    group = f"kip848-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, 6)
    counts: Counter[str] = Counter()
    uncommitted: set[str] = set()
    members = [consumer(bootstrap, group, f"k{i}") for i in range(2)]
    for c in members:
        c.subscribe([topic])

    def step() -> None:
        for c in members:
            message = c.poll(0.05)
            if message is not None and message.error() is None:
                value = message.value().decode()
                counts[value] += 1
                try:
                    c.commit(message=message, asynchronous=False)
                except KafkaException:
                    # The coordinator is down or the member is rejoining (its epoch is gone
                    # with the crash): this record may be read again, as with Kafka.
                    uncommitted.add(value)

    before = [f"before-{i}" for i in range(60)]
    produce(bootstrap, topic, before, 6)
    wait_until(lambda: set(before) <= set(counts), 40, step,
               lambda: f"{len(set(before) - set(counts))} records not read before the crash")
    process.kill()
    process.start()
    after = [f"after-{i}" for i in range(60)]
    produce(bootstrap, topic, after, 6)
    wait_until(lambda: set(after) <= set(counts), 60, step,
               lambda: f"{len(set(after) - set(counts))} records not read after the restart")
    for c in members:
        c.close()
    assert set(counts) == {*before, *after}
    duplicates = {value for value, n in counts.items() if n > 1}
    assert duplicates <= uncommitted, \
        f"committed records read again: {sorted(duplicates - uncommitted)[:10]}"


def test_regex_subscription_picks_up_a_topic_created_later(broker_process: Any) -> None:
    process = broker_process(OVERRIDES)
    bootstrap = process.bootstrap
    prefix = f"rx{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, f"{prefix}-a", 2)
    c = consumer(bootstrap, f"group-{prefix}", "rx", **{"topic.metadata.refresh.interval.ms": 500})
    c.subscribe([f"^{prefix}-.*"])
    seen: set[str] = set()

    def step() -> None:
        message = c.poll(0.05)
        if message is not None and message.error() is None:
            seen.add(message.value().decode())

    produce(bootstrap, f"{prefix}-a", ["a0", "a1"], 2)
    wait_until(lambda: {"a0", "a1"} <= seen, 30, step, "records of the first topic")
    create_topic(bootstrap, f"{prefix}-b", 3)
    produce(bootstrap, f"{prefix}-b", ["b0", "b1", "b2"], 3)
    wait_until(lambda: {"b0", "b1", "b2"} <= seen, 30, step,
               lambda: f"records of the later topic (assignment {c.assignment()})")
    assert {tp.topic for tp in c.assignment()} == {f"{prefix}-a", f"{prefix}-b"}
    c.close()


def test_classic_member_refused_in_a_consumer_group_and_describe(broker_process: Any) -> None:
    process = broker_process(OVERRIDES)
    bootstrap = process.bootstrap
    topic = f"mixed-{uuid.uuid4().hex[:6]}"
    group = f"mixed-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, 3)
    produce(bootstrap, topic, ["x0", "x1", "x2"], 3)
    modern = consumer(bootstrap, group, "modern")
    modern.subscribe([topic])
    wait_until(lambda: len(modern.assignment()) == 3, 30, lambda: modern.poll(0.05) and None,
               "the consumer-protocol member's assignment")
    classic = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                        "session.timeout.ms": 6000, "auto.offset.reset": "earliest"})
    classic.subscribe([topic])
    errors: list[Any] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not errors:
        modern.poll(0.05)
        try:
            message = classic.poll(0.1)
        except KafkaException as exc:
            errors.append(exc.args[0])
            break
        if message is not None and message.error() is not None:
            errors.append(message.error())
    assert errors and "INCONSISTENT_GROUP_PROTOCOL" in str(errors[0])
    classic.close()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    listed = admin.list_consumer_groups().result(10)
    ours = [g for g in listed.valid if g.group_id == group]
    assert ours and ours[0].type.name == "CONSUMER"
    described = admin.describe_consumer_groups([group])[group].result(10)
    assert described.type.name == "CONSUMER"
    assert [len(m.assignment.topic_partitions) for m in described.members] == [3]
    modern.close()


def test_static_member_comes_back_to_its_partitions(broker_process: Any) -> None:
    process = broker_process(OVERRIDES)
    bootstrap = process.bootstrap
    topic = f"static-{uuid.uuid4().hex[:6]}"
    group = f"static-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, 4)

    def member(instance: str) -> Consumer:
        c = consumer(bootstrap, group, instance, **{"group.instance.id": instance})
        c.subscribe([topic])
        return c

    first, second = member("i1"), member("i2")

    def poll_all(*members: Consumer) -> Callable[[], None]:
        return lambda: [c.poll(0.05) for c in members] and None

    wait_until(lambda: sorted([len(first.assignment()), len(second.assignment())]) == [2, 2], 30,
               poll_all(first, second), "a 2/2 split")
    before = sorted(p.partition for p in first.assignment())
    first.close()  # a static member leaves with epoch -2: its partitions wait for it
    first = member("i1")
    wait_until(lambda: len(first.assignment()) == 2, 30, poll_all(first, second),
               "the static member's partitions back")
    assert sorted(p.partition for p in first.assignment()) == before
    assert len(second.assignment()) == 2
    first.close()
    second.close()
    rejoined = [e for e in process.events("group_member_joined") if e["rejoined"]]
    assert [e["group_instance_id"] for e in rejoined] == ["i1"]


def test_transactional_offsets_of_a_consumer_group_member(broker_process: Any) -> None:
    """Exactly-once with ``group.protocol=consumer``: TxnOffsetCommit v3 names the member and
    its epoch, checked against the consumer group (not the classic generation)."""
    process = broker_process(OVERRIDES)
    bootstrap = process.bootstrap
    suffix = uuid.uuid4().hex[:6]
    source, sink, group = f"in-{suffix}", f"out-{suffix}", f"eos-{suffix}"
    create_topic(bootstrap, source, 2)
    create_topic(bootstrap, sink, 1)
    produce(bootstrap, source, [f"v{i}" for i in range(10)], 2)
    c = consumer(bootstrap, group, "eos")
    c.subscribe([source])
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{suffix}"})
    producer.init_transactions(15)
    got: list[Any] = []

    def step() -> None:
        message = c.poll(0.05)
        if message is not None and message.error() is None:
            got.append(message)

    wait_until(lambda: len(got) == 10, 30, step, "the ten records")
    # A plain commit first: the group then has committed offsets (and so an offsets entry)
    # that the transactional commit must also be checked against.
    c.commit(message=got[0], asynchronous=False)
    producer.begin_transaction()
    for message in got:
        producer.produce(sink, value=message.value())
    producer.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(),
                                         15)
    producer.commit_transaction(15)
    committed = c.committed(c.assignment(), 15)
    assert sorted((tp.partition, tp.offset) for tp in committed) == [(0, 5), (1, 5)]
    c.close()
