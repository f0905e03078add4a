"""Repeated entries removed from a request before it is decoded (sans-IO).

Kafka reads a Metadata request's topics into a set (``KafkaApis.handleTopicMetadataRequest``):
a request naming one topic two million times is answered once for it. kio would build two
million objects first (seconds of native code holding the GIL, hundreds of megabytes), so a large
Metadata frame's topic array is rewritten with each distinct entry once, in order of first
appearance, before kio sees it. The walk is plain Python: in a worker thread it gives the event
loop its turns.

Anything the walk does not understand leaves the frame as it is: the pre-scan then refuses it
with its precise reason, as for any frame.
"""

from __future__ import annotations

import struct

#: Frames smaller than this are decoded as they are (the rewrite costs more than it saves).
DEDUPE_FROM_BYTES = 64 * 1024
METADATA = 3
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class _Unknown(Exception):
    """The bytes are not what the walk expects: the frame is left alone."""


def _uvarint(frame: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    for _ in range(5):
        if at >= len(frame):
            raise _Unknown
        byte = frame[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
    raise _Unknown


def _uvarint_bytes(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _skip_tags(frame: bytes, at: int) -> int:
    count, at = _uvarint(frame, at)
    for _ in range(count):
        _, at = _uvarint(frame, at)
        size, at = _uvarint(frame, at)
        at += size
    return at


def _topic_end(frame: bytes, at: int, version: int) -> int:
    """Where the (flexible) Metadata request topic entry starting at ``at`` ends."""
    if version >= 10:
        at += 16  # topic id
    length, at = _uvarint(frame, at)
    return _skip_tags(frame, at + max(length - 1, 0))


def dedupe_metadata_topics(frame: bytes, offset: int, api_version: int) -> bytes:
    """``frame`` (a Metadata request whose body starts at ``offset``) with each distinct topic
    entry once; ``frame`` itself when it is small, has no repeats, or cannot be walked."""
    if len(frame) < DEDUPE_FROM_BYTES:
        return frame
    try:
        if api_version < 9:
            if len(frame) < offset + 4:
                return frame
            (count,) = _I32.unpack_from(frame, offset)
            at = offset + 4
        else:
            count, at = _uvarint(frame, offset)
            count -= 1
        if count <= 1:
            return frame
        entries: dict[bytes, None] = {}
        if api_version < 9:
            # The usual old client's request, written out: names with an INT16 length.
            unpack = _I16.unpack_from
            for _ in range(count):
                (length,) = unpack(frame, at)
                end = at + 2 + (length if length > 0 else 0)
                entries[frame[at:end]] = None
                at = end
        else:
            for _ in range(count):
                end = _topic_end(frame, at, api_version)
                entries[frame[at:end]] = None
                at = end
        if at > len(frame):
            return frame
    except (_Unknown, struct.error):
        return frame
    if len(entries) == count:
        return frame
    head = (_I32.pack(len(entries)) if api_version < 9 else _uvarint_bytes(len(entries) + 1))
    return b"".join((frame[:offset], head, *entries, frame[at:]))
