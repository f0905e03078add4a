"""The SocketServer: listeners, acceptors, processors and request channels of one broker.

``serve(task_status=...)`` binds every listener first, then starts the processors and acceptors
in its nursery, and only then reports started: readiness means really listening. The shutdown
steps (:meth:`stop_accepting`, :meth:`stop_reading`, :meth:`wait_drained`,
:meth:`close_connections`) are called in Kafka's order by the broker.
"""

from __future__ import annotations

import functools

import attrs
import trio

from ..config import BrokerConfig, Endpoint
from ..observability.log import emit, emit_fields
from ..observability.metrics import BrokerMetrics
from ..protocol.codec import api_name
from ..security.listeners import ListenerSecurity, listener_security
from .acceptor import Acceptor, open_listening_socket
from .memory_pool import MemoryPool, UnboundedPool
from .processor import Processor
from .quotas import ConnectionQuotas
from .request_channel import Request, RequestChannel

#: Kafka's control-plane request channel capacity (SocketServer).
CONTROL_PLANE_QUEUE_SIZE = 20
#: Fetch, from the version that carries a fetch session (KIP-227): its request line names it.
FETCH_KEY = 1
FETCH_SESSION_VERSION = 7


@attrs.frozen
class BoundListener:
    """A listener after bind: its configured endpoint and the port it really got."""

    endpoint: Endpoint
    port: int
    security_protocol: str
    control_plane: bool

    @property
    def name(self) -> str:
        return self.endpoint.listener_name


class SocketServer:
    """Every network-layer task of one broker."""

    def __init__(self, config: BrokerConfig, metrics: BrokerMetrics,
                 supported_versions: dict[int, tuple[int, int]],
                 security: dict[str, ListenerSecurity] | None = None) -> None:
        self.config = config
        #: TLS contexts and SASL settings by listener; built here (reading the keystores) so a
        #: bad one fails the start with an error naming its key.
        self.security = security if security is not None else listener_security(config)
        self.metrics = metrics
        self.supported_versions = supported_versions
        self.quotas = ConnectionQuotas(config)
        self.memory_pool: MemoryPool | UnboundedPool = (
            MemoryPool(config.queued_max_request_bytes)
            if config.queued_max_request_bytes > 0 else UnboundedPool())
        self.data_plane_channel = RequestChannel(config.queued_max_requests, "data-plane")
        self.control_plane_channel: RequestChannel | None = None
        control = config.control_plane_listener_name
        self.control_plane_listener = control.upper() if control else None
        if self.control_plane_listener:
            self.control_plane_channel = RequestChannel(CONTROL_PLANE_QUEUE_SIZE, "control-plane")
        self.acceptors: list[Acceptor] = []
        self.processors: list[Processor] = []
        self.bound: list[BoundListener] = []
        self._progress = trio.lowlevel.ParkingLot()
        self._register_gauges()

    def _register_gauges(self) -> None:
        m = self.metrics
        m.request_queue_size.labels("data").set_function(lambda: self.data_plane_channel.queue_size)
        if self.control_plane_channel is not None:
            channel = self.control_plane_channel
            m.request_queue_size.labels("control").set_function(lambda: channel.queue_size)
        m.response_queue_size.set_function(lambda: self.response_queue_size)
        m.memory_pool_available.set_function(lambda: self.memory_pool.available)
        m.memory_pool_used.set_function(lambda: self.memory_pool.used)

    @property
    def response_queue_size(self) -> int:
        return sum(p.response_queue_size for p in self.processors)

    @property
    def connection_count(self) -> int:
        return self.quotas.total

    async def serve(self, *, task_status: trio.TaskStatus[list[BoundListener]]
                    = trio.TASK_STATUS_IGNORED) -> None:
        """Bind, start processors and acceptors, report the bound listeners, run until cancelled."""
        sockets = []
        try:
            for endpoint in self.config.endpoints:
                sock = await open_listening_socket(
                    endpoint.bind_host, endpoint.port,
                    backlog=self.config.socket_listen_backlog_size,
                    receive_buffer=self.config.socket_receive_buffer_bytes)
                sockets.append((endpoint, sock))
        except BaseException:
            for _, sock in sockets:
                sock.close()
            raise
        protocols = self.config.security_protocols
        next_processor_id = 0
        for endpoint, sock in sockets:
            name = endpoint.listener_name
            control = name == self.control_plane_listener
            protocol = protocols[name]
            self.quotas.add_listener(name)
            count = 1 if control else self.config.listener_setting(name, "num.network.threads")
            channel = self.control_plane_channel if control else self.data_plane_channel
            assert channel is not None
            processors = []
            for _ in range(count):
                processors.append(Processor(self, next_processor_id, name, protocol, channel,
                                            control_plane=control,
                                            security=self.security.get(name)))
                next_processor_id += 1
            self.processors += processors
            # ConnectionCount, read from the processors when scraped (no per-connection work).
            self.metrics.connection_count.labels(name).set_function(
                functools.partial(_open_connections, processors))
            acceptor = Acceptor(self, name, sock, processors)
            self.acceptors.append(acceptor)
            bound = BoundListener(endpoint, acceptor.port, protocol, control)
            self.bound.append(bound)
            emit("listener_bound", listener=name, host=endpoint.host, port=bound.port,
                 security_protocol=protocol, control_plane=control)
        try:
            async with trio.open_nursery() as nursery:
                for processor in self.processors:
                    await nursery.start(processor.run)
                for acceptor in self.acceptors:
                    nursery.start_soon(acceptor.run, name=f"acceptor {acceptor.listener}")
                task_status.started(list(self.bound))
        finally:
            for acceptor in self.acceptors:
                acceptor.sock.close()

    # ------------------------------------------------------------- shutdown steps
    def stop_accepting(self) -> None:
        for acceptor in self.acceptors:
            acceptor.cancel_scope.cancel()

    def stop_reading(self) -> None:
        for processor in self.processors:
            processor.stop_reading()

    async def wait_drained(self) -> None:
        """Wait until every connection has sent the responses of the requests it read."""
        while any(c.requests_in_flight for p in self.processors for c in p.connections):
            await self._progress.park()

    def connection_progressed(self) -> None:
        """A connection sent responses or closed: wake :meth:`wait_drained`."""
        if self._progress:  # unpark_all builds lists even when nobody waits (per request)
            self._progress.unpark_all()

    def close_connections(self) -> None:
        for processor in self.processors:
            processor.cancel_scope.cancel()

    # ------------------------------------------------------------- bookkeeping
    def connection_closed_early(self, listener: str, ip: str, reason: str, detail: str = ""
                                ) -> None:
        """A socket closed before it became a connection (configure failure, shutdown)."""
        self.metrics.connection_rejected.labels(listener, reason).inc()
        emit("connection_rejected", listener=listener, ip=ip, peer=ip, reason=reason,
             limit=-1, detail=detail)

    def request_completed(self, request: Request, *, dropped: bool = False) -> None:
        """Metrics and the canonical log line for one finished request."""
        decoded = request.decoded
        slot = request.slot
        timings = request.timings_ms()
        api = api_name(decoded.api_key)
        self.metrics.observe_request(api, decoded.api_version, timings, slot.error, request.size)
        info = request.owner.info
        # ``_value_``: an Enum's ``.value`` is a Python-level descriptor (this runs per request)
        action = "dropped" if dropped else (slot.action._value_ if slot.action else "none")
        # A dict literal handed to emit_fields: the same line as emit("request", ...), without
        # repacking 19 keyword arguments (about 1 µs per request).
        fields = {
            "api": api, "api_key": decoded.api_key, "api_version": decoded.api_version,
            "correlation_id": decoded.correlation_id, "client_id": decoded.client_id or "",
            "client_software_name": info.client_software_name,
            "client_software_version": info.client_software_version,
            "principal": info.principal, "request_bytes": request.size,
            "response_bytes": len(slot.payload), "error": slot.error,
            "response_action": action,
        }
        fields.update(timings)
        body = decoded.body
        if (decoded.api_key == FETCH_KEY and decoded.api_version >= FETCH_SESSION_VERSION
                and hasattr(body, "session_epoch")):
            fields["fetch_session_id"] = int(body.session_id)
            fields["fetch_session_epoch"] = int(body.session_epoch)
        if request.sequence_errors:
            fields["sequence_errors"] = request.sequence_errors
        emit_fields("request", fields)


def _open_connections(processors: list[Processor]) -> int:
    return sum(len(processor.connections) for processor in processors)


def advertised_endpoints(config: BrokerConfig, bound: list[BoundListener]) -> dict[str, Endpoint]:
    """What Metadata tells clients: advertised.listeners, else each listener with its real port.

    A listener bound to every interface is advertised under the host name clients can reach it
    by (Kafka uses the canonical host name; we use "localhost" for loopback-only machines).
    """
    advertised = {e.listener_name: e for e in config.advertised_endpoints}
    result: dict[str, Endpoint] = {}
    for listener in bound:
        explicit = advertised.get(listener.name)
        if explicit is not None:
            result[listener.name] = explicit
            continue
        host = listener.endpoint.host or _default_advertised_host()
        result[listener.name] = Endpoint(listener.name, host, listener.port)
    return result


def _default_advertised_host() -> str:
    import socket

    try:
        return socket.getfqdn() or "localhost"
    except OSError:
        return "localhost"

