"""``summary.json``: the machine-readable answers built from the collected tables."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from trio_broker.observability.events import SCHEMA_VERSION

from .reading import BLANK, PROBLEM, LineAccounts, _key
from .request_tables import HEADLINE_METHOD, KLL_K, KLL_RANK_ERROR
from .rows import jsonable
from .tables import QUESTIONS


def _latency(row: Mapping[str, Any]) -> dict[str, Any]:
    return {"requests": row["requests"], "errors": row["errors"], "p50": row["p50_total_ms"],
            "p95": row["p95_total_ms"], "p99": row["p99_total_ms"], "max": row["max_total_ms"],
            "p99_service": row["p99_service_ms"]}


def build_summary(accounts: LineAccounts, tables: Mapping[str, list[dict[str, Any]]],
                  files: Sequence[str], since: datetime | None,
                  until: datetime | None, *,
                  unusable_files: Mapping[str, str] | None = None,
                  schema_versions: Mapping[Any, int] | None = None) -> dict[str, Any]:
    """The machine-readable answers: counts per question plus the data-quality figures.

    ``unusable_files`` (a file -> why it was not read; :func:`inputs.prepare_inputs`) becomes
    ``unusable_files`` and one warning per file. ``schema_versions`` (lines per
    ``schema_version`` field value) adds a warning when lines carry another version than this
    reader's :data:`SCHEMA_VERSION`; without it nothing is said about versions.
    """
    lines_total = 0
    unusable: dict[str, dict[str, Any]] = {}
    unknown: dict[str, int] = {}
    events_by_name: dict[str, int] = {}
    first: str | None = None  # ISO 8601 UTC text of one format: compares as time does
    last: str | None = None
    for row in accounts.overview:
        n = int(row["n"])
        problem = row[PROBLEM]
        if problem == BLANK:
            continue
        lines_total += n
        if problem is not None:
            entry = unusable.setdefault(problem, {"count": 0, "samples": []})
            entry["count"] += n
            if problem == "unknown event":
                unknown[_key(row["event"])] = unknown.get(_key(row["event"]), 0) + n
            continue
        events_by_name[_key(row["event"])] = events_by_name.get(_key(row["event"]), 0) + n
        if row["first"] is not None and (first is None or row["first"] < first):
            first = row["first"]
        if row["last"] is not None and (last is None or row["last"] > last):
            last = row["last"]
    for problem, entry in unusable.items():
        entry["samples"] = accounts.samples.get(problem, [])
    skipped = dict(unusable_files or {})
    warnings = [f"{name}: not read: {why}" for name, why in skipped.items()]
    warnings += [f"{name}: no broker events in this file"
                 for name, usable in accounts.usable_by_file.items()
                 if not usable and name not in skipped]
    other_versions = {_key(version): int(count)
                      for version, count in (schema_versions or {}).items()
                      if count and _key(version) not in ("(none)", str(SCHEMA_VERSION))}
    if other_versions:
        lines_by_version = ", ".join(f"{count:,} with version {version}"
                                     for version, count in sorted(other_versions.items()))
        warnings.append(f"lines of another schema_version than this reader's "
                        f"({SCHEMA_VERSION}): {lines_by_version}; fields it does not know are "
                        f"not read, and may be missing or mean something else")

    requests = tables["latency_by_api"]
    rejected = tables["rejected_connections"]
    rejected_by_reason: dict[str, int] = {}
    rejected_by_ip: dict[str, int] = {}
    rejected_by_listener: dict[str, int] = {}
    for row in rejected:
        for key, target in ((row["reason"], rejected_by_reason), (row["ip"], rejected_by_ip),
                            (row["listener"], rejected_by_listener)):
            label = _key(key)
            target[label] = target.get(label, 0) + int(row["count"])
    timeline = tables["metrics_timeline"]  # per minute and broker
    idle = [(r["network_processor_avg_idle_percent"], int(r["snapshots"]),
             r["min_network_processor_avg_idle_percent"]) for r in timeline
            if r.get("network_processor_avg_idle_percent") is not None]
    queue_sizes = [r["max_request_queue_size"] for r in timeline
                   if r.get("max_request_queue_size") is not None]
    snapshots = sum(int(r["snapshots"]) for r in timeline)
    throttled = tables["throttled_clients"]
    rebalances = {_key(r["group_id"]): int(r["rebalances"])
                  for r in tables["group_rebalances"] if r["rebalances"]}
    errors_by_code: dict[str, dict[str, int]] = {}
    for row in tables["errors_by_code"]:
        errors_by_code.setdefault(_key(row["api"]), {})[_key(row["error"])] = int(row["count"])
    invalid_by_reason: dict[str, int] = {}
    invalid_by_peer: dict[str, int] = {}
    for row in tables["invalid_frames"]:
        for key, target in ((row["reason"], invalid_by_reason), (row["peer"], invalid_by_peer)):
            target[_key(key)] = target.get(_key(key), 0) + int(row["count"])
    churn = tables["connection_churn_by_minute"]
    worst = sorted((r for r in tables["request_queue_by_minute"] if r.get("requests")),
                   key=lambda r: -(r.get("p99_service_ms") or 0.0))[:5]
    return {
        "schema_version": SCHEMA_VERSION,
        "generated_at": jsonable(datetime.now(UTC)),
        "inputs": list(files),
        "since": jsonable(since),
        "until": jsonable(until),
        "lines": lines_total,
        "usable_lines": lines_total - sum(e["count"] for e in unusable.values()),
        "unusable_lines": sum(e["count"] for e in unusable.values()),
        "unusable": dict(sorted(unusable.items())),
        "unusable_files": dict(sorted(skipped.items())),
        "warnings": warnings,
        "time_range": {"first": jsonable(first), "last": jsonable(last)},
        "events_by_name": dict(sorted(events_by_name.items())),
        "unknown_events": dict(sorted(unknown.items())),
        "percentiles": {
            "latency_ms_by_api": f"p50/p95/p99 of total_ms: {HEADLINE_METHOD}",
            "other": f"every other percentile (service time and stages per API, per client, "
                     f"per client x API, per minute): KLL sketches (k={KLL_K:,}), exact up to "
                     f"{KLL_K:,} requests per group, beyond that a rank error of about "
                     f"{KLL_RANK_ERROR:.2%} of the group's count"},
        "requests": sum(int(r["requests"]) for r in requests),
        "requests_by_api": {_key(r["api"]): int(r["requests"]) for r in requests},
        "errors_by_api": {_key(r["api"]): int(r["errors"]) for r in requests if r["errors"]},
        "errors_by_api_code": errors_by_code,
        "latency_ms_by_api": {_key(r["api"]): _latency(r) for r in requests},
        "latency_ms_by_client": {_key(r["client_id"]): _latency(r)
                                 for r in tables["latency_by_client"]},
        "latency_ms_by_client_api": [
            {"client_id": r["client_id"], "api": r["api"], **_latency(r)}
            for r in tables["latency_by_client_api"][:50]],
        "slowest_requests": [
            {k: r[k] for k in ("ts", "api", "client_id", "service_ms", "total_ms",
                               "dominant_stage", "waited")}
            for r in tables["slowest_requests"][:10]],
        "worst_minutes": [
            {k: r.get(k) for k in ("minute", "broker", "requests", "errors", "p99_service_ms",
                                   "max_request_queue_ms")} for r in worst],
        "rejected_connections": rejected_by_reason,
        "rejected_connections_by_ip": rejected_by_ip,
        "rejected_connections_by_listener": rejected_by_listener,
        "closed_connections": {_key(r["reason"]): int(r["count"])
                               for r in tables["closed_connections"]},
        "connection_churn": {
            key: sum(int(r.get(key) or 0) for r in churn)
            for key in ("accepted", "closed", "expired", "refused")},
        "invalid_frames_by_reason": invalid_by_reason,
        "invalid_frames_by_peer": invalid_by_peer,
        "mutes_by_reason": {_key(r["reason"]): int(r["mutes"])
                            for r in tables["mutes_by_reason"] if r["mutes"]},
        "event_loop_blocked": {
            "count": sum(int(r["count"]) for r in tables["event_loop_blocked"]),
            "max_duration_ms": max((r["max_duration_ms"] for r in tables["event_loop_blocked"]
                                    if r["max_duration_ms"] is not None), default=None)},
        "network_processor_idle_percent": {
            "min": min(low for _, _, low in idle) if idle else None,
            "avg": (sum(avg * n for avg, n, _ in idle) / sum(n for _, n, _ in idle)
                    if idle else None)},
        "max_request_queue_size": max(queue_sizes) if queue_sizes else None,
        "metrics_snapshots": snapshots,
        "top_clients": [{"client_id": r["client_id"], "requests": r["requests"],
                         "total_bytes": r["total_bytes"]} for r in tables["top_clients"][:10]],
        "throttled_clients": {_key(r["client_id"]): r["total_throttle_ms"] for r in throttled},
        "group_rebalances": rebalances,
        "authentication_failures": {
            f"{_key(r['principal'])} from {_key(r['ip'])}": int(r["failures"])
            for r in tables["authentication_failures"]},
        "tables": [f"{q.name}.parquet" for q in QUESTIONS],
    }
