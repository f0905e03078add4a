"""InitProducerId (API key 22): producer ids for idempotent producers, and producer ids and
epochs of transactional ids (from the transaction coordinator, which fences older producers).

v6 (Kafka 4.1, KIP-939) adds two-phase commit: ``Enable2Pc`` and ``KeepPreparedTxn`` in the
request, the ongoing transaction's producer id and epoch in the answer. Two-phase commit is not
implemented, so this broker answers as Kafka does with ``transaction.two.phase.commit.enable``
false, its default: a transactional request asking for it gets
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, one keeping a prepared transaction UNSUPPORTED_VERSION
(``TransactionCoordinator.handleInitProducerId``), and every answer's ongoing producer id and
epoch are -1 (no prepared transaction is kept). An idempotent (non-transactional) request's
flags are ignored, as Kafka's coordinator ignores them.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ..acl import AclOperation, ResourceType
from ..context import RequestContext
from ..registry import api_handler
from ._admin import build, error_of, response_module, throttle
from .transactions import fenced_for

INIT_PRODUCER_ID = 22
MIN_VERSION = 0
#: v5 (KIP-890) only says the client understands TRANSACTION_ABORTABLE, which Kafka 3.9's
#: coordinator never answers on InitProducerId (no partition is verified here): v5 is v4.
MAX_VERSION = 6


@api_handler(INIT_PRODUCER_ID, MIN_VERSION, MAX_VERSION)
async def handle_init_producer_id(ctx: RequestContext, body: Any) -> Any:
    """A fresh producer id with epoch 0 for every non-transactional producer.

    A producer re-initialising (v3+: its old id and epoch given) also gets a fresh id, which
    Kafka allows for idempotent producers: sequences restart at 0 under the new id.
    """
    module = response_module(INIT_PRODUCER_ID, ctx.api_version)
    response = module.InitProducerIdResponse

    def answer(code: ErrorCode, pid: int = -1, epoch: int = -1) -> Any:
        return build(response, throttle_time=throttle(ctx), error_code=code, producer_id=pid,
                     producer_epoch=epoch)

    if body.transactional_id is not None:
        # KafkaApis.handleInitProducerIdRequest: WRITE on the transactional id.
        if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                             body.transactional_id):
            return answer(ErrorCode.transactional_id_authorization_failed)
        result = await ctx.broker.transaction_coordinator.init_producer_id(
            body.transactional_id, int(body.transaction_timeout.total_seconds() * 1000),
            int(getattr(body, "producer_id", -1)), int(getattr(body, "producer_epoch", -1)),
            enable_two_phase_commit=bool(getattr(body, "enable2_pc", False)),
            keep_prepared_txn=bool(getattr(body, "keep_prepared_txn", False)))
        return answer(fenced_for(ctx, result.error), result.producer_id, result.producer_epoch)
    # KafkaApis.handleInitProducerIdRequest: IDEMPOTENT_WRITE on the cluster, or (Kafka 3+,
    # KIP-679) WRITE on at least one topic.
    authorizer = ctx.broker.authorizer
    if authorizer is not None and not ctx.authorize(
            AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, log_if_denied=False
    ) and not authorizer.allowed_on_some(ctx.connection.principal, ctx.connection.peer,
                                         AclOperation.WRITE, ResourceType.TOPIC):
        ctx.authorize(AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER)  # logs the denial
        return answer(ErrorCode.cluster_authorization_failed)
    lm = ctx.broker.log_manager
    if lm is None:
        return answer(ErrorCode.coordinator_not_available)
    try:
        pid = lm.allocate_producer_id()
    except Exception as exc:  # a failed write of the id block: the client retries
        code, _ = error_of(exc)
        return answer(code if code is not ErrorCode.unknown_server_error
                      else ErrorCode.coordinator_not_available)
    return answer(ErrorCode.none, pid, 0)
