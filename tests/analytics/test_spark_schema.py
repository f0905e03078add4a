"""Schema agreement: the Spark schema is the declaration in events.py, field for field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.analytics.analytics_logs import logging_to
from trio_broker.analytics.jobs import read_logs
from trio_broker.analytics.schema import (
    CORRUPT_RECORD,
    SchemaConflict,
    event_schema,
    field_conflicts,
    log_schema,
    union_fields,
)
from trio_broker.observability import log
from trio_broker.observability.events import COMMON_FIELDS, EVENTS, EventSpec, all_fields

SAMPLE = {"string": "text", "long": 7, "double": 1.5, "boolean": True}


def test_union_keeps_one_type_per_field_and_reports_conflicts() -> None:
    events = {"a": EventSpec("a", "A.", {"x": "long", "y": "string"}),
              "b": EventSpec("b", "B.", {"x": "double", "z": "boolean"})}
    assert field_conflicts(events) == {"x": {"long": ["a"], "double": ["b"]}}
    merged = union_fields(events)
    assert merged == {**COMMON_FIELDS, "x": "string", "y": "string", "z": "boolean"}
    with pytest.raises(SchemaConflict, match="x: long in a, double in b"):
        union_fields(events, strict=True)


@pytest.mark.spark
def test_every_declared_field_is_a_column_of_its_type() -> None:
    from pyspark.sql import types as T

    spark_types = {"string": T.StringType(), "long": T.LongType(), "double": T.DoubleType(),
                   "boolean": T.BooleanType()}
    schema = log_schema()
    columns = {f.name: f.dataType for f in schema.fields}
    assert columns.pop(CORRUPT_RECORD) == T.StringType()
    conflicts = field_conflicts()
    for name, spec in EVENTS.items():
        for field, type_name in all_fields(name).items():
            assert field in columns, (name, field)
            if field not in conflicts:  # conflicts fail tests/observability; read as text here
                assert columns[field] == spark_types[type_name], (name, field)
        per_event = {f.name: f.dataType for f in event_schema(name).fields}
        assert per_event == {f: spark_types[t] for f, t in all_fields(name).items()}
        assert spec.fields.keys() <= per_event.keys()
    declared = set(COMMON_FIELDS).union(*(spec.fields for spec in EVENTS.values()))
    assert set(columns) == declared  # nothing in the schema that the declaration lacks


@pytest.mark.spark
def test_every_event_written_by_emit_reads_back_exactly(spark: Any, tmp_path: Path) -> None:
    """Each declared event with every field set goes through emit() and comes out of Spark
    with no corrupt record and every value equal to what was written."""
    path = tmp_path / "all.log"
    with logging_to(path):
        for name, spec in EVENTS.items():
            log.emit(name, **{f: SAMPLE[t] for f, t in spec.fields.items()})
    written = [json.loads(line) for line in path.read_text().splitlines()]
    rows = read_logs(spark, [str(path)]).collect()
    assert len(rows) == len(written) == len(EVENTS)
    by_event = {row["event"]: row.asDict() for row in rows}
    conflicts = field_conflicts()
    for record in written:
        row = by_event[record["event"]]
        assert row[CORRUPT_RECORD] is None, record["event"]
        assert row["ts"] is not None
        for field, value in record.items():
            if field in conflicts:
                continue
            assert row[field] == value, (record["event"], field)


@pytest.mark.spark
def test_times_stay_utc_whatever_the_drivers_time_zone(spark: Any, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """--since/--until and collected timestamps must not go through the driver's local zone."""
    import time
    from datetime import datetime, timedelta

    from tests.analytics.analytics_logs import BASE_TIME, Emission, write_scenario
    from trio_broker.analytics.jobs import collect_rows, valid_events

    path = tmp_path / "tz.log"
    write_scenario(path, [Emission(3600.0 * i, "broker_stopped", {"uptime_s": float(i)})
                          for i in range(3)])
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        lines = read_logs(spark, [str(path)])
        middle = valid_events(lines, since=BASE_TIME + timedelta(minutes=30),
                              until=BASE_TIME + timedelta(minutes=90))
        assert collect_rows(middle.select("ts", "timestamp")) == [
            {"ts": "2026-03-14T10:00:00.000000Z", "timestamp": "2026-03-14T10:00:00Z"}]
        naive_means_utc = valid_events(lines, since=datetime(2026, 3, 14, 9, 30))
        assert naive_means_utc.count() == 2
    finally:
        monkeypatch.undo()
        time.tzset()
