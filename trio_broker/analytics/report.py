"""``report.html``: one self-contained page, charts drawn as inline SVG (no plotting library).

Pure Python over the collected tables, so it is testable without Spark. Each section names the
symptom it diagnoses (the seeds' troubleshooting guide, §9.2) and the table it comes from.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

_PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
            "#ff9da7", "#9c755f", "#bab0ac")
_WIDTH = 720
_MAX_POINTS = 600
_MAX_ROWS = 25
_ISO_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em auto;max-width:1000px;
color:#222;padding:0 1em;overflow-wrap:anywhere}
h1{font-size:1.6em}h2{margin-top:2em;border-bottom:1px solid #ccc;padding-bottom:.2em}
.symptom{color:#a33;font-weight:600}.hint{color:#555}
table{border-collapse:collapse;font-size:.85em;margin:.6em 0}
th,td{border:1px solid #ddd;padding:2px 6px;text-align:right;white-space:nowrap}th{background:#f4f4f4}
td.l,th.l{text-align:left}.kv td,.kv th{text-align:left;white-space:normal}.empty{color:#777;font-style:italic}
.scroll{overflow-x:auto;max-width:100%}td.pre{white-space:pre;text-align:left;font-family:monospace}
.warning{color:#a60;font-weight:600}
svg{display:block;margin:.6em 0;max-width:100%;height:auto}svg text{font-size:11px;fill:#333}
"""


def _esc(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value == int(value) and abs(value) < 1e15:
            return f"{int(value):,}" if abs(value) >= 1000 else f"{value:g}"
        return f"{value:,.3f}" if abs(value) < 1000 else f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    if isinstance(value, str) and _ISO_RE.match(value):
        # 2026-03-14T09:00:00.250000Z -> 2026-03-14 09:00:00.25 (the page says times are UTC)
        day, clock = value[:-1].split("T")
        return f"{day} {clock.rstrip('0').rstrip('.')}"
    return str(value)


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    magnitude = 10 ** len(str(int(value)))
    for step in (0.1, 0.2, 0.25, 0.5, 1.0):
        if value <= magnitude * step:
            return magnitude * step
    return float(magnitude)


def bar_chart(items: Sequence[tuple[str, float]], *, unit: str = "", title: str = "") -> str:
    """Horizontal bars, one per (label, value), largest first as given (nothing when empty:
    the table beside it, or the section, says why)."""
    if not items:
        return ""
    bar_h, label_w, gap = 18, 220, 4
    height = len(items) * (bar_h + gap) + 24
    top = _nice_max(max(v for _, v in items))
    plot_w = _WIDTH - label_w - 90
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" viewBox="0 0 {_WIDTH} {height}" '
             f'role="img" aria-label="{_esc(title)}">']
    if title:
        parts.append(f'<title>{_esc(title)}</title>')
    for index, (label, value) in enumerate(items):
        y = 4 + index * (bar_h + gap)
        width = 0 if top <= 0 else max(0.0, value) / top * plot_w
        short = label if len(label) <= 34 else label[:33] + "…"
        parts.append(f'<text x="{label_w - 6}" y="{y + bar_h - 5}" text-anchor="end">'
                     f'{_esc(short)}</text>')
        parts.append(f'<rect x="{label_w}" y="{y}" width="{width:.1f}" height="{bar_h}" '
                     f'fill="{_PALETTE[index % len(_PALETTE)]}"><title>{_esc(label)}: '
                     f'{_esc(_fmt(value))}{_esc(unit)}</title></rect>')
        parts.append(f'<text x="{label_w + width + 4:.1f}" y="{y + bar_h - 5}">'
                     f'{_esc(_fmt(value))}{_esc(unit)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def stacked_bars(items: Sequence[tuple[str, Sequence[float]]], keys: Sequence[str],
                 *, title: str = "") -> str:
    """One horizontal bar per label split into shares (each row's values sum to about 1)."""
    if not items:
        return ""
    bar_h, label_w, gap = 18, 160, 4
    plot_w = _WIDTH - label_w - 20
    legend_h = 22
    height = legend_h + len(items) * (bar_h + gap) + 8
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" viewBox="0 0 {_WIDTH} {height}" '
             f'role="img" aria-label="{_esc(title)}">']
    x = label_w
    for index, key in enumerate(keys):
        parts.append(f'<rect x="{x}" y="4" width="10" height="10" '
                     f'fill="{_PALETTE[index % len(_PALETTE)]}"/>')
        parts.append(f'<text x="{x + 13}" y="13">{_esc(key)}</text>')
        x += 14 + 7 * len(key) + 10
    for row, (label, values) in enumerate(items):
        y = legend_h + row * (bar_h + gap)
        parts.append(f'<text x="{label_w - 6}" y="{y + bar_h - 5}" text-anchor="end">'
                     f'{_esc(label)}</text>')
        total = sum(max(0.0, v) for v in values) or 1.0
        offset = float(label_w)
        for index, value in enumerate(values):
            width = max(0.0, value) / total * plot_w
            if width <= 0:
                continue
            parts.append(f'<rect x="{offset:.1f}" y="{y}" width="{width:.1f}" height="{bar_h}" '
                         f'fill="{_PALETTE[index % len(_PALETTE)]}"><title>{_esc(label)} '
                         f'{_esc(keys[index])}: {value / total:.1%}</title></rect>')
            offset += width
    parts.append("</svg>")
    return "".join(parts)


def _as_time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    return None


_TICK_STEPS = (1, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600,
               43200, 86400, 172800, 604800)


def time_ticks(x0: float, x1: float, most: int = 6) -> list[tuple[float, str, str]]:
    """Up to ``most`` round times between ``x0`` and ``x1`` (epoch seconds), labelled
    ``HH:MM`` (``HH:MM:SS`` below a minute's step, with the date when the span crosses days)."""
    span = max(x1 - x0, 1.0)
    step = next((s for s in _TICK_STEPS if span / s <= most), _TICK_STEPS[-1])
    first = float(math.ceil(x0 / step) * step)
    days = datetime.fromtimestamp(x0, UTC).date() != datetime.fromtimestamp(x1, UTC).date()
    fmt = "%H:%M:%S" if step < 60 else "%H:%M"
    if days:
        fmt = "%m-%d " + fmt
    ticks: list[tuple[float, str, str]] = []
    x = first
    while x <= x1 + 1e-9:
        anchor = "start" if x - x0 < span * 0.04 else "end" if x1 - x < span * 0.04 else "middle"
        ticks.append((x, datetime.fromtimestamp(x, UTC).strftime(fmt), anchor))
        x += step
    if not ticks:
        ticks.append((x0, datetime.fromtimestamp(x0, UTC).strftime(fmt), "start"))
    return ticks


def _span_label(x0: float, x1: float) -> str:
    start = datetime.fromtimestamp(x0, UTC).strftime("%Y-%m-%d %H:%M:%S")
    end = datetime.fromtimestamp(x1, UTC).strftime("%Y-%m-%d %H:%M:%S")
    return f"UTC, {start} to {end}"


def line_chart(series: Mapping[str, Sequence[tuple[Any, float | None]]], *, unit: str = "",
               title: str = "", y_max: float | None = None) -> str:
    """Lines over time: ``series`` maps a name to (timestamp, value) points."""
    points: dict[str, list[tuple[float, float]]] = {}
    for name, raw in series.items():
        converted = []
        for moment, value in raw:
            parsed = _as_time(moment)
            if parsed is not None and value is not None:
                converted.append((parsed.timestamp(), float(value)))
        converted.sort()
        if len(converted) > _MAX_POINTS:  # keep the chart light: sample evenly
            stride = len(converted) / _MAX_POINTS
            converted = [converted[int(i * stride)] for i in range(_MAX_POINTS)]
        if converted:
            points[name] = converted
    if not points:
        return '<p class="empty">no data points in these logs</p>'
    left, right, top_pad, bottom = 60, 20, 24, 44
    height = 250
    plot_w, plot_h = _WIDTH - left - right, height - top_pad - bottom
    xs = [x for line in points.values() for x, _ in line]
    ys = [y for line in points.values() for _, y in line]
    x0, x1 = min(xs), max(xs)
    if x1 == x0:
        x1 = x0 + 1
    top = y_max if y_max is not None else _nice_max(max(ys))

    def sx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * plot_w

    def sy(y: float) -> float:
        return top_pad + plot_h - (min(y, top) / top if top else 0) * plot_h

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" viewBox="0 0 {_WIDTH} {height}" '
             f'role="img" aria-label="{_esc(title)}">']
    for fraction in (0, 0.25, 0.5, 0.75, 1.0):
        y = top_pad + plot_h - fraction * plot_h
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" '
                     f'stroke="#eee"/>')
        parts.append(f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">'
                     f'{_esc(_fmt(top * fraction))}{_esc(unit)}</text>')
    for x, label, anchor in time_ticks(x0, x1):
        parts.append(f'<line x1="{sx(x):.1f}" y1="{top_pad}" x2="{sx(x):.1f}" '
                     f'y2="{top_pad + plot_h + 4}" stroke="#eee"/>')
        parts.append(f'<text x="{sx(x):.1f}" y="{height - 20}" text-anchor="{anchor}">'
                     f'{_esc(label)}</text>')
    parts.append(f'<text x="{left + plot_w}" y="{height - 4}" text-anchor="end">'
                 f'{_esc(_span_label(x0, x1))}</text>')
    legend_x = left
    for index, (name, line) in enumerate(points.items()):
        color = _PALETTE[index % len(_PALETTE)]
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in line)
        if len(line) == 1:
            x, y = line[0]
            parts.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{color}"/>')
        else:
            parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" '
                         f'points="{path}"/>')
        parts.append(f'<rect x="{legend_x}" y="6" width="10" height="10" fill="{color}"/>')
        parts.append(f'<text x="{legend_x + 13}" y="15">{_esc(name)}</text>')
        legend_x += 14 + 7 * len(name) + 12
    parts.append("</svg>")
    return "".join(parts)


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None,
          *, limit: int = _MAX_ROWS,
          empty: str = "no rows: this did not happen in these logs") -> str:
    """An HTML table of the first ``limit`` rows (all columns unless named), in a box that
    scrolls sideways when the table is wider than the page; ``empty`` stands in for no rows."""
    if not rows:
        return f'<p class="empty">{_esc(empty)}</p>' if empty else ""
    names = list(columns) if columns is not None else list(rows[0].keys())
    head = "".join(f'<th class="l">{_esc(n)}</th>' if i == 0 else f"<th>{_esc(n)}</th>"
                   for i, n in enumerate(names))
    body = []
    for row in rows[:limit]:
        cells = []
        for i, name in enumerate(names):
            value = row.get(name)
            if isinstance(value, str) and "\n" in value:
                css = ' class="pre"'
            elif i == 0 or isinstance(value, str):
                css = ' class="l"'
            else:
                css = ""
            cells.append(f"<td{css}>{_esc(_fmt(value))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    more = (f'<p class="hint">{len(rows) - limit:,} more rows in the Parquet table.</p>'
            if len(rows) > limit else "")
    return f'<div class="scroll"><table><tr>{head}</tr>{"".join(body)}</table></div>{more}'


def _section(anchor: str, title: str, symptom: str, source: str, body: str,
             empty: str | None = None) -> str:
    """A section; with ``empty`` (why there is nothing to show) that one line stands for the
    body."""
    content = f'<p class="empty">{_esc(empty)}</p>' if empty else body
    return (f'<section id="{_esc(anchor)}"><h2>{_esc(title)}</h2>'
            f'<p><span class="symptom">Symptom: {_esc(symptom)}.</span> '
            f'<span class="hint">From {_esc(source)}.</span></p>{content}</section>')


def _worst_first(rows: Sequence[Mapping[str, Any]], key: str,
                 descending: bool = True) -> list[Mapping[str, Any]]:
    """Rows ordered by ``key``, worst first (missing values last)."""
    present = [r for r in rows if r.get(key) is not None]
    missing = [r for r in rows if r.get(key) is None]
    return sorted(present, key=lambda r: r[key], reverse=descending) + missing


def _percent(ratio: Any) -> float | None:
    # The *_idle_percent gauges are ratios from 0 to 1 (as Kafka's are); the chart shows percent.
    return None if ratio is None else float(ratio) * 100.0


def _counts(mapping: Mapping[str, Any]) -> list[tuple[str, float]]:
    return sorted(((str(k), float(v)) for k, v in mapping.items() if v),
                  key=lambda kv: (-kv[1], kv[0]))


def render_report(summary: Mapping[str, Any], tables: Mapping[str, list[dict[str, Any]]]) -> str:
    """The whole page."""
    from .jobs import STAGES  # no pyspark import: jobs imports it lazily

    sections: list[str] = []
    rng = summary.get("time_range", {})
    unknown = summary.get("unknown_events") or {}
    facts = [
        ("Log lines read (blank ones not counted)", summary.get("lines")),
        ("Usable broker events", summary.get("usable_lines")),
        ("Unusable lines (skipped; by reason below)", summary.get("unusable_lines")),
        ("First event", rng.get("first")), ("Last event", rng.get("last")),
        ("Requests", summary.get("requests")),
        ("Connections refused", sum(summary.get("rejected_connections", {}).values())),
        ("Undeclared events (from a newer broker?)",
         ", ".join(f"{name} ({count:,})" for name, count in unknown.items()) or "none"),
        ("Schema version", summary.get("schema_version")),
    ]
    overview = "<div class=\"scroll\"><table class=\"kv\">" + "".join(
        f"<tr><th class=\"l\">{_esc(k)}</th><td>{_esc(_fmt(v))}</td></tr>" for k, v in facts
    ) + "</table></div>" + "<p class=\"hint\">Inputs: " + _esc(", ".join(summary.get("inputs", []))) \
        + "</p>"
    overview += "".join(f'<p class="warning">Warning: {_esc(w)}</p>'
                        for w in summary.get("warnings", []))
    unusable = summary.get("unusable") or {}
    if unusable:
        overview += "<h3>Unusable lines by reason</h3>" + table(
            [{"reason": reason, "lines": entry.get("count"),
              "samples (file:line: text)": "\n".join(entry.get("samples", []))}
             for reason, entry in sorted(unusable.items(), key=lambda kv: -kv[1]["count"])],
            empty="")

    rejected = tables.get("rejected_connections", [])
    sections.append(_section(
        "rejected", "Connections refused",
        "clients cannot connect or are refused (check max.connections.per.ip, listener quotas, "
        "connection rate limits)", "connection_rejected",
        "<h3>By reason</h3>" + bar_chart(_counts(summary.get("rejected_connections", {})),
                                         title="refused connections by reason")
        + "<h3>By IP</h3>" + bar_chart(_counts(summary.get("rejected_connections_by_ip", {}))[:15],
                                       title="refused connections by IP")
        + table(rejected, ["ip", "listener", "reason", "count", "limit", "first_seen",
                           "last_seen"]),
        empty=None if rejected else "No connection was refused in these logs."))
    closed = tables.get("closed_connections", [])
    churn = tables.get("connection_churn_by_minute", [])
    churn_chart = line_chart({
        name: [(r["minute"], r.get(name)) for r in churn]
        for name in ("accepted", "closed", "expired", "refused", "connection_count")},
        title="connections per minute")
    sections.append(_section(
        "closed", "Connections: churn and closes",
        "clients are disconnected unexpectedly, or connect and disconnect too often",
        "connection_accepted, connection_closed, connection_expired, connection_rejected, "
        "metrics_snapshot (connection_count)",
        "<h3>Per minute</h3>" + churn_chart
        + "<h3>Closed by reason</h3>"
        + bar_chart(_counts(summary.get("closed_connections", {})), title="closed by reason")
        + table(closed, empty="No connection was closed in these logs.")
        + "<h3>Busiest minutes first</h3>"
        + table([{**r, "closed_by_reason": ", ".join(
            f"{k}: {v}" for k, v in (r.get("closed_by_reason") or {}).items())}
                 for r in sorted(churn, key=lambda r: -sum(
                     int(r.get(k) or 0) for k in ("accepted", "closed", "expired",
                                                  "refused")))],
                ["minute", "accepted", "closed", "expired", "refused", "connection_count",
                 "closed_by_reason"]),
        empty=None if churn else "No connection was accepted, closed or refused in these "
                                 "logs (and no metrics snapshot counted connections)."))
    frames = tables.get("invalid_frames", [])
    sections.append(_section(
        "invalid", "Invalid frames",
        "clients send frames the broker refuses and is disconnected for (wrong protocol, "
        "oversized or corrupt requests)", "invalid_request",
        bar_chart(_counts(summary.get("invalid_frames_by_reason", {})),
                  title="invalid frames by reason")
        + table(frames, ["reason", "peer", "count", "max_size", "api_keys", "example_detail",
                         "first_seen", "last_seen"]),
        empty=None if frames else "No invalid frame in these logs."))

    timeline = tables.get("metrics_timeline", [])
    idle_chart = line_chart({
        "network processor idle %": [
            (r["ts"], _percent(r.get("network_processor_avg_idle_percent"))) for r in timeline],
        "request handler idle %": [
            (r["ts"], _percent(r.get("request_handler_avg_idle_percent"))) for r in timeline],
    }, unit="%", title="idle percent over time", y_max=100.0)
    saturation = tables.get("saturation_by_minute", [])
    mutes = tables.get("mutes_by_reason", [])
    sections.append(_section(
        "saturation", "I/O and processor saturation",
        "requests are slow although the business logic is normal (slow I/O: low "
        "NetworkProcessorAvgIdlePercent, frequent mute/unmute)",
        "metrics_snapshot, connection_muted, connection_unmuted, throttle_started",
        "<h3>Idle percent over time</h3>" + idle_chart
        + "<h3>Mutes by reason</h3>"
        + bar_chart([(str(r["reason"]), float(r["mutes"] or 0)) for r in mutes],
                    title="mutes by reason")
        + table(mutes, empty="No connection was muted in these logs.")
        + "<h3>Per minute, least idle first</h3>"
        + table(_worst_first(saturation, "min_network_idle_percent", descending=False)),
        empty=None if timeline or saturation or mutes else
        "No metrics snapshot, mute or throttle in these logs (snapshots are written every "
        "logging.metrics.snapshot.interval.ms; 0 turns them off)."))

    queue_rows = tables.get("request_queue_by_minute", [])
    sections.append(_section(
        "queue", "Request queue blocking",
        "requests enter slowly while the handlers are idle (RequestQueueSize high, memory pool "
        "exhausted, too few num.io.threads, very large requests)",
        "request (request_queue_ms), metrics_snapshot (request_queue_size, memory_pool_*)",
        "<h3>Request queue size over time</h3>"
        + line_chart({"request_queue_size": [(r["ts"], r.get("request_queue_size"))
                                             for r in timeline],
                      "response_queue_size": [(r["ts"], r.get("response_queue_size"))
                                              for r in timeline]},
                     title="queue sizes over time")
        + "<h3>Queue time per minute</h3>"
        + line_chart({"p95 request_queue_ms": [(r["minute"], r.get("p95_request_queue_ms"))
                                               for r in queue_rows],
                      "max request_queue_ms": [(r["minute"], r.get("max_request_queue_ms"))
                                               for r in queue_rows]},
                     unit=" ms", title="request queue time per minute")
        + "<h3>Worst minutes first (p99 service time)</h3>"
        + table(_worst_first(queue_rows, "p99_service_ms"),
                ["minute", "broker", "requests", "errors", "p99_service_ms",
                 "avg_request_queue_ms", "p95_request_queue_ms", "max_request_queue_ms",
                 "max_request_queue_size", "min_memory_pool_available",
                 "avg_handler_idle_percent"]),
        empty=None if queue_rows or timeline else "No request line or metrics snapshot in "
                                                  "these logs."))

    latency = tables.get("latency_by_api", [])
    shares = [(str(r["api"]), [float(r.get(f"{s.removesuffix('_ms')}_share") or 0.0)
                               for s in STAGES]) for r in latency]
    sections.append(_section(
        "latency", "Slow request handling",
        "handlers are busy and responses are slow (a specific API, callbacks, too few "
        "num.io.threads)", "request (total_ms and its stages)",
        "<h3>Where the time goes, per API</h3>"
        + stacked_bars(shares, [s.removesuffix("_ms") for s in STAGES], title="stage shares")
        + "<h3>p99 service time per API</h3><p class=\"hint\">Service time is the total time "
          "less the waiting asked for: a Fetch's long poll (remote time, up to "
          f"{_fmt(summary.get('fetch_max_wait_ms', 500.0))} ms) and a JoinGroup's or "
          "SyncGroup's rebalance wait.</p>"
        + bar_chart([(str(r["api"]), float(r.get("p99_service_ms") or 0.0)) for r in latency],
                    unit=" ms", title="p99 service_ms")
        + table(latency, ["api", "requests", "errors", "p50_total_ms", "p95_total_ms",
                          "p99_total_ms", "max_total_ms", "p99_service_ms",
                          *(f"p99_{s}" for s in STAGES)])
        + "<h3>Slowest requests (expected waits set aside)</h3>"
        + table(tables.get("slowest_requests", []),
                ["ts", "api", "client_id", "service_ms", "expected_wait_ms", "total_ms",
                 "waited", "dominant_stage", *STAGES, "error", "connection_id"]),
        empty=None if latency else "No request line in these logs."))

    by_client = tables.get("latency_by_client", [])
    sections.append(_section(
        "slow-clients", "Slow clients",
        "some clients see slow responses (their APIs, their request sizes, their connection)",
        "request (client_id, api, total_ms)",
        "<h3>p99 service time per client</h3>"
        + bar_chart([(str(r["client_id"]), float(r.get("p99_service_ms") or 0.0))
                     for r in by_client[:15]], unit=" ms", title="p99 service_ms by client")
        + table(by_client, ["client_id", "requests", "errors", "p50_total_ms", "p95_total_ms",
                            "p99_total_ms", "p50_service_ms", "p95_service_ms",
                            "p99_service_ms", "max_service_ms"])
        + "<h3>Per client and API, slowest first</h3>"
        + table(tables.get("latency_by_client_api", []),
                ["client_id", "api", "requests", "errors", "p50_total_ms", "p95_total_ms",
                 "p99_total_ms", "p99_service_ms", "max_service_ms"]),
        empty=None if by_client else "No request line in these logs."))

    errors = tables.get("errors_by_code", [])
    sections.append(_section(
        "errors", "Errors by API and code",
        "requests fail (which API, which error code, how many clients)",
        "request (api, error)",
        bar_chart([(f"{r['api']}: {r['error']}", float(r["count"])) for r in errors[:20]],
                  title="failed requests by API and error code")
        + table(errors, ["api", "error", "count", "clients", "first_seen", "last_seen"]),
        empty=None if errors else "Every request in these logs succeeded (error NONE)."))

    clients = tables.get("top_clients", [])
    by_bytes = sorted(clients, key=lambda r: -(r.get("total_bytes") or 0))
    sections.append(_section(
        "clients", "Top clients", "one client overloads the broker",
        "request (client_id, request_bytes, response_bytes)",
        "<h3>By requests</h3>"
        + bar_chart([(str(r["client_id"]), float(r["requests"])) for r in clients[:15]])
        + "<h3>By bytes (in + out)</h3>"
        + bar_chart([(str(r["client_id"]), float(r.get("total_bytes") or 0))
                     for r in by_bytes[:15]], unit=" B")
        + table(clients, ["client_id", "requests", "request_bytes", "response_bytes",
                          "total_bytes", "connections", "client_software_name",
                          "client_software_version", "apis"])))
    throttled = tables.get("throttled_clients", [])
    sections.append(_section(
        "throttled", "Throttled clients", "clients are slowed down by quotas (KIP-219)",
        "throttle_started, request (throttle_ms)",
        bar_chart([(str(r["client_id"]), float(r.get("total_throttle_ms") or 0.0))
                   for r in throttled[:15]], unit=" ms")
        + table(throttled)))
    sections.append(_section(
        "groups", "Consumer-group rebalances",
        "consumers stall or re-read data: frequent group rebalances",
        "rebalance_started, rebalance_completed, group_join, member_left, member_expired",
        bar_chart(_counts(summary.get("group_rebalances", {})), title="rebalances by group")
        + table(tables.get("group_rebalances", [])),
        empty=None if tables.get("group_rebalances") else
        "No consumer-group event in these logs (no group used this broker)."))
    failures = tables.get("authentication_failures", [])
    sections.append(_section(
        "authentication", "Authentication failures by principal and IP",
        "clients cannot authenticate (wrong password or certificate), or someone guesses "
        "passwords", "authentication_failed",
        bar_chart([(f"{r['principal'] or '(none)'} from {r['ip']}", float(r["failures"]))
                   for r in failures[:15]])
        + table(failures),
        empty=None if failures else "No authentication failure in these logs."))
    txns = tables.get("transactions", [])
    sections.append(_section(
        "transactions", "Transactions",
        "read_committed consumers stall (a long open transaction holds the LSO) or "
        "exactly-once jobs fail (aborts, timeouts, fencing)",
        "transaction_committed, transaction_aborted, transaction_timed_out, transaction_fenced",
        bar_chart([(str(r["transactional_id"]), float(r.get("max_open_ms") or 0.0))
                   for r in txns[:15]], unit=" ms", title="longest open time by id")
        + table(txns),
        empty=None if txns else "No transaction event in these logs (no transactional "
        "producer used this broker)."))

    toc = "".join(f'<li><a href="#{a}">{_esc(t)}</a></li>' for a, t in (
        ("rejected", "Connections refused"), ("closed", "Connections: churn and closes"),
        ("invalid", "Invalid frames"),
        ("saturation", "I/O and processor saturation"), ("queue", "Request queue blocking"),
        ("latency", "Slow request handling"), ("slow-clients", "Slow clients"),
        ("errors", "Errors by API and code"), ("clients", "Top clients"),
        ("throttled", "Throttled clients"), ("groups", "Consumer-group rebalances"),
        ("authentication", "Authentication failures"), ("transactions", "Transactions")))
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<title>trio_broker log analysis</title>"
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<style>{_CSS}</style></head><body><h1>trio_broker log analysis</h1>"
            "<p class=\"hint\">All times are UTC.</p>"
            f"{overview}<ul>{toc}</ul>{''.join(sections)}</body></html>\n")
