"""One client connection: Kafka's KafkaChannel plus the processor's work for it.

This module is the connection's life (TLS handshake, idle expiry, close) and its **reader**; the
**writer**, which sends responses in request order, is :mod:`.response_writer`, whose
:class:`~.response_writer.ResponseWriter` ``Connection`` inherits.

The reader reads frames (sans-IO :class:`FrameDecoder`), decodes them, and sends them into the
request channel. Muting is simply not reading: before each frame it waits while the in-flight
limit is reached, while the connection is throttled (KIP-219), and while the memory pool cannot
hold the frame. TCP flow control pushes back on the client. A plain socket
(``Connection.raw_socket``) is read with a non-blocking ``recv`` that waits only when nothing is
there (:func:`_read_nowait`).

With Kafka's one request in flight (the default) reading and writing alternate in the
connection's one task: read, hand over, wait for the answer, send, read on; Kafka's
``ChannelMuteState`` machine tracks it. With ``connection.max.inflight.requests`` > 1
(AutoMQ-style pipelining) the writer is a second task in the connection's nursery.

Idle expiry is a cancel scope around both, cancelled by the processor once the connection
has had no read or send for ``connections.max.idle.ms`` (Kafka's IdleExpiryManager).

**Reading while a write is blocked.** When the kernel will not take a whole response the writer
waits, and meanwhile runs the reader's :meth:`Connection._read_ahead`: it keeps moving bytes from
the socket into the :class:`FrameDecoder`, up to :data:`READ_AHEAD_BYTES` and only while the
memory pool has room, so that the peer's ACKs are not dropped (issue 9; the writer's module doc).
Frames are still decoded and dispatched only by the reader, so muting keeps its meaning.
"""

from __future__ import annotations

import contextlib
import math
import os
import weakref
from typing import TYPE_CHECKING, Protocol

import trio

from ..observability.log import bind_connection, emit
from ..offload import collector_pause, in_worker
from ..protocol.codec import (
    API_VERSIONS_KEY,
    InvalidRequest,
    decode_request,
    valid_client_software,
)
from ..protocol.framing import FrameDecoder, InvalidFrameSize
from ..security.raw_sasl import serve_raw_token
from ..security.sasl import loggable_principal
from .memory_pool import MemoryPool, UnboundedPool
from .mute import ChannelMute, MuteEvent, MuteState
from .request_channel import Request, RequestChannel
from .response_writer import ResponseServer, ResponseWriter, _Close
from .turns import Turns

if TYPE_CHECKING:
    from ..observability.metrics import AuthenticationMetrics, BrokerMetrics
    from ..security.listeners import ListenerSecurity
    from ..security.sasl import SaslAuthenticator
    from ..server.context import ConnectionInfo

RECEIVE_BYTES = 256 * 1024
#: A frame missing this many bytes or more (up to the maximum) is read with reads of exactly
#: what is missing, whose bytes the decoder holds as they come and joins once
#: (``FrameDecoder.feed_part``): one copy of a bulk Produce frame instead of two (into the
#: read buffer, out of it). Above the maximum, a read that returns little would still
#: allocate its full size first.
DIRECT_READ_MIN_BYTES = 64 * 1024
DIRECT_READ_MAX_BYTES = 8 * 1024 * 1024
#: Frames from this size on (but Produce, whose records stay bytes) are decoded in a worker
#: thread: their pre-scan is a Python walk of every entry (docs/architecture.md).
OFF_LOOP_DECODE_BYTES = 64 * 1024
PRODUCE_KEY = 0
#: Bytes a connection may hold undecoded while one of its writes is blocked (read-ahead).
READ_AHEAD_BYTES = 1024 * 1024


class ConnectionServer(ResponseServer, Protocol):
    """What a connection uses of the broker-wide socket server (its layers above it); the
    writer's part is :class:`ResponseServer`."""

    @property
    def supported_versions(self) -> dict[int, tuple[int, int]]: ...

    @property
    def memory_pool(self) -> MemoryPool | UnboundedPool: ...

    @property
    def metrics(self) -> BrokerMetrics: ...


class ConnectionOwner(Protocol):
    """The processor that runs a connection, as the connection sees it."""

    @property
    def server(self) -> ConnectionServer: ...

    @property
    def request_channel(self) -> RequestChannel: ...

    @property
    def idle_lru(self) -> dict[Connection, float] | None:
        """Connections by last activity, least recent first (None: no idle expiry)."""

    def connection_closed(self, connection: Connection, reason: str) -> None:
        """The connection has ended and closed its socket."""


class Connection(ResponseWriter):
    """State and tasks of one accepted socket (its response writing: :class:`ResponseWriter`)."""

    # Slots: thousands of idle connections each carry one of these.
    __slots__ = (
        "stream", "info", "ip", "_processor", "_server", "_decoder", "_max_inflight",
        "_mute", "_pending", "_serial", "_inflight_lot", "_response_lot",
        "_idle_seconds", "_idle_lru", "_idle_scope", "_reader_scope",
        "_frame_reserved", "_ahead_reserved", "_eof", "_last_client_id", "_tasks",
        "_receiving", "_writing", "_stop_reading", "requests", "closed",
        "raw_socket", "_security", "_stopped",
    )  # and ResponseWriter's

    def __init__(self, stream: trio.SocketStream | trio.SSLStream[trio.SocketStream],
                 info: ConnectionInfo, processor: ConnectionOwner, ip: str, *,
                 security: ListenerSecurity | None = None) -> None:
        self.stream = stream
        #: True when ``stream`` is the socket itself (PLAINTEXT, SASL_PLAINTEXT): writes may go
        #: to its file descriptor. TLS connections write through the SSLStream (a copy).
        # A plain socket: written with os.send/os.sendfile; otherwise (TLS) through the stream.
        self.raw_socket = isinstance(stream, trio.SocketStream)
        self._security = security
        self.info = info
        self.ip = ip
        self._processor = processor
        server = processor.server
        self._server: ConnectionServer = server
        config = server.config
        self._decoder = FrameDecoder(config.socket_request_max_bytes)
        self._max_inflight = config.connection_max_inflight_requests
        self._mute = ChannelMute() if self._max_inflight == 1 else None
        # Requests read and not yet answered, in order (a list: usually 0 or 1 long, and an
        # empty deque costs half a KiB per idle connection).
        self._pending: list[Request] = []
        # Kafka's one request in flight needs no concurrent writer: the connection's one task
        # reads, waits for the answer, writes, reads on. Pipelining adds a writer task.
        self._serial = self._max_inflight == 1
        # Only pipelining needs the reader and the writer task to wake each other.
        self._inflight_lot = None if self._serial else trio.lowlevel.ParkingLot()
        self._response_lot = None if self._serial else trio.lowlevel.ParkingLot()
        self._throttle_deadline = 0.0
        self._idle_seconds = (config.connections_max_idle_ms / 1000
                              if config.connections_max_idle_ms >= 0 else None)
        # Idle expiry is the processor's (Kafka's IdleExpiryManager): this scope has no
        # deadline; the processor cancels it (expire) once the connection has had no read or
        # send for connections.max.idle.ms. _touch records activity in its LRU map.
        self._idle_lru = processor.idle_lru
        self._idle_scope = trio.CancelScope()
        # Pipelining only: stop_reading cancels the reader, the writer drains. A serial
        # connection has nothing to drain when its reader is stopped (a request read is
        # answered before the next read), so stop_reading cancels its idle scope instead:
        # one cancel scope (and its two sets) less per connection.
        self._reader_scope = None if self._serial else trio.CancelScope()
        self._stopped = False
        self._frame_reserved = 0
        # Memory pool bytes held for what the read-ahead buffered and the reader has not taken.
        self._ahead_reserved = 0
        # Why the stream ended ("end of stream", or the receive error), once it has.
        self._eof: str | None = None
        # One receive at a time: the reader and, while a write is blocked, the read-ahead task.
        self._receiving = False
        self._received_lot: trio.lowlevel.ParkingLot | None = None
        # A serial connection writes inside its reader's scope: stop_reading during a write is
        # deferred until the response is sent, so no response is cut off mid-frame.
        self._writing = False
        self._stop_reading = False
        self._last_client_id = ""
        self._write_failure: tuple[str, str] | None = None
        self._tasks: trio.Nursery
        self.requests = 0
        self.closed = False

    # ------------------------------------------------------------------ public
    @property
    def ready_responses(self) -> int:
        """Responses completed by handlers and not yet sent (ResponseQueueSize)."""
        return sum(1 for request in self._pending if request.slot.done)

    @property
    def requests_in_flight(self) -> int:
        return len(self._pending)

    @property
    def mute_state(self) -> str:
        return self._mute.state.name if self._mute else "PIPELINED"

    def stop_reading(self) -> None:
        """Shutdown step: read no more requests; in-flight ones are still answered."""
        self._stop_reading = True
        if not self._writing:
            if self._reader_scope is None:
                self._stopped = True
                self._idle_scope.cancel()
            else:
                self._reader_scope.cancel()

    def wake(self) -> None:
        """Called when one of this connection's responses is ready."""
        # Only a writer with nothing pending parks here (it waits on the oldest request's
        # event otherwise): ``unpark_all`` builds its lists even when nobody waits.
        lot = self._response_lot
        if lot:
            lot.unpark_all()

    async def run(self) -> None:
        info = self.info
        started = trio.current_time()
        reason, detail = "client", ""
        bind_connection(info)
        emit("connection_accepted", ip=self.ip)
        try:
            if isinstance(self.stream, trio.SSLStream):
                # Under its own deadline (connections.max.idle.ms): a client that never
                # completes the handshake costs this task, never the acceptor.
                idle = self._idle_seconds
                deadline = math.inf if idle is None else trio.current_time() + idle
                failed = await tls_handshake(self.stream, deadline,
                                             self._security, info,
                                             self._server.metrics.authentication)
                if failed is not None:
                    reason, detail = failed
                    return
                self._touch()
            with self._idle_scope:
                if self._serial:
                    reason, detail = await self._read_until_done()
                    await self._drain()
                else:
                    async with trio.open_nursery() as nursery:
                        self._tasks = nursery
                        nursery.start_soon(self._write_responses)
                        reason, detail = await self._read_until_done()
                        await self._drain()
                        nursery.cancel_scope.cancel()
            if self._write_failure is not None:
                reason, detail = self._write_failure
            elif self._stopped:
                reason, detail = "shutdown", ""
            elif self._idle_scope.cancelled_caught:
                reason, detail = "idle", ""
                emit("connection_expired",
                     idle_ms=float(self._server.config.connections_max_idle_ms))
        except Exception as exc:  # a bug must cost one connection, never the processor
            reason, detail = "error", repr(exc)
        except BaseException:
            # Cancelled (possibly inside an exception group): the processor is shutting down.
            reason, detail = "shutdown", ""
            raise
        finally:
            self.closed = True
            # Answered by a handler but never sent: still counted (Kafka updates request
            # metrics for responses to closed channels). Unanswered ones are counted by the
            # handler pool when they complete.
            if self._pending:
                self._drop([r for r in self._pending if r.slot.done])
            self._release_frame_memory()
            # Synchronous close: an await here would re-raise a pending cancellation and
            # skip the bookkeeping below.
            _socket_of(self.stream).close()
            self._processor.connection_closed(self, reason)
            emit("connection_closed", reason=reason, detail=detail, requests=self.requests,
                 duration_ms=round((trio.current_time() - started) * 1000, 3))

    def _release_frame_memory(self) -> None:
        if self._frame_reserved:
            self._server.memory_pool.release(self._frame_reserved)
            self._frame_reserved = 0
        if self._ahead_reserved:
            self._server.memory_pool.release(self._ahead_reserved)
            self._ahead_reserved = 0

    def _try_reserve(self, size: int) -> bool:
        """Reserve the next frame's ``size`` bytes: from what the read-ahead holds first (it
        buffered them), the memory pool the rest. False, nothing changed, when the pool has no
        room."""
        ahead = self._ahead_reserved
        if not ahead:
            return self._server.memory_pool.try_allocate(size)
        moved = min(ahead, size)
        if moved < size and not self._server.memory_pool.try_allocate(size - moved):
            return False
        self._ahead_reserved = ahead - moved
        return True

    def _release_read_ahead(self, *, all_of_it: bool = False) -> None:
        """The read-ahead's reservation shrinks to what is still buffered (the reader took a
        frame, which holds its own reservation), or goes entirely."""
        excess = self._ahead_reserved - (0 if all_of_it else self._decoder.buffered)
        if excess > 0:
            self._ahead_reserved -= excess
            self._server.memory_pool.release(excess)

    # ------------------------------------------------------------------ reading
    def _touch(self) -> None:
        """A read or a send: this connection becomes the most recently active of its
        processor (the end of its access-ordered map), as Kafka's ``IdleExpiryManager.update``.
        A dict move instead of a cancel-scope deadline move: no entry on trio's deadline heap
        per read and send, and expiry stays exact (the processor sleeps until the least
        recently active connection's deadline)."""
        lru = self._idle_lru
        if lru is not None:
            lru.pop(self, None)
            lru[self] = trio.current_time()

    def expire(self) -> None:
        """Idle for connections.max.idle.ms: end the connection (reason ``idle``)."""
        self._idle_scope.cancel()

    async def _read_until_done(self) -> tuple[str, str]:
        with self._reader_scope or _NO_SCOPE:
            try:
                return await self._read_loop()
            except InvalidFrameSize as exc:
                emit("invalid_request", reason="invalid_size", size=exc.size, detail=str(exc))
                auth = self.info.auth
                if auth is not None and not auth.authenticated:
                    # Kafka's SaslAuthenticationException "invalid receive size": a failed
                    # authentication, closed without an answer.
                    self._server.metrics.authentication.failed(self.info.listener)
                    emit("authentication_failed", mechanism=auth.mechanism, principal="",
                         error="SASL_AUTHENTICATION_FAILED",
                         detail=f"Failing SASL authentication due to invalid receive size: {exc}")
                return "invalid_frame", str(exc)
            except InvalidRequest as exc:
                emit("invalid_request", reason=exc.reason, api_key=exc.api_key,
                     api_version=exc.api_version, detail=exc.detail)
                return "invalid_frame", f"{exc.reason}: {exc.detail}"
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                return "client", _receive_failure(exc)
        return "shutdown", ""

    async def _read_loop(self) -> tuple[str, str]:
        supported = self._server.supported_versions
        channel = self._processor.request_channel
        auth = self.info.auth
        decoder = self._decoder
        max_bytes = decoder.limit
        security = self._security
        sasl_max = min(max_bytes, security.max_receive_size or max_bytes) if security else max_bytes
        max_inflight = self._max_inflight
        while True:
            if auth is not None and not self._serial:
                # Pipelining: one request at a time until authenticated (and while
                # re-authenticating), as Kafka's SaslServerAuthenticator reads them. Otherwise
                # SaslAuthenticate could be handled before its SaslHandshake, or a request
                # sent right after SaslAuthenticate judged before the login completed.
                self._max_inflight = max_inflight if auth.authenticated else 1
            if not self._may_read_now():
                await self._wait_until_readable()
            if auth is not None:
                # Until it has authenticated (and while it re-authenticates) a SASL client may
                # send frames of sasl.server.max.receive.size only, as Kafka's
                # SaslServerAuthenticator reads them: an anonymous peer cannot make the broker
                # buffer socket.request.max.bytes per connection (CVE-2022-34917).
                decoder.limit = max_bytes if auth.authenticated else sasl_max
            frame = self._buffered_frame()
            if frame is None:
                frame = await self._read_frame()
            if frame is None:
                return "client", self._eof or "end of stream"
            if self._throttle_deadline and self._throttle_deadline > trio.current_time():
                # Pipelining: a throttle began while this frame was being read (KIP-219).
                await self._wait_until_readable()
            if auth is not None and auth.expects_raw_token:
                # After SaslHandshake v0 a frame is a bare SASL token, not a request.
                closed = await self._raw_sasl_token(auth, frame)
                if closed is not None:
                    return closed
                continue
            reserved, self._frame_reserved = self._frame_reserved, 0
            held = -1  # the collector's pause, for a request that builds many objects
            try:
                if len(frame) < OFF_LOOP_DECODE_BYTES or frame[1] == PRODUCE_KEY and not frame[0]:
                    decoded = decode_request(frame, supported)
                else:
                    # A large frame's pre-scan walks every entry in Python (and a Metadata
                    # request's repeated topics are dropped): off the loop; the cyclic
                    # collector stays off until the request is gone (docs/architecture.md).
                    held = collector_pause.hold()
                    decoded = await in_worker(None, decode_request, frame, supported)
            except InvalidRequest:
                self._server.memory_pool.release(reserved)
                collector_pause.release(held)
                raise
            if auth is not None and not auth.admits(decoded.api_key, trio.current_time(),
                                                    decoded.unsupported_version):
                # Kafka's SaslServerAuthenticator: closed without an answer (ILLEGAL_SASL_STATE
                # before authentication; an expired session, KIP-368).
                self._server.memory_pool.release(reserved)
                collector_pause.release(held)
                state = "session expired" if auth.authenticated else "not authenticated"
                if decoded.api_key == API_VERSIONS_KEY and not auth.authenticated:
                    state += " (one ApiVersions before SaslHandshake only)"
                if not auth.authenticated:
                    # An IllegalSaslStateException: Kafka counts a failed authentication.
                    self._server.metrics.authentication.failed(self.info.listener)
                return "illegal_sasl_state", f"{decoded.api} request while {state}"
            if decoded.api_key == API_VERSIONS_KEY:
                self._register_client(decoded.body)
            self._last_client_id = decoded.client_id or ""
            request = Request(decoded, self, len(frame), reserved)
            if held >= 0:
                weakref.finalize(request, collector_pause.release, held)
            if decoded.api_key == PRODUCE_KEY and not self._serial:
                turns = self.info.produce_turns
                if turns is None:
                    turns = self.info.produce_turns = Turns()
                request.turn = turns.issue()
            self._pending.append(request)
            self.requests += 1
            if self._mute is not None:
                self._mute.mute()
                self._mute.handle(MuteEvent.REQUEST_RECEIVED)
            try:
                # Inline when the pool is idle, pipelining too: the reader and the handlers
                # share one thread, so an inline handler (it waits for nothing but the disk)
                # holds the reader no longer than a handler task would hold the loop, and a
                # run of pipelined requests is handled without two task switches each; the
                # writer then sends their responses in one write (docs/decisions.md).
                await channel.send(request, inline=True)
            except BaseException:
                # Never enqueued: nobody else will release its memory or answer it.
                self._pending.remove(request)
                self._server.memory_pool.release(reserved)
                if request.turn >= 0:
                    self.info.produce_turns.finish(request.turn)  # type: ignore[union-attr]
                raise
            # A waiting reader's frame keeps its locals: drop the request (and with it the
            # response bytes) so that an idle connection holds none of it.
            del request, decoded, frame
            if self._serial:
                self._writing = True
                try:
                    written = await self._write_next()
                finally:
                    self._writing = False
                if not written:
                    assert self._write_failure is not None
                    return self._write_failure
                if self._stop_reading:
                    return "shutdown", ""

    async def _raw_sasl_token(self, auth: SaslAuthenticator, token: bytes
                              ) -> tuple[str, str] | None:
        """Serve a bare SASL token (Kafka's ``handleSaslToken`` without headers; sans-IO part:
        :mod:`~trio_broker.security.raw_sasl`). None: read on; else why to close."""
        reserved, self._frame_reserved = self._frame_reserved, 0
        self._server.memory_pool.release(reserved)
        outcome = serve_raw_token(auth, token, trio.current_time())
        metrics = self._server.metrics.authentication
        failed = outcome.failure
        if failed is not None:
            metrics.failed(self.info.listener)
            emit("authentication_failed", mechanism=auth.mechanism,
                 principal=loggable_principal(failed.principal),
                 error="SASL_AUTHENTICATION_FAILED", detail=failed.message)
            # No error response exists for a bare token: Kafka closes after the delay.
            await trio.sleep(self._server.config.connection_failed_authentication_delay_ms / 1000)
            return "authentication_failed", failed.message
        if outcome.reply is not None:
            try:
                await self._send(outcome.reply)
            except _Close as close:
                return close.reason, close.detail
            self._touch()
        if outcome.complete:
            self.info.principal = auth.principal
            metrics.succeeded(self.info.listener, reauthentication=False)
            emit("authentication_succeeded", mechanism=auth.mechanism, principal=auth.principal,
                 reauthentication=False)
        return None

    def _may_read_now(self) -> bool:
        """The usual case of :meth:`_wait_until_readable` without a coroutine: nothing to wait
        for (in-flight limit, throttle, mute state other than plain MUTED); unmutes. False
        changes nothing: the coroutine then decides and waits."""
        if len(self._pending) >= self._max_inflight or (
                self._throttle_deadline and self._throttle_deadline > trio.current_time()):
            return False
        mute = self._mute
        if mute is not None:
            state = mute.state
            if state is MuteState.MUTED:
                mute.maybe_unmute()
            elif state is not MuteState.NOT_MUTED:
                return False
        return True

    async def _wait_until_readable(self) -> None:
        """Kafka's mute: do not read while too many requests are in flight or throttled."""
        muted_at: float | None = None
        muted_for = ""
        throttled = False
        while True:
            if len(self._pending) >= self._max_inflight:
                if muted_at is None:
                    muted_for = "inflight"
                    muted_at = self._muted(muted_for)
                assert self._inflight_lot is not None  # a serial connection sends before reading
                await self._inflight_lot.park()
                continue
            if self._throttle_deadline > trio.current_time():
                if muted_at is None:
                    muted_for = "throttle"
                    muted_at = self._muted(muted_for)
                throttled = True
                await trio.sleep_until(self._throttle_deadline)
                continue
            break
        throttle_ended = throttled  # pipelining has no mute state machine
        if self._mute is not None:
            throttle_ended = self._mute.state.name.startswith("MUTED_AND_THROTTLED")
            if throttle_ended:
                self._mute.handle(MuteEvent.THROTTLE_ENDED)
            self._mute.maybe_unmute()
        if throttle_ended:
            emit("throttle_ended", client_id=self._last_client_id, user=self.info.user)
        if muted_at is not None:
            self._unmuted(muted_for, muted_at)

    def _logs_mute(self, reason: str) -> bool:
        """In-flight waits are the normal one-request rule: logged only when pipelining. Every
        other mute (a throttle) is logged, with its unmute."""
        return reason != "inflight" or self._max_inflight > 1

    def _muted(self, reason: str) -> float:
        if self._logs_mute(reason):
            emit("connection_muted", reason=reason, inflight=len(self._pending))
        return trio.current_time()

    def _unmuted(self, muted_for: str, since: float) -> None:
        """The end of a mute :meth:`_muted` began for ``muted_for``, logged when its start
        was (a throttled serial connection's unmute too, so every logged mute has its
        ``muted_ms``)."""
        if self._logs_mute(muted_for):
            emit("connection_unmuted", reason="ready",
                 muted_ms=round((trio.current_time() - since) * 1000, 3))

    def _buffered_frame(self) -> bytes | None:
        """The next frame when it is already buffered and the memory pool has room for it
        (a pipelining client's usual case), else None: :meth:`_read_frame` without a
        coroutine. Reserves the frame's memory as :meth:`_read_frame` does."""
        decoder = self._decoder
        size = decoder.pending_size()
        if size is None:
            return None
        if not self._frame_reserved:
            if not self._try_reserve(size):
                return None  # _read_frame waits for the pool
            self._frame_reserved = size if size > 0 else 0
        frame = decoder.take(size)
        if self._ahead_reserved:
            self._release_read_ahead()
        return frame

    async def _read_frame(self) -> bytes | None:
        decoder = self._decoder
        pool = self._server.memory_pool
        while True:
            size = decoder.pending_size()
            direct = 0  # the missing bytes of a large frame, read as parts of it
            if size is not None:
                if not self._frame_reserved:
                    if not self._try_reserve(size):
                        # Never wait for memory this connection holds itself.
                        self._release_read_ahead(all_of_it=True)
                        since = trio.current_time()
                        emit("connection_muted", reason="memory", inflight=len(self._pending))
                        await pool.allocate(size)
                        emit("connection_unmuted", reason="memory",
                             muted_ms=round((trio.current_time() - since) * 1000, 3))
                    self._frame_reserved = size if size > 0 else 0
                frame = decoder.take(size)
                if frame is not None:
                    if self._ahead_reserved:
                        self._release_read_ahead()
                    return frame
                missing = decoder.missing(size)
                if self.raw_socket and missing <= DIRECT_READ_MAX_BYTES and (
                        missing >= DIRECT_READ_MIN_BYTES or decoder.parted):
                    direct = missing
            if self._eof is not None:
                # Complete frames already buffered are still served (Kafka's graceful close).
                return None
            # Inlined _receive: an idle connection waits here, and one coroutine frame less per
            # idle connection is measurable (bench idle_memory).
            if self._receiving:
                assert self._received_lot is not None
                await self._received_lot.park()
                continue
            self._receiving = True
            data: bytes | bytearray | None
            try:
                if self.raw_socket:
                    # A plain socket is read directly (trio's receive_some adds two context
                    # managers and a scheduler pass per read; see _read_nowait), waiting
                    # only when nothing is there. The rest of a large frame is asked for in
                    # reads of exactly what is missing (its memory is reserved), kept as
                    # they come and joined once: one copy of the frame, not two.
                    fd = self.stream.socket.fileno()
                    want = direct or RECEIVE_BYTES
                    data = _read_nowait(fd, want)
                    if data is None:
                        while data is None:
                            await trio.lowlevel.wait_readable(fd)
                            data = _read_nowait(fd, want)
                    elif _yield_due():  # _read_checkpoint, written out (one coroutine less)
                        await trio.lowlevel.checkpoint()
                    else:
                        await trio.lowlevel.checkpoint_if_cancelled()
                else:
                    data = await self.stream.receive_some(RECEIVE_BYTES)
            finally:
                self._receiving = False
                if self._received_lot is not None:
                    self._received_lot.unpark_all()
            assert data is not None
            if direct and data and isinstance(data, bytes):
                # At most the frame's missing bytes: held aside, joined once it is whole.
                self._touch()
                assert size is not None
                decoder.feed_part(size, data)
                del data
                continue
            self._received(data)
            del data  # the decoder has it: not kept alive by a waiting frame

    async def _receive(self, max_bytes: int) -> None:
        """One receive from the socket into the decoder (the read-ahead task's; the reader
        inlines the same steps).

        The reader and the read-ahead task may both want to read: the second one waits for the
        first one's receive to finish instead (trio allows one receive at a time), then decides
        again.
        """
        if self._receiving:
            assert self._received_lot is not None  # created before a second reader starts
            await self._received_lot.park()
            return
        self._receiving = True
        try:
            data = await self.stream.receive_some(max_bytes)
        finally:
            self._receiving = False
            if self._received_lot is not None:
                self._received_lot.unpark_all()
        self._received(data)

    async def _read_ahead(self) -> None:
        """While a write is blocked: move what the kernel holds into the decoder (bounded).

        What it buffers is held in the memory pool until the reader takes it: otherwise
        clients whose writes block (they do not read) could each park a MiB here beside
        ``queued.max.request.bytes`` (200 such connections: 267 MB over a 100 MB pool)."""
        decoder = self._decoder
        pool = self._server.memory_pool
        try:
            while (self._eof is None and decoder.buffered < READ_AHEAD_BYTES
                   and not pool.out_of_memory):
                before = decoder.buffered
                await self._receive(min(RECEIVE_BYTES, READ_AHEAD_BYTES - decoder.buffered))
                received = decoder.buffered - before
                if received > 0 and pool.try_allocate(received):
                    self._ahead_reserved += received
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            # The reader serves what is buffered and then ends the connection with this.
            self._eof = _receive_failure(exc)

    def _received(self, data: bytes | bytearray) -> None:
        if data:
            self._touch()
            self._decoder.feed(data)
        else:
            self._eof = "end of stream"

    def _register_client(self, body: object) -> None:
        name = getattr(body, "client_software_name", None)
        version = getattr(body, "client_software_version", None)
        if valid_client_software(name) and valid_client_software(version):
            assert name is not None and version is not None
            if (name, version) == (self.info.client_software_name,
                                   self.info.client_software_version):
                return  # clients repeat ApiVersions on reconnect-free retries; log changes only
            self.info.client_software_name = name
            self.info.client_software_version = version
            emit("client_registered", client_software_name=name, client_software_version=version)


def _receive_failure(exc: trio.BrokenResourceError | trio.ClosedResourceError) -> str:
    """The ``detail`` of a connection whose receive failed. An SSLStream's error is a bare
    BrokenResourceError raised from OpenSSL's: its cause is the part that says what happened
    (a bad record MAC, a refused renegotiation, an EOF without close_notify)."""
    cause = exc.__cause__
    if not exc.args and cause is not None:
        return f"receive failed: {exc!r} ({cause!r})"
    return f"receive failed: {exc!r}"


def _socket_of(stream: trio.SocketStream | trio.SSLStream[trio.SocketStream]
               ) -> trio.socket.SocketType:
    if isinstance(stream, trio.SSLStream):
        return stream.transport_stream.socket
    return stream.socket


async def tls_handshake(stream: trio.SSLStream[trio.SocketStream], deadline: float,
                        security: ListenerSecurity | None, info: ConnectionInfo,
                        metrics: AuthenticationMetrics
                        ) -> tuple[str, str] | None:
    """The TLS handshake of a new connection, by ``deadline``; on an SSL listener the principal
    comes from the client certificate. A (reason, detail) to close with when it failed."""
    detail = ""
    with trio.move_on_at(deadline):
        try:
            await stream.do_handshake()
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            detail = str(exc.__cause__ or exc) or repr(exc.__cause__ or exc)
        else:
            if security is not None and info.auth is None:
                principal = security.certificate_principal(stream.getpeercert())
                if principal is None:
                    detail = "no principal mapping rule applies to the certificate's subject"
                else:
                    info.principal = principal
                    metrics.succeeded(info.listener)
                    emit("authentication_succeeded", mechanism="SSL", principal=principal,
                         reauthentication=False)
            if not detail:
                return None
    if not detail:
        detail = "TLS handshake not completed within connections.max.idle.ms"
    metrics.failed(info.listener)
    emit("authentication_failed", mechanism="SSL", principal="", error="SSL_HANDSHAKE_FAILED",
         detail=detail)
    return "ssl_handshake_failed", detail
_NO_SCOPE = contextlib.nullcontext()


def _read_nowait(fd: int, size: int = RECEIVE_BYTES) -> bytes | None:
    """What the socket holds (up to ``size`` bytes; ``b""`` at end of stream), or None when
    nothing is there: a non-blocking ``recv``. Errors as trio's ``receive_some`` raises them."""
    try:
        return os.read(fd, size)
    except BlockingIOError:
        return None
    except OSError as exc:
        if fd < 0:  # trio's socket was closed under the reader
            raise trio.ClosedResourceError("the socket was closed") from None
        raise trio.BrokenResourceError(f"socket connection broken: {exc}") from exc


#: Reads that returned at once since the last full checkpoint, over all connections.
_reads_without_yield = 0
#: A read that returns at once still checks for cancellation, but yields to other tasks only
#: every this many times: a client that always has its next request ready (one in flight, a
#: fast client) would otherwise pay a scheduler pass per request.
READS_PER_YIELD = 16


def _yield_due() -> bool:
    """Count a read that did not wait; True every :data:`READS_PER_YIELD`-th time."""
    global _reads_without_yield
    _reads_without_yield += 1
    if _reads_without_yield >= READS_PER_YIELD:
        _reads_without_yield = 0
        return True
    return False


async def _read_checkpoint() -> None:
    """The checkpoint of a read that did not wait (the reader writes it out inline)."""
    if _yield_due():
        await trio.lowlevel.checkpoint()
    else:
        await trio.lowlevel.checkpoint_if_cancelled()
