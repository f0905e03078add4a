"""Acceptors: one task per listener, as Kafka's Acceptor thread.

The acceptor checks connection quotas, sets socket options and hands each socket to a processor
round-robin: it offers the socket to each processor's channel without blocking and blocks only
on the last try (Kafka's ``mayBlock``); time spent blocked is AcceptorBlockedPercent.
"""

from __future__ import annotations

import errno
import socket
from typing import Protocol

import trio

from ..observability.log import emit
from .processor import Processor, ProcessorServer
from .quotas import ConnectionThrottled, TooManyConnections

# accept() errors that concern one connection or a passing shortage, not the listener (trio's
# serve_listeners makes the same distinction).
_TRANSIENT_ACCEPT_ERRORS = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS,
                            errno.ECONNABORTED, errno.EPROTO, errno.EPERM}


async def open_listening_socket(host: str | None, port: int, *, backlog: int,
                                receive_buffer: int) -> socket.socket:
    """Bind a listening socket (non-blocking), setting SO_RCVBUF before bind as Kafka does.

    A standard library socket: the acceptor calls its ``accept`` directly (module doc of
    :class:`Acceptor`)."""
    infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                          flags=socket.AI_PASSIVE)
    # Prefer IPv4 for "localhost" so clients resolving it to 127.0.0.1 reach us.
    infos.sort(key=lambda info: info[0] != socket.AF_INET)
    family, type_, proto, _, address = infos[0]
    sock = socket.socket(family, type_, proto)
    try:
        sock.setblocking(False)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if receive_buffer != -1:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        sock.bind(address)  # resolved above: nothing here blocks
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        # Kafka's words, naming the address (the bare OSError does not).
        raise OSError(exc.errno, f"Socket server failed to bind to {host or ''}:{port}: "
                                 f"{exc.strerror}.") from exc
    except BaseException:
        sock.close()
        raise
    return sock


class AcceptorServer(ProcessorServer, Protocol):
    """What an acceptor uses of the socket server that owns it (the layer above): exactly what
    its processors use (configuration, quotas, metrics, early-close bookkeeping)."""


#: Connections accepted in a row before the acceptor lets other tasks run, at least (trio's own
#: accept yields after every one). An acceptor takes up to what its processors' queues hold
#: (``queued.max.connections`` each) in one turn: see :attr:`Acceptor.accept_burst`.
ACCEPT_BURST = 8


class Acceptor:
    """Accepts connections on one listener.

    It calls the listening socket's own non-blocking ``accept`` and waits with
    ``wait_readable`` only when nothing is pending, yielding once every
    :attr:`accept_burst` connections: trio's ``accept`` wrapper costs a scheduler pass per
    connection on top (part of Kafka's connection set-up rate, issue 11).
    """

    def __init__(self, server: AcceptorServer, listener: str, sock: socket.socket,
                 processors: list[Processor]) -> None:
        self.server = server
        self.listener = listener
        self._listening = sock
        #: The same socket for trio (closing it wakes the acceptor's wait).
        self.sock = trio.socket.from_stdlib_socket(sock)
        self.processors = processors
        self._next = 0
        self.cancel_scope = trio.CancelScope()
        self.accept_burst = max(ACCEPT_BURST,
                                len(processors) * server.config.queued_max_connections)
        """Connections accepted in one turn of the event loop: as many as the processors'
        queues hold (60 with Kafka's 3 network threads and 20 each). A listen queue of
        Kafka's default 50 is emptied in one turn; taking 8 a turn, a burst of 10,000
        connects kept it full while the kernel dropped handshakes, and 31-968 of them were
        not answered within 10 s (0-518 with 60; docs/decisions.md "10,000 connections")."""

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    async def run(self) -> None:
        with self.cancel_scope:
            try:
                # Throttled sockets wait here to be closed (Kafka's throttledSockets); shutdown
                # cancels the waits and closes them at once.
                async with trio.open_nursery() as throttled_sockets:
                    await self._accept_loop(throttled_sockets)
            finally:
                self.sock.close()

    async def _accept_loop(self, throttled_sockets: trio.Nursery) -> None:
        quotas = self.server.quotas
        listening = self._listening
        accept_burst = self.accept_burst
        burst = 0
        while True:
            waited_since = trio.current_time()
            reason = await quotas.wait_for_slot(self.listener)
            if reason is not None:
                self._blocked(reason, waited_since)
            if burst >= accept_burst:
                # Before accept, never after: a socket accepted is never held across a
                # checkpoint, where a cancellation would lose it.
                burst = 0
                await trio.lowlevel.checkpoint()
            while True:
                try:
                    std_conn, address = listening.accept()
                except BlockingIOError:
                    pass
                except OSError as exc:
                    if exc.errno not in _TRANSIENT_ACCEPT_ERRORS:
                        raise
                    await trio.sleep(0.1)
                    continue
                else:
                    break
                # Outside the except clause, so no exception lives on while waiting.
                burst = 0
                await trio.lowlevel.wait_readable(listening)
            burst += 1
            conn = trio.socket.from_stdlib_socket(std_conn)
            ip, port = str(address[0]), int(address[1])
            try:
                quotas.inc(self.listener, ip)
            except ConnectionThrottled as exc:
                self._rejected(ip, port, "ip_rate_throttled", -1,
                               f"closing after {exc.throttle_seconds * 1000:.0f} ms")
                throttled_sockets.start_soon(_close_after, conn, exc.throttle_seconds)
                continue
            except TooManyConnections as exc:
                conn.close()
                self._rejected(ip, port, "per_ip_limit", exc.limit, "")
                continue
            try:
                self._configure(conn)
            except OSError as exc:  # Kafka's testExceptionInAcceptor: close, uncount
                conn.close()
                quotas.dec(self.listener, ip)
                self.server.connection_closed_early(self.listener, ip, "error", repr(exc))
                continue
            await self._hand_off(conn, ip, port)

    def _rejected(self, ip: str, port: int, reason: str, limit: int, detail: str) -> None:
        self.server.metrics.connection_rejected.labels(self.listener, reason).inc()
        emit("connection_rejected", listener=self.listener, ip=ip, peer=f"{ip}:{port}",
             reason=reason, limit=limit, detail=detail)

    def _configure(self, conn: trio.socket.SocketType) -> None:
        config = self.server.config
        # TCP_NODELAY: trio.SocketStream sets it (the processor wraps the socket in one).
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        if config.socket_send_buffer_bytes != -1:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, config.socket_send_buffer_bytes)

    async def _hand_off(self, conn: trio.socket.SocketType, ip: str, port: int) -> None:
        """Round-robin: offer to each processor without blocking; block on the last one."""
        item = (conn, ip, port)
        for _ in range(len(self.processors)):
            processor = self.processors[self._next]
            self._next = (self._next + 1) % len(self.processors)
            try:
                processor.new_connections.send_nowait(item)
                return
            except trio.WouldBlock:
                continue
        waited_since = trio.current_time()
        try:
            await processor.new_connections.send(item)
        except BaseException:
            conn.close()
            self.server.quotas.dec(self.listener, ip)
            raise
        self._blocked("processor_queue_full", waited_since)

    def _blocked(self, reason: str, since: float) -> None:
        blocked = trio.current_time() - since
        self.server.metrics.acceptor_blocked_seconds.labels(self.listener).inc(blocked)
        emit("acceptor_blocked", listener=self.listener, reason=reason,
             blocked_ms=round(blocked * 1000, 3))


async def _close_after(conn: trio.socket.SocketType, delay: float) -> None:
    """Kafka's DelayedCloseSocket: a throttled client learns of it only after the delay."""
    try:
        await trio.sleep(delay)
    finally:
        conn.close()
