"""Byte-exact vectors from real clients, checked against decoding written here by hand.

``tests/data/client_frames`` holds the request frames confluent-kafka (librdkafka), kafka-python,
aiokafka and kcat sent to the broker, and ``tests/data/vectors`` the record batches of their
Produce requests (none/gzip/snappy/lz4/zstd), both written by ``python -m bench.capture_frames``.
The broker's codec and ``records.py`` must agree with an independent reading of Kafka's
documented layouts: the v2 batch header by ``struct``, CRC-32C from its polynomial, records by
their varint layout.
"""

from __future__ import annotations

import gzip
import json
import struct
from pathlib import Path
from typing import Any

import pytest

from bench.fuzzing import load_seed_frames
from trio_broker.protocol import records
from trio_broker.protocol.codec import decode_request
from trio_broker.server.registry import supported_versions

DATA = Path(__file__).resolve().parent.parent / "data"
VECTORS = DATA / "vectors"
VECTOR_INDEX: dict[str, dict[str, Any]] = json.loads(
    (VECTORS / "index.json").read_text(encoding="utf-8"))
SEEDS = load_seed_frames(DATA / "client_frames")
FRAMES = [(client, i, payload) for client, frames in SEEDS.items()
          for i, payload in enumerate(frames)]
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
#: The capture's producers (bench/capture_frames.py): which ones were idempotent.
IDEMPOTENT = {"capture-p0": False, "capture-p1": True, "capture-p2": False, "capture-p3": True,
              "capture-p4": False}


# ----------------------------------------------------------------------- by hand, per spec
def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1  # Castagnoli, reflected
        table.append(crc)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def test_crc32c_known_answer() -> None:
    # RFC 3720 (iSCSI) B.4: 32 bytes of zeros.
    assert crc32c(bytes(32)) == 0x8A9136AA
    assert crc32c(b"123456789") == 0xE3069283


def header_by_hand(batch: bytes) -> dict[str, int]:
    """The v2 record batch header as Kafka's documentation lays it out."""
    fields = {}
    layout = [("base_offset", ">q"), ("batch_length", ">i"), ("partition_leader_epoch", ">i"),
              ("magic", ">b"), ("crc", ">I"), ("attributes", ">h"),
              ("last_offset_delta", ">i"), ("base_timestamp", ">q"), ("max_timestamp", ">q"),
              ("producer_id", ">q"), ("producer_epoch", ">h"), ("base_sequence", ">i"),
              ("record_count", ">i")]
    position = 0
    for name, fmt in layout:
        (fields[name],) = struct.unpack_from(fmt, batch, position)
        position += struct.calcsize(fmt)
    assert position == 61
    return fields


def _varint(data: bytes, position: int) -> tuple[int, int]:
    raw = shift = 0
    while True:
        byte = data[position]
        position += 1
        raw |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), position  # zigzag


def _varbytes(data: bytes, position: int) -> tuple[bytes | None, int]:
    size, position = _varint(data, position)
    if size < 0:
        return None, position
    return data[position:position + size], position + size


def records_by_hand(batch: bytes, fields: dict[str, int]) -> list[tuple[Any, ...]]:
    """(offset delta, key, value, headers) of each record of an uncompressed or gzip batch."""
    data = batch[61:]
    if fields["attributes"] & 7 == CODECS["gzip"]:
        data = gzip.decompress(data)
    found = []
    position = 0
    for _ in range(fields["record_count"]):
        length, position = _varint(data, position)
        end = position + length
        position += 1  # attributes
        _, position = _varint(data, position)  # timestamp delta
        offset_delta, position = _varint(data, position)
        key, position = _varbytes(data, position)
        value, position = _varbytes(data, position)
        count, position = _varint(data, position)
        headers = []
        for _h in range(count):
            name, position = _varbytes(data, position)
            header_value, position = _varbytes(data, position)
            headers.append(((name or b"").decode(), header_value))
        assert position == end
        found.append((offset_delta, key, value, tuple(headers)))
    assert position == len(data)
    return found


# ---------------------------------------------------------------------------------- tests
def test_vectors_cover_every_client_and_codec() -> None:
    kinds = {(v["client"], v["compression"]) for v in VECTOR_INDEX.values()}
    assert {("confluent", c) for c in CODECS} <= kinds
    assert {("kafka_python", "none"), ("kafka_python", "gzip"), ("aiokafka", "none"),
            ("aiokafka", "gzip"), ("kcat", "none")} <= kinds
    produce = b"".join(p for _, _, p in FRAMES if p[:2] == b"\x00\x00")
    for name in VECTOR_INDEX:
        # Cut from a captured Produce request, byte for byte.
        assert (VECTORS / name).read_bytes() in produce


@pytest.mark.parametrize("name", sorted(VECTOR_INDEX))
def test_batch_header_matches_hand_decoding(name: str) -> None:
    meta = VECTOR_INDEX[name]
    batch = (VECTORS / name).read_bytes()
    fields = header_by_hand(batch)
    # What the spec and the client's configuration say the batch must be.
    assert fields["base_offset"] == 0
    assert fields["batch_length"] == len(batch) - 12
    assert fields["magic"] == 2
    assert fields["crc"] == crc32c(batch[21:])
    assert fields["attributes"] & 7 == CODECS[meta["compression"]]
    assert fields["attributes"] & 0x38 == 0  # create time, not transactional, not control
    assert fields["record_count"] == fields["last_offset_delta"] + 1 >= 1
    assert fields["max_timestamp"] >= fields["base_timestamp"] > 1_600_000_000_000
    if meta["client_id"] in IDEMPOTENT:
        idempotent = IDEMPOTENT[meta["client_id"]]
        assert (fields["producer_id"] >= 0) is idempotent
    if fields["producer_id"] >= 0:
        assert fields["producer_epoch"] >= 0 and fields["base_sequence"] >= 0
    else:
        # No producer id: epoch -1; the sequence is -1, except that aiokafka writes 0 there
        # (brokers must accept it: sequences mean nothing without a producer id).
        assert fields["producer_epoch"] == -1
        assert fields["base_sequence"] == (0 if meta["client"] == "aiokafka" else -1)

    # The broker reads the same header and accepts the batch.
    header = records.validate_batch(batch)
    assert records.decode_header(batch) == header
    assert {k: getattr(header, k) for k in fields} == fields
    assert header.compression == CODECS[meta["compression"]]
    assert header.has_producer_id is (fields["producer_id"] >= 0)
    assert header.size == len(batch)
    assert header.next_offset == fields["record_count"]
    assert records.compute_crc(batch) == fields["crc"]
    assert records.split_batches(batch) == [(0, header)]
    assert list(records.iter_batches(batch + batch)) == [(0, len(batch)), (len(batch), len(batch))]


@pytest.mark.parametrize("name", sorted(VECTOR_INDEX))
def test_assigned_offset_keeps_a_valid_batch(name: str) -> None:
    batch = bytearray((VECTORS / name).read_bytes())
    records.assign_offset(batch, 0, 1234, log_append_time=1_700_000_000_000)
    fields = header_by_hand(bytes(batch))
    assert fields["base_offset"] == 1234
    assert fields["max_timestamp"] == 1_700_000_000_000
    assert fields["attributes"] & 0x08  # LogAppendTime
    assert fields["crc"] == crc32c(bytes(batch[21:]))


@pytest.mark.parametrize("name", sorted(n for n, v in VECTOR_INDEX.items()
                                        if v["compression"] in ("none", "gzip")))
def test_records_match_hand_decoding(name: str) -> None:
    batch = (VECTORS / name).read_bytes()
    fields = header_by_hand(batch)
    expected = records_by_hand(batch, fields)
    decoded = records.decode_records(batch)
    assert [(r.offset, r.key, r.value, r.headers) for r in decoded] == expected
    assert all(value is not None and value.startswith(b"value ") for _, _, value, _ in expected)


@pytest.mark.parametrize(("client", "index", "payload"), FRAMES,
                         ids=[f"{c}-{i}" for c, i, _ in FRAMES])
def test_codec_decodes_every_captured_frame(client: str, index: int, payload: bytes) -> None:
    api_key, api_version, correlation, id_length = struct.unpack_from(">hhih", payload, 0)
    decoded = decode_request(payload, supported_versions())
    assert (decoded.api_key, decoded.api_version) == (api_key, api_version)
    assert decoded.correlation_id == correlation
    assert decoded.client_id == payload[10:10 + id_length].decode()
    assert not decoded.unsupported_version
    assert decoded.body is not None
