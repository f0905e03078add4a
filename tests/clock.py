"""Test time: pausing an autojump clock while the broker waits for a worker thread."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import trio
import trio.testing


@contextmanager
def real_time_for_threads() -> Iterator[None]:
    """Stop an autojump clock from jumping inside the block (no-op on a real clock).

    The broker writes its quota and ACL files in a worker thread: real time, which an autojump
    clock would skip past while the event loop waits for the thread (to the next deadline: a
    connection's idle expiry, a throttle's end), so a test would see effects of time that did
    not pass for the write.
    """
    clock = trio.lowlevel.current_clock()
    if not isinstance(clock, trio.testing.MockClock):
        yield
        return
    threshold, clock.autojump_threshold = clock.autojump_threshold, math.inf
    try:
        yield
    finally:
        clock.autojump_threshold = threshold
