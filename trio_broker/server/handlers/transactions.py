"""The transactional producer's APIs (KIP-98, KIP-447): AddPartitionsToTxn (24),
AddOffsetsToTxn (25), EndTxn (26), TxnOffsetCommit (28), and the operators' DescribeTransactions
(65) and ListTransactions (66). The transaction coordinator (``coordinator/transaction``)
decides; these handlers translate requests and answers.

Authorization is KafkaApis': every transactional API needs WRITE on the transactional id
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED), AddPartitionsToTxn WRITE on each topic,
AddOffsetsToTxn and TxnOffsetCommit READ on the group (and TxnOffsetCommit READ on each topic);
DescribeTransactions and ListTransactions show only the ids (and topics) the principal may
DESCRIBE. ListTransactions v2 (Kafka 4.1, KIP-1152) adds a transactional-id pattern, matched
with RE2 as Kafka's RE2/J (:func:`_matching`).

Kafka answers PRODUCER_FENCED only to clients new enough to know it (KIP-588): older versions
get INVALID_PRODUCER_EPOCH instead (:func:`fenced_for`).

AddOffsetsToTxn v4, EndTxn v4 and TxnOffsetCommit v4 (Kafka 3.8, KIP-890) only say that the
client understands TRANSACTION_ABORTABLE; their bodies are v3's. Kafka 3.9's coordinator never
answers these APIs with that code (it comes from verifying a partition, which only Produce and
the brokers' AddPartitionsToTxn v4+ do), and neither does ours, so v4 is served as v3 and there
is nothing to translate for older versions. AddPartitionsToTxn v4-v5 are the brokers' batched
form (:func:`_add_partitions_batched`).

EndTxn v5 and TxnOffsetCommit v5 are transaction version 2 (KIP-890 part 2, Kafka 4.0): EndTxn
bumps the epoch and answers the producer id and epoch to go on with; TxnOffsetCommit adds the
group's offsets partition to the transaction itself (the client sends no AddOffsetsToTxn). As in
Kafka, the request version decides, not the finalized ``transaction.version``: a client uses
these versions only once ApiVersions shows level 2 finalized.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from ...coordinator.coordinator import OffsetCommitEntry
from ...coordinator.transaction.state import TxnMetadata, TxnState
from ...linear_regex import RegexError, compiled
from ...offload import Steps, in_worker
from ..acl import AclOperation, ResourceType
from ..context import RequestContext
from ..registry import api_handler
from ._admin import build, response_module, throttle

ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
TXN_OFFSET_COMMIT = 28
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66

#: The first version of each API whose clients understand PRODUCER_FENCED.
_FENCED_SINCE = {ADD_PARTITIONS_TO_TXN: 2, ADD_OFFSETS_TO_TXN: 2, END_TXN: 2,
                 TXN_OFFSET_COMMIT: 2, 22: 4}


def fenced_for(ctx: RequestContext, code: ErrorCode) -> ErrorCode:
    """PRODUCER_FENCED, or INVALID_PRODUCER_EPOCH for clients too old to know it."""
    if code is ErrorCode.producer_fenced and ctx.api_version < _FENCED_SINCE.get(
            ctx.request.api_key, 0):
        return ErrorCode.invalid_producer_epoch
    return code


@api_handler(ADD_PARTITIONS_TO_TXN, 0, 5)
async def handle_add_partitions_to_txn(ctx: RequestContext, body: Any) -> Any:
    """All or nothing: unknown partitions fail, the others get OPERATION_NOT_ATTEMPTED."""
    module = response_module(ADD_PARTITIONS_TO_TXN, ctx.api_version)
    if ctx.api_version >= 4:
        return await _add_partitions_batched(ctx, module, body)
    txn = ctx.broker.transaction_coordinator
    lm = ctx.broker.log_manager
    wanted = [(t.name, int(p)) for t in body.v3_and_below_topics for p in t.partitions]
    errors: dict[tuple[str, int], ErrorCode]
    if not _may_write_txn(ctx, body.v3_and_below_transactional_id):
        errors = dict.fromkeys(wanted, ErrorCode.transactional_id_authorization_failed)
        return _add_partitions_answer(ctx, module, errors)
    writable = {topic for topic in {t for t, _ in wanted}
                if ctx.authorize(AclOperation.WRITE, ResourceType.TOPIC, topic)}
    failed = {tp: ErrorCode.topic_authorization_failed for tp in wanted if tp[0] not in writable}
    failed.update({tp: ErrorCode.unknown_topic_or_partition for tp in wanted
                   if tp not in failed and lm.get_partition(*tp) is None})
    if failed:
        errors = {tp: failed.get(tp, ErrorCode.operation_not_attempted) for tp in wanted}
    else:
        code = await txn.add_partitions(body.v3_and_below_transactional_id,
                                        int(body.v3_and_below_producer_id),
                                        int(body.v3_and_below_producer_epoch), wanted)
        errors = dict.fromkeys(wanted, fenced_for(ctx, code))
    return _add_partitions_answer(ctx, module, errors)


async def _add_partitions_batched(ctx: RequestContext, module: Any, body: Any) -> Any:
    """v4-v5 (KIP-890), which only brokers send, several transactions at once (Kafka 3.9's
    KafkaApis): CLUSTER_ACTION on the cluster or the whole request fails with the top-level
    error alone; no WRITE checks (the asking broker made them for its client); each
    transaction all or nothing as in v3; ``verify_only`` asks whether the partitions are in
    the transaction already. v5 only says the asking broker understands TRANSACTION_ABORTABLE:
    Kafka's coordinator answers it at v4 too."""
    if not ctx.authorize(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER):
        return build(module.AddPartitionsToTxnResponse, throttle_time=throttle(ctx),
                     error_code=ErrorCode.cluster_authorization_failed, results_by_transaction=())
    txn = ctx.broker.transaction_coordinator
    lm = ctx.broker.log_manager
    results = []
    for transaction in body.transactions:
        tid, pid, epoch = (transaction.transactional_id, int(transaction.producer_id),
                           int(transaction.producer_epoch))
        wanted = [(t.name, int(p)) for t in transaction.topics for p in t.partitions]
        unknown = {tp for tp in wanted if lm.get_partition(*tp) is None}
        errors: dict[tuple[str, int], ErrorCode]
        if unknown:
            errors = {tp: ErrorCode.unknown_topic_or_partition if tp in unknown
                      else ErrorCode.operation_not_attempted for tp in wanted}
        elif transaction.verify_only:
            errors = txn.verify_partitions(tid, pid, epoch, wanted)
        else:
            errors = dict.fromkeys(wanted, await txn.add_partitions(tid, pid, epoch, wanted))
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), code in errors.items():
            by_topic.setdefault(topic, []).append(build(
                module.AddPartitionsToTxnPartitionResult, partition_index=partition,
                partition_error_code=code))
        results.append(build(module.AddPartitionsToTxnResult, transactional_id=tid,
                             topic_results=tuple(build(
                                 module.AddPartitionsToTxnTopicResult, name=name,
                                 results_by_partition=tuple(parts))
                                 for name, parts in by_topic.items())))
    return build(module.AddPartitionsToTxnResponse, throttle_time=throttle(ctx),
                 error_code=ErrorCode.none, results_by_transaction=tuple(results))


def _may_write_txn(ctx: RequestContext, transactional_id: str) -> bool:
    return ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)


def _add_partitions_answer(ctx: RequestContext, module: Any,
                           errors: dict[tuple[str, int], ErrorCode]) -> Any:
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), code in errors.items():
        by_topic.setdefault(topic, []).append(build(
            module.AddPartitionsToTxnPartitionResult, partition_index=partition,
            partition_error_code=code))
    results = tuple(build(module.AddPartitionsToTxnTopicResult, name=name,
                          results_by_partition=tuple(parts))
                    for name, parts in by_topic.items())
    return build(module.AddPartitionsToTxnResponse, throttle_time=throttle(ctx),
                 results_by_topic_v3_and_below=results)


@api_handler(ADD_OFFSETS_TO_TXN, 0, 4)
async def handle_add_offsets_to_txn(ctx: RequestContext, body: Any) -> Any:
    module = response_module(ADD_OFFSETS_TO_TXN, ctx.api_version)
    if not _may_write_txn(ctx, body.transactional_id):
        code = ErrorCode.transactional_id_authorization_failed
    elif not ctx.authorize(AclOperation.READ, ResourceType.GROUP, body.group_id):
        code = ErrorCode.group_authorization_failed
    else:
        code = await ctx.broker.transaction_coordinator.add_offsets(
            body.transactional_id, int(body.producer_id), int(body.producer_epoch),
            body.group_id)
    return build(module.AddOffsetsToTxnResponse, throttle_time=throttle(ctx),
                 error_code=fenced_for(ctx, code))


#: EndTxn and TxnOffsetCommit from this version are transaction version 2's.
TV2_END_TXN_VERSION = 5
TV2_TXN_OFFSET_COMMIT_VERSION = 5


@api_handler(END_TXN, 0, 5)
async def handle_end_txn(ctx: RequestContext, body: Any) -> Any:
    module = response_module(END_TXN, ctx.api_version)
    if not _may_write_txn(ctx, body.transactional_id):
        code = ErrorCode.transactional_id_authorization_failed
    elif ctx.api_version >= TV2_END_TXN_VERSION:
        result = await ctx.broker.transaction_coordinator.end_txn_v2(
            body.transactional_id, int(body.producer_id), int(body.producer_epoch),
            bool(body.committed))
        return build(module.EndTxnResponse, throttle_time=throttle(ctx),
                     error_code=result.error, producer_id=result.producer_id,
                     producer_epoch=result.producer_epoch)
    else:
        code = await ctx.broker.transaction_coordinator.end_txn(
            body.transactional_id, int(body.producer_id), int(body.producer_epoch),
            bool(body.committed))
    return build(module.EndTxnResponse, throttle_time=throttle(ctx),
                 error_code=fenced_for(ctx, code), producer_id=-1, producer_epoch=-1)


@api_handler(TXN_OFFSET_COMMIT, 0, 5)
async def handle_txn_offset_commit(ctx: RequestContext, body: Any) -> Any:
    module = response_module(TXN_OFFSET_COMMIT, ctx.api_version)
    offsets: dict[tuple[str, int], OffsetCommitEntry] = {}
    for topic in body.topics:
        for part in topic.partitions:
            offsets[(topic.name, int(part.partition_index))] = OffsetCommitEntry(
                int(part.committed_offset), int(getattr(part, "committed_leader_epoch", -1)),
                part.committed_metadata)
    results: dict[tuple[str, int], ErrorCode]
    if not _may_write_txn(ctx, body.transactional_id):
        results = dict.fromkeys(offsets, ErrorCode.transactional_id_authorization_failed)
    elif not ctx.authorize(AclOperation.READ, ResourceType.GROUP, body.group_id):
        results = dict.fromkeys(offsets, ErrorCode.group_authorization_failed)
    else:
        readable = {topic for topic in {t for t, _ in offsets}
                    if ctx.authorize(AclOperation.READ, ResourceType.TOPIC, topic)}
        lm = ctx.broker.log_manager
        # Kafka commits the authorized, existing partitions and answers the others.
        results = {tp: ErrorCode.topic_authorization_failed for tp in offsets
                   if tp[0] not in readable}
        results.update({tp: ErrorCode.unknown_topic_or_partition for tp in offsets
                        if tp not in results and lm.get_partition(*tp) is None})
        rest = {tp: entry for tp, entry in offsets.items() if tp not in results}
        if rest:
            results.update(await ctx.broker.transaction_coordinator.txn_offset_commit(
                transactional_id=body.transactional_id, group_id=body.group_id,
                producer_id=int(body.producer_id), producer_epoch=int(body.producer_epoch),
                generation_id=int(getattr(body, "generation_id", -1)),
                member_id=getattr(body, "member_id", "") or "",
                group_instance_id=getattr(body, "group_instance_id", None), offsets=rest,
                add_partition=ctx.api_version >= TV2_TXN_OFFSET_COMMIT_VERSION))
    topics = []
    for topic in body.topics:
        parts = tuple(build(module.TxnOffsetCommitResponsePartition,
                            partition_index=int(p.partition_index),
                            error_code=fenced_for(ctx, results[(topic.name,
                                                                int(p.partition_index))]))
                      for p in topic.partitions)
        topics.append(build(module.TxnOffsetCommitResponseTopic, name=topic.name,
                            partitions=parts))
    return build(module.TxnOffsetCommitResponse, throttle_time=throttle(ctx),
                 topics=tuple(topics))


_EPOCH_START = datetime.datetime.fromtimestamp(0, tz=datetime.UTC)


def _millis_time(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC) if ms >= 0 else \
        _EPOCH_START - datetime.timedelta(milliseconds=1)


@api_handler(DESCRIBE_TRANSACTIONS, 0, 0)
async def handle_describe_transactions(ctx: RequestContext, body: Any) -> Any:
    """Each id's state, timeout, start time, producer and partitions (kafka-transactions.sh
    describe)."""
    module = response_module(DESCRIBE_TRANSACTIONS, ctx.api_version)
    txn = ctx.broker.transaction_coordinator
    states = []
    for txn_id in body.transactional_ids:
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn_id):
            code, meta = ErrorCode.transactional_id_authorization_failed, None
        else:
            code, meta = txn.describe(txn_id)
        if meta is None:
            states.append(build(module.TransactionState, error_code=code,
                                transactional_id=txn_id, transaction_state="",
                                transaction_timeout=datetime.timedelta(0),
                                transaction_start_time=_EPOCH_START, producer_id=-1,
                                producer_epoch=-1, topics=()))
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(meta.partitions):
            if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, topic,
                                 log_if_denied=False):
                continue  # Kafka leaves out the topics the principal may not describe
            by_topic.setdefault(topic, []).append(partition)
        states.append(build(
            module.TransactionState, error_code=ErrorCode.none, transactional_id=txn_id,
            transaction_state=meta.state.kafka_name,
            transaction_timeout=datetime.timedelta(milliseconds=meta.timeout_ms),
            transaction_start_time=_millis_time(meta.start_ms), producer_id=meta.producer_id,
            producer_epoch=meta.producer_epoch,
            topics=tuple(build(module.TopicData, topic=t, partitions=tuple(ps))
                         for t, ps in by_topic.items())))
    return build(module.DescribeTransactionsResponse, throttle_time=throttle(ctx),
                 transaction_states=tuple(states))


_STATE_NAMES = frozenset(s.kafka_name for s in TxnState)


@api_handler(LIST_TRANSACTIONS, 0, 2)
async def handle_list_transactions(ctx: RequestContext, body: Any) -> Any:
    """Transactional ids filtered by state, producer id, (v1, KIP-994) open duration and (v2,
    KIP-1152) a pattern the whole id must match (:func:`_matching`); an invalid pattern is
    INVALID_REGULAR_EXPRESSION."""
    module = response_module(LIST_TRANSACTIONS, ctx.api_version)

    def answer(code: ErrorCode, unknown: tuple[str, ...] = (), found: Iterable[Any] = ()
               ) -> Any:
        return build(module.ListTransactionsResponse, throttle_time=throttle(ctx),
                     error_code=code, unknown_state_filters=unknown,
                     transaction_states=tuple(
                         build(module.TransactionState, transactional_id=m.transactional_id,
                               producer_id=m.producer_id, transaction_state=m.state.kafka_name)
                         for m in found))

    states = tuple(body.state_filters)
    unknown = tuple(s for s in states if s not in _STATE_NAMES)
    code, listed = ctx.broker.transaction_coordinator.list(
        [s for s in states if s in _STATE_NAMES], [int(p) for p in body.producer_id_filters],
        int(getattr(body, "duration_filter", -1)))
    if code is not ErrorCode.none:
        return answer(code, unknown)
    if unknown and len(unknown) == len(states):
        listed = []  # only unknown states asked for: nothing can match
    pattern = getattr(body, "transactional_id_pattern", None)
    if pattern:  # KIP-1152: null or empty is no filter
        try:
            regex = compiled(pattern)
        except RegexError:
            return answer(ErrorCode.invalid_regular_expression)
        if listed:
            listed = await in_worker(ctx.broker.workers, _matching, regex, listed)
    found = []
    steps = Steps()
    for meta in listed:
        await steps.tick()  # thousands of transactional ids: other connections get their turns
        if ctx.authorize(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                         meta.transactional_id, log_if_denied=False):
            found.append(meta)
    return answer(code, unknown, found)


def _matching(regex: Any, listed: list[TxnMetadata]) -> list[TxnMetadata]:
    """The transactions whose whole id matches ``regex`` (Kafka's ``Matcher.matches``).

    RE2, as Kafka's RE2/J, so its syntax (no backreferences or look-around) and linear time
    in the id: no pattern makes it backtrack for hours. Its time still grows with the
    pattern's size times the ids' (a pattern of thousands of alternatives against ids of
    thousands of characters takes seconds), so it runs in a worker thread, as Kafka's in a
    request-handler thread; RE2 releases the GIL while it matches."""
    return [meta for meta in listed if regex.fullmatch(meta.transactional_id) is not None]
