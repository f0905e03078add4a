"""Pipelined clients over real loopback sockets: many requests in flight, late readers, peers
that never read or reset mid-write (issue 9: a connection must never stall).

Clients here shrink their socket buffers so that the broker's writes block after a few
responses; the broker's receive buffer is shrunk the same way (``socket.receive.buffer.bytes``)
so that what the kernel can hold on its own is far less than what the client sends. Time runs on
the autojump clock.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable
from typing import Any

import pytest
import trio

from tests.kafka_wire import API_VERSIONS_V3, METADATA_ALL_V12, WireClient
from tests.network.conftest import BlockedHandler

API_VERSIONS, METADATA = 18, 3
SMALL_BUFFER = 4096
#: Broker-side socket buffers small enough that the kernel alone cannot hold the bursts below.
SMALL_BROKER_BUFFERS = {"socket.receive.buffer.bytes": str(SMALL_BUFFER),
                        "socket.send.buffer.bytes": str(SMALL_BUFFER)}


async def connect_small(port: int) -> WireClient:
    """A raw client whose own socket buffers are tiny: it is a slow reader unless it reads."""
    sock = trio.socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL_BUFFER)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SMALL_BUFFER)
    await sock.connect(("127.0.0.1", port))
    return WireClient(trio.SocketStream(sock))


async def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.01)


def correlation_of(payload: bytes) -> int:
    return int(struct.unpack_from(">i", payload, 0)[0])

async def read_ahead_broker(start_broker: Any, inflight: str, **extra: str
                            ) -> tuple[Any, Any, WireClient]:
    """A broker whose writes block at once (small buffers, no stall bound) with a 100 MB pool
    unless ``extra`` says otherwise, its pool, and a client that reads only when told."""
    running = await start_broker({**SMALL_BROKER_BUFFERS,
                                  "connection.max.inflight.requests": inflight,
                                  "socket.send.stall.timeout.ms": "-1",
                                  "queued.max.request.bytes": str(100 * 1024 * 1024), **extra})
    return running, running.app.socket_server.memory_pool, await connect_small(running.port)


def api_versions_burst(client: WireClient, count: int) -> bytes:
    return b"".join(client.encode(API_VERSIONS, 3, API_VERSIONS_V3) for _ in range(count))


async def correlations(client: WireClient, count: int) -> list[int]:
    """The correlation ids of the next ``count`` responses."""
    seen = []
    for _ in range(count):
        payload = await client.receive_frame()
        assert payload is not None
        seen.append(correlation_of(payload))
    return seen



async def read_correlations(client: WireClient, count: int) -> list[int]:
    """The correlation ids of the next ``count`` responses (frames only, no body decoding)."""
    seen: list[int] = []
    for _ in range(count):
        payload = await client.receive_frame()
        assert payload is not None, f"connection closed after {len(seen)} responses"
        seen.append(correlation_of(payload))
    return seen


def connections(running: Any) -> list[Any]:
    return [c for p in running.app.socket_server.processors for c in p.connections]


def assert_nothing_leaked(running: Any) -> None:
    server = running.app.socket_server
    assert connections(running) == []
    assert server.connection_count == 0
    assert server.memory_pool.used == 0
    assert server.response_queue_size == 0


# ------------------------------------------------------------ late readers and stalled peers
@pytest.mark.parametrize("inflight", ["1", "16"])
async def test_burst_read_late_is_answered_in_order(
        start_broker: Any, log_events: Any, inflight: str,
        autojump_clock: trio.testing.MockClock) -> None:
    """librdkafka's pattern: thousands of tiny requests sent without waiting, responses read
    later. The broker keeps taking requests while its writes are blocked (the whole burst is
    sent long before the client reads a byte), and then answers every one, in order."""
    running = await start_broker({**SMALL_BROKER_BUFFERS,
                                  "connection.max.inflight.requests": inflight,
                                  "queued.max.request.bytes": str(100 * 1024 * 1024)})
    # While the client reads, the kernel's window updates may run a moment after each read:
    # with a threshold of 0 the clock can jump to the broker's send-stall bound in that moment
    # and the connection closes mid-burst (seen once under load). 20 ms of real idleness first,
    # as in test_slow_reader_is_not_a_stall.
    autojump_clock.autojump_threshold = 0.02
    client = await connect_small(running.port)
    count = 10_000
    burst = b"".join(client.encode(API_VERSIONS, 3, API_VERSIONS_V3) for _ in range(count))
    assert len(burst) > 50 * SMALL_BUFFER  # far more than the kernel buffers can hold
    sent_at: list[float] = []

    async def send_burst() -> None:
        await client.send_raw(burst)
        sent_at.append(trio.current_time())

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(send_burst)
        await trio.sleep(5)  # not reading: the broker's writes block after a few responses
        assert sent_at, "the broker stopped reading while its writes were blocked"
        assert sent_at[0] - start < 1
        [connection] = connections(running)
        assert connection.requests > 1
        assert await read_correlations(client, count) == list(range(1, count + 1))
    await client.aclose()
    await log_events.wait_for("connection_closed", reason="client")
    assert not log_events.events("connection_send_stalled")
    assert_nothing_leaked(running)


@pytest.mark.parametrize("inflight", ["1", "8"])
async def test_peer_that_never_reads_is_closed_after_the_stall_bound(
        start_broker: Any, log_events: Any, inflight: str,
        autojump_clock: trio.testing.MockClock) -> None:
    """A write with no byte accepted for socket.send.stall.timeout.ms closes the connection
    with connection_send_stalled; what was read ahead is dropped with it."""
    running = await start_broker({**SMALL_BROKER_BUFFERS,
                                  "connection.max.inflight.requests": inflight,
                                  "socket.send.stall.timeout.ms": "2000",
                                  "queued.max.request.bytes": str(100 * 1024 * 1024)})
    client = await connect_small(running.port)
    burst = api_versions_burst(client, 5000)
    start = trio.current_time()
    # The broker reads the burst ahead (its writes are blocked), stalls and closes; the client
    # never reads a byte.
    await client.send_raw(burst)
    [stalled] = await log_events.wait_for("connection_send_stalled", timeout=10)
    assert stalled["stalled_ms"] >= 2000
    assert stalled["unsent_bytes"] > 0
    [closed] = await log_events.wait_for("connection_closed", reason="send_stalled")
    # The kernel may still take a few bytes shortly after the peer stops reading (its delayed
    # ACKs run in real time while this clock jumps), which restarts the bound once or twice.
    assert 2.0 <= closed["duration_ms"] / 1000 < 8.0
    assert trio.current_time() - start < 8.0
    await wait_for(lambda: not connections(running))
    assert_nothing_leaked(running)
    # What was sent before the close arrives whole, then the connection ends.
    seen: list[int] = []
    while (payload := await client.receive_frame()) is not None:
        seen.append(correlation_of(payload))
    assert seen == list(range(1, len(seen) + 1))
    assert len(seen) < 5000


@pytest.mark.parametrize("inflight", ["1", "16"])
async def test_what_a_blocked_write_reads_ahead_is_held_in_the_memory_pool(
        start_broker: Any, inflight: str, autojump_clock: trio.testing.MockClock) -> None:
    """The bytes the read-ahead moves into the decoder while a write is blocked count against
    queued.max.request.bytes until the reader takes them: 200 clients that do not read, each
    sending a MiB, held 267 MB beside a 100 MB pool. Taking the frames gives the reservation
    back, nothing is left over, and every request is still answered in order."""
    running, pool, client = await read_ahead_broker(start_broker, inflight)
    burst = api_versions_burst(client, 5000)
    await client.send_raw(burst)  # the broker's writes block; it reads the rest ahead
    await trio.testing.wait_all_tasks_blocked()
    assert len(burst) // 4 < pool.used <= len(burst)
    [connection] = connections(running)
    seen: list[int] = []
    while len(seen) < 5000:
        payload = await client.receive_frame()
        assert payload is not None
        seen.append(correlation_of(payload))
        if len(seen) % 250 == 0:
            # Whenever the broker waits, what its decoder buffers is held in the pool, but for
            # what the reader's own last receive brought beyond its frame (a few KiB through
            # these buffers): taking a frame gives back that frame's part only.
            await trio.testing.wait_all_tasks_blocked()
            assert pool.used >= connection._decoder.buffered - 16 * 1024
    assert seen == list(range(1, 5001))
    await trio.testing.wait_all_tasks_blocked()
    assert pool.used == 0
    await client.aclose()
    await wait_for(lambda: not connections(running))
    assert_nothing_leaked(running)


@pytest.mark.parametrize("inflight", ["1", "16"])
async def test_a_blocked_write_reads_at_most_a_mib_ahead(
        start_broker: Any, inflight: str, autojump_clock: trio.testing.MockClock) -> None:
    """A client that sends and never reads: the read-ahead stops at 1 MiB per connection
    (plus the frame being handled); the rest waits in the kernel, where TCP's window holds
    the client back (docs/development.md: the read-ahead's bound)."""
    running, pool, client = await read_ahead_broker(start_broker, inflight)
    frame = client.encode(API_VERSIONS, 3, API_VERSIONS_V3)
    async with trio.open_nursery() as nursery:
        # 3 MiB of requests; the send itself blocks once the broker stops reading.
        nursery.start_soon(client.send_raw, frame * (3 * 1024 * 1024 // len(frame)))
        await trio.sleep(5)
        await trio.testing.wait_all_tasks_blocked()
        assert 512 * 1024 < pool.used <= 1024 * 1024 + 16 * 1024
        nursery.cancel_scope.cancel()
    await client.aclose()


@pytest.mark.parametrize("inflight", ["1", "16"])
async def test_a_frame_larger_than_the_read_ahead_takes_the_rest_from_the_pool_once(
        start_broker: Any, inflight: str, log_events: Any,
        autojump_clock: trio.testing.MockClock) -> None:
    """A 2 MiB frame arriving while a write is blocked can never be wholly read ahead (1 MiB):
    when the reader reaches it, the part the read-ahead holds moves to the frame and the rest
    comes from the pool, which has room, so there is no memory mute, and once everything is
    answered the pool holds nothing."""
    from tests.server.test_produce_fetch import batch, produce_body

    running, pool, client = await read_ahead_broker(start_broker, inflight)
    many = api_versions_burst(client, 2000)
    big = client.encode(0, 9, produce_body(9, {("t", 0): batch(b"x" * 2_000_000)}, acks=1))
    after = api_versions_burst(client, 10)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.send_raw, many + big + after)
        assert await correlations(client, 2011) == list(range(1, 2012))
    await trio.testing.wait_all_tasks_blocked()
    assert pool.used == 0
    assert not log_events.events("connection_muted", reason="memory")
    await client.aclose()


@pytest.mark.parametrize("inflight", ["1", "16"])
async def test_a_reader_waiting_for_memory_first_gives_back_what_its_read_ahead_holds(
        start_broker: Any, blocked_metadata: BlockedHandler, inflight: str, log_events: Any,
        autojump_clock: trio.testing.MockClock) -> None:
    """A 64 KiB pool, 60 kB of it held by another connection's request (its handler waits).
    A client that sends a 30 kB frame behind a blocked write: its read-ahead takes what the
    pool has left (the frame's first part), so the reader finds no room for the rest and
    waits for memory. It must first give back what its own read-ahead holds (Kafka never lets
    a channel wait for memory it holds itself): then the pool has room and the frame is read
    while the other request still holds its 60 kB; keeping it, the reader would wait for the
    other connection."""
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

    from tests.server.test_produce_fetch import batch, produce_body

    # The clock jumps only after 20 ms of real idleness: the kernel's loopback work (softirq)
    # runs before the broker is thought blocked, so the read-ahead has filled the pool.
    autojump_clock.autojump_threshold = 0.02
    running, pool, client = await read_ahead_broker(
        start_broker, inflight, **{"queued.max.request.bytes": str(64 * 1024),
                                   "socket.request.max.bytes": str(64 * 1024)})
    holder = await WireClient.connect(running.port)
    topics = tuple(MetadataRequestTopic(topic_id=None, name=f"t{i:027d}") for i in range(1300))
    await holder.send(METADATA, 12, MetadataRequest(
        topics=topics, allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    await wait_for(lambda: blocked_metadata.entered == 1)
    assert pool.used > 59_000
    many = api_versions_burst(client, 200)
    big = client.encode(0, 9, produce_body(9, {("t", 0): batch(b"x" * 30_000)}, acks=1))
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.send_raw, many + big)
            await trio.sleep(1)  # the broker's writes block; its read-ahead empties the pool
            assert await correlations(client, 201) == list(range(1, 202))
    assert blocked_metadata.entered == 1 and not blocked_metadata.release.is_set()
    assert log_events.events("connection_muted", reason="memory")
    blocked_metadata.release.set()
    await holder.receive()
    await trio.testing.wait_all_tasks_blocked()
    assert pool.used == 0
    await client.aclose()


async def test_slow_reader_is_not_a_stall(start_broker: Any, log_events: Any,
                                          autojump_clock: trio.testing.MockClock) -> None:
    """Progress is bytes accepted by the kernel: a reader far slower than the stall bound in
    total, but reading every half second, gets every response."""
    running = await start_broker({**SMALL_BROKER_BUFFERS,
                                  "socket.send.stall.timeout.ms": "2500",
                                  "connection.max.inflight.requests": "4"})
    # The reader's receive buffer is big enough that each read reopens the window at once
    # (with a tiny one the kernel waits for a real-time timer that this clock outruns). The
    # window update and the ACKs it frees travel through the kernel's softirq work, which may run
    # a moment after the read: the clock jumps only after 20 ms of real idleness, so it never
    # outruns them (with a threshold of 0 it did, about 1 run in 5).
    autojump_clock.autojump_threshold = 0.02
    sock = trio.socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    await sock.connect(("127.0.0.1", running.port))
    client = WireClient(trio.SocketStream(sock))
    count = 8000
    await client.send_raw(b"".join(client.encode(API_VERSIONS, 3, API_VERSIONS_V3)
                                   for _ in range(count)))
    start = trio.current_time()
    seen: list[int] = []
    while len(seen) < count:
        payload = client._frames.next_frame()
        if payload is not None:
            seen.append(correlation_of(payload))
            continue
        await trio.sleep(0.5)  # a slow consumer: one read every half second
        data = await client.stream.receive_some(1024 * 1024)
        assert data, f"closed after {len(seen)} responses"
        client._frames.feed(data)
    assert seen == list(range(1, count + 1))
    assert trio.current_time() - start > 5  # twice the 2.5 s stall bound and more
    assert not log_events.events("connection_send_stalled")


# ------------------------------------------------------------ connection.max.inflight.requests
async def test_inflight_cap_fills_mutes_and_unmutes(
        start_broker: Any, blocked_metadata: BlockedHandler, log_events: Any,
        autojump_clock: trio.testing.MockClock) -> None:
    """With 4 in flight the fifth request is not read until a response has gone out; the
    connection logs connection_muted (inflight) and connection_unmuted."""
    running = await start_broker({"connection.max.inflight.requests": "4",
                                  "num.io.threads": "8"})
    client = await WireClient.connect(running.port)
    await client.send_raw(b"".join(client.encode(METADATA, 12, METADATA_ALL_V12)
                                   for _ in range(10)))
    await wait_for(lambda: blocked_metadata.entered == 4)
    await trio.sleep(1)
    [connection] = connections(running)
    assert blocked_metadata.entered == 4
    assert connection.requests == 4
    assert connection.requests_in_flight == 4
    [muted] = log_events.events("connection_muted", reason="inflight")
    assert muted["inflight"] == 4
    blocked_metadata.release.set()
    assert [(await client.receive())[0] for _ in range(10)] == list(range(1, 11))
    assert connection.requests == 10
    unmuted = log_events.events("connection_unmuted", reason="ready")
    assert unmuted and unmuted[0]["muted_ms"] >= 1000


async def test_shutdown_drains_every_request_read(
        start_broker: Any, blocked_metadata: BlockedHandler, log_events: Any,
        autojump_clock: trio.testing.MockClock) -> None:
    """Graceful shutdown with requests in flight: each one read is answered, in order, before
    the connection closes; nothing sent after the broker stopped reading is read."""
    running = await start_broker({"connection.max.inflight.requests": "8",
                                  "num.io.threads": "8"})
    client = await WireClient.connect(running.port)
    await client.send_raw(b"".join(client.encode(METADATA, 12, METADATA_ALL_V12)
                                   for _ in range(6)))
    await wait_for(lambda: blocked_metadata.entered == 6)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(running.shutdown)
        await log_events.wait_for("shutdown_step", step="processors_stopped_reading")
        await client.send(METADATA, 12, METADATA_ALL_V12)  # too late: never read
        await trio.sleep(0.5)
        assert blocked_metadata.entered == 6
        blocked_metadata.release.set()
        assert [(await client.receive())[0] for _ in range(6)] == list(range(1, 7))
        assert await client.closed_by_peer()
    step = log_events.events("shutdown_step", step="in_flight_requests_finished")
    assert step, "the drain timed out instead of finishing"
    [closed] = log_events.events("connection_closed")
    assert (closed["reason"], closed["detail"], closed["requests"]) == ("shutdown", "", 6)


async def test_serial_shutdown_does_not_cut_a_blocked_write(
        start_broker: Any, log_events: Any, autojump_clock: trio.testing.MockClock) -> None:
    """One request in flight: shutdown while a response write is blocked lets that write finish
    (the client reads late) instead of cutting the frame."""
    running = await start_broker({**SMALL_BROKER_BUFFERS})
    client = await connect_small(running.port)
    count = 3000
    await client.send_raw(b"".join(client.encode(API_VERSIONS, 3, API_VERSIONS_V3)
                                   for _ in range(count)))
    await trio.sleep(1)  # the broker is blocked writing responses nobody reads yet
    [connection] = connections(running)
    answered_before = connection.requests
    async with trio.open_nursery() as nursery:
        nursery.start_soon(running.shutdown)
        await log_events.wait_for("shutdown_step", step="processors_stopped_reading")
        seen = []
        while (payload := await client.receive_frame()) is not None:
            seen.append(correlation_of(payload))
    # Every response sent is whole and in order; the one being written when the broker stopped
    # reading was completed, and nothing was read after it (thousands more wait in the socket).
    assert seen == list(range(1, len(seen) + 1))
    assert len(seen) == answered_before
    [closed] = log_events.events("connection_closed")
    assert closed["reason"] == "shutdown"
    assert closed["requests"] == len(seen)


async def test_a_connection_idle_at_shutdown_closes_as_shutdown_while_another_drains(
        start_broker: Any, blocked_metadata: BlockedHandler, log_events: Any,
        autojump_clock: trio.testing.MockClock) -> None:
    """Stopping to read ends an idle connection at once (it has nothing to drain): its close
    says ``shutdown``, not ``idle``, and no ``connection_expired`` is logged, although it ends
    through the same scope as idle expiry, while another connection's request drains."""
    running = await start_broker()
    idle = await WireClient.connect(running.port, client_id="idle")
    await idle.request(API_VERSIONS, 3, API_VERSIONS_V3)
    busy = await WireClient.connect(running.port, client_id="busy")
    await busy.send(METADATA, 12, METADATA_ALL_V12)
    await wait_for(lambda: blocked_metadata.entered == 1)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(running.shutdown)
        await log_events.wait_for("shutdown_step", step="processors_stopped_reading")
        assert await idle.closed_by_peer()
        [closed] = log_events.events("connection_closed")
        assert (closed["reason"], closed["detail"], closed["requests"]) == ("shutdown", "", 1)
        assert not log_events.events("connection_expired")
        blocked_metadata.release.set()
        await busy.receive()
    assert [c["reason"] for c in log_events.events("connection_closed")] == ["shutdown"] * 2


@pytest.mark.parametrize("inflight", ["1", "8"])
async def test_peer_reset_mid_write_closes_cleanly(
        start_broker: Any, log_events: Any, inflight: str,
        autojump_clock: trio.testing.MockClock) -> None:
    """The writer fails (the peer resets while responses are being written): the connection
    closes as the client's doing, every request is counted, and nothing is left behind."""
    running = await start_broker({**SMALL_BROKER_BUFFERS,
                                  "connection.max.inflight.requests": inflight,
                                  "queued.max.request.bytes": str(100 * 1024 * 1024)})
    client = await connect_small(running.port)
    count = 3000
    await client.send_raw(b"".join(client.encode(API_VERSIONS, 3, API_VERSIONS_V3)
                                   for _ in range(count)))
    await trio.sleep(1)  # responses pile up unread; the broker's write is blocked
    [connection] = connections(running)
    assert connection.requests_in_flight > 0
    # SO_LINGER 0: close sends RST, as a crashed client's kernel does.
    client.stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                    struct.pack("ii", 1, 0))
    client.stream.socket.close()
    [closed] = await log_events.wait_for("connection_closed")
    assert closed["reason"] == "client"
    assert "failed" in closed["detail"]
    await wait_for(lambda: not connections(running))
    # Every request read was completed once: answered, or dropped with its connection.
    await wait_for(lambda: len(log_events.events("request")) == closed["requests"])
    assert_nothing_leaked(running)


# ------------------------------------------------------------ socket buffer keys
async def test_socket_buffer_keys_minus_one_leave_the_os_default(start_broker: Any) -> None:
    """Kafka's -1: the option is not set, so the accepted socket has the kernel's own sizing,
    the same as the client's untouched socket; a value is set on every accepted socket (Linux
    reports twice what was asked)."""
    for value in ["-1", "102400"]:
        running = await start_broker({"socket.receive.buffer.bytes": value,
                                      "socket.send.buffer.bytes": value})
        client = await WireClient.connect(running.port)
        await wait_for(lambda r=running: len(connections(r)) == 1)  # type: ignore[misc]
        [connection] = connections(running)
        broker_side, client_side = connection.stream.socket, client.stream.socket
        for option in (socket.SO_RCVBUF, socket.SO_SNDBUF):
            got = broker_side.getsockopt(socket.SOL_SOCKET, option)
            if value == "-1":
                assert got == client_side.getsockopt(socket.SOL_SOCKET, option)
                assert got != 2 * 102400
            else:
                assert got == 2 * 102400
        await client.aclose()
        await running.shutdown()
