"""The request-handler pool (Kafka's KafkaRequestHandlerPool + KafkaApis dispatch).

``num.io.threads`` handler tasks take requests from the request channel and call the handler
registered for the API key. A handler that must wait (long-poll Fetch, JoinGroup) returns
:class:`Parked`; the wait then runs in the purgatory nursery and the handler task moves on, as
Kafka's delayed operations free the handler thread.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
import traceback
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio

from ..network.request_channel import Request, RequestChannel, ResponseAction
from ..observability.log import emit, for_connection
from ..protocol.codec import encode_response, encode_response_parts, frame_response
from ..protocol.error_response import error_response
from ..protocol.errors import response_error
from ..protocol.regions import FramedParts
from .context import NO_RESPONSE, CloseConnection, EncodedBody, Parked, RequestContext
from .quota_manager import REQUEST
from .registry import handlers

if TYPE_CHECKING:
    from ..network.socket_server import SocketServer
    from .broker import Broker


#: Requests a handler task takes from the channel in a row without a checkpoint of its own.
HANDLER_BATCH = 16


class RequestHandlerPool:
    """Handler tasks for one request channel (data plane, or the control plane's own)."""

    #: Set by ``trio_broker.testing`` (fault injection): ``interceptor(ctx, handle)`` answers
    #: in place of ``handle(ctx, body)``. None in a real broker: one attribute test per request.
    interceptor: Callable[[RequestContext, Any], Awaitable[Any]] | None = None

    def __init__(self, broker: Broker, server: SocketServer, channel: RequestChannel,
                 num_handlers: int) -> None:
        self.broker = broker
        self.server = server
        self.channel = channel
        self.num_handlers = num_handlers
        self._handlers = handlers()
        self._idle_handlers = 0
        # Idle handlers lent to requests handled inline, in their connection's task.
        self._lent = 0
        self._lent_lot = trio.lowlevel.ParkingLot()
        # Handler time of finished requests (until they returned or parked), for the
        # time-averaged idle gauge, and where the previous reading of it left off.
        self._busy_ns = 0
        self._idle_read = (time.perf_counter_ns(), 0)
        self.cancel_scope = trio.CancelScope()
        channel.inline_handler = self

    @property
    def idle_ratio(self) -> float:
        """Share of handlers free for a request right now (RequestHandlerAvgIdlePercent)."""
        return max(self._idle_handlers - self._lent, 0) / self.num_handlers

    def read_avg_idle_ratio(self) -> float:
        """Kafka's RequestHandlerAvgIdlePercent (0..1): the handlers' idle share of the time
        since the previous reading (a handler is busy from taking a request until its handler
        returns or parks it)."""
        now = time.perf_counter_ns()
        since, busy_before = self._idle_read
        self._idle_read = (now, self._busy_ns)
        elapsed = (now - since) * self.num_handlers
        if elapsed <= 0:
            return 1.0
        return min(max(1.0 - (self._busy_ns - busy_before) / elapsed, 0.0), 1.0)

    def can_handle_inline(self, request: Request) -> bool:
        handler = self._handlers.get(request.decoded.api_key)
        # A request handled inline never waits for its turn: a handler task holding an
        # earlier turn may be waiting for this lent turn to come back.
        if request.turn >= 0:
            turns = request.connection.produce_turns
            if turns is None or not turns.is_turn(request.turn):
                return False
        return self._idle_handlers > self._lent and handler is not None and handler.inline

    async def handle_inline(self, request: Request) -> None:
        """Handle a request in the connection's task, as one of the idle handlers.

        Like a handler task, it runs to completion once it has started (the memory
        reservation and the response slot are always settled); a cancellation of the
        connection takes effect at its next checkpoint. Only handlers that wait for nothing
        but the disk are run this way (``ApiHandler.inline``), and they reach no checkpoint
        but the one wait they must finish, which shields itself (the produce's flush,
        ``LogManager.append``): a shielding cancel scope per request would cost more than the
        rest of the hand-off. A fault-injecting interceptor may wait anywhere, so with one
        the whole handler is shielded.
        """
        self._lent += 1
        try:
            if self.interceptor is None:
                await self.handle(request)
            else:
                with trio.CancelScope(shield=True):
                    await self.handle(request)
        finally:
            self._lent -= 1
            if self._lent_lot:  # a handler waits for its lent turn (rare; unpark costs a µs)
                self._lent_lot.unpark()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with self.cancel_scope:
            async with trio.open_nursery() as nursery:
                for index in range(self.num_handlers):
                    nursery.start_soon(self._handler_loop, name=f"{self.channel.name}-handler-{index}")
                task_status.started()

    async def _handler_loop(self) -> None:
        receive = self.channel.receive_channel
        taken = 0
        while True:
            self._idle_handlers += 1
            try:
                # A queued request is taken without a checkpoint (one scheduler pass per
                # request otherwise), up to HANDLER_BATCH in a row so that the loop stays fair.
                if taken < HANDLER_BATCH:
                    try:
                        request = receive.receive_nowait()
                    except trio.WouldBlock:
                        taken = 0
                        request = await receive.receive()
                else:
                    taken = 0
                    request = await receive.receive()
                taken += 1
            finally:
                self._idle_handlers -= 1
            # This handler's turn may be lent to an inline request: never more than
            # num_handlers requests in hand at once.
            while self._lent > self._idle_handlers:
                await self._lent_lot.park()
            await self.handle(request)
            # An idle handler keeps no request (nor its decoded body) alive while it waits.
            del request

    async def handle(self, request: Request) -> None:
        if request.turn >= 0:
            await self._handle_in_turn(request)
            return
        request.dequeue_ns = dequeued = time.perf_counter_ns()
        decoded = request.decoded
        connection = request.owner.info
        ctx = RequestContext(decoded, connection, self.broker, size=request.size,
                             dequeue_ns=dequeued)
        handler = self._handlers[decoded.api_key]
        interceptor = self.interceptor
        with for_connection(connection):
            # _answer's steps written out: one coroutine and one closure less per request.
            try:
                if interceptor is None:
                    result = await handler.handle(ctx, decoded.body)
                else:
                    result = await interceptor(ctx, handler.handle)
                self._settle(request, ctx, result)
            except CloseConnection as close:
                self._closed(request, ctx, close)
            except Exception as exc:
                self._fail(request, ctx, exc)
        if interceptor is None:
            self._busy_ns += time.perf_counter_ns() - request.dequeue_ns

    async def _handle_in_turn(self, request: Request) -> None:
        """A pipelining connection's Produce: handled once its earlier ones are
        (``network/turns.py``); its turn ends however the handler ends."""
        turns = request.connection.produce_turns
        assert turns is not None
        turn, request.turn = request.turn, -1
        try:
            await turns.wait(turn)
            await self.handle(request)
        finally:
            turns.finish(turn)

    async def _answer(self, request: Request, ctx: RequestContext,
                      produce: Callable[[], Awaitable[Any]]) -> None:
        """Run a parked wait and complete the request with the outcome (:meth:`handle` does
        the same for the handler itself).

        A handler that fails (its response's encoding included) gets the API's error response,
        as Kafka's ``sendErrorOrCloseConnection``; the connection is kept.
        """
        try:
            self._settle(request, ctx, await produce())
        except CloseConnection as close:
            self._closed(request, ctx, close)
        except Exception as exc:
            self._fail(request, ctx, exc)

    def _settle(self, request: Request, ctx: RequestContext, result: Any) -> None:
        """A handler's (or a parked wait's) outcome: complete the request, or park it."""
        if isinstance(result, Parked):
            request.local_complete_ns = ctx.local_complete_ns = time.perf_counter_ns()
            # The task inherits this task's context, so its events keep the bound fields.
            self.broker.purgatory.start_soon(self._answer, request, ctx, result.wait)
            return
        if ctx.sequence_errors:
            request.sequence_errors = ctx.sequence_errors
        self.complete(request, ctx, self._apply_quotas(ctx, result))

    def _closed(self, request: Request, ctx: RequestContext, close: CloseConnection) -> None:
        if ctx.sequence_errors:  # a failed acks=0 produce closes the connection
            request.sequence_errors = ctx.sequence_errors
        if close.response is not None:
            self._finish(request, ResponseAction.CLOSE,
                         encode_response(request.decoded, close.response),
                         error=response_error(close.response), close_reason=close.reason)
        else:
            self.complete(request, ctx, None, close_reason=close.reason)

    def _fail(self, request: Request, ctx: RequestContext, exc: Exception) -> None:
        """Answer a failed request with UNKNOWN_SERVER_ERROR, or close when there is no answer.

        Kafka closes instead when the API has no error response (Produce with acks=0, whose
        client would otherwise never learn of the failure) and so do we when even the error
        response cannot be built.
        """
        decoded = request.decoded
        emit("request_failed", api=decoded.api, correlation_id=decoded.correlation_id,
             error=type(exc).__name__, detail=repr(exc),
             traceback="".join(traceback.format_exception(exc)))
        # An ApiVersions request of an unsupported version is answered as v0.
        version = 0 if decoded.unsupported_version else decoded.api_version
        framed: bytes | None = None
        reason = f"handler error: {exc!r}"
        try:
            body = error_response(decoded.api_key, version, decoded.body)
            if body is not None:
                framed = encode_response(decoded, body)
        except Exception as build_exc:  # the request itself is beyond answering: close
            reason += f"; no error response: {build_exc!r}"
        if framed is None:
            self.complete(request, ctx, None, close_reason=reason)
        else:
            self._finish(request, ResponseAction.SEND, framed, error="UNKNOWN_SERVER_ERROR")

    def _apply_quotas(self, ctx: RequestContext, body: Any) -> Any:
        """Kafka's ``sendResponseMaybeThrottle``: charge the handler time to the client's
        request_percentage quota, and put the longest throttle any quota asked for into the
        response's ``throttle_time_ms`` (the connection then mutes itself for that long).

        Exempt, as in Kafka: the control plane, acks=0 produce (no response), and ApiVersions
        (answered pre-encoded, with no throttle field to fill)."""
        quotas = self.broker.client_quotas
        if quotas is None:
            return body
        managers = quotas.managers
        unencoded = body is not NO_RESPONSE and not isinstance(body, EncodedBody)
        if managers.request.enabled and unencoded and not ctx.connection.control_plane:
            ctx.throttle(managers.record_request_time(ctx), REQUEST, wins_ties=True)
        if ctx.throttle_ms <= 0:
            return body
        managers.throttled(ctx)
        if not unencoded or body is None:
            return body
        current = getattr(body, "throttle_time", None)
        wanted = datetime.timedelta(milliseconds=ctx.throttle_ms)
        if current is not None and current != wanted:
            body = dataclasses.replace(body, throttle_time=wanted)
        return body

    def complete(self, request: Request, ctx: RequestContext, body: Any, *,
                 close_reason: str = "") -> None:
        """Hand the response to the connection: Send, NoOp or CloseConnection."""
        if close_reason:
            self._finish(request, ResponseAction.CLOSE, close_reason=close_reason)
        elif body is NO_RESPONSE:
            self._finish(request, ResponseAction.NOOP, throttle_ms=ctx.throttle_ms,
                         throttle_quota=ctx.throttle_quota)
        elif isinstance(body, EncodedBody):
            # Pre-encoded: ApiVersions (header v0 always) and the usual Produce answer (framed).
            self._finish(request, ResponseAction.SEND,
                         body.payload if body.framed
                         else frame_response(request.decoded, body.payload, False),
                         error=body.error, throttle_ms=ctx.throttle_ms,
                         throttle_quota=ctx.throttle_quota)
        else:
            # Encoded before anything is recorded: a body that cannot be encoded is a failure.
            framed = encode_response_parts(request.decoded, body)
            self._finish(request, ResponseAction.SEND, framed, error=response_error(body),
                         throttle_ms=ctx.throttle_ms, throttle_quota=ctx.throttle_quota)

    def _finish(self, request: Request, action: ResponseAction,
                payload: bytes | FramedParts = b"", *,
                error: str = "NONE", throttle_ms: int = 0, throttle_quota: str = "",
                close_reason: str = "") -> None:
        now = time.perf_counter_ns()
        if not request.local_complete_ns:
            request.local_complete_ns = now
        request.response_complete_ns = now
        request.slot.complete(action, payload, error=error, throttle_ms=throttle_ms,
                              throttle_quota=throttle_quota, close_reason=close_reason)
        self.server.memory_pool.release(request.reserved)
        request.reserved = 0
        owner = request.owner
        if owner.closed:
            # The connection is gone (idle expiry, client close): the response is dropped but
            # the request still counts in the metrics, as in Kafka.
            request.response_dequeue_ns = request.end_ns = now
            request.slot.release()
            self.server.request_completed(request, dropped=True)
        else:
            owner.wake()
