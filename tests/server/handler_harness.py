"""What the in-process handler tests share: a Broker over a real LogManager, requests sent
through the real codec and handler registry, and waiting for a parked (long-poll) answer."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import trio

from trio_broker.config import BrokerConfig, Endpoint
from trio_broker.protocol.codec import (
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    frame_response,
)
from trio_broker.server.broker import Broker
from trio_broker.server.context import ConnectionInfo, EncodedBody, Parked, RequestContext
from trio_broker.server.registry import handlers, supported_versions
from trio_broker.storage import LogManager

_correlation = itertools.count(1)


@contextlib.contextmanager
def open_broker(config: BrokerConfig, partitions: int) -> Iterator[Broker]:
    """A Broker (no network) whose LogManager holds topic ``t`` with ``partitions``."""
    lm = LogManager(config)
    lm.open()
    lm.create_topic("t", partitions)
    try:
        yield Broker(config, cluster_id="c", log_manager=lm,
                     advertised={"PLAINTEXT": Endpoint("PLAINTEXT", "h", 9092)})
    finally:
        lm.close()


async def send(broker: Broker, api_key: int, version: int, body: Any) -> tuple[Any, Any]:
    """Encode, decode, handle; returns the request and the handler's raw result (Parked /
    NO_RESPONSE / body)."""
    frame = encode_request(api_key, version, next(_correlation), "test", body)
    request = decode_request(frame[4:], supported_versions())
    ctx = RequestContext(request=request, broker=broker, connection=ConnectionInfo(
        connection_id="x", listener="PLAINTEXT", security_protocol="PLAINTEXT", peer="p",
        processor=0))
    return request, await handlers()[api_key].handle(ctx, request.body)


def wire(request: Any, api_key: int, version: int, body: Any) -> Any:
    """The response ``body`` as a client decodes it off the wire (a pre-encoded one as the
    handler pool frames it)."""
    if isinstance(body, EncodedBody):
        frame = body.payload if body.framed else frame_response(request, body.payload, False)
    else:
        frame = encode_response(request, body)
    return decode_response(api_key, version, frame[4:])[1]


async def call(broker: Broker, api_key: int, version: int, body: Any) -> Any:
    """Send and wait for the answer (parked or not), decoded as a client would."""
    request, result = await send(broker, api_key, version, body)
    if isinstance(result, Parked):
        result = await result.wait()
    return wire(request, api_key, version, result)


async def answer_when_woken(result: Parked, wake: Callable[[], Awaitable[Any]]) -> Any:
    """A parked request's answer, checking that none came in the first (autojumped) second,
    after which ``wake`` runs (an append the long poll waits for)."""
    answers: list[Any] = []

    async def waiter() -> None:
        answers.append(await result.wait())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.sleep(1)
        assert not answers
        await wake()
    return answers[0]
