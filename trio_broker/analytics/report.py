"""``report.html``: one self-contained page, charts drawn as inline SVG (no plotting library).

Pure Python over the collected tables, so it is testable without Spark. Each section names the
symptom it diagnoses (the seeds' troubleshooting guide, §9.2) and the table it comes from.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from .charts import (
    _as_time,
    _esc,
    _Figure,
    _finite,
    _fmt,
    _num,
    bar_chart,
    line_chart,
    minute_columns,
    stacked_bars,
    table,
)

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em auto;max-width:1000px;
color:#222;padding:0 1em;overflow-wrap:anywhere}
h1{font-size:1.6em}h2{margin-top:2em;border-bottom:1px solid #ccc;padding-bottom:.2em}
.symptom{color:#a33;font-weight:600}.hint{color:#555}
table{border-collapse:collapse;font-size:.85em;margin:.6em 0}
th,td{border:1px solid #ddd;padding:2px 6px;text-align:right;white-space:nowrap}
th{background:#f4f4f4;white-space:normal;overflow-wrap:normal;vertical-align:bottom}
th.w{min-width:6.5em}
td.l,th.l{text-align:left}.kv td,.kv th{text-align:left;white-space:normal}.empty{color:#777;font-style:italic}
.scroll{overflow-x:auto;max-width:100%}td.pre{white-space:pre;text-align:left;font-family:monospace}
.warning{color:#a60;font-weight:600}
svg{display:block;margin:.6em 0;max-width:100%;height:auto}svg text{font-size:11px;fill:#333}
.chart{overflow-x:auto;max-width:100%}.chart svg{min-width:540px}
"""


def _as_percent(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> list[dict[str, Any]]:
    """``rows`` with the idle ratios (0 to 1) of ``columns`` written as percent, as the charts
    show them (59.5%, not 0.595)."""
    shown = []
    for row in rows:
        copy = dict(row)
        for column in columns:
            value = _finite(row.get(column))
            if value is not None:
                copy[column] = _Figure(f"{value * 100:.1f}%")
        shown.append(copy)
    return shown


_CHART_RE = re.compile(r"<svg\b.*?</svg>", re.DOTALL)


def _section(anchor: str, title: str, symptom: str, source: str, body: str,
             empty: str | None = None) -> str:
    """A section; with ``empty`` (why there is nothing to show) that one line stands for the
    body."""
    # Each chart in a box of its own: on a narrow screen it shrinks only so far (its labels
    # stay legible), then scrolls sideways as a wide table does.
    content = f'<p class="empty">{_esc(empty)}</p>' if empty else _CHART_RE.sub(
        r'<div class="chart">\g<0></div>', body)
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
    return None if ratio is None else _num(ratio) * 100.0


def _counts(mapping: Mapping[str, Any]) -> list[tuple[str, float]]:
    return sorted(((str(k), _num(v)) for k, v in mapping.items() if v),
                  key=lambda kv: (-kv[1], kv[0]))


#: The idle ratios (0 to 1) of the per-minute tables, shown as percent.
_IDLE_COLUMNS = ("avg_network_idle_percent", "min_network_idle_percent",
                 "avg_handler_idle_percent")

#: The slowest requests' columns in plain words (the column name is the tooltip).
_SLOWEST_HEADINGS = {
    "ts": "time",
    "client_id": "client id",
    "service_ms": "service ms (ranked by this)",
    "expected_wait_ms": "expected wait ms (set aside)",
    "total_ms": "total ms (wait included)",
    "waited": "mostly the expected wait",
    "dominant_stage": "largest stage",
    "connection_id": "connection",
}

#: The throttled clients' columns, in order, in plain words.
_THROTTLE_HEADINGS = {
    "client_id": "client id",
    "throttle_events": "throttles started",
    "throttles_ended": "ended (connection unmuted)",
    "still_throttled": "not ended by the log's end",
    "total_throttle_ms": "total throttle ms",
    "max_throttle_ms": "longest throttle ms",
    "throttled_requests": "throttled requests",
    "users": "users",
    "quota_types": "quota types",
}


def _still_throttled(row: Mapping[str, Any]) -> int | None:
    started, ended = _finite(row.get("throttle_events")), _finite(row.get("throttles_ended"))
    if started is None or ended is None:
        return None
    return max(0, int(started - ended))


def _minute_groups(rows: Sequence[Mapping[str, Any]], key: str) -> dict[Any, list[Mapping[str, Any]]]:
    groups: dict[Any, list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row.get(key), []).append(row)
    return groups


def _weighted_average(rows: Sequence[Mapping[str, Any]], field: str) -> float | None:
    """The average of ``field`` over brokers' rows of one minute, weighted by snapshots."""
    total = weight = 0.0
    for row in rows:
        value = _finite(row.get(field))
        if value is None:
            continue
        snapshots = _finite(row.get("snapshots"))
        share = snapshots if snapshots is not None and snapshots > 0 else 1.0
        total += value * share
        weight += share
    return total / weight if weight else None


def _extreme(rows: Sequence[Mapping[str, Any]], field: str, lowest: bool) -> float | None:
    values = [v for row in rows if (v := _finite(row.get(field))) is not None]
    if not values:
        return None
    return min(values) if lowest else max(values)


def _idle_chart(timeline: Sequence[Mapping[str, Any]]) -> str:
    """Idle percent per minute: the average (solid) and the lowest snapshot (dashed) of the
    network processors and of the request handlers, over all brokers."""
    series: dict[str, list[tuple[Any, float | None]]] = {}
    colors: dict[str, int] = {}
    dashed: list[str] = []
    for color, (gauge, label) in enumerate((("network_processor_avg_idle_percent", "network"),
                                            ("request_handler_avg_idle_percent", "handler"))):
        average, lowest = f"{label} idle % (average)", f"{label} idle % (lowest)"
        series[average], series[lowest] = [], []
        colors[average] = colors[lowest] = color
        dashed.append(lowest)
        for minute, rows in _minute_groups(timeline, "ts").items():
            series[average].append((minute, _percent(_weighted_average(rows, gauge))))
            series[lowest].append((minute, _percent(_extreme(rows, f"min_{gauge}", True))))
    return line_chart(series, unit="%", title="idle percent per minute", y_max=100.0,
                      per_minute=True, dashed=dashed, colors=colors)


def _queue_chart(timeline: Sequence[Mapping[str, Any]]) -> str:
    """Queue sizes per minute: the average of the snapshots and the largest one."""
    series: dict[str, list[tuple[Any, float | None]]] = {}
    colors: dict[str, int] = {}
    dashed: list[str] = []
    for color, name in enumerate(("request_queue_size", "response_queue_size")):
        average, largest = f"{name} (average)", f"{name} (largest)"
        series[average], series[largest] = [], []
        colors[average] = colors[largest] = color
        dashed.append(largest)
        for minute, rows in _minute_groups(timeline, "ts").items():
            series[average].append((minute, _weighted_average(rows, name)))
            series[largest].append((minute, _extreme(rows, f"max_{name}", False)))
    return line_chart(series, title="queue sizes per minute", per_minute=True, dashed=dashed,
                      colors=colors)


def _errors_chart(queue_rows: Sequence[Mapping[str, Any]]) -> str:
    """Failed requests per minute, a column per minute stacked by broker (with the minute's
    requests in the tooltip)."""
    series: dict[str, list[tuple[Any, Any]]] = {}
    notes: dict[tuple[str, float], str] = {}
    brokers = {row.get("broker") for row in queue_rows}
    for row in queue_rows:
        broker = row.get("broker")
        name = "failed requests" if len(brokers) == 1 else f"broker {broker}"
        series.setdefault(name, []).append((row.get("minute"), row.get("errors")))
        moment = _as_time(row.get("minute"))
        requests = _finite(row.get("requests"))
        if moment is not None and requests is not None:
            try:
                notes[(name, moment.timestamp())] = f" of {_fmt(int(requests))} requests"
            except (OverflowError, ValueError, OSError):
                continue
    if not any(_finite(errors) for line in series.values() for _, errors in line):
        return '<p class="empty">No request failed in these logs.</p>' if series else ""
    return minute_columns(series, title="failed requests per minute", notes=notes)


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
        title="connections per minute", per_minute=True)
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
                     _finite(r.get(k)) or 0.0 for k in ("accepted", "closed", "expired",
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
    idle_chart = _idle_chart(timeline)
    saturation = tables.get("saturation_by_minute", [])
    mutes = tables.get("mutes_by_reason", [])
    sections.append(_section(
        "saturation", "I/O and processor saturation",
        "requests are slow although the business logic is normal (slow I/O: low "
        "NetworkProcessorAvgIdlePercent, frequent mute/unmute)",
        "metrics_snapshot, connection_muted, connection_unmuted, throttle_started",
        "<h3>Idle percent per minute</h3><p class=\"hint\">The minute's average of the "
        "metrics snapshots (solid) and its lowest snapshot (dashed), over all brokers: a low "
        "dashed line is a burst of saturation the average hides.</p>" + idle_chart
        + "<h3>Mutes by reason</h3>"
        + bar_chart([(str(r["reason"]), _num(r["mutes"] or 0)) for r in mutes],
                    title="mutes by reason")
        + table(mutes, empty="No connection was muted in these logs.")
        + "<h3>Per minute, least idle first</h3>"
        + table(_as_percent(_worst_first(saturation, "min_network_idle_percent",
                                         descending=False), _IDLE_COLUMNS),
                headings={column: column.replace("_percent", " %").replace("_", " ")
                          for column in _IDLE_COLUMNS}),
        empty=None if timeline or saturation or mutes else
        "No metrics snapshot, mute or throttle in these logs (snapshots are written every "
        "logging.metrics.snapshot.interval.ms; 0 turns them off)."))

    blocked = tables.get("event_loop_blocked", [])
    sections.append(_section(
        "event-loop", "The event loop held",
        "every connection stalls at once: one request (a decompression bomb, thousands of "
        "partitions, a huge array) held the event loop they all share",
        "event_loop_blocked",
        table(blocked, ["api", "client_id", "where", "count", "max_duration_ms",
                        "total_duration_ms", "first_seen", "last_seen"]),
        empty=None if blocked else
        "The event loop was never held past event.loop.blocked.threshold.ms in these logs."))

    queue_rows = tables.get("request_queue_by_minute", [])
    sections.append(_section(
        "queue", "Request queue blocking",
        "requests enter slowly while the handlers are idle (RequestQueueSize high, memory pool "
        "exhausted, too few num.io.threads, very large requests)",
        "request (request_queue_ms), metrics_snapshot (request_queue_size, memory_pool_*)",
        "<h3>Request queue size per minute</h3>"
        + _queue_chart(timeline)
        + "<h3>Queue time per minute</h3>"
        + line_chart({"p95 request_queue_ms": [(r["minute"], r.get("p95_request_queue_ms"))
                                               for r in queue_rows],
                      "max request_queue_ms": [(r["minute"], r.get("max_request_queue_ms"))
                                               for r in queue_rows]},
                     unit=" ms", title="request queue time per minute", per_minute=True)
        + "<h3>Worst minutes first (p99 service time)</h3>"
        + table(_as_percent(_worst_first(queue_rows, "p99_service_ms"), _IDLE_COLUMNS),
                ["minute", "broker", "requests", "errors", "p99_service_ms",
                 "avg_request_queue_ms", "p95_request_queue_ms", "max_request_queue_ms",
                 "max_request_queue_size", "min_memory_pool_available",
                 "avg_handler_idle_percent"]),
        empty=None if queue_rows or timeline else "No request line or metrics snapshot in "
                                                  "these logs."))

    latency = tables.get("latency_by_api", [])
    shares = [(str(r["api"]), [_num(r.get(f"{s.removesuffix('_ms')}_share") or 0.0)
                               for s in STAGES]) for r in latency]
    sections.append(_section(
        "latency", "Slow request handling",
        "handlers are busy and responses are slow (a specific API, callbacks, too few "
        "num.io.threads)", "request (total_ms and its stages)",
        "<h3>Where the time goes, per API</h3>"
        + stacked_bars(shares, [s.removesuffix("_ms") for s in STAGES], title="stage shares")
        + "<h3>p99 service time per API</h3><p class=\"hint\">Service time is the total time "
          "less the waiting asked for: a Fetch's long poll (remote time, up to "
          f"{_fmt(summary.get('fetch_max_wait_ms', 500.0))} ms), a JoinGroup's or "
          "SyncGroup's rebalance wait and the deliberate delay before a failed login is "
          "answered.</p>"
        + bar_chart([(str(r["api"]), _num(r.get("p99_service_ms") or 0.0)) for r in latency],
                    unit=" ms", title="p99 service_ms")
        + table(latency, ["api", "requests", "errors", "p50_total_ms", "p95_total_ms",
                          "p99_total_ms", "max_total_ms", "p99_service_ms",
                          *(f"p99_{s}" for s in STAGES)])
        + "<h3>Slowest requests (expected waits set aside)</h3><p class=\"hint\">Ranked by "
          "service time: the request's total time less the waiting it was expected to do "
          "(a Fetch's long poll, a JoinGroup's or SyncGroup's rebalance wait, the deliberate "
          "delay before a failed login is answered). A request that only waited that long "
          "is not slow, and is not ranked as such.</p>"
        + table(tables.get("slowest_requests", []),
                ["ts", "api", "client_id", "service_ms", "expected_wait_ms", "total_ms",
                 "waited", "dominant_stage", *STAGES, "error", "connection_id"],
                headings=_SLOWEST_HEADINGS),
        empty=None if latency else "No request line in these logs."))

    by_client = tables.get("latency_by_client", [])
    sections.append(_section(
        "slow-clients", "Slow clients",
        "some clients see slow responses (their APIs, their request sizes, their connection)",
        "request (client_id, api, total_ms)",
        "<h3>p99 service time per client</h3>"
        + bar_chart([(str(r["client_id"]), _num(r.get("p99_service_ms") or 0.0))
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
    errors_by_client = tables.get("errors_by_client", [])
    sections.append(_section(
        "errors", "Errors by API and code",
        "requests fail (which API, which error code, which clients, since when)",
        "request (api, error, client_id)",
        "<h3>Failed requests per minute</h3>" + _errors_chart(queue_rows)
        + "<h3>By API and error code</h3>"
        + bar_chart([(f"{r['api']}: {r['error']}", _num(r["count"])) for r in errors[:20]],
                    title="failed requests by API and error code")
        + table(errors, ["api", "error", "count", "clients", "first_seen", "last_seen"],
                headings={"count": "failed requests", "clients": "client ids"})
        + "<h3>Which clients got which error (most first)</h3>"
        + table(errors_by_client, ["client_id", "api", "error", "count", "first_seen",
                                   "last_seen"],
                headings={"count": "failed requests"}),
        empty=None if errors or errors_by_client or any(
            _finite(r.get("errors")) for r in queue_rows) else
        "Every request in these logs succeeded (error NONE)."))

    clients = tables.get("top_clients", [])
    by_bytes = sorted(clients, key=lambda r: -(r.get("total_bytes") or 0))
    sections.append(_section(
        "clients", "Top clients", "one client overloads the broker",
        "request (client_id, request_bytes, response_bytes)",
        "<h3>By requests</h3>"
        + bar_chart([(str(r["client_id"]), _num(r["requests"])) for r in clients[:15]])
        + "<h3>By bytes (in + out)</h3>"
        + bar_chart([(str(r["client_id"]), _num(r.get("total_bytes") or 0))
                     for r in by_bytes[:15]], unit=" B")
        + table(clients, ["client_id", "requests", "request_bytes", "response_bytes",
                          "total_bytes", "connections", "client_software_name",
                          "client_software_version", "apis"])))
    throttled = tables.get("throttled_clients", [])
    sections.append(_section(
        "throttled", "Throttled clients", "clients are slowed down by quotas (KIP-219)",
        "throttle_started, request (throttle_ms)",
        "<p class=\"hint\">A throttle delays the client's next request for its throttle time "
        "(its connection is muted, then reads again: the throttle ended). Fewer ended than "
        "started means throttles still running when the log ended.</p>"
        + bar_chart([(str(r["client_id"]), _num(r.get("total_throttle_ms") or 0.0))
                     for r in throttled[:15]], unit=" ms", title="total throttle time by client")
        + table([{**r, "still_throttled": _still_throttled(r)} for r in throttled],
                list(_THROTTLE_HEADINGS), headings=_THROTTLE_HEADINGS)))
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
        bar_chart([(f"{r['principal'] or '(none)'} from {r['ip']}", _num(r["failures"]))
                   for r in failures[:15]])
        + table(failures),
        empty=None if failures else "No authentication failure in these logs."))
    txns = tables.get("transactions", [])
    sections.append(_section(
        "transactions", "Transactions",
        "read_committed consumers stall (a long open transaction holds the LSO) or "
        "exactly-once jobs fail (aborts, timeouts, fencing)",
        "transaction_committed, transaction_aborted, transaction_timed_out, transaction_fenced",
        bar_chart([(str(r["transactional_id"]), _num(r.get("max_open_ms") or 0.0))
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
