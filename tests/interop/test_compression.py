"""snappy, lz4 and zstd batches from real clients: decoded by the broker (derived max timestamp,
ListOffsets by timestamp, compaction and the keyless check, the pytest plugin's records()).

confluent-kafka (librdkafka) has every codec built in; aiokafka has them through cramjam (a
runtime dependency of trio_broker); kafka-python needs python-snappy / lz4 / zstandard, which
are test dependencies (pyproject's ``test`` extra).
"""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import KafkaError, Producer, TopicPartition

from tests.interop.test_compaction import (
    consume_all,
    delivery_record,
    finish,
    newest,
    wait_for,
)
from tests.interop.test_compaction import create_topic as create_compacted
from tests.interop.test_produce_consume import (
    Rec,
    assert_round_trip,
    confluent_consume,
    confluent_produce,
    create_topic,
    in_thread,
    make_records,
)
from trio_broker.protocol import records as rb

pytestmark = [pytest.mark.interop, pytest.mark.timeout(180)]

TIMEOUT = 20.0
CODECS = ["snappy", "lz4", "zstd"]
CODEC_NUMBER = {"gzip": rb.COMPRESSION_GZIP, "snappy": rb.COMPRESSION_SNAPPY,
                "lz4": rb.COMPRESSION_LZ4, "zstd": rb.COMPRESSION_ZSTD}
ROOT = Path(__file__).resolve().parents[2]


def stored_codecs(broker: Any, topic: str, partitions: int = 3) -> set[int]:
    """The codecs of the batches the log holds (so a test knows the client compressed)."""
    found = set()
    for partition in range(partitions):
        data = broker.broker.log_manager.read(topic, partition, 0, 1 << 20).records
        found |= {rb.decode_header(data[p:p + s]).compression
                  for p, s in rb.iter_batches(data)}
    return found


def offsets_for_times(bootstrap: str, topic: str, partition: int, timestamps: list[int]
                      ) -> list[int]:
    consumer = ConfluentConsumer({"bootstrap.servers": bootstrap, "group.id": "times"})
    try:
        return [consumer.offsets_for_times([TopicPartition(topic, partition, ts)],
                                           timeout=TIMEOUT)[0].offset for ts in timestamps]
    finally:
        consumer.close()


@pytest.mark.parametrize("codec", CODECS)
async def test_confluent_batches_round_trip_and_are_found_by_timestamp(
        broker: Any, log_events: Any, codec: str) -> None:
    topic = f"c-{codec}"
    await in_thread(create_topic, broker.bootstrap, topic)
    # timestamps out of order within each partition: the max is not the last record's
    records = make_records(60, tag=codec)
    base = min(r.timestamp for r in records if r.timestamp)
    records = [Rec(r.partition, r.key, r.value, r.headers,
                   base + (i * 17) % 60) for i, r in enumerate(records)]
    written = await in_thread(confluent_produce, broker.bootstrap, topic, records, codec)
    assert stored_codecs(broker, topic) == {CODEC_NUMBER[codec]}
    read = await in_thread(confluent_consume, broker.bootstrap, topic, len(records))
    assert_round_trip(written, read)
    # ListOffsets by timestamp: the first offset whose record timestamp is at or after it
    for partition in range(3):
        mine = [r for r in written if r.partition == partition]
        targets = [base, base + 20, base + 41, base + 1000]
        want = [min((r.offset for r in mine if r.timestamp >= t), default=-1)
                for t in targets]
        assert await in_thread(offsets_for_times, broker.bootstrap, topic, partition,
                               targets) == want
    assert not log_events.events("request_failed")


def aiokafka_produce(bootstrap: str, topic: str, records: list[Rec], codec: str) -> list[int]:
    from aiokafka import AIOKafkaProducer

    async def run() -> list[int]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type=codec,
                                    request_timeout_ms=int(TIMEOUT * 1000))
        await asyncio.wait_for(producer.start(), TIMEOUT)
        try:
            futures = [await producer.send(topic, key=r.key, value=r.value,
                                           partition=r.partition, timestamp_ms=r.timestamp,
                                           headers=list(r.headers)) for r in records]
            return [(await asyncio.wait_for(f, TIMEOUT)).offset for f in futures]
        finally:
            await producer.stop()

    return asyncio.run(run())


def kafka_python_produce(bootstrap: str, topic: str, records: list[Rec], codec: str
                         ) -> list[int]:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type=codec)
    try:
        futures = [producer.send(topic, key=r.key, value=r.value, partition=r.partition,
                                 timestamp_ms=r.timestamp, headers=list(r.headers))
                   for r in records]
        return [f.get(timeout=TIMEOUT).offset for f in futures]
    finally:
        producer.close(TIMEOUT)


# kafka-python's codec libraries (python-snappy, lz4, zstandard) are test dependencies.
CLIENT_CODECS = [pytest.param(client, codec, id=f"{client}-{codec}")
                 for client in ("aiokafka", "kafka-python") for codec in CODECS]


@pytest.mark.parametrize(("client", "codec"), CLIENT_CODECS)
async def test_python_clients_write_every_codec(broker: Any, client: str, codec: str) -> None:
    produce = aiokafka_produce if client == "aiokafka" else kafka_python_produce
    topic = f"{client}-{codec}"
    await in_thread(create_topic, broker.bootstrap, topic)
    records = make_records(30, tag=codec)
    offsets = await in_thread(produce, broker.bootstrap, topic, records, codec)
    stored = stored_codecs(broker, topic)
    if client == "kafka-python":
        # kafka-python sends a batch uncompressed when the codec does not make it smaller
        # (DefaultRecordBatchBuilder._maybe_compress); some batches must still use the codec.
        assert CODEC_NUMBER[codec] in stored and stored <= {0, CODEC_NUMBER[codec]}, stored
    else:
        assert stored == {CODEC_NUMBER[codec]}
    written = [Rec(r.partition, r.key, r.value, r.headers, r.timestamp, o)
               for r, o in zip(records, offsets, strict=True)]
    read = await in_thread(confluent_consume, broker.bootstrap, topic, len(records))
    assert_round_trip(written, read)


def test_a_compacted_topic_of_zstd_batches_is_compacted(broker_process: Any) -> None:
    process = broker_process({"log.cleaner.backoff.ms": "200"})
    bootstrap = process.bootstrap
    create_compacted(bootstrap, "z", {
        "cleanup.policy": "compact", "segment.bytes": "65536", "segment.ms": "60000",
        "delete.retention.ms": "0", "min.cleanable.dirty.ratio": "0.01"})
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": "zstd",
                         "linger.ms": 20, "enable.idempotence": True})
    # a keyless record in a zstd batch is refused, as Kafka refuses it: INVALID_RECORD
    errors: list[Any] = []
    producer.produce("z", value=b"no key", on_delivery=lambda e, m: errors.append(e))
    producer.flush(TIMEOUT)
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.INVALID_RECORD
    latest, failures, delivered = delivery_record()
    for i in range(20_000):
        key = b"key-%03d" % (i % 200)
        producer.produce("z", key=key, value=b"value-%d " % i + b"x" * (i % 50),
                         on_delivery=delivered)
        if i % 5000 == 0:
            producer.poll(0)
    finish(producer, "z", delivered, failures)  # every record above is cleanable
    end = latest[b"sentinel"][0] + 1

    def cleaned() -> bool:
        done = [e for e in process.events("log_cleaned") if e["topic"] == "z"]
        return bool(done) and done[-1]["end_offset"] == end - 1

    wait_for(cleaned, "a clean of the zstd topic",
             lambda: [e for e in process.events() if e["event"].startswith("log_clean")][-3:])
    got = consume_all(bootstrap, "z", end)
    assert got == newest(latest, tombstones=True)
    removed = sum(e["records_removed"] for e in process.events("log_cleaned")
                  if e["topic"] == "z")
    assert removed >= 20_000 - 200 - 1


def test_the_plugin_records_reads_every_codec(pytester: pytest.Pytester) -> None:
    """kafka_broker.records() decompresses what confluent-kafka and aiokafka wrote."""
    pytester.makeini("[pytest]\ntrio_mode = true\n")
    pytester.makepyfile(test_inner=textwrap.dedent("""
        import asyncio

        import pytest
        from confluent_kafka import Producer

        @pytest.mark.parametrize("codec", ["snappy", "lz4", "zstd"])
        def test_confluent(kafka_broker, codec):
            kafka_broker.create_topic(codec)
            producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers,
                                 "compression.type": codec, "linger.ms": 50})
            for i in range(20):
                producer.produce(codec, key=b"k%d" % i, value=b"value %d " % i * 20,
                                 headers=[("n", str(i).encode())], timestamp=1000 + i)
            assert producer.flush(30) == 0
            stored = kafka_broker.records(codec)
            assert [(r.offset, r.key, r.value, r.timestamp, r.headers) for r in stored] == [
                (i, b"k%d" % i, b"value %d " % i * 20, 1000 + i, (("n", str(i).encode()),))
                for i in range(20)]

        @pytest.mark.parametrize("codec", ["snappy", "lz4", "zstd"])
        def test_aiokafka(kafka_broker, codec):
            from aiokafka import AIOKafkaProducer

            kafka_broker.create_topic(codec)

            async def main():
                producer = AIOKafkaProducer(bootstrap_servers=kafka_broker.bootstrap_servers,
                                            compression_type=codec, linger_ms=50)
                await producer.start()
                try:
                    batch = producer.create_batch()
                    for i in range(10):
                        batch.append(key=b"a%d" % i, value=b"v" * 100, timestamp=5000 + i)
                    await (await producer.send_batch(batch, codec, partition=0))
                finally:
                    await producer.stop()

            asyncio.run(main())
            assert [(r.key, r.timestamp) for r in kafka_broker.records(codec)] == [
                (b"a%d" % i, 5000 + i) for i in range(10)]
    """))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", str(ROOT))
        result = pytester.runpytest_subprocess("-p", "trio_broker.testing",
                                               "-p", "no:cacheprovider", timeout=150)
    result.assert_outcomes(passed=6)
