"""The Trio side of waiting in the classic group coordinator: a :class:`Pending` result a parked
request waits on, and :class:`KeyedTimers`, one cancel scope per key.

:mod:`.classic_state` speaks of tickets and timer keys; the shell
(:class:`~trio_broker.coordinator.coordinator.GroupCoordinator`) turns a ticket into a
:class:`Pending` and a timer key into a scope here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Generic, TypeVar

import attrs
import trio

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


@attrs.define(eq=False)
class Pending(Generic[T]):
    """A result that a parked request waits for (one JoinGroup or SyncGroup response, or the
    error code of a write)."""

    event: trio.Event = attrs.field(factory=trio.Event)
    value: T | None = None

    @property
    def done(self) -> bool:
        return self.event.is_set()

    def set(self, value: T) -> None:
        """Deliver the result (only the first delivery counts)."""
        if not self.event.is_set():
            self.value = value
            self.event.set()

    async def wait(self) -> T:
        await self.event.wait()
        assert self.value is not None
        return self.value


def resolved(value: T) -> Pending[T]:
    """A :class:`Pending` that already holds its result (a request answered without waiting)."""
    pending: Pending[T] = Pending()
    pending.set(value)
    return pending


class KeyedTimers(Generic[K]):
    """Deadlines by key, each a cancel scope in a task of the owner's nursery.

    ``arm`` sets a key's deadline (moving it when the key is armed already: a heartbeat),
    ``cancel`` forgets the key; when a deadline passes, ``fire(key)`` is called once and the key
    is forgotten (``fire`` may arm it again). Before :meth:`start` (and after the nursery is
    gone) arming does nothing: the owner arms what it needs when it starts.
    """

    def __init__(self, fire: Callable[[K], None],
                 spawn: Callable[..., None] | None = None) -> None:
        self._fire = fire
        self._spawn = spawn
        self._scopes: dict[K, trio.CancelScope] = {}

    def start(self, spawn: Callable[[Callable[..., Awaitable[None]], Any], None]) -> None:
        """Start arming timers; ``spawn(fn, *args)`` runs a task in the owner's nursery."""
        self._spawn = spawn

    def stop(self) -> None:
        """The nursery is gone: its tasks (and so every timer) ended with it."""
        self._spawn = None
        self._scopes.clear()

    def __contains__(self, key: object) -> bool:
        return key in self._scopes

    def arm(self, key: K, delay_ms: float) -> None:
        deadline = trio.current_time() + delay_ms / 1000
        scope = self._scopes.get(key)
        if scope is not None:
            scope.deadline = deadline
            return
        if self._spawn is None:
            return
        scope = self._scopes[key] = trio.CancelScope(deadline=deadline)
        self._spawn(self._watch, key, scope)

    def cancel(self, key: K) -> None:
        scope = self._scopes.pop(key, None)
        if scope is not None:
            scope.cancel()

    async def _watch(self, key: K, scope: trio.CancelScope) -> None:
        while True:
            with scope:
                await trio.sleep_forever()
            if self._scopes.get(key) is not scope:
                return  # cancelled
            if scope.deadline > trio.current_time():
                # Moved (a heartbeat) just as it expired: keep watching the new deadline.
                scope = self._scopes[key] = trio.CancelScope(deadline=scope.deadline)
                continue
            del self._scopes[key]
            self._fire(key)
            return
