"""Work that grows with what a client sent, kept off the event loop (docs/architecture.md).

Every connection shares one Trio thread: a handler that computes for 100 ms delays every other
connection's reads and answers by 100 ms. Work whose cost the client chooses (decompressing and
walking produced records, building answers for huge arrays) runs either in a worker thread,
through :func:`in_worker`, or in bounded steps that yield with :class:`Steps`.

Worker threads share one ``trio.CapacityLimiter`` of ``num.io.threads`` (Kafka's request-handler
threads), so a burst of heavy requests queues for a thread instead of starting hundreds. The
codecs and the file system release the GIL: that work runs on the second core. Python-level work
in a thread still holds the GIL, but Python hands it back to the event loop at least every
switch interval (5 ms), which bounds how long the loop waits for it.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import trio
import trio.testing

T = TypeVar("T")

#: How long a handler may compute between two yields to the scheduler.
STEP_SECONDS = 0.005


def virtual_time() -> bool:
    """True under Trio's ``MockClock`` (the tests' autojump clock, the pytest plugin's)."""
    return isinstance(trio.lowlevel.current_clock(), trio.testing.MockClock)


async def in_worker(limiter: trio.CapacityLimiter | None, fn: Callable[..., T], *args: object
                    ) -> T:
    """``fn(*args)`` in a worker thread under ``limiter`` (None: Trio's default one).

    Shielded: the handlers that use it may run inline in a connection's task, which must settle
    every request it starts (``RequestHandlerPool.handle_inline``); the work itself is bounded.
    Under a virtual clock the call runs inline instead: a worker thread's real time would
    become a jump of virtual time to the next deadline (an idle connection's expiry, a session
    timeout), which no test expects."""
    if virtual_time():
        return fn(*args)
    with trio.CancelScope(shield=True):
        result = await trio.to_thread.run_sync(fn, *args, limiter=limiter)
    return result


_gc_lock = threading.Lock()
_gc_pausers = 0
_gc_was_enabled = True


def without_gc_pauses(fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)`` with the cyclic garbage collector off, for a worker thread that builds
    hundreds of thousands of objects (a huge request decoded): each automatic collection it
    would trigger scans every object of the process in one native call that holds the GIL,
    tens of milliseconds during which the event loop cannot run. Reference counting still
    frees what it can; the collector is back on when the last such call ends."""
    global _gc_pausers, _gc_was_enabled
    with _gc_lock:
        if _gc_pausers == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pausers += 1
    try:
        return fn(*args)
    finally:
        with _gc_lock:
            _gc_pausers -= 1
            if _gc_pausers == 0 and _gc_was_enabled:
                gc.enable()


class Steps:
    """Yield to the scheduler once :data:`STEP_SECONDS` of work have passed: call
    :meth:`tick` between items of a long loop (a cheap clock read until it is time)."""

    __slots__ = ("_deadline",)

    def __init__(self) -> None:
        self._deadline = time.perf_counter() + STEP_SECONDS

    async def tick(self) -> None:
        if time.perf_counter() >= self._deadline:
            with trio.CancelScope(shield=True):
                await trio.lowlevel.checkpoint()
            self._deadline = time.perf_counter() + STEP_SECONDS
