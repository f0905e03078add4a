"""The newest versions of three APIs, answered over a real socket as Kafka 4.1+ answers them:
ListConfigResources v1 (KIP-1142: a type filter, every config resource type), ListTransactions
v2 (KIP-1152: a transactional-id pattern, matched by RE2 as Kafka's RE2/J, so a catastrophic
pattern cannot hold the broker) and InitProducerId v6 (KIP-939: two-phase commit off, Kafka's
default)."""

from __future__ import annotations

import datetime
import sys
from typing import Any

import pytest
import trio
from kio.schema.errors import ErrorCode as E

from tests.kafka_wire import API_VERSIONS_V3, WireClient, readable
from tests.server.test_acls import ON, binding
from trio_broker.config import ConfigError, load_config
from trio_broker.protocol.codec import request_schema
from trio_broker.server.acl import AclOperation as Op
from trio_broker.server.acl import ResourceType as R

pytestmark = pytest.mark.timeout(30)

API_VERSIONS, INIT_PID, LIST_TXNS, LIST_CONFIG_RESOURCES = 18, 22, 66, 74
TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32


def mod(api_key: int, version: int) -> Any:
    return sys.modules[request_schema(api_key, version).__module__]


async def list_config_resources(client: WireClient, *types: int, version: int = 1
                                ) -> tuple[E, list[tuple[int, str]]]:
    m = mod(LIST_CONFIG_RESOURCES, version)
    request = m.ListConfigResourcesRequest(resource_types=types) if version else \
        m.ListConfigResourcesRequest()
    answer = await client.request(LIST_CONFIG_RESOURCES, version, request)
    return answer.error_code, [(int(r.resource_type), r.resource_name)
                               for r in answer.config_resources]


async def test_list_config_resources_v1_lists_each_type_as_kafka(start_broker: Any) -> None:
    running = await start_broker(ON)
    for name in ("b", "a"):
        running.broker.log_manager.create_topic(name, 1)
    client = await WireClient.connect(running.port)
    node = str(running.broker.node_id)
    try:
        # KafkaApis.handleListConfigResources: DESCRIBE_CONFIGS on the cluster, else nothing.
        assert await list_config_resources(client) == (E.cluster_authorization_failed, [])
        running.broker.authorizer.add([binding("kafka-cluster", Op.DESCRIBE_CONFIGS,
                                               rt=R.CLUSTER)], "test")
        # Every topic, internal ones included, whatever the topic ACLs (none are granted).
        topics = [(TOPIC, name) for name in sorted(running.broker.log_manager.topics)]
        assert {"a", "b"} <= {name for _, name in topics}
        # An empty filter: every type v1 supports, in Kafka's order (no group or
        # client-metrics configs exist here).
        assert await list_config_resources(client) == (
            E.none, [(BROKER_LOGGER, node), (BROKER, node), *topics])
        # The filter's order and repeats change nothing.
        assert await list_config_resources(client, TOPIC, BROKER, TOPIC) == (
            E.none, [(BROKER, node), *topics])
        assert await list_config_resources(client, GROUP, CLIENT_METRICS) == (E.none, [])
        # A type outside the supported ones fails the whole request.
        assert await list_config_resources(client, TOPIC, 64) == (E.unsupported_version, [])
        assert await list_config_resources(client, 1) == (E.unsupported_version, [])
        # v0 is client metrics only: none here.
        assert await list_config_resources(client, version=0) == (E.none, [])
    finally:
        await client.aclose()


async def init_pid(client: WireClient, txn_id: str | None, version: int = 6,
                   **flags: bool) -> Any:
    m = mod(INIT_PID, version)
    return await client.request(INIT_PID, version, m.InitProducerIdRequest(
        transactional_id=txn_id, transaction_timeout=datetime.timedelta(seconds=60), **flags))


async def list_transactions(client: WireClient, pattern: str | None, version: int = 2
                            ) -> tuple[E, list[str]]:
    m = mod(LIST_TXNS, version)
    answer = await client.request(LIST_TXNS, version, m.ListTransactionsRequest(
        state_filters=(), producer_id_filters=(), duration_filter=-1,
        transactional_id_pattern=pattern))
    return answer.error_code, [t.transactional_id for t in answer.transaction_states]


async def test_list_transactions_v2_filters_by_a_whole_id_pattern(broker: Any) -> None:
    client = await WireClient.connect(broker.port)
    try:
        for txn_id in ("orders", "x-orders", "payments-1"):
            assert (await init_pid(client, txn_id)).error_code is E.none
        everything = (E.none, ["orders", "payments-1", "x-orders"])
        # TransactionStateManager.listTransactionStates: null or empty is no filter.
        assert await list_transactions(client, None) == everything
        assert await list_transactions(client, "") == everything
        # The whole id must match (Matcher.matches), not a part of it.
        assert await list_transactions(client, "orders") == (E.none, ["orders"])
        assert await list_transactions(client, ".*orders") == (E.none, ["orders", "x-orders"])
        assert await list_transactions(client, "payments-\\d+|orders") == (
            E.none, ["orders", "payments-1"])
        # Invalid patterns, RE2/J's among them (no backreferences): INVALID_REGULAR_EXPRESSION.
        assert await list_transactions(client, "[") == (E.invalid_regular_expression, [])
        assert await list_transactions(client, "(o)\\1") == (E.invalid_regular_expression, [])
        # v1 has no pattern: every id.
        m = mod(LIST_TXNS, 1)
        answer = await client.request(LIST_TXNS, 1, m.ListTransactionsRequest(
            state_filters=(), producer_id_filters=(), duration_filter=-1))
        assert len(answer.transaction_states) == 3
    finally:
        await client.aclose()


async def test_a_catastrophic_pattern_does_not_hold_the_broker(broker: Any) -> None:
    """``(a+)+$`` against ``aaa…ab`` backtracks in Python's ``re`` (and java.util.regex) for
    time doubling with each ``a``: seconds for this id, holding the GIL, so the whole broker.
    RE2 answers at once, and another connection is served meanwhile. (With a backtracking
    engine this fails on the 5 s bound once the match ends, ~10 s here; a longer id would make
    the regression hang the test instead of failing it.)"""
    victim = "a" * 28 + "b"
    client = await WireClient.connect(broker.port)
    other = await WireClient.connect(broker.port)
    try:
        assert (await init_pid(client, victim)).error_code is E.none
        assert (await init_pid(client, "a" * 28)).error_code is E.none
        with trio.fail_after(5):
            await client.send(LIST_TXNS, 2, mod(LIST_TXNS, 2).ListTransactionsRequest(
                state_filters=(), producer_id_filters=(), duration_filter=-1,
                transactional_id_pattern="(a+)+$"))
            versions = await other.request(API_VERSIONS, 3, API_VERSIONS_V3)
            assert versions.error_code is E.none
            _, answer = await client.receive()
        assert [t.transactional_id for t in answer.transaction_states] == ["a" * 28]
    finally:
        await client.aclose()
        await other.aclose()


async def test_a_slow_pattern_is_matched_while_others_are_served(broker: Any) -> None:
    """RE2's own worst case, a pattern of thousands of alternatives against a long id, takes
    seconds (time grows with both sizes): the matching runs in a worker thread, so another
    connection is answered before the slow answer is ready."""
    long_id = "a" * 3000
    client = await WireClient.connect(broker.port)
    other = await WireClient.connect(broker.port)
    try:
        assert (await init_pid(client, long_id)).error_code is E.none
        await client.send(LIST_TXNS, 2, mod(LIST_TXNS, 2).ListTransactionsRequest(
            state_filters=(), producer_id_filters=(), duration_filter=-1,
            transactional_id_pattern="(a|b|c)*" * 600))
        versions = await other.request(API_VERSIONS, 3, API_VERSIONS_V3)
        assert versions.error_code is E.none
        assert not readable(client), "answered before another connection was served"
        _, answer = await client.receive()
        assert [t.transactional_id for t in answer.transaction_states] == [long_id]
    finally:
        await client.aclose()
        await other.aclose()


async def test_init_producer_id_v6_has_two_phase_commit_off(broker: Any) -> None:
    client = await WireClient.connect(broker.port)
    try:
        answer = await init_pid(client, "tx")
        assert (answer.error_code, answer.producer_epoch, answer.ongoing_txn_producer_id,
                answer.ongoing_txn_producer_epoch) == (E.none, 0, -1, -1)
        # TransactionCoordinator.handleInitProducerId with transaction.two.phase.commit.enable
        # false: asking for 2PC is an authorization failure, keeping a prepared transaction
        # unsupported; nothing changes for the id.
        for flags, code in (({"enable2_pc": True}, E.transactional_id_authorization_failed),
                            ({"enable2_pc": True, "keep_prepared_txn": True},
                             E.transactional_id_authorization_failed),
                            ({"keep_prepared_txn": True}, E.unsupported_version)):
            refused = await init_pid(client, "tx", **flags)
            assert (refused.error_code, refused.producer_id, refused.producer_epoch,
                    refused.ongoing_txn_producer_id) == (code, -1, -1, -1), flags
        # An empty transactional id is INVALID_REQUEST first, as in Kafka.
        assert (await init_pid(client, "", enable2_pc=True)).error_code is E.invalid_request
        # The next initialisation bumps the epoch: the refused ones did nothing.
        assert (await init_pid(client, "tx")).producer_epoch == 1
        # An idempotent producer's flags are ignored (Kafka's coordinator accepts it blindly).
        idempotent = await init_pid(client, None, enable2_pc=True, keep_prepared_txn=True)
        assert (idempotent.error_code, idempotent.producer_epoch) == (E.none, 0)
        assert idempotent.producer_id >= 0
    finally:
        await client.aclose()


def test_two_phase_commit_cannot_be_enabled() -> None:
    """Not implemented: the key Kafka names it by fails at start-up when true."""
    assert load_config({}).transaction_two_phase_commit_enable is False
    with pytest.raises(ConfigError, match="transaction.two.phase.commit.enable.*not implemented"):
        load_config({"transaction.two.phase.commit.enable": "true"})
