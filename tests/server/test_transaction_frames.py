"""The transactional APIs over a real socket to the in-process broker, with raw frames: the
error answers Kafka gives (version-dependent PRODUCER_FENCED / INVALID_PRODUCER_EPOCH,
INVALID_PRODUCER_ID_MAPPING, INVALID_TXN_STATE, INVALID_TRANSACTION_TIMEOUT, all-or-nothing
AddPartitionsToTxn), FindCoordinator for transactions, read_committed Fetch with
``aborted_transactions``, ListOffsets answering the LSO, DescribeTransactions,
ListTransactions and DescribeProducers.
"""

from __future__ import annotations

import datetime
import sys
import time
from typing import Any

import pytest
from kio.schema.errors import ErrorCode as E

from tests.kafka_wire import WireClient
from trio_broker.protocol import records as rb
from trio_broker.protocol.codec import request_schema

pytestmark = pytest.mark.timeout(30)

PRODUCE, FETCH, LIST_OFFSETS, FIND_COORDINATOR, INIT_PID = 0, 1, 2, 10, 22
ADD_PARTITIONS, ADD_OFFSETS, END_TXN, TXN_OFFSET_COMMIT = 24, 25, 26, 28
DESCRIBE_PRODUCERS, DESCRIBE_TXNS, LIST_TXNS = 61, 65, 66


def mod(api_key: int, version: int) -> Any:
    return sys.modules[request_schema(api_key, version).__module__]


async def init_pid(client: WireClient, txn_id: str, timeout_ms: int = 60000,
                   version: int = 4) -> Any:
    m = mod(INIT_PID, version)
    return await client.request(INIT_PID, version, m.InitProducerIdRequest(
        transactional_id=txn_id, transaction_timeout=datetime.timedelta(milliseconds=timeout_ms)))


async def add_partitions(client: WireClient, txn_id: str, pid: int, epoch: int,
                         parts: dict[str, list[int]], version: int = 3) -> dict[Any, Any]:
    m = mod(ADD_PARTITIONS, version)
    answer = await client.request(ADD_PARTITIONS, version, m.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=tuple(m.AddPartitionsToTxnTopic(name=t, partitions=tuple(ps))
                                  for t, ps in parts.items())))
    return {(t.name, int(r.partition_index)): r.partition_error_code
            for t in answer.results_by_topic_v3_and_below for r in t.results_by_partition}


async def end_txn(client: WireClient, txn_id: str, pid: int, epoch: int, commit: bool,
                  version: int = 3) -> Any:
    m = mod(END_TXN, version)
    answer = await client.request(END_TXN, version, m.EndTxnRequest(
        transactional_id=txn_id, producer_id=pid, producer_epoch=epoch, committed=commit))
    return answer.error_code


async def produce(client: WireClient, txn_id: str | None, topic: str, partition: int,
                  batch: bytes) -> Any:
    m = mod(PRODUCE, 9)
    answer = await client.request(PRODUCE, 9, m.ProduceRequest(
        transactional_id=txn_id, acks=-1, timeout=datetime.timedelta(seconds=5),
        topic_data=(m.TopicProduceData(name=topic, partition_data=(
            m.PartitionProduceData(index=partition, records=batch),)),)))
    return answer.responses[0].partition_responses[0]


def txn_batch(pid: int, epoch: int, seq: int, *values: bytes) -> bytes:
    return rb.build_batch([(None, v, (), int(time.time() * 1000)) for v in values],
                          producer_id=pid,
                          producer_epoch=epoch, base_sequence=seq,
                          attributes=rb.TRANSACTIONAL_BIT)


async def fetch(client: WireClient, topic: str, isolation: int) -> Any:
    m = mod(FETCH, 12)
    answer = await client.request(FETCH, 12, m.FetchRequest(
        max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 20,
        isolation_level=isolation, session_id=0, session_epoch=-1, rack_id="",
        forgotten_topics_data=(), topics=(m.FetchTopic(topic=topic, partitions=(
            m.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0,
                             last_fetched_epoch=-1, log_start_offset=-1,
                             partition_max_bytes=1 << 20),)),)))
    return answer.responses[0].partitions[0]


async def list_latest(client: WireClient, topic: str, isolation: int) -> int:
    m = mod(LIST_OFFSETS, 7)
    answer = await client.request(LIST_OFFSETS, 7, m.ListOffsetsRequest(
        replica_id=-1, isolation_level=isolation, topics=(m.ListOffsetsTopic(
            name=topic, partitions=(m.ListOffsetsPartition(
                partition_index=0, current_leader_epoch=-1, timestamp=-1),)),)))
    return int(answer.topics[0].partitions[0].offset)


def offsets_of(records: bytes) -> list[tuple[int, int, bool]]:
    """``(base_offset, last_offset, is_control)`` of each batch."""
    view = memoryview(records)
    out = []
    for position, size in rb.iter_batches(view):
        header = rb.decode_header(view[position:position + size])
        out.append((header.base_offset, header.last_offset, header.is_control))
    return out


async def test_transaction_errors_as_kafka_answers(broker: Any) -> None:
    broker.broker.log_manager.create_topic("t", 2)
    client = await WireClient.connect(broker.port)
    try:
        m = mod(FIND_COORDINATOR, 4)
        found = await client.request(FIND_COORDINATOR, 4, m.FindCoordinatorRequest(
            key_type=1, coordinator_keys=("tx",)))
        assert [(c.error_code, c.port) for c in found.coordinators] == [(E.none, broker.port)]
        assert (await init_pid(client, "tx", 900_001)).error_code \
            is E.invalid_transaction_timeout
        first = await init_pid(client, "tx")
        assert first.error_code is E.none and first.producer_epoch == 0
        pid = int(first.producer_id)
        assert await end_txn(client, "tx", pid, 0, True) is E.invalid_txn_state
        assert await end_txn(client, "tx", pid + 1, 0, True) is E.invalid_producer_id_mapping
        # Unknown partitions: nothing is added, the rest OPERATION_NOT_ATTEMPTED.
        assert await add_partitions(client, "tx", pid, 0, {"t": [0], "nope": [0]}) == {
            ("t", 0): E.operation_not_attempted, ("nope", 0): E.unknown_topic_or_partition}
        assert await add_partitions(client, "tx", pid, 0, {"t": [0, 1]}) == {
            ("t", 0): E.none, ("t", 1): E.none}
        # The same producer re-initialising fences its own open transaction: retriable.
        assert (await init_pid(client, "tx")).error_code is E.concurrent_transactions
        again = await init_pid(client, "tx")
        assert (again.error_code, again.producer_epoch) == (E.none, 2)
        # The fenced epoch: PRODUCER_FENCED from v2 on, INVALID_PRODUCER_EPOCH before (KIP-588).
        assert await end_txn(client, "tx", pid, 0, True, version=3) is E.producer_fenced
        assert await end_txn(client, "tx", pid, 0, True, version=1) is E.invalid_producer_epoch
        assert await add_partitions(client, "tx", pid, 0, {"t": [0]}, version=1) == {
            ("t", 0): E.invalid_producer_epoch}
        m = mod(ADD_OFFSETS, 3)
        answer = await client.request(ADD_OFFSETS, 3, m.AddOffsetsToTxnRequest(
            transactional_id="tx", producer_id=pid, producer_epoch=0, group_id="g"))
        assert answer.error_code is E.producer_fenced
        m = mod(TXN_OFFSET_COMMIT, 3)
        answer = await client.request(TXN_OFFSET_COMMIT, 3, m.TxnOffsetCommitRequest(
            transactional_id="tx", group_id="g", producer_id=pid, producer_epoch=2,
            generation_id=-1, member_id="", group_instance_id=None,
            topics=(m.TxnOffsetCommitRequestTopic(name="t", partitions=(
                m.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=1,
                                                  committed_leader_epoch=-1,
                                                  committed_metadata=""),)),)))
        # No AddOffsetsToTxn for the group in this transaction.
        assert answer.topics[0].partitions[0].error_code is E.invalid_txn_state
    finally:
        await client.aclose()


async def test_read_committed_fetch_list_offsets_and_describe(broker: Any) -> None:
    broker.broker.log_manager.create_topic("t", 1)
    client = await WireClient.connect(broker.port)
    try:
        init = await init_pid(client, "tx")
        pid, epoch = int(init.producer_id), int(init.producer_epoch)
        # KIP-890 part 1: not added to the transaction yet, so refused (no hanging transaction).
        refused = await produce(client, "tx", "t", 0, txn_batch(pid, epoch, 0, b"early"))
        assert refused.error_code is E.invalid_txn_state
        assert (await produce(client, "tx", "t", 0, txn_batch(pid + 1, epoch, 0, b"x"))
                ).error_code is E.invalid_producer_id_mapping
        # Aborted: offsets 0-1 and the marker at 2.
        assert await add_partitions(client, "tx", pid, epoch, {"t": [0]}) == {("t", 0): E.none}
        assert (await produce(client, "tx", "t", 0, txn_batch(pid, epoch, 0, b"a", b"b"))
                ).error_code is E.none
        assert await end_txn(client, "tx", pid, epoch, False) is E.none
        # Committed: offset 3 and the marker at 4. Then an open one at 5.
        assert await add_partitions(client, "tx", pid, epoch, {"t": [0]}) == {("t", 0): E.none}
        await produce(client, "tx", "t", 0, txn_batch(pid, epoch, 2, b"c"))
        assert await end_txn(client, "tx", pid, epoch, True) is E.none
        assert await add_partitions(client, "tx", pid, epoch, {"t": [0]}) == {("t", 0): E.none}
        await produce(client, "tx", "t", 0, txn_batch(pid, epoch, 3, b"open"))

        committed = await fetch(client, "t", 1)
        assert (committed.high_watermark, committed.last_stable_offset) == (6, 5)
        assert offsets_of(committed.records) == [(0, 1, False), (2, 2, True), (3, 3, False),
                                                 (4, 4, True)]
        assert [(int(a.producer_id), int(a.first_offset))
                for a in committed.aborted_transactions] == [(pid, 0)]
        uncommitted = await fetch(client, "t", 0)
        assert offsets_of(uncommitted.records)[-1] == (5, 5, False)
        assert uncommitted.aborted_transactions is None
        assert await list_latest(client, "t", 1) == 5
        assert await list_latest(client, "t", 0) == 6

        m = mod(DESCRIBE_TXNS, 0)
        described = await client.request(DESCRIBE_TXNS, 0, m.DescribeTransactionsRequest(
            transactional_ids=("tx", "nope")))
        state, missing = described.transaction_states
        assert (state.error_code, state.transaction_state, int(state.producer_id)) == (
            E.none, "Ongoing", pid)
        assert [(t.topic, tuple(t.partitions)) for t in state.topics] == [("t", (0,))]
        assert missing.error_code is E.transactional_id_not_found
        m = mod(LIST_TXNS, 1)
        listed = await client.request(LIST_TXNS, 1, m.ListTransactionsRequest(
            state_filters=("Ongoing", "Bogus"), producer_id_filters=(), duration_filter=-1))
        assert [(t.transactional_id, t.transaction_state) for t in listed.transaction_states
                ] == [("tx", "Ongoing")]
        assert tuple(listed.unknown_state_filters) == ("Bogus",)
        m = mod(DESCRIBE_PRODUCERS, 0)
        producers = await client.request(DESCRIBE_PRODUCERS, 0, m.DescribeProducersRequest(
            topics=(m.TopicRequest(name="t", partition_indexes=(0,)),)))
        [active] = producers.topics[0].partitions[0].active_producers
        assert (int(active.producer_id), int(active.current_txn_start_offset)) == (pid, 5)
    finally:
        await client.aclose()


async def test_transaction_states_are_a_metric(start_broker: Any) -> None:
    from tests.server.test_broker_topic_metrics import scrape

    running = await start_broker({"metrics.prometheus.listener": "127.0.0.1:0"})
    running.broker.log_manager.create_topic("t", 1)
    client = await WireClient.connect(running.port)
    try:
        for txn_id in ("a", "b"):
            init = await init_pid(client, txn_id)
            assert init.error_code is E.none
        pid, epoch = int(init.producer_id), int(init.producer_epoch)
        assert await add_partitions(client, "b", pid, epoch, {"t": [0]}) == {("t", 0): E.none}
    finally:
        await client.aclose()
    samples = await scrape(running.app.metrics_port)
    name = "kafka_coordinator_transaction_transactions"
    assert samples[(name, frozenset({("state", "Empty")}))] == 1
    assert samples[(name, frozenset({("state", "Ongoing")}))] == 1


async def offset_fetch(client: WireClient, require_stable: bool, topic: str = "t"
                       ) -> tuple[Any, int]:
    """Group ``g``'s committed offset of ``topic`` partition 0: ``(error, offset)``."""
    m = mod(9, 8)
    answer = await client.request(9, 8, m.OffsetFetchRequest(
        require_stable=require_stable, groups=(m.OffsetFetchRequestGroup(
            group_id="g", topics=(m.OffsetFetchRequestTopics(
                name=topic, partition_indexes=(0,)),)),)))
    part = answer.groups[0].topics[0].partitions[0]
    return part.error_code, int(part.committed_offset)


async def txn_offset_commit(client: WireClient, *topics: str) -> tuple[int, int]:
    """A transaction of producer ``tx`` holding offset 5 of partition 0 of each of ``topics``
    for group ``g``, not yet ended: ``(producer id, epoch)``."""
    init = await init_pid(client, "tx")
    pid, epoch = int(init.producer_id), int(init.producer_epoch)
    m = mod(ADD_OFFSETS, 3)
    assert (await client.request(ADD_OFFSETS, 3, m.AddOffsetsToTxnRequest(
        transactional_id="tx", producer_id=pid, producer_epoch=epoch, group_id="g"))
            ).error_code is E.none
    m = mod(TXN_OFFSET_COMMIT, 3)
    answer = await client.request(TXN_OFFSET_COMMIT, 3, m.TxnOffsetCommitRequest(
        transactional_id="tx", group_id="g", producer_id=pid, producer_epoch=epoch,
        generation_id=-1, member_id="", group_instance_id=None,
        topics=tuple(m.TxnOffsetCommitRequestTopic(name=topic, partitions=(
            m.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=5,
                                              committed_leader_epoch=-1,
                                              committed_metadata=""),)) for topic in topics)))
    assert all(t.partitions[0].error_code is E.none for t in answer.topics)
    return pid, epoch


async def test_pending_transactional_offsets_are_unstable_for_require_stable(broker: Any
                                                                             ) -> None:
    broker.broker.log_manager.create_topic("t", 1)
    client = await WireClient.connect(broker.port)
    try:
        pid, epoch = await txn_offset_commit(client, "t")
        assert await offset_fetch(client, True) == (E.unstable_offset_commit, -1)
        # not visible before the commit
        assert await offset_fetch(client, False) == (E.none, -1)
        assert await end_txn(client, "tx", pid, epoch, True) is E.none
        assert await offset_fetch(client, True) == (E.none, 5)
    finally:
        await client.aclose()


async def test_pending_offsets_of_a_deleted_topic_are_dropped(broker: Any) -> None:
    """Kafka's onPartitionsDeleted drops pending transactional commits of a deleted topic too:
    require_stable no longer waits on them, and the commit stores none for the topic (a topic
    created again under the name would have resumed from them)."""
    import uuid

    lm = broker.broker.log_manager
    lm.create_topic("t", 1)
    lm.create_topic("kept", 1)
    client = await WireClient.connect(broker.port)
    try:
        pid, epoch = await txn_offset_commit(client, "t", "kept")
        m = mod(20, 6)
        deleted = await client.request(20, 6, m.DeleteTopicsRequest(
            timeout=datetime.timedelta(seconds=30),
            topics=(m.DeleteTopicState(name="t", topic_id=uuid.UUID(int=0)),)))
        assert deleted.responses[0].error_code is E.none
        assert await offset_fetch(client, True) == (E.none, -1)
        assert await offset_fetch(client, True, "kept") == (E.unstable_offset_commit, -1)
        assert await end_txn(client, "tx", pid, epoch, True) is E.none
        lm.create_topic("t", 1)
        assert await offset_fetch(client, True) == (E.none, -1)
        assert await offset_fetch(client, True, "kept") == (E.none, 5)
    finally:
        await client.aclose()


async def test_txn_offset_commit_fences_a_generation_of_a_missing_group(broker: Any) -> None:
    """Kafka's validateTransactionalOffsetCommit: a producer naming a generation of a group
    that does not exist is a zombie (ILLEGAL_GENERATION); generation -1 is a simple commit."""
    broker.broker.log_manager.create_topic("t", 1)
    client = await WireClient.connect(broker.port)
    try:
        init = await init_pid(client, "tx")
        pid = int(init.producer_id)
        m = mod(ADD_OFFSETS, 3)
        answer = await client.request(ADD_OFFSETS, 3, m.AddOffsetsToTxnRequest(
            transactional_id="tx", producer_id=pid, producer_epoch=0, group_id="gone"))
        assert answer.error_code is E.none
        m = mod(TXN_OFFSET_COMMIT, 3)

        async def commit(generation: int, member: str) -> Any:
            answer = await client.request(TXN_OFFSET_COMMIT, 3, m.TxnOffsetCommitRequest(
                transactional_id="tx", group_id="gone", producer_id=pid, producer_epoch=0,
                generation_id=generation, member_id=member, group_instance_id=None,
                topics=(m.TxnOffsetCommitRequestTopic(name="t", partitions=(
                    m.TxnOffsetCommitRequestPartition(
                        partition_index=0, committed_offset=1, committed_leader_epoch=-1,
                        committed_metadata=""),)),)))
            return answer.topics[0].partitions[0].error_code

        assert await commit(3, "ghost") is E.illegal_generation
        assert await commit(-1, "ghost") is E.none
        assert await commit(-1, "") is E.none
        assert await end_txn(client, "tx", pid, 0, True) is E.none
    finally:
        await client.aclose()


async def test_transactional_produce_with_a_future_epoch_is_fenced(broker: Any) -> None:
    """KIP-890 verification wants the coordinator's epoch exactly: a batch with a newer one
    (never handed out) is INVALID_PRODUCER_EPOCH instead of fencing the real producer."""
    broker.broker.log_manager.create_topic("t", 1)
    client = await WireClient.connect(broker.port)
    try:
        init = await init_pid(client, "tx")
        pid, epoch = int(init.producer_id), int(init.producer_epoch)
        assert await add_partitions(client, "tx", pid, epoch, {"t": [0]}) == {("t", 0): E.none}
        forged = await produce(client, "tx", "t", 0, txn_batch(pid, epoch + 3, 0, b"forged"))
        assert forged.error_code is E.invalid_producer_epoch
        real = await produce(client, "tx", "t", 0, txn_batch(pid, epoch, 0, b"real"))
        assert real.error_code is E.none
        assert await end_txn(client, "tx", pid, epoch, True) is E.none
        assert [b[2] for b in offsets_of((await fetch(client, "t", 1)).records)] == [False, True]
    finally:
        await client.aclose()


WRITE_TXN_MARKERS = 27


async def write_markers(client: WireClient, pid: int, epoch: int, commit: bool,
                        parts: dict[str, list[int]], version: int = 1) -> dict[Any, Any]:
    m = mod(WRITE_TXN_MARKERS, version)
    answer = await client.request(WRITE_TXN_MARKERS, version, m.WriteTxnMarkersRequest(
        markers=(m.WritableTxnMarker(
            producer_id=pid, producer_epoch=epoch, transaction_result=commit,
            coordinator_epoch=0, topics=tuple(
                m.WritableTxnMarkerTopic(name=t, partition_indexes=tuple(ps))
                for t, ps in parts.items())),)))
    [marker] = answer.markers
    assert int(marker.producer_id) == pid
    return {(t.name, int(p.partition_index)): p.error_code
            for t in marker.topics for p in t.partitions}


async def test_write_txn_markers_ends_an_open_transaction(broker: Any) -> None:
    """The operator's abort (KIP-664): the marker closes the open transaction, the LSO moves
    to the high watermark and read_committed sees it as aborted; unknown partitions and a
    stale epoch are refused as Kafka refuses them."""
    broker.broker.log_manager.create_topic("t", 1)
    client = await WireClient.connect(broker.port)
    try:
        init = await init_pid(client, "hang")
        pid, epoch = int(init.producer_id), int(init.producer_epoch)
        assert await add_partitions(client, "hang", pid, epoch, {"t": [0]}) == {("t", 0): E.none}
        await produce(client, "hang", "t", 0, txn_batch(pid, epoch, 0, b"a", b"b"))
        before = await fetch(client, "t", 1)
        assert (before.high_watermark, before.last_stable_offset) == (2, 0)

        assert await write_markers(client, pid, epoch + 1, False,
                                   {"t": [0, 7], "nope": [0]}) == {
            ("t", 0): E.none, ("t", 7): E.unknown_topic_or_partition,
            ("nope", 0): E.unknown_topic_or_partition}
        after = await fetch(client, "t", 1)
        assert (after.high_watermark, after.last_stable_offset) == (3, 3)
        assert offsets_of(after.records) == [(0, 1, False), (2, 2, True)]
        assert [(int(a.producer_id), int(a.first_offset))
                for a in after.aborted_transactions] == [(pid, 0)]
        # The partition's epoch moved on with the marker: the older one is stale (KIP-588).
        assert await write_markers(client, pid, epoch, True, {"t": [0]}, version=2) == {
            ("t", 0): E.invalid_producer_epoch}
        m = mod(DESCRIBE_PRODUCERS, 0)
        producers = await client.request(DESCRIBE_PRODUCERS, 0, m.DescribeProducersRequest(
            topics=(m.TopicRequest(name="t", partition_indexes=(0,)),)))
        [active] = producers.topics[0].partitions[0].active_producers
        assert int(active.current_txn_start_offset) == -1
    finally:
        await client.aclose()


async def test_write_txn_markers_needs_cluster_action(start_broker: Any) -> None:
    """KafkaApis.handleWriteTxnMarkersRequest: without CLUSTER_ACTION on the cluster every
    partition answers CLUSTER_AUTHORIZATION_FAILED and nothing is written."""
    from tests.server.test_acls import ON, R, binding
    from trio_broker.server.acl import AclOperation

    running = await start_broker(ON)
    running.broker.log_manager.create_topic("t", 1)
    client = await WireClient.connect(running.port)
    try:
        assert await write_markers(client, 5, 0, False, {"t": [0], "nope": [1]}) == {
            ("t", 0): E.cluster_authorization_failed,
            ("nope", 1): E.cluster_authorization_failed}
        assert running.broker.log_manager.get_partition("t", 0).log_end_offset == 0
        running.broker.authorizer.add([binding("kafka-cluster", AclOperation.CLUSTER_ACTION,
                                               rt=R.CLUSTER)], "test")
        assert await write_markers(client, 5, 0, False, {"t": [0]}) == {("t", 0): E.none}
    finally:
        await client.aclose()
