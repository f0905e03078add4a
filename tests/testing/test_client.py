"""The Trio client's reading of responses (network input): framing, and decoding through the
broker's pre-scan. Fuzzed with hypothesis."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_broker.protocol.client_codec import ClientCodec, request_body
from trio_broker.protocol.codec import API_VERSIONS_KEY, DecodedRequest, encode_response
from trio_broker.protocol.error_response import error_response
from trio_broker.server.registry import supported_versions
from trio_broker.testing.client import InvalidResponse, ResponseFrames, decode_checked

CREATE_DELEGATION_TOKEN = 38
SUPPORTED = [(key, version) for key, (low, high) in sorted(supported_versions().items())
             for version in range(low, high + 1)]


def test_every_response_the_broker_can_send_decodes_back() -> None:
    """Each API's error response in each version: framed as the broker frames it, read back by
    the client into the same body."""
    decoded = 0
    for key, version in SUPPORTED:
        body = error_response(key, version, None)
        if body is None or key == CREATE_DELEGATION_TOKEN:
            # CreateDelegationToken's error answer has Kafka's -1 timestamps, which kio's
            # reader refuses; no tool here asks for delegation tokens.
            continue
        framed = encode_response(DecodedRequest(key, version, 7, "c", None), body)
        assert struct.unpack_from(">i", framed)[0] == len(framed) - 4
        assert decode_checked(key, version, framed[4:]) == (7, body), (key, version)
        decoded += 1
    assert decoded > 100


@settings(max_examples=200, deadline=None)
@given(payloads=st.lists(st.binary(max_size=300), max_size=8),
       cuts=st.lists(st.integers(min_value=0, max_value=3000), max_size=12))
def test_frames_come_out_whole_however_the_bytes_arrive(payloads: list[bytes],
                                                        cuts: list[int]) -> None:
    stream = b"".join(struct.pack(">i", len(p)) + p for p in payloads)
    frames = ResponseFrames()
    out: list[bytes] = []
    start = 0
    for cut in [*sorted(c % (len(stream) + 1) for c in cuts), len(stream)]:
        frames.feed(stream[start:max(cut, start)])
        start = max(cut, start)
        while (frame := frames.next_frame()) is not None:
            out.append(frame)
    assert out == payloads


def test_a_negative_size_is_refused() -> None:
    frames = ResponseFrames()
    frames.feed(struct.pack(">i", -5) + b"abc")
    with pytest.raises(InvalidResponse, match="bad response size -5"):
        frames.next_frame()


@settings(max_examples=300, deadline=None)
@given(index=st.integers(min_value=0, max_value=len(SUPPORTED) - 1), data=st.binary(max_size=200))
def test_garbage_responses_are_refused_not_trusted(index: int, data: bytes) -> None:
    """Random bytes as a response body: refused with InvalidResponse (the pre-scan stops an
    oversized length before kio's native reader, which would abort the process on it), or
    decoded; nothing else."""
    key, version = SUPPORTED[index]
    with contextlib.suppress(InvalidResponse):
        decode_checked(key, version, struct.pack(">i", 1) + data)


@settings(max_examples=300, deadline=None)
@given(index=st.integers(min_value=0, max_value=len(SUPPORTED) - 1), payload=st.binary(max_size=60))
def test_the_shared_core_refuses_any_payload_it_cannot_trust(index: int, payload: bytes) -> None:
    """ClientCodec (the core of both the Trio and the blocking client): a payload of any length
    with any correlation id is decoded for the request it answers, or refused with
    InvalidResponse (too short, a correlation id never sent, bytes the pre-scan refuses)."""
    key, version = SUPPORTED[index]
    codec = ClientCodec("c")
    codec.pending[1] = (key, version)  # as if a request of that API had been sent
    with contextlib.suppress(InvalidResponse):
        got, _ = codec.decode(payload)
        assert got == 1 and not codec.pending


def test_request_frames_carry_increasing_correlation_ids() -> None:
    codec = ClientCodec("c")
    body = request_body(API_VERSIONS_KEY, 3, client_software_name="t", client_software_version="1")
    frames = [codec.encode(API_VERSIONS_KEY, 3, body) for _ in range(3)]
    for correlation, frame in frames:
        assert struct.unpack_from(">ihhi", frame) == (len(frame) - 4, API_VERSIONS_KEY, 3,
                                                      correlation)
    assert [c for c, _ in frames] == [1, 2, 3] and sorted(codec.pending) == [1, 2, 3]


def test_an_answer_to_nothing_is_refused() -> None:
    codec = ClientCodec("c")
    with pytest.raises(InvalidResponse, match="correlation id 9 in a response, expected none"):
        codec.decode(struct.pack(">i", 9))
    with pytest.raises(InvalidResponse, match="no correlation id"):
        codec.decode(b"\0")
