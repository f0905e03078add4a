"""A minimal raw Kafka-protocol client for network-layer tests (Trio streams, kio bodies).

Real clients (confluent-kafka, kafka-python, aiokafka, kcat) drive the end-to-end tests; this one
exists to send what real clients never send: pipelined bursts, bad frames, exact byte sequences.
"""

from __future__ import annotations

import struct
from typing import Any

import trio
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v12.request import MetadataRequest

from trio_broker.protocol.codec import decode_response, encode_request

MAX_RESPONSE_BYTES = 2**31 - 1


class ResponseFrames:
    """Splits the response byte stream into payloads: the size prefix read here by hand, not
    with the broker's ``FrameDecoder``, so a framing bug cannot hide on both sides."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> None:
        self._buffer += data

    def next_frame(self) -> bytes | None:
        buffer = self._buffer
        if len(buffer) < 4:
            return None
        size = int.from_bytes(buffer[:4], "big", signed=True)
        assert 0 <= size <= MAX_RESPONSE_BYTES, f"bad response size {size}"
        if len(buffer) < 4 + size:
            return None
        payload = bytes(buffer[4:4 + size])
        del buffer[:4 + size]
        return payload


class WireClient:
    """Sends framed requests and reads framed responses on one connection."""

    def __init__(self, stream: trio.SocketStream, client_id: str = "wire-test") -> None:
        self.stream = stream
        self.client_id = client_id
        self._frames = ResponseFrames()
        self._next_correlation = 1
        self._sent: dict[int, tuple[int, int]] = {}

    @classmethod
    async def connect(cls, port: int, host: str = "127.0.0.1", client_id: str = "wire-test"
                      ) -> WireClient:
        return cls(await trio.open_tcp_stream(host, port), client_id)

    def encode(self, api_key: int, version: int, body: Any, client_id: str | None = None
               ) -> bytes:
        correlation = self._next_correlation
        self._next_correlation += 1
        self._sent[correlation] = (api_key, version)
        return encode_request(api_key, version, correlation,
                              self.client_id if client_id is None else client_id, body)

    async def send(self, api_key: int, version: int, body: Any) -> int:
        frame = self.encode(api_key, version, body)
        await self.stream.send_all(frame)
        return self._next_correlation - 1

    async def send_raw(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def receive_frame(self) -> bytes | None:
        """The next response payload, or None at end of stream."""
        while (payload := self._frames.next_frame()) is None:
            try:
                data = await self.stream.receive_some(65536)
            except trio.BrokenResourceError:
                return None
            if not data:
                return None
            self._frames.feed(data)
        return payload

    async def receive(self) -> tuple[int, Any]:
        """``(correlation_id, body)`` of the next response."""
        payload = await self.receive_frame()
        assert payload is not None, "connection closed by the broker"
        (correlation,) = struct.unpack_from(">i", payload, 0)
        api_key, version = self._sent.pop(correlation)
        return decode_response(api_key, version, payload)

    async def request(self, api_key: int, version: int, body: Any) -> Any:
        await self.send(api_key, version, body)
        return (await self.receive())[1]

    async def closed_by_peer(self) -> bool:
        """True when the broker closes the connection (EOF or reset) rather than answering."""
        return await self.receive_frame() is None

    async def aclose(self) -> None:
        await self.stream.aclose()


API_VERSIONS_V3 = ApiVersionsRequest(client_software_name="wire-test", client_software_version="1.0")
METADATA_ALL_V12 = MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                   include_topic_authorized_operations=False)
