"""report.html rendering: pure Python, no Spark."""

from __future__ import annotations

import re
from typing import Any
from xml.etree import ElementTree

from trio_broker.analytics.charts import bar_chart, line_chart, stacked_bars
from trio_broker.analytics.report import render_report


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
    assert page.count("<section") == 14
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
    assert len(sections) == 14
    for section in sections:
        assert section.count('class="empty"') == 1, section
    assert "No connection was refused in these logs." in page
    assert line_chart({}).startswith("<p")


def test_time_axis_has_round_ticks_between_the_ends() -> None:
    from datetime import UTC, datetime

    from trio_broker.analytics.charts import time_ticks

    start = datetime(2026, 3, 14, 9, 0, 20, tzinfo=UTC).timestamp()
    ticks = time_ticks(start, start + 3 * 3600)
    assert [label for _, label, _ in ticks] == ["09:30", "10:00", "10:30", "11:00", "11:30",
                                                "12:00"]
    assert len(time_ticks(start, start + 50)) >= 3


# --- The report as an operator reads it (issue 30, item 5) --------------------------------


def _section_of(page: str, anchor: str) -> str:
    match = re.search(rf'<section id="{anchor}">.*?</section>', page, re.DOTALL)
    assert match, anchor
    return match.group(0)


def _texts(svg: str) -> list[str]:
    """The text of each ``<text>`` of an SVG (without a tooltip ``<title>`` inside it)."""
    root = ElementTree.fromstring(svg)
    texts = []
    for element in root.iter():
        if element.tag.endswith("}text") or element.tag == "text":
            texts.append((element.text or "") + "".join(
                (child.tail or "") for child in element))
    return texts


def test_errors_over_time_and_by_client_are_in_the_errors_section() -> None:
    tables = {
        "errors_by_code": [{"api": "Produce", "error": "NOT_LEADER_OR_FOLLOWER", "count": 7,
                            "clients": 2, "first_seen": "2026-03-14T09:00:01Z",
                            "last_seen": "2026-03-14T09:01:59Z"}],
        "errors_by_client": [
            {"client_id": "billing-producer", "api": "Produce", "error": "NOT_LEADER_OR_FOLLOWER",
             "count": 5, "first_seen": "2026-03-14T09:00:01Z",
             "last_seen": "2026-03-14T09:01:59Z"},
            {"client_id": "audit-producer", "api": "Produce", "error": "NOT_LEADER_OR_FOLLOWER",
             "count": 2, "first_seen": "2026-03-14T09:00:30Z",
             "last_seen": "2026-03-14T09:00:31Z"}],
        "request_queue_by_minute": [
            {"minute": "2026-03-14T09:00:00Z", "broker": 1, "requests": 100, "errors": 3},
            {"minute": "2026-03-14T09:00:00Z", "broker": 2, "requests": 80, "errors": 1},
            {"minute": "2026-03-14T09:01:00Z", "broker": 1, "requests": 90, "errors": 3},
            {"minute": "2026-03-14T09:01:00Z", "broker": 2, "requests": 70, "errors": 0}],
    }
    errors = _section_of(render_report({}, tables), "errors")
    assert "billing-producer" in errors and "audit-producer" in errors
    assert errors.index("billing-producer") < errors.index("audit-producer")  # most first
    # Errors over time: a column per minute, stacked by broker, with the minute's requests.
    assert "broker 1 at 09:00: 3 of 100 requests" in errors
    assert "broker 2 at 09:00: 1 of 80 requests" in errors
    assert "broker 2 at 09:01" not in errors  # no errors: no column part
    svg = re.search(r"<svg.*?</svg>", errors, re.DOTALL)
    assert svg and "failed requests per minute" in svg.group(0)
    assert [t for t in _texts(svg.group(0)) if re.fullmatch(r"\d\d:\d\d", t)] == \
        ["09:00", "09:01"]  # whole minutes, not 09:00:10, 09:00:20, ...
    # Without request_queue_by_minute or errors_by_code, errors_by_client alone still shows.
    alone = _section_of(render_report({}, {"errors_by_client": tables["errors_by_client"]}),
                        "errors")
    assert "billing-producer" in alone and 'class="empty"' not in alone.split("<h3>")[0]


def test_long_bar_labels_get_the_width_they_need_or_a_tooltip() -> None:
    long = "OffsetCommit: GROUP_SUBSCRIBED_TO_TOPIC"  # 39 characters: cut at 34 before
    svg = bar_chart([(long, 5.0), ("Produce: NONE", 1.0)])
    assert long in _texts(svg)  # shown whole
    bars = [e for e in ElementTree.fromstring(svg).iter() if e.tag.endswith("rect")]
    assert float(bars[0].attrib["x"]) >= len(long) * 6  # the label column fits the label
    huge = "client-" + "x" * 120
    svg = bar_chart([(huge, 1.0)])
    root = ElementTree.fromstring(svg)
    [label] = [e for e in root.iter() if e.tag.endswith("text") and e.attrib.get(
        "text-anchor") == "end"]
    title = next(child for child in label if child.tag.endswith("title"))
    assert title.text == huge  # the full text as a tooltip
    shown = "".join(child.tail or "" for child in label)
    assert "…" in shown and len(shown) < 60 and shown.startswith("client-xx")
    # Cut in the middle: labels that differ only at their end stay apart.
    twins = bar_chart([("x" * 80 + "-job-1", 2.0), ("x" * 80 + "-job-2", 1.0)])
    assert len({t for t in _texts(twins) if "…" in t}) == 2
    bars = [e for e in root.iter() if e.tag.endswith("rect")]
    assert float(bars[0].attrib["width"]) > 200  # the bar still has room
    stacked = stacked_bars([(long, [1.0, 1.0])], ["local", "remote"])
    assert long in _texts(stacked)


def test_wide_tables_and_charts_scroll_in_their_own_box() -> None:
    wide = [{f"a_rather_long_column_name_{i}": 123456.789 for i in range(30)}]
    page = render_report({}, {"top_clients": [{"client_id": "c", "requests": 1, **wide[0]}],
                              "errors_by_code": [{"api": "Produce", "error": "X",
                                                  "count": 1}]})
    css = re.search(r"<style>(.*?)</style>", page, re.DOTALL)
    assert css and re.search(r"\.scroll\{overflow-x:auto", css.group(1))
    assert re.search(r"\.chart\{overflow-x:auto", css.group(1))
    for match in re.finditer(r"<table", page):
        before = page[:match.start()]
        assert before.endswith('<div class="scroll">'), page[match.start() - 80:match.start()]
    for match in re.finditer(r"<svg", page):
        assert page[:match.start()].endswith('<div class="chart">')


def test_value_axis_ticks_are_round_without_spurious_decimals() -> None:
    from trio_broker.analytics.charts import axis_ticks

    assert [text for _, text in axis_ticks(75.0)] == ["0", "20", "40", "60", "80"]
    assert [text for _, text in axis_ticks(100.0)] == ["0", "20", "40", "60", "80", "100"]
    assert [text for _, text in axis_ticks(0.3)] == ["0", "0.1", "0.2", "0.3"]
    assert [text for _, text in axis_ticks(2.0, integer=True)] == ["0", "1", "2"]
    svg = line_chart({"q": [("2026-03-14T09:00:00Z", 12.0), ("2026-03-14T09:01:00Z", 75.0)]})
    labels = [t for t in _texts(svg) if re.fullmatch(r"[\d.,]+", t)]
    assert labels == ["0", "20", "40", "60", "80"], labels
    assert ".5" not in "".join(_texts(svg))  # was 18.750, 37.500, 56.250 on a 0..75 axis
    idle = line_chart({"idle": [("2026-03-14T09:00:00Z", 50.0)]}, unit="%", y_max=100.0)
    assert "40%" in _texts(idle) and "25%" not in _texts(idle)


def test_a_short_series_has_markers_and_per_minute_ticks() -> None:
    svg = line_chart({"accepted": [("2026-03-14T09:00:00Z", 3),
                                   ("2026-03-14T09:01:00Z", 5)]}, per_minute=True)
    root = ElementTree.fromstring(svg)
    circles = [e for e in root.iter() if e.tag.endswith("circle")]
    assert len(circles) == 2  # each point seen, not just a diagonal
    assert {c.find("{http://www.w3.org/2000/svg}title").text for c in circles} == \
        {"accepted at 09:00: 3", "accepted at 09:01: 5"}  # type: ignore[union-attr]
    # Half a minute of room each side: neither point sits on the frame's edge.
    xs = sorted(float(c.attrib["cx"]) for c in circles)
    assert xs[0] > 60 + 20 and xs[1] < 720 - 20 - 20
    assert [t for t in _texts(svg) if re.fullmatch(r"\d\d:\d\d(:\d\d)?", t)] == \
        ["09:00", "09:01"]
    many = line_chart({"s": [(f"2026-03-14T{9 + i // 60:02d}:{i % 60:02d}:00Z", i)
                             for i in range(100)]})
    assert "<circle" not in many  # a long series is a line


def test_throttled_clients_show_duration_and_ended_throttles() -> None:
    rows = [{"client_id": "reports", "throttle_events": 4, "throttles_ended": 3,
             "throttle_event_ms": 900.0, "max_throttle_ms": 400.0, "total_throttle_ms": 900.0,
             "throttled_requests": 4, "users": ["User:reports"],
             "quota_types": ["consumer_byte_rate"]}]
    section = _section_of(render_report({}, {"throttled_clients": rows}), "throttled")
    for heading in ("throttles started", "ended (connection unmuted)",
                    "not ended by the log&#x27;s end", "total throttle ms",
                    "longest throttle ms", "throttled requests", "quota types"):
        assert heading in section, heading
    row = re.search(r"<tr><td[^>]*>reports</td>(.*?)</tr>", section)
    assert row
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(1))
    assert cells[:6] == ["4", "3", "1", "900", "400", "4"], cells
    assert "User:reports" in section and "consumer_byte_rate" in section


def test_idle_chart_shows_the_minutes_lowest_snapshot_as_well_as_the_average() -> None:
    timeline = [
        {"ts": "2026-03-14T09:00:00Z", "broker": 1, "snapshots": 6,
         "network_processor_avg_idle_percent": 0.8, "min_network_processor_avg_idle_percent": 0.1,
         "request_handler_avg_idle_percent": 0.7, "min_request_handler_avg_idle_percent": 0.5,
         "request_queue_size": 2.5, "max_request_queue_size": 40},
        {"ts": "2026-03-14T09:00:00Z", "broker": 2, "snapshots": 2,
         "network_processor_avg_idle_percent": 0.4, "min_network_processor_avg_idle_percent": 0.3,
         "request_handler_avg_idle_percent": 0.7, "min_request_handler_avg_idle_percent": 0.6,
         "request_queue_size": 1.0, "max_request_queue_size": 3},
        {"ts": "2026-03-14T09:01:00Z", "broker": 1, "snapshots": 6,
         "network_processor_avg_idle_percent": 0.9, "min_network_processor_avg_idle_percent": 0.85,
         "request_handler_avg_idle_percent": 0.9, "min_request_handler_avg_idle_percent": 0.8}]
    section = _section_of(render_report({}, {"metrics_timeline": timeline}), "saturation")
    # One point per minute (not per broker row): the average weighted by snapshots, the
    # lowest over the brokers.
    assert "network idle % (average) at 09:00: 70%" in section  # (0.8*6 + 0.4*2) / 8
    assert "network idle % (lowest) at 09:00: 10%" in section
    assert "network idle % (lowest) at 09:01: 85%" in section
    assert "stroke-dasharray" in section  # the lowest drawn dashed
    queue = _section_of(render_report({}, {"metrics_timeline": timeline}), "queue")
    assert "request_queue_size (largest) at 09:00: 40" in queue


def test_slowest_requests_say_they_are_ranked_by_service_time() -> None:
    rows = [{"ts": "2026-03-14T09:00:00Z", "api": "Fetch", "client_id": "c",
             "service_ms": 12.0, "expected_wait_ms": 500.0, "total_ms": 512.0, "waited": True}]
    section = _section_of(render_report({}, {"latency_by_api": [{"api": "Fetch"}],
                                             "slowest_requests": rows}), "latency")
    head = re.search(r"<h3>Slowest requests.*?</tr>", section, re.DOTALL)
    assert head
    assert "service ms (ranked by this)" in head.group(0)
    assert "expected wait ms (set aside)" in head.group(0)
    assert "total ms (wait included)" in head.group(0)
    assert "failed login" in head.group(0) and "long poll" in head.group(0)
    assert 'title="service_ms"' in head.group(0)  # the Parquet column name, as tooltip


def test_times_without_a_fraction_keep_their_seconds() -> None:
    from trio_broker.analytics.charts import _fmt

    assert _fmt("2026-03-14T09:07:00Z") == "2026-03-14 09:07:00"
    assert _fmt("2026-03-14T09:07:10Z") == "2026-03-14 09:07:10"
    assert _fmt("2026-03-14T09:07:10.250000Z") == "2026-03-14 09:07:10.25"


def test_idle_ratios_in_tables_read_as_percent() -> None:
    rows = [{"minute": "2026-03-14T09:00:00Z", "broker": 1, "avg_network_idle_percent": 0.595,
             "min_network_idle_percent": 0.451, "avg_handler_idle_percent": 0.635}]
    section = _section_of(render_report({}, {"saturation_by_minute": rows}), "saturation")
    assert "59.5%" in section and "45.1%" in section and "0.595" not in section


def test_the_event_loop_section_names_who_held_the_loop() -> None:
    rows = [{"api": "OffsetCommit", "client_id": "bulk-committer",
             "where": "handle_offset_commit (offset_commit.py:40)", "count": 3,
             "max_duration_ms": 412.5, "total_duration_ms": 901.0,
             "first_seen": "2026-11-28T01:00:00Z", "last_seen": "2026-11-28T01:05:00Z"}]
    section = _section_of(render_report({}, {"event_loop_blocked": rows}), "event-loop")
    for text in ("OffsetCommit", "bulk-committer", "offset_commit.py:40", "412.5", "901"):
        assert text in section, text
    assert 'class="empty"' not in section
