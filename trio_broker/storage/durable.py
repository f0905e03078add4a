"""Replacing a small file durably: the broker's metadata, ACL, credential and quota files."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path

import trio

from ..offload import in_worker


def write_durably(path: Path, text: str, *, mode: int = 0o644) -> None:
    """Replace ``path`` with ``text`` so that a crash leaves the old file or the new one, never
    a torn or empty one: write ``<name>.tmp`` beside it (created with ``mode``), fsync it,
    rename it over ``path`` and fsync the directory (Kafka flushes, then
    ``Utils.atomicMoveWithFallback``)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "w",
              encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


class DurableFile:
    """A small file rewritten whole on each change, in a worker thread: an fsync can take
    seconds on a busy disk, and on the event loop it would hold every connection (Kafka writes
    its metadata off the network threads too).

    One write at a time; each takes its text from ``snapshot`` when its turn comes, so the last
    write to finish holds the newest state and no older snapshot overwrites a newer one.
    """

    def __init__(self, path: Path, *, mode: int = 0o644) -> None:
        self.path = path
        self._mode = mode
        self._lock = trio.Lock()

    async def save(self, snapshot: Callable[[], str]) -> None:
        """Write ``snapshot()`` durably (:func:`write_durably`), off the event loop."""
        async with self._lock:
            await in_worker(None, functools.partial(write_durably, self.path, snapshot(),
                                                    mode=self._mode))
