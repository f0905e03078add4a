"""The purgatory: where parked (delayed) requests wait, as Kafka's DelayedOperationPurgatory.

A parked request is a task in the purgatory's nursery (see :class:`~.context.Parked`). A delayed
operation with a deadline (Fetch's long poll) waits inside :meth:`Purgatory.delay`, a cancel scope
whose deadline is the request's wait time. At shutdown :meth:`Purgatory.complete_all` ends every
such wait at once, so each operation completes with what it has, the way Kafka force-completes a
DelayedFetch; the in-flight drain then finishes without waiting out the long polls.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import trio


class Purgatory:
    """Parked requests' tasks, and the deadlines of the delayed operations among them."""

    def __init__(self) -> None:
        self._nursery: trio.Nursery | None = None
        self._delays: set[trio.CancelScope] = set()
        self._completing = False

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Host parked requests' tasks until cancelled (which cancels them too)."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._nursery = None

    @property
    def completing(self) -> bool:
        """True once :meth:`complete_all` ran: new delays end at once."""
        return self._completing

    @property
    def waiting(self) -> int:
        """Delayed operations waiting on a deadline right now."""
        return len(self._delays)

    def start_soon(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Run a parked request's wait."""
        if self._nursery is None:
            raise RuntimeError("the purgatory is not running")
        self._nursery.start_soon(fn, *args)

    @contextmanager
    def delay(self, seconds: float) -> Iterator[trio.CancelScope]:
        """A ``move_on_after(seconds)`` that :meth:`complete_all` also ends."""
        with trio.move_on_after(seconds) as scope:
            if self._completing:
                scope.cancel()
            self._delays.add(scope)
            try:
                yield scope
            finally:
                self._delays.discard(scope)

    def complete_all(self) -> None:
        """End every delay now and from now on (broker shutdown)."""
        self._completing = True
        for scope in self._delays:
            scope.cancel()
