"""What a handler sees of a request: the decoded request, its connection and the broker."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import attrs

from ..protocol.codec import DecodedRequest
from .acl import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from ..network.turns import Turns
    from ..security.sasl import SaslAuthenticator
    from .broker import Broker

#: The largest ``throttle_time_ms`` a response can carry (an INT32).
INT32_MAX = 2**31 - 1


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
    #: The SASL state of a SASL_PLAINTEXT or SASL_SSL connection (None on other listeners); it
    #: sets ``principal`` when the client authenticates.
    auth: SaslAuthenticator | None = None
    #: A pipelining connection's Produce requests take turns in the order they were read
    #: (created by the first one; a connection with one request in flight needs none).
    produce_turns: Turns | None = None

    @property
    def user(self) -> str:
        """The quota user: the principal's name (``ANONYMOUS`` when unauthenticated)."""
        principal = self.principal
        return principal.partition(":")[2] if principal.startswith("User:") else principal


@attrs.frozen
class Parked:
    """Returned by a handler whose answer comes later (a delayed operation, Kafka's purgatory).

    The handler pool runs ``wait`` in the broker's purgatory nursery, so the handler task is free
    at once; ``wait``'s return value is the response body (or :data:`NO_RESPONSE`).
    """

    wait: Callable[[], Awaitable[Any]]


@attrs.frozen
class EncodedBody:
    """A response body a handler has already encoded (and cached): the pool sends it as is.

    ``framed``: ``payload`` is the whole frame (size and response header included).
    """

    payload: bytes
    error: str = "NONE"
    framed: bool = False


class _NoResponse:
    def __repr__(self) -> str:
        return "NO_RESPONSE"


#: Returned by a handler when nothing is sent back (Kafka's NoOpResponse: Produce with acks=0).
NO_RESPONSE: Any = _NoResponse()


class CloseConnection(Exception):
    """Raised by a handler to close the connection without answering (CloseConnectionResponse);
    with ``response``, that response is sent first (a failed SASL authentication, as Kafka's
    authenticator sends its failure response and then closes)."""

    def __init__(self, reason: str, response: Any = None) -> None:
        self.reason = reason
        self.response = response
        super().__init__(reason)


@attrs.define
class RequestContext:
    """One request as handlers see it."""

    request: DecodedRequest
    connection: ConnectionInfo
    broker: Broker
    #: Set by a handler that throttles the client (KIP-219), in milliseconds.
    throttle_ms: int = 0
    #: The quota type (its config key, e.g. ``producer_byte_rate``) behind ``throttle_ms``.
    throttle_quota: str = ""
    #: Size of the request frame in bytes (what producer_byte_rate counts).
    size: int = 0
    #: When a handler task took the request, and when the handler returned or parked it
    #: (``time.perf_counter_ns``): the handler time request_percentage counts.
    dequeue_ns: int = 0
    local_complete_ns: int = 0
    #: Whether the handler time has been charged to request_percentage already.
    request_quota_recorded: bool = False
    #: The request line's ``sequence_errors`` (events.py): what a Produce's partitions'
    #: producer state refused, set by the handler; empty when nothing was.
    sequence_errors: str = ""

    @property
    def api_version(self) -> int:
        return self.request.api_version

    @property
    def client_id(self) -> str:
        return self.request.client_id or ""

    @property
    def user(self) -> str:
        """The quota user of the request's connection."""
        return self.connection.user

    def authorize(self, op: AclOperation, resource_type: ResourceType,
                  name: str = CLUSTER_NAME, *, log_if_denied: bool = True) -> bool:
        """Whether the request's principal, from its peer's IP, may do ``op`` on the resource
        (always, when authorization is off). The one entry point of every handler's checks,
        as Kafka's ``AuthHelper.authorize``."""
        authorizer = self.broker.authorizer
        if authorizer is None:
            return True
        connection = self.connection
        return authorizer.authorize(connection.principal, connection.peer, op, resource_type,
                                    name, log_if_denied=log_if_denied)

    def authorized_operations(self, resource_type: ResourceType, name: str,
                              unrestricted: int) -> int:
        """An authorized-operations bit field: ``unrestricted`` (what the resource supports)
        when authorization is off, else the operations the principal may do."""
        authorizer = self.broker.authorizer
        if authorizer is None:
            return unrestricted
        return authorizer.authorized_operations(self.connection.principal, self.connection.peer,
                                                resource_type, name)

    def cluster_authorized_operations(self, unrestricted: int) -> int:
        """The cluster's authorized-operations field (Metadata, DescribeCluster): 0 without
        DESCRIBE on the cluster, as Kafka's ``computeDescribeClusterResponse``."""
        if self.broker.authorizer is None:
            return unrestricted
        if not self.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER):
            return 0
        return self.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME, unrestricted)

    def throttle(self, throttle_ms: int, quota_type: str, *, wins_ties: bool = False) -> None:
        """Throttle the response for a quota; the longest throttle wins. Kafka names the
        request quota on a tie with a byte-rate or mutation quota (``wins_ties``)."""
        # throttle_time_ms is an INT32: a tiny quota against a big request (producer_byte_rate=1,
        # 30 MB) asks for more, which failed the response's encoding after the records were
        # written (Kafka's toInt wraps it); the longest throttle the field can carry instead.
        throttle_ms = min(throttle_ms, INT32_MAX)
        if throttle_ms > self.throttle_ms or (wins_ties and throttle_ms == self.throttle_ms > 0):
            self.throttle_ms = throttle_ms
            self.throttle_quota = quota_type

    def handler_nanos(self) -> int:
        """Handler time so far, or until the handler parked the request."""
        end = self.local_complete_ns or time.perf_counter_ns()
        return max(end - self.dequeue_ns, 0) if self.dequeue_ns else 0

    def park(self, wait: Callable[[], Awaitable[Any]]) -> Parked:
        """Answer later: see :class:`Parked`."""
        return Parked(wait)
