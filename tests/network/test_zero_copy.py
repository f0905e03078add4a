"""Zero-copy fetch: record bytes go from the segment file into the socket with ``sendfile``.

Real loopback sockets and files throughout. The storage half (``Segment.read_region``) must
name exactly the bytes ``Segment.read`` returns; the wire must carry the same bytes with
``socket.sendfile.enable`` on and off and through the read fallback; a segment deleted by
retention while its bytes are being sent still sends them (the segment keeps its file open
until its regions are released, and a region costs no descriptor of its own);
a truncation during the send closes the connection instead of sending other bytes; and a real
client (confluent-kafka) consumes a large topic through it, every record checked.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import socket
import sys
import time
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from tests.kafka_wire import WireClient
from trio_broker.config import load_config
from trio_broker.protocol import records as rb
from trio_broker.protocol.codec import (
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    encode_response_parts,
    request_schema,
)
from trio_broker.protocol.regions import FramedParts
from trio_broker.server.registry import supported_versions
from trio_broker.storage.log import PartitionLog

FETCH = 1
TIMEOUT = 30.0


def fetch_request(version: int, topic: str, offset: int = 0, max_bytes: int = 8 << 20) -> Any:
    module = sys.modules[request_schema(FETCH, version).__module__]

    def make(cls: Any, **fields: Any) -> Any:
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in fields.items() if k in names})

    partition = make(module.FetchPartition, partition=0, fetch_offset=offset,
                     partition_max_bytes=max_bytes, current_leader_epoch=-1,
                     log_start_offset=-1)
    return make(module.FetchRequest, max_wait=datetime.timedelta(0), min_bytes=1,
                max_bytes=max_bytes, isolation_level=0, session_id=0, session_epoch=-1,
                forgotten_topics_data=(), rack_id="",
                topics=(module.FetchTopic(topic=topic, partitions=(partition,)),))


def value_of(index: int, size: int = 900) -> bytes:
    """A value that names its index and cannot be mistaken for another record's."""
    head = f"record-{index:08d}-".encode()
    return head + bytes((index * 7 + i) % 251 for i in range(size - len(head)))


def fill(log: PartitionLog, count: int, per_batch: int = 4, size: int = 900) -> None:
    """``count`` records in batches of ``per_batch``, fixed timestamps (reproducible bytes)."""
    for start in range(0, count, per_batch):
        records = [(None, value_of(i, size), [], 1_700_000_000_000 + i)
                   for i in range(start, min(start + per_batch, count))]
        log.append(rb.build_batch(records))


def record_values(data: bytes) -> list[tuple[int, bytes | None]]:
    """``(offset, value)`` of every record of whole, CRC-valid batches in ``data``."""
    out = []
    for position, size in rb.iter_batches(data):
        batch = data[position:position + size]

        rb.validate_batch(batch, from_client=False)  # the CRC
        out += [(r.offset, r.value) for r in rb.decode_records(batch)]
    return out


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def deleted_files_held_open() -> list[str]:
    """Targets of this process's descriptors whose files were unlinked."""
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.endswith(" (deleted)"):
            held.append(target)
    return held


async def small_window_client(port: int) -> WireClient:
    """A client whose tiny receive buffer makes the broker's large writes block."""
    sock = trio.socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    await sock.connect(("127.0.0.1", port))
    return WireClient(trio.SocketStream(sock))


async def fetched_partitions(client: WireClient) -> Any:
    """The partitions of the Fetch v11 response ``client`` (a blocked reader) gets next."""
    with trio.fail_after(TIMEOUT):
        payload = await client.receive_frame()
    assert payload is not None
    _, body = decode_response(FETCH, 11, payload)
    return body.responses[0].partitions


# ----------------------------------------------------------------------------- storage
def test_region_names_exactly_the_bytes_read_returns(tmp_path: Path) -> None:
    """For every offset and a spread of limits, the region's bytes are ``read``'s bytes:
    whole batches, the limit respected, the first batch whole when it alone is larger."""
    from trio_broker.storage.manager import LogManager

    config = load_config({"log.dirs": str(tmp_path), "log.index.interval.bytes": "1500"})
    lm = LogManager(config)
    lm.open()
    try:
        lm.create_topic("t", 1)
        log = lm.get_partition("t", 0)
        assert log is not None
        for n in range(60):  # batches of 1-5 records of 40-1200 bytes
            log.append(rb.build_batch([(None, value_of(n * 10 + i, 40 + (n * 97 % 1160)), [],
                                        1_700_000_000_000) for i in range(1 + n % 5)]))
        assert log.active.offset_index.positions, "the walk should start from index entries"
        for offset in range(0, log.log_end_offset, 3):
            for max_bytes in (0, 1, 100, 1000, 4000, 9000, 1 << 20):
                for first in (True, False):
                    plain = log.read(offset, max_bytes, min_one_batch=first)
                    region = log.read(offset, max_bytes, min_one_batch=first, region=True)
                    got = region.records
                    as_bytes = got if isinstance(got, bytes) else got.read()
                    assert as_bytes == plain.records, (offset, max_bytes, first)
                    if not isinstance(got, bytes):
                        got.release()
    finally:
        lm.close()


# -------------------------------------------------------------------------------- wire
@pytest.mark.parametrize("version", [4, 11, 12])
async def test_sendfile_on_off_and_fallback_give_identical_bytes(start_broker: Any,
                                                                  version: int) -> None:
    """The same records fetched with sendfile, without it (the handler reads them), and the
    read fallback of a parts response (what a TLS connection sends) are the same bytes; the
    regions' file descriptors are all given back."""
    frames: dict[str, bytes] = {}
    for mode in ("true", "false"):
        running = await start_broker({"socket.sendfile.enable": mode,
                                      "log.segment.bytes": str(1 << 20)})
        lm = running.broker.log_manager
        lm.create_topic("t", 1)
        fill(lm.get_partition("t", 0), 1500)
        client = await WireClient.connect(running.port)
        fds = open_fds()
        for offset in (0, 17, 700):
            await client.send(FETCH, version, fetch_request(version, "t", offset))
            payload = await client.receive_frame()
            assert payload is not None
            frames[f"{mode}-{offset}"] = payload
        assert open_fds() == fds, "a region's descriptor was not released"
        await client.aclose()
        await running.shutdown()
    for offset in (0, 17, 700):
        on, off = frames[f"true-{offset}"], frames[f"false-{offset}"]
        assert on == off
        _, body = decode_response(FETCH, version, on)
        records = body.responses[0].partitions[0].records
        values = record_values(records)
        assert len(records) > 300_000 and values[0][0] <= offset < values[0][0] + 4
        assert all(value == value_of(index) for index, value in values)

    # The fallback: the response the wire carried, with its records as a region again,
    # read into one bytes object (what a TLS connection sends) is the same frame.
    running = await start_broker({"log.segment.bytes": str(1 << 20)})
    lm = running.broker.log_manager
    lm.create_topic("t", 1)
    fill(lm.get_partition("t", 0), 1500)
    frame = encode_request(FETCH, version, 3, "wire-test", fetch_request(version, "t", 700))
    request = decode_request(frame[4:], supported_versions())
    _, body = decode_response(FETCH, version, frames["true-700"])
    wire_partition = body.responses[0].partitions[0]
    region = lm.get_partition("t", 0).read(700, 8 << 20, region=True).records
    assert not isinstance(region, bytes)
    with_region = dataclasses.replace(body, responses=(dataclasses.replace(
        body.responses[0], partitions=(dataclasses.replace(wire_partition, records=region),)),))
    parts = encode_response_parts(request, with_region)
    assert isinstance(parts, FramedParts) and len(parts) == len(frames["true-700"]) + 4
    read = b"".join(part if isinstance(part, bytes) else part.read() for part in parts.parts)
    assert read == encode_response(request, body)
    assert read[4:] == frames["true-700"]
    parts.release()


async def test_segment_deleted_by_retention_mid_send_still_sends_its_bytes(
        start_broker: Any) -> None:
    """Kafka keeps a deleted segment's file readable until in-flight reads are done
    (``file.delete.delay.ms``); here the segment keeps its descriptor open for the region."""
    running = await start_broker({"log.segment.bytes": str(1 << 20),
                                  "socket.send.stall.timeout.ms": "-1"})
    lm = running.broker.log_manager
    lm.create_topic("t", 1)
    log = lm.get_partition("t", 0)
    fill(log, 3000)
    first = log.segments[0]
    path = first.log_path
    original = path.read_bytes()
    assert len(log.segments) >= 2 and len(original) > 900_000

    client = await small_window_client(running.port)
    await client.send(FETCH, 11, fetch_request(11, "t", 0))
    await trio.testing.wait_all_tasks_blocked()  # the broker's write is blocked
    assert log.delete_records_before(-1) == log.high_watermark  # retention drops segment 0
    assert not path.exists()
    assert any(target.startswith(str(path)) for target in deleted_files_held_open())

    records = (await fetched_partitions(client))[0].records
    assert original.startswith(records) and len(records) > len(original) - 4000
    values = record_values(records)
    assert [offset for offset, _ in values] == list(range(len(values)))
    assert all(value == value_of(index) for index, value in values)
    await trio.testing.wait_all_tasks_blocked()
    assert not any(t.startswith(str(path)) for t in deleted_files_held_open())
    await client.aclose()


async def test_truncation_mid_send_closes_instead_of_sending_other_bytes(
        start_broker: Any, log_events: Any) -> None:
    running = await start_broker({"log.segment.bytes": str(1 << 20),
                                  "socket.send.stall.timeout.ms": "-1"})
    lm = running.broker.log_manager
    lm.create_topic("t", 1)
    log = lm.get_partition("t", 0)
    fill(log, 900)
    original = log.segments[0].log_path.read_bytes()

    client = await small_window_client(running.port)
    await client.send(FETCH, 11, fetch_request(11, "t", 0))
    await trio.testing.wait_all_tasks_blocked()
    segment = log.segments[0]
    segment.truncate_to(400)  # the bytes after it could now be overwritten by appends
    fill(log, 40)  # new batches at the same file positions

    received = bytearray()
    with trio.fail_after(TIMEOUT):
        while data := await client.stream.receive_some(65536):
            received += data
    # Everything the client got is the original bytes (4 + response header, then records):
    # the connection was closed before any byte written after the truncation was sent.
    assert len(received) < len(original)
    start = received.find(original[:61])
    assert start > 0 and original.startswith(bytes(received[start:]))
    closed = await log_events.wait_for("connection_closed", reason="error")
    assert "zero-copy fetch" in closed[-1]["detail"]


# ---------------------------------------------------------------------- real client
def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
                         "message.timeout.ms": int(TIMEOUT * 1000)})
    failures: list[str] = []
    for index in range(count):
        producer.produce(topic, value=value_of(index, 2000), partition=0,
                         on_delivery=lambda err, _m: err and failures.append(str(err)))
        producer.poll(0)
    assert producer.flush(TIMEOUT) == 0 and not failures, failures


def consume(bootstrap: str, topic: str, count: int) -> tuple[int, int]:
    """Read every record from offset 0; returns ``(records, crc)`` after checking each."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "zero-copy",
                         "enable.auto.commit": False, "fetch.max.bytes": 8 << 20,
                         "max.partition.fetch.bytes": 4 << 20})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    crc = 0
    seen = 0
    deadline = time.monotonic() + TIMEOUT * 2
    try:
        while seen < count and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            assert message.error() is None or message.error().code() == \
                KafkaError._PARTITION_EOF, message.error()
            if message.error() is not None:
                continue
            assert message.offset() == seen
            assert message.value() == value_of(seen, 2000)
            crc = zlib.crc32(message.value(), crc)
            seen += 1
    finally:
        consumer.close()
    return seen, crc


async def test_confluent_kafka_consumes_a_large_topic_through_sendfile(
        start_broker: Any) -> None:
    """About 24 MB over several segments, every record checked by offset and content."""
    running = await start_broker({"log.segment.bytes": str(4 << 20)})
    assert running.config.socket_sendfile_enable
    running.broker.log_manager.create_topic("big", 1)
    count = 12_000
    with trio.fail_after(TIMEOUT * 4):
        await trio.to_thread.run_sync(produce, running.bootstrap, "big", count)
        assert len(running.broker.log_manager.get_partition("big", 0).segments) >= 5
        seen, crc = await trio.to_thread.run_sync(consume, running.bootstrap, "big", count)
    expected = 0
    for index in range(count):
        expected = zlib.crc32(value_of(index, 2000), expected)
    assert (seen, crc) == (count, expected)


async def test_stalled_sendfile_closes_after_the_stall_bound(
        start_broker: Any, log_events: Any, autojump_clock: trio.testing.MockClock) -> None:
    """The region's sendfile loop keeps the writer's stall bound: a peer that never reads is
    closed with connection_send_stalled, and the region's descriptor is given back."""
    running = await start_broker({"log.segment.bytes": str(1 << 20),
                                  "socket.send.stall.timeout.ms": "2000"})
    lm = running.broker.log_manager
    lm.create_topic("t", 1)
    fill(lm.get_partition("t", 0), 1100)
    path = str(lm.get_partition("t", 0).segments[0].log_path)
    fds = open_fds()
    client = await small_window_client(running.port)
    await client.send(FETCH, 11, fetch_request(11, "t", 0))
    [stalled] = await log_events.wait_for("connection_send_stalled", timeout=10)
    assert stalled["stalled_ms"] >= 2000 and stalled["unsent_bytes"] > 100_000
    await log_events.wait_for("connection_closed", reason="send_stalled")
    await trio.testing.wait_all_tasks_blocked()
    held = [fd for fd in os.listdir("/proc/self/fd")
            if os.path.realpath(f"/proc/self/fd/{fd}") == path]
    assert len(held) == 1  # only the segment's own descriptor is left
    await client.aclose()
    assert open_fds() == fds


async def test_non_reader_of_many_partitions_holds_no_descriptor_per_partition(
        start_broker: Any) -> None:
    """A Fetch naming many partitions whose response the client never reads keeps every
    region until the write ends. The regions read through their segments' own descriptors:
    with one descriptor per region, a dozen such clients on a topic of 2,000 partitions ran
    the broker out of descriptors (EMFILE: no accept, no new segment) until their stall
    timeout. Retention closing a segment under such a response waits for it."""
    partitions = 64
    # Two segments of one batch (4 records) each per partition.
    running = await start_broker({"log.segment.bytes": "4096",
                                  "socket.send.stall.timeout.ms": "-1"})
    lm = running.broker.log_manager
    lm.create_topic("t", partitions)
    for index in range(partitions):
        fill(lm.get_partition("t", index), 8)
    module = sys.modules[request_schema(FETCH, 11).__module__]
    request = fetch_request(11, "t")
    parts = tuple(dataclasses.replace(request.topics[0].partitions[0], partition=index)
                  for index in range(partitions))
    request = dataclasses.replace(request, topics=(
        module.FetchTopic(topic="t", partitions=parts),))
    client = await small_window_client(running.port)
    await trio.testing.wait_all_tasks_blocked()
    fds = open_fds()
    await client.send(FETCH, 11, request)
    await trio.testing.wait_all_tasks_blocked()  # the broker's write is blocked
    assert running.app.socket_server.response_queue_size == 1
    assert open_fds() == fds
    doomed = lm.get_partition("t", 0).segments[0]
    path = doomed.log_path
    lm.get_partition("t", 0).delete_records_before(-1)
    assert not path.exists()
    assert any(target.startswith(str(path)) for target in deleted_files_held_open())

    answered = await fetched_partitions(client)
    assert [[o for o, _ in record_values(p.records)] for p in answered] == [[0, 1, 2, 3]] * partitions
    await trio.testing.wait_all_tasks_blocked()
    assert not any(t.startswith(str(path)) for t in deleted_files_held_open())
    await client.aclose()


async def test_without_sendfile_waiting_responses_hold_no_record_bytes(
        start_broker: Any) -> None:
    """``socket.sendfile.enable=false``: the records stay in the file until their response is
    written, then go a chunk at a time (as on TLS). Read in the handler, the responses of a
    pipelining client that does not read waited whole in memory: 64 fetches of 5 MB held
    673 MB (docs/development.md, "Front-end probes")."""
    running = await start_broker({"socket.sendfile.enable": "false",
                                  "connection.max.inflight.requests": "8",
                                  "socket.send.stall.timeout.ms": "-1"})
    lm = running.broker.log_manager
    lm.create_topic("t", 1)
    log = lm.get_partition("t", 0)
    for index in range(4):  # 4 MB
        log.append(rb.build_batch([(None, bytes([index]) * 1_000_000, [], 1_700_000_000_000)]))
    client = await small_window_client(running.port)
    tracemalloc.start()
    try:
        for _ in range(8):
            await client.send(FETCH, 11, fetch_request(11, "t", 0))
        await trio.testing.wait_all_tasks_blocked()  # every one answered, the write waits
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert running.app.socket_server.response_queue_size == 8
    assert peak < 4 << 20  # read in the handler: 32 MB
    expected = log.segments[0].log_path.read_bytes()
    for _ in range(8):
        assert (await fetched_partitions(client))[0].records == expected
    await client.aclose()
