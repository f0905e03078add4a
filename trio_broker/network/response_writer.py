"""The writing half of a :class:`~trio_broker.network.connection.Connection`: its responses,
sent strictly in request order, every response that is ready gathered into one write.

With Kafka's one request in flight the connection's one task calls
:meth:`ResponseWriter._write_next` after handing each request over; with pipelining
:meth:`ResponseWriter._write_responses` is a second task in the connection's nursery. A
request stays in ``_pending`` until its response is on the wire (the shutdown drain,
:meth:`ResponseWriter._drain`, waits for it); sending it completes it: its metrics and log line,
and a throttle (KIP-219) or mute transition it carries.

**Non-blocking send.** On a plain socket (``raw_socket``) a response is written with one
non-blocking ``send`` (:func:`_send_nowait`): the kernel usually takes all of it and no coroutine,
context manager or scheduler pass is spent. A TLS stream must encrypt the bytes, so it is written
through the ``SSLStream`` (a copy) under ``socket.send.stall.timeout.ms`` as a whole.

**Blocked send and read-ahead.** Only when the kernel will not take the whole response (the peer
has not acknowledged what it has) does the write wait (:meth:`ResponseWriter._send_blocked`), and
while it waits the connection's read-ahead task keeps moving bytes from the socket into the
frame decoder (bounded; the reader's ``_read_ahead``, since reading stays the reader's). Frames
are still decoded and dispatched only by the reader, so muting keeps its meaning. Without this, a
client that pipelines thousands of tiny requests (librdkafka) fills a fixed-size receive buffer
with small segments; the kernel then drops its incoming segments, and with them the ACKs the
blocked write waits for: the connection stalls (issue 9, docs/decisions.md). A write that makes
no progress for ``socket.send.stall.timeout.ms`` closes the connection.

**Zero-copy fetch.** A response may arrive as :class:`FramedParts`: bytes and file regions (a
Fetch response's record bytes, still in the segment files). On a plain socket the regions are
sent with ``os.sendfile`` in the same non-blocking loop (stall timeout and read-ahead included;
:class:`_UnsentFile`); any other transport (TLS), or ``socket.sendfile.enable=false``, gets
small regions read and joined with the bytes around them, and a region over
:data:`REGION_CHUNK` read and sent a chunk at a time, so a client that does not read holds at
most a chunk of file bytes in memory. Either way the regions are released once sent or
dropped.

**Why a mixin.** ``Connection`` inherits :class:`ResponseWriter`; the writer's methods use the
connection's slots directly. This is the hot path of the request loop: a method found on a base
class costs the same as one on the class itself (CPython's per-type attribute cache), so the
split adds no call, indirection or attribute lookup per request, and the code reads as it did
(``self._send(...)``). Module-level functions taking the connection would have read worse
(``_write_batch(self)`` everywhere, and the state as another object's attributes) for no gain; a
separate writer object would add a lookup per request. The writer declares the state it uses
(annotations only: the slots are the connection's) and the two reader methods it calls.

It knows the socket server only as a :class:`ResponseServer` (network layering:
tests/network/test_layers.py): the connection module imports this one, never the reverse.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Protocol

import trio

from ..observability.log import emit
from ..protocol.framing import FrameDecoder
from ..protocol.regions import FileRegion, FramedParts, RegionInvalid
from .mute import ChannelMute, IllegalMuteTransition, MuteEvent
from .request_channel import Request, ResponseAction

if TYPE_CHECKING:
    from ..config import BrokerConfig
    from ..server.context import ConnectionInfo


class ResponseServer(Protocol):
    """What the writer uses of the broker-wide socket server."""

    @property
    def config(self) -> BrokerConfig: ...

    def request_completed(self, request: Request, *, dropped: bool = False) -> None:
        """Metrics and the log line of a request answered or dropped."""

    def connection_progressed(self) -> None:
        """Responses were sent or a connection closed (wakes the shutdown drain)."""


class _Close(Exception):
    """Ends the connection with a reason for the connection_closed event."""

    def __init__(self, reason: str, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(reason)


class ResponseWriter:
    """The response-writing methods of a connection (module doc); ``Connection`` inherits them."""

    # The state the writer assigns; the rest is the connection's (its slots), declared below
    # for the type checker only.
    __slots__ = ("_write_failure", "_throttle_deadline", "_received_lot")

    stream: trio.SocketStream | trio.SSLStream[trio.SocketStream]
    raw_socket: bool
    info: ConnectionInfo
    _server: ResponseServer
    _decoder: FrameDecoder
    _pending: list[Request]
    _mute: ChannelMute | None
    _inflight_lot: trio.lowlevel.ParkingLot | None
    _response_lot: trio.lowlevel.ParkingLot | None
    _received_lot: trio.lowlevel.ParkingLot | None
    _throttle_deadline: float
    _write_failure: tuple[str, str] | None
    _tasks: trio.Nursery

    if TYPE_CHECKING:
        # The reader's, called from here (defined by Connection).
        def _touch(self) -> None: ...

        async def _read_ahead(self) -> None: ...

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
            zero_copy = (self.raw_socket and _HAVE_SENDFILE
                         and self._server.config.socket_sendfile_enable)
            chunks: list[bytes | FileRegion] = []
            for payload in payloads:
                for part in (payload,) if isinstance(payload, bytes) else payload.parts:
                    if not (zero_copy or isinstance(part, bytes) or part.size > REGION_CHUNK):
                        part = part.read()  # no sendfile: small regions read at once
                    if chunks and isinstance(part, bytes) and isinstance(chunks[-1], bytes):
                        chunks[-1] += part  # gather the bytes between regions
                    else:
                        chunks.append(part)
            for chunk in chunks:
                if isinstance(chunk, bytes):
                    await self._send(chunk)
                elif zero_copy:
                    await self._send_region(chunk)
                else:
                    # A large region without sendfile (TLS, or socket.sendfile.enable=false)
                    # is read and sent a chunk at a time, as Kafka's
                    # SslTransportLayer.transferFrom: read whole, a client that never reads
                    # held fetch.max.bytes per response in memory (with pipelining, all of its
                    # responses at once).
                    for start in range(0, chunk.size, REGION_CHUNK):
                        await self._send(chunk.read(start, min(REGION_CHUNK,
                                                               chunk.size - start)))
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


_HAVE_SENDFILE = hasattr(os, "sendfile")
#: Bytes of a file region read at a time where it is not sent with ``sendfile`` (TLS, or
#: ``socket.sendfile.enable=false``).
REGION_CHUNK = 256 * 1024


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


def _send_nowait(fd: int, data: bytes | memoryview) -> int:
    """Bytes of ``data`` the kernel took at once (0 if none): a non-blocking ``send``."""
    try:
        return os.write(fd, data)
    except BlockingIOError:
        return 0
