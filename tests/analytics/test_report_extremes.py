"""``report.html`` and ``summary.json`` never fail on extreme values (no Spark): infinities,
NaN, ``1e308``, None, huge or negative numbers, far dates, in any table or the summary; and the
summary's account of unusable files and schema versions."""

from __future__ import annotations

import math
import re
import sys
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_broker.analytics.charts import (
    _fmt,
    _nice_max,
    bar_chart,
    line_chart,
    stacked_bars,
    time_ticks,
)
from trio_broker.analytics.reading import LineAccounts
from trio_broker.analytics.report import render_report
from trio_broker.analytics.summary import build_summary
from trio_broker.analytics.tables import QUESTIONS
from trio_broker.observability.events import SCHEMA_VERSION

EXTREMES: list[Any] = [math.inf, -math.inf, math.nan, 1e308, -1e308, sys.float_info.max,
                       5e-324, 0.0, -0.0, None, 2**80, -(2**80), 10**400, -1, 0]
TIMES = ["2026-03-14T09:00:00.000000Z", "1970-01-01T00:00:00.000000Z",
         "9999-12-31T23:59:59.999999Z", "0001-01-01T00:00:00.000000Z",
         "+12345-01-01T00:00:00.000000Z", "not a time", None]


_BAD_GEOMETRY = re.compile(r'(?:x|y|x1|x2|y1|y2|cx|cy|width|height|points)="[^"]*(?:inf|nan)',
                           re.IGNORECASE)


def test_nice_max_of_the_largest_floats_is_finite() -> None:
    """The OverflowError's root: 10 ** (digits of 1e308) cannot be made a float again."""
    for value in (1e308, sys.float_info.max, 9.9e307, 1e300):
        top = _nice_max(value)
        assert math.isfinite(top) and top >= value
    assert [_nice_max(v) for v in (0.5, 7, 10, 99.5, 101, 240, 0, -3)] == \
        [1.0, 10.0, 10.0, 100.0, 200.0, 250.0, 1.0, 1.0]
    assert _nice_max(math.nan) == 1.0 and math.isfinite(_nice_max(math.inf))


@pytest.mark.parametrize("value", EXTREMES)
def test_charts_and_cells_take_any_value(value: Any) -> None:
    _fmt(value)
    for svg in (bar_chart([("a", value), ("b", 3.0)], unit=" ms"),
                stacked_bars([("x", [value, 1.0, value])], ["p", "q", "r"]),
                line_chart({"s": [(t, value) for t in TIMES] + [(TIMES[0], 1.0)]}),
                line_chart({"s": [(TIMES[2], value)]})):
        # Every coordinate and size is a finite number (a label may say "inf" or "nan").
        assert not _BAD_GEOMETRY.search(svg), svg


def test_time_ticks_over_centuries_stay_few() -> None:
    x0 = datetime(1970, 1, 1, tzinfo=UTC).timestamp()
    x1 = datetime(9999, 12, 31, tzinfo=UTC).timestamp()
    ticks = time_ticks(x0, x1)
    assert 1 <= len(ticks) <= 7
    assert len(time_ticks(x0, x0 + 400 * 86400)) <= 7


def _accounts() -> LineAccounts:
    return LineAccounts(
        overview=[{"problem": None, "event": "request", "n": 3, "first": TIMES[1],
                   "last": TIMES[2]},
                  {"problem": "out of range: total_ms", "event": "request", "n": 1,
                   "first": None, "last": None}],
        samples={"out of range: total_ms": ["/l/a:b.log:2: {...}"]},
        usable_by_file={"/l/a:b.log": 3, "/l/cut.log.gz": 0})


@settings(max_examples=60, deadline=None)
@given(value=st.sampled_from(EXTREMES) | st.floats() | st.integers(),
       moment=st.sampled_from(TIMES))
def test_render_report_never_fails(value: Any, moment: Any) -> None:
    """Every table's every column holds the value (or the time), the summary too."""
    row: dict[str, Any] = {}
    for name in ("ts", "minute", "first_seen", "last_seen"):
        row[name] = moment
    for name in ("api", "client_id", "reason", "ip", "listener", "error", "peer", "principal",
                 "group_id", "transactional_id"):
        row[name] = "x"
    tables: dict[str, list[dict[str, Any]]] = {}
    numeric = ["requests", "errors", "count", "mutes", "failures", "rebalances", "p50_total_ms",
               "p95_total_ms", "p99_total_ms", "max_total_ms", "p99_service_ms",
               "total_bytes", "total_throttle_ms", "max_open_ms", "accepted", "closed",
               "expired", "refused", "connection_count", "request_queue_size",
               "response_queue_size", "network_processor_avg_idle_percent",
               "request_handler_avg_idle_percent", "p95_request_queue_ms",
               "max_request_queue_ms", "min_network_idle_percent", "local_share",
               "service_ms", "total_ms"]
    for question in QUESTIONS:
        tables[question.name] = [{**row, **dict.fromkeys(numeric, value)},
                                 {**row, **dict.fromkeys(numeric, 1)}]
    summary = {"lines": value, "usable_lines": value, "unusable_lines": value,
               "time_range": {"first": moment, "last": moment}, "requests": value,
               "rejected_connections": {"a": 1}, "rejected_connections_by_ip": {"x": 2},
               "closed_connections": {"c": 1}, "invalid_frames_by_reason": {"i": 1},
               "group_rebalances": {"g": 1}, "fetch_max_wait_ms": value,
               "unusable": {"r": {"count": 1, "samples": ["f:1: x"]}},
               "unusable_files": {"a.gz": "truncated gzip"}, "warnings": ["w"],
               "inputs": ["a"], "schema_version": SCHEMA_VERSION}
    assert "<html" in render_report(summary, tables)


def test_summary_names_unusable_files_and_other_schema_versions() -> None:
    tables: dict[str, list[dict[str, Any]]] = {q.name: [] for q in QUESTIONS}
    summary = build_summary(_accounts(), tables, ["/l/a:b.log", "/l/cut.log.gz"], None, None,
                            unusable_files={"/l/cut.log.gz": "truncated gzip"},
                            schema_versions={SCHEMA_VERSION: 3, SCHEMA_VERSION + 1: 2,
                                             "(none)": 1})
    assert summary["unusable_files"] == {"/l/cut.log.gz": "truncated gzip"}
    assert summary["unusable"]["out of range: total_ms"]["count"] == 1
    warnings = summary["warnings"]
    assert "/l/cut.log.gz: not read: truncated gzip" in warnings
    assert not any("no broker events" in w for w in warnings), "said once, as not read"
    [versions] = [w for w in warnings if "schema_version" in w]
    assert f"2 with version {SCHEMA_VERSION + 1}" in versions
    assert f"({SCHEMA_VERSION})" in versions
    quiet = build_summary(_accounts(), tables, ["/l/a:b.log"], None, None,
                          schema_versions={SCHEMA_VERSION: 3})
    assert quiet["unusable_files"] == {}
    assert not any("schema_version" in w for w in quiet["warnings"])
    assert "<html" in render_report(summary, tables)
