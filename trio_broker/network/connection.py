"""One client connection: Kafka's KafkaChannel plus the processor's work for it.

The **reader** reads frames (sans-IO :class:`FrameDecoder`), decodes them, and sends them into
the request channel. Muting is simply not reading: before each frame it waits while the
in-flight limit is reached, while the connection is throttled (KIP-219), and while the memory
pool cannot hold the frame. TCP flow control pushes back on the client.

The **writer** sends responses strictly in request order, gathering every response that is
ready into one ``send_all``.

With Kafka's one request in flight (the default) reading and writing alternate in the
connection's one task: read, hand over, wait for the answer, send, read on; Kafka's
``ChannelMuteState`` machine tracks it. With ``connection.max.inflight.requests`` > 1
(AutoMQ-style pipelining) the writer is a second task in the connection's nursery.

Idle expiry is a cancel scope around both, cancelled by the processor once the connection
has had no read or send for ``connections.max.idle.ms`` (Kafka's IdleExpiryManager).

**Reading while a write is blocked.** Responses are written with a non-blocking send; only when
the kernel will not take the whole response (the peer has not acknowledged what it has) does the
write wait, and while it waits a short-lived read-ahead task keeps moving bytes from the socket
into the :class:`FrameDecoder`, up to :data:`READ_AHEAD_BYTES` and only while the memory pool has
room. Frames are still decoded and dispatched only by the reader, so muting keeps its meaning.
Without this, a client that pipelines thousands of tiny requests (librdkafka) fills a fixed-size
receive buffer with small segments; the kernel then drops its incoming segments, and with them
the ACKs the blocked write waits for: the connection stalls (issue 9, docs/decisions.md). A write
that makes no progress for ``socket.send.stall.timeout.ms`` closes the connection.

**Zero-copy fetch.** A response may arrive as :class:`FramedParts`: bytes and file regions (a
Fetch response's record bytes, still in the segment files). Where the transport is a plain
socket (``Connection.raw_socket``; a TLS stream must encrypt the bytes, so it is given them
read from the file), the regions are sent with ``os.sendfile`` in the same
non-blocking loop (stall timeout and read-ahead included); any other transport gets the parts
read into one bytes object. Either way the regions are released once sent or dropped.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from typing import TYPE_CHECKING, Protocol

import trio

from ..observability.log import bind_connection, emit
from ..protocol.codec import (
    API_VERSIONS_KEY,
    InvalidRequest,
    decode_request,
    valid_client_software,
)
from ..protocol.framing import FrameDecoder, InvalidFrameSize
from ..protocol.regions import FileRegion, FramedParts, RegionInvalid
from .memory_pool import MemoryPool, UnboundedPool
from .mute import ChannelMute, IllegalMuteTransition, MuteEvent, MuteState
from .request_channel import Request, RequestChannel, ResponseAction

if TYPE_CHECKING:
    from ..config import BrokerConfig
    from ..observability.metrics import AuthenticationMetrics, BrokerMetrics
    from ..security.listeners import ListenerSecurity
    from ..server.context import ConnectionInfo

RECEIVE_BYTES = 256 * 1024
#: Bytes a connection may hold undecoded while one of its writes is blocked (read-ahead).
READ_AHEAD_BYTES = 1024 * 1024


class ConnectionServer(Protocol):
    """What a connection uses of the broker-wide socket server (its layers above it)."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def supported_versions(self) -> dict[int, tuple[int, int]]: ...

    @property
    def memory_pool(self) -> MemoryPool | UnboundedPool: ...

    @property
    def metrics(self) -> BrokerMetrics: ...

    def request_completed(self, request: Request, *, dropped: bool = False) -> None:
        """Metrics and the log line of a request answered or dropped."""

    def connection_progressed(self) -> None:
        """Responses were sent or a connection closed (wakes the shutdown drain)."""


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


class _Close(Exception):
    """Ends the connection with a reason for the connection_closed event."""

    def __init__(self, reason: str, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(reason)


class Connection:
    """State and tasks of one accepted socket."""

    # Slots: thousands of idle connections each carry one of these.
    __slots__ = (
        "stream", "info", "ip", "_processor", "_server", "_decoder", "_max_inflight",
        "_mute", "_pending", "_serial", "_inflight_lot", "_response_lot",
        "_throttle_deadline", "_idle_seconds", "_idle_lru", "_idle_scope", "_reader_scope",
        "_frame_reserved", "_eof", "_last_client_id", "_write_failure", "_tasks",
        "_receiving", "_received_lot", "_writing", "_stop_reading", "requests", "closed",
        "raw_socket", "_security", "_stopped",
    )

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
        self._server = server
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
                return "invalid_frame", str(exc)
            except InvalidRequest as exc:
                emit("invalid_request", reason=exc.reason, api_key=exc.api_key,
                     api_version=exc.api_version, detail=exc.detail)
                return "invalid_frame", f"{exc.reason}: {exc.detail}"
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                return "client", f"receive failed: {exc!r}"
        return "shutdown", ""

    async def _read_loop(self) -> tuple[str, str]:
        supported = self._server.supported_versions
        channel = self._processor.request_channel
        while True:
            if not self._may_read_now():
                await self._wait_until_readable()
            frame = self._buffered_frame()
            if frame is None:
                frame = await self._read_frame()
            if frame is None:
                return "client", self._eof or "end of stream"
            if self._throttle_deadline and self._throttle_deadline > trio.current_time():
                # Pipelining: a throttle began while this frame was being read (KIP-219).
                await self._wait_until_readable()
            reserved, self._frame_reserved = self._frame_reserved, 0
            try:
                decoded = decode_request(frame, supported)
            except InvalidRequest:
                self._server.memory_pool.release(reserved)
                raise
            auth = self.info.auth
            if auth is not None and not auth.admits(decoded.api_key, trio.current_time()):
                # Kafka's SaslServerAuthenticator: closed without an answer (ILLEGAL_SASL_STATE
                # before authentication; an expired session, KIP-368).
                self._server.memory_pool.release(reserved)
                state = "session expired" if auth.authenticated else "not authenticated"
                if not auth.authenticated:
                    # An IllegalSaslStateException: Kafka counts a failed authentication.
                    self._server.metrics.authentication.failed(self.info.listener)
                return "illegal_sasl_state", f"{decoded.api} request while {state}"
            if decoded.api_key == API_VERSIONS_KEY:
                self._register_client(decoded.body)
            self._last_client_id = decoded.client_id or ""
            request = Request(decoded, self, len(frame), reserved)
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
        throttled = False
        while True:
            if len(self._pending) >= self._max_inflight:
                if muted_at is None:
                    muted_at = self._muted("inflight")
                assert self._inflight_lot is not None  # a serial connection sends before reading
                await self._inflight_lot.park()
                continue
            if self._throttle_deadline > trio.current_time():
                if muted_at is None:
                    muted_at = self._muted("throttle")
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
            self._unmuted("ready", muted_at)

    def _muted(self, reason: str) -> float:
        # In-flight waits are the normal one-request rule; log them only when pipelining.
        if reason != "inflight" or self._max_inflight > 1:
            emit("connection_muted", reason=reason, inflight=len(self._pending))
        return trio.current_time()

    def _unmuted(self, reason: str, since: float) -> None:
        if self._max_inflight > 1:
            emit("connection_unmuted", reason=reason,
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
            if not self._server.memory_pool.try_allocate(size):
                return None  # _read_frame waits for the pool
            self._frame_reserved = size if size > 0 else 0
        return decoder.take(size)

    async def _read_frame(self) -> bytes | None:
        decoder = self._decoder
        pool = self._server.memory_pool
        while True:
            size = decoder.pending_size()
            if size is not None:
                if not self._frame_reserved:
                    if not pool.try_allocate(size):
                        since = trio.current_time()
                        emit("connection_muted", reason="memory", inflight=len(self._pending))
                        await pool.allocate(size)
                        emit("connection_unmuted", reason="memory",
                             muted_ms=round((trio.current_time() - since) * 1000, 3))
                    self._frame_reserved = size if size > 0 else 0
                frame = decoder.take(size)
                if frame is not None:
                    return frame
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
                    # only when nothing is there.
                    fd = self.stream.socket.fileno()
                    data = _read_nowait(fd)
                    if data is None:
                        while data is None:
                            await trio.lowlevel.wait_readable(fd)
                            data = _read_nowait(fd)
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

    # ------------------------------------------------------------------ writing
    async def _drain(self) -> None:
        """Wait until every request read so far has been answered and sent."""
        while self._pending and self._write_failure is None:
            if self._inflight_lot is None:
                await self._write_next()
            else:
                await self._inflight_lot.park()

    async def _write_responses(self) -> None:
        """The writer task (pipelining): ends the connection when a write ends it."""
        while await self._write_next():
            pass
        self._tasks.cancel_scope.cancel()

    async def _write_next(self) -> bool:
        """Send the next ready responses; False when that ended the connection."""
        try:
            await self._write_batch()
        except _Close as close:
            self._write_failure = (close.reason, close.detail)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self._write_failure = ("client", f"send failed: {exc!r}")
        else:
            return True
        return False

    async def _write_batch(self) -> None:
        """Wait for the oldest request's response, then send it with every one ready after it,
        in order, in one write."""
        pending = self._pending
        if len(pending) == 1:
            # The usual case (one request in flight, answered with bytes): the loop below
            # without its lists.
            request = pending[0]
            slot = request.slot
            payload = slot.payload
            if slot.action is ResponseAction.SEND and type(payload) is bytes:
                request.response_dequeue_ns = time.perf_counter_ns()
                try:
                    if self.raw_socket:  # _send, without a coroutine when the kernel takes it
                        fd = self.stream.socket.fileno()
                        try:
                            sent = _send_nowait(fd, payload)
                        except OSError as exc:
                            raise trio.BrokenResourceError(
                                f"socket connection broken: {exc}") from exc
                        if sent < len(payload):
                            await self._send_blocked(fd, _UnsentBytes(memoryview(payload)[sent:]))
                    else:
                        await self._send_stream(payload)
                except BaseException:
                    del pending[:1]
                    self._drop([request])
                    raise
                self._touch()
                del pending[:1]
                request.end_ns = time.perf_counter_ns()
                self._sent(request)
                if self._inflight_lot is not None:
                    self._inflight_lot.unpark_all()
                if not pending:
                    self._server.connection_progressed()
                return
        while not pending or not pending[0].slot.done:
            if pending:
                await pending[0].slot.wait()
            else:
                assert self._response_lot is not None  # a serial connection has a request here
                await self._response_lot.park()
        # The batch stays in ``pending`` until it is sent: a response being written is still in
        # flight (the shutdown drain waits for it).
        count = 1
        while count < len(pending) and pending[count].slot.done:
            count += 1
        batch = pending[:count]
        dequeued = time.perf_counter_ns()
        close: Request | None = None
        payloads: list[bytes | FramedParts] = []
        for index, request in enumerate(batch):
            request.response_dequeue_ns = dequeued
            action = request.slot.action
            if action is ResponseAction.CLOSE:
                # Responses after a close are never sent: they stay pending, and are counted
                # as dropped when the connection ends. A close may carry a last response.
                close = request
                if request.slot.payload:
                    payloads.append(request.slot.payload)
                count = index + 1
                batch = batch[:count]
                break
            if action is ResponseAction.SEND:
                payloads.append(request.slot.payload)
        if payloads:
            try:
                if len(payloads) == 1 and isinstance(payloads[0], bytes):
                    await self._send(payloads[0])
                else:
                    await self._send_payloads(payloads)
            except BaseException:
                del pending[:count]
                self._drop(batch)
                raise
            self._touch()
        del pending[:count]
        ended = time.perf_counter_ns()
        for request in batch:
            request.end_ns = ended
            self._sent(request)
            if request is close:
                raise _Close("handler", request.slot.close_reason)
        if self._inflight_lot is not None:
            self._inflight_lot.unpark_all()
        if not pending:
            self._server.connection_progressed()

    async def _send_payloads(self, payloads: list[bytes | FramedParts]) -> None:
        """Send framed responses in order, in as few writes as the parts allow; releases the
        regions of :class:`FramedParts` once sent (or failed)."""
        framed = [payload for payload in payloads if isinstance(payload, FramedParts)]
        if not framed:
            await self._send(b"".join(payloads))  # type: ignore[arg-type]
            return
        try:
            if not (self.raw_socket and _HAVE_SENDFILE):
                # The fallback (e.g. TLS): the same bytes, read from the files.
                await self._send(b"".join(payload if isinstance(payload, bytes)
                                          else payload.materialize() for payload in payloads))
                return
            chunks: list[bytes | FileRegion] = []
            for payload in payloads:
                for part in (payload,) if isinstance(payload, bytes) else payload.parts:
                    if chunks and isinstance(part, bytes) and isinstance(chunks[-1], bytes):
                        chunks[-1] += part  # gather the bytes between regions
                    else:
                        chunks.append(part)
            for chunk in chunks:
                if isinstance(chunk, bytes):
                    await self._send(chunk)
                else:
                    await self._send_region(chunk)
        except RegionInvalid as exc:
            # Part of a frame may be on the wire already: only closing keeps the stream sane.
            raise _Close("error", f"zero-copy fetch: {exc}") from None
        finally:
            for payload in framed:
                payload.release()

    async def _send(self, data: bytes) -> None:
        """Send all of ``data``; reads ahead while the kernel will not take it (module doc)."""
        if not self.raw_socket:
            await self._send_stream(data)
            return
        fd = self.stream.socket.fileno()
        try:
            sent = _send_nowait(fd, data)
        except OSError as exc:
            raise trio.BrokenResourceError(f"socket connection broken: {exc}") from exc
        if sent < len(data):
            await self._send_blocked(fd, _UnsentBytes(memoryview(data)[sent:]))

    async def _send_stream(self, data: bytes) -> None:
        """TLS: the SSLStream encrypts (a copy); a send that takes longer than
        ``socket.send.stall.timeout.ms`` as a whole closes the connection."""
        stall_ms = self._server.config.socket_send_stall_timeout_ms
        with trio.move_on_after(stall_ms / 1000 if stall_ms >= 0 else float("inf")) as scope:
            await self.stream.send_all(data)
        if scope.cancelled_caught:
            emit("connection_send_stalled", stalled_ms=float(stall_ms), unsent_bytes=-1,
                 buffered_bytes=self._decoder.buffered)
            raise _Close("send_stalled", f"TLS send not done within {stall_ms} ms")

    async def _send_region(self, region: FileRegion) -> None:
        """Send a file region with ``sendfile`` (Kafka's ``FileRecords.transferTo``)."""
        fd = self.stream.socket.fileno()
        unsent = _UnsentFile(region)
        try:
            unsent.send(fd)
        except OSError as exc:
            raise trio.BrokenResourceError(f"socket connection broken: {exc}") from exc
        if unsent.remaining:
            await self._send_blocked(fd, unsent)

    async def _send_blocked(self, fd: int, rest: _UnsentBytes | _UnsentFile) -> None:
        stall_ms = self._server.config.socket_send_stall_timeout_ms
        stall_seconds = stall_ms / 1000 if stall_ms >= 0 else float("inf")
        failure: BaseException | None = None
        if self._received_lot is None:
            self._received_lot = trio.lowlevel.ParkingLot()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._read_ahead)
            progress_at = trio.current_time()
            while rest.remaining:
                with trio.move_on_at(progress_at + stall_seconds):
                    await trio.lowlevel.wait_writable(fd)
                try:
                    sent = rest.send(fd)
                except OSError as exc:
                    failure = trio.BrokenResourceError(f"socket connection broken: {exc}")
                    break
                except RegionInvalid as exc:
                    failure = _Close("error", f"zero-copy fetch: {exc}")
                    break
                if sent:
                    progress_at = trio.current_time()
                    self._touch()
                elif trio.current_time() >= progress_at + stall_seconds:
                    stalled_ms = round((trio.current_time() - progress_at) * 1000, 3)
                    emit("connection_send_stalled", stalled_ms=stalled_ms,
                         unsent_bytes=rest.remaining, buffered_bytes=self._decoder.buffered)
                    failure = _Close("send_stalled",
                                     f"no bytes accepted for {stalled_ms} ms, "
                                     f"{rest.remaining} bytes unsent")
                    break
            nursery.cancel_scope.cancel()
        if failure is not None:
            raise failure

    async def _read_ahead(self) -> None:
        """While a write is blocked: move what the kernel holds into the decoder (bounded)."""
        decoder = self._decoder
        pool = self._server.memory_pool
        try:
            while (self._eof is None and decoder.buffered < READ_AHEAD_BYTES
                   and not pool.out_of_memory):
                await self._receive(min(RECEIVE_BYTES, READ_AHEAD_BYTES - decoder.buffered))
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            # The reader serves what is buffered and then ends the connection with this.
            self._eof = f"receive failed: {exc!r}"

    def _drop(self, requests: list[Request]) -> None:
        ended = time.perf_counter_ns()
        for request in requests:
            request.response_dequeue_ns = request.response_dequeue_ns or ended
            request.end_ns = ended
            request.slot.release()
            self._server.request_completed(request, dropped=True)

    def _sent(self, request: Request) -> None:
        slot = request.slot
        if slot.throttle_ms > 0:
            self._throttle_deadline = max(self._throttle_deadline,
                                          trio.current_time() + slot.throttle_ms / 1000)
            emit("throttle_started", client_id=request.decoded.client_id or "",
                 user=self.info.user,
                 quota_type=slot.throttle_quota or "request_percentage",
                 throttle_ms=float(slot.throttle_ms))
        if self._mute is not None:
            try:
                if slot.throttle_ms > 0:
                    self._mute.handle(MuteEvent.THROTTLE_STARTED)
                self._mute.handle(MuteEvent.RESPONSE_SENT)
            except IllegalMuteTransition as exc:
                raise _Close("error", str(exc)) from None
        self._server.request_completed(request)


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
_HAVE_SENDFILE = hasattr(os, "sendfile")
_NO_SCOPE = contextlib.nullcontext()


class _UnsentBytes:
    """The rest of a blocked bytes write."""

    __slots__ = ("view",)

    def __init__(self, view: memoryview) -> None:
        self.view = view

    @property
    def remaining(self) -> int:
        return len(self.view)

    def send(self, fd: int) -> int:
        sent = _send_nowait(fd, self.view)
        self.view = self.view[sent:]
        return sent


class _UnsentFile:
    """The rest of a file region being sent with ``sendfile``."""

    __slots__ = ("region", "offset", "remaining")

    def __init__(self, region: FileRegion) -> None:
        self.region = region
        self.offset = region.position
        self.remaining = region.size

    def send(self, fd: int) -> int:
        region = self.region
        # Checked before every call: a truncation in between would let sendfile read other
        # bytes at the same positions (the event loop runs appends only between our calls).
        region.check()
        try:
            sent = os.sendfile(fd, region.fd, self.offset, self.remaining)
        except BlockingIOError:
            return 0
        if sent == 0:
            raise RegionInvalid(f"file ended {self.remaining} bytes before the region's end")
        self.offset += sent
        self.remaining -= sent
        return sent


def _read_nowait(fd: int) -> bytes | None:
    """What the socket holds (up to RECEIVE_BYTES; ``b""`` at end of stream), or None when
    nothing is there: a non-blocking ``recv``. Errors as trio's ``receive_some`` raises them."""
    try:
        return os.read(fd, RECEIVE_BYTES)
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


def _send_nowait(fd: int, data: bytes | memoryview) -> int:
    """Bytes of ``data`` the kernel took at once (0 if none): a non-blocking ``send``."""
    try:
        return os.write(fd, data)
    except BlockingIOError:
        return 0
