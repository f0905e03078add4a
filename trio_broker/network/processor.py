"""Processors: Kafka's network threads, as tasks that own their connections.

Each processor receives accepted sockets through a memory channel of capacity
``queued.max.connections`` (Kafka's ``newConnections`` queue) and runs one task per connection in
its own nursery, so cancelling a processor closes exactly its connections.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import trio

from ..config import INT_MAX
from ..server.context import ConnectionInfo
from .connection import Connection, ConnectionServer
from .request_channel import RequestChannel

if TYPE_CHECKING:
    from ..observability.metrics import BrokerMetrics
    from ..security.listeners import ListenerSecurity
    from .quotas import ConnectionQuotas


class ProcessorServer(ConnectionServer, Protocol):
    """What a processor uses of the socket server that owns it (the layer above)."""

    @property
    def quotas(self) -> ConnectionQuotas: ...

    @property
    def metrics(self) -> BrokerMetrics: ...

    def connection_closed_early(self, listener: str, ip: str, reason: str, detail: str = ""
                                ) -> None:
        """A socket closed before it became a connection."""


class Processor:
    """One processor of one listener."""

    def __init__(self, server: ProcessorServer, processor_id: int, listener: str,
                 security_protocol: str, request_channel: RequestChannel, *,
                 control_plane: bool = False, security: ListenerSecurity | None = None) -> None:
        self.server = server
        self.id = processor_id
        self.listener = listener
        self.security_protocol = security_protocol
        self.request_channel = request_channel
        self.control_plane = control_plane
        #: TLS and SASL of the listener (None: PLAINTEXT).
        self.security = security
        capacity = server.config.queued_max_connections
        self.new_connections, self._new_connections_in = trio.open_memory_channel[
            tuple[trio.socket.SocketType, str, int]](capacity)
        self.connections: set[Connection] = set()
        idle_ms = server.config.connections_max_idle_ms
        self._idle_seconds = idle_ms / 1000 if idle_ms >= 0 else None
        #: Kafka's IdleExpiryManager: every connection by its last read or send, least recent
        #: first (a dict keeps insertion order; Connection._touch moves one to the end).
        self.idle_lru: dict[Connection, float] | None = (
            {} if self._idle_seconds is not None else None)
        self._idle_lot = trio.lowlevel.ParkingLot()
        self._next_index = 0
        self._ids_in_use: set[str] = set()
        self.cancel_scope = trio.CancelScope()
        # This listener's metric children, looked up once (``labels()`` takes a lock and
        # builds a key on every call). ConnectionCount is read from ``connections`` when
        # scraped (SocketServer), not counted per connection.
        metrics = server.metrics
        self._connection_creation = metrics.connection_creation.labels(listener)
        self._connection_close: dict[str, Any] = {}

    def _connection_id(self, sock: trio.socket.SocketType, ip: str, port: int) -> str:
        """Kafka's ``localIp:localPort-remoteIp:remotePort-processorId-index``; the remote
        address is the one accept() returned (getpeername would be one more system call)."""
        local = sock.getsockname()
        index = self._next_index
        self._next_index = 0 if index == INT_MAX else index + 1
        return f"{local[0]}:{local[1]}-{ip}:{port}-{self.id}-{index}"

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            with self.cancel_scope:
                async with trio.open_nursery() as nursery:
                    if self.idle_lru is not None:
                        nursery.start_soon(self._expire_idle, name="trio_broker idle expiry")
                    task_status.started()
                    queued = self._new_connections_in
                    async for sock, ip, port in queued:
                        self._configure(nursery, sock, ip, port)
                        # Everything else queued meanwhile, without a scheduler pass each
                        # (a receive that finds an item waiting still yields once).
                        while True:
                            try:
                                sock, ip, port = queued.receive_nowait()
                            except trio.WouldBlock:
                                break
                            self._configure(nursery, sock, ip, port)
        finally:
            self._close_queued()

    async def _expire_idle(self) -> None:
        """Close connections idle for ``connections.max.idle.ms``: sleep until the least
        recently active connection's deadline, expire it if it is still the least recently
        active one and has had no activity since (Kafka's Selector checks the same map once
        per poll). Exact: a connection expires at its last read or send plus the idle time."""
        lru = self.idle_lru
        idle = self._idle_seconds
        assert lru is not None and idle is not None
        while True:
            if not lru:
                await self._idle_lot.park()
                continue
            connection, last = next(iter(lru.items()))
            deadline = last + idle
            if trio.current_time() >= deadline:
                del lru[connection]
                connection.expire()
            else:
                await trio.sleep_until(deadline)

    def _close_queued(self) -> None:
        """Close sockets accepted but never configured (Kafka's processor exit does too)."""
        while True:
            try:
                sock, ip, _port = self._new_connections_in.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                break
            sock.close()
            self.server.quotas.dec(self.listener, ip)
            self.server.connection_closed_early(self.listener, ip, "shutdown")
        self._new_connections_in.close()

    def _configure(self, nursery: trio.Nursery, sock: trio.socket.SocketType, ip: str,
                   port: int) -> None:
        try:
            connection_id = self._connection_id(sock, ip, port)
        except OSError as exc:  # the peer is already gone: Kafka closes and releases its slot
            sock.close()
            self.server.quotas.dec(self.listener, ip)
            self.server.connection_closed_early(self.listener, ip, "error", repr(exc))
            return
        if connection_id in self._ids_in_use:
            # Kafka's Selector.register refuses a duplicate id; the count is released.
            sock.close()
            self.server.quotas.dec(self.listener, ip)
            self.server.connection_closed_early(self.listener, ip, "duplicate_connection_id")
            return
        info = ConnectionInfo(
            connection_id=connection_id, listener=self.listener,
            security_protocol=self.security_protocol, peer=f"{ip}:{port}", processor=self.id,
            control_plane=self.control_plane,
        )
        stream: trio.SocketStream | trio.SSLStream[trio.SocketStream] = trio.SocketStream(sock)
        security = self.security
        if security is not None:
            info.auth = security.new_authenticator()
            if security.ssl_context is not None:
                # The handshake runs in the connection's task, never here (docs/security.md).
                stream = trio.SSLStream(trio.SocketStream(sock), security.ssl_context,
                                        server_side=True)
        connection = Connection(stream, info, self, ip, security=security)
        self._ids_in_use.add(connection_id)
        self.connections.add(connection)
        lru = self.idle_lru
        if lru is not None:
            if not lru:
                self._idle_lot.unpark_all()
            lru[connection] = trio.current_time()
        self._connection_creation.inc()
        # One shared task name: a per-connection string would cost ~100 bytes per connection
        # (the id is in every event the task logs).
        nursery.start_soon(connection.run, name="trio_broker connection")

    def connection_closed(self, connection: Connection, reason: str) -> None:
        self.connections.discard(connection)
        self._ids_in_use.discard(connection.info.connection_id)
        if self.idle_lru is not None:
            self.idle_lru.pop(connection, None)
        self.server.quotas.dec(self.listener, connection.ip)
        closed = self._connection_close.get(reason)
        if closed is None:
            closed = self._connection_close[reason] = \
                self.server.metrics.connection_close.labels(self.listener, reason)
        closed.inc()
        self.server.connection_progressed()

    def stop_reading(self) -> None:
        for connection in list(self.connections):
            connection.stop_reading()

    @property
    def response_queue_size(self) -> int:
        return sum(c.ready_responses for c in self.connections)
