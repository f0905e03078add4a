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

import ctypes
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


#: The longest the cyclic collector stays off for requests in hand: past it the collector is
#: back on at once, whatever is still held (a request kept alive by a reference cycle, or a
#: stream of huge requests, must not keep it off for good).
MAX_COLLECTOR_PAUSE_S = 2.0


class CollectorPause:
    """The cyclic garbage collector held off while huge requests are in hand.

    A request of 100,000 partitions builds hundreds of thousands of objects, none in a cycle,
    all freed by reference counting once it is answered. Each automatic collection they would
    trigger on the way scans every object of the process in one native call that holds the
    GIL (50-120 ms each, several in a row as the objects age through the generations), during
    which the event loop cannot run; and it frees nothing. Held off from the decode until the
    request is gone, the objects are freed before the collector next looks, and its counters
    are back where they were. ``hold`` returns a token for ``release``; thread-safe.

    Once a pause ends, :meth:`keep_sweeping` also hands the C allocator's free memory back to
    the system (glibc's ``malloc_trim``): the huge request's buffers and tables were freed, but
    glibc keeps freed heap pages until told, and the broker's RSS would stay tens of MiB up."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holds: dict[int, float] = {}
        self._next_token = 0
        self._was_enabled = True
        self._trim_wanted = False

    def hold(self) -> int:
        with self._lock:
            now = time.monotonic()
            self._expire(now)
            if not self._holds:
                self._was_enabled = gc.isenabled()
                gc.disable()
            token = self._next_token
            self._next_token += 1
            self._holds[token] = now
            return token

    def release(self, token: int) -> None:
        with self._lock:
            if self._holds.pop(token, None) is not None and not self._holds:
                self._resume()

    def sweep(self) -> None:
        """End a pause older than :data:`MAX_COLLECTOR_PAUSE_S` (called periodically)."""
        with self._lock:
            self._expire(time.monotonic())

    async def keep_sweeping(self, interval: float = MAX_COLLECTOR_PAUSE_S / 4) -> None:
        """:meth:`sweep` every ``interval`` seconds until cancelled (the broker runs this), and
        give freed memory back after a pause has ended."""
        while True:
            await trio.sleep(interval)
            self.sweep()
            if self._trim_wanted and not self._holds:
                self._trim_wanted = False
                await in_worker(None, _malloc_trim)

    @property
    def holding(self) -> int:
        return len(self._holds)

    def _expire(self, now: float) -> None:
        if self._holds and now - min(self._holds.values()) > MAX_COLLECTOR_PAUSE_S:
            self._holds.clear()  # later releases of these tokens change nothing
            self._resume()

    def _resume(self) -> None:
        self._trim_wanted = True
        if self._was_enabled:
            gc.enable()


def _load_malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc: nothing to trim this way
        return None


_TRIM = _load_malloc_trim()


def _malloc_trim() -> None:
    """glibc's ``malloc_trim(0)``: free pages of every malloc arena back to the system (the
    GIL is released during the call, as ctypes does for every foreign call)."""
    if _TRIM is not None:
        _TRIM(0)


#: The process's one pause (the collector is process-wide).
collector_pause = CollectorPause()


def without_gc_pauses(fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)`` with the cyclic collector held off (:class:`CollectorPause`)."""
    token = collector_pause.hold()
    try:
        return fn(*args)
    finally:
        collector_pause.release(token)


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
