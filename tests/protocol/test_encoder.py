"""The precompiled response encoder writes exactly the bytes kio's entity writer writes."""

from __future__ import annotations

import datetime
import io
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
from kio.serial import entity_writer
from kio.static.primitive import Records, i32, i32Timedelta, i64

from trio_broker.protocol.codec import (
    DecodedRequest,
    api_name,
    decode_response,
    encode_response,
    frame_response,
    response_schema,
)
from trio_broker.protocol.encoder import encode, uvarint
from trio_broker.server.registry import supported_versions

SUPPORTED = supported_versions()
st.register_type_strategy(Records, st.one_of(st.none(), st.binary(max_size=100)))
API_VERSIONS = [(key, version) for key, (low, high) in SUPPORTED.items()
                for version in range(low, high + 1)]
IDS = [f"{api_name(key)}-v{version}" for key, version in API_VERSIONS]


def kio_bytes(body: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(body))(buffer, body)
    return buffer.getvalue()


@pytest.mark.parametrize(("api_key", "version"), API_VERSIONS, ids=IDS)
def test_every_response_encodes_as_kio_does(api_key: int, version: int) -> None:
    """Every response the broker can send, bodies from kio's hypothesis strategies (tagged
    fields with and without their defaults, nulls, empty and non-empty arrays)."""
    schema = response_schema(api_key, version)

    @settings(max_examples=25, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(body=st.from_type(schema), correlation_id=st.integers(-2**31, 2**31 - 1))
    def check(body: Any, correlation_id: int) -> None:
        expected = kio_bytes(body)
        assert encode(body) == expected
        request = DecodedRequest(api_key, version, correlation_id, "c", None)
        framed = encode_response(request, body)
        assert framed == frame_response(request, expected, bool(schema.__flexible__))

    check()


def test_produce_response_bytes_and_round_trip() -> None:
    """The hot path's response, pinned: 53 bytes framed, and kio reads it back."""
    from kio.schema.produce.v9 import response as produce

    partition = produce.PartitionProduceResponse(
        index=i32(0), error_code=ErrorCode.none, base_offset=i64(5), log_append_time=None,
        log_start_offset=i64(0), record_errors=(), error_message=None)
    body = produce.ProduceResponse(
        responses=(produce.TopicProduceResponse(name=TopicName("t"), partition_responses=(partition,)),),
        throttle_time=i32Timedelta.parse(datetime.timedelta(milliseconds=7)))
    framed = encode_response(DecodedRequest(0, 9, 42, "c", None), body)
    assert framed == frame_response(DecodedRequest(0, 9, 42, "c", None), kio_bytes(body), True)
    assert int.from_bytes(framed[:4], "big") == len(framed) - 4
    assert decode_response(0, 9, framed[4:]) == (42, body)


def test_a_none_where_kio_refuses_it_is_refused() -> None:
    from kio.schema.produce.v9 import response as produce

    topic = produce.TopicProduceResponse(name=None, partition_responses=())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        kio_bytes(topic)
    with pytest.raises(TypeError):
        encode(topic)


@pytest.mark.parametrize("value", [0, 1, 0x7F, 0x80, 0x3FFF, 0x4000, 2**31 - 1, 2**35])
def test_uvarint(value: int) -> None:
    from kio.serial.writers import write_unsigned_varint

    buffer = io.BytesIO()
    write_unsigned_varint(buffer, value)  # type: ignore[arg-type]
    assert uvarint(value) == buffer.getvalue()
