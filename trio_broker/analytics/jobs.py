"""The batch job: the seeds' troubleshooting questions (§9.2) answered from the broker's logs.

Every question is one function from the parsed events to a small DataFrame; :func:`run_analysis`
writes each as a Parquet table in the output directory, then ``summary.json`` and ``report.html``
from the collected tables. pyspark is imported lazily (see :mod:`trio_broker.analytics`).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from .inputs import prepare_inputs

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
from .request_tables import (
    CONNECTIONS_RSD,
    DEFAULT_FETCH_MAX_WAIT_MS,
    HEADLINE_METHOD,
    KLL_K,
    KLL_RANK_ERROR,
    PERCENTILES,
    REBALANCE_WAIT_APIS,
    STAGES,
    dominant_stage_column,
    errors_by_client,
    errors_by_code,
    expected_wait_column,
    headline_percentiles,
    latency_by_api,
    latency_by_client,
    latency_by_client_api,
    request_grain,
    request_queue_by_minute,
    slowest_requests,
    top_clients,
    with_service_time,
)
from .rows import collect_and_write, collect_rows
from .session import SMALL_INPUT_BYTES, get_spark
from .summary import build_summary
from .tables import (
    QUESTIONS,
    Question,
    analysed_columns,
    authentication_failures,
    closed_connections,
    connection_churn_by_minute,
    event_loop_blocked,
    group_rebalances,
    invalid_frames,
    metrics_timeline,
    mutes_by_reason,
    rejected_connections,
    saturation_by_minute,
    throttled_clients,
    transactions,
)

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "BLANK", "BLOCK", "CONNECTIONS_RSD", "DEFAULT_FETCH_MAX_WAIT_MS", "FILE", "HEADLINE_METHOD",
    "KLL_K", "KLL_RANK_ERROR",
    "PART", "PERCENTILES", "PROBLEM", "QUESTIONS", "REBALANCE_WAIT_APIS", "REQUIRED_FIELDS",
    "ROW", "SMALL_INPUT_BYTES", "STAGES", "TEXT", "WRONG_TYPE", "AnalysisResult", "LineAccounts",
    "Question", "account_lines", "analysed_columns", "authentication_failures",
    "build_summary", "closed_connections", "collect_and_write", "collect_rows", "connection_churn_by_minute",
    "dominant_stage_column", "errors_by_client", "errors_by_code", "event_loop_blocked", "expected_wait_column", "get_spark", "headline_percentiles", "request_grain",
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


#: The partition column of the Parquet copy: ``request`` for usable request lines, ``other``.
KIND = "_kind"


@attrs.frozen
class Inputs:
    """What the tables are computed from: the usable request lines in range (``requests``,
    the Parquet copy's part, read column-pruned), the other lines (``other``, cached: a few
    percent of a broker log) and the request lines aggregated once per broker, client, API
    and error, with each group's slowest lines (``grain``, :func:`request_grain`, cached:
    hundreds of rows)."""

    requests: DataFrame
    other: DataFrame
    grain: DataFrame


def _builders(slowest: int) -> dict[str, Callable[[Inputs], DataFrame]]:
    return {
        "rejected_connections": lambda i: rejected_connections(i.other),
        "closed_connections": lambda i: closed_connections(i.other),
        "saturation_by_minute": lambda i: saturation_by_minute(i.other),
        "metrics_timeline": lambda i: metrics_timeline(i.other),
        "mutes_by_reason": lambda i: mutes_by_reason(i.other),
        "event_loop_blocked": lambda i: event_loop_blocked(i.other),
        "request_queue_by_minute": lambda i: request_queue_by_minute(i.requests, i.other),
        "latency_by_api": lambda i: latency_by_api(i.grain, headline_percentiles(i.requests)),
        "slowest_requests": lambda i: slowest_requests(i.requests, slowest,
                                                       i.grain if slowest > 0 else None),
        "latency_by_client": lambda i: latency_by_client(i.grain),
        "latency_by_client_api": lambda i: latency_by_client_api(i.grain),
        "errors_by_code": lambda i: errors_by_code(i.grain),
        "errors_by_client": lambda i: errors_by_client(i.grain),
        "invalid_frames": lambda i: invalid_frames(i.other),
        "connection_churn_by_minute": lambda i: connection_churn_by_minute(i.other),
        "top_clients": lambda i: top_clients(i.grain),
        "throttled_clients": lambda i: throttled_clients(i.other, i.grain),
        "group_rebalances": lambda i: group_rebalances(i.other),
        "authentication_failures": lambda i: authentication_failures(i.other),
        "transactions": lambda i: transactions(i.other),
    }


#: The tables that scan the request lines of the copy (the others read the small cached
#: inputs): submitted first, so the cheap tables fill the gaps beside them instead of
#: leaving them to run last, alone (longest first).
SCANNING_TABLES = ("request_queue_by_minute", "latency_by_api")


def _submission_order() -> list[Question]:
    """:data:`QUESTIONS`, the :data:`SCANNING_TABLES` first."""
    return sorted(QUESTIONS, key=lambda q: q.name not in SCANNING_TABLES)


def _answer_all(pool: Executor, inputs: Inputs, out: Path, slowest: int,
                stage: Progress) -> dict[str, list[dict[str, Any]]]:
    """Every question's table, written as ``out/NAME.parquet`` and collected (in QUESTIONS
    order). ``pool``'s threads submit jobs at once, so one job's driver-side work (planning,
    the write's commit, the collect) and its last tasks overlap another's tasks."""

    builders = _builders(slowest)

    def answer(question: Question) -> list[dict[str, Any]]:
        rows = collect_and_write(builders[question.name](inputs),
                                 out / f"{question.name}.parquet")
        stage(f"{question.name}: {len(rows)} row(s)")
        return rows

    answers = {q.name: pool.submit(answer, q) for q in _submission_order()}
    return {q.name: answers[q.name].result() for q in QUESTIONS}


#: Shuffle partitions of the jobs after the read in local mode. Every table is small (a few
#: thousand rows at most; the jobs that scan the request lines, the line accounts and the
#: request aggregation included, shuffle only their partial aggregates): one reduce task per
#: job, and no range-sampling job before each table's sort, took about a sixth off the tables'
#: time (docs/performance.md, analytics helper "an").
TABLE_SHUFFLE_PARTITIONS = "1"


@contextmanager
def _table_shuffle(spark: SparkSession) -> Iterator[None]:
    """Run the jobs after the read with :data:`TABLE_SHUFFLE_PARTITIONS` in local mode (a cluster's own
    setting is left alone), then put the session's setting back (a shared session)."""
    key = "spark.sql.shuffle.partitions"
    if not (spark.sparkContext.master or "").startswith("local"):
        yield
        return
    before = spark.conf.get(key)
    spark.conf.set(key, TABLE_SHUFFLE_PARTITIONS)
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


def run_analysis(spark: SparkSession, files: Sequence[str], out: Path, *,
                 since: datetime | None = None, until: datetime | None = None,
                 slowest: int = 50, fetch_max_wait_ms: float = DEFAULT_FETCH_MAX_WAIT_MS,
                 progress: Progress = _no_progress) -> AnalysisResult:
    """Read ``files``, answer every question, write tables, ``summary.json`` and ``report.html``.

    The input is read once: the first job parses the lines (only the columns the questions
    use) and writes them as Parquet under ``out``; every other job reads that copy (removed
    at the end). The request lines are aggregated once (:func:`request_grain`) for every
    request table; the other lines are few and cached. Each table is computed once and
    collected as Arrow; only bounded results reach the driver (never a row per line).
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from .report import render_report

    started = time.monotonic()
    spark.conf.set("spark.sql.session.timeZone", "UTC")  # timestamps are UTC end to end
    # Keep the good fields of a line with one wrongly typed field, to name the bad field.
    spark.conf.set("spark.sql.json.enablePartialResults", "true")
    # request_grain keeps a few KLL sketches per group (8 KB each): hash-aggregate up to
    # this many groups per task before sorting (Spark's default of 128 sorted every request
    # line of the bench log, a fifth more CPU for the aggregation).
    spark.conf.set("spark.sql.objectHashAggregate.sortBased.fallbackThreshold", "2048")
    # The copy's two parts are written side by side, not sorted by kind first.
    spark.conf.set("spark.sql.maxConcurrentOutputFileWriters", "2")
    # The backstop for URLs, which prepare_inputs does not check: skip what cannot be read.
    spark.conf.set("spark.sql.files.ignoreCorruptFiles", "true")
    spark.conf.set("spark.sql.files.ignoreMissingFiles", "true")
    out.mkdir(parents=True, exist_ok=True)
    prepared = prepare_inputs(files, out / "_inputs")
    steps = len(QUESTIONS) + 5
    step = 0

    def stage(message: str) -> None:
        nonlocal step
        step += 1
        progress(f"[{step}/{steps}] {message} ({time.monotonic() - started:.1f}s)")

    stage(f"reading {len(files)} file(s)")
    jobs_before = _job_count(spark)
    # Only the fields the tables use are parsed and type-checked (docs/decisions.md).
    lines = read_logs(spark, prepared.readable, columns=analysed_columns())
    keep = [FILE, BLOCK, PART, ROW, PROBLEM, TEXT, "event", "ts", *analysed_columns()]
    # The one read of the input: the parsed lines, cut to the analysed columns, written once
    # as Parquet under --out (executors share it on a cluster) and read back, column-pruned,
    # by the few jobs that need lines; split by kind (usable request lines, the rest) so the
    # jobs over the few other lines read only their part. Spark's in-memory cache and a
    # local checkpoint of the rows instead both cost more CPU (docs/performance.md).
    store = out / "_lines.parquet"
    cached: list[DataFrame] = []
    kind = F.when(F.col(PROBLEM).isNull() & (F.col("event") == "request"), F.lit("request")) \
        .otherwise(F.lit("other"))
    copy = lines.select(*keep).withColumn(KIND, kind)
    try:
        # Without dictionary encoding: it cost more CPU than the parse's conversion of the
        # kept fields (docs/performance.md).
        (copy.write.mode("overwrite")
         .partitionBy(KIND).option("parquet.enable.dictionary", "false").parquet(str(store)))
        stage("input read and parsed once (Parquet copy of the parsed lines)")
        # Read back with the copy's schema: with no line at all (empty or no usable files)
        # there is no Parquet file to infer one from.
        parsed = spark.read.schema(copy.schema).parquet(str(store))
        events = with_service_time(valid_events(parsed, since, until), fetch_max_wait_ms)
        other = events.where(F.col(KIND) == "other").persist(StorageLevel.MEMORY_ONLY)
        requests = events.where(F.col(KIND) == "request")
        grain = request_grain(requests, slowest).persist(StorageLevel.MEMORY_ONLY)
        cached += [other, grain]
        # From here on, threads submit jobs at once: the line accounts run beside everything
        # else (they are needed only for the summary), the two caches fill side by side, and
        # one job's driver-side work and last tasks overlap another's tasks.
        with _table_shuffle(spark), ThreadPoolExecutor(
                max_workers=4, thread_name_prefix="analyze") as pool:
            accounting = pool.submit(account_lines, parsed, files, since, until,
                                     prepared.display)
            # Filled once each before the table jobs run at once (they would all compute them).
            other_filled = pool.submit(other.count)
            groups = grain.count()
            other_filled.result()
            stage(f"requests aggregated once ({groups} broker x client x API x error groups)")
            tables = _answer_all(pool, Inputs(requests, other, grain), out, slowest, stage)
            accounts = accounting.result()
    finally:
        for frame in cached:
            frame.unpersist()
        shutil.rmtree(prepared.work, ignore_errors=True)
        shutil.rmtree(store, ignore_errors=True)
    jobs = _job_count(spark) - jobs_before

    stage("summary.json")
    summary = build_summary(accounts, tables, files, since, until,
                            unusable_files=prepared.unusable_files,
                            schema_versions=accounts.schema_versions)
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
