"""Sans-IO request decoding and response encoding (``trio_broker.protocol.codec``) over kio.

Kafka's rules (``RequestHeader.parse``, ``RequestContext.parseRequest``): a bad header, an unknown
or unsupported API key and a version outside the range close the connection; ApiVersions with an
unsupported version is answered as v0 instead.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsRequestV3
from kio.schema.api_versions.v3.response import ApiVersion as ApiVersionV3
from kio.schema.api_versions.v3.response import ApiVersionsResponse as ApiVersionsResponseV3
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v1.request import MetadataRequest as MetadataRequestV1
from kio.schema.metadata.v1.request import MetadataRequestTopic as MetadataRequestTopicV1
from kio.schema.metadata.v12 import response as metadata_v12
from kio.schema.metadata.v12.request import MetadataRequest as MetadataRequestV12
from kio.schema.metadata.v12.request import MetadataRequestTopic as MetadataRequestTopicV12
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i16, i32, i32Timedelta

from tests.decode_worker import DecodeWorker, live, outcome
from trio_broker.protocol.codec import (
    API_VERSIONS_KEY,
    DecodedRequest,
    InvalidRequest,
    api_name,
    decode_request,
    decode_response,
    encode_body,
    encode_request,
    encode_response,
    is_flexible,
    peek_api,
    request_schema,
    response_schema,
    valid_client_software,
)
from trio_broker.protocol.errors import response_error
from trio_broker.server.registry import supported_versions

METADATA_KEY = 3
PRODUCE_KEY = 0
SUPPORTED = {API_VERSIONS_KEY: (0, 4), METADATA_KEY: (1, 12)}


def payload_of(framed: bytes) -> bytes:
    """Strip and check the 4-byte size prefix."""
    (size,) = struct.unpack_from(">i", framed, 0)
    assert size == len(framed) - 4
    return framed[4:]


def metadata_request(version: int, names: tuple[str, ...] | None) -> Any:
    """A Metadata request of any version, filling version-specific flags with False."""
    module = importlib.import_module(f"kio.schema.metadata.v{version}.request")
    kwargs: dict[str, Any] = {}
    for field in dataclasses.fields(module.MetadataRequest):
        if field.name == "topics":
            kwargs["topics"] = None if names is None else tuple(
                _metadata_topic(module.MetadataRequestTopic, name) for name in names
            )
        elif field.default is dataclasses.MISSING:
            kwargs[field.name] = False
    return module.MetadataRequest(**kwargs)


def _metadata_topic(cls: Any, name: str) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {"name": TopicName(name)}
    if "topic_id" in names:
        kwargs["topic_id"] = None
    return cls(**kwargs)


def api_versions_request(version: int) -> Any:
    module = importlib.import_module(f"kio.schema.api_versions.v{version}.request")
    if version >= 3:
        return module.ApiVersionsRequest(client_software_name="librdkafka",
                                         client_software_version="2.3.0")
    return module.ApiVersionsRequest()


# ---------------------------------------------------------------------------- api_name
@pytest.mark.parametrize(
    ("key", "name"),
    [(0, "Produce"), (1, "Fetch"), (3, "Metadata"), (18, "ApiVersions"), (19, "CreateTopics"),
     (11, "JoinGroup"), (32, "DescribeConfigs"), (22, "InitProducerId")],
)
def test_api_name_is_kafkas_name(key: int, name: str) -> None:
    assert api_name(key) == name


@pytest.mark.parametrize("key", [-1, 9999, 32767])
def test_api_name_of_unknown_key(key: int) -> None:
    assert api_name(key) == f"Unknown({key})"


def test_decoded_request_api_property() -> None:
    request = DecodedRequest(api_key=3, api_version=1, correlation_id=1, client_id=None, body=None)
    assert request.api == "Metadata"


# ------------------------------------------------------------------------ client software
@pytest.mark.parametrize("text", ["librdkafka", "confluent-kafka-python", "2.3.0", "a", "A.b-9"])
def test_valid_client_software(text: str) -> None:
    assert valid_client_software(text)


@pytest.mark.parametrize("text", [None, "", "-lead", "trail-", ".x", "x.", "has space", "ü",
                                  "a_b", "a/b"])
def test_invalid_client_software(text: str | None) -> None:
    assert not valid_client_software(text)


# ------------------------------------------------------------------------ decode: rules
def test_peek_api_reads_key_and_version() -> None:
    assert peek_api(struct.pack(">hh", 18, 3) + b"rest") == (18, 3)


@pytest.mark.parametrize("frame", [b"", b"\x00", b"\x00\x12\x00"])
def test_header_too_short_is_invalid(frame: bytes) -> None:
    with pytest.raises(InvalidRequest) as info:
        decode_request(frame, SUPPORTED)
    assert info.value.reason == "header_too_short"


@pytest.mark.parametrize("key", [-1, 1000, 32767])
def test_unknown_api_key_is_invalid(key: int) -> None:
    frame = struct.pack(">hhih", key, 0, 42, -1)
    with pytest.raises(InvalidRequest) as info:
        decode_request(frame, SUPPORTED)
    assert info.value.reason == "unknown_api_key"
    assert (info.value.api_key, info.value.api_version) == (key, 0)


def test_known_but_unsupported_api_is_invalid() -> None:
    framed = encode_request(METADATA_KEY, 1, 5, "c", metadata_request(1, None))
    payload = bytearray(payload_of(framed))
    struct.pack_into(">h", payload, 0, PRODUCE_KEY)  # Produce: known to Kafka, not served here
    with pytest.raises(InvalidRequest) as info:
        decode_request(bytes(payload), SUPPORTED)
    assert info.value.reason == "unsupported_api"
    assert info.value.api_key == PRODUCE_KEY


@pytest.mark.parametrize("version", [0, 13, -1, 32767])
def test_version_outside_range_is_invalid(version: int) -> None:
    frame = struct.pack(">hhih", METADATA_KEY, version, 42, -1)
    with pytest.raises(InvalidRequest) as info:
        decode_request(frame, SUPPORTED)
    assert info.value.reason == "unsupported_version"
    assert (info.value.api_key, info.value.api_version) == (METADATA_KEY, version)
    assert "Metadata" in info.value.detail


@pytest.mark.parametrize("version", [5, 127, 32767, -1])
def test_api_versions_unsupported_version_is_answered(version: int) -> None:
    # The body is skipped (Kafka treats it as v0), so even garbage after the header is accepted.
    frame = struct.pack(">hhih", API_VERSIONS_KEY, version, 77, 6) + b"kcat-1" + b"\xff\x00junk"
    request = decode_request(frame, SUPPORTED)
    assert request.unsupported_version is True
    assert request.api_key == API_VERSIONS_KEY
    assert request.api_version == version
    assert request.correlation_id == 77
    assert request.client_id == "kcat-1"
    assert request.body is None


def test_api_versions_unsupported_version_with_bad_header_is_invalid() -> None:
    frame = struct.pack(">hhi", API_VERSIONS_KEY, 9, 77) + b"\x00"  # client id length cut short
    with pytest.raises(InvalidRequest) as info:
        decode_request(frame, SUPPORTED)
    assert info.value.reason == "bad_header"


def test_supported_api_versions_is_not_flagged() -> None:
    framed = encode_request(API_VERSIONS_KEY, 3, 9, "me", api_versions_request(3))
    request = decode_request(payload_of(framed), SUPPORTED)
    assert request.unsupported_version is False
    assert request.body == api_versions_request(3)


@pytest.mark.parametrize("cut", [4, 6, 8, 9])
def test_truncated_header_is_bad_header(cut: int) -> None:
    payload = payload_of(encode_request(METADATA_KEY, 1, 5, "client", metadata_request(1, None)))
    with pytest.raises(InvalidRequest) as info:
        decode_request(payload[:cut], SUPPORTED)
    assert info.value.reason == "bad_header"
    assert (info.value.api_key, info.value.api_version) == (METADATA_KEY, 1)


def test_truncated_body_is_bad_body() -> None:
    payload = payload_of(
        encode_request(METADATA_KEY, 1, 5, "client", metadata_request(1, ("a-topic", "other")))
    )
    with pytest.raises(InvalidRequest) as info:
        decode_request(payload[:-3], SUPPORTED)
    assert info.value.reason == "bad_body"
    assert info.value.api_key == METADATA_KEY


def test_missing_body_is_bad_body() -> None:
    payload = payload_of(encode_request(METADATA_KEY, 12, 5, "client", metadata_request(12, None)))
    header_only = payload[: 2 + 2 + 4 + 2 + len("client") + 1]  # v2 header: ..., empty tags
    with pytest.raises(InvalidRequest) as info:
        decode_request(header_only, SUPPORTED)
    assert info.value.reason == "bad_body"


def test_flexible_request_with_v1_header_is_refused() -> None:
    # A flexible version needs header v2 (tagged fields after the client id); a v1 header makes
    # the body misparse. Kafka refuses such a frame rather than guessing.
    body = encode_body(MetadataRequestV12(topics=None, include_topic_authorized_operations=False))
    frame = struct.pack(">hhih", METADATA_KEY, 12, 5, 1) + b"c" + body
    with pytest.raises(InvalidRequest):
        decode_request(frame, SUPPORTED)


# Every (API, version) the broker advertises (the worker decodes with this table), plus
# ApiVersions beyond its range (answered as v0).
BROKER_PAIRS = [(key, version) for key, (low, high) in supported_versions().items()
                for version in range(low, high + 1)] + [(API_VERSIONS_KEY, 9)]


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture],
          phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(key_version=st.sampled_from(BROKER_PAIRS), rest=st.binary(max_size=64))
def test_arbitrary_bytes_never_raise_anything_but_invalid_request(
    decode_worker: list[DecodeWorker], key_version: tuple[int, int], rest: bytes
) -> None:
    # Decoded in a child process (tests/decode_worker.py): were the pre-scan to let an untrusted
    # length through, kio's allocation abort would fail this test, not kill pytest.
    frame = struct.pack(">hh", *key_version) + rest
    kind, reason, _ = outcome(live(decode_worker), frame)
    assert kind in ("ok", "invalid"), (kind, reason)


# ------------------------------------------------------------------------ decode: header
def test_client_id_with_invalid_utf8_is_decoded_leniently() -> None:
    # Kafka decodes the client id with replacement characters and answers the request.
    body = encode_body(metadata_request(12, ("t",)))
    frame = struct.pack(">hhih", METADATA_KEY, 12, 8, 4) + b"ab\xff\xfe" + b"\x00" + body
    request = decode_request(frame, SUPPORTED)
    assert request.client_id is not None
    assert request.client_id.startswith("ab")
    assert "\ufffd" in request.client_id
    assert request.body == metadata_request(12, ("t",))
    assert request.correlation_id == 8


def test_null_and_empty_client_ids() -> None:
    body = encode_body(metadata_request(1, None))
    null = decode_request(struct.pack(">hhih", METADATA_KEY, 1, 1, -1) + body, SUPPORTED)
    assert null.client_id is None
    empty = decode_request(struct.pack(">hhih", METADATA_KEY, 1, 1, 0) + body, SUPPORTED)
    assert empty.client_id == ""


@pytest.mark.parametrize(("length", "detail"), [
    (-2, "negative client_id length -2"),
    (-32768, "negative client_id length -32768"),
    (7, "client_id length 7 exceeds the 3 bytes remaining"),
    (32767, "client_id length 32767 exceeds the 3 bytes remaining"),
])
def test_bad_client_id_length_is_bad_header(length: int, detail: str) -> None:
    frame = struct.pack(">hhih", METADATA_KEY, 1, 1, length) + b"abc"
    with pytest.raises(InvalidRequest) as info:
        decode_request(frame, SUPPORTED)
    assert info.value.reason == "bad_header"
    assert info.value.detail == detail


# ----------------------------------------------------------------------- decode: round trips
@pytest.mark.parametrize("version", range(0, 5))
def test_api_versions_request_round_trip(version: int) -> None:
    body = api_versions_request(version)
    framed = encode_request(API_VERSIONS_KEY, version, 1234, "rdkafka", body)
    request = decode_request(payload_of(framed), SUPPORTED)
    assert request == DecodedRequest(
        api_key=API_VERSIONS_KEY, api_version=version, correlation_id=1234,
        client_id="rdkafka", body=body,
    )


@pytest.mark.parametrize("version", range(1, 13))
@pytest.mark.parametrize("names", [None, (), ("orders", "payments")])
def test_metadata_request_round_trip(version: int, names: tuple[str, ...] | None) -> None:
    body = metadata_request(version, names)
    framed = encode_request(METADATA_KEY, version, -5, None, body)
    request = decode_request(payload_of(framed), SUPPORTED)
    assert request.body == body
    assert request.correlation_id == -5
    assert request.client_id is None
    assert request.api_version == version


def test_request_header_version_follows_flexibility() -> None:
    v1 = payload_of(encode_request(METADATA_KEY, 1, 1, "ab", metadata_request(1, None)))
    v9 = payload_of(encode_request(METADATA_KEY, 9, 1, "ab", metadata_request(9, None)))
    assert not is_flexible(METADATA_KEY, 8)
    assert is_flexible(METADATA_KEY, 9)
    # header v1: key, version, correlation id, int16-length client id, then the body
    assert v1[:12] == struct.pack(">hhih", 3, 1, 1, 2) + b"ab"
    # header v2 adds the empty tagged-field section after the client id
    assert v9[:13] == struct.pack(">hhih", 3, 9, 1, 2) + b"ab" + b"\x00"


def test_schemas_come_from_kio() -> None:
    assert request_schema(METADATA_KEY, 1) is MetadataRequestV1
    assert response_schema(METADATA_KEY, 12) is metadata_v12.MetadataResponse
    assert request_schema(API_VERSIONS_KEY, 3) is ApiVersionsRequestV3


# ---------------------------------------------------------------------- encode_response
def api_versions_response_v3() -> Any:
    return ApiVersionsResponseV3(
        error_code=ErrorCode.none,
        api_keys=(ApiVersionV3(api_key=i16(18), min_version=i16(0), max_version=i16(4)),),
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
    )


def metadata_response_v12(error: ErrorCode = ErrorCode.none,
                          partition_error: ErrorCode = ErrorCode.none) -> Any:
    return metadata_v12.MetadataResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
        brokers=(metadata_v12.MetadataResponseBroker(
            node_id=BrokerId(1), host="localhost", port=i32(9092)),),
        cluster_id="abc",
        controller_id=BrokerId(1),
        topics=(metadata_v12.MetadataResponseTopic(
            error_code=error, name=TopicName("t"), topic_id=None,
            partitions=(metadata_v12.MetadataResponsePartition(
                error_code=partition_error, partition_index=i32(0), leader_id=BrokerId(1)),),
        ),),
    )


def decoded(api_key: int, version: int, correlation_id: int = 99) -> DecodedRequest:
    return DecodedRequest(api_key=api_key, api_version=version, correlation_id=correlation_id,
                          client_id="c", body=None)


def test_api_versions_response_uses_header_v0_even_when_flexible() -> None:
    body = api_versions_response_v3()
    framed = encode_response(decoded(API_VERSIONS_KEY, 3), body)
    assert payload_of(framed) == struct.pack(">i", 99) + encode_body(body)


def test_flexible_response_has_header_v1_tagged_fields() -> None:
    body = metadata_response_v12()
    framed = encode_response(decoded(METADATA_KEY, 12, correlation_id=7), body)
    assert payload_of(framed) == struct.pack(">i", 7) + b"\x00" + encode_body(body)


def test_non_flexible_response_has_header_v0() -> None:
    module = importlib.import_module("kio.schema.metadata.v1.response")
    body = module.MetadataResponse(brokers=(), controller_id=BrokerId(1), topics=())
    framed = encode_response(decoded(METADATA_KEY, 1, correlation_id=-1), body)
    assert payload_of(framed) == struct.pack(">i", -1) + encode_body(body)


def test_unsupported_api_versions_answer_round_trips_as_v0() -> None:
    request = decode_request(struct.pack(">hhih", API_VERSIONS_KEY, 42, 3, -1), SUPPORTED)
    body = ApiVersionsResponseV0(
        error_code=ErrorCode.unsupported_version,
        api_keys=(ApiVersionV0(api_key=i16(18), min_version=i16(0), max_version=i16(4)),),
    )
    framed = encode_response(request, body)
    correlation_id, parsed = decode_response(API_VERSIONS_KEY, 0, payload_of(framed))
    assert correlation_id == 3
    assert parsed == body


@pytest.mark.parametrize(
    ("api_key", "version", "make"),
    [(API_VERSIONS_KEY, 3, api_versions_response_v3), (METADATA_KEY, 12, metadata_response_v12)],
)
def test_response_round_trip(api_key: int, version: int, make: Any) -> None:
    body = make()
    framed = encode_response(decoded(api_key, version, correlation_id=2**31 - 1), body)
    assert decode_response(api_key, version, payload_of(framed)) == (2**31 - 1, body)


def test_request_and_response_on_same_correlation_id() -> None:
    framed = encode_request(METADATA_KEY, 12, 31, "client", metadata_request(12, ("x",)))
    request = decode_request(payload_of(framed), SUPPORTED)
    response = encode_response(request, metadata_response_v12())
    assert decode_response(METADATA_KEY, 12, payload_of(response))[0] == 31


def test_topic_request_names_survive_round_trip() -> None:
    body = MetadataRequestV1(topics=(MetadataRequestTopicV1(name=TopicName("é-ünicode")),))
    request = decode_request(payload_of(encode_request(METADATA_KEY, 1, 1, "c", body)), SUPPORTED)
    assert request.body.topics[0].name == "é-ünicode"
    body12 = MetadataRequestV12(
        topics=(MetadataRequestTopicV12(topic_id=None, name=TopicName("x")),),
        include_topic_authorized_operations=True,
    )
    request = decode_request(payload_of(encode_request(METADATA_KEY, 12, 1, "c", body12)),
                             SUPPORTED)
    assert request.body == body12


# ------------------------------------------------------------------------ response_error
def test_response_error_none() -> None:
    assert response_error(metadata_response_v12()) == "NONE"
    assert response_error(api_versions_response_v3()) == "NONE"


def test_response_error_top_level() -> None:
    body = ApiVersionsResponseV0(error_code=ErrorCode.unsupported_version, api_keys=())
    assert response_error(body) == "UNSUPPORTED_VERSION"


def test_response_error_nested() -> None:
    body = metadata_response_v12(error=ErrorCode.unknown_topic_or_partition)
    assert response_error(body) == "UNKNOWN_TOPIC_OR_PARTITION"
    body = metadata_response_v12(partition_error=ErrorCode.leader_not_available)
    assert response_error(body) == "LEADER_NOT_AVAILABLE"


def test_response_error_prefers_outer_error() -> None:
    body = metadata_response_v12(error=ErrorCode.invalid_topic_exception,
                                 partition_error=ErrorCode.leader_not_available)
    assert response_error(body) == "INVALID_TOPIC_EXCEPTION"


def test_response_error_of_non_dataclass() -> None:
    assert response_error(None) == "NONE"
    assert response_error(b"raw") == "NONE"


def test_response_error_tolerates_null_arrays() -> None:
    """Fetch responses carry nullable nested arrays (aborted_transactions = None)."""
    import datetime

    from kio.schema.errors import ErrorCode
    from kio.schema.fetch.v12 import response as fetch
    from kio.static.primitive import i32, i32Timedelta, i64

    from trio_broker.protocol.errors import response_error

    partition = fetch.PartitionData(
        partition_index=i32(0), error_code=ErrorCode.none, high_watermark=i64(0),
        last_stable_offset=i64(0), log_start_offset=i64(0), aborted_transactions=None,
        preferred_read_replica=i32(-1), records=None)
    body = fetch.FetchResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)), error_code=ErrorCode.none,
        session_id=i32(0), responses=(fetch.FetchableTopicResponse(
            topic="t", partitions=(partition,)),))
    assert response_error(body) == "NONE"


def _has_records_field(schema: type) -> bool:
    """Brute force: any field, at any depth, of kafka_type records."""
    for field in dataclasses.fields(schema):
        if field.metadata.get("kafka_type") == "records":
            return True
        nested = getattr(field.type, "__args__", ())
        if any(dataclasses.is_dataclass(t) and _has_records_field(t) for t in nested):
            return True
    return False


def test_only_responses_with_records_use_the_region_encoder() -> None:
    """encode_response_parts skips the region buffer for responses that cannot hold records;
    which ones can is derived per class, and must agree with a walk of every response the
    broker sends (Fetch holds records; Produce, Metadata and the rest do not)."""
    from trio_broker.protocol.codec import _carries_records, response_schema

    for api_key, (low, high) in supported_versions().items():
        for version in range(low, high + 1):
            schema = response_schema(api_key, version)
            assert _carries_records(schema) == _has_records_field(schema), (api_key, version)
    assert _carries_records(response_schema(1, 12))
    assert not _carries_records(response_schema(0, 9))
