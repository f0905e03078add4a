"""The pre-scan's rewrites of a frame before kio decodes it: the tagged-field section rebuilt
with unsigned varints (lengths of 128 bytes and more take two bytes), and int64 durations
clamped to what kio can hold. Sans-IO; each test kills mutants that survived
``nox -s mutation`` (docs/development.md)."""

from __future__ import annotations

import struct

import pytest

from trio_broker.protocol import prescan

INT64 = struct.Struct(">q")
LIMIT = prescan.TIMEDELTA_I64_LIMIT_MS


@pytest.mark.parametrize(("value", "encoded"), [
    (0, b"\x00"), (1, b"\x01"), (127, b"\x7f"), (128, b"\x80\x01"), (129, b"\x81\x01"),
    (300, b"\xac\x02"), (16_383, b"\xff\x7f"), (16_384, b"\x80\x80\x01"),
    (2**28, b"\x80\x80\x80\x80\x01"),
])
def test_unsigned_varints_are_written_as_kafka_reads_them(value: int, encoded: bytes) -> None:
    written = prescan.write_uvarint(value)
    assert written == encoded
    assert prescan.read_uvarint(written, 0, len(written)) == (value, len(written))


def test_every_length_up_to_three_bytes_round_trips() -> None:
    for value in (*range(0, 20_000), 2_097_151, 2_097_152):
        written = prescan.write_uvarint(value)
        assert prescan.read_uvarint(written, 0, len(written)) == (value, len(written)), value


def _scan(value: int, tail: bytes = b"") -> tuple[int, list[prescan.Edit]]:
    buf = INT64.pack(value) + tail
    edits: list[prescan.Edit] = []
    return prescan._timedelta_i64(buf, 0, len(buf), edits), edits


def test_an_int64_duration_at_the_end_of_the_frame_is_read() -> None:
    """Exactly eight bytes left: the value is there (not "needs 8 bytes")."""
    assert _scan(1_000) == (8, [])
    with pytest.raises(prescan._Malformed, match="needs 8 bytes, 7 remain"):
        prescan._timedelta_i64(INT64.pack(1)[:7], 0, 7, [])
    with pytest.raises(prescan._Malformed, match="needs 8 bytes, 0 remain"):
        prescan._timedelta_i64(b"\x00" * 8, 9, 8, [])


def test_durations_beyond_kio_are_clamped_with_their_sign() -> None:
    assert _scan(LIMIT) == (8, [])
    assert _scan(-LIMIT) == (8, [])
    assert _scan(2**63 - 1) == (8, [(0, 8, INT64.pack(LIMIT))])
    assert _scan(LIMIT + 1) == (8, [(0, 8, INT64.pack(LIMIT))])
    assert _scan(-(2**63)) == (8, [(0, 8, INT64.pack(-LIMIT))])
    assert _scan(-LIMIT - 1, b"tail") == (8, [(0, 8, INT64.pack(-LIMIT))])
