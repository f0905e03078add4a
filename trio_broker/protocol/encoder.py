"""Precompiled response encoders, byte-identical to kio's entity writer (sans-IO).

kio's ``entity_writer`` walks a dict of per-field writer closures for every value, and every
primitive is one ``struct.pack`` plus one ``BytesIO.write``: ~9 µs for a one-partition
ProduceResponse that a hand-written encoder gives in under 1 µs. This module generates, once
per message class, Python source for one flat function per struct from the same schema
metadata kio uses (``classify_field``, ``get_schema_field_type``, ``is_optional``,
``get_field_tag``, as :mod:`~trio_broker.protocol.prescan` does for its fast checker): runs of
consecutive fixed-size fields become one precompiled ``struct.Struct.pack``, everything is
appended to one ``bytearray``.

The rules are kio's (``kio/serial/_serialize.py`` and ``writers.py``): compact or legacy
lengths by the class's ``__flexible__``; ``None`` arrays, strings and bytes as null lengths;
a nullable struct behind an int8 marker (-1 null, 1 present); a null uuid as 16 zero bytes;
durations and timestamps as rounded milliseconds; tagged fields (always written as
non-nullable) in tag order, skipped when equal to the field's default (or, without one, to
kio's implicit default). ``tests/protocol/test_encoder.py`` compares both writers on kio's
hypothesis strategies for every response the broker can send.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from typing import Any, Final

from kio.serial._implicit_defaults import get_tagged_field_default
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
from .regions import FileRegion

__all__ = ["RegionBuffer", "compile_encoder", "encode", "uvarint"]

#: struct format and value expression (``{}`` is the value) of each fixed-size kafka type.
_FIXED: Final[dict[str, tuple[str, str]]] = {
    "int8": ("b", "{}"), "int16": ("h", "{}"), "int32": ("i", "{}"), "int64": ("q", "{}"),
    "uint8": ("B", "{}"), "uint16": ("H", "{}"), "uint32": ("I", "{}"), "uint64": ("Q", "{}"),
    "float64": ("d", "{}"), "bool": ("?", "{}"), "error_code": ("h", "{}.value"),
    "timedelta_i32": ("i", "round({}.total_seconds() * 1000)"),
    "timedelta_i64": ("q", "round({}.total_seconds() * 1000)"),
    "datetime_i64": ("q", "round({}.timestamp() * 1000)"),
    "uuid": ("16s", "(_UUID0 if {0} is None else {0}.bytes)"),
}
_NULLABLE_DATETIME: Final = "(-1 if {0} is None else round({0}.timestamp() * 1000))"
_UUID0: Final = bytes(16)
_SMALL: Final = tuple(bytes((n,)) for n in range(0x80))


def uvarint(value: int) -> bytes:
    """An unsigned varint, as kio writes it (7 bits at a time, least significant first)."""
    if 0 <= value < 0x80:
        return _SMALL[value]
    out = bytearray()
    chunk = value & 0x7F
    value >>= 7
    while value:
        out.append(0x80 | chunk)
        chunk = value & 0x7F
        value >>= 7
    out.append(chunk)
    return bytes(out)


Encoder = Callable[[bytearray, Any], None]


class _Generator(StructCodegen):
    """Python source for one flat writer function per struct (``def _wN(buf, v)``)."""

    PREFIX = "_w"

    def __init__(self) -> None:
        super().__init__()
        self.namespace: dict[str, Any] = {
            "_UUID0": _UUID0, "_uv": uvarint, "_MISSING": dataclasses.MISSING,
            "_records": _append_records,
        }
        self._structs: dict[str, str] = {}
        self._temp = 0

    # -------------------------------------------------------------- helpers
    def _struct(self, fmt: str) -> str:
        name = self._structs.get(fmt)
        if name is None:
            name = self._structs[fmt] = f"_S{len(self._structs)}"
            self.namespace[name] = struct.Struct(">" + fmt)
        return name

    def _const(self, value: Any) -> str:
        name = f"_C{len(self.namespace)}"
        self.namespace[name] = value
        return name

    def _var(self) -> str:
        self._temp += 1
        return f"x{self._temp}"

    # -------------------------------------------------------------- structs
    def entity(self, schema: type, nullable: bool = False) -> str:
        name, new = self.reserve(schema, nullable)
        if not new:
            return name
        lines = [f"def {name}(buf, v):"]
        if nullable:
            inner = self.entity(schema)
            lines += ["    if v is None:", "        buf += b'\\xff'", "        return",
                      "    buf += b'\\x01'", f"    {inner}(buf, v)"]
            self.sources.append("\n".join(lines))
            return name
        flexible = bool(schema.__flexible__)  # type: ignore[attr-defined]
        run_formats: list[str] = []
        run_values: list[str] = []

        def close_run() -> None:
            if run_formats:
                packer = self._struct("".join(run_formats))
                lines.append(f"    buf += {packer}.pack({', '.join(run_values)})")
                run_formats.clear()
                run_values.clear()

        tagged: list[tuple[int, dataclasses.Field[Any]]] = []
        for field in dataclasses.fields(schema):
            tag = get_field_tag(field)
            if tag is not None:
                tagged.append((tag, field))
                continue
            fixed = self._fixed(field)
            if fixed is not None:
                run_formats.append(fixed[0])
                run_values.append(fixed[1].format(f"v.{field.name}"))
                continue
            close_run()
            value = self._var()
            lines.append(f"    {value} = v.{field.name}")
            lines += self._field(field, value, "buf", "    ", is_optional(field), flexible)
        close_run()
        if tagged and not flexible:
            raise ValueError("Found tagged fields on a non-flexible model")
        if flexible:
            if not tagged:
                lines.append("    buf += b'\\x00'")
            else:
                lines += self._tagged(sorted(tagged, key=lambda item: item[0]), flexible)
        if len(lines) == 1:
            lines.append("    pass")
        self.sources.append("\n".join(lines))
        return name

    def _tagged(self, tagged: list[tuple[int, dataclasses.Field[Any]]],
                flexible: bool) -> list[str]:
        lines = ["    tags = bytearray()", "    count = 0"]
        for tag, field in tagged:
            value = self._var()
            default = self._const(field.default)
            implicit = self._const(get_tagged_field_default(field))
            lines += [
                f"    {value} = v.{field.name}",
                f"    if not ({value} == {default} or ({default} is _MISSING"
                f" and {value} == {implicit})):",
                "        t = bytearray()",
            ]
            # kio writes every tagged field as non-nullable.
            fixed = self._fixed(field, tag=True)
            if fixed is not None:
                packer = self._struct(fixed[0])
                lines.append(f"        t += {packer}.pack({fixed[1].format(value)})")
            else:
                lines += self._field(field, value, "t", "        ", False, flexible)
            lines += [f"        tags += {uvarint(tag)!r}", "        tags += _uv(len(t))",
                      "        tags += t", "        count += 1"]
        lines += ["    buf += _uv(count)", "    buf += tags"]
        return lines

    @staticmethod
    def _fixed(field: dataclasses.Field[Any], tag: bool = False) -> tuple[str, str] | None:
        """The struct format and value expression of a fixed-size primitive field."""
        if not isinstance(classify_field(field), PrimitiveField):
            return None
        kafka_type = get_schema_field_type(field)
        if kafka_type == "datetime_i64" and not tag and is_optional(field):
            return "q", _NULLABLE_DATETIME
        return _FIXED.get(kafka_type)

    def _field(self, field: dataclasses.Field[Any], value: str, buf: str, ind: str,
               optional: bool, flexible: bool) -> list[str]:
        """Lines that append ``value`` (a non-fixed field of a struct) to ``buf``."""
        field_class = classify_field(field)
        match field_class:
            case PrimitiveField():
                return self._primitive(get_schema_field_type(field), value, buf, ind, optional,
                                       flexible)
            case EntityField(entity):
                return [f"{ind}{self.entity(entity, nullable=optional)}({buf}, {value})"]
            case PrimitiveTupleField():
                item = self._var()
                kafka_type = get_schema_field_type(field)
                fixed = _FIXED.get(kafka_type)
                if fixed is not None:
                    packer = self._struct(fixed[0])
                    body = [f"{ind}    {buf} += {packer}.pack({fixed[1].format(item)})"]
                else:
                    body = self._primitive(kafka_type, item, buf, ind + "    ", False,
                                           flexible)
            case EntityTupleField(entity):
                item = self._var()
                body = [f"{ind}    {self.entity(entity)}({buf}, {item})"]
            case _:  # pragma: no cover - kio has exactly these four
                raise NotImplementedError(field_class)
        if flexible:
            head = [f"{ind}if {value} is None:", f"{ind}    {buf} += b'\\x00'", f"{ind}else:",
                    f"{ind}    {buf} += _uv(len({value}) + 1)"]
        else:
            length = self._struct("i")
            head = [f"{ind}if {value} is None:", f"{ind}    {buf} += b'\\xff\\xff\\xff\\xff'",
                    f"{ind}else:", f"{ind}    {buf} += {length}.pack(len({value}))"]
        return head + [f"{ind}    for {item} in {value}:"] + [f"    {line}" for line in body]

    def _primitive(self, kafka_type: str, value: str, buf: str, ind: str, optional: bool,
                   flexible: bool) -> list[str]:
        """A string, bytes or records value (fixed-size ones are handled by the caller)."""
        lines: list[str] = []
        if kafka_type == "string" or (flexible and kafka_type in ("bytes", "records")):
            if flexible:
                null = "b'\\x00'"
                encode = [f"{ind}if isinstance({value}, str):",
                          f"{ind}    {value} = {value}.encode()",
                          f"{ind}{buf} += _uv(len({value}) + 1)"]
            else:
                null = "b'\\xff\\xff'"
                encode = [f"{ind}{value} = {value}.encode()",
                          f"{ind}{buf} += {self._struct('h')}.pack(len({value}))"]
        elif kafka_type in ("bytes", "records"):
            null = "b'\\xff\\xff\\xff\\xff'"
            encode = [f"{ind}{buf} += {self._struct('i')}.pack(len({value}))"]
        else:
            raise NotImplementedError(f"no encoder for kafka_type {kafka_type!r}")
        if kafka_type == "records":
            # Records may be a FileRegion (zero-copy fetch): a gap in a RegionBuffer.
            encode += [f"{ind}if {value}.__class__ is bytes:", f"{ind}    {buf} += {value}",
                       f"{ind}else:", f"{ind}    _records({buf}, {value})"]
        else:
            encode.append(f"{ind}{buf} += {value}")
        if optional:
            lines += [f"{ind}if {value} is None:", f"{ind}    {buf} += {null}", f"{ind}else:"]
            lines += [f"    {line}" for line in encode]
        else:
            lines += [f"{ind}if {value} is None:",
                      f"{ind}    raise TypeError('Unexpectedly received None value')"]
            lines += encode
        return lines


class RegionBuffer(bytearray):
    """An encoding buffer that leaves gaps for :class:`FileRegion` records: ``regions`` holds
    ``(position, region)`` of each, in order (:func:`~trio_broker.protocol.regions.split`)."""

    __slots__ = ("regions",)

    def __init__(self, initial: bytes | int = b"") -> None:
        super().__init__(initial)
        self.regions: list[tuple[int, FileRegion]] = []


def _append_records(buf: bytearray, value: Any) -> None:
    """A records value that is not ``bytes``: a region is a gap in a :class:`RegionBuffer`
    and read into any other buffer; anything else (bytearray, memoryview) is copied."""
    if isinstance(value, FileRegion):
        if isinstance(buf, RegionBuffer):
            buf.regions.append((len(buf), value))
        else:
            buf += value.read()
    else:
        buf += value


def _build(schema: type) -> Encoder:
    generator = _Generator()
    writer: Encoder = generator.build(schema, generator.namespace)
    return writer


_ENCODERS: dict[type, Encoder] = {}


def compile_encoder(schema: type) -> Encoder:
    """The writer ``(buffer, body) -> None`` for a kio message class (cached per class)."""
    writer = _ENCODERS.get(schema)
    if writer is None:
        writer = _ENCODERS[schema] = _build(schema)
    return writer


def encode(body: Any) -> bytes:
    """``body`` encoded as kio's ``entity_writer(type(body))`` would encode it."""
    buffer = bytearray()
    compile_encoder(type(body))(buffer, body)
    return bytes(buffer)
