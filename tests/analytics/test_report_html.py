"""report.html rendering: pure Python, no Spark."""

from __future__ import annotations

import re
from typing import Any
from xml.etree import ElementTree

from trio_broker.analytics.report import bar_chart, line_chart, render_report, stacked_bars


def _summary() -> dict[str, Any]:
    return {
        "lines": 10, "malformed_lines": 1, "malformed": {"unparseable": 1, "schema_mismatch": 0},
        "time_range": {"first": "2026-03-14T09:00:00Z", "last": "2026-03-14T09:03:00Z"},
        "requests": 4, "rejected_connections": {"per_ip_limit": 3, "<script>": 1},
        "rejected_connections_by_ip": {"10.0.0.9": 4}, "closed_connections": {"client": 2},
        "unknown_events": {}, "schema_version": 1, "inputs": ["/tmp/broker.log"],
        "group_rebalances": {"orders": 2},
    }


def _tables() -> dict[str, list[dict[str, Any]]]:
    return {
        "metrics_timeline": [
            {"ts": "2026-03-14T09:00:00Z", "network_processor_avg_idle_percent": 0.9,
             "request_handler_avg_idle_percent": 0.5, "request_queue_size": 3,
             "response_queue_size": 0},
            {"ts": "2026-03-14T09:01:00Z", "network_processor_avg_idle_percent": 0.2,
             "request_handler_avg_idle_percent": 0.4, "request_queue_size": 30,
             "response_queue_size": 1}],
        "latency_by_api": [{"api": "Produce", "requests": 4, "errors": 0, "p50_total_ms": 1.0,
                            "p95_total_ms": 2.0, "p99_total_ms": 3.0, "max_total_ms": 3.0,
                            "local_share": 0.5, "remote_share": 0.25, "send_share": 0.25}],
        "rejected_connections": [{"ip": "10.0.0.9", "listener": "PLAINTEXT",
                                  "reason": "<script>", "count": 1}],
    }


def test_report_is_self_contained_with_a_section_per_symptom() -> None:
    page = render_report(_summary(), _tables())
    assert page.startswith("<!DOCTYPE html>")
    for symptom in ("clients cannot connect or are refused", "slow I/O",
                    "requests enter slowly while the handlers are idle",
                    "handlers are busy and responses are slow", "one client overloads",
                    "throttled", "group rebalances", "clients cannot authenticate"):
        assert symptom in page, symptom
    assert "<script>" not in page  # data is escaped
    assert "&lt;script&gt;" in page
    assert not re.search(r'(src|href)="(https?:)?//', page)  # nothing loaded from elsewhere
    assert page.count("<section") == 13
    assert "Undeclared events" in page and "{}" not in page


def test_svg_charts_are_well_formed() -> None:
    charts = [
        bar_chart([("a", 3.0), ("b & c", 1.0)], unit=" ms", title="t"),
        stacked_bars([("Produce", [0.5, 0.5]), ("Fetch", [0.0, 1.0])], ["local", "remote"]),
        line_chart({"idle": [("2026-03-14T09:00:00Z", 90.0), ("2026-03-14T09:01:00Z", 20.0),
                             ("bad", 1.0), ("2026-03-14T09:02:00Z", None)]}, y_max=100.0),
        line_chart({"one": [("2026-03-14T09:00:00Z", 5.0)]}),
    ]
    for svg in charts:
        root = ElementTree.fromstring(svg)
        assert root.tag.endswith("svg")
    line = ElementTree.fromstring(charts[2])
    polyline = next(e for e in line.iter() if e.tag.endswith("polyline"))
    assert len(polyline.attrib["points"].split()) == 2  # the bad and empty points are dropped
    bars = [e for e in ElementTree.fromstring(charts[0]).iter() if e.tag.endswith("rect")]
    assert float(bars[0].attrib["width"]) == 3 * float(bars[1].attrib["width"])


def test_empty_inputs_render_one_line_per_section() -> None:
    page = render_report({}, {})
    sections = re.findall(r"<section.*?</section>", page)
    assert len(sections) == 13
    for section in sections:
        assert section.count('class="empty"') == 1, section
    assert "No connection was refused in these logs." in page
    assert line_chart({}).startswith("<p")


def test_time_axis_has_round_ticks_between_the_ends() -> None:
    from datetime import UTC, datetime

    from trio_broker.analytics.report import time_ticks

    start = datetime(2026, 3, 14, 9, 0, 20, tzinfo=UTC).timestamp()
    ticks = time_ticks(start, start + 3 * 3600)
    assert [label for _, label, _ in ticks] == ["09:30", "10:00", "10:30", "11:00", "11:30",
                                                "12:00"]
    assert len(time_ticks(start, start + 50)) >= 3
