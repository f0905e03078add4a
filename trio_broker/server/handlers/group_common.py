"""Helpers shared by the group and offset handlers (no handler is registered here).

One handler serves many versions of an API. kio generates one dataclass per version, with only
that version's fields, so responses are built from keyword arguments filtered to the fields of
the version's class, and nested classes are looked up by name in the same module.
"""

from __future__ import annotations

import datetime
import sys
from typing import Any

from ...protocol.codec import response_schema
from ..context import RequestContext
from ._admin import build, has_field, throttle

__all__ = ["build", "client_host", "coordinator", "has_field", "millis", "nested",
           "response_class", "throttle"]


def response_class(ctx: RequestContext) -> type[Any]:
    cls: type[Any] = response_schema(ctx.request.api_key, ctx.api_version)
    return cls


def nested(cls: type[Any], name: str) -> type[Any]:
    """A nested entity class generated in the same module as ``cls``."""
    found: type[Any] = getattr(sys.modules[cls.__module__], name)
    return found


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
