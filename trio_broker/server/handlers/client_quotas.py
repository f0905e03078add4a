"""DescribeClientQuotas (48) and AlterClientQuotas (49): user, client-id and ip entities.

What ``kafka-configs.sh --entity-type users/clients/ips`` and the AdminClient send. The quotas
and Kafka's checks live in :mod:`trio_broker.server.client_quotas`; this module maps them onto
the wire. An entry that fails a check gets INVALID_REQUEST with Kafka's message; a filter Kafka
refuses fails the whole describe (error code and message, no entries).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ..acl import AclOperation, ResourceType
from ..client_quotas import USER, Alteration, Entity, QuotaProblem
from ..context import RequestContext
from ..registry import api_handler
from ._admin import build, response_module, throttle

DESCRIBE_CLIENT_QUOTAS = 48
ALTER_CLIENT_QUOTAS = 49

_UNAVAILABLE = "client quotas are not available"


def _entity_data(module: Any, entity: Entity) -> tuple[Any, ...]:
    # user before client-id, as Kafka's tools print them
    ordered = sorted(entity, key=lambda pair: pair[0] != USER)
    return tuple(build(module.EntityData, entity_type=kind, entity_name=name)
                 for kind, name in ordered)


@api_handler(DESCRIBE_CLIENT_QUOTAS, 0, 1)
async def handle_describe_client_quotas(ctx: RequestContext, body: Any) -> Any:
    module = response_module(DESCRIBE_CLIENT_QUOTAS, ctx.api_version)
    quotas = ctx.broker.client_quotas

    def answer(code: ErrorCode, message: str | None, entries: Any) -> Any:
        return build(module.DescribeClientQuotasResponse, throttle_time=throttle(ctx),
                     error_code=code, error_message=message, entries=entries)

    if not ctx.authorize(AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER):
        return answer(ErrorCode.cluster_authorization_failed, None, None)
    if quotas is None:
        return answer(ErrorCode.invalid_request, _UNAVAILABLE, None)
    try:
        found = quotas.describe(((c.entity_type, int(c.match_type), c.match)
                                 for c in body.components), bool(body.strict))
    except QuotaProblem as problem:
        return answer(ErrorCode[problem.error], problem.message, None)
    entries = tuple(
        build(module.EntryData, entity=_entity_data(module, entity),
              values=tuple(build(module.ValueData, key=key, value=value)
                           for key, value in sorted(values.items())))
        for entity, values in found)
    return answer(ErrorCode.none, None, entries)


@api_handler(ALTER_CLIENT_QUOTAS, 0, 1)
async def handle_alter_client_quotas(ctx: RequestContext, body: Any) -> Any:
    module = response_module(ALTER_CLIENT_QUOTAS, ctx.api_version)
    quotas = ctx.broker.client_quotas
    alterations = [
        Alteration(entity=tuple((e.entity_type, e.entity_name) for e in entry.entity),
                   ops=tuple((op.key, None if op.remove else float(op.value))
                             for op in entry.ops))
        for entry in body.entries]
    results: list[tuple[Entity, QuotaProblem | None]]
    if not ctx.authorize(AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER):
        results = [(tuple(a.entity), QuotaProblem("cluster_authorization_failed",
                                                  "Cluster authorization failed."))
                   for a in alterations]
    elif quotas is None:
        results = [(tuple(a.entity), QuotaProblem("invalid_request", _UNAVAILABLE))
                   for a in alterations]
    else:
        results = await quotas.alter(alterations, validate_only=bool(body.validate_only))
    entries = tuple(
        build(module.EntryData,
              error_code=ErrorCode.none if problem is None else ErrorCode[problem.error],
              error_message=None if problem is None else problem.message,
              entity=_entity_data(module, entity))
        for entity, problem in results)
    return build(module.AlterClientQuotasResponse, throttle_time=throttle(ctx), entries=entries)
