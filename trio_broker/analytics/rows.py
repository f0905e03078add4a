"""Tables out of Spark: collected as JSON-ready rows, and written as Parquet by the driver."""

from __future__ import annotations

import math
import shutil
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .reading import iso_utc

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pyspark.sql import DataFrame


def jsonable(value: Any) -> Any:
    """A collected value as JSON: timestamps as ISO 8601 UTC text, non-finite floats as null."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return value


def collect_rows(frame: DataFrame) -> list[dict[str, Any]]:
    """The rows of a small DataFrame as JSON-ready dicts, timestamps as ISO 8601 UTC text."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    columns = [iso_utc(F.col(f.name)).alias(f.name) if isinstance(f.dataType, T.TimestampType)
               else F.col(f.name) for f in frame.schema.fields]
    return [{k: jsonable(v) for k, v in row.asDict(recursive=True).items()}
            for row in frame.select(*columns).collect()]


def collect_and_write(frame: DataFrame, path: Path) -> list[dict[str, Any]]:
    """Collect a small DataFrame once, as Arrow, write it as ``path/part-00000.parquet`` from
    the driver and return its rows as :func:`collect_rows` does.

    One Spark job per table instead of three (cache, Parquet write, collect): a table is at
    most thousands of rows, and each job's fixed cost (planning, two stages, the write's
    commit) was most of the tables' time (docs/performance.md).
    """
    import pyarrow.parquet as pq

    table = frame.toArrow()
    # Overwrite, as Spark's writer did: a file left by an earlier run would be read as rows.
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    pq.write_table(table, str(path / "part-00000.parquet"))
    fields = [(field.name, field.type) for field in table.schema]
    return [{name: _from_arrow(row[name], kind) for name, kind in fields}
            for row in table.to_pylist()]


def _from_arrow(value: Any, kind: Any) -> Any:
    """An Arrow value (as ``to_pylist`` gives it) as :func:`collect_rows` gives it."""
    import pyarrow as pa

    if value is None:
        return None
    if pa.types.is_timestamp(kind):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if pa.types.is_map(kind):
        return {str(k): _from_arrow(v, kind.item_type) for k, v in value}
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return [_from_arrow(v, kind.value_type) for v in value]
    if pa.types.is_struct(kind):
        return {field.name: _from_arrow(value[field.name], field.type) for field in kind}
    return jsonable(value)
