"""The transactional APIs under ACLs, on the wire (principal ``User:ANONYMOUS``): as Kafka's
KafkaApis, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and TxnOffsetCommit need WRITE on the
transactional id, and the topic and group permissions on top; DescribeTransactions and
ListTransactions show only what the principal may describe."""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.errors import ErrorCode as E

from tests.kafka_wire import WireClient
from tests.server.test_acls import ON, binding
from tests.server.test_transaction_frames import (
    ADD_OFFSETS,
    DESCRIBE_TXNS,
    LIST_TXNS,
    TXN_OFFSET_COMMIT,
    add_partitions,
    end_txn,
    init_pid,
    mod,
)
from trio_broker.server.acl import AclOperation as Op
from trio_broker.server.acl import ResourceType as R

pytestmark = pytest.mark.timeout(30)


async def add_offsets(client: WireClient, txn_id: str, pid: int, group: str) -> Any:
    m = mod(ADD_OFFSETS, 3)
    answer = await client.request(ADD_OFFSETS, 3, m.AddOffsetsToTxnRequest(
        transactional_id=txn_id, producer_id=pid, producer_epoch=0, group_id=group))
    return answer.error_code


async def txn_offset_commit(client: WireClient, txn_id: str, pid: int, group: str,
                            topics: list[str]) -> list[Any]:
    m = mod(TXN_OFFSET_COMMIT, 3)
    answer = await client.request(TXN_OFFSET_COMMIT, 3, m.TxnOffsetCommitRequest(
        transactional_id=txn_id, group_id=group, producer_id=pid, producer_epoch=0,
        generation_id=-1, member_id="", group_instance_id=None,
        topics=tuple(m.TxnOffsetCommitRequestTopic(name=t, partitions=(
            m.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=1,
                                              committed_leader_epoch=-1,
                                              committed_metadata=""),)) for t in topics)))
    return [t.partitions[0].error_code for t in answer.topics]


async def test_transactional_apis_need_write_on_the_transactional_id(start_broker: Any
                                                                      ) -> None:
    running = await start_broker(ON)
    running.broker.log_manager.create_topic("t", 1)
    running.broker.log_manager.create_topic("secret", 1)
    authorizer = running.broker.authorizer
    authorizer.add([binding("tx", Op.WRITE, rt=R.TRANSACTIONAL_ID)], "test")
    client = await WireClient.connect(running.port)
    try:
        init = await init_pid(client, "tx")
        assert init.error_code is E.none
        pid = int(init.producer_id)
        # Only "tx" is ours: every transactional API refuses another id before anything else.
        assert (await init_pid(client, "other")).error_code \
            is E.transactional_id_authorization_failed
        assert await add_partitions(client, "other", pid, 0, {"t": [0]}) == {
            ("t", 0): E.transactional_id_authorization_failed}
        assert await add_offsets(client, "other", pid, "g") \
            is E.transactional_id_authorization_failed
        assert await txn_offset_commit(client, "other", pid, "g", ["t"]) == [
            E.transactional_id_authorization_failed]
        assert await end_txn(client, "other", pid, 0, True) \
            is E.transactional_id_authorization_failed
        # WRITE on each topic: none added when one is refused.
        authorizer.add([binding("t", Op.WRITE)], "test")
        assert await add_partitions(client, "tx", pid, 0, {"t": [0], "secret": [0]}) == {
            ("t", 0): E.operation_not_attempted, ("secret", 0): E.topic_authorization_failed}
        assert await add_partitions(client, "tx", pid, 0, {"t": [0]}) == {("t", 0): E.none}
        # READ on the group for the offsets, then READ on each topic.
        assert await add_offsets(client, "tx", pid, "g") is E.group_authorization_failed
        assert await txn_offset_commit(client, "tx", pid, "g", ["t"]) == [
            E.group_authorization_failed]
        authorizer.add([binding("g", Op.READ, rt=R.GROUP)], "test")
        assert await add_offsets(client, "tx", pid, "g") is E.none
        authorizer.add([binding("t", Op.READ)], "test")
        assert await txn_offset_commit(client, "tx", pid, "g", ["t", "secret"]) == [
            E.none, E.topic_authorization_failed]
        # DESCRIBE on the id (WRITE implies it) to see the transaction.
        m = mod(DESCRIBE_TXNS, 0)
        described = await client.request(DESCRIBE_TXNS, 0, m.DescribeTransactionsRequest(
            transactional_ids=("tx", "other")))
        assert [s.error_code for s in described.transaction_states] == [
            E.none, E.transactional_id_authorization_failed]
        assert await end_txn(client, "tx", pid, 0, True) is E.none
    finally:
        await client.aclose()
    # Another principal's transactions are not listed.
    running.broker.log_manager.create_topic("u", 1)
    authorizer.remove([binding("tx", Op.WRITE, rt=R.TRANSACTIONAL_ID)], "test")
    client = await WireClient.connect(running.port)
    try:
        m = mod(LIST_TXNS, 1)
        listed = await client.request(LIST_TXNS, 1, m.ListTransactionsRequest(
            state_filters=(), producer_id_filters=(), duration_filter=-1))
        assert list(listed.transaction_states) == []
    finally:
        await client.aclose()
