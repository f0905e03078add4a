"""The reader's direct socket read (docs/decisions.md, "A plain socket is read directly"): a
read that returns at once is still a cancellation point and yields to other tasks at least
every READS_PER_YIELD reads; the rest of a large frame is read as parts of the frame."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from tests.kafka_wire import WireClient
from trio_broker.network import connection
from trio_broker.protocol.framing import FrameDecoder


async def test_reads_that_return_at_once_let_other_tasks_run() -> None:
    ran = trio.Event()

    async def other() -> None:
        ran.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other)
        # Two yields: within a scheduler batch trio may run this task before the new one.
        for _ in range(2 * connection.READS_PER_YIELD):
            await connection._read_checkpoint()
        assert ran.is_set()


async def test_a_read_that_returns_at_once_raises_a_pending_cancellation() -> None:
    with trio.CancelScope() as scope:
        scope.cancel()
        await connection._read_checkpoint()
        raise AssertionError("not cancelled")  # pragma: no cover
    assert scope.cancelled_caught


async def test_read_nowait_reports_nothing_data_and_end_of_stream() -> None:
    left, right = trio.socket.socketpair()
    with left, right:
        assert connection._read_nowait(left.fileno()) is None
        await right.send(b"abc")
        assert connection._read_nowait(left.fileno()) == b"abc"
        right.close()
        assert connection._read_nowait(left.fileno()) == b""


async def test_a_large_frame_arriving_in_pieces_is_read_as_parts(
        broker: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rest of a large frame is read with reads of exactly what is missing, held aside and
    joined once (``FrameDecoder.feed_part``): one copy instead of two. The records arrive
    intact whether the frame comes in pieces with pauses between them, or whole."""
    from tests.server.test_produce_fetch import batch, produce_body, values

    parts: list[int] = []
    real = FrameDecoder.feed_part

    def counting(self: FrameDecoder, size: int, data: bytes) -> None:
        parts.append(len(data))
        real(self, size, data)

    monkeypatch.setattr(FrameDecoder, "feed_part", counting)
    broker.broker.log_manager.create_topic("t", 1)
    value = bytes(range(256)) * 1200  # about 300 KiB: its rest is read directly
    async with await WireClient.connect(broker.port) as client:
        frame = client.encode(0, 9, produce_body(9, {("t", 0): batch(value)}, acks=1))
        for start in range(0, len(frame), 50_000):
            await client.send_raw(frame[start:start + 50_000])
            await trio.sleep(0.02)  # the broker reads what has come so far
        _, answer = await client.receive()
        assert answer.responses[0].partition_responses[0].error_code == 0
        assert len(parts) >= 2 and sum(parts) < len(frame)
        parts.clear()
        await client.send_raw(client.encode(0, 9, produce_body(9, {("t", 0): batch(value)},
                                                               acks=1)))
        _, answer = await client.receive()
        assert answer.responses[0].partition_responses[0].error_code == 0
    read = broker.broker.log_manager.read("t", 0, 0, 1 << 22)
    assert read.high_watermark == 2
    assert values(bytes(read.records)) == [value, value]
    assert broker.app.socket_server.memory_pool.used == 0
