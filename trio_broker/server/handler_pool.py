"""The request-handler pool (Kafka's KafkaRequestHandlerPool + KafkaApis dispatch).

``num.io.threads`` handler tasks take requests from the request channel and call the handler
registered for the API key. A handler that must wait (long-poll Fetch, JoinGroup) returns
:class:`Parked`; the wait then runs in the purgatory nursery and the handler task moves on, as
Kafka's delayed operations free the handler thread.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio

from ..network.request_channel import Request, RequestChannel, ResponseAction
from ..observability.log import emit, for_connection
from ..protocol.codec import encode_response, frame_response
from ..protocol.errors import response_error
from .context import NO_RESPONSE, CloseConnection, EncodedBody, Parked, RequestContext
from .registry import handlers

if TYPE_CHECKING:
    from ..network.socket_server import SocketServer
    from .broker import Broker


class RequestHandlerPool:
    """Handler tasks for one request channel (data plane, or the control plane's own)."""

    def __init__(self, broker: Broker, server: SocketServer, channel: RequestChannel,
                 num_handlers: int) -> None:
        self.broker = broker
        self.server = server
        self.channel = channel
        self.num_handlers = num_handlers
        self._handlers = handlers()
        self._idle_handlers = 0
        self.cancel_scope = trio.CancelScope()

    @property
    def idle_ratio(self) -> float:
        """Share of handler tasks waiting for a request right now (RequestHandlerAvgIdlePercent)."""
        return self._idle_handlers / self.num_handlers

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with self.cancel_scope:
            async with trio.open_nursery() as nursery:
                for index in range(self.num_handlers):
                    nursery.start_soon(self._handler_loop, name=f"{self.channel.name}-handler-{index}")
                task_status.started()

    async def _handler_loop(self) -> None:
        receive = self.channel.receive_channel
        while True:
            self._idle_handlers += 1
            try:
                request = await receive.receive()
            finally:
                self._idle_handlers -= 1
            await self.handle(request)

    async def handle(self, request: Request) -> None:
        request.dequeue_ns = time.perf_counter_ns()
        decoded = request.decoded
        ctx = RequestContext(decoded, request.connection, self.broker)
        handler = self._handlers[decoded.api_key]
        with for_connection(request.connection):
            await self._answer(request, ctx, lambda: handler.handle(ctx, decoded.body))

    async def _answer(self, request: Request, ctx: RequestContext,
                      produce: Callable[[], Awaitable[Any]]) -> None:
        """Run a handler (or a parked wait) and complete the request with the outcome.

        Any failure, encoding the response included, closes only this request's connection.
        """
        try:
            result = await produce()
            if isinstance(result, Parked):
                request.local_complete_ns = time.perf_counter_ns()
                purgatory = self.broker.purgatory
                assert purgatory is not None, "the broker is not running"
                # The task inherits this task's context, so its events keep the bound fields.
                purgatory.start_soon(self._answer, request, ctx, result.wait)
                return
            self.complete(request, ctx, result)
        except CloseConnection as close:
            self.complete(request, ctx, None, close_reason=close.reason)
        except Exception as exc:
            emit("request_failed", api=request.decoded.api,
                 correlation_id=request.decoded.correlation_id, error=type(exc).__name__,
                 detail=repr(exc))
            self.complete(request, ctx, None, close_reason=f"handler error: {exc!r}")

    def complete(self, request: Request, ctx: RequestContext, body: Any, *,
                 close_reason: str = "") -> None:
        """Hand the response to the connection: Send, NoOp or CloseConnection."""
        now = time.perf_counter_ns()
        if not request.local_complete_ns:
            request.local_complete_ns = now
        request.response_complete_ns = now
        slot = request.slot
        if close_reason:
            slot.complete(ResponseAction.CLOSE, close_reason=close_reason)
        elif body is NO_RESPONSE:
            slot.complete(ResponseAction.NOOP, throttle_ms=ctx.throttle_ms)
        elif isinstance(body, EncodedBody):
            # ApiVersions is the only pre-encoded answer, and it always uses header v0.
            slot.complete(ResponseAction.SEND, frame_response(request.decoded, body.payload, False),
                          error=body.error, throttle_ms=ctx.throttle_ms)
        else:
            slot.complete(ResponseAction.SEND, encode_response(request.decoded, body),
                          error=response_error(body), throttle_ms=ctx.throttle_ms)
        self.server.memory_pool.release(request.reserved)
        request.reserved = 0
        owner = request.owner
        if owner.closed:
            # The connection is gone (idle expiry, client close): the response is dropped but
            # the request still counts in the metrics, as in Kafka.
            request.response_dequeue_ns = request.end_ns = now
            self.server.request_completed(request, dropped=True)
        else:
            owner.wake()
