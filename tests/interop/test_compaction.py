"""Log compaction with real clients (confluent-kafka / librdkafka) against ``trio_broker run``
subprocesses: 100k records over 1k keys with tombstones, a kill -9 at each step of a clean's
swap, and a compacted ``__consumer_offsets`` that still reloads every group."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_INVALID,
    Consumer,
    KafkaError,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from trio_broker.storage.cleaner import FAULT_ENV

pytestmark = pytest.mark.interop

TIMEOUT = 30.0
Expected = dict[bytes, tuple[int, bytes | None]]


def wait_for(condition: Callable[[], Any], what: str,
             details: Callable[[], Any] = lambda: None, timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}: {details()}")


def create_topic(bootstrap: str, name: str, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1, config=configs)])[name].result(TIMEOUT)


def delivery_record() -> tuple[Expected, list[Any], Callable[[Any, Any], None]]:
    """The newest delivered (offset, value) per key, the delivery errors, and the
    ``on_delivery`` callback that fills them."""
    latest: Expected = {}
    failures: list[Any] = []

    def delivered(error: Any, message: Any) -> None:
        if error is not None:
            failures.append(error)
        else:
            latest[message.key()] = (message.offset(), message.value())

    return latest, failures, delivered


def finish(producer: Producer, topic: str, delivered: Callable[[Any, Any], None],
           failures: list[Any], *, sentinel: bool = True) -> None:
    """Flush, after a ``sentinel`` record when asked, and check every record was delivered."""
    if sentinel:
        assert producer.flush(TIMEOUT) == 0  # the sentinel goes in a batch of its own
        # A record stamped past segment.ms rolls the segment (Kafka's rule), so everything
        # before it lies in closed, cleanable segments.
        producer.produce(topic, key=b"sentinel", value=b"end", on_delivery=delivered,
                         timestamp=int(time.time() * 1000) + 120_000)
    assert producer.flush(TIMEOUT) == 0
    assert not failures, failures[:3]


def produce(bootstrap: str, topic: str, count: int, keys: int, *, sentinel: bool = True
            ) -> Expected:
    """``count`` records over ``keys`` keys: a tombstone now and then, and a tenth of the keys
    deleted by their last record. Returns the newest (offset, value) per key."""
    # batches well under segment.bytes (an append must fit in one segment)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                         "enable.idempotence": True, "batch.size": 16384,
                         "queue.buffering.max.messages": 1_000_000})
    latest, failures, delivered = delivery_record()
    for i in range(count):
        key = b"key-%04d" % (i % keys)
        deleted = (i % 331 == 0) or (i >= count - keys and (i % keys) % 10 == 0)
        producer.produce(topic, key=key, value=None if deleted else b"value-%d" % i,
                         on_delivery=delivered)
        if i % 10000 == 0:
            producer.poll(0)
    finish(producer, topic, delivered, failures, sentinel=sentinel)
    return latest


def consume_all(bootstrap: str, topic: str, end: int) -> list[tuple[int, bytes, bytes | None]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.time()}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got: list[tuple[int, bytes, bytes | None]] = []
    deadline = time.monotonic() + TIMEOUT * 2
    while (not got or got[-1][0] < end - 1) and time.monotonic() < deadline:
        for message in consumer.consume(10000, 1.0):
            assert message.error() is None, message.error()
            got.append((message.offset(), message.key(), message.value()))
    consumer.close()
    return got


def newest(expected: Expected, *, tombstones: bool) -> list[tuple[int, bytes, bytes | None]]:
    return sorted((offset, key, value) for key, (offset, value) in expected.items()
                  if tombstones or value is not None)


def test_confluent_consumer_sees_the_newest_value_per_live_key(broker_process: Any) -> None:
    process = broker_process({"log.cleaner.backoff.ms": "200"})
    bootstrap = process.bootstrap
    create_topic(bootstrap, "compacted", {
        "cleanup.policy": "compact", "segment.bytes": "262144", "segment.ms": "60000",
        "delete.retention.ms": "0", "min.cleanable.dirty.ratio": "0.01"})
    # Kafka refuses a record without a key in a compacted topic
    producer = Producer({"bootstrap.servers": bootstrap})
    errors: list[Any] = []
    producer.produce("compacted", value=b"no key", on_delivery=lambda e, m: errors.append(e))
    producer.flush(TIMEOUT)
    assert errors and errors[0].code() == KafkaError.INVALID_RECORD

    expected = produce(bootstrap, "compacted", 100_000, 1000)
    end = expected[b"sentinel"][0] + 1
    assert end == 100_001

    def cleaned_everything() -> bool:
        done = [e for e in process.events("log_cleaned") if e["topic"] == "compacted"]
        return bool(done) and done[-1]["end_offset"] == end - 1 \
            and done[-1]["tombstones_retained"] == 0

    wait_for(cleaned_everything, "a clean of every closed segment without tombstones left",
             lambda: [e for e in process.events() if e["event"].startswith("log_clean")
                      or e["event"] == "background_task_failed"][-3:])
    got = consume_all(bootstrap, "compacted", end)
    assert got == newest(expected, tombstones=False)
    cleaned = [e for e in process.events("log_cleaned") if e["topic"] == "compacted"]
    assert sum(e["records_removed"] for e in cleaned) >= 100_000 - 1000
    # ListOffsets still answers the log's own bounds
    low, high = Consumer({"bootstrap.servers": bootstrap, "group.id": "w"}) \
        .get_watermark_offsets(TopicPartition("compacted", 0), timeout=TIMEOUT)
    assert (low, high) == (0, end)


@pytest.mark.parametrize("point", ["swapped", "deleted", "renamed"])
def test_kill_9_during_a_clean_loses_no_surviving_record(
        broker_process: Any, monkeypatch: pytest.MonkeyPatch, point: str) -> None:
    monkeypatch.setenv(FAULT_ENV, point)
    process = broker_process({"log.cleaner.backoff.ms": "100"})
    bootstrap = process.bootstrap
    # delete policy while producing; compaction is switched on afterwards, so the crash
    # comes at the first clean and never during the produce
    create_topic(bootstrap, "crashy", {"segment.bytes": "65536", "segment.ms": "60000"})
    expected = produce(bootstrap, "crashy", 20_000, 200)
    end = expected[b"sentinel"][0] + 1
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, "crashy", incremental_configs=[
        ConfigEntry("cleanup.policy", "compact",
                    incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(TIMEOUT)
    assert process.process is not None
    process.process.wait(TIMEOUT * 2)  # the fault hook kills the broker mid-swap
    assert process.process.returncode == -9
    monkeypatch.delenv(FAULT_ENV)

    # restarted without the cleaner: the interrupted clean is completed, nothing is lost
    process.overrides["log.cleaner.enable"] = "false"
    process.start()
    assert process.events("log_cleaner_swap_recovered") or point == "renamed"
    got = consume_all(bootstrap, "crashy", end)
    last_seen = {key: (offset, value) for offset, key, value in got}
    assert last_seen == expected
    assert {(o, k, v) for o, k, v in got} >= set(newest(expected, tombstones=True))

    # and with the cleaner again: exactly the newest record per key
    process.restart()
    process.stop()
    process.overrides["log.cleaner.enable"] = "true"
    process.start()
    wait_for(lambda: [e for e in process.events("log_cleaned")
                      if e["topic"] == "crashy" and e["end_offset"] == end - 1],
             "the clean after the restart")
    assert consume_all(bootstrap, "crashy", end) == newest(expected, tombstones=True)


def test_consumer_offsets_are_compacted_and_groups_reload(broker_process: Any) -> None:
    process = broker_process({"log.cleaner.backoff.ms": "200",
                              "offsets.topic.num.partitions": "1",
                              "offsets.topic.segment.bytes": "16384"})
    bootstrap = process.bootstrap
    create_topic(bootstrap, "data", {})
    committer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kept",
                          "enable.auto.commit": False})
    for i in range(1500):
        committer.commit(offsets=[TopicPartition("data", 0, i)], asynchronous=False)
    committer.close()
    gone = Consumer({"bootstrap.servers": bootstrap, "group.id": "gone",
                     "enable.auto.commit": False})
    gone.commit(offsets=[TopicPartition("data", 0, 7)], asynchronous=False)
    gone.close()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_consumer_groups(["gone"])["gone"].result(TIMEOUT)
    # more commits so the deletion's tombstones land in a closed segment
    again = Consumer({"bootstrap.servers": bootstrap, "group.id": "kept",
                      "enable.auto.commit": False})
    for i in range(1500, 2000):
        again.commit(offsets=[TopicPartition("data", 0, i)], asynchronous=False)
    again.close()

    cleaned = wait_for(lambda: [e for e in process.events("log_cleaned")
                                if e["topic"] == "__consumer_offsets"], "a clean of the offsets")
    assert cleaned[0]["bytes_after"] < cleaned[0]["bytes_before"] / 10

    process.restart()
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "kept"})
    (committed,) = reader.committed([TopicPartition("data", 0)], timeout=TIMEOUT)
    assert committed.offset == 1999
    reader.close()
    deleted = Consumer({"bootstrap.servers": bootstrap, "group.id": "gone"})
    (committed,) = deleted.committed([TopicPartition("data", 0)], timeout=TIMEOUT)
    assert committed.offset == OFFSET_INVALID  # its tombstones were replayed too
    deleted.close()
    loaded = process.events("groups_loaded")[-1]
    assert loaded["records"] < 1000  # the reload read the compacted log, not 2000 commits
