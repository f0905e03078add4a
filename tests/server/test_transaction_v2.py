"""Transaction version 2 (KIP-890 part 2, Kafka 4.0) over a real socket to the in-process
broker, with raw frames as a Kafka 4.x producer sends them once ApiVersions shows
``transaction.version`` 2: Produce v12 adds its partition to the transaction (no
AddPartitionsToTxn), TxnOffsetCommit v5 adds the group's offsets partition (no
AddOffsetsToTxn), and EndTxn v5 bumps the epoch per transaction, so the markers carry the new
epoch and a late write of the ended transaction is fenced. The state survives a restart.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from kio.schema.errors import ErrorCode as E

from tests.kafka_wire import WireClient
from tests.server.test_kip890_versions import txn_offset_commit
from tests.server.test_transaction_frames import (
    END_TXN,
    FETCH,
    PRODUCE,
    init_pid,
    mod,
    offset_fetch,
    txn_batch,
)
from trio_broker.coordinator.transaction.state import TxnState
from trio_broker.protocol import records as rb

pytestmark = pytest.mark.timeout(30)


async def produce(client: WireClient, version: int, pid: int, epoch: int, seq: int,
                  partition: int = 0, *values: bytes) -> Any:
    m = mod(PRODUCE, version)
    answer = await client.request(PRODUCE, version, m.ProduceRequest(
        transactional_id="tx", acks=-1, timeout=datetime.timedelta(seconds=5),
        topic_data=(m.TopicProduceData(name="t", partition_data=(
            m.PartitionProduceData(index=partition, records=txn_batch(
                pid, epoch, seq, *(values or (b"v",)))),)),)))
    return answer.responses[0].partition_responses[0].error_code


async def end_txn(client: WireClient, pid: int, epoch: int, commit: bool
                  ) -> tuple[Any, int, int]:
    m = mod(END_TXN, 5)
    answer = await client.request(END_TXN, 5, m.EndTxnRequest(
        transactional_id="tx", producer_id=pid, producer_epoch=epoch, committed=commit))
    return answer.error_code, int(answer.producer_id), int(answer.producer_epoch)


async def batches(client: WireClient) -> list[tuple[int, bool, int]]:
    """``(base offset, is control, producer epoch)`` of each batch of t-0, read_committed."""
    m = mod(FETCH, 12)
    answer = await client.request(FETCH, 12, m.FetchRequest(
        max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 20, isolation_level=1,
        session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=(),
        topics=(m.FetchTopic(topic="t", partitions=(m.FetchPartition(
            partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=1 << 20),)),)))
    view = memoryview(answer.responses[0].partitions[0].records or b"")
    found = []
    for position, size in rb.iter_batches(view):
        header = rb.decode_header(view[position:position + size])
        found.append((header.base_offset, header.is_control, header.producer_epoch))
    return found


async def test_a_transaction_of_version_2_from_produce_to_epoch_bump(start_broker: Any,
                                                                     tmp_path: Any) -> None:
    data = str(tmp_path / "kept")
    running = await start_broker(**{"log.dirs": data})
    running.broker.log_manager.create_topic("t", 2)
    coordinator = running.broker.transaction_coordinator
    client = await WireClient.connect(running.port)
    try:
        init = await init_pid(client, "tx")
        pid, epoch = int(init.producer_id), int(init.producer_epoch)
        # Produce v12 opens the transaction with its partition; v11 and older still refuse a
        # partition that is not in it (TRANSACTION_ABORTABLE from v11, INVALID_TXN_STATE below).
        assert await produce(client, 12, pid, epoch, 0, 0, b"a", b"b") is E.none
        assert coordinator.transactions["tx"].state is TxnState.ONGOING
        assert coordinator.transactions["tx"].partitions == {("t", 0)}
        assert await produce(client, 11, pid, epoch, 0, 1) is E.transaction_abortable
        assert await produce(client, 10, pid, epoch, 0, 1) is E.invalid_txn_state
        # TxnOffsetCommit v5 adds __consumer_offsets' partition of the group itself.
        assert await txn_offset_commit(client, pid, epoch, 2, version=5) == [("t", 0, E.none)]
        assert len(coordinator.transactions["tx"].partitions) == 2

        # The commit bumps the epoch and answers it; a retry with the old epoch gets the same.
        assert await end_txn(client, pid, epoch, True) == (E.none, pid, epoch + 1)
        assert await end_txn(client, pid, epoch, True) == (E.none, pid, epoch + 1)
        assert await end_txn(client, pid, epoch, False) == (E.invalid_txn_state, -1, -1)
        assert await batches(client) == [(0, False, epoch), (2, True, epoch + 1)]
        assert await offset_fetch(client, True) == (E.none, 2)
        # A late write of the ended transaction: fenced by its epoch, never re-opening one.
        assert await produce(client, 12, pid, epoch, 1, 0) is E.invalid_producer_epoch
        assert coordinator.transactions["tx"].state is TxnState.COMPLETE_COMMIT

        # The next transaction at the new epoch starts its sequence at 0, then aborts.
        assert await produce(client, 12, pid, epoch + 1, 0, 0) is E.none
        assert await end_txn(client, pid, epoch + 1, False) == (E.none, pid, epoch + 2)
        # An abort with nothing open still moves the epoch on; a commit is refused.
        assert await end_txn(client, pid, epoch + 2, False) == (E.none, pid, epoch + 3)
        assert await end_txn(client, pid, epoch + 3, True) == (E.invalid_txn_state, -1, -1)
        assert await end_txn(client, pid, epoch + 2, False) == (E.none, pid, epoch + 3)
        assert await end_txn(client, pid, epoch + 1, False) == (E.producer_fenced, -1, -1)
        # The aborted batch and its marker (a fetch returns both; aborted_transactions tells the
        # consumer to skip); the empty abort marked no partition.
        assert await batches(client) == [(0, False, epoch), (2, True, epoch + 1),
                                         (3, False, epoch + 1), (4, True, epoch + 2)]
    finally:
        await client.aclose()
    await running.shutdown()

    again = await start_broker(**{"log.dirs": data})
    kept = again.broker.transaction_coordinator.transactions["tx"]
    assert (kept.producer_id, kept.producer_epoch, kept.state) == (
        pid, epoch + 3, TxnState.COMPLETE_ABORT)
    assert kept.client_transaction_version == 2
    client = await WireClient.connect(again.port)
    try:
        assert await produce(client, 12, pid, epoch + 3, 0, 1) is E.none
        assert await end_txn(client, pid, epoch + 3, True) == (E.none, pid, epoch + 4)
    finally:
        await client.aclose()
