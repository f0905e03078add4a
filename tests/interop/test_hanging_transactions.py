"""A hanging transaction made for real and ended with ``trio_broker transactions`` (KIP-664):
a transactional producer's batch written, the broker killed -9 and its ``__transaction_state``
removed (the record a power loss can lose), then find-hanging lists it, abort ends it and a
read_committed confluent-kafka consumer reads past it."""

from __future__ import annotations

import io
import json
import shutil
from typing import Any

import pytest
import trio
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode as E

from tests.kafka_wire import WireClient
from tests.server.test_transaction_frames import add_partitions, init_pid, produce, txn_batch
from trio_broker.tools import transactions

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]


def cli(broker: Any, *args: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = transactions.main(["--bootstrap-server", broker.bootstrap, *args], out=out, err=err)
    return code, out.getvalue() + err.getvalue()


def committed_values(bootstrap: str, seconds: float) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader",
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                         "enable.auto.commit": False})
    consumer.subscribe(["t"])
    values = []
    try:
        for _ in range(int(seconds * 2)):
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    return values


def test_find_hanging_and_abort_a_lost_transaction(broker_process: Any) -> None:
    broker = broker_process()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("t", 1, 1)])["t"].result(10)

    async def open_transaction() -> tuple[int, int]:
        client = await WireClient.connect(broker.port)
        try:
            init = await init_pid(client, "lost")
            pid, epoch = int(init.producer_id), int(init.producer_epoch)
            assert await add_partitions(client, "lost", pid, epoch, {"t": [0]}) == {
                ("t", 0): E.none}
            answer = await produce(client, "lost", "t", 0, txn_batch(pid, epoch, 0, b"a", b"b"))
            assert answer.error_code is E.none
            return pid, epoch
        finally:
            await client.aclose()

    pid, epoch = trio.run(open_transaction)
    broker.kill()
    lost = sorted(broker.data_dir.rglob("__transaction_state-*"))
    assert lost
    for path in lost:
        shutil.rmtree(path)
    broker.restart()

    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce("t", b"after")
    assert producer.flush(10) == 0
    # The LSO is held at the open transaction's first offset: nothing is readable.
    assert committed_values(broker.bootstrap, 3) == []

    code, out = cli(broker, "list")
    assert code == 0 and "lost" not in out, out
    code, out = cli(broker, "--output", "json", "find-hanging", "--topic", "t",
                    "--max-transaction-timeout", "0")
    assert code == 0, out
    [hanging] = json.loads(out)
    assert (hanging["topic"], hanging["partition"], hanging["producer_id"],
            hanging["producer_epoch"], hanging["current_transaction_start_offset"]) == (
        "t", 0, pid, epoch, 0)
    code, out = cli(broker, "find-hanging", "--broker-id", "1", "--max-transaction-timeout", "0")
    header, row = out.splitlines()
    assert code == 0 and header.split("\t")[:3] == ["Topic", "Partition", "ProducerId"], out
    assert row.split()[:3] == ["t", "0", str(pid)], out
    code, out = cli(broker, "find-hanging", "--topic", "t")  # 15 minutes not over yet
    assert (code, out.split()) == (0, ["Topic", "Partition", "ProducerId", "ProducerEpoch",
                                       "CoordinatorEpoch", "StartOffset", "LastTimestamp",
                                       "Duration(min)"])
    code, out = cli(broker, "find-hanging")
    assert code == 2 and "requires either --topic or --broker-id" in out, out

    code, out = cli(broker, "abort", "--topic", "t", "--partition", "0", "--start-offset", "0")
    assert code == 0, out
    code, out = cli(broker, "--output", "json", "find-hanging", "--topic", "t",
                    "--max-transaction-timeout", "0")
    assert (code, json.loads(out)) == (0, [])
    code, out = cli(broker, "describe-producers", "--topic", "t", "--partition", "0")
    assert code == 0 and out.splitlines()[0].split()[0] == "ProducerId", out
    assert out.splitlines()[1].split()[-1] == "None", out  # no open transaction any more
    assert committed_values(broker.bootstrap, 10)[:1] == [b"after"]
    # Aborting again finds no open transaction at that offset.
    code, out = cli(broker, "abort", "--topic", "t", "--partition", "0", "--start-offset", "0")
    assert code == 1 and "Could not find" in out, out
