"""DescribeClientQuotas (48) and AlterClientQuotas (49) for ``ip`` entities.

The quota that exists for IPs is ``connection_creation_rate`` (KIP-612): connections per second
an IP may open before the acceptor throttles it (the socket is closed after the throttle time).
User and client-id quotas (byte rates, request percentage) are not implemented yet and are
refused per entry with INVALID_REQUEST, which names what is supported.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ..client_quotas import CONNECTION_CREATION_RATE, IP_ENTITY, ip_entity_problem
from ..context import RequestContext
from ..registry import api_handler
from ._admin import build, response_module, throttle

DESCRIBE_CLIENT_QUOTAS = 48
ALTER_CLIENT_QUOTAS = 49

#: ``ComponentData.match_type`` codes.
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2

_UNSUPPORTED = (f"only the {CONNECTION_CREATION_RATE} quota of {IP_ENTITY} entities is "
                "supported")


@api_handler(DESCRIBE_CLIENT_QUOTAS, 0, 1)
async def handle_describe_client_quotas(ctx: RequestContext, body: Any) -> Any:
    module = response_module(DESCRIBE_CLIENT_QUOTAS, ctx.api_version)
    quotas = ctx.broker.client_quotas
    rates = quotas.ip_connection_rates() if quotas is not None else {}
    entries = []
    for ip, rate in sorted(rates.items(), key=lambda item: item[0] or ""):
        if not all(_matches(component, ip) for component in body.components):
            continue
        entries.append(build(
            module.EntryData,
            entity=(build(module.EntityData, entity_type=IP_ENTITY, entity_name=ip),),
            values=(build(module.ValueData, key=CONNECTION_CREATION_RATE, value=rate),)))
    return build(module.DescribeClientQuotasResponse, throttle_time=throttle(ctx),
                 error_code=ErrorCode.none, error_message=None, entries=tuple(entries))


def _matches(component: Any, ip: str | None) -> bool:
    """Whether an ip entity matches one filter component (other entity types never do)."""
    if component.entity_type != IP_ENTITY:
        return False
    if component.match_type == MATCH_EXACT:
        return ip is not None and ip == component.match
    if component.match_type == MATCH_DEFAULT:
        return ip is None
    return True


@api_handler(ALTER_CLIENT_QUOTAS, 0, 1)
async def handle_alter_client_quotas(ctx: RequestContext, body: Any) -> Any:
    module = response_module(ALTER_CLIENT_QUOTAS, ctx.api_version)
    quotas = ctx.broker.client_quotas
    changes: dict[str | None, float | None] = {}
    results = []
    for entry in body.entries:
        code, message, change = _entry_change(entry)
        if quotas is None and code is ErrorCode.none:
            code, message = ErrorCode.invalid_request, "client quotas are not available"
        if change is not None and code is ErrorCode.none:
            changes.update(change)
        entity = tuple(build(module.EntityData, entity_type=e.entity_type,
                             entity_name=e.entity_name) for e in entry.entity)
        results.append(build(module.EntryData, error_code=code, error_message=message,
                             entity=entity))
    if changes and quotas is not None and not body.validate_only:
        quotas.set_ip_connection_rates(changes)
    return build(module.AlterClientQuotasResponse, throttle_time=throttle(ctx),
                 entries=tuple(results))


def _entry_change(entry: Any) -> tuple[ErrorCode, str | None, dict[str | None, float | None]
                                        | None]:
    """Kafka's checks for one entry; the change it asks for when they pass."""
    if len(entry.entity) != 1 or entry.entity[0].entity_type != IP_ENTITY:
        return ErrorCode.invalid_request, _UNSUPPORTED, None
    ip = entry.entity[0].entity_name
    problem = ip_entity_problem(ip)
    if problem is not None:
        return ErrorCode.invalid_request, problem, None
    change: dict[str | None, float | None] = {}
    for op in entry.ops:
        if op.key != CONNECTION_CREATION_RATE:
            return ErrorCode.invalid_request, f"{op.key}: {_UNSUPPORTED}", None
        if op.remove:
            change[ip] = None
        elif op.value <= 0:
            return (ErrorCode.invalid_request,
                    f"{CONNECTION_CREATION_RATE} must be positive, got {op.value}", None)
        else:
            change[ip] = float(op.value)
    return ErrorCode.none, None, change
