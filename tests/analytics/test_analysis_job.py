"""The batch job in local mode over logs written by the broker's logging path.

Every number is checked against a count taken from the raw lines with ``json.loads``.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
from collections import Counter, defaultdict
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.analytics.analytics_logs import BASE_TIME, MALFORMED_LINES, count_by, read_raw
from trio_broker.analytics.cli import main
from trio_broker.analytics.jobs import (
    QUESTIONS,
    STAGES,
    AnalysisResult,
    collect_and_write,
    collect_rows,
    run_analysis,
)

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def analysis(spark: Any, scenario_logs: list[Path],
             tmp_path_factory: pytest.TempPathFactory) -> AnalysisResult:
    out = tmp_path_factory.mktemp("analysis")
    messages: list[str] = []
    result = run_analysis(spark, [str(p) for p in scenario_logs], out, slowest=5,
                          progress=messages.append)
    assert messages and messages[-1].startswith("done"), messages
    assert len(messages) == len(QUESTIONS) + 6  # a line per stage, then done
    return result


@pytest.fixture(scope="module")
def raw(scenario_logs: list[Path]) -> list[dict[str, Any]]:
    records, bad = read_raw(scenario_logs)
    assert bad == 2  # the torn line and the text line
    return [r for r in records if isinstance(r.get("broker"), int)]


def _requests(raw: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in raw if r["event"] == "request"]


def test_requests_by_api_equal_raw_counts(analysis: AnalysisResult,
                                          raw: list[dict[str, Any]]) -> None:
    expected = count_by(raw, "request", "api")
    assert analysis.summary["requests_by_api"] == expected
    assert analysis.summary["requests"] == sum(expected.values()) > 0
    errors = Counter(r["api"] for r in _requests(raw) if r["error"] != "NONE")
    assert analysis.summary["errors_by_api"] == dict(errors)


def test_rejected_connections_by_reason_ip_listener(analysis: AnalysisResult,
                                                    raw: list[dict[str, Any]]) -> None:
    summary = analysis.summary
    assert summary["rejected_connections"] == count_by(raw, "connection_rejected", "reason")
    assert summary["rejected_connections_by_ip"] == count_by(raw, "connection_rejected", "ip")
    assert summary["rejected_connections_by_listener"] == count_by(
        raw, "connection_rejected", "listener")
    expected = Counter((r["ip"], r["listener"], r["reason"]) for r in raw
                       if r["event"] == "connection_rejected")
    table = {(r["ip"], r["listener"], r["reason"]): r["count"]
             for r in analysis.tables["rejected_connections"]}
    assert table == dict(expected)


def test_unusable_lines_counted_by_reason_with_samples(analysis: AnalysisResult,
                                                      raw: list[dict[str, Any]],
                                                      scenario_logs: list[Path]) -> None:
    summary = analysis.summary
    unusable = summary["unusable"]
    assert {reason: entry["count"] for reason, entry in unusable.items()} == {
        "not JSON": 2, "wrong type: broker": 1, "unknown event": 1}
    assert summary["unusable_lines"] == len(MALFORMED_LINES) + 1
    assert summary["lines"] == len(raw) + len(MALFORMED_LINES)
    declared = [r for r in raw if r["event"] != "quorum_elected"]
    assert summary["usable_lines"] == len(declared)
    assert summary["events_by_name"] == dict(sorted(Counter(r["event"] for r in declared).items()))
    assert summary["unknown_events"] == {"quorum_elected": 1}
    assert summary["warnings"] == []
    # Every sample names the file and line it comes from, and starts with that line's text.
    texts = {str(path): path.read_text(encoding="utf-8").split("\n") for path in scenario_logs}
    samples = [s for entry in unusable.values() for s in entry["samples"]]
    assert len(samples) == 4
    for sample in samples:
        path, number, text = sample.split(":", 2)
        line = texts[path][int(number) - 1]
        assert line.startswith(text.strip().removeprefix("event 'quorum_elected': ")[:60]), sample
    torn = [s for s in unusable["not JSON"]["samples"] if "Pro" in s]
    assert torn and torn[0].split(":")[0] == str(scenario_logs[0])  # the oldest file's torn line


def test_time_range(analysis: AnalysisResult, raw: list[dict[str, Any]]) -> None:
    def parse(text: str) -> datetime:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))

    stamps = sorted(parse(r["timestamp"]) for r in raw)
    got = analysis.summary["time_range"]
    assert (parse(got["first"]), parse(got["last"])) == (stamps[0], stamps[-1])


def _nearest_rank(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(pct * len(ordered)) - 1)]


def test_latency_percentiles_and_stage_breakdown(analysis: AnalysisResult,
                                                 raw: list[dict[str, Any]]) -> None:
    by_api: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in _requests(raw):
        by_api[record["api"]].append(record)
    rows = {r["api"]: r for r in analysis.tables["latency_by_api"]}
    assert by_api and set(rows) == set(by_api)
    for api, records in by_api.items():
        row = rows[api]
        assert row["requests"] == len(records)
        for column in ("total_ms", *STAGES):
            values = [r[column] for r in records]
            short = column.removesuffix("_ms")
            # With fewer values than the accuracy, Spark's approximate percentile is exact.
            assert row[f"p50_{short}_ms"] == _nearest_rank(values, 0.5), (api, column)
            assert row[f"p95_{short}_ms"] == _nearest_rank(values, 0.95), (api, column)
            assert row[f"p99_{short}_ms"] == _nearest_rank(values, 0.99), (api, column)
            assert row[f"max_{column}"] == max(values)
        total = sum(r["total_ms"] for r in records)
        assert row["local_share"] == pytest.approx(sum(r["local_ms"] for r in records) / total)
    assert analysis.summary["latency_ms_by_api"]["Produce"]["p99"] == rows["Produce"][
        "p99_total_ms"]


def _expected_wait(record: dict[str, Any]) -> float:
    if record["api"] == "Fetch":
        return float(min(record["remote_ms"], 500.0))
    return float(record["remote_ms"]) if record["api"] in ("JoinGroup", "SyncGroup") else 0.0


def test_slowest_requests_set_expected_waits_aside(analysis: AnalysisResult,
                                                  raw: list[dict[str, Any]]) -> None:
    slowest = analysis.tables["slowest_requests"]
    expected = sorted(_requests(raw), key=lambda r: (-(r["total_ms"] - _expected_wait(r)),
                                                     -r["total_ms"]))[:5]
    assert [r["correlation_id"] for r in slowest] == [r["correlation_id"] for r in expected]
    for row, record in zip(slowest, expected, strict=True):
        assert row["service_ms"] == pytest.approx(record["total_ms"] - _expected_wait(record))
        assert row["dominant_stage"] == max(STAGES, key=lambda s: record[s])
        assert row["waited"] == (_expected_wait(record) > row["service_ms"])
    # A slow long-poll Fetch is not among them when it is only waiting.
    waiting = [r for r in _requests(raw) if r["api"] == "Fetch" and r["remote_ms"] > 100]
    assert waiting
    assert all(r["api"] != "Fetch" or r["remote_ms"] < 100 or r["service_ms"] >= 20
               for r in slowest)


def test_latency_per_client_and_client_api(analysis: AnalysisResult,
                                           raw: list[dict[str, Any]]) -> None:
    by_client: dict[str, list[dict[str, Any]]] = defaultdict(list)
    by_pair: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for record in _requests(raw):
        by_client[record["client_id"]].append(record)
        by_pair[(record["client_id"], record["api"])].append(record)
    rows = {r["client_id"]: r for r in analysis.tables["latency_by_client"]}
    assert set(rows) == set(by_client)
    for client, records in by_client.items():
        totals = [r["total_ms"] for r in records]
        service = [r["total_ms"] - _expected_wait(r) for r in records]
        for pct in (0.5, 0.95, 0.99):
            label = f"{pct * 100:g}"
            assert rows[client][f"p{label}_total_ms"] == _nearest_rank(totals, pct)
            assert rows[client][f"p{label}_service_ms"] == pytest.approx(
                _nearest_rank(service, pct))
        assert analysis.summary["latency_ms_by_client"][client]["p99"] == _nearest_rank(
            totals, 0.99)
    pairs = {(r["client_id"], r["api"]): r for r in analysis.tables["latency_by_client_api"]}
    assert set(pairs) == set(by_pair)
    for pair, records in by_pair.items():
        assert pairs[pair]["requests"] == len(records)
        assert pairs[pair]["p99_total_ms"] == _nearest_rank([r["total_ms"] for r in records],
                                                            0.99)


def test_errors_by_api_and_code(analysis: AnalysisResult, raw: list[dict[str, Any]]) -> None:
    failed = Counter((r["api"], r["error"]) for r in _requests(raw) if r["error"] != "NONE")
    assert failed
    assert {(r["api"], r["error"]): r["count"]
            for r in analysis.tables["errors_by_code"]} == dict(failed)
    nested: dict[str, dict[str, int]] = {}
    for (api, error), count in failed.items():
        nested.setdefault(api, {})[error] = count
    assert analysis.summary["errors_by_api_code"] == nested


def test_invalid_frames_by_reason_and_peer(analysis: AnalysisResult,
                                           raw: list[dict[str, Any]]) -> None:
    frames = [r for r in raw if r["event"] == "invalid_request"]
    assert frames
    assert {(r["reason"], r["peer"]): r["count"] for r in analysis.tables["invalid_frames"]} \
        == dict(Counter((r["reason"], r["peer"]) for r in frames))
    assert analysis.summary["invalid_frames_by_reason"] == count_by(raw, "invalid_request",
                                                                    "reason")


def test_connection_churn_per_minute(analysis: AnalysisResult,
                                     raw: list[dict[str, Any]]) -> None:
    rows = {r["minute"][:16]: r for r in analysis.tables["connection_churn_by_minute"]}
    names = {"accepted": "connection_accepted", "closed": "connection_closed",
             "expired": "connection_expired", "refused": "connection_rejected"}
    for column, event in names.items():
        expected = Counter(r["timestamp"][:16] for r in raw if r["event"] == event)
        assert {m: row[column] for m, row in rows.items() if row[column]} == dict(expected)
        assert analysis.summary["connection_churn"][column] == sum(expected.values())
    assert analysis.summary["connection_churn"]["expired"] > 0
    for minute, row in rows.items():
        closed = Counter(r["reason"] for r in raw if r["event"] == "connection_closed"
                         and r["timestamp"][:16] == minute)
        assert (row["closed_by_reason"] or {}) == dict(closed)
        counts = [r["connection_count"] for r in raw if r["event"] == "metrics_snapshot"
                  and r["timestamp"][:16] == minute]
        assert row["connection_count"] == (max(counts) if counts else None)


def test_top_clients_by_requests_and_bytes(analysis: AnalysisResult,
                                           raw: list[dict[str, Any]]) -> None:
    requests = Counter(r["client_id"] for r in _requests(raw))
    sent: Counter[str] = Counter()
    received: Counter[str] = Counter()
    for record in _requests(raw):
        sent[record["client_id"]] += record["request_bytes"]
        received[record["client_id"]] += record["response_bytes"]
    rows = analysis.tables["top_clients"]
    assert [r["client_id"] for r in rows] == [c for c, _ in sorted(
        requests.items(), key=lambda kv: (-kv[1], -(sent[kv[0]] + received[kv[0]]), kv[0]))]
    for row in rows:
        client = row["client_id"]
        assert (row["requests"], row["request_bytes"], row["response_bytes"]) == (
            requests[client], sent[client], received[client])
        assert row["total_bytes"] == sent[client] + received[client]


def test_throttled_clients(analysis: AnalysisResult, raw: list[dict[str, Any]]) -> None:
    started = [r for r in raw if r["event"] == "throttle_started"]
    assert started
    rows = {r["client_id"]: r for r in analysis.tables["throttled_clients"]}
    assert set(rows) == {r["client_id"] for r in started}
    for client, row in rows.items():
        mine = [r for r in started if r["client_id"] == client]
        assert row["throttle_events"] == len(mine)
        assert row["throttle_event_ms"] == sum(r["throttle_ms"] for r in mine)
        assert row["max_throttle_ms"] == max(r["throttle_ms"] for r in mine)
        assert row["users"] == sorted({r["user"] for r in mine})
        assert row["quota_types"] == sorted({r["quota_type"] for r in mine})
        throttled = [r for r in _requests(raw) if r["client_id"] == client and r["throttle_ms"]]
        assert row["throttled_requests"] == len(throttled)
        assert analysis.summary["throttled_clients"][client] == row["total_throttle_ms"]


def test_saturation_and_queue_timelines(analysis: AnalysisResult,
                                        raw: list[dict[str, Any]]) -> None:
    def minute_of(record: dict[str, Any]) -> str:
        return record["timestamp"][:16]

    snapshots = [r for r in raw if r["event"] == "metrics_snapshot"]
    timeline = analysis.tables["metrics_timeline"]
    assert sum(r["snapshots"] for r in timeline) == len(snapshots) \
        == analysis.summary["metrics_snapshots"]
    # One row per minute (and broker), in time order, each gauge's average, lowest, highest.
    assert [r["ts"][:16] for r in timeline] == sorted({minute_of(r) for r in snapshots})
    for row in timeline:
        sizes = [r["request_queue_size"] for r in snapshots if minute_of(r) == row["ts"][:16]]
        assert row["snapshots"] == len(sizes)
        assert row["request_queue_size"] == pytest.approx(sum(sizes) / len(sizes))
        assert (row["min_request_queue_size"], row["max_request_queue_size"]) == \
            (min(sizes), max(sizes))
    idle = [r["network_processor_avg_idle_percent"] for r in snapshots]
    assert analysis.summary["network_processor_idle_percent"]["min"] == min(idle)
    assert analysis.summary["network_processor_idle_percent"]["avg"] == \
        pytest.approx(sum(idle) / len(idle))
    assert analysis.summary["max_request_queue_size"] == max(
        r["request_queue_size"] for r in snapshots)

    per_minute = analysis.tables["saturation_by_minute"]
    mutes = Counter(minute_of(r) for r in raw if r["event"] == "connection_muted")
    throttles = Counter(minute_of(r) for r in raw if r["event"] == "throttle_started")
    assert {r["minute"][:16]: r["mutes"] for r in per_minute} == dict(mutes)
    assert {r["minute"][:16]: r["throttles"] for r in per_minute} == {
        m: throttles.get(m, 0) for m in mutes}
    assert len(per_minute) == 3
    queue = {r["minute"][:16]: r for r in analysis.tables["request_queue_by_minute"]}
    assert queue  # the loop below must have rows to check
    for minute, row in queue.items():
        in_minute = [r for r in _requests(raw) if minute_of(r) == minute]
        assert row["requests"] == len(in_minute)
        assert row["max_request_queue_ms"] == max(r["request_queue_ms"] for r in in_minute)
        assert row["max_request_queue_size"] == max(
            r["request_queue_size"] for r in snapshots if minute_of(r) == minute)
    muted = Counter(r["reason"] for r in raw if r["event"] == "connection_muted")
    assert analysis.summary["mutes_by_reason"] == dict(muted)
    unmuted_ms: Counter[str] = Counter()
    for r in raw:
        if r["event"] == "connection_unmuted":
            unmuted_ms[r["reason"]] += r["muted_ms"]
    assert {r["reason"]: r["total_muted_ms"] for r in analysis.tables["mutes_by_reason"]} == \
        pytest.approx(dict(unmuted_ms))


def test_closed_connections_and_group_rebalances(analysis: AnalysisResult,
                                                 raw: list[dict[str, Any]]) -> None:
    assert analysis.summary["closed_connections"] == count_by(raw, "connection_closed", "reason")
    # Both protocols: a classic rebalance, and a consumer group's (KIP-848) epoch bump.
    started = Counter(r["group_id"] for r in raw
                      if r["event"] in ("rebalance_started", "consumer_group_epoch_bumped"))
    assert analysis.summary["group_rebalances"] == dict(started)
    assert started and analysis.tables["group_rebalances"]  # the loop below checks something
    assert {"orders", "payments"} <= set(started)
    for row in analysis.tables["group_rebalances"]:
        completed = [r for r in raw if r["event"] == "rebalance_completed"
                     and r["group_id"] == row["group_id"]]
        assert row["completed"] == len(completed)
        assert row["max_rebalance_ms"] == max((r["duration_ms"] for r in completed), default=None)
        joined = [r for r in raw if r["event"] == "group_member_joined"
                  and r["group_id"] == row["group_id"]]
        assert row["consumer_joins"] == len(joined)


def test_transactions_table(analysis: AnalysisResult, raw: list[dict[str, Any]]) -> None:
    ended = [r for r in raw if r["event"] in ("transaction_committed", "transaction_aborted")]
    assert ended  # the checks below check something
    rows = {r["transactional_id"]: r for r in analysis.tables["transactions"]}
    assert set(rows) == {r["transactional_id"] for r in ended}
    for txn_id, row in rows.items():
        mine = [r for r in ended if r["transactional_id"] == txn_id]
        assert row["committed"] == sum(r["event"] == "transaction_committed" for r in mine)
        assert row["aborted"] == sum(r["event"] == "transaction_aborted" for r in mine)
        assert row["timed_out"] == sum(1 for r in raw if r["event"] == "transaction_timed_out"
                                       and r["transactional_id"] == txn_id)
        assert row["max_open_ms"] == max(r["duration_ms"] for r in mine)
        assert row["max_partitions"] == max(r["partitions"] for r in mine)
        assert row["topics"] == ["__consumer_offsets", "out"]


def test_outputs_parquet_summary_and_report(spark: Any, analysis: AnalysisResult) -> None:
    out = analysis.out
    for question in QUESTIONS:
        table = spark.read.parquet(str(out / f"{question.name}.parquet"))
        # The file holds what the summary and the report were made from, types included.
        assert collect_rows(table) == analysis.tables[question.name], question.name
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests_by_api"] == analysis.summary["requests_by_api"]
    assert summary["rejected_connections"] == analysis.summary["rejected_connections"]
    page = (out / "report.html").read_text()
    assert page.count("<svg") >= 8
    assert "Symptom: clients cannot connect or are refused" in page
    assert "per_ip_limit" in page
    assert "<script" not in page and "http://" not in page.replace(
        'xmlns="http://www.w3.org/2000/svg"', "")



def _comparable(summary: dict[str, Any]) -> dict[str, Any]:
    # What differs between two runs over copies of the same lines: paths, clock, job count.
    skip = {"generated_at", "elapsed_s", "inputs", "spark_jobs", "unusable", "warnings"}
    return {key: value for key, value in summary.items() if key not in skip}


@pytest.mark.timeout(600)
def test_input_is_read_once(spark: Any, analysis: AnalysisResult, scenario_logs: list[Path],
                            tmp_path: Path) -> None:
    """Once the first job has parsed the lines, the input files are moved away: a second scan
    of them (a job reading the input again, or a cached partition recomputed) would fail with
    a missing file. The answers equal the fixture's run over the files left in place."""
    copies = tmp_path / "logs"
    copies.mkdir()
    files = []
    for path in scenario_logs:
        copy = copies / path.name
        copy.write_bytes(path.read_bytes())
        files.append(copy)
    gone = tmp_path / "gone"
    messages: list[str] = []

    def progress(message: str) -> None:
        messages.append(message)
        if "input read and parsed once" in message:
            copies.rename(gone)

    result = run_analysis(spark, [str(p) for p in files], tmp_path / "out", slowest=5,
                          progress=progress)
    assert gone.exists() and not copies.exists(), messages
    assert _comparable(result.summary) == _comparable(analysis.summary)
    assert result.tables == analysis.tables
    # The count of Spark actions stays small: the one read, the accounts and samples, then
    # per table the job that computes and writes it, the collect, and the sampling job of a
    # sort over more than one partition.
    assert 0 < result.summary["spark_jobs"] <= 4 * len(QUESTIONS) + 6

def test_cli_directory_input_and_time_window(spark: Any, scenario_logs: list[Path],
                                             raw: list[dict[str, Any]], tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A directory stands for all its log files, rotated ones included; --since/--until cut."""
    out = tmp_path / "out"
    since = BASE_TIME + timedelta(minutes=1)
    code = main([str(scenario_logs[0].parent), "--out", str(out), "--master", "local[2]",
                 "--since", since.isoformat(), "--until", "2026-03-14T09:02:00Z"])
    assert code == 0
    captured = capsys.readouterr()
    assert "analyze: [1/" in captured.err  # progress lines, one per stage
    assert "requests" in captured.out
    summary = json.loads((out / "summary.json").read_text())
    assert sorted(summary["inputs"]) == sorted(str(p) for p in scenario_logs)
    window = [r for r in raw if "2026-03-14T09:01" <= r["timestamp"] < "2026-03-14T09:02"]
    assert summary["requests_by_api"] == count_by(window, "request", "api")
    assert summary["rejected_connections"] == count_by(window, "connection_rejected", "reason")
    assert summary["events_in_range"] == dict(Counter(r["event"] for r in window))
    assert summary["unusable_lines"] == len(MALFORMED_LINES) + 1  # over the whole input
    assert spark.sparkContext._jsc is not None  # the shared session was not stopped


def _load_example() -> Any:
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "examples" / "analyze_logs.py"
    spec = importlib.util.spec_from_file_location("analyze_logs_example", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_ad_hoc_query(spark: Any, scenario_logs: list[Path], raw: list[dict[str, Any]],
                              capsys: pytest.CaptureFixture[str]) -> None:
    from trio_broker.analytics.jobs import read_logs, valid_events

    example = _load_example()
    events = valid_events(read_logs(spark, [str(p) for p in scenario_logs]))
    rows = example.slow_requests_by_client(events, api="Produce", slower_than_ms=5.0).collect()
    expected = Counter(r["client_id"] for r in _requests(raw)
                       if r["api"] == "Produce" and r["total_ms"] >= 5.0)
    assert {r["client_id"]: r["requests"] for r in rows} == dict(expected)
    assert example.main([str(scenario_logs[0].parent), "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "p95_total_ms" in out and f"{len(MALFORMED_LINES) + 1} unusable line(s)" in out


def _chromium() -> str | None:
    import shutil

    return shutil.which("chromium") or shutil.which("chromium-browser")


def _headless(browser: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run", f"--user-data-dir={profile}", "--hide-scrollbars", *args],
        capture_output=True, text=True, timeout=90, check=False)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("width", [1400, 390])
def test_report_renders_in_a_browser(analysis: AnalysisResult, tmp_path: Path,
                                     width: int) -> None:
    """Chromium lays the report out at desktop and phone width: the page itself never scrolls
    sideways (wide tables scroll inside their box), and a screenshot is taken."""
    browser = _chromium()
    # A prerequisite of the suite like Java and kcat (README; .ci/run installs it): a missing
    # browser fails loudly instead of skipping the only check of the page's layout.
    assert browser is not None, "chromium is not installed (Debian: apt-get install -y chromium)"
    page = (analysis.out / "report.html").read_text(encoding="utf-8")
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</body>", "<script>document.title = 'W' + "
                                  "document.documentElement.scrollWidth + 'x' + innerWidth"
                                  "</script></body>"), encoding="utf-8")
    done = _headless(browser, tmp_path / "profile", f"--window-size={width},900",
                     "--dump-dom", probe.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    match = re.search(r"<title>W(\d+)x(\d+)</title>", done.stdout)
    assert match, done.stdout[:500]
    scroll_width, view_width = int(match.group(1)), int(match.group(2))
    assert scroll_width <= view_width, (scroll_width, view_width)
    shot = analysis.out / f"report-{width}.png"
    done = _headless(browser, tmp_path / "profile2", f"--window-size={width},2400",
                     f"--screenshot={shot}", (analysis.out / "report.html").as_uri())
    assert done.returncode == 0 and shot.stat().st_size > 10_000, done.stderr[-2000:]


def test_authentication_failures_by_principal_and_ip(analysis: AnalysisResult,
                                                     raw: list[dict[str, Any]]) -> None:
    failed = [r for r in raw if r["event"] == "authentication_failed"]
    assert failed
    expected = Counter((r["principal"], r["peer"].rsplit(":", 1)[0]) for r in failed)
    rows = analysis.tables["authentication_failures"]
    assert {(r["principal"], r["ip"]): r["failures"] for r in rows} == dict(expected)
    assert rows[0]["principal"] == "User:mallory" and rows[0]["ip"] == "10.0.0.66"
    assert rows[0]["mechanisms"] == ["PLAIN", "SCRAM-SHA-512"]
    last = max((r for r in failed if r["principal"] == "User:mallory"),
               key=lambda r: r["timestamp"])
    assert rows[0]["last_detail"] == last["detail"]
    assert analysis.summary["authentication_failures"]["User:mallory from 10.0.0.66"] == \
        expected[("User:mallory", "10.0.0.66")]
    page = (analysis.out / "report.html").read_text()
    assert "Authentication failures by principal and IP" in page


def test_tables_overwrite_an_earlier_run(spark: Any, tmp_path: Path) -> None:
    """A table written again into the same ``--out`` holds only the new rows."""
    from pyspark.sql import functions as F

    path = tmp_path / "t.parquet"
    first = spark.range(5).withColumn("at", F.timestamp_seconds(F.col("id")))
    assert len(collect_and_write(first, path)) == 5
    second = spark.range(2).withColumn("at", F.timestamp_seconds(F.col("id")))
    rows = collect_and_write(second, path)
    assert rows == [{"id": 0, "at": "1970-01-01T00:00:00.000000Z"},
                    {"id": 1, "at": "1970-01-01T00:00:01.000000Z"}]
    assert collect_rows(spark.read.parquet(str(path)).orderBy("id")) == rows


def test_headline_percentiles_equal_percentile_disc(spark: Any) -> None:
    """The headline percentiles, from counts per distinct (API, total_ms), are Spark's own
    ``percentile_disc`` (and the nearest rank) on groups with ties, nulls and a lone value."""
    import random

    from pyspark.sql import functions as F

    from trio_broker.analytics.request_tables import PERCENTILES, headline_percentiles

    rng = random.Random(7)
    rows: list[tuple[str, str, float | None]] = []
    for api, size, distinct in (("Produce", 997, 40), ("Fetch", 1000, 1000), ("Metadata", 1, 1),
                                ("Heartbeat", 20, 3), ("ApiVersions", 3, 3)):
        rows += [("request", api, float(rng.randrange(distinct)) / 8) for _ in range(size)]
    rows += [("request", "Fetch", None), ("request", "ListOffsets", None),
             ("request_other", "Produce", 1e9)]
    frame = spark.createDataFrame(rows, "event string, api string, total_ms double")
    got = {r["api"]: r["_pct_total_ms"] for r in headline_percentiles(frame).collect()}
    disc = [F.expr(f"percentile_disc({pct}) WITHIN GROUP (ORDER BY total_ms)")
            for pct in PERCENTILES]
    expected = {r["api"]: r["p"] for r in frame.where(F.col("event") == "request")
                .groupBy("api").agg(F.array(*disc).alias("p")).collect()}
    assert expected.pop("ListOffsets") == [None, None, None]
    assert got == expected
    for api, values in expected.items():
        totals = [t for _, a, t in rows[:-3] if a == api]
        assert values == [_nearest_rank(totals, pct) for pct in PERCENTILES]  # type: ignore[arg-type]


def test_slowest_requests_from_the_grain_equal_those_of_the_lines(spark: Any) -> None:
    """``slowest_requests`` from the groups' own slowest lines (kept by ``request_grain``)
    returns the rows it returns from the lines, on service times that tie around the cut (and
    some null), with 20 groups and with 7 (fewer lines per group than the limit or more)."""
    import random

    from trio_broker.analytics.request_tables import (
        request_grain,
        slowest_requests,
        with_service_time,
    )

    rng = random.Random(11)
    schema = ", ".join(
        ["event string", "ts timestamp", "broker long", "api string", "api_version long",
         "correlation_id long", "client_id string", "connection_id string", "error string",
         "request_bytes long", "response_bytes long", "client_software_name string",
         "client_software_version string"]
        + [f"{column} double" for column in (*STAGES, "total_ms")])

    def lines(clients: int) -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = []
        for n in range(3000):
            api = rng.choice(["Produce", "Fetch", "Metadata"])
            # Few distinct values: many ties at every rank, the 50th included.
            total = None if n % 97 == 0 else float(rng.randrange(40))
            stages = [float(rng.randrange(5)) for _ in STAGES]
            rows.append(("request", BASE_TIME + timedelta(seconds=n), 1, api, 3, n,
                         f"c{n % clients}", f"conn-{n % 13}", "NONE", 10, 20, "kafka", "1",
                         *stages, total))
        return rows

    for clients in (20, 7):
        frame = with_service_time(spark.createDataFrame(lines(clients), schema))
        grain = request_grain(frame, 50)
        got = slowest_requests(frame, 50, grain).collect()
        assert got == slowest_requests(frame, 50).collect()
        assert len(got) == 50


def test_expected_waits_are_set_aside_from_service_time(spark: Any) -> None:
    """A Fetch's long poll (up to fetch.max.wait.ms), a rebalance's wait and the deliberate
    delay of a failed login are waiting asked for: service time is the rest. A failed
    SaslAuthenticate's delay is not slowness; another SaslAuthenticate's remote time is."""
    from trio_broker.analytics.request_tables import with_service_time

    rows = [("Fetch", "NONE", 700.0, 703.0), ("JoinGroup", "NONE", 2000.0, 2001.0),
            ("SaslAuthenticate", "SASL_AUTHENTICATION_FAILED", 100.0, 101.5),
            ("SaslAuthenticate", "NONE", 40.0, 41.0), ("Produce", "NONE", 5.0, 9.0)]
    frame = with_service_time(spark.createDataFrame(
        rows, "api string, error string, remote_ms double, total_ms double"), 500.0)
    got = {(r["api"], r["error"]): (r["expected_wait_ms"], r["service_ms"])
           for r in frame.collect()}
    assert got == {("Fetch", "NONE"): (500.0, 203.0), ("JoinGroup", "NONE"): (2000.0, 1.0),
                   ("SaslAuthenticate", "SASL_AUTHENTICATION_FAILED"): (100.0, 1.5),
                   ("SaslAuthenticate", "NONE"): (0.0, 41.0), ("Produce", "NONE"): (0.0, 9.0)}
