"""The batch job: the seeds' troubleshooting questions (§9.2) answered from the broker's logs.

Every question is one function from the parsed events to a small DataFrame; :func:`run_analysis`
writes each as a Parquet table in the output directory, then ``summary.json`` and ``report.html``
from the collected tables. pyspark is imported lazily (see :mod:`trio_broker.analytics`).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

# The job's parts, re-exported: callers import them from here.
from .reading import (
    BLANK,
    BLOCK,
    FILE,
    PART,
    PROBLEM,
    REQUIRED_FIELDS,
    ROW,
    TEXT,
    WRONG_TYPE,
    LineAccounts,
    account_lines,
    iso_utc,
    problem_column,
    read_logs,
    valid_events,
    wrong_field_column,
)
from .session import SMALL_INPUT_BYTES, get_spark
from .summary import build_summary
from .tables import (
    CONNECTIONS_RSD,
    DEFAULT_FETCH_MAX_WAIT_MS,
    HEADLINE_ACCURACY,
    PERCENTILES,
    QUESTIONS,
    REBALANCE_WAIT_APIS,
    STAGES,
    Question,
    analysed_columns,
    authentication_failures,
    closed_connections,
    collect_rows,
    connection_churn_by_minute,
    dominant_stage_column,
    errors_by_code,
    expected_wait_column,
    group_rebalances,
    invalid_frames,
    latency_by_api,
    latency_by_client,
    latency_by_client_api,
    metrics_timeline,
    mutes_by_reason,
    rejected_connections,
    request_queue_by_minute,
    saturation_by_minute,
    slowest_requests,
    throttled_clients,
    top_clients,
    transactions,
    with_service_time,
)

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "BLANK", "BLOCK", "CONNECTIONS_RSD", "DEFAULT_FETCH_MAX_WAIT_MS", "FILE", "HEADLINE_ACCURACY",
    "PART", "PERCENTILES", "PROBLEM", "QUESTIONS", "REBALANCE_WAIT_APIS", "REQUIRED_FIELDS",
    "ROW", "SMALL_INPUT_BYTES", "STAGES", "TEXT", "WRONG_TYPE", "AnalysisResult", "LineAccounts",
    "Question", "account_lines", "analysed_columns", "authentication_failures",
    "build_summary", "closed_connections", "collect_rows", "connection_churn_by_minute",
    "dominant_stage_column", "errors_by_code", "expected_wait_column", "get_spark",
    "group_rebalances", "invalid_frames", "iso_utc", "latency_by_api", "latency_by_client",
    "latency_by_client_api", "metrics_timeline", "mutes_by_reason", "problem_column",
    "read_logs", "rejected_connections", "request_queue_by_minute", "run_analysis",
    "saturation_by_minute", "slowest_requests", "throttled_clients", "top_clients",
    "transactions", "valid_events", "with_service_time", "wrong_field_column",
]

Progress = Callable[[str], None]


def _no_progress(_message: str) -> None:
    return None


@attrs.frozen
class AnalysisResult:
    """What :func:`run_analysis` produced."""

    summary: dict[str, Any]
    tables: dict[str, list[dict[str, Any]]]
    out: Path


def _job_count(spark: SparkSession) -> int:
    """How many Spark jobs (actions) this context has run, for the summary's ``spark_jobs``."""
    return len(spark.sparkContext.statusTracker().getJobIdsForGroup(None))


def _builders(slowest: int) -> dict[str, Callable[[DataFrame], DataFrame]]:
    return {
        "rejected_connections": rejected_connections,
        "closed_connections": closed_connections,
        "saturation_by_minute": saturation_by_minute,
        "metrics_timeline": metrics_timeline,
        "mutes_by_reason": mutes_by_reason,
        "request_queue_by_minute": request_queue_by_minute,
        "latency_by_api": latency_by_api,
        "slowest_requests": lambda frame: slowest_requests(frame, slowest),
        "latency_by_client": latency_by_client,
        "latency_by_client_api": latency_by_client_api,
        "errors_by_code": errors_by_code,
        "invalid_frames": invalid_frames,
        "connection_churn_by_minute": connection_churn_by_minute,
        "top_clients": top_clients,
        "throttled_clients": throttled_clients,
        "group_rebalances": group_rebalances,
        "authentication_failures": authentication_failures,
        "transactions": transactions,
    }


def _answer_all(spark: SparkSession, events: DataFrame, out: Path, slowest: int,
                stage: Progress) -> dict[str, list[dict[str, Any]]]:
    """Every question's table, written as ``out/NAME.parquet`` and collected (in QUESTIONS
    order). A few threads submit jobs at once, so one job's driver-side work (planning, the
    write's commit, the collect) overlaps another's tasks."""
    from concurrent.futures import ThreadPoolExecutor

    from pyspark import StorageLevel

    builders = _builders(slowest)

    def answer(question: Question) -> list[dict[str, Any]]:
        # The table is small: cached while it is written (one file) and collected, so the
        # aggregate is computed once.
        table = builders[question.name](events).coalesce(1).persist(StorageLevel.MEMORY_ONLY)
        try:
            table.write.mode("overwrite").parquet(str(out / f"{question.name}.parquet"))
            rows = collect_rows(table)
        finally:
            table.unpersist()
        stage(f"{question.name}: {len(rows)} row(s)")
        return rows

    with ThreadPoolExecutor(max_workers=3, thread_name_prefix="analyze") as pool:
        answers = {q.name: pool.submit(answer, q) for q in QUESTIONS}
        return {name: future.result() for name, future in answers.items()}


def run_analysis(spark: SparkSession, files: Sequence[str], out: Path, *,
                 since: datetime | None = None, until: datetime | None = None,
                 slowest: int = 50, fetch_max_wait_ms: float = DEFAULT_FETCH_MAX_WAIT_MS,
                 progress: Progress = _no_progress) -> AnalysisResult:
    """Read ``files``, answer every question, write tables, ``summary.json`` and ``report.html``.

    The input is read once: the parsed lines (only the columns the questions use) are written
    as Parquet under ``out`` by the first job and every other job reads that copy (removed at
    the end). Each table is computed once, cached while it is written and collected.
    """
    from .report import render_report

    started = time.monotonic()
    spark.conf.set("spark.sql.session.timeZone", "UTC")  # timestamps are UTC end to end
    # Keep the good fields of a line with one wrongly typed field, to name the bad field.
    spark.conf.set("spark.sql.json.enablePartialResults", "true")
    out.mkdir(parents=True, exist_ok=True)
    steps = len(QUESTIONS) + 4
    step = 0

    def stage(message: str) -> None:
        nonlocal step
        step += 1
        progress(f"[{step}/{steps}] {message} ({time.monotonic() - started:.1f}s)")

    stage(f"reading {len(files)} file(s)")
    jobs_before = _job_count(spark)
    lines = read_logs(spark, files)
    keep = [FILE, BLOCK, PART, ROW, PROBLEM, TEXT, "event", "ts", *analysed_columns()]
    # The one read of the input: parsed lines, cut to the analysed columns, written once as
    # Parquet under --out (executors share it on a cluster) and read back, column-pruned, by
    # every later job. Spark's in-memory cache instead: building the compressed column cache
    # cost more CPU than the parse, and it peaked at 2,804 MiB on the 2,000,000-line bench
    # log (docs/performance.md).
    store = out / "_lines.parquet"
    try:
        lines.select(*keep).write.mode("overwrite").parquet(str(store))
        stage("input read and parsed once (Parquet copy of the parsed lines)")
        parsed = spark.read.parquet(str(store))
        accounts = account_lines(parsed, files, since, until)
        events = with_service_time(valid_events(parsed, since, until), fetch_max_wait_ms)
        tables = _answer_all(spark, events, out, slowest, stage)
    finally:
        shutil.rmtree(store, ignore_errors=True)
    jobs = _job_count(spark) - jobs_before

    stage("summary.json")
    summary = build_summary(accounts, tables, files, since, until)
    summary["events_in_range"] = accounts.in_range
    summary["spark_jobs"] = jobs
    summary["fetch_max_wait_ms"] = fetch_max_wait_ms
    summary["elapsed_s"] = round(time.monotonic() - started, 3)
    for warning in summary["warnings"]:
        progress(f"warning: {warning}")
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n",
                                      encoding="utf-8")
    stage("report.html")
    (out / "report.html").write_text(render_report(summary, tables), encoding="utf-8")
    progress(f"done in {time.monotonic() - started:.1f}s: {out}")
    return AnalysisResult(summary, tables, out)
