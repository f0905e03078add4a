"""The table of implemented APIs: which handler serves each API key, and for which versions.

Handlers register with :func:`api_handler`; ApiVersions advertises exactly this table and the
processor refuses (closes) anything outside it, so both always agree.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from .context import RequestContext

HandlerFn = Callable[["RequestContext", Any], Awaitable[Any]]


@attrs.frozen
class ApiHandler:
    api_key: int
    min_version: int
    max_version: int
    handle: HandlerFn
    #: Served on the control-plane listener too (Kafka's controller-facing APIs; plus the
    #: handshake APIs every client needs).
    control_plane: bool = False
    #: The handler waits for nothing but the disk (a long wait is ``Parked`` to the
    #: purgatory): a connection with one request in flight may run it in its own task
    #: (docs/decisions.md, "inline handling").
    inline: bool = False


_HANDLERS: dict[int, ApiHandler] = {}


def api_handler(api_key: int, min_version: int, max_version: int, *,
                control_plane: bool = False,
                inline: bool = False) -> Callable[[HandlerFn], HandlerFn]:
    """Register ``fn`` as the handler of ``api_key`` for versions ``min_version..max_version``."""

    def register(fn: HandlerFn) -> HandlerFn:
        if api_key in _HANDLERS:
            raise ValueError(f"API key {api_key} already has a handler")
        _HANDLERS[api_key] = ApiHandler(api_key, min_version, max_version, fn, control_plane, inline)
        return fn

    return register


def handlers() -> Mapping[int, ApiHandler]:
    from . import handlers as _  # noqa: F401  (importing registers every handler module)

    return _HANDLERS


def supported_versions() -> dict[int, tuple[int, int]]:
    """``{api_key: (min, max)}`` of everything implemented."""
    return {key: (h.min_version, h.max_version) for key, h in sorted(handlers().items())}
