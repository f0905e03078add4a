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

from .prescan import MalformedBytes, read_uvarint, write_uvarint

#: Frames smaller than this are decoded as they are (the rewrite costs more than it saves).
DEDUPE_FROM_BYTES = 64 * 1024
METADATA = 3
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def _skip_tags(frame: bytes, at: int) -> int:
    count, at = read_uvarint(frame, at, len(frame))
    for _ in range(count):
        _, at = read_uvarint(frame, at, len(frame))
        size, at = read_uvarint(frame, at, len(frame))
        at += size
    return at


def _topic_end(frame: bytes, at: int, version: int) -> int:
    """Where the (flexible) Metadata request topic entry starting at ``at`` ends."""
    if version >= 10:
        at += 16  # topic id
    length, at = read_uvarint(frame, at, len(frame))
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
            count, at = read_uvarint(frame, offset, len(frame))
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
    except (MalformedBytes, struct.error):
        return frame
    if len(entries) == count:
        return frame
    head = (_I32.pack(len(entries)) if api_version < 9 else write_uvarint(len(entries) + 1))
    return b"".join((frame[:offset], head, *entries, frame[at:]))
