"""The request channel between processors and handlers, and the responses routed back.

Kafka's ``RequestChannel`` is a bounded queue (``queued.max.requests``) of requests plus, per
processor, a queue of responses. Here the request queue is a Trio memory channel of that capacity
(a full channel blocks the reader that sends into it, which is Kafka's back-pressure), and each
request carries the :class:`ResponseSlot` its connection waits on, so a response always finds its
way back to the connection that asked, in request order.

This module is the bottom of the network layers (socket server → acceptor → processor →
connection → response writer → request channel → handler pool): it knows the connection that
sent a request only as a :class:`RequestOwner`.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Sized
from typing import TYPE_CHECKING, Protocol

import attrs
import trio

from ..protocol.codec import DecodedRequest
from ..protocol.regions import FramedParts

if TYPE_CHECKING:
    from ..server.context import ConnectionInfo


class RequestOwner(Protocol):
    """What a request knows of the connection it came from (the handler pool uses it too)."""

    @property
    def info(self) -> ConnectionInfo:
        """The connection's identity, for the request context and the log."""

    @property
    def closed(self) -> bool:
        """True once the connection has ended: its responses are dropped."""

    def wake(self) -> None:
        """Called when one of the connection's responses is ready."""


class InlineHandler(Protocol):
    """A handler pool that can answer a request in the sender's own task (the pool above)."""

    def can_handle_inline(self, request: Request) -> bool:
        """True when ``request``'s API allows it and a handler is idle and not already lent
        to an inline request."""

    async def handle_inline(self, request: Request) -> None:
        """Handle ``request`` now, in the calling task, as one of the pool's handlers."""


class ResponseAction(enum.Enum):
    """Kafka's five response kinds (``RequestChannel.Response`` subclasses)."""

    SEND = "send"
    NOOP = "noop"
    CLOSE = "close"
    START_THROTTLING = "start_throttling"
    END_THROTTLING = "end_throttling"


@attrs.define(eq=False)
class ResponseSlot:
    """Where a handler leaves the response of one request; the connection sends it in order."""

    #: True once a handler has completed the slot.
    done: bool = False
    #: Created only when the connection waits for the slot (a flag otherwise: one object less
    #: per request, and most slots are completed before anyone looks).
    _ready: trio.Event | None = None
    action: ResponseAction | None = None
    #: The framed response; a FramedParts when records are still in segment files (zero-copy).
    payload: bytes | FramedParts = b""
    error: str = "NONE"
    throttle_ms: int = 0
    #: The quota behind ``throttle_ms`` (its config key, e.g. ``producer_byte_rate``).
    throttle_quota: str = ""
    close_reason: str = ""

    def complete(self, action: ResponseAction, payload: bytes | FramedParts = b"", *,
                 error: str = "NONE",
                 throttle_ms: int = 0, throttle_quota: str = "", close_reason: str = "") -> None:
        self.action = action
        self.payload = payload
        self.error = error
        self.throttle_ms = throttle_ms
        self.throttle_quota = throttle_quota
        self.close_reason = close_reason
        self.done = True
        if self._ready is not None:
            self._ready.set()

    async def wait(self) -> None:
        """Until a handler completes the slot (at once, without a checkpoint, if it has)."""
        if not self.done:
            if self._ready is None:
                self._ready = trio.Event()
            await self._ready.wait()

    def release(self) -> None:
        """The response is sent or dropped: give back the files its regions hold open."""
        if isinstance(self.payload, FramedParts):
            self.payload.release()


@attrs.define(eq=False)
class Request:
    """A decoded request in flight, with Kafka's timing points (``time.perf_counter_ns``)."""

    decoded: DecodedRequest
    #: The connection that will send the response (it is woken when the slot is completed).
    owner: RequestOwner
    size: int
    #: Bytes reserved in the memory pool, released once the request is handled.
    reserved: int
    slot: ResponseSlot = attrs.field(factory=ResponseSlot)
    start_ns: int = attrs.field(factory=time.perf_counter_ns)
    dequeue_ns: int = 0
    local_complete_ns: int = 0
    response_complete_ns: int = 0
    response_dequeue_ns: int = 0
    end_ns: int = 0
    #: The request line's ``sequence_errors``, when the handler set one (Produce).
    sequence_errors: str = ""
    #: Its ticket of the connection's ``produce_turns`` (a pipelining connection's Produce);
    #: -1 for any other request.
    turn: int = -1

    @property
    def connection(self) -> ConnectionInfo:
        return self.owner.info

    def timings_ms(self) -> dict[str, float]:
        """Kafka's request-time breakdown (RequestChannel.updateRequestMetrics), in ms,
        rounded to the microsecond."""
        # Written out, in integer arithmetic: this runs for every request, and
        # ``round(x, 3)`` on a float costs about a microsecond each (correctly rounded
        # decimal conversion). ``(ns + 500) // 1000 / 1000`` is the same value for ns >= 0.
        # Conditional expressions rather than max(..., 0): six builtin calls per request.
        start = self.start_ns
        dequeue = self.dequeue_ns
        complete = self.response_complete_ns
        local = self.local_complete_ns or complete
        response_dequeue = self.response_dequeue_ns
        end = self.end_ns
        queue = dequeue - start
        handler = local - dequeue
        remote = complete - local
        response_queue = response_dequeue - complete
        send = end - response_dequeue
        total = end - start
        return {
            "request_queue_ms": ((queue if queue > 0 else 0) + 500) // 1000 / 1000,
            "local_ms": ((handler if handler > 0 else 0) + 500) // 1000 / 1000,
            "remote_ms": ((remote if remote > 0 else 0) + 500) // 1000 / 1000,
            "throttle_ms": float(self.slot.throttle_ms),
            "response_queue_ms": ((response_queue if response_queue > 0 else 0) + 500)
            // 1000 / 1000,
            "send_ms": ((send if send > 0 else 0) + 500) // 1000 / 1000,
            "total_ms": ((total if total > 0 else 0) + 500) // 1000 / 1000,
        }


class RequestChannel:
    """A bounded channel of :class:`Request` with Kafka's RequestQueueSize gauge."""

    def __init__(self, capacity: int, name: str = "data-plane") -> None:
        self.name = name
        self.capacity = capacity
        self.send_channel, self.receive_channel = trio.open_memory_channel[Request](capacity)
        # The channel's buffer, read on every request: ``statistics()`` builds an object per
        # call. Trio's memory channel keeps its buffer as ``_state.data``; if a Trio version
        # does not, the public statistics are used.
        state = getattr(self.send_channel, "_state", None)
        self._buffer: Sized | None = getattr(state, "data", None)
        #: Set by the handler pool that serves this channel (see :meth:`send`).
        self.inline_handler: InlineHandler | None = None

    @property
    def queue_size(self) -> int:
        if self._buffer is not None:
            return len(self._buffer)
        return self.send_channel.statistics().current_buffer_used

    async def send(self, request: Request, *, inline: bool = False) -> None:
        """Queue ``request`` for the handlers, or (``inline``) have it handled in this task.

        ``inline`` is for a connection's reader (one request in flight, or pipelining: the
        handler would run on the same thread before the reader read on anyway). When nothing is queued and a handler is idle, queueing
        would only hand the request to that handler: two task switches (docs/decisions.md,
        "inline handling"). The request is then handled in the sender's task instead, counted
        as one of the pool's handlers, so ``num.io.threads`` still bounds the requests handled
        at once and a queued request is never overtaken. Otherwise it is queued: a full
        channel blocks the sender (``queued.max.requests``).
        """
        handler = self.inline_handler
        if (inline and handler is not None
                and not self.queue_size
                and handler.can_handle_inline(request)):
            await handler.handle_inline(request)
            return
        try:
            # No checkpoint when there is room: a pipelining reader hands over every frame it
            # has buffered before the handlers run (one scheduler pass, not one per request);
            # the reader's next receive is its checkpoint, and the in-flight limit bounds it.
            self.send_channel.send_nowait(request)
        except trio.WouldBlock:
            await self.send_channel.send(request)
