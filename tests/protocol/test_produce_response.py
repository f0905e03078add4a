"""The directly framed ProduceResponse is byte for byte what kio writes for the same answer."""

from __future__ import annotations

import datetime
import io
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer

from trio_broker.protocol.produce_response import DIRECT_VERSIONS, produce_response_frame
from trio_broker.server.handlers.produce import MAX_VERSION, TOPIC_ID_VERSION, _append_time, _makers

ERRORS = [ErrorCode.none, ErrorCode.unknown_topic_or_partition, ErrorCode.corrupt_message,
          ErrorCode.topic_authorization_failed, ErrorCode.not_leader_or_follower]
I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)


def kio_frame(version: int, correlation_id: int, topic: str, index: int, code: ErrorCode,
              message: str | None, base: int, append_time: int, start: int) -> bytes:
    """The general path's answer: kio's classes (as the handler builds them), kio's writer."""
    response, topic_cls, make_partition = _makers(version)
    body = response(responses=(topic_cls(name=topic, partition_responses=(
        make_partition(index, code, base, _append_time(append_time), start, message),)),),
        throttle_time=datetime.timedelta(0))
    buffer = io.BytesIO()
    entity_writer(type(body))(buffer, body)
    payload = struct.pack(">i", correlation_id) + b"\x00" + buffer.getvalue()
    return struct.pack(">i", len(payload)) + payload


def test_direct_versions_are_the_flexible_ones_that_name_topics() -> None:
    """From v13 (KIP-516) the answer names topics by id: those keep the general path."""
    assert frozenset(range(9, TOPIC_ID_VERSION)) == DIRECT_VERSIONS
    assert MAX_VERSION >= TOPIC_ID_VERSION


@pytest.mark.parametrize("version", sorted(DIRECT_VERSIONS))
@settings(max_examples=200, deadline=None, database=None, derandomize=True)
@given(correlation_id=I32, topic=st.text(min_size=1, max_size=300), index=I32,
       code=st.sampled_from(ERRORS), message=st.none() | st.text(max_size=300),
       base=I64, append_time=st.integers(-1, 2**41), start=I64)
def test_the_frame_is_kios(version: int, correlation_id: int, topic: str, index: int,
                           code: ErrorCode, message: str | None, base: int, append_time: int,
                           start: int) -> None:
    assert produce_response_frame(correlation_id, topic, index, code.value, message, base,
                                  append_time, start) == kio_frame(
        version, correlation_id, topic, index, code, message, base, append_time, start)
