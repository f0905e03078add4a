"""Produce v0-v2 and Fetch v0-v3 (message formats v0 and v1) as raw frames over a real socket
to an in-process broker, answered as a Kafka 3.9 broker answers them.

Requests and responses are written and read here byte by byte from Kafka 3.9's specs
(ProduceRequest/Response.json, FetchRequest/Response.json), and message sets are built here
from the format (crc, magic, attributes, [timestamp], key, value), so that neither the broker's
schemas nor its record code check themselves. Compressed wrappers of the answers are opened with
:func:`~trio_broker.protocol.legacy_records.parse_message_set` once their outer layout and CRC
are checked here (that parser has its own tests against Kafka's rules).
"""

from __future__ import annotations

import struct
import time
import zlib
from collections.abc import Sequence
from typing import Any

import pytest
import trio
from kio.schema.errors import ErrorCode as E

from tests.kafka_wire import WireClient
from trio_broker.protocol import compression
from trio_broker.protocol import records as rb
from trio_broker.protocol.legacy_records import parse_message_set
from trio_broker.protocol.record_walk import WalkBudget
from trio_broker.server.handlers import fetch as fetch_handler
from trio_broker.server.handlers import produce as produce_handler
from trio_broker.server.registry import supported_versions

PRODUCE, FETCH = 0, 1
CODECS = [compression.COMPRESSION_NONE, compression.COMPRESSION_GZIP,
          compression.COMPRESSION_SNAPPY, compression.COMPRESSION_LZ4]
TIMEOUT = 15


# ------------------------------------------------------------------ wire, by hand
def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def _bytes(data: bytes | None) -> bytes:
    return struct.pack(">i", -1) if data is None else struct.pack(">i", len(data)) + data


def message(magic: int, attributes: int, timestamp: int, key: bytes | None,
            value: bytes | None) -> bytes:
    """crc, magic, attributes, [timestamp: magic 1], key, value."""
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    body += _bytes(key) + _bytes(value)
    return struct.pack(">I", zlib.crc32(body)) + body


def entry(offset: int, msg: bytes) -> bytes:
    return struct.pack(">qi", offset, len(msg)) + msg


def message_set(magic: int, codec: int, items: Sequence[tuple[bytes | None, bytes]],
                timestamp: int = -1) -> bytes:
    """As old producers write one: offsets from 0 (the broker assigns its own); compressed,
    one wrapper at the last offset whose value is the compressed inner set (inner offsets
    relative for magic 1, absolute for magic 0: both 0..n-1 here)."""
    inner = b"".join(entry(i, message(magic, 0, timestamp, k, v))
                     for i, (k, v) in enumerate(items))
    if not codec:
        return inner
    wrapper = message(magic, codec, timestamp, None, compression.compress(codec, inner))
    return entry(len(items) - 1, wrapper)


class Reader:
    """Big-endian reads of a response body, every byte accounted for."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str) -> Any:
        values = struct.unpack_from(">" + fmt, self.data, self.at)
        self.at += struct.calcsize(">" + fmt)
        return values[0] if len(values) == 1 else values

    def string(self) -> str:
        size = self.take("h")
        text = self.data[self.at:self.at + size].decode()
        self.at += size
        return text

    def blob(self) -> bytes | None:
        size = self.take("i")
        if size < 0:
            return None
        data = self.data[self.at:self.at + size]
        self.at += size
        return data

    def done(self) -> None:
        assert self.at == len(self.data), (self.at, len(self.data))


async def call(client: WireClient, api_key: int, version: int, correlation: int,
               body: bytes) -> Reader:
    """One raw request (header v1) and its response body (header v0 checked)."""
    head = struct.pack(">hhi", api_key, version, correlation) + _string("raw-old")
    frame = head + body
    await client.send_raw(struct.pack(">i", len(frame)) + frame)
    with trio.fail_after(TIMEOUT):
        payload = await client.receive_frame()
    assert payload is not None
    reader = Reader(payload)
    assert reader.take("i") == correlation
    return reader


async def produce(client: WireClient, version: int, topic: str, records: bytes | None,
                  *, acks: int = -1, partition: int = 0) -> tuple[E, int, int | None, int]:
    """``(error, base offset, log append time (v2), throttle (-1 for v0))``."""
    body = (struct.pack(">hi", acks, 5000) + struct.pack(">i", 1) + _string(topic)
            + struct.pack(">ii", 1, partition) + _bytes(records))
    r = await call(client, PRODUCE, version, 100 + version, body)
    assert r.take("i") == 1 and r.string() == topic and r.take("i") == 1
    index, code, base = r.take("ihq")
    assert index == partition
    append_time = r.take("q") if version >= 2 else None
    throttle = r.take("i") if version >= 1 else -1
    r.done()
    return E(code), base, append_time, throttle


async def fetch(client: WireClient, version: int, topic: str, offset: int,
                *, partition_max: int = 1 << 20, max_wait: int = 0,
                ) -> tuple[E, int, bytes]:
    """``(error, high watermark, records)`` of one partition."""
    body = struct.pack(">iii", -1, max_wait, 1)
    if version >= 3:
        body += struct.pack(">i", 1 << 24)
    body += (struct.pack(">i", 1) + _string(topic)
             + struct.pack(">iiqi", 1, 0, offset, partition_max))
    r = await call(client, FETCH, version, 200 + version, body)
    if version >= 1:
        assert r.take("i") == 0  # throttle time
    assert r.take("i") == 1 and r.string() == topic and r.take("i") == 1
    index, code, high_watermark = r.take("ihq")
    assert index == 0
    records = r.blob() or b""
    r.done()
    return E(code), high_watermark, records


def read_messages(records: bytes, magic: int) -> tuple[int, list[tuple[int, int, bytes | None,
                                                                         bytes | None]]]:
    """``(codec, [(offset, timestamp, key, value)])`` of a fetched message set: every outer
    entry has ``magic`` and a good CRC (a partial tail is skipped, as clients skip it)."""
    at, codecs = 0, set()
    messages = []
    while len(records) - at >= 12:
        _, size = struct.unpack_from(">qi", records, at)
        if len(records) - at - 12 < size:
            break
        crc, got_magic, attributes = struct.unpack_from(">Ibb", records, at + 12)
        assert got_magic == magic
        assert crc == zlib.crc32(records[at + 16:at + 12 + size])
        codecs.add(attributes & 7)
        # one outer entry at a time: a fetched set may hold several wrappers
        parsed = parse_message_set(records[at:at + 12 + size], budget=WalkBudget(1 << 26))
        messages += [(m.offset, m.timestamp, m.key, m.value) for m in parsed.messages]
        at += 12 + size
    assert len(codecs) <= 1, codecs
    return codecs.pop() if codecs else 0, messages


def stored_batches(running: Any, topic: str) -> list[tuple[rb.BatchHeader, list[Any]]]:
    log = running.broker.log_manager.get_partition(topic, 0)
    data = log.read(0, 1 << 24).records
    out = []
    for at, size in rb.iter_batches(data):
        batch = data[at:at + size]
        out.append((rb.decode_header(batch), rb.decode_records(batch, 1 << 26)))
    return out


ITEMS = [(b"k0", b"zero"), (None, b"one"), (b"k2", b"two" * 50)]


# --------------------------------------------------------------------------- tests
def test_api_versions_serve_produce_and_fetch_from_v0() -> None:
    assert supported_versions()[PRODUCE][0] == 0 and supported_versions()[FETCH][0] == 0


@pytest.mark.parametrize("codec", CODECS, ids=compression.CODEC_NAMES.get)
async def test_produce_v0_v1_v2_then_fetch_v0_to_v3(broker: Any, codec: int) -> None:
    """Produce v0/v1 with magic 0 sets, v2 with a magic 1 set: each up-converted to one v2 batch
    with the broker's offsets, the client's codec and timestamps (-1 for magic 0); the answer of
    each version has its fields only. Fetch v0/v1 read it all back as magic 0, v2/v3 as magic
    1, with the codec kept and the timestamps of magic 1."""
    topic = f"old-{codec}"
    broker.broker.log_manager.create_topic(topic, 1)
    ts = int(time.time() * 1000) - 5000
    async with await WireClient.connect(broker.port) as client:
        assert await produce(client, 0, topic, message_set(0, codec, ITEMS)) == (
            E.none, 0, None, -1)
        assert await produce(client, 1, topic, message_set(0, codec, ITEMS)) == (
            E.none, 3, None, 0)
        assert await produce(client, 2, topic, message_set(1, codec, ITEMS, ts)) == (
            E.none, 6, -1, 0)
        batches = stored_batches(broker, topic)
        assert [(h.base_offset, h.record_count, h.compression, h.magic, h.producer_id)
                for h, _ in batches] == [(0, 3, codec, 2, -1), (3, 3, codec, 2, -1),
                                         (6, 3, codec, 2, -1)]
        stored = [(r.offset, r.timestamp, r.key, r.value) for _, recs in batches for r in recs]
        expected = [(i, -1 if i < 6 else ts, *ITEMS[i % 3]) for i in range(9)]
        assert stored == expected
        for version in range(4):
            magic = 0 if version < 2 else 1
            # The converted bytes are cut at the stored size (Kafka's LazyDownConversionRecords
            # sizes the answer before converting): the client fetches on from the next offset.
            messages: list[tuple[int, int, bytes | None, bytes | None]] = []
            while len(messages) < 9:
                offset = messages[-1][0] + 1 if messages else 0
                code, high_watermark, records = await fetch(client, version, topic, offset)
                assert (code, high_watermark) == (E.none, 9)
                got_codec, got = read_messages(records, magic)
                assert got and got_codec == codec
                messages += [m for m in got if m[0] >= offset]
            assert [(o, k, v) for o, _, k, v in messages] == [(o, k, v)
                                                              for o, _, k, v in expected]
            if magic:
                assert [t for _, t, _, _ in messages] == [t for _, t, _, _ in expected]
        # From an offset inside a batch: uncompressed batches lose the records before it,
        # compressed ones keep them (the client skips them), as Kafka's RecordsUtil.
        _, _, records = await fetch(client, 3, topic, 7)
        offsets = [o for o, *_ in read_messages(records, 1)[1]]
        assert offsets == ([6, 7, 8] if codec else [7, 8])


async def test_produce_v2_carrying_v2_batches_appends_them(broker: Any) -> None:
    """Kafka decides by the data: a v0-v2 request may carry a v2 batch; two are INVALID_RECORD
    (LogValidator: one batch from magic 2 on, whatever the request version)."""
    broker.broker.log_manager.create_topic("v2data", 1)
    batches = (rb.build_batch([(b"a", b"1", [], 1), (b"b", b"2", [], 2)]))
    async with await WireClient.connect(broker.port) as client:
        assert (await produce(client, 2, "v2data", batches))[:2] == (E.none, 0)
        assert (await produce(client, 0, "v2data", rb.build_batch([(None, b"3", [], 3)])))[:2] \
            == (E.none, 2)
        two = rb.build_batch([(None, b"4", [], 4)]) + rb.build_batch([(None, b"5", [], 5)])
        assert (await produce(client, 1, "v2data", two))[0] is E.invalid_record
    assert [r.value for _, recs in stored_batches(broker, "v2data") for r in recs] == [
        b"1", b"2", b"3"]


async def test_produce_old_versions_refusals(broker: Any) -> None:
    """Per partition, as Kafka's LogValidator: a bad CRC is CORRUPT_MESSAGE, mixed magics and a
    keyless message on a compacted topic INVALID_RECORD, a timestamp outside the window
    INVALID_TIMESTAMP, a message over max.message.bytes MESSAGE_TOO_LARGE; nothing appended.
    An incomplete message alone appends nothing and answers success at offset -1."""
    lm = broker.broker.log_manager
    lm.create_topic("bad", 1, {"message.timestamp.before.max.ms": "60000",
                               "max.message.bytes": "300"})
    lm.create_topic("compacted", 1, {"cleanup.policy": "compact"})
    good = message_set(1, 0, [(b"k", b"v")], int(time.time() * 1000))
    corrupt = bytearray(good)
    corrupt[-1] ^= 1
    mixed = message_set(0, 0, [(b"k", b"v")]) + message_set(1, 0, [(b"k", b"v")], 5)
    async with await WireClient.connect(broker.port) as client:
        assert (await produce(client, 2, "bad", bytes(corrupt)))[0] is E.corrupt_message
        assert (await produce(client, 1, "bad", mixed))[0] is E.invalid_record
        assert (await produce(client, 2, "bad", message_set(1, 0, [(b"k", b"v")], 1)))[0] \
            is E.invalid_timestamp
        assert (await produce(client, 0, "bad", message_set(0, 0, [(b"k", b"v" * 400)])))[0] \
            is E.message_too_large
        assert (await produce(client, 2, "compacted", message_set(1, 1, [(None, b"v")], 5)))[0] \
            is E.invalid_record
        assert lm.get_partition("bad", 0).log_end_offset == 0
        assert lm.get_partition("compacted", 0).log_end_offset == 0
        assert await produce(client, 0, "bad", good[:20]) == (E.none, -1, None, -1)
        assert (await produce(client, 2, "bad", good))[:2] == (E.none, 0)


async def test_topic_compression_and_log_append_time_apply_to_old_producers(
        broker: Any) -> None:
    """compression.type is the codec of the converted batch; LogAppendTime stamps it, and
    Produce v2 answers that time; Fetch v2 shows it with the LogAppendTime bit."""
    lm = broker.broker.log_manager
    lm.create_topic("lat", 1, {"compression.type": "gzip",
                               "message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    async with await WireClient.connect(broker.port) as client:
        code, base, append_time, _ = await produce(client, 2, "lat",
                                                   message_set(1, 0, ITEMS, 5))
        assert (code, base) == (E.none, 0)
        assert append_time is not None and append_time >= before
        [(header, records)] = stored_batches(broker, "lat")
        assert (header.compression, header.log_append_time) == (
            compression.COMPRESSION_GZIP, True)
        _, _, data = await fetch(client, 2, "lat", 0)
        # the wrapper has the LogAppendTime bit and every message the append time
        assert data[17] & 0x08 and data[17] & 7 == compression.COMPRESSION_GZIP
        assert {t for _, t, _, _ in read_messages(data, 1)[1]} == {append_time}


async def test_down_conversion_switches_and_zstd(start_broker: Any) -> None:
    """log.message.downconversion.enable=false: old fetchers get UNSUPPORTED_VERSION (no
    offsets) for every partition, a topic's message.downconversion.enable=true wins; a zstd
    topic is UNSUPPORTED_COMPRESSION_TYPE below Fetch v10; Fetch v4 is not affected."""
    running = await start_broker({"log.message.downconversion.enable": "false"})
    lm = running.broker.log_manager
    lm.create_topic("off", 1)
    lm.create_topic("on", 1, {"message.downconversion.enable": "true"})
    lm.create_topic("z", 1, {"compression.type": "zstd"})
    async with await WireClient.connect(running.port) as client:
        for topic in ("off", "on", "z"):
            assert (await produce(client, 2, topic, message_set(1, 0, ITEMS, 5)))[0] is E.none
        for version in range(4):
            assert await fetch(client, version, "off", 0) == (E.unsupported_version, -1, b"")
            assert await fetch(client, version, "z", 0) == (
                E.unsupported_compression_type, -1, b"")
            code, high_watermark, records = await fetch(client, version, "on", 0)
            assert (code, high_watermark) == (E.none, 3)
            assert len(read_messages(records, 0 if version < 2 else 1)[1]) == 3
    # the stored zstd batch cannot be written as magic 0/1 either
    [(header, _)] = stored_batches(running, "z")
    assert header.compression == compression.COMPRESSION_ZSTD


async def test_topic_key_turns_down_conversion_off(broker: Any) -> None:
    broker.broker.log_manager.create_topic("t", 1, {"message.downconversion.enable": "false"})
    async with await WireClient.connect(broker.port) as client:
        assert await fetch(client, 3, "t", 0) == (E.unsupported_version, -1, b"")


async def test_old_fetch_edges(broker: Any) -> None:
    """An empty partition answers one overflow header (Kafka's LazyDownConversionRecords);
    up to v2 partition_max_bytes is a hard limit: a first batch larger than it is not sent
    whole (v3 sends it); an offset past the end is OFFSET_OUT_OF_RANGE."""
    broker.broker.log_manager.create_topic("e", 1)
    async with await WireClient.connect(broker.port) as client:
        code, _, records = await fetch(client, 0, "e", 0)
        assert code is E.none and len(records) == 12 and read_messages(records, 0)[1] == []
        await produce(client, 2, "e", message_set(1, 0, [(b"k", b"x" * 1000)], 5))
        code, _, records = await fetch(client, 2, "e", 0, partition_max=100)
        assert code is E.none and read_messages(records, 1)[1] == []
        code, _, records = await fetch(client, 3, "e", 0, partition_max=100)
        assert [v for *_, v in read_messages(records, 1)[1]] == [b"x" * 1000]
        assert (await fetch(client, 1, "e", 5))[0] is E.offset_out_of_range


async def test_heavy_conversions_run_in_worker_threads(broker: Any, monkeypatch: Any) -> None:
    """A compressed message set (its inflation grows with the request), or an uncompressed one
    over 8 KiB, is converted in a worker thread; a small uncompressed one on the event loop.
    The same for a fetch converting compressed batches or more than 4 KiB."""
    calls: list[str] = []

    def spy(module: Any, name: str) -> None:
        real = module.in_worker

        async def counted(limiter: Any, fn: Any, *args: Any) -> Any:
            calls.append(f"{name}:{fn.__name__}")
            return await real(limiter, fn, *args)

        monkeypatch.setattr(module, "in_worker", counted)

    spy(produce_handler, "produce")
    spy(fetch_handler, "fetch")
    broker.broker.log_manager.create_topic("h", 1)
    async with await WireClient.connect(broker.port) as client:
        await produce(client, 2, "h", message_set(1, 0, ITEMS, 5))
        await fetch(client, 3, "h", 0)
        assert calls == []
        await produce(client, 2, "h", message_set(1, compression.COMPRESSION_GZIP, ITEMS, 5))
        assert calls == ["produce:_up_converted"]
        await fetch(client, 3, "h", 0)
        assert calls == ["produce:_up_converted", "fetch:_convert_all"]
        # uncompressed but large: the worker too (conversion is Python per message)
        del calls[:]
        big = message_set(1, 0, [(b"k", b"y" * 100)] * 100, 5)
        assert (await produce(client, 1, "h", big))[:2] == (E.none, 6)
        await fetch(client, 2, "h", 6)
        assert calls == ["produce:_up_converted", "fetch:_convert_all"]


async def test_mangled_message_sets_get_a_record_error_never_a_server_error(
        broker: Any) -> None:
    """Valid message sets of every codec with bytes flipped, cut or appended, and random
    blobs: each partition is answered with a record error Kafka uses (or success), never
    UNKNOWN_SERVER_ERROR, and the connection stays open."""
    import random

    broker.broker.log_manager.create_topic("fuzz", 1)
    rng = random.Random(33)
    valid = [message_set(magic, codec, ITEMS, 5) for magic in (0, 1) for codec in CODECS]
    blobs = []
    for _ in range(150):
        data = bytearray(rng.choice(valid))
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(data))
            if rng.random() < 0.7:
                data[at] = rng.randrange(256)
            else:
                del data[at:]
                data += rng.randbytes(rng.randint(0, 30))
        blobs.append(bytes(data))
    blobs += [rng.randbytes(rng.randint(0, 200)) for _ in range(50)]
    allowed = {E.none, E.corrupt_message, E.invalid_record, E.invalid_timestamp,
               E.message_too_large, E.unsupported_compression_type}
    async with await WireClient.connect(broker.port) as client:
        for index, blob in enumerate(blobs):
            code = (await produce(client, index % 3, "fuzz", blob))[0]
            assert code in allowed, (code, blob.hex())
