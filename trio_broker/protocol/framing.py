"""Sans-IO framing of Kafka's wire protocol: a 4-byte big-endian size, then the payload.

:class:`FrameDecoder` is fed bytes as they arrive and yields whole frames; it never touches a
socket or a clock. Sizes are checked as Kafka's ``NetworkReceive`` checks them: negative, or above
``socket.request.max.bytes``, is an :class:`InvalidFrameSize` and the caller closes the connection
without a response. A size of 0 is allowed (SASL uses it).
"""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")
SIZE_PREFIX_BYTES = _SIZE.size


class InvalidFrameSize(Exception):
    """The size prefix is negative or larger than the limit."""

    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        # Kafka's NetworkReceive text, which operators search their logs for.
        super().__init__(f"Invalid receive (size = {size})" if size < 0 else
                         f"Invalid receive (size = {size} larger than {limit})")


class FrameDecoder:
    """Accumulates bytes and splits them into frames.

    Usage: ``decoder.feed(data)`` then call ``next_frame()`` until it returns None. Before the
    payload is buffered, :attr:`pending_size` tells the size of the frame being read, so the
    caller can reserve memory for it first (Kafka allocates from its memory pool after reading
    the size prefix).
    """

    __slots__ = ("_buffer", "_start", "limit")

    def __init__(self, max_frame_bytes: int) -> None:
        self._buffer = bytearray()
        self._start = 0
        #: The largest size accepted; the caller may change it between frames (a SASL
        #: connection reads with ``sasl.server.max.receive.size`` until it has authenticated).
        self.limit = max_frame_bytes

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self._start and self._start == len(self._buffer):
            self._buffer.clear()
            self._start = 0
        self._buffer += data

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return len(self._buffer) - self._start

    def pending_size(self) -> int | None:
        """The size of the next frame once its prefix has arrived, else None.

        Raises :class:`InvalidFrameSize` for a size Kafka refuses.
        """
        if len(self._buffer) - self._start < SIZE_PREFIX_BYTES:
            return None
        (size,) = _SIZE.unpack_from(self._buffer, self._start)
        if size < 0 or size > self.limit:
            raise InvalidFrameSize(size, self.limit)
        return size

    def next_frame(self) -> bytes | None:
        """Return the next complete frame's payload, or None if more bytes are needed."""
        size = self.pending_size()
        if size is None:
            return None
        return self.take(size)

    def take(self, size: int) -> bytes | None:
        """:meth:`next_frame` for a caller that has just read ``size`` from
        :meth:`pending_size` (so the prefix is not decoded twice per frame)."""
        begin = self._start + SIZE_PREFIX_BYTES
        end = begin + size
        if end > len(self._buffer):
            return None
        # One copy: slicing the bytearray first would copy the payload twice.
        with memoryview(self._buffer) as view:
            frame = bytes(view[begin:end])
        self._start = end
        if self._start > 65536 and self._start * 2 > len(self._buffer):
            del self._buffer[: self._start]
            self._start = 0
        return frame


def frame(payload: bytes | bytearray) -> bytes:
    """Prefix a payload with its size."""
    return _SIZE.pack(len(payload)) + payload
