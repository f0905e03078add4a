"""What a handler sees of a request: the decoded request, its connection and the broker."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import attrs

from ..protocol.codec import DecodedRequest

if TYPE_CHECKING:
    from .broker import Broker


@attrs.define
class ConnectionInfo:
    """Facts about one client connection, shared by all its requests."""

    connection_id: str
    listener: str
    security_protocol: str
    peer: str
    processor: int
    principal: str = "User:ANONYMOUS"
    client_software_name: str = "unknown"
    client_software_version: str = "unknown"
    control_plane: bool = False


@attrs.frozen
class Parked:
    """Returned by a handler whose answer comes later (a delayed operation, Kafka's purgatory).

    The handler pool runs ``wait`` in the broker's purgatory nursery, so the handler task is free
    at once; ``wait``'s return value is the response body (or :data:`NO_RESPONSE`).
    """

    wait: Callable[[], Awaitable[Any]]


@attrs.frozen
class EncodedBody:
    """A response body a handler has already encoded (and cached): the pool sends it as is."""

    payload: bytes
    error: str = "NONE"


class _NoResponse:
    def __repr__(self) -> str:
        return "NO_RESPONSE"


#: Returned by a handler when nothing is sent back (Kafka's NoOpResponse: Produce with acks=0).
NO_RESPONSE: Any = _NoResponse()


class CloseConnection(Exception):
    """Raised by a handler to close the connection without answering (CloseConnectionResponse)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


@attrs.define
class RequestContext:
    """One request as handlers see it."""

    request: DecodedRequest
    connection: ConnectionInfo
    broker: Broker
    #: Set by a handler that throttles the client (KIP-219), in milliseconds.
    throttle_ms: int = 0

    @property
    def api_version(self) -> int:
        return self.request.api_version

    def park(self, wait: Callable[[], Awaitable[Any]]) -> Parked:
        """Answer later: see :class:`Parked`."""
        return Parked(wait)
