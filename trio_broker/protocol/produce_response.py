"""The usual ProduceResponse (one topic, one partition, flexible versions), framed directly.

A one-record produce's answer built as kio's frozen dataclasses (three of them), walked for its
first error and encoded by the generated encoder costs ~4.8 µs in a loop; these bytes are
written in ~1 µs. Only the flexible versions (9 and later) are written here, and only when
nothing else needs the response as an object (no throttle time to fill in); everything else
keeps the general path. ``tests/protocol/test_produce_response.py`` checks the bytes against
the general path's (kio's classes and encoder) for every version this accepts.
"""

from __future__ import annotations

import struct
from typing import Final

from .encoder import uvarint

__all__ = ["DIRECT_VERSIONS", "produce_response_frame"]

#: The Produce versions written here: the flexible ones that name topics (9–12; v13 names them
#: by id and takes the general path). Tagged fields of 10+ (``current_leader``,
#: ``node_endpoints``) are at their defaults, so not written.
DIRECT_VERSIONS: Final = frozenset(range(9, 13))

_HEAD: Final = struct.Struct(">ii")  # size, correlation id
_PARTITION: Final = struct.Struct(">ihqqq")  # index, error, base offset, append time, start
# After the partition's fixed fields: empty record_errors, then (error message), the
# partition's and topic's empty tag sections, throttle time 0 and the response's tags.
_NO_MESSAGE_TAIL: Final = b"\x01\x00\x00\x00" + bytes(4) + b"\x00"
_TAIL: Final = b"\x00\x00" + bytes(4) + b"\x00"


def produce_response_frame(correlation_id: int, topic: str, index: int, error_code: int,
                           error_message: str | None, base_offset: int, log_append_time_ms: int,
                           log_start_offset: int) -> bytes:
    """A framed ProduceResponse v9+ (response header v1) for one topic with one partition.

    ``log_append_time_ms`` is -1 when the topic uses create time; ``throttle_time_ms`` is 0.
    """
    name = topic.encode()
    body = bytearray(8)
    body += b"\x00\x02"  # header's empty tags; one topic (compact array length 2)
    body += uvarint(len(name) + 1)
    body += name
    body += b"\x02"  # one partition
    body += _PARTITION.pack(index, error_code, base_offset, log_append_time_ms,
                            log_start_offset)
    if error_message is None:
        body += _NO_MESSAGE_TAIL
    else:
        message = error_message.encode()
        body += b"\x01"
        body += uvarint(len(message) + 1)
        body += message
        body += _TAIL
    _HEAD.pack_into(body, 0, len(body) - 4, correlation_id)
    return bytes(body)
