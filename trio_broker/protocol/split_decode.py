"""A request with a huge array decoded a piece at a time (sans-IO).

kio's reader is native code that holds the GIL: an OffsetCommit of 100,000 partitions is one
call of about 0.3 s, during which no other thread (the event loop included) runs Python. A frame
of :data:`SPLIT_FROM_BYTES` or more is therefore decoded in pieces, in the worker thread that
decodes large frames (``network/connection.py``):

1. its largest array of structs (at any depth, :data:`MIN_ELEMENTS` elements or more) is located
   by a walk of the schema (the frame has passed the pre-scan, so every length is sound);
2. the frame without that array's elements (a "hollow" frame, the array's count set to 0) is
   decoded by kio in one short call;
3. the elements are decoded one by one (a short native call each: between two, the GIL can go to
   the event loop) and put in the hollow request's place for them.

The result is exactly what kio decodes from the whole frame (``tests/protocol/
test_split_decode.py`` checks it for every request schema). Anything unexpected returns None:
the caller then decodes the frame whole.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from typing import Any

from kio.serial import entity_reader
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)

from .prescan import _compile_field, _tagged_section, read_uvarint

#: Frames from this size on are decoded in pieces when they hold a large array.
SPLIT_FROM_BYTES = 64 * 1024
#: An array of fewer elements is decoded with its parent.
MIN_ELEMENTS = 1024
_INT32 = struct.Struct(">i")

Path = tuple[str | int, ...]


@dataclasses.dataclass
class _Found:
    """A large array of structs: where its count and elements are, and what they are."""

    path: Path
    count_at: int
    end: int
    starts: list[int]
    entity: type
    compact: bool


Locate = Callable[[bytes, int, int, list[_Found], Path], int]
_LOCATORS: dict[tuple[type, bool], Locate] = {}
_READERS: dict[type, Callable[[bytes, int], tuple[Any, int]]] = {}


def _reader(entity: type) -> Callable[[bytes, int], tuple[Any, int]]:
    reader = _READERS.get(entity)
    if reader is None:
        reader = _READERS[entity] = entity_reader(entity)
    return reader


def _skip(field: dataclasses.Field[Any], flexible: bool) -> Locate:
    scan = _compile_field(field, flexible, False).scan

    def locate(buf: bytes, pos: int, end: int, found: list[_Found], path: Path) -> int:
        return scan(buf, pos, end, [])

    return locate


def _locator(schema: type, nullable: bool = False) -> Locate:
    key = (schema, nullable)
    locate = _LOCATORS.get(key)
    if locate is None:
        locate = _LOCATORS[key] = (_nullable(_locator(schema)) if nullable
                                   else _entity(schema))
    return locate


def _nullable(inner: Locate) -> Locate:
    def locate(buf: bytes, pos: int, end: int, found: list[_Found], path: Path) -> int:
        return pos + 1 if buf[pos] == 0xFF else inner(buf, pos + 1, end, found, path)

    return locate


def _entity(schema: type) -> Locate:
    flexible = bool(schema.__flexible__)  # type: ignore[attr-defined]
    steps: list[tuple[str, Locate]] = []
    tags: dict[int, tuple[str, Any]] = {}
    for field in dataclasses.fields(schema):
        tag = get_field_tag(field)
        if tag is not None:
            tags[int(tag)] = (field.name, _compile_field(field, flexible, True).scan)
            continue
        match classify_field(field):
            case EntityTupleField(entity):
                steps.append((field.name, _array(entity, flexible)))
            case EntityField(entity):
                steps.append((field.name, _locator(entity, is_optional(field))))
            case _:
                steps.append((field.name, _skip(field, flexible)))
    tagged = _tagged_section(tags) if flexible else None

    def locate(buf: bytes, pos: int, end: int, found: list[_Found], path: Path) -> int:
        for name, step in steps:
            pos = step(buf, pos, end, found, (*path, name))
        if tagged is not None:
            edits: list[Any] = []
            pos = tagged(buf, pos, end, edits)
            if edits:
                raise ValueError("unknown tagged fields")  # stripped already by the pre-scan
        return pos

    return locate


def _array(entity: type, compact: bool) -> Locate:
    element = _locator(entity)

    def locate(buf: bytes, pos: int, end: int, found: list[_Found], path: Path) -> int:
        count_at = pos
        if compact:
            count, pos = read_uvarint(buf, pos, end)
            count -= 1
        else:
            (count,) = _INT32.unpack_from(buf, pos)
            pos += 4
        if count <= 0:
            return pos
        starts: list[int] | None = [] if count >= MIN_ELEMENTS else None
        for index in range(count):
            if starts is not None:
                starts.append(pos)
            pos = element(buf, pos, end, found, (*path, index))
        if starts is not None:
            found.append(_Found(path, count_at, pos, starts, entity, compact))
        return pos

    return locate


def _replace(value: Any, path: Path, new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(head, int):
        items = list(value)
        items[head] = _replace(items[head], rest, new)
        return tuple(items)
    return dataclasses.replace(value, **{head: _replace(getattr(value, head), rest, new)})


def decode_in_pieces(schema: type, frame: bytes, offset: int,
                     read_whole: Callable[[bytes, int], tuple[Any, int]]) -> Any | None:
    """The body of ``frame`` (checked by the pre-scan, starting at ``offset``) decoded in
    pieces, or None when it has no array large enough (or anything is unexpected): the caller
    then reads it whole with ``read_whole`` (kio's reader of ``schema``)."""
    found: list[_Found] = []
    try:
        _locator(schema)(frame, offset, len(frame), found, ())
    except Exception:  # noqa: BLE001 - never the place to refuse a frame: decode it whole
        return None
    if not found:
        return None
    largest = max(found, key=lambda f: len(f.starts))
    empty = b"\x01" if largest.compact else b"\x00\x00\x00\x00"
    hollow = frame[:largest.count_at] + empty + frame[largest.end:]
    body, _ = read_whole(hollow, offset)
    reader = _reader(largest.entity)
    elements = []
    ends = [*largest.starts[1:], largest.end]
    for start, expected in zip(largest.starts, ends, strict=True):
        element, size = reader(frame, start)  # kio returns the bytes it read
        if start + size != expected:
            return None
        elements.append(element)
    try:
        return _replace(body, largest.path, tuple(elements))
    except (AttributeError, IndexError, TypeError):
        return None
