"""The versions Kafka 3.8 added for KIP-890 (TRANSACTION_ABORTABLE) over a real socket to the
in-process broker: FindCoordinator v5, InitProducerId v5, AddOffsetsToTxn v4, EndTxn v4 and
TxnOffsetCommit v4. Their bodies are the previous version's, and Kafka 3.9 answers them as it
answers that version (its coordinator never returns TRANSACTION_ABORTABLE on these APIs), so a
whole transaction is run at the new versions and the answers compared with Kafka's.
"""

from __future__ import annotations

import datetime
import sys
from typing import Any

import pytest
from kio.schema.errors import ErrorCode as E

from tests.kafka_wire import WireClient
from tests.server.test_acls import ON, binding
from trio_broker.protocol.codec import request_schema
from trio_broker.server.acl import AclOperation as Op
from trio_broker.server.acl import ResourceType as R

pytestmark = pytest.mark.timeout(30)

OFFSET_FETCH, FIND_COORDINATOR, INIT_PID = 9, 10, 22
ADD_PARTITIONS, ADD_OFFSETS, END_TXN, TXN_OFFSET_COMMIT = 24, 25, 26, 28


def mod(api_key: int, version: int) -> Any:
    return sys.modules[request_schema(api_key, version).__module__]


async def init_pid(client: WireClient, txn_id: str | None) -> Any:
    m = mod(INIT_PID, 5)
    return await client.request(INIT_PID, 5, m.InitProducerIdRequest(
        transactional_id=txn_id, transaction_timeout=datetime.timedelta(seconds=60),
        producer_id=-1, producer_epoch=-1))


async def add_offsets(client: WireClient, pid: int, epoch: int) -> Any:
    m = mod(ADD_OFFSETS, 4)
    answer = await client.request(ADD_OFFSETS, 4, m.AddOffsetsToTxnRequest(
        transactional_id="tx", producer_id=pid, producer_epoch=epoch, group_id="g"))
    return answer.error_code


async def txn_offset_commit(client: WireClient, pid: int, epoch: int, offset: int,
                            version: int = 4) -> Any:
    """TxnOffsetCommit of ``tx`` for group ``g``: ``[(topic, partition, error)]``."""
    m = mod(TXN_OFFSET_COMMIT, version)
    answer = await client.request(TXN_OFFSET_COMMIT, version, m.TxnOffsetCommitRequest(
        transactional_id="tx", group_id="g", producer_id=pid, producer_epoch=epoch,
        generation_id=-1, member_id="", group_instance_id=None,
        topics=(m.TxnOffsetCommitRequestTopic(name="t", partitions=(
            m.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=offset,
                                              committed_leader_epoch=-1,
                                              committed_metadata="m"),)),)))
    return [(t.name, int(p.partition_index), p.error_code)
            for t in answer.topics for p in t.partitions]


async def end_txn(client: WireClient, pid: int, epoch: int, commit: bool) -> Any:
    m = mod(END_TXN, 4)
    answer = await client.request(END_TXN, 4, m.EndTxnRequest(
        transactional_id="tx", producer_id=pid, producer_epoch=epoch, committed=commit))
    return answer.error_code


async def committed_offset(client: WireClient) -> int:
    m = mod(OFFSET_FETCH, 8)
    answer = await client.request(OFFSET_FETCH, 8, m.OffsetFetchRequest(
        groups=(m.OffsetFetchRequestGroup(group_id="g", topics=(
            m.OffsetFetchRequestTopics(name="t", partition_indexes=(0,)),)),),
        require_stable=True))
    return int(answer.groups[0].topics[0].partitions[0].committed_offset)


async def test_find_coordinator_v5_answers_as_v4(broker: Any) -> None:
    client = await WireClient.connect(broker.port)
    try:
        m = mod(FIND_COORDINATOR, 5)
        for key_type in (0, 1):
            found = await client.request(FIND_COORDINATOR, 5, m.FindCoordinatorRequest(
                key_type=key_type, coordinator_keys=("a", "b")))
            assert [(c.key, c.error_code, int(c.node_id), c.port)
                    for c in found.coordinators] == [
                ("a", E.none, broker.broker.node_id, broker.port),
                ("b", E.none, broker.broker.node_id, broker.port)]
        # An unknown key type: INVALID_REQUEST for each key, as v4.
        found = await client.request(FIND_COORDINATOR, 5, m.FindCoordinatorRequest(
            key_type=7, coordinator_keys=("a",)))
        assert [c.error_code for c in found.coordinators] == [E.invalid_request]
    finally:
        await client.aclose()


async def test_transaction_at_the_kip_890_versions(broker: Any) -> None:
    broker.broker.log_manager.create_topic("t", 1)
    client = await WireClient.connect(broker.port)
    try:
        idempotent = await init_pid(client, None)
        assert (idempotent.error_code, int(idempotent.producer_epoch)) == (E.none, 0)
        first = await init_pid(client, "tx")
        assert (first.error_code, int(first.producer_epoch)) == (E.none, 0)
        pid = int(first.producer_id)
        assert pid != int(idempotent.producer_id)
        # Nothing begun: EndTxn v4 is INVALID_TXN_STATE, an unknown producer id a mapping error.
        assert await end_txn(client, pid, 0, True) is E.invalid_txn_state
        assert await end_txn(client, pid + 1, 0, True) is E.invalid_producer_id_mapping
        # TxnOffsetCommit before AddOffsetsToTxn: the group is not in the transaction.
        assert await txn_offset_commit(client, pid, 0, 7) == [("t", 0, E.invalid_txn_state)]
        assert await add_offsets(client, pid, 0) is E.none
        assert await txn_offset_commit(client, pid, 0, 7) == [("t", 0, E.none)]
        assert await end_txn(client, pid, 0, True) is E.none
        assert await committed_offset(client) == 7
        # A second transaction, then the producer fenced by a new InitProducerId: the stale
        # epoch gets PRODUCER_FENCED from EndTxn and AddOffsetsToTxn v4, as at v2-v3 (KIP-588).
        assert await add_offsets(client, pid, 0) is E.none
        assert (await init_pid(client, "tx")).error_code is E.concurrent_transactions
        again = await init_pid(client, "tx")
        assert (again.error_code, int(again.producer_epoch)) == (E.none, 2)
        assert await end_txn(client, pid, 0, False) is E.producer_fenced
        assert await add_offsets(client, pid, 0) is E.producer_fenced
        # TxnOffsetCommit's stale epoch is what the append to __consumer_offsets answers, at
        # every version.
        assert await txn_offset_commit(client, pid, 0, 9) == [
            ("t", 0, E.invalid_producer_epoch)]
        # The fenced transaction was aborted: the offset stays the committed one.
        assert await committed_offset(client) == 7
    finally:
        await client.aclose()


async def add_partitions_batched(client: WireClient, version: int,
                                 *transactions: tuple[str, int, int, bool, dict[str, list[int]]]
                                 ) -> tuple[Any, dict[str, dict[tuple[str, int], Any]]]:
    """AddPartitionsToTxn v4+: ``(top-level error, {transactional id: {(topic, p): error}})``."""
    m = mod(ADD_PARTITIONS, version)
    answer = await client.request(ADD_PARTITIONS, version, m.AddPartitionsToTxnRequest(
        transactions=tuple(m.AddPartitionsToTxnTransaction(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch, verify_only=verify,
            topics=tuple(m.AddPartitionsToTxnTopic(name=t, partitions=tuple(ps))
                         for t, ps in parts.items()))
            for tid, pid, epoch, verify, parts in transactions)))
    return answer.error_code, {
        r.transactional_id: {(t.name, int(p.partition_index)): p.partition_error_code
                             for t in r.topic_results for p in t.results_by_partition}
        for r in answer.results_by_transaction}


@pytest.mark.parametrize("version", [4, 5])
async def test_add_partitions_to_txn_batched_as_brokers_send_it(broker: Any, version: int
                                                                ) -> None:
    broker.broker.log_manager.create_topic("t", 2)
    client = await WireClient.connect(broker.port)
    try:
        pid = int((await init_pid(client, "tx")).producer_id)
        other = int((await init_pid(client, "tx2")).producer_id)
        # verify_only changes nothing: a partition not in the transaction is ABORTABLE.
        assert await add_partitions_batched(client, version, ("tx", pid, 0, True, {"t": [0]})
                                            ) == (E.none,
                                                  {"tx": {("t", 0): E.transaction_abortable}})
        # Two transactions in one request, each all or nothing: an unknown partition fails
        # its own transaction only.
        assert await add_partitions_batched(
            client, version, ("tx", pid, 0, False, {"t": [0]}),
            ("tx2", other, 0, False, {"t": [1], "missing": [0]})) == (E.none, {
                "tx": {("t", 0): E.none},
                "tx2": {("t", 1): E.operation_not_attempted,
                        ("missing", 0): E.unknown_topic_or_partition}})
        assert await add_partitions_batched(
            client, version, ("tx", pid, 0, True, {"t": [0, 1]}),
            ("tx2", other, 0, True, {"t": [1]})) == (E.none, {
                "tx": {("t", 0): E.none, ("t", 1): E.transaction_abortable},
                "tx2": {("t", 1): E.transaction_abortable}})
        # A stale epoch and a wrong producer id, verified: fenced, not added.
        assert (await add_partitions_batched(client, version, ("tx", other, 0, True, {"t": [0]}))
                )[1] == {"tx": {("t", 0): E.invalid_producer_id_mapping}}
        assert (await add_partitions_batched(client, version, ("tx", pid, 1, True, {"t": [0]}))
                )[1] == {"tx": {("t", 0): E.producer_fenced}}
    finally:
        await client.aclose()


async def test_add_partitions_to_txn_batched_needs_cluster_action(start_broker: Any) -> None:
    running = await start_broker(ON)
    running.broker.log_manager.create_topic("t", 1)
    running.broker.authorizer.add([binding("tx", Op.WRITE, rt=R.TRANSACTIONAL_ID)], "test")
    client = await WireClient.connect(running.port)
    try:
        pid = int((await init_pid(client, "tx")).producer_id)
        # WRITE on the id is what a client needs; the brokers' form wants CLUSTER_ACTION.
        assert await add_partitions_batched(client, 4, ("tx", pid, 0, False, {"t": [0]})
                                            ) == (E.cluster_authorization_failed, {})
        running.broker.authorizer.add([binding("kafka-cluster", Op.CLUSTER_ACTION,
                                               rt=R.CLUSTER)], "test")
        assert await add_partitions_batched(client, 4, ("tx", pid, 0, False, {"t": [0]})
                                            ) == (E.none, {"tx": {("t", 0): E.none}})
    finally:
        await client.aclose()
