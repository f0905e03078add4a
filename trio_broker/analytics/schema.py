"""Spark schemas built from :mod:`trio_broker.observability.events` -- never written twice.

The broker's log is one JSON object per line; every line carries the common fields and its event's
own fields. Spark reads all events through one schema: the common fields plus the union of every
event's fields (a field name must have one type across all events, which :func:`union_fields`
checks), plus ``_corrupt_record`` so that malformed or truncated lines are kept and counted
(PERMISSIVE mode) instead of failing the job.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from trio_broker.observability.events import COMMON_FIELDS, EVENTS, all_fields

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pyspark.sql.types import DataType, StructType

#: The column Spark fills with the raw text of a line it could not parse against the schema.
CORRUPT_RECORD = "_corrupt_record"


class SchemaConflict(ValueError):
    """Two events declare the same field name with different types."""


def field_conflicts(events: Mapping[str, Any] | None = None) -> dict[str, dict[str, list[str]]]:
    """Field names declared with more than one type: name -> {type: [events]}.

    The contract is one type per field name across all events (one Spark column per name);
    the schema test fails on any conflict.
    """
    specs = EVENTS if events is None else events
    types: dict[str, dict[str, list[str]]] = {
        name: {type_name: ["<common>"]} for name, type_name in COMMON_FIELDS.items()}
    for spec in specs.values():
        for name, type_name in spec.fields.items():
            types.setdefault(name, {}).setdefault(type_name, []).append(spec.name)
    return {name: by_type for name, by_type in types.items() if len(by_type) > 1}


def union_fields(events: Mapping[str, Any] | None = None, *,
                 strict: bool = False) -> dict[str, str]:
    """The common fields, then every event's fields in declaration order, name -> type name.

    A field name declared with two types cannot be one typed column: with ``strict`` that raises
    :class:`SchemaConflict`; otherwise the column is read as ``string`` (Spark keeps any JSON
    value's text there), so one slip in the declaration never makes every line unreadable.
    """
    specs = EVENTS if events is None else events
    conflicts = field_conflicts(specs)
    if strict and conflicts:
        raise SchemaConflict("fields declared with more than one type: " + "; ".join(
            f"{name}: " + ", ".join(f"{t} in {', '.join(e)}" for t, e in by_type.items())
            for name, by_type in conflicts.items()))
    merged: dict[str, str] = dict(COMMON_FIELDS)
    for spec in specs.values():
        for name, type_name in spec.fields.items():
            merged.setdefault(name, "string" if name in conflicts else type_name)
    return merged


def spark_type(type_name: str) -> DataType:
    """The Spark type for one of the simple type names used in ``events.py``."""
    from pyspark.sql import types as T

    mapping: dict[str, DataType] = {
        "string": T.StringType(),
        "long": T.LongType(),
        "double": T.DoubleType(),
        "boolean": T.BooleanType(),
    }
    try:
        return mapping[type_name]
    except KeyError:
        raise ValueError(f"unknown field type {type_name!r} in events.py") from None


def _struct(fields: Mapping[str, str], *, corrupt: bool) -> StructType:
    from pyspark.sql import types as T

    columns = [T.StructField(name, spark_type(type_name), nullable=True)
               for name, type_name in fields.items()]
    if corrupt:
        columns.append(T.StructField(CORRUPT_RECORD, T.StringType(), nullable=True))
    return T.StructType(columns)


def log_schema(*, corrupt: bool = True, only: Iterable[str] | None = None) -> StructType:
    """One schema for every line: common fields, the union of event fields, ``_corrupt_record``.

    With ``only``, just those declared fields (in declaration order) plus ``timestamp``,
    ``event`` and every event's required fields: the JSON reader then converts and type-checks
    only these and skips the rest of a line unconverted.
    """
    fields = union_fields()
    if only is not None:
        wanted = {"timestamp", "event", *only}
        for spec in EVENTS.values():
            wanted.update(spec.required)
        fields = {name: type_name for name, type_name in fields.items() if name in wanted}
    return _struct(fields, corrupt=corrupt)


def event_schema(event: str) -> StructType:
    """The schema of one event's lines alone (common fields plus its own)."""
    return _struct(all_fields(event), corrupt=False)


def events_with_field(field: str) -> list[str]:
    """Names of the declared events that carry ``field``."""
    return [name for name, spec in EVENTS.items() if field in spec.fields]
