"""No input line ever makes ``trio_broker analyze`` fail: every unusable line is counted by
reason, with samples that name their file and line.

Hypothesis feeds arbitrary JSON objects (biased towards the declared events and fields, with
values of any type or missing) and arbitrary byte strings to the reader and the whole job. One
SparkSession serves the module (the session fixture); the examples are few and small, as each
runs every job.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from trio_broker.analytics.jobs import (
    BLANK,
    PROBLEM,
    REQUIRED_FIELDS,
    ROW,
    TEXT,
    WRONG_TYPE,
    read_logs,
    run_analysis,
    wrong_field_column,
)
from trio_broker.analytics.reading import BYTE_FIELDS, MAX_MS, OUT_OF_RANGE, duration_fields
from trio_broker.analytics.report import render_report
from trio_broker.analytics.schema import union_fields
from trio_broker.observability.events import EVENTS

pytestmark = pytest.mark.spark

#: Declared fields in schema order (the order the job names the first wrongly typed one in).
_FIELDS = [name for name in union_fields() if name not in ("event", "timestamp")]
_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=3),
    max_leaves=6)
_TYPED = {"string": st.text(max_size=12), "long": st.integers(-(2**63), 2**63 - 1),
          "double": st.floats(allow_nan=False, allow_infinity=False), "boolean": st.booleans()}


@st.composite
def _event_objects(draw: st.DrawFn) -> dict[str, Any]:
    """A JSON object that is often a broker event: a declared event name, a valid timestamp,
    declared fields with values of the right type, the wrong type, or none at all."""
    record: dict[str, Any] = {}
    if draw(st.booleans()):
        record["event"] = draw(st.sampled_from([*EVENTS, "quorum_elected"]))
    elif draw(st.booleans()):
        record["event"] = draw(_JSON_VALUES)
    if draw(st.integers(0, 4)):
        record["timestamp"] = draw(st.sampled_from(
            ["2026-03-14T09:00:00Z", "2026-03-14T09:01:30.5Z", "yesterday", ""]))
    types = union_fields()
    for name in draw(st.lists(st.sampled_from(_FIELDS), max_size=8, unique=True)):
        right = draw(st.integers(0, 3)) > 0
        record[name] = draw(_TYPED[types[name]] if right else _JSON_VALUES)
    for key, value in draw(st.dictionaries(st.text(max_size=6), _JSON_VALUES, max_size=2)).items():
        record.setdefault(key, value)
    return record


_LINES = st.lists(
    st.one_of(_event_objects().map(lambda r: json.dumps(r).encode()),
              _JSON_VALUES.map(lambda v: json.dumps(v).encode()),
              st.binary(max_size=40),
              _event_objects().map(lambda r: json.dumps(r).encode()[:-3])),
    min_size=1, max_size=25)


def _non_blank_lines(data: bytes) -> int:
    # As Spark's text reader splits (\n, \r, \r\n; invalid UTF-8 replaced) and the job's
    # "blank" means spaces only.
    lines = data.decode("utf-8", errors="replace").encode().splitlines()
    return sum(1 for line in lines if line.strip(b" "))


# No shrinking phase: each example costs Spark jobs, and a failure prints its example anyway.
_SETTINGS = settings(max_examples=4, deadline=None, derandomize=True,
                     phases=[Phase.explicit, Phase.reuse, Phase.generate],
                     suppress_health_check=[HealthCheck.function_scoped_fixture,
                                            HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.timeout(900)  # every example runs the whole job (about twenty Spark jobs)
@_SETTINGS
@given(lines=_LINES)
def test_any_lines_analysed_without_failure(spark: Any, tmp_path_factory: pytest.TempPathFactory,
                                            lines: list[bytes]) -> None:
    directory = tmp_path_factory.mktemp("fuzz")
    path = directory / "broker.log"
    data = b"\n".join(lines) + b"\n"
    path.write_bytes(data)
    result = run_analysis(spark, [str(path)], directory / "out")
    summary = result.summary
    assert summary["lines"] == _non_blank_lines(data)
    reasons = summary["unusable"]
    assert summary["usable_lines"] + sum(e["count"] for e in reasons.values()) == \
        summary["lines"]
    assert summary["usable_lines"] == sum(summary["events_by_name"].values())
    text = data.decode("utf-8", errors="replace").split("\n")
    for entry in reasons.values():
        assert 1 <= len(entry["samples"]) <= min(5, entry["count"])
        for sample in entry["samples"]:
            name, number, _ = sample.split(":", 2)
            assert name == str(path) and 1 <= int(number) <= len(text)
    if not summary["usable_lines"]:
        assert summary["warnings"] == [f"{path}: no broker events in this file"]
    json.loads((directory / "out" / "summary.json").read_text(encoding="utf-8"))
    assert "<html" in render_report(summary, result.tables)


@pytest.mark.timeout(600)
@_SETTINGS
@given(records=st.lists(_event_objects(), min_size=1, max_size=30))
def test_reader_classifies_event_objects(spark: Any, tmp_path_factory: pytest.TempPathFactory,
                                         records: list[dict[str, Any]]) -> None:
    """Each JSON object line gets the reason a plain-Python check of the declaration gives."""
    path = tmp_path_factory.mktemp("objects") / "broker.log"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    from pyspark.sql import functions as F

    lines = read_logs(spark, [str(path)])
    named = F.when(F.col(PROBLEM) == WRONG_TYPE, wrong_field_column(F.col(TEXT))) \
        .otherwise(F.col(PROBLEM))
    rows = lines.orderBy(ROW).select(named.alias(PROBLEM)).collect()
    assert [row[PROBLEM] for row in rows] == [_expected_problem(r) for r in records]


def _expected_problem(record: dict[str, Any]) -> str | None:
    types = union_fields()
    event = record.get("event")
    if event is None:
        return "not a broker event"
    if not isinstance(event, str):
        return "unknown event" if json.dumps(event) not in EVENTS else None
    if event not in EVENTS:
        return "unknown event"
    for name in _FIELDS:  # the first declared field (schema order) of the wrong type
        if name in record and record[name] is not None and not _fits(types[name], record[name]):
            return f"wrong type: {name}"
    if record.get("timestamp") is None:
        return "missing field timestamp"
    if record["timestamp"] in ("yesterday", ""):
        return "bad timestamp"
    for name in REQUIRED_FIELDS.get(event, ()):  # every event's required fields, in order
        if record.get(name) is None:
            return f"missing field {name}"
    for name in duration_fields():  # NaN, infinite, negative or above MAX_MS
        value = _as_double(record.get(name))
        if value is not None and not 0 <= value <= MAX_MS:
            return f"{OUT_OF_RANGE}: {name}"
    for name in BYTE_FIELDS:  # negative
        value = record.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value < 0:
            return f"{OUT_OF_RANGE}: {name}"
    return None


def _as_double(value: Any) -> float | None:
    """A double field's value as Spark reads it (its non-numeric strings included)."""
    if isinstance(value, str) and value in _NON_NUMERIC:
        return float(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


_NON_NUMERIC = {"NaN", "Infinity", "+Infinity", "-Infinity", "INF", "+INF", "-INF"}


def _fits(type_name: str, value: Any) -> bool:
    if type_name == "string":
        return True  # Spark keeps any JSON value's text in a string column
    if type_name == "double" and isinstance(value, str) and value in _NON_NUMERIC:
        return True  # Spark's JSON reader takes these strings as doubles
    if type_name == "boolean":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if type_name == "long":
        return isinstance(value, int) and -(2**63) <= value < 2**63
    return isinstance(value, int | float)


@pytest.mark.timeout(600)
def test_every_reason_once(spark: Any, tmp_path: Path) -> None:
    """One line per reason, in two files, one of which holds no broker event at all."""
    good = {"timestamp": "2026-03-14T09:00:00Z", "level": "info", "event": "request",
            "broker": 1, "api": "Produce", "total_ms": 1.5}
    lines = {
        "not JSON": '{"timestamp": "2026-03-14T09:00:00Z", "event": "requ',
        "not an object": "[1, 2, 3]",
        "not a broker event": json.dumps({"msg": "GET /health 200", "level": "info"}),
        "unknown event": json.dumps({**good, "event": "quorum_elected"}),
        "missing field api": json.dumps({k: v for k, v in good.items() if k != "api"}),
        "missing field timestamp": json.dumps({k: v for k, v in good.items()
                                               if k != "timestamp"}),
        "bad timestamp": json.dumps({**good, "timestamp": "last tuesday"}),
        "wrong type: api_key": json.dumps({**good, "api_key": "five"}),
    }
    logs = tmp_path / "broker.log"
    # A wrong type in a field no table reads (processor) leaves the line usable: analyze
    # type-checks only the fields it uses (docs/decisions.md).
    unused_wrong = json.dumps({**good, "processor": "two"})
    # Spaces or a tab before an event's object leave it usable; a line of them is blank.
    indented = "  \t" + json.dumps(good)
    logs.write_text("\n".join([json.dumps(good), *lines.values(), "   ", " \t ", json.dumps(good),
                               unused_wrong, indented]) + "\n", encoding="utf-8")
    other = tmp_path / "nginx.jsonl"
    other.write_text(json.dumps({"msg": "GET / 200"}) + "\n", encoding="utf-8")
    result = run_analysis(spark, [str(logs), str(other)], tmp_path / "out")
    summary = result.summary
    counted = {reason: entry["count"] for reason, entry in summary["unusable"].items()}
    assert counted == {**dict.fromkeys(lines, 1), "not a broker event": 2}
    for number, reason in enumerate(lines, start=2):
        assert summary["unusable"][reason]["samples"][0].startswith(f"{logs}:{number}: "), reason
    assert summary["unusable"]["not a broker event"]["samples"][1].startswith(f"{other}:1: ")
    assert summary["requests_by_api"] == {"Produce": 4}
    assert summary["warnings"] == [f"{other}: no broker events in this file"]
    assert BLANK not in summary["unusable"]
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert "missing field api" in page and f"{logs}:7" in page
    assert Counter(summary["unknown_events"]) == Counter({"quorum_elected": 1})
