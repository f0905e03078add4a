"""The pre-scan of request bodies (``trio_broker.protocol.prescan``) and what it protects.

kio's native reader allocates whatever count a compact array declares, so one 5-byte varint
aborts the process (issue 9). The pre-scan checks every length against the bytes left in the
frame before kio reads it, refuses null for non-nullable fields as Kafka does, and skips unknown
tagged fields. Frames that could abort a process are decoded in a child process
(``tests/decode_worker.py``), so that a regression fails a test instead of killing pytest.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import io
import pkgutil
import random
import struct
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import kio.schema
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)
from kio.static.primitive import Records, i8, i32, i64Timedelta

from tests.decode_worker import ROOT, DecodeWorker, live, outcome
from trio_broker.protocol import prescan
from trio_broker.protocol.codec import (
    InvalidRequest,
    api_name,
    decode_request,
    encode_body,
    encode_request,
    request_schema,
)
from trio_broker.protocol.prescan import (
    MAX_STRING_LENGTH,
    TIMEDELTA_I64_LIMIT_MS,
    compile_schema,
    scan_body,
    skip_tagged_fields,
)
from trio_broker.protocol.records import build_batch
from trio_broker.server.registry import supported_versions

SUPPORTED = supported_versions()
# Produce needs record bytes: none, garbage, or a real batch (as in test_random_requests).
st.register_type_strategy(Records, st.one_of(
    st.none(), st.binary(max_size=100),
    st.builds(lambda value: build_batch([(b"k", value, [], 1_700_000_000_000)]),
              st.binary(max_size=50))))
API_VERSIONS = [(key, version) for key, (low, high) in SUPPORTED.items()
                for version in range(low, high + 1)]
IDS = [f"{api_name(key)}-v{version}" for key, version in API_VERSIONS]
HUGE = bytes.fromhex("ffffffff0f")  # varint 4294967295: a compact length of 4294967294


def header(api_key: int, version: int, client_id: bytes = b"c", correlation_id: int = 1) -> bytes:
    """Request header v1, or v2 (an empty tagged-field section) for flexible versions."""
    head = struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id
    return head + (b"\x00" if request_schema(api_key, version).__flexible__ else b"")


def payload(framed: bytes) -> bytes:
    return framed[4:]


def reason_of(holder: list[DecodeWorker], frame: bytes) -> InvalidRequest:
    """How ``decode_request`` refuses a frame, decoded in the worker process.

    Every frame that carries a bad length is decoded there, never in pytest's process: should
    the pre-scan regress, kio's allocation abort fails this test instead of killing pytest.
    """
    kind, reason, detail = outcome(live(holder), frame)
    assert kind == "invalid", (kind, reason)
    assert reason is not None and detail is not None
    return InvalidRequest(reason, detail)


# ------------------------------------------------------------------ the issue's frames
METADATA_V12_HUGE = header(3, 12) + HUGE
PRODUCE_V9_HUGE = header(0, 9) + bytes.fromhex("00" "ffff" "00000000") + HUGE


def test_metadata_v12_huge_compact_array_is_refused(decode_worker: list[DecodeWorker]) -> None:
    error = reason_of(decode_worker, METADATA_V12_HUGE)
    assert error.reason == "bad_body"
    assert error.detail.startswith("topics: array of 4294967294 elements needs at least")


def test_produce_v9_huge_compact_array_is_refused(decode_worker: list[DecodeWorker]) -> None:
    error = reason_of(decode_worker, PRODUCE_V9_HUGE)
    assert error.reason == "bad_body"
    assert error.detail.startswith("topic_data: array of 4294967294 elements")


def test_the_process_survives_the_issue_frames() -> None:
    # In a child process: before the pre-scan these frames aborted the interpreter.
    script = (
        "import sys\n"
        "from trio_broker.protocol.codec import InvalidRequest, decode_request\n"
        "from trio_broker.server.registry import supported_versions\n"
        "for frame in sys.argv[1:]:\n"
        "    try:\n"
        "        decode_request(bytes.fromhex(frame), supported_versions())\n"
        "        print('accepted')\n"
        "    except InvalidRequest as exc:\n"
        "        print(exc.reason)\n"
    )
    frames = [METADATA_V12_HUGE, PRODUCE_V9_HUGE,
              # the same counts nested deeper: a topic whose partition array is huge
              header(0, 9) + bytes.fromhex("00ffff00000000" "02" "026f") + HUGE]
    done = subprocess.run([sys.executable, "-c", script, *(f.hex() for f in frames)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["bad_body"] * len(frames)


# -------------------------------------------------------------- lengths in every form
@pytest.mark.parametrize(("body", "detail"), [
    # legacy int32 count, far beyond the frame (Metadata v1 topics, nullable)
    (struct.pack(">i", 0x7FFFFFFF), "topics: array of 2147483647 elements"),
    # negative counts other than -1
    (struct.pack(">i", -2), "topics: negative array length -2"),
    # one topic whose int16 name length runs past the end
    (struct.pack(">ih", 1, 0x7FFF) + b"abc", "topics[0].name: string length 32767 exceeds"),
    (struct.pack(">ih", 1, -2), "topics[0].name: negative string length -2"),
    (struct.pack(">ih", 2, 1) + b"a\x00", "topics[1].name: string length needs 2 bytes, 1 remain"),
])
def test_legacy_lengths_are_checked(
    decode_worker: list[DecodeWorker], body: bytes, detail: str
) -> None:
    error = reason_of(decode_worker, header(3, 1) + body)
    assert error.reason == "bad_body"
    assert error.detail.startswith(detail), error.detail


@pytest.mark.parametrize(("body", "detail"), [
    (b"\x80\x80\x80\x80\x80\x01", "topics: varint longer than 5 bytes"),
    (b"\x80\x80", "topics: varint cut short by the end of the frame"),
    (b"", "topics: varint: no bytes remain"),
    # one topic: uuid, then a compact name whose length is 2^31
    (b"\x02" + bytes(16) + b"\x81\x80\x80\x80\x08", "topics[0].name: string length 2147483648"),
    # a name longer than Kafka's 32767-byte limit for strings
    (b"\x02" + bytes(16) + b"\x81\x80\x02" + b"a" * 0x8000,
     f"topics[0].name: string length 32768 exceeds Kafka's limit of {MAX_STRING_LENGTH}"),
    # one topic needs 18 bytes at least (uuid, name, tags): a short frame fails at the count
    (b"\x02" + bytes(10), "topics: array of 1 elements needs at least 18 bytes, 10 remain"),
])
def test_compact_lengths_are_checked(
    decode_worker: list[DecodeWorker], body: bytes, detail: str
) -> None:
    error = reason_of(decode_worker, header(3, 12) + body)
    assert error.reason == "bad_body"
    assert error.detail.startswith(detail), error.detail


def _long_string_requests(length: int) -> list[tuple[int, int, Any]]:
    """Complete, well-formed flexible requests that carry one string of ``length`` bytes: a
    topic name (a struct field) and a coordinator key (an element of an array of strings)."""
    return [
        (3, 12, MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name="a" * length),),
                                allow_auto_topic_creation=False,
                                include_topic_authorized_operations=False)),
        (10, 4, FindCoordinatorRequest(key_type=i8(0), coordinator_keys=("g", "k" * length))),
    ]


@pytest.mark.parametrize("index", [0, 1], ids=["Metadata-v12-topic-name",
                                               "FindCoordinator-v4-coordinator-key"])
def test_the_fast_path_refuses_a_string_over_32767_bytes_in_a_complete_frame(index: int) -> None:
    """Issue 37, rule 6: Kafka's readers refuse strings over 32,767 bytes. The frame is whole
    and otherwise valid (the same frame one byte shorter is accepted, by the generated fast
    check alone), so the length limit is the only check that can refuse it: the fast check must
    give up on it, and the pre-scan refuses it naming the string."""
    detail = ["topics[0].name", "coordinator_keys[1]"][index]
    api_key, version, body = _long_string_requests(MAX_STRING_LENGTH)[index]
    schema = request_schema(api_key, version)
    offset = len(header(api_key, version))
    at_limit = payload(encode_request(api_key, version, 1, "c", body))
    # the control: 32,767 bytes pass the fast check, the pre-scan and kio
    assert prescan._fast_check(schema)(at_limit, offset, len(at_limit)) == len(at_limit)
    assert scan_body(schema, at_limit, offset) is at_limit
    assert decode_request(at_limit, SUPPORTED).body == body

    api_key, version, body = _long_string_requests(MAX_STRING_LENGTH + 1)[index]
    frame = payload(encode_request(api_key, version, 1, "c", body))
    assert len(frame) == len(at_limit) + 1  # the same frame, complete, one byte longer
    with pytest.raises(prescan._Slow):
        prescan._fast_check(schema)(frame, offset, len(frame))
    expected = (f"{detail}: string length {MAX_STRING_LENGTH + 1} exceeds Kafka's limit of "
                f"{MAX_STRING_LENGTH}")
    with pytest.raises(InvalidRequest) as refused:
        scan_body(schema, frame, offset, api_key, version)
    assert (refused.value.reason, refused.value.detail) == ("bad_body", expected)
    with pytest.raises(InvalidRequest) as refused:
        decode_request(frame, SUPPORTED)
    assert (refused.value.reason, refused.value.detail) == ("bad_body", expected)


def test_bytes_length_is_checked_against_the_frame(decode_worker: list[DecodeWorker]) -> None:
    # Produce v3: one topic, one partition whose records say 2 GiB
    body = (struct.pack(">hhii", -1, -1, 30000, 1) + struct.pack(">h", 1) + b"t"
            + struct.pack(">ii", 1, 0) + struct.pack(">i", 0x7FFFFFFF) + b"xyz")
    error = reason_of(decode_worker, header(0, 3) + body)
    assert error.detail == ("topic_data[0].partition_data[0].records: records length "
                            "2147483647 exceeds the 3 bytes remaining")


def test_fixed_size_fields_are_present(decode_worker: list[DecodeWorker]) -> None:
    # Heartbeat v0: group id, then a generation id cut to 2 bytes
    error = reason_of(decode_worker, header(12, 0) + struct.pack(">h", 1) + b"g" + b"\x00\x00")
    assert error.detail == "generation_id: needs 4 bytes, 2 remain"


def test_arrays_of_fixed_size_elements_are_skipped_whole(decode_worker: list[DecodeWorker]) -> None:
    # OffsetFetch v1: a topic with 10,000 partition ids is checked with one comparison
    partitions = struct.pack(">i", 10_000) + bytes(4 * 10_000)
    body = struct.pack(">h", 1) + b"g" + struct.pack(">ih", 1, 1) + b"t" + partitions
    request = decode_request(header(9, 1) + body, SUPPORTED)
    assert len(request.body.topics[0].partition_indexes) == 10_000
    error = reason_of(decode_worker, header(9, 1) + body[:-1])
    assert error.detail.startswith("topics[0].partition_indexes: array of 10000 elements needs "
                                   "at least 40000 bytes, 39999 remain")


# --------------------------------------------------------- null for non-nullable fields
def _minimal(kafka_type: str, optional: bool) -> Any:
    match kafka_type:
        case "string":
            return ""
        case "bytes" | "records":
            return b""
        case "bool":
            return False
        case "float64":
            return 0.0
        case "uuid":
            return None
        case "error_code":
            return ErrorCode.none
        case "timedelta_i32" | "timedelta_i64":
            return datetime.timedelta(0)
        case "datetime_i64":
            return None if optional else datetime.datetime.fromtimestamp(0, datetime.UTC)
    return 0


Path = tuple[str, ...]
MARKERS = {"string": "\x7fMARKER\x7f", "bytes": b"\x7fMARKER\x7f", "records": b"\x7fMARKER\x7f"}


def build(schema: type, at: Path = (), target: Path | None = None, value: Any = None) -> Any:
    """A body with every array holding one element, and ``value`` at ``target``."""
    kwargs: dict[str, Any] = {}
    for field in dataclasses.fields(schema):
        if get_field_tag(field) is not None and field.default is not dataclasses.MISSING:
            continue
        path = (*at, field.name)
        if path == target:
            kwargs[field.name] = value
            continue
        field_class = classify_field(field)
        match field_class:
            case EntityField(entity):
                kwargs[field.name] = build(entity, path, target, value)
            case EntityTupleField(entity):
                kwargs[field.name] = (build(entity, (*path, "[0]"), target, value),)
            case PrimitiveTupleField():
                element = (*path, "[0]")
                kwargs[field.name] = (value if element == target else
                                      _minimal(get_schema_field_type(field), False),)
            case _:
                kwargs[field.name] = _minimal(get_schema_field_type(field), is_optional(field))
    return schema(**kwargs)


def slots(schema: type, at: Path = ()) -> Iterator[tuple[Path, str, bool]]:
    """Every array, string and bytes position: ``(path, kind, nullable)``."""
    for field in dataclasses.fields(schema):
        if get_field_tag(field) is not None:
            continue
        path = (*at, field.name)
        field_class = classify_field(field)
        kafka_type = field.metadata.get("kafka_type")
        match field_class:
            case EntityField(entity):
                yield from slots(entity, path)
            case EntityTupleField(entity):
                yield path, "array", is_optional(field)
                yield from slots(entity, (*path, "[0]"))
            case PrimitiveTupleField():
                yield path, "array", is_optional(field)
                if kafka_type in MARKERS:
                    yield (*path, "[0]"), kafka_type, False
            case _ if kafka_type in MARKERS:
                yield path, kafka_type, is_optional(field)


def null_frame(api_key: int, version: int, path: Path, kind: str) -> bytes:
    """A frame whose ``path`` is null: kio writes a null array; strings are patched to null."""
    schema = request_schema(api_key, version)
    if kind == "array":
        body = encode_body(build(schema, target=path, value=None))
    else:
        marker = MARKERS[kind]
        body = encode_body(build(schema, target=path, value=marker))
        raw = marker.encode() if isinstance(marker, str) else marker
        if schema.__flexible__:
            encoded, null = bytes([len(raw) + 1]) + raw, b"\x00"
        elif kind == "string":
            encoded, null = struct.pack(">h", len(raw)) + raw, b"\xff\xff"
        else:
            encoded, null = struct.pack(">i", len(raw)) + raw, b"\xff\xff\xff\xff"
        assert body.count(encoded) == 1
        body = body.replace(encoded, null)
    return header(api_key, version) + body


def dotted(path: Path) -> str:
    return "".join(part if part.startswith("[") or i == 0 else "." + part
                   for i, part in enumerate(path))


NULL_CASES = [(key, version, path, kind, nullable) for key, version in API_VERSIONS
              for path, kind, nullable in slots(request_schema(key, version))]


def test_null_cases_cover_every_kind() -> None:
    kinds = {(kind, nullable, request_schema(key, version).__flexible__)
             for key, version, _, kind, nullable in NULL_CASES}
    for flexible in (False, True):
        for kind in ("array", "string", "bytes"):
            assert (kind, False, flexible) in kinds, (kind, flexible)
        assert ("array", True, flexible) in kinds
        assert ("string", True, flexible) in kinds


@pytest.mark.parametrize(("api_key", "version"), API_VERSIONS, ids=IDS)
def test_null_for_non_nullable_is_refused_and_nullable_accepted(
    decode_worker: list[DecodeWorker], api_key: int, version: int
) -> None:
    cases = [(path, kind, nullable) for key, v, path, kind, nullable in NULL_CASES
             if (key, v) == (api_key, version)]
    for path, kind, nullable in cases:
        frame = null_frame(api_key, version, path, kind)
        if nullable:
            request = decode_request(frame, SUPPORTED)
            value: Any = request.body
            for part in path:
                value = value[0] if part == "[0]" else getattr(value, part)
            assert value is None, path
        else:
            error = reason_of(decode_worker, frame)
            what = "array" if kind == "array" else kind
            assert error.reason == "bad_body"
            assert error.detail == f"{dotted(path)}: null {what} for a non-nullable field", path


# ----------------------------------------------------------------------- tagged fields
def fetch_v12_body(tags: bytes) -> bytes:
    """Fetch v12 with no topics, ending with the given tagged-field section."""
    fixed = struct.pack(">iiiibii", -1, 500, 1, 1024, 0, 0, -1)
    return fixed + b"\x01" + b"\x01" + b"\x01" + tags  # topics, forgotten topics, rack id ""


def test_known_tag_is_read() -> None:
    request = decode_request(header(1, 12) + fetch_v12_body(b"\x01\x00\x03\x03ab"), SUPPORTED)
    assert request.body.cluster_id == "ab"


def test_unknown_tags_are_skipped_as_kafka_does() -> None:
    # kio raises on an unknown tag; the pre-scan hands it the frame without them
    tags = b"\x03" + b"\x05\x02\xaa\xbb" + b"\x00\x03\x03ab" + b"\x7f\x00"
    request = decode_request(header(1, 12) + fetch_v12_body(tags), SUPPORTED)
    assert request.body.cluster_id == "ab"
    request = decode_request(header(1, 12) + fetch_v12_body(b"\x01\x09\x01\x00"), SUPPORTED)
    assert request.body.cluster_id is None


@pytest.mark.parametrize("retention_ms", [2**63 - 1, -(2**63), TIMEDELTA_I64_LIMIT_MS + 1])
def test_any_int64_duration_is_accepted_as_kafka_does(retention_ms: int) -> None:
    # OffsetCommit v2-v4 retention_time: Kafka takes any int64 (Long.MAX_VALUE: keep); kio
    # cannot hold beyond ~292,471 years, so the pre-scan clamps to that bound (same meaning)
    from kio.schema.offset_commit.v4.request import OffsetCommitRequest

    body = encode_body(OffsetCommitRequest(
        group_id="g", generation_id_or_member_epoch=i32(1), member_id="m",
        retention_time=i64Timedelta.parse(datetime.timedelta(0)), topics=()))
    frame = header(8, 4) + body
    at = len(frame) - 4 - 8  # retention_time sits just before the empty topics array's count
    frame = frame[:at] + struct.pack(">q", retention_ms) + frame[at + 8:]
    request = decode_request(frame, SUPPORTED)
    expected = TIMEDELTA_I64_LIMIT_MS if retention_ms > 0 else -TIMEDELTA_I64_LIMIT_MS
    assert request.body.retention_time == datetime.timedelta(milliseconds=expected)
    assert request.body.group_id == "g" and request.body.member_id == "m"


@pytest.mark.parametrize(("tags", "detail"), [
    (HUGE, "tagged_fields: 4294967295 tagged fields need at least 8589934590 bytes, 0 remain"),
    (b"\x01\x05\x7f\x00", "tagged_fields: tagged field 5 size 127 exceeds the 1 bytes "
                          "remaining"),
    (b"\x01\x00\x05\x03ab\x00\x00", "tagged_fields.cluster_id: tagged field 0 declares 5 "
                                    "bytes, its value takes 3"),
    (b"\x01\x00\x02\x03ab", "tagged_fields.cluster_id: string length 2 exceeds the 1 bytes "
                             "remaining"),
    (b"\x01\x00\x01\x00", "tagged_fields.cluster_id: null string for a non-nullable field"),
    (b"\x01\x00", "tagged_fields: 1 tagged fields need at least 2 bytes, 1 remain"),
    (b"\x02\x00\x03\x03ab\x05", "tagged_fields: varint: no bytes remain"),
])
def test_bad_tagged_sections_are_refused(
    decode_worker: list[DecodeWorker], tags: bytes, detail: str
) -> None:
    error = reason_of(decode_worker, header(1, 12) + fetch_v12_body(tags))
    assert error.reason == "bad_body"
    assert error.detail == detail


def test_unknown_tags_inside_known_tagged_structs_are_stripped() -> None:
    # A response schema with tagged structs (Fetch v12 PartitionData): strip at two depths.
    from kio.schema.fetch.v12 import response as fetch

    partition = fetch.PartitionData(
        partition_index=0, error_code=ErrorCode.none, high_watermark=0, last_stable_offset=0,
        log_start_offset=0, aborted_transactions=None, preferred_read_replica=-1, records=None,
        diverging_epoch=fetch.EpochEndOffset(epoch=3, end_offset=77))
    body = fetch.FetchResponse(
        throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, session_id=0,
        responses=(fetch.FetchableTopicResponse(topic="t", partitions=(partition,)),))
    encoded = _write(body)
    # diverging_epoch is tag 0: size, then EpochEndOffset (int32, int64, empty tags = 13 bytes)
    plain = b"\x00\x0d" + struct.pack(">iq", 3, 77) + b"\x00"
    assert encoded.count(plain) == 1
    inner_unknown = b"\x01\x09\x01\xee"  # the struct's own section gains unknown tag 9
    tampered = encoded.replace(plain, b"\x00\x10" + struct.pack(">iq", 3, 77) + inner_unknown)
    # the partition's section also gains unknown tag 7 after the known tag 0
    tampered = tampered.replace(b"\x01\x00\x10", b"\x02\x00\x10", 1)
    at = tampered.index(inner_unknown) + len(inner_unknown)
    tampered = tampered[:at] + b"\x07\x00" + tampered[at:]
    with pytest.raises(KeyError):  # kio alone cannot read it
        entity_reader(fetch.FetchResponse)(tampered, 0)
    cleaned = scan_body(fetch.FetchResponse, tampered, 0)
    assert cleaned == encoded
    assert entity_reader(fetch.FetchResponse)(cleaned, 0)[0] == body


def _write(body: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(body))(buffer, body)
    return buffer.getvalue()


@pytest.mark.parametrize(("marker", "ok"), [(b"\xff", True), (b"\x01", True), (b"\x00", True),
                                            (b"\x80", False), (b"\xfe", False)])
def test_nullable_struct_markers(marker: bytes, ok: bool) -> None:
    # KIP-893: -1 is null; kio and Kafka agree that >= 0 is present, disagree below -1.
    from kio.schema.describe_topic_partitions.v0.request import (
        DescribeTopicPartitionsRequest as Request,
    )

    body = b"\x01" + struct.pack(">i", 5) + marker
    body += (b"" if marker == b"\xff" else b"\x02t" + struct.pack(">i", 3) + b"\x00") + b"\x00"
    if ok:
        assert scan_body(Request, body, 0) == body
        entity_reader(Request)(body, 0)
    else:
        with pytest.raises(InvalidRequest, match="cursor: nullable struct marker"):
            scan_body(Request, body, 0)


def test_every_kio_schema_compiles() -> None:
    count = 0
    for module in pkgutil.walk_packages(kio.schema.__path__, "kio.schema."):
        if module.name.rsplit(".", 1)[-1] not in ("request", "response", "header"):
            continue
        for value in vars(importlib.import_module(module.name)).values():
            if isinstance(value, type) and dataclasses.is_dataclass(value) and hasattr(
                    value, "__flexible__"):
                compiled = compile_schema(value)
                assert compiled.min_size >= 1
                assert callable(prescan._fast_check(value))
                count += 1
    assert count > 1000


# ---------------------------------------------------------------------------- header
def test_header_tagged_fields_are_skipped() -> None:
    body = encode_body(request_schema(18, 3)(client_software_name="a", client_software_version="1"))
    head = struct.pack(">hhih", 18, 3, 9, 1) + b"c" + b"\x02\x00\x01\xaa\x05\x00"
    request = decode_request(head + body, SUPPORTED)
    assert request.body.client_software_name == "a"
    assert request.correlation_id == 9


@pytest.mark.parametrize(("section", "detail"), [
    (b"\x01\x00\x05\xaa", "tagged_fields: tagged field 0 size 5 exceeds"),
    (HUGE, "tagged_fields: 4294967295 tagged fields need"),
])
def test_bad_header_tagged_fields(
    decode_worker: list[DecodeWorker], section: bytes, detail: str
) -> None:
    frame = struct.pack(">hhih", 18, 3, 9, 1) + b"c" + section
    error = reason_of(decode_worker, frame)
    assert error.reason == "bad_header"
    assert error.detail.startswith(detail), error.detail
    with pytest.raises(InvalidRequest):
        skip_tagged_fields(frame, 11)


# ------------------------------------------------------------------------- hypothesis
# No shrinking: a failure names its exact frame already, and each shrinking step that kills the
# worker would pay for a new process.
HYPOTHESIS = settings(deadline=None, derandomize=True, database=None,
                      suppress_health_check=list(HealthCheck),
                      phases=[Phase.explicit, Phase.reuse, Phase.generate])


def bodies(api_key: int, version: int) -> st.SearchStrategy[Any]:
    return st.from_type(request_schema(api_key, version))


def has_tagged_fields(schema: type) -> bool:
    for field in dataclasses.fields(schema):
        if get_field_tag(field) is not None:
            return True
        field_class = classify_field(field)
        if isinstance(field_class, EntityField | EntityTupleField) and has_tagged_fields(
                field_class.type_):
            return True
    return False


INT16S = [-1, -2, 0, 1, 0x7FFF, -0x8000]
INT32S = [-1, -2, 0, 1, 0x7FFF, 0x7FFFFFFF, -0x80000000, 0x10000]
VARINTS = [HUGE, b"\x80\x80\x80\x80\x08", b"\xff\xff\xff\xff\x7f", b"\xff\xff\xff\x7f",
           b"\x00", b"\x01", b"\xff\x7f", b"\x80\x80\x80\x80\x80\x01", b"\x80"]


def mutate(rng: random.Random, frame: bytes) -> bytes:
    """One to three of: bit flips, interesting ints and huge varints over or into, truncation."""
    data = bytearray(frame)
    for _ in range(rng.randint(1, 3)):
        if not data:
            break
        # mostly after api key and version, so that the body decoder is reached
        pos = rng.randrange(4 if len(data) > 4 and rng.random() < 0.9 else 0, len(data))
        op = rng.randrange(7)
        if op == 0:
            data[pos] ^= 1 << rng.randrange(8)
        elif op == 1:
            data[pos:pos + 2] = struct.pack(">h", rng.choice(INT16S))
        elif op == 2:
            data[pos:pos + 4] = struct.pack(">i", rng.choice(INT32S))
        elif op == 3:
            varint = rng.choice(VARINTS)
            data[pos:pos + len(varint)] = varint
        elif op == 4:
            data[pos:pos] = rng.choice(VARINTS)
        elif op == 5:
            del data[pos:]
        else:
            data[pos] = rng.choice((0x00, 0x7F, 0x80, 0xFF))
    return bytes(data)


@pytest.mark.parametrize(("api_key", "version"), API_VERSIONS, ids=IDS)
def test_valid_requests_decode_and_mutations_never_kill_or_crash_the_decoder(
    decode_worker: list[DecodeWorker], api_key: int, version: int
) -> None:
    """Every advertised (API, version), bodies from kio's hypothesis strategies.

    A valid request is accepted and decodes to the same body (no false rejections). Its
    mutations are decoded in the worker process: an answer or ``InvalidRequest``, nothing else,
    and never a dead process. In-process, the generated fast check accepts nothing that the
    closures refuse (neither reaches kio there).
    """
    schema = request_schema(api_key, version)
    offset = len(header(api_key, version, b"hypothesis"))

    @settings(HYPOTHESIS, max_examples=4)
    @given(body=bodies(api_key, version), seed=st.integers(0, 2**32 - 1))
    def check(body: Any, seed: int) -> None:
        frame = payload(encode_request(api_key, version, 3, "hypothesis", body))
        scanned = scan_body(schema, frame, offset)
        # The pre-scan refuses no valid frame; it only clamps int64 durations beyond what kio
        # can represent (kio's strategies make them), which keeps the frame's length.
        assert len(scanned) == len(frame)
        request = decode_request(frame, SUPPORTED)
        first = "ok"
        if scanned == frame:
            # compared encoded: NaN != NaN, and kio reads an all-zero uuid back as None
            assert encode_body(request.body) == encode_body(body)
        else:
            assert abs(request.body.retention_time.total_seconds() * 1000) == pytest.approx(
                TIMEDELTA_I64_LIMIT_MS)
        if not has_tagged_fields(schema):  # the fast check takes these by itself
            assert prescan._fast_check(schema)(frame, offset, len(frame)) <= len(frame)
        rng = random.Random(seed)
        frames = [frame] + [mutate(rng, frame) for _ in range(50)]
        for mutated in frames:
            try:
                prescan._fast_check(schema)(mutated, offset, len(mutated))
            except Exception:
                continue
            assert prescan._scan_slow(schema, mutated, offset) == mutated, mutated.hex()
        outcomes = live(decode_worker).decode(frames)
        assert outcomes[0].split()[0] == first, outcomes[0]
        bad = [(f.hex(), o) for f, o in zip(frames, outcomes, strict=True)
               if not (o == "ok" or o.startswith("invalid "))]
        assert not bad, bad

    check()


@settings(HYPOTHESIS, max_examples=150)
@given(key_version=st.sampled_from(API_VERSIONS),
       tails=st.lists(st.binary(max_size=300), min_size=20, max_size=20))
def test_random_bytes_after_a_header_never_kill_or_crash_the_decoder(
    decode_worker: list[DecodeWorker], key_version: tuple[int, int], tails: list[bytes]
) -> None:
    head = header(*key_version)
    frames = [head + tail for tail in tails] + [head[:4] + tail for tail in tails]
    outcomes = live(decode_worker).decode(frames)
    assert all(o == "ok" or o.startswith("invalid ") for o in outcomes), outcomes


def test_the_worker_reports_a_decoder_death() -> None:
    # The harness itself: a child that dies is a failing test naming the frame, not a dead pytest.
    from tests.decode_worker import WorkerDied

    worker = DecodeWorker()
    try:
        worker._proc.kill()  # stands in for an abort
        worker._proc.wait(timeout=30)
        with pytest.raises(WorkerDied, match="the decoder process died"):
            worker.decode([METADATA_V12_HUGE])
    finally:
        worker.close()

