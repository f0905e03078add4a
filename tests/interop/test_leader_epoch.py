"""Leader epochs with an unmodified client: librdkafka reads the partition leader epoch from
fetched batches, commits it with the offset, and gets it back from OffsetFetch. Batches stored
with epoch -1 (while Metadata says 0) made committed offsets come back without an epoch, so the
client skipped its truncation check. librdkafka's producer writes 0 itself, so the batches here
are produced with -1 over the raw wire client, as Java and Go producers send them."""

from __future__ import annotations

import datetime
import sys
from typing import Any

import pytest
import trio
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from tests.kafka_wire import WireClient
from trio_broker.protocol import records as rb
from trio_broker.protocol.codec import request_schema
from trio_broker.storage.log import now_ms

pytestmark = pytest.mark.interop

TIMEOUT = 15.0


def commit_session(bootstrap: str) -> tuple[list[int | None], int | None]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "epoch-group",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("epochs", 0, OFFSET_BEGINNING)])
    epochs: list[int | None] = []
    message: Any = None
    while len(epochs) < 3:
        message = consumer.poll(TIMEOUT)
        assert message is not None and message.error() is None, message
        epochs.append(message.leader_epoch())
    consumer.commit(message=message, asynchronous=False)
    (committed,) = consumer.committed([TopicPartition("epochs", 0)], timeout=TIMEOUT)
    consumer.close()
    assert committed.offset == 3
    return epochs, committed.leader_epoch


async def test_committed_offsets_carry_the_batch_leader_epoch(broker: Any) -> None:
    with trio.fail_after(TIMEOUT * 6):
        broker.broker.log_manager.create_topic("epochs", 1)
        m = sys.modules[request_schema(0, 9).__module__]
        client = await WireClient.connect(broker.port)
        for i in range(3):
            data = rb.build_batch([(None, b"%d" % i, [], now_ms())], partition_leader_epoch=-1)
            answer = await client.request(0, 9, m.ProduceRequest(
                transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5),
                topic_data=(m.TopicProduceData(name="epochs", partition_data=(
                    m.PartitionProduceData(index=0, records=data),)),)))
            assert answer.responses[0].partition_responses[0].base_offset == i
        await client.aclose()
        epochs, committed = await trio.to_thread.run_sync(
            commit_session, broker.bootstrap, abandon_on_cancel=True)
    assert epochs == [0, 0, 0]
    assert committed == 0
