"""Raw Kafka-protocol load for the small-request and idle-connection benchmarks.

Requests are encoded once (with kio, through the broker's own codec) and the same bytes are sent
again and again; responses are only split into frames, never decoded, so the client spends as
little CPU as possible and the server is what is measured.
"""

from __future__ import annotations

import datetime
import socket
import struct
import time
from typing import Any

import attrs
import trio
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from trio_broker.protocol import records as rb
from trio_broker.protocol.codec import encode_request
from trio_broker.protocol.framing import FrameDecoder

_SIZE = struct.Struct(">i")
API_VERSIONS_KEY = 18
PRODUCE_KEY = 0


def api_versions_frame(correlation_id: int = 1) -> bytes:
    """One ApiVersions v3 request frame, size prefix included."""
    body = ApiVersionsRequest(client_software_name="trio-broker-bench",
                              client_software_version="1.0")
    return encode_request(API_VERSIONS_KEY, 3, correlation_id, "bench", body)


class FrameCounter:
    """Counts complete size-prefixed frames in a byte stream (keeps only the partial tail)."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> int:
        buffer = self._buffer
        buffer += data
        pos = 0
        count = 0
        end = len(buffer)
        while end - pos >= 4:
            (size,) = _SIZE.unpack_from(buffer, pos)
            if end - pos - 4 < size:
                break
            pos += 4 + size
            count += 1
        if pos:
            del buffer[:pos]
        return count


def produce_frame(topic: str, client_id: str = "light") -> bytes:
    """One Produce v9 request frame: one 100-byte record to partition 0, acks=1."""
    from kio.schema.produce.v9 import request as produce_v9

    batch = rb.build_batch([(None, b"l" * 100, [], int(time.time() * 1000))])
    m: Any = produce_v9
    body = m.ProduceRequest(transactional_id=None, acks=1,
                            timeout=datetime.timedelta(seconds=30),
                            topic_data=(m.TopicProduceData(name=topic, partition_data=(
                                m.PartitionProduceData(index=0, records=batch),)),))
    return encode_request(PRODUCE_KEY, 9, 1, client_id, body)


def send_in_flight(port: int, frame: bytes, count: int, depth: int) -> float:
    """Send ``frame`` ``count`` times from a blocking socket keeping ``depth`` in flight (at
    depth 1 the next one leaves when the answer arrived, as a Kafka client keeps one request in
    flight per connection); answers are only counted. Seconds taken."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        frames = FrameCounter()
        started = time.perf_counter()
        sent = min(depth, count)
        sock.sendall(frame * sent)
        answered = 0
        while answered < count:
            data = sock.recv(262144)
            if not data:
                raise ConnectionError(f"closed by the server after {answered} answers")
            got = frames.feed(data)
            answered += got
            more = min(got, count - sent)
            if more:
                sock.sendall(frame * more)
                sent += more
        return time.perf_counter() - started


async def read_one_frame(stream: trio.SocketStream) -> bytes:
    """Read exactly one response frame and return its payload (after the size)."""
    frames = FrameDecoder(2**31 - 1)
    while (payload := frames.next_frame()) is None:
        data = await stream.receive_some(65536)
        if not data:
            raise ConnectionError("connection closed before a response arrived")
        frames.feed(data)
    return payload


async def probe_answer(port: int, frame: bytes) -> bytes:
    """The server's answer to ``frame`` after its correlation id: the canned reply of the
    baseline framed server, so both servers send the same bytes."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(frame)
        payload = await read_one_frame(stream)
    return payload[4:]


async def probe_api_versions_body(port: int) -> bytes:
    """The broker's ApiVersions v3 response body (after the correlation id)."""
    return await probe_answer(port, api_versions_frame())


async def open_kafka_connection(port: int, frame: bytes) -> trio.SocketStream:
    """A connection that has sent one ApiVersions and read its answer: a real Kafka client's
    first exchange, then nothing (an idle connection)."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(frame)
    await read_one_frame(stream)
    return stream


@attrs.define
class LoadCounter:
    """Responses received by all connections of one load run."""

    responses: int = 0
    errors: int = 0


async def drive_connection(port: int, frame: bytes, window: int, counter: LoadCounter,
                           task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
                           ) -> None:
    """Keep ``window`` requests in flight on one connection until cancelled.

    Every response that arrives is replaced at once by a new request (a sliding window), and the
    replacements of one read leave in one ``send_all``, as a pipelining client would send them.
    ``window=1`` is Kafka's own client behaviour: the next request only after the response.
    """
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    task_status.started()
    frames = FrameCounter()
    async with stream:
        try:
            await stream.send_all(frame * window)
            while True:
                data = await stream.receive_some(262144)
                if not data:
                    counter.errors += 1
                    return
                done = frames.feed(data)
                if done:
                    counter.responses += done
                    await stream.send_all(frame * done)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            counter.errors += 1


async def measure_rate(port: int, frame: bytes, connections: int, window: int,
                       warmup: float, duration: float) -> tuple[float, int]:
    """Responses per second over ``duration`` after ``warmup``; also the connection errors."""
    counter = LoadCounter()
    async with trio.open_nursery() as nursery:
        for _ in range(connections):
            await nursery.start(drive_connection, port, frame, window, counter)
        await trio.sleep(warmup)
        start_count, start = counter.responses, trio.current_time()
        await trio.sleep(duration)
        end_count, end = counter.responses, trio.current_time()
        nursery.cancel_scope.cancel()
    return (end_count - start_count) / (end - start), counter.errors
