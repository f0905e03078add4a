"""The client side of the protocol, sans-IO: one core for every client this project ships.

The blocking admin client of the ``trio_broker`` tools (:mod:`trio_broker.tools.admin_client`)
and the Trio client of the pytest plugin (:mod:`trio_broker.testing.client`) are thin I/O shells
around :class:`ClientCodec`: it encodes request frames (header, body, correlation ids), splits
the response byte stream into frames (:class:`ResponseFrames`) and decodes each response safely
(:func:`decode_checked`). No sockets, no event loop here.

Response bytes are network input from whatever broker the client was pointed at, so they go
through the broker's own pre-scan (:func:`~trio_broker.protocol.prescan.scan_body`) before kio's
native reader sees them: a bad length is refused with :class:`InvalidResponse` instead of
reaching a reader that trusts it.
"""

from __future__ import annotations

import dataclasses
import importlib
import struct
from typing import Any

from .codec import (
    API_VERSIONS_KEY,
    decode_response,
    encode_request,
    request_schema,
    response_schema,
)
from .prescan import InvalidRequest, scan_body

__all__ = ["MAX_RESPONSE_BYTES", "ClientCodec", "InvalidResponse", "ResponseFrames",
           "decode_checked", "request_body"]

#: The largest response payload a client accepts by default (Kafka's sizes are int32).
MAX_RESPONSE_BYTES = 2**31 - 1
_CORRELATION_ID = struct.Struct(">i")


class InvalidResponse(Exception):
    """A response the client cannot read: a bad size prefix, a correlation id it never sent, a
    length that overruns the frame (found by the pre-scan before kio reads anything) or a value
    kio refuses (an unknown error code)."""


def request_body(api_key: int, version: int, class_name: str | None = None, **fields: Any
                 ) -> Any:
    """A kio request body (or one of its nested classes, by name) of that version, from the
    fields it has: fields the version lacks are left out."""
    cls = request_schema(api_key, version)
    if class_name is not None:
        cls = getattr(importlib.import_module(cls.__module__), class_name)
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in fields.items() if k in names})


class ResponseFrames:
    """Splits the response byte stream into payloads: the size prefix read here by hand, not
    with the broker's ``FrameDecoder``, so a framing bug cannot hide on both sides."""

    def __init__(self, max_bytes: int = MAX_RESPONSE_BYTES) -> None:
        self._buffer = bytearray()
        self._max_bytes = max_bytes

    def feed(self, data: bytes) -> None:
        """Append bytes as they arrived (any split)."""
        self._buffer += data

    def next_frame(self) -> bytes | None:
        """The next whole payload (size prefix removed), or None until more bytes arrive.

        Raises :class:`InvalidResponse` for a negative or oversized size prefix."""
        buffer = self._buffer
        if len(buffer) < 4:
            return None
        size = int.from_bytes(buffer[:4], "big", signed=True)
        if not 0 <= size <= self._max_bytes:
            raise InvalidResponse(f"bad response size {size}")
        if len(buffer) < 4 + size:
            return None
        payload = bytes(buffer[4:4 + size])
        del buffer[:4 + size]
        return payload


def decode_checked(api_key: int, version: int, payload: bytes) -> tuple[int, Any]:
    """``(correlation_id, body)`` of a response payload, pre-scanned before kio reads it."""
    schema = response_schema(api_key, version)
    offset = 4 + (1 if schema.__flexible__ and api_key != API_VERSIONS_KEY else 0)
    try:
        checked = scan_body(schema, payload, offset, api_key, version)
    except InvalidRequest as exc:
        raise InvalidResponse(f"{exc.reason}: {exc.detail}") from None
    try:
        return decode_response(api_key, version, checked)
    except Exception as exc:  # kio raises several types for values it refuses
        raise InvalidResponse(repr(exc)) from None


class ClientCodec:
    """One connection's protocol state: correlation ids of requests awaiting an answer, and
    the bytes received so far. The I/O shell sends what :meth:`encode` returns, feeds what it
    reads to :meth:`feed`, and asks :meth:`next_frame` / :meth:`decode` for responses."""

    def __init__(self, client_id: str | None, max_response_bytes: int = MAX_RESPONSE_BYTES
                 ) -> None:
        self.client_id = client_id
        self.frames = ResponseFrames(max_response_bytes)
        self.next_correlation = 1
        #: ``{correlation_id: (api_key, version)}`` of the requests not answered yet.
        self.pending: dict[int, tuple[int, int]] = {}

    def encode(self, api_key: int, version: int, body: Any, client_id: str | None = None
               ) -> tuple[int, bytes]:
        """``(correlation_id, frame)`` of a request, remembered until its answer is decoded."""
        correlation = self.next_correlation
        self.next_correlation += 1
        self.pending[correlation] = (api_key, version)
        frame = encode_request(api_key, version, correlation,
                               self.client_id if client_id is None else client_id, body)
        return correlation, frame

    def forget(self, correlation: int) -> None:
        """No answer will come for this request (Produce with acks=0)."""
        self.pending.pop(correlation, None)

    def feed(self, data: bytes) -> None:
        """Bytes read from the connection."""
        self.frames.feed(data)

    def next_frame(self) -> bytes | None:
        """The next whole response payload, or None until more bytes arrive."""
        return self.frames.next_frame()

    def decode(self, payload: bytes) -> tuple[int, Any]:
        """``(correlation_id, body)`` of a response payload, checked: its correlation id must be
        one of a pending request, whose API and version decode it through the pre-scan."""
        if len(payload) < _CORRELATION_ID.size:
            raise InvalidResponse(f"response of {len(payload)} bytes has no correlation id")
        (correlation,) = _CORRELATION_ID.unpack_from(payload, 0)
        sent = self.pending.pop(correlation, None)
        if sent is None:
            raise InvalidResponse(f"correlation id {correlation} in a response, expected "
                                  + (", ".join(map(str, sorted(self.pending))) or "none"))
        return decode_checked(sent[0], sent[1], payload)
