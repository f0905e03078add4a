"""Repeated Metadata topics dropped before kio decodes them (protocol/repeats.py), sans-IO.

The rewrite must decode to exactly the distinct topics of the original request, in order of
first appearance (Kafka reads them into a set), for every version's encoding, and must leave any
frame it cannot walk as it is (the pre-scan then refuses it with its own reason).
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_broker.protocol.codec import decode_request, encode_request, request_schema
from trio_broker.protocol.prescan import InvalidRequest
from trio_broker.protocol.repeats import DEDUPE_FROM_BYTES, dedupe_metadata_topics
from trio_broker.server.registry import supported_versions

SUPPORTED = supported_versions()
VERSIONS = [1, 4, 8, 9, 10, 12]


def _request(version: int, names: list[str], topic_ids: list[uuid.UUID | None]) -> Any:
    schema = request_schema(3, version)
    topic_cls = sys.modules[schema.__module__].MetadataRequestTopic
    fields = {f.name for f in dataclasses.fields(topic_cls)}
    topics = tuple(topic_cls(name=name, **({"topic_id": tid} if "topic_id" in fields else {}))
                   for name, tid in zip(names, topic_ids, strict=True))
    extra = {f.name: False for f in dataclasses.fields(schema) if f.name != "topics"}
    return schema(topics=topics, **extra)


def _body(frame: bytes) -> Any:
    return decode_request(frame[4:], SUPPORTED).body


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=25, deadline=None)
@given(pool=st.lists(st.text(alphabet="abc._-", min_size=1, max_size=6), min_size=1,
                     max_size=5, unique=True),
       picks=st.lists(st.integers(0, 4), min_size=2, max_size=40),
       with_ids=st.booleans())
def test_the_rewrite_decodes_to_the_distinct_topics_in_first_order(
        version: int, pool: list[str], picks: list[int], with_ids: bool) -> None:
    ids = [uuid.UUID(int=i + 1) if with_ids else None for i in range(len(pool))]
    chosen = [pick % len(pool) for pick in picks]
    # padded with repeats of the first name so the frame is over the size the rewrite starts at
    chosen += [chosen[0]] * (DEDUPE_FROM_BYTES // 2)
    names = [pool[i] for i in chosen]
    frame = encode_request(3, version, 1, "test", _request(version, names,
                                                           [ids[i] for i in chosen]))
    original = _body(frame).topics
    rewritten = dedupe_metadata_topics(frame[4:], _body_offset(frame[4:], version), version)
    assert len(rewritten) < len(frame)
    decoded = decode_request(rewritten, SUPPORTED).body.topics
    assert list(decoded) == list(dict.fromkeys(original))


def _body_offset(frame: bytes, version: int) -> int:
    client_length = int.from_bytes(frame[8:10], "big")
    offset = 10 + client_length
    return offset + 1 if version >= 9 else offset


def test_small_frames_and_frames_without_repeats_are_left_alone() -> None:
    small = encode_request(3, 12, 1, "t", _request(12, ["a", "a"], [None, None]))[4:]
    assert dedupe_metadata_topics(small, _body_offset(small, 12), 12) is small
    names = [f"topic-{i}" for i in range(DEDUPE_FROM_BYTES // 8)]
    distinct = encode_request(3, 1, 1, "t", _request(1, names, [None] * len(names)))[4:]
    assert dedupe_metadata_topics(distinct, _body_offset(distinct, 1), 1) is distinct


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=150, deadline=None)
@given(body=st.binary(min_size=0, max_size=300), repeat=st.integers(1, 400))
def test_any_bytes_are_rewritten_or_left_and_never_raise(version: int, body: bytes,
                                                           repeat: int) -> None:
    """Untrusted bytes: the walk never raises, and what it returns is refused or decoded as
    the pre-scan and kio see it (never anything else)."""
    header = encode_request(3, version, 1, "t", _request(version, [], []))[4:]
    offset = _body_offset(header, version)
    frame = header[:offset] + (body * repeat)
    out = dedupe_metadata_topics(frame, offset, version)
    assert isinstance(out, bytes)
    with contextlib.suppress(InvalidRequest):
        decode_request(out, SUPPORTED)
