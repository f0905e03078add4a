"""Sans-IO framing (``FrameDecoder``): Kafka's ``NetworkReceive`` size rules and reassembly."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_broker.protocol.framing import (
    SIZE_PREFIX_BYTES,
    FrameDecoder,
    InvalidFrameSize,
    frame,
)


def drain(decoder: FrameDecoder) -> list[bytes]:
    frames = []
    while (payload := decoder.next_frame()) is not None:
        frames.append(payload)
    return frames


def test_frame_prefixes_payload_with_big_endian_size() -> None:
    assert frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert frame(b"") == b"\x00\x00\x00\x00"
    assert SIZE_PREFIX_BYTES == 4


def test_single_frame_round_trip() -> None:
    decoder = FrameDecoder(1024)
    decoder.feed(frame(b"hello"))
    assert decoder.next_frame() == b"hello"
    assert decoder.next_frame() is None
    assert decoder.buffered == 0


def test_zero_size_frame_is_allowed() -> None:
    # Kafka allows size 0 (SASL uses empty tokens).
    decoder = FrameDecoder(10)
    decoder.feed(frame(b"") + frame(b"x"))
    assert decoder.pending_size() == 0
    assert decoder.next_frame() == b""
    assert decoder.next_frame() == b"x"
    assert decoder.next_frame() is None


@pytest.mark.parametrize("size", [-1, -2**31, -100])
def test_negative_size_raises(size: int) -> None:
    decoder = FrameDecoder(1000)
    decoder.feed(struct.pack(">i", size))
    with pytest.raises(InvalidFrameSize) as info:
        decoder.next_frame()
    assert info.value.size == size
    assert info.value.limit == 1000
    assert str(size) in str(info.value)


def test_size_above_limit_raises_before_payload_arrives() -> None:
    # Refused on the prefix alone: the broker must not buffer 2 GiB to find out.
    decoder = FrameDecoder(100)
    decoder.feed(struct.pack(">i", 101))
    with pytest.raises(InvalidFrameSize) as info:
        decoder.pending_size()
    assert (info.value.size, info.value.limit) == (101, 100)
    with pytest.raises(InvalidFrameSize):
        decoder.next_frame()


def test_size_equal_to_limit_is_allowed() -> None:
    decoder = FrameDecoder(100)
    decoder.feed(frame(b"z" * 100))
    assert decoder.next_frame() == b"z" * 100


def test_max_int_size_with_max_limit() -> None:
    decoder = FrameDecoder(2**31 - 1)
    decoder.feed(struct.pack(">i", 2**31 - 1))
    assert decoder.pending_size() == 2**31 - 1
    assert decoder.next_frame() is None


def test_pending_size_needs_whole_prefix() -> None:
    decoder = FrameDecoder(1000)
    encoded = frame(b"payload")
    for i in range(SIZE_PREFIX_BYTES):
        decoder.feed(encoded[i : i + 1])
        if i < SIZE_PREFIX_BYTES - 1:
            assert decoder.pending_size() is None
    # The size is known before the payload, so the caller can reserve memory for it first.
    assert decoder.pending_size() == 7
    assert decoder.next_frame() is None
    assert decoder.buffered == SIZE_PREFIX_BYTES


def test_byte_by_byte_feed() -> None:
    decoder = FrameDecoder(1000)
    data = frame(b"first") + frame(b"second")
    out: list[bytes] = []
    for i in range(len(data)):
        decoder.feed(data[i : i + 1])
        out += drain(decoder)
    assert out == [b"first", b"second"]
    assert decoder.buffered == 0


def test_many_frames_in_one_feed() -> None:
    payloads = [bytes([i]) * i for i in range(200)]
    decoder = FrameDecoder(1000)
    decoder.feed(b"".join(frame(p) for p in payloads))
    assert drain(decoder) == payloads


def test_partial_tail_is_kept_for_next_feed() -> None:
    decoder = FrameDecoder(1000)
    data = frame(b"one") + frame(b"two")
    decoder.feed(data[:-1])
    assert drain(decoder) == [b"one"]
    assert decoder.buffered == len(frame(b"two")) - 1
    decoder.feed(data[-1:])
    assert drain(decoder) == [b"two"]


def test_complete_frames_before_bad_size_are_delivered() -> None:
    # Kafka closes the channel but still processes receives that were complete.
    decoder = FrameDecoder(10)
    decoder.feed(frame(b"ok") + struct.pack(">i", 11) + b"x" * 11)
    assert decoder.next_frame() == b"ok"
    with pytest.raises(InvalidFrameSize):
        decoder.next_frame()


def test_feed_accepts_memoryview_and_bytearray() -> None:
    decoder = FrameDecoder(100)
    data = frame(b"abcdef")
    decoder.feed(memoryview(data)[:5])
    decoder.feed(bytearray(data[5:]))
    assert decoder.next_frame() == b"abcdef"


def test_returned_frame_is_not_a_view_of_the_buffer() -> None:
    decoder = FrameDecoder(100)
    decoder.feed(frame(b"aaaa") + frame(b"bb")[:3])
    first = decoder.next_frame()
    decoder.feed(frame(b"bb")[3:] + frame(b"cccc"))
    assert drain(decoder) == [b"bb", b"cccc"]
    assert first == b"aaaa"
    assert isinstance(first, bytes)


def test_large_stream_compacts_buffer_and_stays_correct() -> None:
    # More than 64 KiB consumed in one buffer triggers compaction; a partial frame must survive it.
    payloads = [bytes([i % 251]) * 1000 for i in range(150)]
    data = b"".join(frame(p) for p in payloads)
    decoder = FrameDecoder(2000)
    cut = len(data) - 500
    decoder.feed(data[:cut])
    got = drain(decoder)
    assert decoder.buffered < 1004
    decoder.feed(data[cut:])
    got += drain(decoder)
    assert got == payloads
    assert decoder.buffered == 0


@settings(max_examples=200, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=300), max_size=30),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=40),
)
def test_arbitrary_chunking_yields_the_same_frames(payloads: list[bytes], cuts: list[int]) -> None:
    data = b"".join(frame(p) for p in payloads)
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    decoder = FrameDecoder(300)
    out: list[bytes] = []
    for start, end in zip(points, points[1:], strict=False):
        decoder.feed(data[start:end])
        out += drain(decoder)
    assert out == payloads
    assert decoder.buffered == 0


@settings(max_examples=100, deadline=None)
@given(size=st.integers(min_value=-(2**31), max_value=2**31 - 1),
       limit=st.integers(min_value=0, max_value=2**31 - 1))
def test_size_rule_matches_kafka(size: int, limit: int) -> None:
    decoder = FrameDecoder(limit)
    decoder.feed(struct.pack(">i", size))
    if size < 0 or size > limit:
        with pytest.raises(InvalidFrameSize):
            decoder.pending_size()
    else:
        assert decoder.pending_size() == size


# ------------------------------------------------------------------ parts held aside
def test_a_frame_read_in_parts_is_joined_once_and_one_part_is_the_frame() -> None:
    """The rest of a large frame read on its own (the reader asks for exactly what is missing)
    is held as it comes: the frame is its buffered head and the parts, joined when whole; a
    single part that is the whole payload is returned as it is, with no copy."""
    payload = bytes(range(256)) * 40
    decoder = FrameDecoder(1 << 20)
    decoder.feed(frame(payload)[:4 + 100])
    size = decoder.pending_size()
    assert size == len(payload) and decoder.missing(size) == len(payload) - 100
    decoder.feed_part(size, payload[100:3000])
    assert decoder.parted and decoder.buffered == 4 + 3000
    assert decoder.missing(size) == len(payload) - 3000
    assert decoder.take(size) is None
    decoder.feed_part(size, payload[3000:])
    assert decoder.missing(size) == 0
    assert decoder.take(size) == payload
    assert not decoder.parted and decoder.buffered == 0 and decoder.next_frame() is None

    decoder.feed(frame(payload)[:4])
    whole = payload[:]
    decoder.feed_part(len(payload), whole)
    assert decoder.take(len(payload)) is whole


def test_bytes_past_the_frame_are_never_held_as_a_part() -> None:
    decoder = FrameDecoder(100)
    decoder.feed(frame(b"abcdef")[:6])
    with pytest.raises(ValueError):
        decoder.feed_part(6, b"cdefX")  # one byte past the frame's end
    with pytest.raises(ValueError):
        decoder.feed_part(6, b"")
    assert not decoder.parted and decoder.buffered == 4 + 2
    decoder.feed_part(6, b"cdef")
    assert decoder.take(6) == b"abcdef"


def test_bytes_fed_after_parts_follow_them() -> None:
    """The read-ahead task (a blocked write) feeds the buffer while the reader may hold parts:
    the parts go into the buffer first, so the stream keeps its order."""
    decoder = FrameDecoder(100)
    stream = frame(b"first frame") + frame(b"second")
    decoder.feed(stream[:6])
    decoder.feed_part(11, stream[6:10])
    decoder.feed(stream[10:20])
    assert not decoder.parted
    assert drain(decoder) == [b"first frame"]
    decoder.feed(stream[20:])
    assert drain(decoder) == [b"second"]


@settings(max_examples=200, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=300), min_size=1, max_size=20),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=40),
    parted=st.lists(st.booleans(), min_size=1, max_size=40),
)
def test_parts_and_feeds_in_any_mix_yield_the_same_frames(
        payloads: list[bytes], cuts: list[int], parted: list[bool]) -> None:
    """A reader that holds some reads aside as parts (only ever a frame's missing bytes) and
    feeds the others gets the same frames as one that feeds everything."""
    data = b"".join(frame(p) for p in payloads)
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    decoder = FrameDecoder(300)
    out: list[bytes] = []
    for index, (start, end) in enumerate(zip(points, points[1:], strict=False)):
        position = start
        while position < end:
            size = decoder.pending_size()
            missing = 0 if size is None else decoder.missing(size)
            if missing and parted[index % len(parted)]:
                part = data[position:min(end, position + missing)]
                decoder.feed_part(size, part)  # type: ignore[arg-type]
            else:
                part = data[position:end]
                decoder.feed(part)
            position += len(part)
            out += drain(decoder)
    assert out == payloads
    assert decoder.buffered == 0 and not decoder.parted
