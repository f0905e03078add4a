"""Helpers shared by the group and offset handlers (no handler is registered here).

One handler serves many versions of an API. kio generates one dataclass per version, with only
that version's fields, so responses are built from keyword arguments filtered to the fields of
the version's class, and nested classes are looked up by name in the same module.
"""

from __future__ import annotations

import dataclasses
import datetime
import sys
from typing import Any

from ...protocol.codec import response_schema
from ..context import RequestContext

_FIELD_NAMES: dict[type[Any], frozenset[str]] = {}


def _field_names(cls: type[Any]) -> frozenset[str]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = frozenset(f.name for f in dataclasses.fields(cls))
    return names


def build(cls: type[Any], **fields: Any) -> Any:
    """An instance of ``cls`` from the fields it has (the others are this version's absentees)."""
    names = _field_names(cls)
    return cls(**{k: v for k, v in fields.items() if k in names})


def has_field(cls: type[Any], name: str) -> bool:
    return name in _field_names(cls)


def response_class(ctx: RequestContext) -> type[Any]:
    cls: type[Any] = response_schema(ctx.request.api_key, ctx.api_version)
    return cls


def nested(cls: type[Any], name: str) -> type[Any]:
    """A nested entity class generated in the same module as ``cls``."""
    found: type[Any] = getattr(sys.modules[cls.__module__], name)
    return found


def throttle(ctx: RequestContext) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ctx.throttle_ms)


def millis(value: Any, default: int = -1) -> int:
    """A kio duration field (``timedelta``) in whole milliseconds."""
    if value is None:
        return default
    if isinstance(value, datetime.timedelta):
        return int(round(value.total_seconds() * 1000))
    return int(value)


def client_host(ctx: RequestContext) -> str:
    """The client's address as Kafka reports it (``/ip``)."""
    peer = ctx.connection.peer
    host = peer.rsplit(":", 1)[0] if ":" in peer else peer  # "ip:port", IPv6 without brackets
    return "/" + host.strip("[]")


def coordinator(ctx: RequestContext) -> Any:
    """The broker's group coordinator, or None when this broker runs without one."""
    return ctx.broker.group_coordinator
