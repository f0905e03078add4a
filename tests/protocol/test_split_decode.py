"""A request with a huge array decoded in pieces (protocol/split_decode.py) is exactly what kio
decodes from the whole frame, for every request schema the broker serves (sans-IO).

``MIN_ELEMENTS`` is lowered to 1 so that every array of structs hypothesis generates is split;
the frames are kio's own encoding of the generated bodies, checked by the pre-scan first, as
``decode_request`` does.
"""

from __future__ import annotations

import io
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trio_broker.protocol import split_decode
from trio_broker.protocol.codec import _reader, _writer, request_schema
from trio_broker.protocol.prescan import scan_body
from trio_broker.server.registry import supported_versions

SCHEMAS = sorted({(key, version) for key, (low, high) in supported_versions().items()
                  for version in range(low, high + 1)} - {(0, v) for v in range(20)})


@pytest.fixture(autouse=True)
def split_every_array(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(split_decode, "MIN_ELEMENTS", 1)


def _frame(body: Any) -> bytes:
    buffer = io.BytesIO()
    buffer.write(b"\x00" * 4)  # stands for a header: the body starts at offset 4
    _writer(type(body))(buffer, body)
    return buffer.getvalue()


@pytest.mark.parametrize(("api_key", "version"), SCHEMAS, ids=lambda v: str(v))
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_pieces_make_the_whole(api_key: int, version: int, data: st.DataObject) -> None:
    schema = request_schema(api_key, version)
    body = data.draw(st.from_type(schema))
    frame = scan_body(schema, _frame(body), 4)
    whole, _ = _reader(schema)(frame, 4)
    found: list[Any] = []
    split_decode._locator(schema)(frame, 4, len(frame), found, ())
    pieces = split_decode.decode_in_pieces(schema, frame, 4, _reader(schema))
    if found:  # an array of structs with elements: decoded in pieces, never given up
        assert pieces == whole
    else:
        assert pieces is None


def test_a_large_commit_is_split_and_equal() -> None:
    from bench.event_loop import commit_frame
    frame = commit_frame(1)[4:]
    schema = request_schema(8, 8)
    offset = 10 + int.from_bytes(frame[8:10], "big") + 1
    found: list[Any] = []
    split_decode._locator(schema)(frame, offset, len(frame), found, ())
    assert sorted((len(f.starts), f.path) for f in found) == [
        (1, ("topics",)), (100_000, ("topics", 0, "partitions"))]
    pieces = split_decode.decode_in_pieces(schema, frame, offset, _reader(schema))
    assert pieces == _reader(schema)(frame, offset)[0]
