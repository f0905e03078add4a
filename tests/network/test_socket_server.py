"""The SocketServer over real loopback sockets: the applicable scenarios of Kafka's
SocketServerTest (names in the docstrings), with the autojump clock where time matters."""

from __future__ import annotations

import gc
import socket
import struct
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v4.request import MetadataRequest as MetadataRequestV4

from tests.kafka_wire import API_VERSIONS_V3, METADATA_ALL_V12, WireClient, readable
from tests.network.conftest import BlockedHandler
from trio_broker.network.request_channel import Request
from trio_broker.protocol.codec import encode_request
from trio_broker.server import registry

API_VERSIONS, METADATA = 18, 3


async def test_simple_request(broker: Any) -> None:
    """simpleRequest: a request is answered, with the correlation id it carried."""
    client = await WireClient.connect(broker.port)
    correlation = await client.send(METADATA, 12, METADATA_ALL_V12)
    got, body = await client.receive()
    assert got == correlation
    assert [b.port for b in body.brokers] == [broker.port]
    assert body.cluster_id == broker.broker.cluster_id


async def test_api_versions_advertises_exactly_the_registered_handlers(broker: Any) -> None:
    client = await WireClient.connect(broker.port)
    body = await client.request(API_VERSIONS, 3, API_VERSIONS_V3)
    assert body.error_code == ErrorCode.none
    advertised = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
    assert advertised == registry.supported_versions()


async def test_client_information_with_latest_api_versions(broker: Any, log_events: Any) -> None:
    """testClientInformationWithLatestApiVersionsRequest: name and version are registered."""
    client = await WireClient.connect(broker.port)
    await client.request(API_VERSIONS, 3, API_VERSIONS_V3)
    await client.request(METADATA, 12, METADATA_ALL_V12)
    requests = await log_events.wait_for("request", api="Metadata")
    assert requests[-1]["client_software_name"] == "wire-test"
    assert requests[-1]["client_software_version"] == "1.0"
    assert log_events.events("client_registered", client_software_name="wire-test",
                             client_software_version="1.0")


async def test_client_information_with_oldest_api_versions(broker: Any, log_events: Any) -> None:
    """testClientInformationWithOldestApiVersionsRequest: v0 carries no name: unknown."""
    from kio.schema.api_versions.v0.request import ApiVersionsRequest

    client = await WireClient.connect(broker.port)
    body = await client.request(API_VERSIONS, 0, ApiVersionsRequest())
    assert body.error_code == ErrorCode.none
    requests = await log_events.wait_for("request", api="ApiVersions")
    assert requests[-1]["client_software_name"] == "unknown"


@pytest.mark.parametrize(("name", "version"), [("bad name!", "1"), ("good", "bad version!")])
async def test_invalid_client_software_gets_invalid_request_and_is_not_registered(
        broker: Any, log_events: Any, name: str, version: str) -> None:
    """Kafka's ApiVersionsRequest.isValid: name and version must both match its pattern; a
    refused ApiVersions registers neither (no ``client_registered``, ``unknown`` in the log)."""
    from kio.schema.api_versions.v3.request import ApiVersionsRequest

    client = await WireClient.connect(broker.port)
    body = await client.request(API_VERSIONS, 3, ApiVersionsRequest(
        client_software_name=name, client_software_version=version))
    assert body.error_code == ErrorCode.invalid_request
    [request] = await log_events.wait_for("request", api="ApiVersions")
    assert request["client_software_name"] == "unknown"
    assert not log_events.events("client_registered")


async def test_unsupported_api_versions_version_is_answered_as_v0(broker: Any) -> None:
    """An ApiVersions version we do not know is answered (v0, UNSUPPORTED_VERSION) so clients
    can downgrade; the header is v0 and the body parses as ApiVersions v0."""
    client = await WireClient.connect(broker.port)
    header = struct.pack(">hhi", API_VERSIONS, 99, 42) + struct.pack(">h", 1) + b"x"
    await client.send_raw(struct.pack(">i", len(header) + 3) + header + b"\x00\x00\x00")
    payload = await client.receive_frame()
    assert payload is not None
    from trio_broker.protocol.codec import decode_response

    correlation, body = decode_response(API_VERSIONS, 0, payload)
    assert correlation == 42
    assert body.error_code == ErrorCode.unsupported_version
    assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == [
        (API_VERSIONS, *registry.supported_versions()[API_VERSIONS])]


async def test_too_big_request_is_rejected(start_broker: Any, log_events: Any) -> None:
    """tooBigRequestIsRejected: a size above socket.request.max.bytes closes the connection."""
    running = await start_broker({"socket.request.max.bytes": "1000"})
    client = await WireClient.connect(running.port)
    await client.send_raw(struct.pack(">i", 1001) + b"\x00" * 100)
    assert await client.closed_by_peer()
    text = "Invalid receive (size = 1001 larger than 1000)"  # Kafka's InvalidReceiveException
    assert log_events.events("invalid_request", reason="invalid_size", size=1001, detail=text)
    await log_events.wait_for("connection_closed", reason="invalid_frame", detail=text)


async def test_a_closed_or_refused_frame_gives_its_memory_back(
        start_broker: Any, log_events: Any) -> None:
    """The memory a frame reserved (queued.max.request.bytes) comes back however the frame
    ends: a client gone in the middle of it, or an empty frame (no header) refused."""
    running = await start_broker({"queued.max.request.bytes": str(100 * 1024 * 1024)})
    pool = running.app.socket_server.memory_pool
    gone = await WireClient.connect(running.port)
    await gone.send_raw(struct.pack(">i", 1000) + b"\x00" * 100)  # 100 of 1,000 bytes, then gone
    await wait_for(lambda: pool.used == 1000)
    await gone.aclose()
    await log_events.wait_for("connection_closed", reason="client")
    assert pool.used == 0
    empty = await WireClient.connect(running.port)
    await empty.send_raw(struct.pack(">i", 0))
    assert await empty.closed_by_peer()
    await log_events.wait_for("connection_closed", reason="invalid_frame")
    assert pool.used == 0


async def test_negative_size_is_rejected(broker: Any, log_events: Any) -> None:
    client = await WireClient.connect(broker.port)
    await client.send_raw(struct.pack(">i", -5))
    assert await client.closed_by_peer()
    assert log_events.events("invalid_request", reason="invalid_size", size=-5,
                             detail="Invalid receive (size = -5)")


@pytest.mark.parametrize(("api_key", "version", "reason"), [
    (52, 0, "unsupported_api"),      # testDisabledRequestIsRejected: Vote is not served
    (999, 0, "unknown_api_key"),
    (METADATA, 99, "unsupported_version"),
])
async def test_disabled_or_unknown_request_is_rejected(broker: Any, log_events: Any,
                                                       api_key: int, version: int,
                                                       reason: str) -> None:
    client = await WireClient.connect(broker.port)
    header = struct.pack(">hhi", api_key, version, 7) + struct.pack(">h", -1)
    await client.send_raw(struct.pack(">i", len(header)) + header)
    assert await client.closed_by_peer()
    [refused] = log_events.events("invalid_request", reason=reason, api_key=api_key)
    assert refused["api_version"] == version
    [closed] = await log_events.wait_for("connection_closed")
    assert closed["reason"] == "invalid_frame"
    assert closed["detail"] == f"{reason}: {refused['detail']}" and refused["detail"]


async def test_unparseable_body_closes_the_connection(broker: Any, log_events: Any) -> None:
    client = await WireClient.connect(broker.port)
    frame = encode_request(METADATA, 12, 1, "c", METADATA_ALL_V12)
    truncated = frame[4:-2]
    await client.send_raw(struct.pack(">i", len(truncated)) + truncated)
    assert await client.closed_by_peer()
    assert log_events.events("invalid_request", reason="bad_body")


async def test_graceful_close_delivers_pipelined_requests(broker: Any) -> None:
    """testGracefulClose: requests sent before the client's FIN are all processed."""
    client = await WireClient.connect(broker.port)
    frames = b"".join(client.encode(METADATA, 12, METADATA_ALL_V12) for _ in range(10))
    await client.send_raw(frames)
    await client.stream.send_eof()
    correlations = [(await client.receive())[0] for _ in range(10)]
    assert correlations == list(range(1, 11))
    assert await client.closed_by_peer()


async def test_responses_keep_request_order_with_pipelining(start_broker: Any) -> None:
    running = await start_broker({"connection.max.inflight.requests": "8",
                                  "num.io.threads": "4"})
    client = await WireClient.connect(running.port)
    await client.send_raw(b"".join(
        client.encode(METADATA if i % 2 else API_VERSIONS, 12 if i % 2 else 3,
                      METADATA_ALL_V12 if i % 2 else API_VERSIONS_V3) for i in range(50)))
    assert [(await client.receive())[0] for _ in range(50)] == list(range(1, 51))


async def test_connection_id(broker: Any, log_events: Any) -> None:
    """testConnectionId: localIp:localPort-remoteIp:remotePort-processorId-index."""
    clients = [await WireClient.connect(broker.port) for _ in range(4)]
    for client in clients:
        await client.request(API_VERSIONS, 3, API_VERSIONS_V3)
    ids = [e["connection_id"] for e in log_events.events("connection_accepted")]
    assert len(ids) == 4
    for connection_id, client in zip(ids, clients, strict=True):
        local, remote, processor, index = connection_id.split("-")
        assert local == f"127.0.0.1:{broker.port}"
        assert remote == f"127.0.0.1:{client.stream.socket.getsockname()[1]}"
        assert int(processor) in range(3)
    # round-robin over the three processors: ids 0,1,2 then 0 again, with per-processor indexes
    assert [i.split("-")[-2:] for i in ids] == [["0", "0"], ["1", "0"], ["2", "0"], ["0", "1"]]


async def test_idle_connection_expires(start_broker: Any, log_events: Any,
                                       autojump_clock: trio.testing.MockClock) -> None:
    """testIdleConnection: an idle connection is closed after connections.max.idle.ms."""
    running = await start_broker({"connections.max.idle.ms": "1000"})
    client = await WireClient.connect(running.port)
    await client.request(API_VERSIONS, 3, API_VERSIONS_V3)
    start = trio.current_time()
    assert await client.closed_by_peer()
    assert 1.0 <= trio.current_time() - start < 1.1
    await log_events.wait_for("connection_expired")
    await log_events.wait_for("connection_closed", reason="idle")


async def test_activity_moves_the_idle_deadline(start_broker: Any,
                                                autojump_clock: trio.testing.MockClock) -> None:
    running = await start_broker({"connections.max.idle.ms": "1000"})
    client = await WireClient.connect(running.port)
    for _ in range(5):
        await trio.sleep(0.8)
        await client.request(API_VERSIONS, 3, API_VERSIONS_V3)  # still open after 4 s in total


async def test_idle_expiry_applies_to_muted_connections(
        start_broker: Any, blocked_metadata: BlockedHandler, log_events: Any,
        autojump_clock: trio.testing.MockClock) -> None:
    """testIdleConnection (muted): a request slower than the idle timeout loses its connection;
    the late response is dropped but still counted."""
    running = await start_broker({"connections.max.idle.ms": "1000"})
    client = await WireClient.connect(running.port)
    await client.send(METADATA, 12, METADATA_ALL_V12)
    assert await client.closed_by_peer()
    blocked_metadata.release.set()
    await log_events.wait_for("request", api="Metadata", response_action="dropped")


async def test_one_request_in_flight_per_connection(
        start_broker: Any, blocked_metadata: BlockedHandler) -> None:
    """Kafka's mute rule: the second pipelined request is not read before the first is answered."""
    running = await start_broker({"num.io.threads": "4"})
    client = await WireClient.connect(running.port)
    await client.send_raw(client.encode(METADATA, 12, METADATA_ALL_V12)
                          + client.encode(METADATA, 12, METADATA_ALL_V12))
    await wait_for(lambda: blocked_metadata.entered == 1)
    await trio.testing.wait_all_tasks_blocked()  # the broker did all it would do
    assert blocked_metadata.entered == 1
    channel = running.app.socket_server.data_plane_channel
    assert channel.queue_size == 0
    blocked_metadata.release.set()
    assert [(await client.receive())[0] for _ in range(2)] == [1, 2]


async def test_full_request_channel_stops_readers(
        start_broker: Any, blocked_metadata: BlockedHandler) -> None:
    """queued.max.requests: once the channel is full, processors stop reading."""
    running = await start_broker({"num.io.threads": "1", "queued.max.requests": "2"})
    clients = [await WireClient.connect(running.port) for _ in range(5)]
    for client in clients:
        await client.send(METADATA, 12, METADATA_ALL_V12)
    server = running.app.socket_server
    await wait_for(lambda: server.data_plane_channel.queue_size == 2)
    await trio.testing.wait_all_tasks_blocked()  # the broker did all it would do
    assert blocked_metadata.entered == 1          # the one handler is busy
    assert server.data_plane_channel.queue_size == 2  # the channel is full
    blocked_metadata.release.set()
    for client in clients:
        await client.receive()


async def test_a_connection_expiring_while_the_channel_is_full_gives_its_request_back(
        start_broker: Any, blocked_metadata: BlockedHandler, log_events: Any,
        autojump_clock: trio.testing.MockClock) -> None:
    """A request read but never taken by the full request channel (its connection expired
    while waiting for room) gives back its memory: the pool holds only what the queued and
    the handled requests hold, and nothing once they are answered."""
    running = await start_broker({"num.io.threads": "1", "queued.max.requests": "1",
                                  "connections.max.idle.ms": "5000",
                                  "queued.max.request.bytes": str(100 * 1024 * 1024)})
    server = running.app.socket_server
    pool = server.memory_pool
    handled, queued, waiting = [await WireClient.connect(running.port) for _ in range(3)]
    for client in (handled, queued, waiting):
        await client.send(METADATA, 12, METADATA_ALL_V12)
        await trio.testing.wait_all_tasks_blocked()
    assert blocked_metadata.entered == 1 and server.data_plane_channel.queue_size == 1
    frame_bytes = pool.used // 3
    assert pool.used == 3 * frame_bytes
    with trio.fail_after(20):
        # 5 s without a read or a send: all three expire (waiting for an answer is no activity)
        for client in (handled, queued, waiting):
            assert await client.closed_by_peer()
    await trio.testing.wait_all_tasks_blocked()
    assert [c["reason"] for c in log_events.events("connection_closed")] == ["idle"] * 3
    assert pool.used == 2 * frame_bytes  # the handled and the queued request still hold theirs
    blocked_metadata.release.set()
    await trio.testing.wait_all_tasks_blocked()
    assert pool.used == 0


async def test_memory_pool_mutes_until_released(
        start_broker: Any, blocked_metadata: BlockedHandler, log_events: Any) -> None:
    """queued.max.request.bytes: a frame that cannot be allocated waits for memory."""
    running = await start_broker({"socket.request.max.bytes": "100",
                                  "queued.max.request.bytes": "100"})
    pool = running.app.socket_server.memory_pool
    first, second = [await WireClient.connect(running.port) for _ in range(2)]
    await first.send(METADATA, 12, METADATA_ALL_V12)
    await wait_for(lambda: blocked_metadata.entered == 1)
    pool.try_allocate(pool.available)  # use up what is left: the next frame must wait
    await second.send(METADATA, 12, METADATA_ALL_V12)
    await log_events.wait_for("connection_muted", reason="memory")
    await trio.testing.wait_all_tasks_blocked()
    assert blocked_metadata.entered == 1
    blocked_metadata.release.set()
    await first.receive()
    pool.release(100)
    await second.receive()
    assert log_events.events("connection_unmuted", reason="memory")


async def test_throttled_connection_waits_before_reading(
        start_broker: Any, throttling_metadata: None, log_events: Any,
        autojump_clock: trio.testing.MockClock) -> None:
    """KIP-219: the response goes out at once; the next request is read after the throttle."""
    running = await start_broker()
    client = await WireClient.connect(running.port)
    start = trio.current_time()
    await client.send_raw(client.encode(METADATA, 12, METADATA_ALL_V12)
                          + client.encode(API_VERSIONS, 3, API_VERSIONS_V3))
    await client.receive()
    assert trio.current_time() - start < 0.1
    # testSendActionResponseWithThrottledChannelWhereThrottlingInProgress
    [connection] = [c for p in running.app.socket_server.processors for c in p.connections]
    await wait_for(lambda: connection.mute_state == "MUTED_AND_THROTTLED")
    await client.receive()
    assert trio.current_time() - start >= 0.5
    # ...WhereThrottlingAlreadyDone: the channel is readable again
    await wait_for(lambda: connection.mute_state == "NOT_MUTED")
    assert log_events.events("throttle_started", throttle_ms=500.0)
    assert log_events.events("throttle_ended")


async def test_max_connections_per_ip(start_broker: Any, log_events: Any) -> None:
    """testMaxConnectionsPerIp: the 6th connection is closed; fine again after one closes."""
    running = await start_broker({"max.connections.per.ip": "5"})
    clients = [await WireClient.connect(running.port) for _ in range(5)]
    for client in clients:
        await client.request(API_VERSIONS, 3, API_VERSIONS_V3)
    extra = await WireClient.connect(running.port)
    assert await extra.closed_by_peer()
    assert log_events.events("connection_rejected", reason="per_ip_limit", limit=5)
    await clients[0].aclose()
    await wait_for(lambda: running.app.socket_server.quotas.count(ip="127.0.0.1") == 4)
    again = await WireClient.connect(running.port)
    await again.request(API_VERSIONS, 3, API_VERSIONS_V3)


async def test_aborted_connections_of_every_kind_leave_no_count_behind(
        start_broker: Any, log_events: Any) -> None:
    """A storm of connections that end at every stage (reset at once, reset mid-frame, reset
    after a whole request, a request then FIN, half a size prefix then FIN), some of them
    refused by the per-IP limit: each is counted out, so the IP's full allowance is
    available afterwards (a leaked count would refuse one connection for good)."""
    running = await start_broker({"max.connections.per.ip": "5"})
    quotas = running.app.socket_server.quotas
    frame = encode_request(API_VERSIONS, 3, 1, "storm", API_VERSIONS_V3)
    for index in range(60):
        sock = trio.socket.socket()
        await sock.connect(("127.0.0.1", running.port))
        kind = index % 5
        if kind == 1:
            await sock.send(frame[:6])
        elif kind in (2, 3):
            await sock.send(frame)
        elif kind == 4:
            await sock.send(frame[:2])
        if kind in (0, 1, 2):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    await wait_for(lambda: quotas.count(ip="127.0.0.1") == 0 and quotas.total == 0)
    clients = [await WireClient.connect(running.port) for _ in range(5)]
    for client in clients:
        await client.request(API_VERSIONS, 3, API_VERSIONS_V3)
    closed = log_events.events("connection_closed")
    rejected = log_events.events("connection_rejected")
    assert len(closed) + len(rejected) == 60


async def _connect_from(source_ip: str, port: int) -> WireClient:
    sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    await sock.bind((source_ip, 0))
    await sock.connect(("127.0.0.1", port))
    return WireClient(trio.SocketStream(sock))


async def test_zero_max_connections_per_ip_with_override(start_broker: Any) -> None:
    """testZeroMaxConnectionsPerIp: limit 0 plus override 127.0.0.1:5; other IPs refused."""
    running = await start_broker({"max.connections.per.ip": "0",
                                  "max.connections.per.ip.overrides": "127.0.0.1:5"})
    allowed = [await _connect_from("127.0.0.1", running.port) for _ in range(5)]
    for client in allowed:
        await client.request(API_VERSIONS, 3, API_VERSIONS_V3)
    assert await (await _connect_from("127.0.0.1", running.port)).closed_by_peer()
    assert await (await _connect_from("127.0.0.2", running.port)).closed_by_peer()


async def test_max_connections_per_ip_overrides(start_broker: Any) -> None:
    """testMaxConnectionsPerIpOverrides: a host-name override (resolved) allows more."""
    running = await start_broker({"max.connections.per.ip": "1",
                                  "max.connections.per.ip.overrides": "localhost:3"})
    clients = [await _connect_from("127.0.0.1", running.port) for _ in range(3)]
    for client in clients:
        await client.request(API_VERSIONS, 3, API_VERSIONS_V3)
    other = [await _connect_from("127.0.0.2", running.port) for _ in range(2)]
    await other[0].request(API_VERSIONS, 3, API_VERSIONS_V3)
    assert await other[1].closed_by_peer()


async def test_max_connections_waits_for_a_free_slot(start_broker: Any, log_events: Any) -> None:
    """max.connections: the acceptor stops accepting until a connection closes."""
    running = await start_broker({"max.connections": "2"})
    first, second = [await WireClient.connect(running.port) for _ in range(2)]
    for client in (first, second):
        await client.request(API_VERSIONS, 3, API_VERSIONS_V3)
    third = await WireClient.connect(running.port)  # completes in the kernel's backlog
    await third.send(API_VERSIONS, 3, API_VERSIONS_V3)
    await trio.testing.wait_all_tasks_blocked()  # the broker did all it would do
    assert not readable(third), "answered beyond max.connections"
    await first.aclose()
    await wait_for(lambda: readable(third))
    await third.receive()
    assert log_events.events("acceptor_blocked", reason="max_connections")


async def test_listener_max_connections(start_broker: Any) -> None:
    running = await start_broker({"listener.name.plaintext.max.connections": "1"})
    first = await WireClient.connect(running.port)
    await first.request(API_VERSIONS, 3, API_VERSIONS_V3)
    second = await WireClient.connect(running.port)
    await second.send(API_VERSIONS, 3, API_VERSIONS_V3)
    await trio.testing.wait_all_tasks_blocked()  # the broker did all it would do
    assert not readable(second), "answered beyond the listener's max.connections"
    await first.aclose()
    await second.receive()


async def test_sockets_close_on_shutdown(start_broker: Any, log_events: Any) -> None:
    """testSocketsCloseOnShutdown: shutdown closes client connections."""
    running = await start_broker()
    clients = [await WireClient.connect(running.port) for _ in range(3)]
    for client in clients:
        await client.request(API_VERSIONS, 3, API_VERSIONS_V3)
    await running.shutdown()
    for client in clients:
        assert await client.closed_by_peer()
    steps = [e["step"] for e in log_events.events("shutdown_step")]
    assert steps[:2] == ["acceptors_stopped", "processors_stopped_reading"]
    assert "connections_closed" in steps
    with pytest.raises(OSError):
        await trio.open_tcp_stream("127.0.0.1", running.port)


async def test_shutdown_finishes_in_flight_requests(
        start_broker: Any, blocked_metadata: BlockedHandler, log_events: Any) -> None:
    """Shutdown stops reading but answers what was read, within the graceful deadline."""
    running = await start_broker()
    client = await WireClient.connect(running.port)
    await client.send(METADATA, 12, METADATA_ALL_V12)
    await wait_for(lambda: blocked_metadata.entered == 1)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(running.shutdown)
        await log_events.wait_for("shutdown_step", step="processors_stopped_reading")
        blocked_metadata.release.set()
        correlation, _ = await client.receive()
    assert correlation == 1
    assert await client.closed_by_peer()


async def test_shutdown_cancels_in_flight_requests_after_the_deadline(
        start_broker: Any, blocked_metadata: BlockedHandler, log_events: Any,
        autojump_clock: trio.testing.MockClock) -> None:
    running = await start_broker({"shutdown.graceful.timeout.ms": "3000"})
    client = await WireClient.connect(running.port)
    await client.send(METADATA, 12, METADATA_ALL_V12)
    await wait_for(lambda: blocked_metadata.entered == 1)
    start = trio.current_time()
    await running.shutdown()
    assert 3.0 <= trio.current_time() - start < 3.5
    assert log_events.events("shutdown_step", step="in_flight_requests_cancelled")
    assert await client.closed_by_peer()


async def test_control_plane_has_its_own_channel_and_handler(
        start_broker: Any, blocked_metadata: BlockedHandler) -> None:
    """control.plane.listener.name: the control plane is served while data-plane handlers are
    all busy, through its own acceptor, single processor, channel (20) and handler."""
    running = await start_broker({
        "listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "control.plane.listener.name": "CONTROLLER",
        "num.io.threads": "1",
    })
    server = running.app.socket_server
    assert server.control_plane_channel is not None
    assert server.control_plane_channel.capacity == 20
    control_processors = [p for p in server.processors if p.control_plane]
    assert len(control_processors) == 1
    data = await WireClient.connect(running.port_of("PLAINTEXT"))
    await data.send(METADATA, 12, METADATA_ALL_V12)  # occupies the only data-plane handler
    await wait_for(lambda: blocked_metadata.entered == 1)
    control = await WireClient.connect(running.port_of("CONTROLLER"))
    body = await control.request(API_VERSIONS, 3, API_VERSIONS_V3)
    assert body.error_code == ErrorCode.none
    blocked_metadata.release.set()
    await data.receive()


async def test_port_zero_is_advertised_with_the_bound_port(broker: Any) -> None:
    client = await WireClient.connect(broker.port)
    body = await client.request(METADATA, 4, MetadataRequestV4(
        topics=None, allow_auto_topic_creation=False))
    assert [(b.host, b.port) for b in body.brokers] == [("127.0.0.1", broker.port)]


async def test_advertised_listeners_override(start_broker: Any) -> None:
    running = await start_broker({"advertised.listeners": "PLAINTEXT://kafka.example:9092"})
    client = await WireClient.connect(running.port)
    body = await client.request(METADATA, 12, METADATA_ALL_V12)
    assert [(b.host, b.port) for b in body.brokers] == [("kafka.example", 9092)]


async def test_metrics_are_served_in_prometheus_format(start_broker: Any) -> None:
    running = await start_broker({"metrics.prometheus.listener": "127.0.0.1:0"})
    client = await WireClient.connect(running.port)
    await client.request(METADATA, 12, METADATA_ALL_V12)
    stream = await trio.open_tcp_stream("127.0.0.1", running.app.metrics_port)
    await stream.send_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    response = b""
    while chunk := await stream.receive_some(65536):
        response += chunk
    assert response.startswith(b"HTTP/1.1 200 OK")
    text = response.decode()
    for name in ("kafka_network_requestmetrics_totaltimems_bucket",
                 "kafka_network_requestmetrics_requestqueuetimems_count",
                 "kafka_network_socketserver_networkprocessoravgidlepercent",
                 "kafka_network_requestchannel_requestqueuesize",
                 "kafka_server_socket_server_metrics_connection_count"):
        assert name in text
    assert 'kafka_network_requestmetrics_requests_total{request="Metadata",version="12"} 1.0' in text


async def wait_for(condition: Any, timeout: float = 5.0) -> None:
    with trio.fail_after(timeout):
        while not condition():
            await trio.sleep(0.01)


async def test_handler_error_is_answered_and_costs_no_connection(
        start_broker: Any, monkeypatch: pytest.MonkeyPatch, log_events: Any) -> None:
    """sendErrorOrCloseConnection: a failing handler's request gets the API's error response
    (tests/server/test_error_responses.py checks them per API); the connection goes on."""
    original = registry.handlers()[METADATA]

    async def failing(ctx: Any, body: Any) -> Any:
        raise RuntimeError("injected failure")

    monkeypatch.setitem(registry._HANDLERS, METADATA, attrs.evolve(original, handle=failing))
    running = await start_broker()
    healthy = await WireClient.connect(running.port)
    victim = await WireClient.connect(running.port)
    answer = await victim.request(METADATA, 12, METADATA_ALL_V12)
    assert answer.topics == () and answer.brokers == ()
    failed = await log_events.wait_for("request_failed", api="Metadata")
    assert "injected failure" in failed[0]["detail"]
    body = await victim.request(API_VERSIONS, 3, API_VERSIONS_V3)
    assert body.error_code == ErrorCode.none
    body = await healthy.request(API_VERSIONS, 3, API_VERSIONS_V3)
    assert body.error_code == ErrorCode.none
    assert not log_events.events("connection_closed")


async def test_remote_close_send_failure(start_broker: Any, blocked_metadata: BlockedHandler,
                                         log_events: Any) -> None:
    """remoteCloseSendFailure: the client vanishes before its response; the send fails, the
    channel is closed, other connections are unaffected, and the request is still counted."""
    running = await start_broker()
    client = await WireClient.connect(running.port)
    await client.send(METADATA, 12, METADATA_ALL_V12)
    await wait_for(lambda: blocked_metadata.entered == 1)
    client.stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                    struct.pack("ii", 1, 0))  # RST on close
    await client.aclose()
    await trio.testing.wait_all_tasks_blocked()
    blocked_metadata.release.set()
    closed = await log_events.wait_for("connection_closed")
    assert closed[0]["reason"] == "client"
    await log_events.wait_for("request", api="Metadata", response_action="dropped")
    other = await WireClient.connect(running.port)
    await other.request(API_VERSIONS, 3, API_VERSIONS_V3)


async def test_a_connection_logs_its_accept_and_its_close_with_what_it_did(
        start_broker: Any, log_events: Any, autojump_clock: trio.testing.MockClock) -> None:
    """``connection_accepted`` names the peer's address; ``connection_closed`` why it ended
    (the client's end of stream), how many requests it read and how long it lived."""
    running = await start_broker()
    await trio.sleep(100)  # the clock far from zero: a sum of times would show
    client = await WireClient.connect(running.port)
    port = client.stream.socket.getsockname()[1]
    await client.request(API_VERSIONS, 3, API_VERSIONS_V3)
    await client.request(API_VERSIONS, 3, API_VERSIONS_V3)
    await trio.sleep(3.25)
    await client.aclose()
    [closed] = await log_events.wait_for("connection_closed")
    [accepted] = log_events.events("connection_accepted")
    assert accepted["ip"] == "127.0.0.1"
    assert accepted["connection_id"] == closed["connection_id"]
    assert accepted["peer"] == closed["peer"] == f"127.0.0.1:{port}"
    assert (closed["reason"], closed["detail"], closed["requests"]) == ("client", "end of stream", 2)
    assert closed["duration_ms"] == pytest.approx(3250, abs=0.5)
    # kafka.server:type=socket-server-metrics connection-close-total, by listener and reason
    registry = running.app.socket_server.metrics.registry
    assert registry.get_sample_value("kafka_server_socket_server_metrics_connection_close_total",
                                     {"listener": closed["listener"], "reason": "client"}) == 1


async def test_a_reset_while_reading_closes_as_the_clients_doing(
        start_broker: Any, log_events: Any) -> None:
    """The peer resets the connection (RST) while the broker waits for its next request: the
    close is the client's (``client``), and the detail names the failed receive."""
    running = await start_broker()
    client = await WireClient.connect(running.port)
    await client.request(API_VERSIONS, 3, API_VERSIONS_V3)
    client.stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    await client.aclose()
    [closed] = await log_events.wait_for("connection_closed")
    assert closed["reason"] == "client"
    assert closed["detail"].startswith("receive failed: BrokenResourceError(")
    assert "Connection reset by peer" in closed["detail"]


async def test_a_bug_in_a_connection_costs_that_connection_only(
        start_broker: Any, log_events: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """An exception escaping a connection's own code (a bug) closes that connection with
    reason ``error`` and the exception in ``detail``; the broker serves the others."""
    from trio_broker.network.connection import Connection

    running = await start_broker()

    def broken(self: Any, body: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(Connection, "_register_client", broken)
    victim = await WireClient.connect(running.port)
    await victim.send(API_VERSIONS, 3, API_VERSIONS_V3)  # ApiVersions registers its client
    assert await victim.closed_by_peer()
    [closed] = await log_events.wait_for("connection_closed")
    assert (closed["reason"], closed["detail"]) == ("error", "RuntimeError('a bug')")
    monkeypatch.undo()
    other = await WireClient.connect(running.port)
    assert (await other.request(API_VERSIONS, 3, API_VERSIONS_V3)).error_code == ErrorCode.none


async def test_shutdown_closes_connections_with_reason(start_broker: Any, log_events: Any) -> None:
    running = await start_broker()
    client = await WireClient.connect(running.port)
    await client.request(API_VERSIONS, 3, API_VERSIONS_V3)
    await running.shutdown()
    assert log_events.events("connection_closed", reason="shutdown", detail="")


async def test_no_op_action_lets_the_next_request_through(broker: Any, log_events: Any) -> None:
    """testNoOpAction: Produce with acks=0 gets no response (NoOp) and does not leave the
    connection muted: the request pipelined after it is read and answered."""
    import datetime

    from kio.schema.produce.v9 import request as produce
    from kio.static.primitive import i16, i32, i32Timedelta

    from trio_broker.protocol.records import build_batch

    broker.broker.log_manager.create_topic("noop", 1)
    batch = build_batch([(b"k", b"v", [], 1_700_000_000_000)])
    body = produce.ProduceRequest(
        acks=i16(0), timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)),
        topic_data=(produce.TopicProduceData(name="noop", partition_data=(
            produce.PartitionProduceData(index=i32(0), records=batch),)),))
    client = await WireClient.connect(broker.port)
    await client.send_raw(client.encode(0, 9, body) + client.encode(API_VERSIONS, 3,
                                                                    API_VERSIONS_V3))
    client._sent.pop(1)  # no response will come for the Produce
    correlation, _ = await client.receive()
    assert correlation == 2
    noop = await log_events.wait_for("request", api="Produce")
    assert noop[0]["response_action"] == "noop" and noop[0]["response_bytes"] == 0
    assert broker.broker.log_manager.read("noop", 0, 0, 1 << 20).high_watermark == 1


async def test_listen_backlog(start_broker: Any) -> None:
    """testListenBacklogSize: the listener's backlog is socket.listen.backlog.size, and
    connections beyond what the broker accepts wait in it, answered once a slot frees."""
    running = await start_broker({"socket.listen.backlog.size": "37", "max.connections": "1"})
    assert listen_queue(running.port) == (0, 37)
    first = await WireClient.connect(running.port)
    await first.request(API_VERSIONS, 3, API_VERSIONS_V3)
    waiting = [await WireClient.connect(running.port) for _ in range(30)]  # all connect
    for client in waiting:
        await client.send(API_VERSIONS, 3, API_VERSIONS_V3)
    # All 30 wait in the kernel's accept queue: the acceptor takes none until a slot frees.
    await wait_for(lambda: listen_queue(running.port) == (30, 37))
    await trio.testing.wait_all_tasks_blocked()  # the broker did all it would do
    assert listen_queue(running.port) == (30, 37)
    assert not any(readable(client) for client in waiting)
    await first.aclose()
    await waiting[0].receive()
    await waiting[0].aclose()
    await waiting[1].receive()


async def test_the_acceptor_empties_kafkas_listen_queue_in_one_turn(start_broker: Any) -> None:
    """A burst: 50 connections waiting in a listen queue of Kafka's default size are all
    accepted in one step of the acceptor task (it takes up to what its processors' queues
    hold, 3 x 20), before the processors and connection tasks run: taking 8 a turn, a burst of
    10,000 kept the queue full while the kernel dropped handshakes (docs/decisions.md,
    "10,000 connections")."""
    running = await start_broker({"socket.listen.backlog.size": "50"})
    quotas = running.app.socket_server.quotas
    steps: list[int] = []

    class AcceptsPerStep(trio.abc.Instrument):
        before = 0

        def before_task_step(self, task: trio.lowlevel.Task) -> None:
            if task.name.startswith("acceptor"):
                self.before = quotas.total

        def after_task_step(self, task: trio.lowlevel.Task) -> None:
            if task.name.startswith("acceptor"):
                steps.append(quotas.total - self.before)

    instrument = AcceptsPerStep()
    clients = []
    trio.lowlevel.add_instrument(instrument)
    try:
        # Blocking connects, no checkpoint between them: the kernel completes each handshake
        # and queues it; the broker's tasks cannot run until this task yields.
        for _ in range(50):
            client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            clients.append(client)
            client.connect(("127.0.0.1", running.port))
        assert listen_queue(running.port) == (50, 50)
        await wait_for(lambda: quotas.total == 50)
    finally:
        trio.lowlevel.remove_instrument(instrument)
        for client in clients:
            client.close()
    assert max(steps) == 50, steps


def listen_queue(port: int) -> tuple[int, int]:
    """``(connections waiting to be accepted, backlog)`` of the IPv4 TCP listener on ``port``, as
    the kernel reports them over sock_diag netlink (what ``ss -ltn`` shows as Recv-Q/Send-Q)."""
    netlink_sock_diag, sock_diag_by_family, nlmsg_done, nlmsg_error = 4, 20, 3, 2
    tcp_listen = 10
    request = struct.pack("=BBBxI", socket.AF_INET, socket.IPPROTO_TCP, 0, 1 << tcp_listen)
    request += bytes(48)  # struct inet_diag_sockid: no filter, every listener is dumped
    header = struct.pack("=IHHII", 16 + len(request), sock_diag_by_family,
                         0x1 | 0x300, 1, 0)  # NLM_F_REQUEST | NLM_F_DUMP
    found: tuple[int, int] | None = None
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, netlink_sock_diag) as netlink:
        netlink.sendto(header + request, (0, 0))
        while True:
            data = netlink.recv(1 << 16)
            offset = 0
            while offset < len(data):
                length, kind = struct.unpack_from("=IH", data, offset)
                if kind == nlmsg_done:
                    assert found is not None, f"no listener on port {port}"
                    return found
                assert kind != nlmsg_error, "sock_diag request refused"
                # struct inet_diag_msg: 4 bytes, then the socket id (source port first, big
                # endian), expires, rqueue (accept queue length), wqueue (backlog).
                (source_port,) = struct.unpack_from(">H", data, offset + 16 + 4)
                if source_port == port:
                    found = struct.unpack_from("=II", data, offset + 16 + 56)
                offset += (length + 3) & ~3


async def test_response_encoding_failure_is_answered_with_the_error_response(
        start_broker: Any, monkeypatch: pytest.MonkeyPatch, log_events: Any) -> None:
    """A response that cannot be encoded (a handler bug) is a handler failure like any other:
    the error response goes out instead and the connection goes on."""
    original = registry.handlers()[METADATA]

    async def broken_body(ctx: Any, body: Any) -> Any:
        return object()  # not a kio message: encoding fails in the pool

    monkeypatch.setitem(registry._HANDLERS, METADATA, attrs.evolve(original, handle=broken_body))
    running = await start_broker()
    victim = await WireClient.connect(running.port)
    answer = await victim.request(METADATA, 12, METADATA_ALL_V12)
    assert answer.topics == ()
    await log_events.wait_for("request_failed", api="Metadata")
    await victim.request(API_VERSIONS, 3, API_VERSIONS_V3)


async def _alter_ip_rate(port: int, ip: str | None, rate: float | None) -> Any:
    from kio.schema.alter_client_quotas.v1 import request as alter
    from kio.static.primitive import f64

    client = await WireClient.connect(port)
    body = await client.request(49, 1, alter.AlterClientQuotasRequest(
        entries=(alter.EntryData(
            entity=(alter.EntityData(entity_type="ip", entity_name=ip),),
            ops=(alter.OpData(key="connection_creation_rate", value=f64(rate or 0.0),
                              remove=rate is None),)),),
        validate_only=False))
    await client.aclose()
    return body


async def test_connection_rate_per_ip(start_broker: Any, log_events: Any,
                                      autojump_clock: trio.testing.MockClock) -> None:
    """testConnectionRatePerIp: over its connection_creation_rate quota an IP's connection is
    held and closed after the throttle time; later connections are accepted again."""
    running = await start_broker({"quota.window.num": "2", "quota.window.size.seconds": "1"})
    result = await _alter_ip_rate(running.port, "127.0.0.1", 2.0)
    assert [e.error_code for e in result.entries] == [ErrorCode.none]
    # The AlterClientQuotas connection itself counted before the quota existed; wait it out.
    await trio.sleep(3)
    accepted = [await WireClient.connect(running.port) for _ in range(2)]
    for client in accepted:
        await client.request(API_VERSIONS, 3, API_VERSIONS_V3)
    throttled = await WireClient.connect(running.port)
    start = trio.current_time()
    assert await throttled.closed_by_peer()
    waited = trio.current_time() - start
    rejected = await log_events.wait_for("connection_rejected", reason="ip_rate_throttled")
    assert rejected[0]["ip"] == "127.0.0.1"
    assert 0.4 <= waited <= 1.0  # held for the throttle time, not closed at once
    await trio.sleep(3)
    later = await WireClient.connect(running.port)
    await later.request(API_VERSIONS, 3, API_VERSIONS_V3)


async def test_throttled_sockets_closed_on_shutdown(start_broker: Any,
                                                    autojump_clock: trio.testing.MockClock
                                                    ) -> None:
    """testThrottledSocketsClosedOnShutdown."""
    running = await start_broker({"quota.window.num": "2", "quota.window.size.seconds": "1"})
    await _alter_ip_rate(running.port, None, 1.0)  # the default quota of every IP
    await trio.sleep(5)
    first = await WireClient.connect(running.port)
    await first.request(API_VERSIONS, 3, API_VERSIONS_V3)
    throttled = await WireClient.connect(running.port)
    await trio.sleep(0.01)
    start = trio.current_time()
    await running.shutdown()
    assert await throttled.closed_by_peer()
    assert trio.current_time() - start < 0.5


async def test_client_quotas_describe_and_persist(start_broker: Any, tmp_path: Any) -> None:
    from kio.schema.describe_client_quotas.v1 import request as describe
    from kio.static.primitive import i8

    data = {"log.dirs": str(tmp_path / "quotas")}
    running = await start_broker(data)
    await _alter_ip_rate(running.port, "10.0.0.1", 7.0)
    await _alter_ip_rate(running.port, None, 100.0)
    refused = await _alter_ip_rate(running.port, "not-an-ip", 1.0)
    assert refused.entries[0].error_code == ErrorCode.invalid_request
    await running.shutdown()
    again = await start_broker(data)
    client = await WireClient.connect(again.port)
    body = await client.request(48, 1, describe.DescribeClientQuotasRequest(
        components=(describe.ComponentData(entity_type="ip", match_type=i8(2), match=None),),
        strict=False))
    found = {e.entity[0].entity_name: e.values[0].value for e in body.entries}
    assert found == {None: 100.0, "10.0.0.1": 7.0}
    body = await client.request(48, 1, describe.DescribeClientQuotasRequest(
        components=(describe.ComponentData(entity_type="ip", match_type=i8(0),
                                           match="10.0.0.1"),), strict=False))
    assert [e.entity[0].entity_name for e in body.entries] == ["10.0.0.1"]


async def test_an_idle_connection_keeps_no_request(broker: Any) -> None:
    """Idle connection memory (issue 11): once answered, a request (frame, decoded body,
    response bytes) is not kept alive by the connection waiting for the next one, nor is the
    exception of the read that found no data."""
    client = await WireClient.connect(broker.port)
    await client.request(API_VERSIONS, 3, API_VERSIONS_V3)
    await client.request(API_VERSIONS, 3, API_VERSIONS_V3)
    await trio.testing.wait_all_tasks_blocked()
    gc.collect()
    assert not [o for o in gc.get_objects() if isinstance(o, Request)]
    assert not [o for o in gc.get_objects() if isinstance(o, BlockingIOError)]
    assert await client.request(API_VERSIONS, 3, API_VERSIONS_V3)  # and it still answers


async def test_only_the_idle_connection_expires_exactly_on_time(
        start_broker: Any, log_events: Any, autojump_clock: trio.testing.MockClock) -> None:
    """Kafka's IdleExpiryManager: of two connections, the one without reads or sends expires
    exactly connections.max.idle.ms after its last send; the active one stays open."""
    running = await start_broker({"connections.max.idle.ms": "1000"})
    idle = await WireClient.connect(running.port)
    active = await WireClient.connect(running.port)
    await idle.request(API_VERSIONS, 3, API_VERSIONS_V3)
    last_send = trio.current_time()

    async def keep_active() -> None:
        for _ in range(3):
            await trio.sleep(0.4)
            await active.request(API_VERSIONS, 3, API_VERSIONS_V3)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(keep_active)
        assert await idle.closed_by_peer()
        assert trio.current_time() - last_send == pytest.approx(1.0, abs=1e-6)
    assert len(log_events.events("connection_expired")) == 1
    assert await active.request(API_VERSIONS, 3, API_VERSIONS_V3)  # still open at 1.2 s
