"""Replacing a small file durably: the broker's metadata, ACL, credential and quota files."""

from __future__ import annotations

import os
from pathlib import Path


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
