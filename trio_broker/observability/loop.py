"""How the event loop is doing: its idle share, its lag, and who held it.

Every connection shares Trio's one event loop. Between two polls for I/O the loop runs every
task that is ready, one after another; a task that computes for 300 ms makes every other
connection wait 300 ms for its turn. :class:`LoopInstrument` (a Trio instrument: two clock reads
per loop pass) measures:

* the idle share (Kafka's NetworkProcessorAvgIdlePercent: all processors share the loop);
* the lag: how long a ready task could wait for its turn (``trio_broker_event_loop_lag_seconds``,
  and ``event_loop_lag_ms`` in ``metrics_snapshot``): the longest run of the loop between two
  polls, or how late a periodic wake-up ran (:meth:`LoopInstrument.watch_lag`), whichever is
  worse. The wake-up also sees the time the loop's thread waited for the GIL while native code
  in a worker thread held it, which no run of the loop shows;
* ``event_loop_blocked``: a run longer than ``event.loop.blocked.threshold.ms``. A watchdog
  thread looks at the loop thread's stack while the run is still going and names the request
  being handled (API, client, connection) and the broker function it was in. The time the run
  spent in the cyclic garbage collector is given too (``gc.callbacks``): a collection is one
  native call that holds the GIL, so the watchdog cannot look meanwhile, and what it sees after
  is wherever the collection happened to start.
"""

from __future__ import annotations

import contextlib
import gc
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

import trio

#: Frames of the loop thread's stack searched for the request being handled.
_MAX_FRAMES = 64
#: How often :meth:`LoopInstrument.watch_lag` wakes up.
LAG_WAKEUP_S = 0.05
#: Readers of the lag, each with its own "worst since I last looked".
READERS = ("scrape", "snapshot", "test")


def _culprit(frame: FrameType | None) -> dict[str, Any]:
    """The request (``api``, ``client_id``, ``connection_id``) and the innermost broker
    function (``where``) of a stack, innermost frame first."""
    found: dict[str, Any] = {}
    depth = 0
    while frame is not None and depth < _MAX_FRAMES:
        code = frame.f_code
        if "trio_broker" in code.co_filename and "observability" not in code.co_filename:
            found.setdefault("where", f"{code.co_qualname} ({code.co_filename.rsplit('/', 1)[-1]}"
                                      f":{frame.f_lineno})")
            if "ctx" in code.co_varnames and "api" not in found:
                ctx = frame.f_locals.get("ctx")
                request = getattr(ctx, "request", None)
                api = getattr(request, "api", None)
                if isinstance(api, str):
                    found["api"] = api
                    found["client_id"] = getattr(request, "client_id", None) or ""
                    connection = getattr(ctx, "connection", None)
                    found["connection_id"] = getattr(connection, "connection_id", "")
        frame = frame.f_back
        depth += 1
    return found


class LoopInstrument(trio.abc.Instrument):
    """The loop's idle share, lag and blocked runs (see the module docstring)."""

    def __init__(self, blocked_threshold_s: float = 0.0,
                 on_blocked: Callable[[float, dict[str, Any]], None] | None = None) -> None:
        self._waiting_since: float | None = None
        self._waited = 0.0
        self._last_read = time.perf_counter()
        self._waited_at_last_read = 0.0
        #: When the current run of the loop began (None while it waits for I/O).
        self._running_since: float | None = None
        self._runs = 0
        self._worst = dict.fromkeys(READERS, 0.0)
        #: The smallest of ``_worst``: a run shorter than it changes nothing.
        self._least = 0.0
        self.blocked_threshold_s = blocked_threshold_s
        #: Called on the loop's thread after a blocked run: ``(seconds, culprit)``.
        self.on_blocked = on_blocked
        self._suspect: tuple[int, dict[str, Any]] | None = None
        self._loop_thread = threading.get_ident()
        self._watchdog: threading.Thread | None = None
        self._stop = threading.Event()
        #: The current run's time in the cyclic collector (loop thread only), and when the
        #: collection under way began.
        self._gc_seconds = 0.0
        self._gc_since = 0.0

    # ---------------------------------------------------------------- trio.abc.Instrument
    def before_io_wait(self, timeout: float) -> None:
        now = time.perf_counter()
        self._waiting_since = now
        since = self._running_since
        if since is None:
            return
        self._running_since = None
        ran = now - since
        if ran > self._least:  # one comparison per loop pass, most of the time
            self._note(ran)
        if self.blocked_threshold_s and ran >= self.blocked_threshold_s:
            self._blocked(ran)

    def after_io_wait(self, timeout: float) -> None:
        now = time.perf_counter()
        if self._waiting_since is not None:
            self._waited += now - self._waiting_since
            self._waiting_since = None
        self._running_since = now
        self._runs += 1
        self._gc_seconds = 0.0

    # ------------------------------------------------------------------------- readings
    def idle_ratio(self) -> float:
        """Idle share (0..1) since the previous call."""
        now = time.perf_counter()
        waited = self._waited
        if self._waiting_since is not None:
            waited += now - self._waiting_since
        elapsed = now - self._last_read
        ratio = (waited - self._waited_at_last_read) / elapsed if elapsed > 0 else 1.0
        self._last_read = now
        self._waited_at_last_read = waited
        return min(max(ratio, 0.0), 1.0)

    def read_lag(self, reader: str) -> float:
        """The longest run of the loop (seconds) since ``reader`` last read it."""
        worst = self._worst[reader]
        self._worst[reader] = self._least = 0.0
        return worst

    def note_lateness(self, late: float) -> None:
        """A wake-up ran ``late`` seconds after its deadline."""
        if late > self._least:
            self._note(late)

    def _note(self, lag: float) -> None:
        worst = self._worst
        for reader, value in worst.items():
            if lag > value:
                worst[reader] = lag
        self._least = min(worst.values())

    async def watch_lag(self, interval: float = LAG_WAKEUP_S) -> None:
        """Wake every ``interval`` seconds and note how late each wake-up ran."""
        while True:
            deadline = trio.current_time() + interval
            await trio.sleep_until(deadline)
            self.note_lateness(trio.current_time() - deadline)

    # ---------------------------------------------------------------- blocked runs
    def _blocked(self, ran: float) -> None:
        suspect = self._suspect
        culprit = suspect[1] if suspect is not None and suspect[0] == self._runs else {}
        self._suspect = None
        if self._gc_seconds:
            culprit = {**culprit, "gc_ms": round(self._gc_seconds * 1000, 3)}
        if self.on_blocked is not None:
            # An instrument that raises is removed by Trio: a failed log write must not.
            with contextlib.suppress(Exception):
                self.on_blocked(ran, culprit)

    def start_watchdog(self) -> None:
        """Watch the loop from a daemon thread (call from the loop's thread)."""
        if not self.blocked_threshold_s or self._watchdog is not None:
            return
        self._loop_thread = threading.get_ident()
        self._stop.clear()
        self._watchdog = threading.Thread(target=self._watch, name="event-loop-watchdog",
                                          daemon=True)
        self._watchdog.start()
        gc.callbacks.append(self._collected)

    def stop_watchdog(self) -> None:
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(self._collected)
        self._stop.set()
        if self._watchdog is not None:
            self._watchdog.join(timeout=5)
            self._watchdog = None

    def _collected(self, phase: str, _info: dict[str, int]) -> None:
        """``gc.callbacks``: time the loop thread's collections (a worker thread's hold the
        GIL too, but show as the loop waiting for it, not as a collection of its own)."""
        if threading.get_ident() != self._loop_thread:
            return
        now = time.perf_counter()
        if phase == "start":
            self._gc_since = now
        else:
            self._gc_seconds += now - self._gc_since

    def _watch(self) -> None:
        interval = self.blocked_threshold_s / 2
        while not self._stop.wait(interval):
            since, run = self._running_since, self._runs
            if since is None or time.perf_counter() - since < self.blocked_threshold_s:
                continue
            if self._suspect is not None and self._suspect[0] == run:
                continue
            # The loop thread runs no Python while this thread holds the GIL: its stack is
            # still, as a debugger sees it.
            frame = sys._current_frames().get(self._loop_thread)
            self._suspect = (run, _culprit(frame))
