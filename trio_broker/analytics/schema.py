"""Spark schemas built from :mod:`trio_broker.observability.events` -- never written twice.

The broker's log is one JSON object per line; every line carries the common fields and its event's
own fields. Spark reads all events through one schema: the common fields plus the union of every
event's fields (a field name must have one type across all events, which :func:`union_fields`
checks), plus ``_corrupt_record`` so that malformed or truncated lines are kept and counted
(PERMISSIVE mode) instead of failing the job.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from trio_broker.observability.events import COMMON_FIELDS, EVENTS, all_fields

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pyspark.sql.types import DataType, StructType

#: The column Spark fills with the raw text of a line it could not parse against the schema.
CORRUPT_RECORD = "_corrupt_record"


class SchemaConflict(ValueError):
    """Two events declare the same field name with different types."""


def union_fields(events: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The common fields, then every event's fields in declaration order, name -> type name.

    Raises :class:`SchemaConflict` if one field name has two types: one Spark column cannot hold
    both, so the declaration must not do that.
    """
    specs = EVENTS if events is None else events
    merged: dict[str, str] = dict(COMMON_FIELDS)
    owner: dict[str, str] = dict.fromkeys(COMMON_FIELDS, "<common>")
    for spec in specs.values():
        for name, type_name in spec.fields.items():
            previous = merged.get(name)
            if previous is not None and previous != type_name:
                raise SchemaConflict(
                    f"field {name!r} is {previous} in {owner[name]} but {type_name} in {spec.name}")
            merged.setdefault(name, type_name)
            owner.setdefault(name, spec.name)
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


def log_schema(*, corrupt: bool = True) -> StructType:
    """One schema for every line: common fields, the union of event fields, ``_corrupt_record``."""
    return _struct(union_fields(), corrupt=corrupt)


def event_schema(event: str) -> StructType:
    """The schema of one event's lines alone (common fields plus its own)."""
    return _struct(all_fields(event), corrupt=False)


def events_with_field(field: str) -> list[str]:
    """Names of the declared events that carry ``field``."""
    return [name for name, spec in EVENTS.items() if field in spec.fields]
