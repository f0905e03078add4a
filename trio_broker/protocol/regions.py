"""Responses whose record bytes are still in a file: zero-copy fetch (sans-IO).

Kafka's ``FileRecords.transferTo`` sends a Fetch response's record bytes from the segment file
straight into the socket (``sendfile``) and only the header and per-partition fields from
memory. Here a handler may put a :class:`FileRegion` where a ``records`` field wants bytes; the
encoder (:mod:`~trio_broker.protocol.encoder`) then leaves a gap for it, and the framed
response is a :class:`FramedParts`: bytes and regions in wire order. The connection writer sends
the regions with ``os.sendfile`` where its transport is a plain socket, and otherwise reads
them a chunk at a time (:meth:`FileRegion.read`): the bytes on the wire are identical either
way.

This module only describes regions; storage (``storage/segment.py``) makes them and owns the
file descriptors.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator

import attrs

__all__ = ["FileRegion", "FramedParts", "RegionInvalid"]


class RegionInvalid(Exception):
    """The file no longer holds the bytes a region names (its segment was truncated)."""


class FileRegion(abc.ABC):
    """``size`` bytes at ``position`` of the open file ``fd``, not read yet."""

    __slots__ = ()

    fd: int
    position: int
    size: int

    def __len__(self) -> int:
        return self.size

    @abc.abstractmethod
    def check(self) -> None:
        """Raise :class:`RegionInvalid` if the file no longer holds the region's bytes."""

    @abc.abstractmethod
    def read(self, offset: int = 0, size: int | None = None) -> bytes:
        """The region's bytes (the fallback where ``sendfile`` cannot be used): ``size`` of
        them (all by default) from ``offset`` within the region."""

    @abc.abstractmethod
    def release(self) -> None:
        """Done with the region (sent or dropped): give its file descriptor back."""


@attrs.frozen
class FramedParts:
    """A framed response in wire order: bytes and :class:`FileRegion` parts, ``size`` in all."""

    parts: tuple[bytes | FileRegion, ...]
    size: int

    def __len__(self) -> int:
        return self.size

    def regions(self) -> Iterator[FileRegion]:
        return (part for part in self.parts if isinstance(part, FileRegion))

    def release(self) -> None:
        for region in self.regions():
            region.release()


def split(buffer: bytes | bytearray, regions: list[tuple[int, FileRegion]]) -> FramedParts:
    """The parts of ``buffer`` with each region inserted at its position (in order)."""
    parts: list[bytes | FileRegion] = []
    start = 0
    size = len(buffer)
    view = memoryview(buffer)
    for at, region in regions:
        if at > start:
            parts.append(bytes(view[start:at]))
        parts.append(region)
        size += region.size
        start = at
    if start < len(buffer):
        parts.append(bytes(view[start:]))
    return FramedParts(tuple(parts), size)
