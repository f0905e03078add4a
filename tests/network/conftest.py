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


@pytest.fixture
def blocked_metadata(monkeypatch: pytest.MonkeyPatch) -> BlockedHandler:
    """Metadata requests wait in their handler until ``blocked_metadata.release`` is set."""
    original = registry.handlers()[METADATA]
    blocked = BlockedHandler(original.handle)
    monkeypatch.setitem(registry._HANDLERS, METADATA, attrs.evolve(original, handle=blocked.handle))
    return blocked
