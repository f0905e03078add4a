"""DeleteRecords with an unmodified client: confluent-kafka's ``AdminClient.delete_records``,
then a consumer that sees the records from the new log start offset on."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.interop

TIMEOUT = 15.0


def delete_records_session(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("dr", num_partitions=2, replication_factor=1)],
                        request_timeout=TIMEOUT)["dr"].result(timeout=TIMEOUT)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(10):
        producer.produce("dr", value=b"v%d" % i, partition=0)
        producer.flush(TIMEOUT)  # one batch per record: a start offset inside none of them
    assert len(producer) == 0

    futures = admin.delete_records([TopicPartition("dr", 0, 6)], request_timeout=TIMEOUT,
                                   operation_timeout=TIMEOUT)
    (deleted,) = [f.result(timeout=TIMEOUT) for f in futures.values()]
    assert deleted.low_watermark == 6

    low, high = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"}) \
        .get_watermark_offsets(TopicPartition("dr", 0), timeout=TIMEOUT)
    assert (low, high) == (6, 10)

    # past the high watermark: Kafka's OFFSET_OUT_OF_RANGE for that partition
    futures = admin.delete_records([TopicPartition("dr", 1, 5)], request_timeout=TIMEOUT)
    with pytest.raises(KafkaException) as failure:
        list(futures.values())[0].result(timeout=TIMEOUT)
    assert failure.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE

    # a consumer from the beginning starts at the new log start offset
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "dr-reader",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("dr", 0, OFFSET_BEGINNING)])
    got: list[tuple[int, bytes]] = []
    while len(got) < 4:
        message = consumer.poll(TIMEOUT)
        assert message is not None and message.error() is None, message
        got.append((message.offset(), message.value()))
    consumer.close()
    assert got == [(i, b"v%d" % i) for i in range(6, 10)]

    # OFFSET_END (-1): everything up to the high watermark
    futures = admin.delete_records([TopicPartition("dr", 0, OFFSET_END)],
                                   request_timeout=TIMEOUT)
    assert list(futures.values())[0].result(timeout=TIMEOUT).low_watermark == 10


async def test_confluent_delete_records(broker: Any, log_events: Any) -> None:
    with trio.fail_after(TIMEOUT * 6):
        await trio.to_thread.run_sync(delete_records_session, broker.bootstrap,
                                      abandon_on_cancel=True)
    for event in ("invalid_request", "unsupported_api", "request_failed"):
        assert log_events.events(event) == [], event
    assert log_events.events("log_start_offset_advanced", topic="dr", log_start_offset=6)
