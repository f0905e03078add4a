"""Fixtures of the network-layer tests."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio

from trio_broker.server import registry

METADATA = 3


@attrs.define
class BlockedHandler:
    """Metadata's handler behind a gate: a slow back end the test releases."""

    inner: Any
    release: trio.Event = attrs.field(factory=trio.Event)
    entered: int = 0

    async def handle(self, ctx: Any, body: Any) -> Any:
        self.entered += 1
        await self.release.wait()
        return await self.inner(ctx, body)


def block_metadata(monkeypatch: pytest.MonkeyPatch) -> BlockedHandler:
    """Put Metadata's handler behind a gate until the test ends (also for other packages'
    tests, which cannot take this directory's fixtures)."""
    original = registry.handlers()[METADATA]
    blocked = BlockedHandler(original.handle)
    monkeypatch.setitem(registry._HANDLERS, METADATA, attrs.evolve(original, handle=blocked.handle))
    return blocked


@pytest.fixture
def blocked_metadata(monkeypatch: pytest.MonkeyPatch) -> BlockedHandler:
    """Metadata requests wait in their handler until ``blocked_metadata.release`` is set."""
    return block_metadata(monkeypatch)


#: The throttle every Metadata response carries under :func:`throttling_metadata`.
THROTTLE_MS = 500


@pytest.fixture
def throttling_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every Metadata response carries a 500 ms throttle (as a quota would set it)."""
    original = registry.handlers()[METADATA]

    async def throttling(ctx: Any, body: Any) -> Any:
        ctx.throttle_ms = THROTTLE_MS
        return await original.handle(ctx, body)

    monkeypatch.setitem(registry._HANDLERS, METADATA, attrs.evolve(original, handle=throttling))
