"""Bounds-checking pre-scan of request bodies, before kio's native reader sees them (sans-IO).

kio's native reader trusts the lengths it reads: a compact (varint) array count allocates that
many elements up front, so a 5-byte count of ~2^32 aborts the process (a Rust allocation failure
that no ``except`` can catch). This module walks the bytes of a frame against the same schema
metadata kio uses (dataclass fields, ``kafka_type``, tuple types for arrays, ``| None``, ``tag``,
``__flexible__``) WITHOUT building objects, and checks every declared length against the bytes
that remain in the frame. Only a frame that passes is handed to kio.

It also applies the rules of Kafka's generated readers that kio does not:

* null (-1, or compact 0) for a non-nullable array, string or bytes field is refused;
* a string longer than 32767 bytes is refused;
* unknown tagged fields are skipped (Kafka keeps them as unknown fields); kio raises on them, so
  the scan reports their byte ranges and :func:`scan_body` returns the frame without them.

Validators are compiled once per schema class, in two tiers. The fast one is Python source
generated per struct (one flat function each; fixed-size runs of fields collapse into one bounds
check, arrays of fixed-size elements are skipped in O(1)); it handles frames without tagged
fields and gives up on anything else. The closures then decide: they name the field path and
what was wrong, and strip unknown tagged fields. Schema fields are classified with kio's own
``classify_field``/``is_optional``, so both walk the schema exactly as kio's reader does.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from typing import Any, Final, assert_never

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

from .codegen import StructCodegen

__all__ = ["InvalidRequest", "compile_schema", "read_uvarint", "scan_body", "skip_tagged_fields",
           "write_uvarint", "MalformedBytes"]


class InvalidRequest(Exception):
    """A frame Kafka would refuse by closing the connection. ``reason`` is a short code."""

    def __init__(self, reason: str, detail: str, api_key: int = -1, api_version: int = -1) -> None:
        self.reason = reason
        self.detail = detail
        self.api_key = api_key
        self.api_version = api_version
        super().__init__(f"{reason}: {detail}")


class _Malformed(Exception):
    """Raised deep in a scan; each level adds its field name or array index on the way out."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what
        self.path: list[str] = []

    def detail(self) -> str:
        out = ""
        for part in reversed(self.path):
            out += part if part.startswith("[") or not out else "." + part
        return f"{out or '<body>'}: {self.what}"


#: What :func:`read_uvarint` raises for bytes that are not a varint (for other walkers).
MalformedBytes = _Malformed


#: An edit of the frame: replace ``frame[start:end]`` with ``data`` (unknown tags stripped,
#: out-of-range durations clamped).
Edit = tuple[int, int, bytes]
#: ``scan(buf, pos, end, edits) -> new pos``; reads nothing at or beyond ``end``.
Scan = Callable[[bytes, int, int, list[Edit]], int]

# Kafka's generated readers refuse longer strings ("string field had invalid length").
MAX_STRING_LENGTH: Final = 0x7FFF

_FIXED_SIZES: Final = {
    "int8": 1, "uint8": 1, "bool": 1, "int16": 2, "uint16": 2, "error_code": 2,
    "int32": 4, "uint32": 4, "timedelta_i32": 4, "int64": 8, "uint64": 8, "float64": 8,
    "timedelta_i64": 8, "datetime_i64": 8, "uuid": 16,
}
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
#: The largest magnitude kio reads as a ``timedelta`` (int64 microseconds); Kafka takes any int64.
TIMEDELTA_I64_LIMIT_MS: Final = (2**63 - 1) // 1000


@dataclasses.dataclass(frozen=True, slots=True)
class Compiled:
    """A compiled validator: its scan, the minimum encoded size, and the exact size if fixed."""

    scan: Scan
    min_size: int
    fixed: int | None = None


# ------------------------------------------------------------------------------ primitives
def read_uvarint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """An unsigned varint of at most 5 bytes, decoded as kio decodes it: ``(value, new pos)``;
    :class:`_Malformed` when the bytes are not one."""
    if pos >= end:
        raise _Malformed("varint: no bytes remain")
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    value = b & 0x7F
    shift = 7
    limit = pos + 5
    pos += 1
    while True:
        if pos >= end:
            raise _Malformed("varint cut short by the end of the frame")
        if pos >= limit:
            raise _Malformed("varint longer than 5 bytes")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def write_uvarint(value: int) -> bytes:
    """``value`` as an unsigned varint (compact lengths and counts)."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _fixed_run(names: tuple[str, ...], sizes: tuple[int, ...]) -> Scan:
    """One bounds check for consecutive fixed-size fields (their values are kio's to judge)."""
    total = sum(sizes)

    def scan(buf: bytes, pos: int, end: int, edits: list[Edit]) -> int:
        new = pos + total
        if new > end:
            for name, size in zip(names, sizes, strict=True):
                if pos + size > end:
                    exc = _Malformed(f"needs {size} bytes, {max(end - pos, 0)} remain")
                    exc.path.append(name)
                    raise exc
                pos += size
        return new

    return scan


def _timedelta_i64(buf: bytes, pos: int, end: int, edits: list[Edit]) -> int:
    """An int64 duration in ms. Kafka accepts any value (OffsetCommit v2-v4 ``retention_time``,
    where ``Long.MAX_VALUE`` means "keep"); kio cannot represent beyond ±292,471 years, so such a
    value is clamped to that bound in the copy kio reads: the same meaning, no refused request."""
    new = pos + 8
    if new > end:
        raise _Malformed(f"needs 8 bytes, {max(end - pos, 0)} remain")
    (value,) = _INT64.unpack_from(buf, pos)
    if not -TIMEDELTA_I64_LIMIT_MS <= value <= TIMEDELTA_I64_LIMIT_MS:
        clamped = TIMEDELTA_I64_LIMIT_MS if value > 0 else -TIMEDELTA_I64_LIMIT_MS
        edits.append((pos, new, _INT64.pack(clamped)))
    return new


def _length_prefixed(kind: str, compact: bool, wide: bool, nullable: bool,
                     limit: int | None) -> Scan:
    """Strings, bytes and records: a length (int16, int32 or compact varint), then the bytes."""
    header = _INT32 if wide else _INT16

    def scan(buf: bytes, pos: int, end: int, edits: list[Edit]) -> int:
        if compact:
            if pos < end and buf[pos] < 0x80:  # one-byte length: most strings
                length = buf[pos] - 1
                pos += 1
            else:
                length, pos = read_uvarint(buf, pos, end)
                length -= 1
        else:
            if pos + header.size > end:
                raise _Malformed(f"{kind} length needs {header.size} bytes, "
                                 f"{max(end - pos, 0)} remain")
            (length,) = header.unpack_from(buf, pos)
            pos += header.size
        if length < 0:
            if length == -1:
                if nullable:
                    return pos
                raise _Malformed(f"null {kind} for a non-nullable field")
            raise _Malformed(f"negative {kind} length {length}")
        if limit is not None and length > limit:
            raise _Malformed(f"{kind} length {length} exceeds Kafka's limit of {limit}")
        if length > end - pos:
            raise _Malformed(f"{kind} length {length} exceeds the {end - pos} bytes remaining")
        return pos + length

    return scan


def _array(element: Compiled, compact: bool, nullable: bool) -> Scan:
    """Legacy (int32) or compact (varint) arrays; the count is checked before any element."""
    min_size = element.min_size
    fixed = element.fixed
    scan_element = element.scan
    assert min_size >= 1, "every element takes at least one byte"

    def scan(buf: bytes, pos: int, end: int, edits: list[Edit]) -> int:
        if compact:
            if pos < end and buf[pos] < 0x80:
                count = buf[pos] - 1
                pos += 1
            else:
                count, pos = read_uvarint(buf, pos, end)
                count -= 1
        else:
            if pos + 4 > end:
                raise _Malformed(f"array length needs 4 bytes, {max(end - pos, 0)} remain")
            (count,) = _INT32.unpack_from(buf, pos)
            pos += 4
        if count < 0:
            if count == -1:
                if nullable:
                    return pos
                raise _Malformed("null array for a non-nullable field")
            raise _Malformed(f"negative array length {count}")
        if count * min_size > end - pos:
            raise _Malformed(
                f"array of {count} elements needs at least {count * min_size} bytes, "
                f"{end - pos} remain")
        if fixed is not None:
            return pos + count * fixed
        index = 0
        try:
            for index in range(count):  # noqa: B007 - read in the except clause
                pos = scan_element(buf, pos, end, edits)
        except _Malformed as exc:
            exc.path.append(f"[{index}]")
            raise
        return pos

    return scan


def _nullable_struct(inner: Compiled) -> Scan:
    """KIP-893 nullable struct: an int8 marker, -1 for null, then the struct.

    kio reads any other marker as "present", Kafka any negative one as null; a marker below -1
    is where they disagree, so it is refused.
    """
    scan_inner = inner.scan

    def scan(buf: bytes, pos: int, end: int, edits: list[Edit]) -> int:
        if pos >= end:
            raise _Malformed("nullable struct marker: no bytes remain")
        marker = buf[pos]
        if marker == 0xFF:
            return pos + 1
        if marker >= 0x80:
            raise _Malformed(f"nullable struct marker {marker - 256} (expected -1 or >= 0)")
        return scan_inner(buf, pos + 1, end, edits)

    return scan


# --------------------------------------------------------------------------- tagged fields
def _splice(buf: bytes, start: int, end: int, edits: list[Edit]) -> bytes:
    """``buf[start:end]`` with ``edits`` (sorted, disjoint, inside the range) applied."""
    parts = []
    pos = start
    for edit_start, edit_end, data in edits:
        parts.append(buf[pos:edit_start])
        parts.append(data)
        pos = edit_end
    parts.append(buf[pos:end])
    return b"".join(parts)


def _tagged_section(known: dict[int, tuple[str, Scan]]) -> Scan:
    """A flexible struct's tagged fields: count, then (tag, size, value) each.

    Each value must lie within the frame; a known tag's value is validated inside its own size
    window and must fill it exactly (kio ignores the size of a known tag and reads the value,
    so a value shorter than its size would make kio misread what follows). Unknown tags are
    skipped, as Kafka does: the section is rewritten without them (an edit), since kio raises.
    """

    def scan(buf: bytes, pos: int, end: int, edits: list[Edit]) -> int:
        if pos < end and buf[pos] == 0:  # no tagged fields: almost always
            return pos + 1
        start = pos
        count, pos = read_uvarint(buf, pos, end)
        if count * 2 > end - pos:  # a tag and a size: one byte each at least
            raise _Malformed(f"{count} tagged fields need at least {count * 2} bytes, "
                             f"{end - pos} remain")
        mark = len(edits)
        fields: list[tuple[int, int, int, bool]] = []
        for _ in range(count):
            tag, pos = read_uvarint(buf, pos, end)
            size, pos = read_uvarint(buf, pos, end)
            if size > end - pos:
                raise _Malformed(f"tagged field {tag} size {size} exceeds the "
                                 f"{end - pos} bytes remaining")
            window = pos + size
            entry = known.get(tag)
            if entry is not None:
                name, scan_value = entry
                try:
                    after = scan_value(buf, pos, window, edits)
                except _Malformed as exc:
                    exc.path.append(name)
                    raise
                if after != window:
                    short = _Malformed(f"tagged field {tag} declares {size} bytes, its value "
                                       f"takes {after - pos}")
                    short.path.append(name)
                    raise short
            fields.append((tag, pos, window, entry is not None))
            pos = window
        if len(edits) > mark or not all(is_known for *_, is_known in fields):
            nested = edits[mark:]
            del edits[mark:]
            kept = [field for field in fields if field[3]]
            parts = [write_uvarint(len(kept))]
            for tag, value_start, value_end, _known in kept:
                inside = [e for e in nested if value_start <= e[0] and e[1] <= value_end]
                value = _splice(buf, value_start, value_end, inside)
                parts += [write_uvarint(tag), write_uvarint(len(value)), value]
            edits.append((start, pos, b"".join(parts)))
        return pos

    return scan


_SKIP_ALL_TAGS: Final = _tagged_section({})


# ------------------------------------------------------------------------------- compiling
_COMPILED: dict[tuple[type, bool], Compiled] = {}
_BODY_SCANS: dict[type, Scan] = {}


def forget_compiled() -> None:
    """Drop every compiled scanner and generated fast check (they are built again when next
    needed): for mutation testing, whose mutants of the compiler and generator must run."""
    _COMPILED.clear()
    _BODY_SCANS.clear()
    _FAST.clear()


def compile_schema(schema: type, nullable: bool = False) -> Compiled:
    """The validator for a kio message class (cached per class)."""
    key = (schema, nullable)
    compiled = _COMPILED.get(key)
    if compiled is None:
        compiled = _COMPILED[key] = _compile_entity(schema, nullable)
    return compiled


def _compile_primitive(kafka_type: str, flexible: bool, optional: bool) -> Compiled:
    if kafka_type == "timedelta_i64":
        # Fixed in size but not in what kio accepts: a step of its own, never in a fixed run.
        return Compiled(_timedelta_i64, 8)
    size = _FIXED_SIZES.get(kafka_type)
    if size is not None:
        # Nullability of a fixed-size primitive (uuid, datetime) is in its value, not its size.
        return Compiled(_fixed_run((kafka_type,), (size,)), size, size)
    if kafka_type == "string":
        limit: int | None = MAX_STRING_LENGTH
        wide = False
    elif kafka_type in ("bytes", "records"):
        limit = None
        wide = True
    else:
        raise NotImplementedError(f"no pre-scan for kafka_type {kafka_type!r}")
    scan = _length_prefixed(kafka_type, flexible, wide, optional, limit)
    return Compiled(scan, 1 if flexible else (4 if wide else 2))


def _compile_field(field: dataclasses.Field[Any], flexible: bool, is_tag: bool) -> Compiled:
    # kio reads every tagged field as non-nullable (its reader and writer special-case tags).
    optional = False if is_tag else is_optional(field)
    field_class = classify_field(field)
    match field_class:
        case PrimitiveField():
            return _compile_primitive(get_schema_field_type(field), flexible, optional)
        case PrimitiveTupleField():
            element = _compile_primitive(get_schema_field_type(field), flexible, False)
        case EntityField(entity):
            return compile_schema(entity, nullable=optional)
        case EntityTupleField(entity):
            element = compile_schema(entity)
        case _:  # pragma: no cover - kio has exactly these four
            assert_never(field_class)
    return Compiled(_array(element, flexible, optional), 1 if flexible else 4)


def _compile_entity(schema: type, nullable: bool) -> Compiled:
    if nullable:
        inner = compile_schema(schema)
        return Compiled(_nullable_struct(inner), 1)
    flexible = bool(schema.__flexible__)  # type: ignore[attr-defined]
    steps: list[tuple[str | None, Scan]] = []
    run_names: list[str] = []
    run_sizes: list[int] = []
    known_tags: dict[int, tuple[str, Scan]] = {}
    min_size = 0

    def close_run() -> None:
        if run_names:
            steps.append((None, _fixed_run(tuple(run_names), tuple(run_sizes))))
            run_names.clear()
            run_sizes.clear()

    for field in dataclasses.fields(schema):
        tag = get_field_tag(field)
        compiled = _compile_field(field, flexible, tag is not None)
        if tag is not None:
            known_tags[int(tag)] = (field.name, compiled.scan)
        elif compiled.fixed is not None:
            run_names.append(field.name)
            run_sizes.append(compiled.fixed)
            min_size += compiled.fixed
        else:
            close_run()
            steps.append((field.name, compiled.scan))
            min_size += compiled.min_size
    if known_tags and not flexible:
        raise ValueError(f"{schema.__name__}: tagged fields on a non-flexible schema")
    if flexible:
        close_run()
        steps.append(("tagged_fields", _tagged_section(known_tags)))
        min_size += 1
    elif not steps:
        # All fields fixed: the struct is a fixed number of bytes (arrays of it skip in O(1)).
        size = sum(run_sizes)
        return Compiled(_fixed_run(tuple(run_names), tuple(run_sizes)), max(size, 1), size or None)
    close_run()
    return Compiled(_entity(tuple(steps)), max(min_size, 1))


def _entity(steps: tuple[tuple[str | None, Scan], ...]) -> Scan:
    def scan(buf: bytes, pos: int, end: int, edits: list[Edit]) -> int:
        name = None
        try:
            for name, step in steps:  # noqa: B007 - read in the except clause
                pos = step(buf, pos, end, edits)
        except _Malformed as exc:
            if name is not None:
                exc.path.append(name)
            raise
        return pos

    return scan


# ------------------------------------------------------------------------------ fast path
class _Slow(Exception):
    """The generated fast check gives up: take the closures, which explain or strip tags."""


def _fast_uvarint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    try:
        return read_uvarint(buf, pos, end)
    except _Malformed:
        raise _Slow from None


class _Generator(StructCodegen):
    """Python source for one flat function per struct, for frames without tagged fields.

    The fast check accepts only what the closures accept (a property the tests check on
    mutated frames): it gives up (:class:`_Slow`) on any malformed length and on any tagged
    field at all, and the closures then produce the precise error or the stripped frame.
    """

    PREFIX = "_s"

    def entity(self, schema: type, nullable: bool = False) -> str:
        name, new = self.reserve(schema, nullable)
        if not new:
            return name
        lines = [f"def {name}(buf, pos, end):"]
        if nullable:
            inner = self.entity(schema)
            lines += [
                "    if pos >= end: raise _Slow",
                "    marker = buf[pos]",
                "    if marker == 0xFF: return pos + 1",
                "    if marker >= 0x80: raise _Slow",
                f"    return {inner}(buf, pos + 1, end)",
            ]
        else:
            flexible = bool(schema.__flexible__)  # type: ignore[attr-defined]
            run = 0
            for field in dataclasses.fields(schema):
                if get_field_tag(field) is not None:
                    continue
                size = self._fixed(field, flexible)
                if size is not None:
                    run += size
                    continue
                if run:
                    lines += [f"    pos += {run}", "    if pos > end: raise _Slow"]
                    run = 0
                lines += self._field(field, flexible, "    ")
            if run:
                lines += [f"    pos += {run}", "    if pos > end: raise _Slow"]
            if flexible:  # any tagged field at all: the closures handle it
                lines += ["    if pos >= end or buf[pos]: raise _Slow", "    pos += 1"]
            lines.append("    return pos")
        self.sources.append("\n".join(lines))
        return name

    @staticmethod
    def _fixed(field: dataclasses.Field[Any], flexible: bool) -> int | None:
        return _compile_field(field, flexible, False).fixed

    def _field(self, field: dataclasses.Field[Any], flexible: bool, ind: str) -> list[str]:
        optional = is_optional(field)
        field_class = classify_field(field)
        match field_class:
            case PrimitiveField() if get_schema_field_type(field) == "timedelta_i64":
                return [
                    f"{ind}if pos + 8 > end: raise _Slow",
                    f"{ind}if not -{TIMEDELTA_I64_LIMIT_MS} <= _INT64.unpack_from(buf, pos)[0]"
                    f" <= {TIMEDELTA_I64_LIMIT_MS}: raise _Slow",
                    f"{ind}pos += 8",
                ]
            case PrimitiveField():
                return self._length_prefixed(get_schema_field_type(field), flexible, optional, ind)
            case EntityField(entity):
                return [f"{ind}pos = {self.entity(entity, optional)}(buf, pos, end)"]
            case PrimitiveTupleField():
                kafka_type = get_schema_field_type(field)
                element = _compile_primitive(kafka_type, flexible, False)
                body = (None if element.fixed is not None else
                        self._length_prefixed(kafka_type, flexible, False, ind + "    "))
                return self._array(element, body, flexible, optional, ind)
            case EntityTupleField(entity):
                compiled = compile_schema(entity)
                body = (None if compiled.fixed is not None else
                        [f"{ind}    pos = {self.entity(entity)}(buf, pos, end)"])
                return self._array(compiled, body, flexible, optional, ind)
            case _:  # pragma: no cover
                assert_never(field_class)

    @staticmethod
    def _count(flexible: bool, wide: bool, ind: str) -> list[str]:
        """Lines leaving a length in ``n`` (-1 for null) and ``pos`` after it."""
        if flexible:
            return [
                f"{ind}if pos >= end: raise _Slow",
                f"{ind}n = buf[pos]",
                f"{ind}if n < 0x80: pos += 1",
                f"{ind}else: n, pos = _fast_uvarint(buf, pos, end)",
                f"{ind}n -= 1",
            ]
        width = 4 if wide else 2
        return [
            f"{ind}if pos + {width} > end: raise _Slow",
            f"{ind}n = {'_INT32' if wide else '_INT16'}.unpack_from(buf, pos)[0]",
            f"{ind}pos += {width}",
        ]

    def _length_prefixed(self, kafka_type: str, flexible: bool, nullable: bool,
                         ind: str) -> list[str]:
        wide = kafka_type != "string"
        lines = self._count(flexible, wide, ind)
        null = "-1 > n" if nullable else "0 > n"
        lines.append(f"{ind}if {null}: raise _Slow")
        if kafka_type == "string":
            lines.append(f"{ind}if n > {MAX_STRING_LENGTH}: raise _Slow")
        if nullable:
            lines.append(f"{ind}if n > 0: pos += n")
        else:
            lines.append(f"{ind}pos += n")
        lines.append(f"{ind}if pos > end: raise _Slow")
        return lines

    def _array(self, element: Compiled, body: list[str] | None, flexible: bool,
               nullable: bool, ind: str) -> list[str]:
        lines = self._count(flexible, True, ind)
        lines.append(f"{ind}if {'-1 > n' if nullable else '0 > n'}: raise _Slow")
        lines.append(f"{ind}if n * {element.min_size} > end - pos: raise _Slow")
        if body is None:
            lines.append(f"{ind}if n > 0: pos += n * {element.fixed}")
        else:
            lines.append(f"{ind}for _ in range(n):")
            lines += body
        return lines


_FAST: dict[type, Callable[[bytes, int, int], int]] = {}


def _fast_check(schema: type) -> Callable[[bytes, int, int], int]:
    check = _FAST.get(schema)
    if check is None:
        namespace: dict[str, Any] = {"_Slow": _Slow, "_fast_uvarint": _fast_uvarint,
                                     "_INT16": _INT16, "_INT32": _INT32, "_INT64": _INT64}
        check = _FAST[schema] = _Generator().build(schema, namespace)
    return check


# ------------------------------------------------------------------------------ entry points
def scan_body(schema: type, frame: bytes, offset: int, api_key: int = -1,
              api_version: int = -1) -> bytes:
    """Check the body of ``frame`` at ``offset`` against ``schema``; the frame kio may read.

    That is ``frame`` itself, or a copy without unknown tagged fields. Raises
    :class:`InvalidRequest` (``bad_body``) naming the field path and what was wrong.
    """
    try:
        _fast_check(schema)(frame, offset, len(frame))
        return frame
    except Exception:  # noqa: S110 - any doubt: the closures decide, and explain
        pass
    return _scan_slow(schema, frame, offset, api_key, api_version)


def _scan_slow(schema: type, frame: bytes, offset: int, api_key: int = -1,
               api_version: int = -1) -> bytes:
    """:func:`scan_body` by the closures alone (precise errors, unknown tags stripped)."""
    scan = _BODY_SCANS.get(schema)
    if scan is None:
        scan = _BODY_SCANS[schema] = compile_schema(schema).scan
    edits: list[Edit] = []
    try:
        scan(frame, offset, len(frame), edits)
    except _Malformed as exc:
        raise InvalidRequest("bad_body", exc.detail(), api_key, api_version) from None
    if edits:
        return _splice(frame, 0, len(frame), edits)
    return frame


def skip_tagged_fields(frame: bytes, offset: int, reason: str = "bad_header", api_key: int = -1,
                       api_version: int = -1) -> int:
    """Validate and skip a tagged-field section none of whose tags is known (request header v2)."""
    try:
        return _SKIP_ALL_TAGS(frame, offset, len(frame), [])
    except _Malformed as exc:
        exc.path.append("tagged_fields")
        raise InvalidRequest(reason, exc.detail(), api_key, api_version) from None
