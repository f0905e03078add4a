"""Which frames are decoded off the event loop (docs/architecture.md, issue 31): from
``OFF_LOOP_DECODE_BYTES`` on, every request but Produce is decoded in a worker thread, with the
cyclic collector held off until the request is gone; smaller frames and Produce (its records
stay bytes: only the batch headers are read) are decoded on the loop. A Metadata request naming
two million topics decoded on the loop held every connection for seconds.

``tests/server/test_event_loop.py`` measures the effect with a generous bound; this pins the
choice itself (the connection mutation run left it open: docs/development.md, ``_read_loop``).
The clock is real: under a virtual clock the worker-thread call runs inline.
"""

from __future__ import annotations

import gc
import struct
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import TopicName

from tests.kafka_wire import WireClient
from trio_broker.network import connection as connection_module
from trio_broker.network.connection import OFF_LOOP_DECODE_BYTES
from trio_broker.offload import collector_pause

pytestmark = pytest.mark.timeout(60)

METADATA = 3


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[int, bool, bool]]]:
    """Each decoded frame as ``(size, on the loop's thread, collector on)``."""
    loop_thread = threading.get_ident()
    real = connection_module.decode_request
    seen: list[tuple[int, bool, bool]] = []

    def recording(frame: bytes, supported: Any) -> Any:
        seen.append((len(frame), threading.get_ident() == loop_thread, gc.isenabled()))
        return real(frame, supported)

    monkeypatch.setattr(connection_module, "decode_request", recording)
    yield seen
    assert collector_pause.holding == 0 and gc.isenabled()


def metadata_frame(client: WireClient, size: int) -> bytes:
    """A Metadata v12 request frame whose payload (after the length prefix) is ``size`` bytes:
    unknown topics, the last name padded to the size."""
    def encoded(names: list[str]) -> tuple[int, bytes]:
        topics = tuple(MetadataRequestTopic(topic_id=None, name=TopicName(name))
                       for name in names)
        return client.codec.encode(METADATA, 12, MetadataRequest(
            topics=topics, allow_auto_topic_creation=False,
            include_topic_authorized_operations=False))

    def payload_size(names: list[str]) -> int:
        correlation, frame = encoded(names)
        client.codec.forget(correlation)
        return len(frame) - 4

    one = payload_size(["unknown-00000000000000000000"])
    each = payload_size(["unknown-00000000000000000000"] * 2) - one
    names = [f"unknown-{index:020d}" for index in range((size - one) // each)]
    names[-1] += "x" * (size - payload_size(names))  # under 127 bytes: one length byte still
    correlation, frame = encoded(names)
    assert len(frame) - 4 == size
    return frame


async def test_a_large_request_is_decoded_off_the_loop_with_the_collector_held(
        broker: Any, decodes: list[tuple[int, bool, bool]]) -> None:
    async with await WireClient.connect(broker.port) as client:
        for size in (OFF_LOOP_DECODE_BYTES - 1, OFF_LOOP_DECODE_BYTES, 4 * OFF_LOOP_DECODE_BYTES):
            await client.send_raw(metadata_frame(client, size))
            _, answer = await client.receive()
            assert {topic.error_code for topic in answer.topics} == {3}  # unknown, all answered
    assert decodes == [(OFF_LOOP_DECODE_BYTES - 1, True, True),
                       (OFF_LOOP_DECODE_BYTES, False, False),
                       (4 * OFF_LOOP_DECODE_BYTES, False, False)]


async def test_a_large_produce_is_decoded_on_the_loop(
        broker: Any, decodes: list[tuple[int, bool, bool]]) -> None:
    """Produce's records stay bytes (only batch headers are read): nothing grows with them."""
    from tests.server.test_produce_fetch import batch, produce_body

    async with await WireClient.connect(broker.port) as client:
        frame = client.encode(0, 9, produce_body(9, {("t", 0): batch(b"x" * 200_000)}, acks=1))
        await client.send_raw(frame)
        await client.receive()
    assert decodes == [(len(frame) - 4, True, True)]


async def test_only_api_key_zero_is_produce(
        start_broker: Any, decodes: list[tuple[int, bool, bool]], log_events: Any) -> None:
    """A large frame of API key 256 (whose low byte is Produce's 0) is decoded off the loop;
    refused as Kafka refuses an unknown API key (the connection closed), it gives back its
    memory and the collector's pause."""
    header = struct.pack(">hhih", 256, 0, 7, 4) + b"test"
    payload = header + bytes(OFF_LOOP_DECODE_BYTES)
    broker = await start_broker({"queued.max.request.bytes": str(200 * 1024 * 1024)})
    async with await WireClient.connect(broker.port) as client:
        await client.send_raw(struct.pack(">i", len(payload)) + payload)
        assert await client.closed_by_peer()
    assert decodes == [(len(payload), False, False)]
    [closed] = await log_events.wait_for("connection_closed")
    assert (closed["reason"], closed["detail"]) == ("invalid_frame", "unknown_api_key: api key 256")
    assert broker.app.socket_server.memory_pool.used == 0
