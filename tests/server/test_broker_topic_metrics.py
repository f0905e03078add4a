"""Kafka's BrokerTopicMetrics and the log size, scraped from the Prometheus endpoint after real
produce and fetch traffic: exact requests over the wire, and a confluent-kafka round trip."""

from __future__ import annotations

from typing import Any

import trio
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from prometheus_client.parser import text_string_to_metric_families

from tests.kafka_wire import WireClient
from tests.server.test_produce_fetch import batch, fetch_body, produce_body

PRODUCE, FETCH, CREATE_TOPICS = 0, 1, 19
METRICS = {"metrics.prometheus.listener": "127.0.0.1:0"}
PREFIX = "kafka_server_brokertopicmetrics_"
CLIENT_TIMEOUT = 20.0


async def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of ``GET /metrics``: ``{(name, labels): value}``."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        response = b""
        while chunk := await stream.receive_some(65536):
            response += chunk
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK")
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(body.decode())
            for s in family.samples}


def topic_value(samples: Any, metric: str, topic: str | None) -> float | None:
    labels = frozenset() if topic is None else frozenset({("topic", topic)})
    return samples.get((PREFIX + metric + "_total", labels))


def log_size(samples: Any, topic: str, partition: int) -> float | None:
    return samples.get(("kafka_log_log_size",
                        frozenset({("topic", topic), ("partition", str(partition))})))


async def test_produce_and_fetch_are_counted_per_topic_and_for_all(start_broker: Any) -> None:
    running = await start_broker(METRICS)
    lm = running.broker.log_manager
    lm.create_topic("a", 2)
    lm.create_topic("b", 1)
    client = await WireClient.connect(running.port)
    a0, a1, b0 = batch(b"x" * 100, b"y" * 50), batch(b"z" * 10), batch(b"q", b"r", b"s")
    answer = await client.request(PRODUCE, 9, produce_body(
        9, {("a", 0): a0, ("a", 1): a1, ("b", 0): b0, ("nope", 0): batch(b"n")}))
    codes = {(t.name, p.index): p.error_code for t in answer.responses
             for p in t.partition_responses}
    assert codes == {("a", 0): ErrorCode.none, ("a", 1): ErrorCode.none,
                     ("b", 0): ErrorCode.none, ("nope", 0): ErrorCode.unknown_topic_or_partition}
    # A second produce to a, partition 0; then a request without records (INVALID_RECORD:
    # a validation failure, which Kafka counts as a failed produce request).
    await client.request(PRODUCE, 9, produce_body(9, {("a", 0): batch(b"w")}))
    failed = await client.request(PRODUCE, 9, produce_body(9, {("a", 1): None}))
    assert failed.responses[0].partition_responses[0].error_code is ErrorCode.invalid_record
    # Fetch everything of a; partition 1 from an offset past its end (OFFSET_OUT_OF_RANGE, an
    # error Kafka expects: counted as a fetch request, not as a failed one).
    fetched = await client.request(FETCH, 12, fetch_body(12, {("a", 0): 0, ("a", 1): 99}))
    parts = {p.partition_index: p for t in fetched.responses for p in t.partitions}
    assert parts[1].error_code is ErrorCode.offset_out_of_range
    sent_a = len(parts[0].records)
    assert sent_a > 0

    samples = await scrape(running.app.metrics_port)
    second_a0 = len(batch(b"w"))
    expected = {
        "a": {"bytesin": len(a0) + len(a1) + second_a0, "messagesin": 4,
              "totalproducerequests": 4, "failedproducerequests": 1, "bytesout": sent_a,
              "totalfetchrequests": 2, "failedfetchrequests": 0},
        "b": {"bytesin": len(b0), "messagesin": 3, "totalproducerequests": 1,
              "failedproducerequests": 0, "bytesout": 0, "totalfetchrequests": 0,
              "failedfetchrequests": 0},
    }
    for topic, metrics in expected.items():
        for metric, value in metrics.items():
            assert topic_value(samples, metric, topic) == value, (topic, metric)
    for metric in expected["a"]:
        assert topic_value(samples, metric, None) == sum(m[metric] for m in expected.values())
    # A topic this broker does not host gets no series (a client's typo is no metric).
    assert topic_value(samples, "totalproducerequests", "nope") is None
    # The log size is what was appended (offsets are rewritten in place, sizes kept).
    assert log_size(samples, "a", 0) == len(a0) + second_a0
    assert log_size(samples, "a", 1) == len(a1)
    assert log_size(samples, "b", 0) == len(b0)
    assert log_size(samples, "a", 0) == len(parts[0].records)


async def test_deleted_topic_loses_its_series(start_broker: Any) -> None:
    running = await start_broker(METRICS)
    running.broker.log_manager.create_topic("gone", 1)
    client = await WireClient.connect(running.port)
    await client.request(PRODUCE, 9, produce_body(9, {("gone", 0): batch(b"v")}))
    assert topic_value(await scrape(running.app.metrics_port), "messagesin", "gone") == 1

    def delete() -> None:
        admin = AdminClient({"bootstrap.servers": running.bootstrap})
        admin.delete_topics(["gone"], request_timeout=CLIENT_TIMEOUT)["gone"].result(
            timeout=CLIENT_TIMEOUT)

    with trio.fail_after(CLIENT_TIMEOUT * 2):
        await trio.to_thread.run_sync(delete, abandon_on_cancel=True)
    samples = await scrape(running.app.metrics_port)
    assert topic_value(samples, "messagesin", "gone") is None
    assert topic_value(samples, "messagesin", None) == 1  # all-topics totals stay
    assert log_size(samples, "gone", 0) is None


async def test_confluent_round_trip_matches_the_log(start_broker: Any) -> None:
    """librdkafka batches as it likes: BytesIn must equal the log size, BytesOut what the
    consumer was sent (here: the whole log, read once), MessagesIn the records acknowledged."""
    running = await start_broker(METRICS)
    bootstrap = running.bootstrap
    count = 500

    def round_trip() -> int:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("rt", num_partitions=2, replication_factor=1)],
                            request_timeout=CLIENT_TIMEOUT)["rt"].result(timeout=CLIENT_TIMEOUT)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                             "message.timeout.ms": int(CLIENT_TIMEOUT * 1000)})
        acked = [0]

        def report(error: Any, _message: Any) -> None:
            acked[0] += error is None

        for i in range(count):
            producer.produce("rt", f"value-{i}".encode() * 20, partition=i % 2,
                             on_delivery=report)
        assert producer.flush(CLIENT_TIMEOUT) == 0
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "metrics-test",
                             "enable.auto.commit": False})
        try:
            consumer.assign([TopicPartition("rt", p, OFFSET_BEGINNING) for p in (0, 1)])
            got = 0
            while got < count:
                for message in consumer.consume(num_messages=1000, timeout=CLIENT_TIMEOUT):
                    assert message.error() is None, message.error()
                    got += 1
        finally:
            consumer.close()
        return acked[0]

    with trio.fail_after(CLIENT_TIMEOUT * 4):
        acked = await trio.to_thread.run_sync(round_trip, abandon_on_cancel=True)
    assert acked == count
    samples = await scrape(running.app.metrics_port)
    size = sum(log_size(samples, "rt", p) or 0 for p in (0, 1))
    assert size > count * 100
    assert topic_value(samples, "bytesin", "rt") == size
    assert topic_value(samples, "messagesin", "rt") == count
    assert topic_value(samples, "bytesout", "rt") == size
    assert (topic_value(samples, "totalproducerequests", "rt") or 0) >= 2
    assert (topic_value(samples, "totalfetchrequests", "rt") or 0) >= 2
    assert topic_value(samples, "failedproducerequests", "rt") == 0
    assert topic_value(samples, "failedfetchrequests", "rt") == 0
