"""Inline handling: a connection (one request in flight or pipelining) may run a cheap
request's handler in its own task when a handler is idle; ``num.io.threads`` still bounds the requests handled at
once (docs/decisions.md, "inline handling")."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio

from tests.kafka_wire import METADATA_ALL_V12, WireClient
from tests.network.test_pipelining import wait_for
from trio_broker.server import registry

METADATA = 3


@attrs.define
class RecordingHandler:
    """Metadata behind a gate, recording which task ran each request."""

    inner: Any
    release: trio.Event = attrs.field(factory=trio.Event)
    tasks: list[str] = attrs.field(factory=list)

    async def handle(self, ctx: Any, body: Any) -> Any:
        self.tasks.append(trio.lowlevel.current_task().name)
        await self.release.wait()
        return await self.inner(ctx, body)


def recording(monkeypatch: pytest.MonkeyPatch, inline: bool) -> RecordingHandler:
    original = registry.handlers()[METADATA]
    handler = RecordingHandler(original.handle)
    monkeypatch.setitem(registry._HANDLERS, METADATA,
                        attrs.evolve(original, handle=handler.handle, inline=inline))
    return handler


async def test_lent_handler_bounds_requests_handled_at_once(
        start_broker: Any, monkeypatch: pytest.MonkeyPatch,
        autojump_clock: trio.testing.MockClock) -> None:
    """num.io.threads=1: the first request runs inline (the connection's task) and holds the
    only handler; the second connection's request waits for it, then runs in the handler."""
    handler = recording(monkeypatch, inline=True)
    running = await start_broker({"num.io.threads": "1"})
    [pool] = [p for p in running.app._pools if p.channel.name == "data-plane"]
    first = await WireClient.connect(running.port)
    second = await WireClient.connect(running.port)
    try:
        await first.send(METADATA, 12, METADATA_ALL_V12)
        await wait_for(lambda: len(handler.tasks) == 1)
        assert "handler" not in handler.tasks[0]  # inline, in the connection's task
        assert pool.idle_ratio == 0
        await second.send(METADATA, 12, METADATA_ALL_V12)
        await trio.sleep(1)
        assert len(handler.tasks) == 1  # the only handler is lent: the second request waits
    finally:
        handler.release.set()  # an inline handler is shielded: never leave it blocked
    assert (await first.receive())[0] == 1
    assert (await second.receive())[0] == 1
    assert handler.tasks[1] == "data-plane-handler-0"
    await wait_for(lambda: pool.idle_ratio == 1)


async def test_non_inline_requests_go_through_the_channel_pipelined_or_not(
        start_broker: Any, monkeypatch: pytest.MonkeyPatch,
        autojump_clock: trio.testing.MockClock) -> None:
    """An API whose handler may wait is always handed to a handler task; an inline API is
    handled in the connection's task with one request in flight and when pipelining (the
    reader of a pipelining connection then reads on once the handler returns)."""
    for inflight, inline in (("4", True), ("4", False), ("1", False), ("1", True)):
        handler = recording(monkeypatch, inline=inline)
        running = await start_broker({"connection.max.inflight.requests": inflight})
        client = await WireClient.connect(running.port)
        await client.send(METADATA, 12, METADATA_ALL_V12)
        await wait_for(lambda tasks=handler.tasks: len(tasks) == 1)  # type: ignore[misc]
        handler.release.set()
        assert (await client.receive())[0] == 1
        in_handler = handler.tasks[0].startswith("data-plane-handler-")
        assert in_handler is not inline, (inflight, inline, handler.tasks)


async def test_a_pipelining_connection_queues_behind_a_busy_pool(
        start_broker: Any, monkeypatch: pytest.MonkeyPatch,
        autojump_clock: trio.testing.MockClock) -> None:
    """num.io.threads=1, pipelining: the first inline request holds the only handler, so the
    second connection's request goes through the channel and waits; answers stay in order."""
    handler = recording(monkeypatch, inline=True)
    running = await start_broker({"num.io.threads": "1",
                                  "connection.max.inflight.requests": "4"})
    first = await WireClient.connect(running.port)
    second = await WireClient.connect(running.port)
    try:
        await first.send(METADATA, 12, METADATA_ALL_V12)
        await wait_for(lambda: len(handler.tasks) == 1)
        assert "handler" not in handler.tasks[0]
        await second.send(METADATA, 12, METADATA_ALL_V12)
        await trio.sleep(1)
        assert len(handler.tasks) == 1
    finally:
        handler.release.set()
    assert (await first.receive())[0] == 1
    assert (await second.receive())[0] == 1
    assert handler.tasks[1] == "data-plane-handler-0"
