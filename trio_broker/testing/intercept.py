"""Fault injection: change how the broker answers chosen requests.

``broker.intercept(api="Produce", action=error("NOT_LEADER_OR_FOLLOWER"), times=1)`` makes the
next Produce request fail as a broker that lost leadership would answer it; the client's retry
then succeeds. Actions:

* :func:`delay` ``(seconds)``: answer later (on the broker's clock: virtual under
  ``autojump_clock``), then handle the request normally;
* :func:`error` ``(code)``: do not handle the request; answer with Kafka's error response of
  that API carrying ``code`` in every error field (built by
  :mod:`trio_broker.protocol.error_response`, so it is correctly encoded for every API and
  version);
* :func:`drop`: handle the request, send no answer (the client's request times out);
* :func:`close`: close the connection instead of handling the request.

The broker's request path has one hook for this (``RequestHandlerPool.interceptor``), None
unless a test installed an interception.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import attrs
import trio
from kio.schema.errors import ErrorCode

from ..protocol.codec import DecodedRequest
from ..protocol.error_response import error_response
from ..server.context import NO_RESPONSE, CloseConnection, Parked, RequestContext

__all__ = ["Action", "Close", "Delay", "Drop", "Error", "Interception", "close", "delay",
           "dispatch", "drop", "error"]

Handle = Callable[[RequestContext, Any], Awaitable[Any]]


class Action(Protocol):
    """What an interception does instead of (or around) the API's handler."""

    async def apply(self, ctx: RequestContext, handle: Handle) -> Any: ...


@attrs.frozen
class Delay:
    """Wait ``seconds``, then handle the request as usual (or apply ``then``)."""

    seconds: float
    then: Action | None = None

    async def apply(self, ctx: RequestContext, handle: Handle) -> Any:
        await trio.sleep(self.seconds)
        if self.then is not None:
            return await self.then.apply(ctx, handle)
        return await handle(ctx, ctx.request.body)


def _error_code(code: int | str | ErrorCode) -> ErrorCode:
    if isinstance(code, str):
        try:
            return ErrorCode[code.lower()]
        except KeyError:
            raise ValueError(f"unknown Kafka error code {code!r}") from None
    return ErrorCode(code)


@attrs.frozen
class Error:
    """Answer with the API's error response carrying ``code`` (a Kafka error name such as
    ``"NOT_LEADER_OR_FOLLOWER"``, or its number); the request is not handled."""

    code: ErrorCode = attrs.field(converter=_error_code)

    async def apply(self, ctx: RequestContext, handle: Handle) -> Any:
        request = ctx.request
        body = error_response(request.api_key, request.api_version, request.body,
                              self.code.value)
        # Produce with acks=0 has no response: Kafka closes the connection instead.
        if body is None:
            raise CloseConnection(f"intercepted with {self.code.name.upper()} (acks=0)")
        return body


@attrs.frozen
class Drop:
    """Handle the request, but send no answer."""

    async def apply(self, ctx: RequestContext, handle: Handle) -> Any:
        result = await handle(ctx, ctx.request.body)
        if isinstance(result, Parked):  # a long poll: drop its answer when it comes
            wait = result.wait

            async def dropped() -> Any:
                await wait()
                return NO_RESPONSE
            return ctx.park(dropped)
        return NO_RESPONSE


@attrs.frozen
class Close:
    """Close the connection without handling the request."""

    async def apply(self, ctx: RequestContext, handle: Handle) -> Any:
        raise CloseConnection("closed by a test's interception")


def delay(seconds: float, then: Action | None = None) -> Delay:
    return Delay(seconds, then)


def error(code: int | str | ErrorCode) -> Error:
    return Error(code)


def drop() -> Drop:
    return Drop()


def close() -> Close:
    return Close()


@attrs.define(eq=False)
class Interception:
    """One installed interception; ``seen`` counts matching requests, ``applied`` those the
    action was applied to. ``remove()`` (or leaving a ``with`` block) uninstalls it."""

    api: str | None
    action: Action
    nth: int | None
    times: int | None
    when: Callable[[DecodedRequest], bool] | None
    remover: Callable[[Interception], None]
    seen: int = 0
    applied: int = 0

    def matches(self, request: DecodedRequest) -> bool:
        """Whether the action applies to ``request`` (counted; called on the broker's thread)."""
        if self.api is not None and request.api != self.api:
            return False
        if self.when is not None and not self.when(request):
            return False
        self.seen += 1
        if self.nth is not None and self.seen != self.nth:
            return False
        if self.times is not None and self.applied >= self.times:
            return False
        self.applied += 1
        return True

    def remove(self) -> None:
        self.remover(self)

    def __enter__(self) -> Interception:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


async def dispatch(interceptions: list[Interception], ctx: RequestContext, handle: Handle
                   ) -> Any:
    """The pool's interceptor: the first matching interception's action, else the handler."""
    for interception in tuple(interceptions):
        if interception.matches(ctx.request):
            return await interception.action.apply(ctx, handle)
    return await handle(ctx, ctx.request.body)
