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

    __slots__ = ("_buffer", "_parts", "_parts_size", "_start", "limit")

    def __init__(self, max_frame_bytes: int) -> None:
        self._buffer = bytearray()
        self._start = 0
        #: Bytes of the next frame received on their own (:meth:`feed_part`), not yet joined.
        #: A tuple: the empty one is shared, so an idle connection holds no list for it.
        self._parts: tuple[bytes, ...] = ()
        self._parts_size = 0
        #: The largest size accepted; the caller may change it between frames (a SASL
        #: connection reads with ``sasl.server.max.receive.size`` until it has authenticated).
        self.limit = max_frame_bytes

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self._parts:  # what follows the parts: they go into the buffer first, in order
            for part in self._parts:
                self._buffer += part
            self._parts = ()
            self._parts_size = 0
        if self._start and self._start == len(self._buffer):
            self._buffer.clear()
            self._start = 0
        self._buffer += data

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return len(self._buffer) - self._start + self._parts_size

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
        if self._parts:
            return self._take_parted(size)
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

    def missing(self, size: int) -> int:
        """Payload bytes of the next frame, whose ``size`` :meth:`pending_size` has just told,
        that have not arrived yet (0: :meth:`take` returns it)."""
        return max(0, size - (len(self._buffer) - self._start - SIZE_PREFIX_BYTES
                              + self._parts_size))

    @property
    def parted(self) -> bool:
        """Parts of the next frame are held aside (:meth:`feed_part`)."""
        return bool(self._parts)

    def feed_part(self, size: int, data: bytes) -> None:
        """Bytes of the next frame of ``size`` (its prefix buffered) that the caller received
        on their own, at most the :meth:`missing` ones: held as they are, and joined once
        with the frame's buffered head when the frame is complete (:meth:`take`). A large
        frame then costs one copy instead of two (into the buffer, out of it), and none when
        one part is the whole of it. Raises ValueError (nothing held) for bytes past the
        frame's end."""
        if not data or len(data) > self.missing(size):
            raise ValueError(f"{len(data)} bytes are not part of the frame's missing "
                             f"{self.missing(size)}")
        self._parts += (data,)
        self._parts_size += len(data)

    def _take_parted(self, size: int) -> bytes | None:
        begin = self._start + SIZE_PREFIX_BYTES
        if len(self._buffer) - begin + self._parts_size < size:
            return None
        # feed_part never takes bytes past the frame's end, and feed merges the parts first:
        # the buffered head and the parts are exactly the frame.
        parts = self._parts
        if len(self._buffer) == begin and len(parts) == 1:
            frame = parts[0]
        else:
            with memoryview(self._buffer) as view:
                frame = b"".join((view[begin:], *parts))
        self._buffer.clear()
        self._start = 0
        self._parts = ()
        self._parts_size = 0
        return frame


def frame(payload: bytes | bytearray) -> bytes:
    """Prefix a payload with its size."""
    return _SIZE.pack(len(payload)) + payload
