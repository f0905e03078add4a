"""The batch job: the seeds' troubleshooting questions (§9.2) answered from the broker's logs.

Every question is one function from the parsed events to a small DataFrame; :func:`run_analysis`
writes each as a Parquet table in the output directory, then ``summary.json`` and ``report.html``
from the collected tables. pyspark is imported lazily (see :mod:`trio_broker.analytics`).
"""

from __future__ import annotations

import json
import math
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from trio_broker.observability.events import EVENTS, SCHEMA_VERSION

from .schema import CORRUPT_RECORD, log_schema, union_fields

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pyspark.sql import Column, DataFrame, SparkSession

#: Kafka's request-time breakdown, in the order a request passes through the stages.
STAGES = ("request_queue_ms", "local_ms", "remote_ms", "throttle_ms", "response_queue_ms",
          "send_ms")
PERCENTILES = (0.5, 0.95, 0.99)
#: ``percentile_approx`` accuracy of every percentile but the per-API total: the rank error is at
#: most 1/accuracy of the group's count (0.01%).
_PERCENTILE_ACCURACY = 10_000
#: Accuracy of the headline p50/p95/p99 of ``total_ms`` per API: exact (nearest rank) up to a
#: million requests per API, rank error under n/1,000,000 beyond.
HEADLINE_ACCURACY = 1_000_000
#: Stand-in for a Fetch's max wait, which the request line does not carry: Kafka consumers'
#: default ``fetch.max.wait.ms``.
DEFAULT_FETCH_MAX_WAIT_MS = 500.0
#: APIs whose ``remote_ms`` is a wait for the group's rebalance.
REBALANCE_WAIT_APIS = ("JoinGroup", "SyncGroup")

#: Error names that mean success on a request line.
_NO_ERROR = ("NONE", "")

Progress = Callable[[str], None]


def _no_progress(_message: str) -> None:
    return None


@attrs.frozen
class Question:
    """One Parquet table: its name, the symptom it diagnoses, and what it holds."""

    name: str
    symptom: str
    description: str


#: The tables written to the output directory, in report order.
QUESTIONS: tuple[Question, ...] = (
    Question("rejected_connections", "Clients cannot connect, or are refused",
             "Connections refused at accept time, by IP, listener and reason."),
    Question("closed_connections", "Clients are disconnected",
             "Connections closed, by reason (client, idle, invalid frame, shutdown, ...)."),
    Question("saturation_by_minute", "Requests are slow although the handlers are fine (slow I/O)",
             "Per minute: network processor and handler idle percent, mutes and throttles."),
    Question("metrics_timeline", "Requests are slow although the handlers are fine (slow I/O)",
             "Every metrics_snapshot: queue sizes, idle percent, memory pool, connections."),
    Question("mutes_by_reason", "Requests are slow although the handlers are fine (slow I/O)",
             "How often connections stopped reading, why, and for how long."),
    Question("request_queue_by_minute", "Requests enter slowly and the handlers are idle "
             "(request queue blocked)",
             "Per minute: request queue time, request queue size, memory pool left."),
    Question("latency_by_api", "Handlers are busy and responses are slow (slow handling)",
             "Per API: p50/p95/p99 of the total time and of every stage."),
    Question("slowest_requests", "Handlers are busy and responses are slow (slow handling)",
             "The slowest requests, long-poll and rebalance waits set aside, with the stage "
             "that dominated each."),
    Question("latency_by_client", "Some clients are slow",
             "Per client id: p50/p95/p99 of total and service time."),
    Question("latency_by_client_api", "Some clients are slow",
             "Per client id and API: p50/p95/p99 of total and service time."),
    Question("errors_by_code", "Requests fail",
             "Failed requests by API and error code."),
    Question("invalid_frames", "Clients send frames the broker refuses",
             "Invalid frames (invalid_request) by reason and peer."),
    Question("connection_churn_by_minute", "Clients connect and disconnect too often",
             "Per minute: connections accepted, closed (by reason), expired, refused; "
             "connection count."),
    Question("top_clients", "One client overloads the broker",
             "Clients by requests and by bytes in and out."),
    Question("throttled_clients", "Clients are throttled",
             "Clients throttled by quotas, how often and for how long in total."),
    Question("group_rebalances", "Consumers stall or re-read data: group rebalances",
             "Per consumer group: rebalances, their duration and reasons, joins and leaves."),
    Question("authentication_failures", "Clients cannot authenticate (or someone guesses "
             "passwords)",
             "Authentication failures by principal and IP, with mechanisms and the last error."),
    Question("transactions", "read_committed consumers stall or exactly-once jobs fail",
             "Per transactional id: transactions committed, aborted, timed out, fencings, "
             "open time and size."),
)


@attrs.frozen
class AnalysisResult:
    """What :func:`run_analysis` produced."""

    summary: dict[str, Any]
    tables: dict[str, list[dict[str, Any]]]
    out: Path


# -- session ------------------------------------------------------------------------------------


#: Below this much input, a local JVM runs with the C1 JIT alone (see :func:`get_spark`).
SMALL_INPUT_BYTES = 512 * 1024 * 1024


def get_spark(master: str | None = None, app_name: str = "trio_broker analyze",
              extra_conf: Mapping[str, str] | None = None,
              input_bytes: int | None = 0) -> tuple[SparkSession, bool]:
    """A SparkSession and whether this call created it (so the caller knows to stop it).

    ``input_bytes`` (the size of the logs, None when unknown) picks the local JVM's JIT.

    Without ``master`` (and no ``spark.master`` from ``spark-submit``), runs locally on two cores.
    Start-up is kept light: no web UI, no console progress bar, few shuffle partitions locally.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None and master is None:
        return active, False
    # getOrCreate hands back a running context whatever the conf says: then it is not ours
    # to stop (a test's shared session, a notebook's).
    existing = SparkContext._active_spark_context is not None
    conf = SparkConf()
    if master:
        conf.setMaster(master)
    elif not conf.contains("spark.master"):
        conf.setMaster("local[2]")
    conf.setAppName(app_name)
    conf.set("spark.ui.enabled", "false")
    conf.set("spark.ui.showConsoleProgress", "false")
    conf.set("spark.sql.session.timeZone", "UTC")
    if (conf.get("spark.master") or "").startswith("local"):
        # Broker logs analysed on one machine are small for Spark: re-planning adaptively
        # costs more than it saves. Whole-stage code stays off: on the 2,000,000-line bench
        # log it saved no CPU time (runs with and without it peaked at 1.4-2.6 GB; see
        # docs/performance.md). On small
        # inputs the JIT's optimising tier costs more than it saves: C1 alone ran the
        # 200,000-line bench log 3x faster on two busy cores (C2's compile threads compete with
        # a short job), while C2 halved the parse of the 2,000,000-line log. The serial GC
        # keeps the JVM's resident memory small.
        small = input_bytes is not None and input_bytes < SMALL_INPUT_BYTES
        java = "-XX:+UseSerialGC" + (" -XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=64m"
                                     if small else "")
        for key, value in (("spark.sql.shuffle.partitions", "2"),
                           ("spark.sql.codegen.wholeStage", "false"),
                           ("spark.sql.adaptive.enabled", "false"),
                           ("spark.driver.memory", "1g"),
                           ("spark.driver.extraJavaOptions", java)):
            if not conf.contains(key):
                conf.set(key, value)
    for key, value in (extra_conf or {}).items():
        conf.set(key, value)
    spark = SparkSession.builder.config(conf=conf).getOrCreate()
    if existing:
        return spark, False
    spark.sparkContext.setLogLevel("ERROR")
    return spark, True


# -- reading ------------------------------------------------------------------------------------

#: Bookkeeping columns :func:`read_logs` adds to every line: the file, the byte offset of the
#: split it was read in, the Spark partition and the row id within it (together they give the
#: line number of a sample), the reason a line is unusable (null when it is usable) and, for
#: unusable lines only, the start of the line's text.
FILE, BLOCK, PART, ROW, PROBLEM, TEXT = "_file", "_block", "_part", "_row", "problem", "_text"
#: Problems that are no line at all (not counted): blank lines.
BLANK = "blank"
#: Fields an event's line cannot be used without, beyond ``event`` and ``timestamp``: the
#: ``required`` fields of events.py.
REQUIRED_FIELDS: Mapping[str, tuple[str, ...]] = {
    name: spec.required for name, spec in EVENTS.items() if spec.required}
_SAMPLE_CHARS = 160
#: The text kept of an unusable line (enough to name the field of the wrong type).
_KEPT_CHARS = 8192
WRONG_TYPE = "wrong type"


def read_logs(spark: SparkSession, files: Sequence[str]) -> DataFrame:
    """Every line of ``files`` under the declared schema, plus ``ts`` and why it is unusable.

    The text is read once by the JVM (``spark.read.text``; gzip included) and parsed with
    ``from_json`` against the schema built from events.py, so nothing runs in Python per line.
    ``problem`` is null for a usable line and otherwise one of: ``blank``, ``not JSON``,
    ``not an object``, ``not a broker event`` (a JSON object without an ``event`` name: another
    program's line), ``unknown event``, ``missing field X``, ``wrong type: X``, ``bad timestamp``.
    Every field is optional except ``event``, ``timestamp`` and :data:`REQUIRED_FIELDS`. A field
    of the wrong type makes the line unusable (a string field takes any JSON value's text, as
    Spark's JSON reader does). ``_corrupt_record`` holds the text of a line that did not parse
    against the schema.
    """
    from pyspark.sql import functions as F

    schema = log_schema()
    text = spark.read.text(list(files))
    raw = text.select(
        F.col("_metadata.file_path").alias(FILE), F.col("_metadata.file_block_start").alias(BLOCK),
        F.spark_partition_id().alias(PART), F.monotonically_increasing_id().alias(ROW),
        F.col("value"),
        F.from_json(F.col("value"), schema, {"mode": "PERMISSIVE",
                                             "columnNameOfCorruptRecord": CORRUPT_RECORD})
        .alias("_j"))
    fields = [f.name for f in schema.fields]
    parsed = raw.select(FILE, BLOCK, PART, ROW, "value",
                        *(F.col("_j").getField(name).alias(name) for name in fields))
    parsed = parsed.withColumn("ts", F.try_to_timestamp(F.col("timestamp")))
    problem = problem_column(fields)
    return (parsed.withColumn(PROBLEM, problem)
            .withColumn(TEXT, F.when(F.col(PROBLEM).isNotNull() & (F.col(PROBLEM) != BLANK),
                                     F.substring(F.col("value"), 1, _KEPT_CHARS)))
            .drop("value"))


def problem_column(fields: Sequence[str]) -> Column:
    """Why a parsed line is unusable (null when usable); see :func:`read_logs`.

    A line with a wrongly typed field gets :data:`WRONG_TYPE` here; :func:`wrong_field_column`
    names the field, for those lines only (its expression is large: one test per field).
    """
    from pyspark.sql import functions as F

    value = F.col("value")
    event = F.col("event")
    corrupt = F.col(CORRUPT_RECORD).isNotNull()
    known = event.isin(*EVENTS)
    # Every expensive test sits in one branch only, evaluated for the rare bad lines: an
    # expression used in two branches would be computed for every line (common
    # subexpression elimination hoists it).
    rare = (F.when(F.trim(value) == "", F.lit(BLANK))
            .when(F.get_json_object(value, "$").isNull(), F.lit("not JSON"))
            .when(~F.ltrim(value).startswith("{"), F.lit("not an object"))
            .when(event.isNull(), F.lit("not a broker event"))
            .when(~known, F.lit("unknown event"))
            .otherwise(F.lit(WRONG_TYPE)))
    expression = (F.when(corrupt | (F.substring(value, 1, 1) != "{"), rare)
                  .when(event.isNull(), F.lit("not a broker event"))
                  .when(~known, F.lit("unknown event"))
                  .when(F.col("timestamp").isNull(), F.lit("missing field timestamp"))
                  .when(F.col("ts").isNull(), F.lit("bad timestamp")))
    for name, required in REQUIRED_FIELDS.items():
        for field in required:
            expression = expression.when((event == name) & F.col(field).isNull(),
                                         F.lit(f"missing field {field}"))
    return expression


def wrong_field_column(text: Column) -> Column:
    """For a line with a wrongly typed field: ``wrong type: NAME``, NAME the first declared
    field (schema order) that is in the line's text but not in its typed parse."""
    from pyspark.sql import functions as F

    schema = log_schema()
    typed = F.from_json(text, schema, {"mode": "PERMISSIVE",
                                       "columnNameOfCorruptRecord": CORRUPT_RECORD})
    wrong = F.lit(WRONG_TYPE)
    for field in reversed([f.name for f in schema.fields if f.name != CORRUPT_RECORD]):
        wrong = F.when(typed.getField(field).isNull()
                       & F.get_json_object(text, f"$.{field}").isNotNull(),
                       F.lit(f"{WRONG_TYPE}: {field}")).otherwise(wrong)
    return wrong


def valid_events(lines: DataFrame, since: datetime | None = None,
                 until: datetime | None = None) -> DataFrame:
    """The usable lines, optionally restricted to ``since <= ts < until``."""
    from pyspark.sql import functions as F

    events = lines.where(F.col(PROBLEM).isNull())
    if since is not None:
        events = events.where(F.col("ts") >= _timestamp_literal(since))
    if until is not None:
        events = events.where(F.col("ts") < _timestamp_literal(until))
    return events


def _timestamp_literal(moment: datetime) -> Column:
    # Handed to the JVM as text with its offset: a Python datetime literal would go through the
    # driver's local time zone on its way to Spark.
    from pyspark.sql import functions as F

    aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return F.lit(aware.astimezone(UTC).isoformat()).cast("timestamp")


def iso_utc(column: Column) -> Column:
    """A timestamp column as ISO 8601 UTC text (``...Z``), formatted by Spark.

    Collecting a timestamp into Python converts it to the driver's local time as a naive
    datetime; formatting it on the JVM side (session time zone UTC) keeps it exact.
    """
    from pyspark.sql import functions as F

    return F.date_format(column, "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'")


# -- the questions ------------------------------------------------------------------------------


def _of(events: DataFrame, name: str) -> DataFrame:
    from pyspark.sql import functions as F

    return events.where(F.col("event") == name)


def _minute(column: str = "ts") -> Column:
    from pyspark.sql import functions as F

    return F.date_trunc("minute", F.col(column)).alias("minute")


def rejected_connections(events: DataFrame) -> DataFrame:
    """Connections refused at accept time, by IP, listener and reason (most refused first)."""
    from pyspark.sql import functions as F

    return (_of(events, "connection_rejected")
            .groupBy("ip", "listener", "reason")
            .agg(F.count(F.lit(1)).alias("count"), F.max("limit").alias("limit"),
                 F.min("ts").alias("first_seen"), F.max("ts").alias("last_seen"))
            .orderBy(F.desc("count"), "ip", "listener", "reason"))


def closed_connections(events: DataFrame) -> DataFrame:
    """Connections closed, by reason, with how long they had lived and served."""
    from pyspark.sql import functions as F

    return (_of(events, "connection_closed")
            .groupBy("reason")
            .agg(F.count(F.lit(1)).alias("count"),
                 F.avg("duration_ms").alias("avg_duration_ms"),
                 F.try_sum("requests").alias("requests"))
            .orderBy(F.desc("count"), "reason"))


def metrics_timeline(events: DataFrame) -> DataFrame:
    """Every ``metrics_snapshot`` in time order (one row per broker per snapshot)."""
    snapshot_fields = [f for f in EVENTS["metrics_snapshot"].fields]
    return (_of(events, "metrics_snapshot")
            .select("ts", "broker", *snapshot_fields)
            .orderBy("ts", "broker"))


def saturation_by_minute(events: DataFrame) -> DataFrame:
    """Per minute and broker: processor/handler idle percent, mutes, throttles, rejections."""
    from pyspark.sql import functions as F

    snapshots = (_of(events, "metrics_snapshot")
                 .groupBy(_minute(), "broker")
                 .agg(F.avg("network_processor_avg_idle_percent").alias("avg_network_idle_percent"),
                      F.min("network_processor_avg_idle_percent").alias("min_network_idle_percent"),
                      F.avg("request_handler_avg_idle_percent").alias("avg_handler_idle_percent"),
                      F.max("connection_count").alias("max_connections"),
                      F.count(F.lit(1)).alias("snapshots")))
    counted = (events.where(F.col("event").isin("connection_muted", "throttle_started",
                                                "connection_rejected"))
               .groupBy(_minute(), "broker")
               .agg(F.try_sum((F.col("event") == "connection_muted").cast("long")).alias("mutes"),
                    F.try_sum((F.col("event") == "throttle_started").cast("long")).alias("throttles"),
                    F.try_sum((F.col("event") == "connection_rejected").cast("long"))
                    .alias("rejections")))
    joined = snapshots.join(counted, ["minute", "broker"], "full_outer")
    return (joined.fillna(0, subset=["mutes", "throttles", "rejections", "snapshots"])
            .orderBy("minute", "broker"))


def mutes_by_reason(events: DataFrame) -> DataFrame:
    """How often connections were muted, why, and how long they stayed muted."""
    from pyspark.sql import functions as F

    muted = (_of(events, "connection_muted").groupBy("reason")
             .agg(F.count(F.lit(1)).alias("mutes"),
                  F.countDistinct("connection_id").alias("connections"),
                  F.max("inflight").alias("max_inflight")))
    unmuted = (_of(events, "connection_unmuted").groupBy("reason")
               .agg(F.count(F.lit(1)).alias("unmutes"),
                    F.sum("muted_ms").alias("total_muted_ms"),
                    F.avg("muted_ms").alias("avg_muted_ms"),
                    F.max("muted_ms").alias("max_muted_ms")))
    return (muted.join(unmuted, "reason", "full_outer")
            .fillna(0, subset=["mutes", "unmutes", "connections"])
            .orderBy(F.desc("mutes"), "reason"))


def request_queue_by_minute(events: DataFrame) -> DataFrame:
    """Per minute and broker: queue time of requests, request queue size, memory pool left."""
    from pyspark.sql import functions as F

    requests = (_of(events, "request")
                .groupBy(_minute(), "broker")
                .agg(F.count(F.lit(1)).alias("requests"),
                     F.avg("request_queue_ms").alias("avg_request_queue_ms"),
                     F.percentile_approx("request_queue_ms", 0.95, _PERCENTILE_ACCURACY)
                     .alias("p95_request_queue_ms"),
                     F.max("request_queue_ms").alias("max_request_queue_ms"),
                     F.try_sum("request_bytes").alias("request_bytes"),
                     F.try_sum(_is_error().cast("long")).alias("errors"),
                     F.percentile_approx("service_ms", 0.99, _PERCENTILE_ACCURACY)
                     .alias("p99_service_ms")))
    gauges = (_of(events, "metrics_snapshot")
              .groupBy(_minute(), "broker")
              .agg(F.avg("request_queue_size").alias("avg_request_queue_size"),
                   F.max("request_queue_size").alias("max_request_queue_size"),
                   F.max("response_queue_size").alias("max_response_queue_size"),
                   F.min("memory_pool_available").alias("min_memory_pool_available"),
                   F.avg("request_handler_avg_idle_percent").alias("avg_handler_idle_percent")))
    return (requests.join(gauges, ["minute", "broker"], "full_outer")
            .fillna(0, subset=["requests"])
            .orderBy("minute", "broker"))


def expected_wait_column(fetch_max_wait_ms: float = DEFAULT_FETCH_MAX_WAIT_MS) -> Column:
    """The part of a request's time that is waiting by design, not slowness.

    A Fetch waits in purgatory (``remote_ms``) for data up to the consumer's max wait
    (``fetch.max.wait.ms``, not on the request line: ``fetch_max_wait_ms`` stands for it); a
    JoinGroup or SyncGroup waits (``remote_ms``) for the rest of the group to rebalance.
    """
    from pyspark.sql import functions as F

    api = F.col("api")
    remote = F.coalesce(F.col("remote_ms"), F.lit(0.0))
    return (F.when(api == "Fetch", F.least(remote, F.lit(float(fetch_max_wait_ms))))
            .when(api.isin(*REBALANCE_WAIT_APIS), remote)
            .otherwise(F.lit(0.0)))


def with_service_time(requests: DataFrame,
                      fetch_max_wait_ms: float = DEFAULT_FETCH_MAX_WAIT_MS) -> DataFrame:
    """``requests`` plus ``expected_wait_ms`` and ``service_ms`` (total time minus that wait)."""
    from pyspark.sql import functions as F

    return (requests.withColumn("expected_wait_ms", expected_wait_column(fetch_max_wait_ms))
            .withColumn("service_ms", F.greatest(F.col("total_ms") - F.col("expected_wait_ms"),
                                                 F.lit(0.0))))


def _is_error() -> Column:
    from pyspark.sql import functions as F

    return F.coalesce(F.col("error"), F.lit("NONE")).isin(*_NO_ERROR) == F.lit(False)


def _latency_aggregates(accuracy: int = _PERCENTILE_ACCURACY) -> list[Column]:
    from pyspark.sql import functions as F

    aggregates = [F.count(F.lit(1)).alias("requests"),
                  F.try_sum(_is_error().cast("long")).alias("errors")]
    for column in ("total_ms", "service_ms"):
        aggregates.append(F.percentile_approx(column, list(PERCENTILES), accuracy)
                          .alias(f"_pct_{column}"))
        aggregates.append(F.max(column).alias(f"max_{column}"))
    return aggregates


def _latency_columns() -> list[Column]:
    from pyspark.sql import functions as F

    columns = [F.col("requests"), F.col("errors")]
    for column in ("total_ms", "service_ms"):
        short = column.removesuffix("_ms")
        for index, pct in enumerate(PERCENTILES):
            columns.append(F.col(f"_pct_{column}")[index].alias(f"p{_pct_label(pct)}_{short}_ms"))
        columns.append(F.col(f"max_{column}"))
    return columns


def latency_by_api(events: DataFrame) -> DataFrame:
    """Per API: count, errors, p50/p95/p99/max of ``total_ms``, and the same for every stage.

    ``<stage>_share`` is the stage's part of the API's summed total time, which says where the
    time goes when the percentiles alone do not. ``total_ms`` percentiles use an accuracy of
    :data:`HEADLINE_ACCURACY` (exact up to that many requests per API); ``service_ms`` (total
    minus expected waits) and the stages use :data:`_PERCENTILE_ACCURACY`.
    """
    from pyspark.sql import functions as F

    aggregates: list[Column] = [
        F.count(F.lit(1)).alias("requests"),
        F.try_sum(_is_error().cast("long")).alias("errors"),
        F.try_sum("request_bytes").alias("request_bytes"),
        F.try_sum("response_bytes").alias("response_bytes"),
        F.sum("total_ms").alias("sum_total_ms"),
        F.percentile_approx("service_ms", list(PERCENTILES), _PERCENTILE_ACCURACY)
        .alias("_pct_service_ms"),
        F.max("service_ms").alias("max_service_ms"),
        F.sum("expected_wait_ms").alias("sum_expected_wait_ms"),
    ]
    for column in ("total_ms", *STAGES):
        accuracy = HEADLINE_ACCURACY if column == "total_ms" else _PERCENTILE_ACCURACY
        aggregates.append(F.percentile_approx(column, list(PERCENTILES), accuracy)
                          .alias(f"_pct_{column}"))
        aggregates.append(F.max(column).alias(f"max_{column}"))
        if column != "total_ms":
            aggregates.append(F.sum(column).alias(f"_sum_{column}"))
    grouped = _of(events, "request").groupBy("api").agg(*aggregates)
    columns: list[Column] = [F.col("api"), F.col("requests"), F.col("errors"),
                             F.col("request_bytes"), F.col("response_bytes")]
    for column in ("total_ms", "service_ms", *STAGES):
        short = column.removesuffix("_ms")
        for index, pct in enumerate(PERCENTILES):
            columns.append(F.col(f"_pct_{column}")[index].alias(f"p{_pct_label(pct)}_{short}_ms"))
        columns.append(F.col(f"max_{column}"))
        if column not in ("total_ms", "service_ms"):
            columns.append(F.when(F.col("sum_total_ms") > 0,
                                  F.col(f"_sum_{column}") / F.col("sum_total_ms"))
                           .alias(f"{short}_share"))
    columns.append(F.col("sum_expected_wait_ms"))
    return grouped.select(*columns).orderBy(F.desc("requests"), F.asc_nulls_last("api"))


def latency_by_client(events: DataFrame) -> DataFrame:
    """Per client id: requests, errors, p50/p95/p99/max of total and service time."""
    from pyspark.sql import functions as F

    return (_of(events, "request").groupBy("client_id").agg(*_latency_aggregates())
            .select("client_id", *_latency_columns())
            .orderBy(F.desc("p99_service_ms"), F.asc_nulls_last("client_id")))


def latency_by_client_api(events: DataFrame) -> DataFrame:
    """Per client id and API: requests, errors, p50/p95/p99/max of total and service time."""
    from pyspark.sql import functions as F

    return (_of(events, "request").groupBy("client_id", "api").agg(*_latency_aggregates())
            .select("client_id", "api", *_latency_columns())
            .orderBy(F.desc("p99_service_ms"), F.asc_nulls_last("client_id"),
                     F.asc_nulls_last("api")))


def errors_by_code(events: DataFrame) -> DataFrame:
    """Failed requests by API and error code, with how many clients saw each, first and last."""
    from pyspark.sql import functions as F

    return (_of(events, "request").where(_is_error())
            .groupBy("api", "error")
            .agg(F.count(F.lit(1)).alias("count"),
                 F.countDistinct("client_id").alias("clients"),
                 F.min("ts").alias("first_seen"), F.max("ts").alias("last_seen"))
            .orderBy(F.desc("count"), F.asc_nulls_last("api"), F.asc_nulls_last("error")))


def invalid_frames(events: DataFrame) -> DataFrame:
    """Frames refused (``invalid_request``), by reason and peer, with the largest size seen."""
    from pyspark.sql import functions as F

    return (_of(events, "invalid_request")
            .groupBy("reason", "peer")
            .agg(F.count(F.lit(1)).alias("count"), F.max("size").alias("max_size"),
                 F.sort_array(F.collect_set("api_key")).alias("api_keys"),
                 F.first("detail", ignorenulls=True).alias("example_detail"),
                 F.min("ts").alias("first_seen"), F.max("ts").alias("last_seen"))
            .orderBy(F.desc("count"), F.asc_nulls_last("reason"), F.asc_nulls_last("peer")))


def connection_churn_by_minute(events: DataFrame) -> DataFrame:
    """Per minute: connections accepted, closed (by reason), expired and refused, and the
    connection count (the largest ``connection_count`` of the minute's metrics snapshots)."""
    from pyspark.sql import functions as F

    event = F.col("event")
    churn = (events.where(event.isin("connection_accepted", "connection_closed",
                                     "connection_expired", "connection_rejected",
                                     "metrics_snapshot"))
             .groupBy(_minute())
             .agg(F.count(F.when(event == "connection_accepted", 1)).alias("accepted"),
                  F.count(F.when(event == "connection_closed", 1)).alias("closed"),
                  F.count(F.when(event == "connection_expired", 1)).alias("expired"),
                  F.count(F.when(event == "connection_rejected", 1)).alias("refused"),
                  F.max(F.when(event == "metrics_snapshot", F.col("connection_count")))
                  .alias("connection_count")))
    by_reason = (_of(events, "connection_closed")
                 .groupBy(_minute(), F.coalesce(F.col("reason"), F.lit("(none)")).alias("reason"))
                 .count()
                 .groupBy("minute")
                 .agg(F.map_from_entries(F.sort_array(F.collect_list(
                     F.struct("reason", "count")))).alias("closed_by_reason")))
    return churn.join(by_reason, "minute", "left").orderBy("minute")


def _pct_label(pct: float) -> str:
    return f"{pct * 100:g}".replace(".", "_")


def dominant_stage_column() -> Column:
    """The name of the stage with the largest time on a request line (first one on ties)."""
    from pyspark.sql import functions as F

    values = [F.coalesce(F.col(stage), F.lit(0.0)) for stage in STAGES]
    largest = F.greatest(*values)
    expression = F.when(values[0] == largest, F.lit(STAGES[0]))
    for stage, value in zip(STAGES[1:], values[1:], strict=True):
        expression = expression.when(value == largest, F.lit(stage))
    return expression


def slowest_requests(events: DataFrame, limit: int = 50) -> DataFrame:
    """The ``limit`` slowest requests by service time (total time minus the expected wait of
    :func:`expected_wait_column`), with the stage that dominated each one's total time;
    ``waited`` flags a request whose expected wait is most of its total time."""
    from pyspark.sql import functions as F

    waited = F.col("expected_wait_ms") > F.col("service_ms")
    return (_of(events, "request")
            .select("ts", "broker", "api", "api_version", "correlation_id", "client_id",
                    "connection_id", "error", "request_bytes", "response_bytes", "service_ms",
                    "expected_wait_ms", "total_ms", *STAGES,
                    dominant_stage_column().alias("dominant_stage"),
                    F.coalesce(waited, F.lit(False)).alias("waited"))
            .orderBy(F.desc_nulls_last("service_ms"), F.desc_nulls_last("total_ms"), "ts")
            .limit(limit))


#: Relative standard deviation of ``top_clients``' count of distinct connections per client
#: (``approx_count_distinct``): 1%, so about 95% of counts are within 2% of the exact one.
CONNECTIONS_RSD = 0.01


def top_clients(events: DataFrame) -> DataFrame:
    """Every client id by requests (then bytes), with the bytes it sent and received and its
    number of distinct connections (approximate: :data:`CONNECTIONS_RSD`)."""
    from pyspark.sql import functions as F

    return (_of(events, "request")
            .groupBy("client_id")
            .agg(F.count(F.lit(1)).alias("requests"),
                 F.try_sum("request_bytes").alias("request_bytes"),
                 F.try_sum("response_bytes").alias("response_bytes"),
                 F.try_add(F.coalesce(F.try_sum("request_bytes"), F.lit(0)),
                           F.coalesce(F.try_sum("response_bytes"), F.lit(0)))
                 .alias("total_bytes"),
                 # Approximate (HyperLogLog++, CONNECTIONS_RSD): an exact distinct count
                 # shuffled every (client, connection) pair, a quarter of the run's time on
                 # the bench log where nearly every request has its own connection id.
                 F.approx_count_distinct("connection_id", CONNECTIONS_RSD).alias("connections"),
                 F.sort_array(F.collect_set("api")).alias("apis"),
                 F.first("client_software_name", ignorenulls=True).alias("client_software_name"),
                 F.first("client_software_version", ignorenulls=True)
                 .alias("client_software_version"),
                 F.sum("total_ms").alias("sum_total_ms"))
            .orderBy(F.desc("requests"), F.desc("total_bytes"), "client_id"))


def throttled_clients(events: DataFrame) -> DataFrame:
    """Clients throttled by quotas: throttle events and their throttle time, per client id,
    with the users (principal names) and the quota types (``producer_byte_rate``, ...) involved.

    One throttle shows twice: as a ``throttle_started`` event and as the ``throttle_ms`` of the
    request's line; ``total_throttle_ms`` takes the larger of the two sums, never their total.
    """
    from pyspark.sql import functions as F

    started = (_of(events, "throttle_started").groupBy("client_id")
               .agg(F.count(F.lit(1)).alias("throttle_events"),
                    F.sum("throttle_ms").alias("throttle_event_ms"),
                    F.max("throttle_ms").alias("max_throttle_ms"),
                    F.sort_array(F.collect_set("user")).alias("users"),
                    F.sort_array(F.collect_set("quota_type")).alias("quota_types")))
    on_requests = (_of(events, "request").where(F.col("throttle_ms") > 0).groupBy("client_id")
                   .agg(F.count(F.lit(1)).alias("throttled_requests"),
                        F.sum("throttle_ms").alias("request_throttle_ms")))
    joined = started.join(on_requests, "client_id", "full_outer")
    total = F.greatest(F.coalesce(F.col("throttle_event_ms"), F.lit(0.0)),
                       F.coalesce(F.col("request_throttle_ms"), F.lit(0.0)))
    return (joined.fillna(0, subset=["throttle_events", "throttled_requests"])
            .withColumn("total_throttle_ms", total)
            .orderBy(F.desc("total_throttle_ms"), "client_id"))


def authentication_failures(events: DataFrame) -> DataFrame:
    """``authentication_failed`` by claimed principal and client IP (the peer without its
    port): failures, mechanisms, first and last, the last error detail (most failures first)."""
    from pyspark.sql import functions as F

    return (_of(events, "authentication_failed")
            .withColumn("ip", F.regexp_extract("peer", r"^\[?(.*?)\]?:\d+$", 1))
            .groupBy("principal", "ip")
            .agg(F.count(F.lit(1)).alias("failures"),
                 F.sort_array(F.collect_set("mechanism")).alias("mechanisms"),
                 F.min("ts").alias("first_seen"), F.max("ts").alias("last_seen"),
                 F.max_by("detail", "ts").alias("last_detail"))
            .orderBy(F.desc("failures"), "principal", "ip"))


def group_rebalances(events: DataFrame) -> DataFrame:
    """Per consumer group: rebalances started and completed, their duration, joins and leaves.

    Built from whichever group events are declared (any event with a ``group_id`` field) and
    logged; with none, the table is empty but keeps its columns.
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    names = [name for name, spec in EVENTS.items() if "group_id" in spec.fields]
    event = F.col("event")

    def count_of(name: str) -> Column:
        # A KIP-848 group epoch bump is that protocol's rebalance: both count as rebalances.
        matches = event.isin(*_REBALANCE_EVENTS) if name == "rebalance_started" \
            else event == name
        return F.try_sum(matches.cast("long")).alias(_COUNT_COLUMNS.get(name, name))

    if not names:
        schema = T.StructType(
            [T.StructField("group_id", T.StringType())]
            + [T.StructField(column, T.LongType()) for column in _COUNT_COLUMNS.values()]
            + [T.StructField("avg_rebalance_ms", T.DoubleType()),
               T.StructField("max_rebalance_ms", T.DoubleType()),
               T.StructField("max_generation", T.LongType()),
               T.StructField("reasons", T.ArrayType(T.StringType())),
               T.StructField("first_seen", T.TimestampType()),
               T.StructField("last_seen", T.TimestampType())])
        return events.sparkSession.createDataFrame([], schema)
    completed_ms = F.when(event == "rebalance_completed", F.col("duration_ms"))
    generation = (F.max("generation") if "generation" in events.columns
                  else F.lit(None).cast("long")).alias("max_generation")
    return (events.where(event.isin(*names))
            .groupBy("group_id")
            .agg(*(count_of(name) for name in _COUNT_COLUMNS),
                 F.avg(completed_ms).alias("avg_rebalance_ms"),
                 F.max(completed_ms).alias("max_rebalance_ms"),
                 generation,
                 F.sort_array(F.collect_set(F.when(event.isin(*_REBALANCE_EVENTS),
                                                   F.col("reason")))).alias("reasons"),
                 F.min("ts").alias("first_seen"), F.max("ts").alias("last_seen"))
            .orderBy(F.desc("rebalances"), "group_id"))


def transactions(events: DataFrame) -> DataFrame:
    """Per transactional id: outcomes (committed, aborted, of which timed out; fenced), how
    long transactions stayed open (a long open one holds read_committed consumers at its
    LSO) and how many partitions they spanned."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    names = [name for name in _TXN_COLUMNS if name in EVENTS]
    columns = events.columns
    if not names or "transactional_id" not in columns:
        schema = T.StructType(
            [T.StructField("transactional_id", T.StringType())]
            + [T.StructField(column, T.LongType()) for column in _TXN_COLUMNS.values()]
            + [T.StructField("avg_open_ms", T.DoubleType()),
               T.StructField("max_open_ms", T.DoubleType()),
               T.StructField("max_partitions", T.LongType()),
               T.StructField("topics", T.ArrayType(T.StringType())),
               T.StructField("first_seen", T.TimestampType()),
               T.StructField("last_seen", T.TimestampType())])
        return events.sparkSession.createDataFrame([], schema)
    event = F.col("event")
    ended = event.isin("transaction_committed", "transaction_aborted")
    open_ms = F.when(ended & (F.col("duration_ms") >= 0), F.col("duration_ms"))
    topic_names = (F.col("topic_names") if "topic_names" in columns
                   else F.lit(None).cast("string"))
    return (events.where(event.isin(*names))
            .groupBy("transactional_id")
            .agg(*(F.try_sum((event == name).cast("long")).alias(column)
                   for name, column in _TXN_COLUMNS.items()),
                 F.avg(open_ms).alias("avg_open_ms"), F.max(open_ms).alias("max_open_ms"),
                 F.max(F.when(ended, F.col("partitions"))).alias("max_partitions"),
                 F.sort_array(F.array_distinct(F.flatten(F.collect_list(F.when(
                     ended & (topic_names != ""), F.split(topic_names, ",")).otherwise(
                     F.array().cast("array<string>")))))).alias("topics"),
                 F.min("ts").alias("first_seen"), F.max("ts").alias("last_seen"))
            .orderBy(F.desc("aborted"), F.desc("committed"), "transactional_id"))


#: Transaction events counted per transactional id, and the column each count goes to.
_TXN_COLUMNS = {"transaction_committed": "committed", "transaction_aborted": "aborted",
                "transaction_timed_out": "timed_out", "transaction_fenced": "fenced"}


#: Group events counted per group, and the column each count goes to.
_COUNT_COLUMNS = {"rebalance_started": "rebalances", "rebalance_completed": "completed",
                  "group_join": "joins", "member_left": "members_left",
                  "member_expired": "members_expired",
                  # The consumer protocol (KIP-848).
                  "group_member_joined": "consumer_joins",
                  "group_member_left": "consumer_members_left",
                  "group_member_fenced": "consumer_members_fenced",
                  "assignment_changed": "assignment_changes"}
#: Events that start a rebalance: classic, and a consumer group's epoch bump.
_REBALANCE_EVENTS = ("rebalance_started", "consumer_group_epoch_bumped")


# -- the whole job ------------------------------------------------------------------------------


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


def collect_rows(frame: DataFrame) -> list[dict[str, Any]]:
    """The rows of a small DataFrame as JSON-ready dicts, timestamps as ISO 8601 UTC text."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    columns = [iso_utc(F.col(f.name)).alias(f.name) if isinstance(f.dataType, T.TimestampType)
               else F.col(f.name) for f in frame.schema.fields]
    return [{k: _jsonable(v) for k, v in row.asDict(recursive=True).items()}
            for row in frame.select(*columns).collect()]


#: The parsed columns the questions read: the only ones kept in the cached copy of the lines
#: (a wide cache costs more to build than the parse). A question reading another field must
#: add it here.
ANALYSED_COLUMNS: tuple[str, ...] = (
    "broker", "connection_id", "listener", "peer", "ip", "reason", "detail", "limit",
    "requests", "duration_ms", "inflight", "muted_ms", "size", "api", "api_key", "api_version",
    "correlation_id", "client_id", "client_software_name", "client_software_version",
    "request_bytes", "response_bytes", "error", *STAGES, "total_ms", "quota_type", "user",
    "group_id", "generation", "principal", "mechanism", "transactional_id", "partitions",
    "topic_names", *EVENTS["metrics_snapshot"].fields)


def analysed_columns() -> list[str]:
    """:data:`ANALYSED_COLUMNS` that are declared (a field may not be, in an older schema)."""
    declared = union_fields()
    return [name for name in ANALYSED_COLUMNS if name in declared]


def _key(value: Any) -> str:
    """A value as a JSON object key: ``(none)`` for a missing one."""
    return "(none)" if value is None else str(value)


def _display_path(uri: str) -> str:
    from urllib.parse import unquote, urlparse

    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme in ("file", "") else uri


@attrs.frozen
class LineAccounts:
    """What the bookkeeping jobs found about the input lines (see :func:`account_lines`)."""

    overview: list[dict[str, Any]]
    samples: dict[str, list[str]]
    usable_by_file: dict[str, int]
    #: Usable lines per event within ``--since``/``--until`` (events with none left out).
    in_range: dict[str, int] = attrs.field(factory=dict)


def account_lines(lines: DataFrame, files: Sequence[str], since: datetime | None = None,
                  until: datetime | None = None) -> LineAccounts:
    """Counts per (problem, event), up to 5 ``file:line`` samples per problem, usable lines per
    file and per event within ``since``/``until``. Line numbers come from each split's first
    row id and the line counts of the splits before it in the same file (rows of a split are
    contiguous in its partition)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    in_range = F.col(PROBLEM).isNull()
    if since is not None:
        in_range &= F.col("ts") >= _timestamp_literal(since)
    if until is not None:
        in_range &= F.col("ts") < _timestamp_literal(until)
    counted = lines.groupBy(PROBLEM, "event", PART, FILE, BLOCK).agg(
        F.count(F.lit(1)).alias("n"), F.min(ROW).alias("first_row"),
        iso_utc(F.min("ts")).alias("first"), iso_utc(F.max("ts")).alias("last"),
        F.count(F.when(in_range, 1)).alias("in_range")).collect()
    events_in_range: dict[str, int] = {}
    for row in counted:
        if row["in_range"]:
            name = _key(row["event"])
            events_in_range[name] = events_in_range.get(name, 0) + row["in_range"]
    merged: dict[tuple[Any, Any], dict[str, Any]] = {}
    split_rows: dict[tuple[int, str, int], dict[str, Any]] = {}
    for row in counted:
        entry = merged.setdefault((row[PROBLEM], row["event"]), {
            PROBLEM: row[PROBLEM], "event": row["event"], "n": 0, "first": None, "last": None})
        entry["n"] += row["n"]
        for key, pick in (("first", min), ("last", max)):
            if row[key] is not None:
                entry[key] = row[key] if entry[key] is None else pick(entry[key], row[key])
        split = split_rows.setdefault((row[PART], row[FILE], row[BLOCK]), {
            PART: row[PART], FILE: row[FILE], BLOCK: row[BLOCK], "n": 0,
            "first_row": row["first_row"], "usable": 0})
        split["n"] += row["n"]
        split["first_row"] = min(split["first_row"], row["first_row"])
        if row[PROBLEM] is None:
            split["usable"] += row["n"]
    overview = list(merged.values())
    splits = list(split_rows.values())
    bad = lines.where(F.col(PROBLEM).isNotNull() & (F.col(PROBLEM) != BLANK))
    if any(entry[PROBLEM] == WRONG_TYPE for entry in overview):
        # Name the wrong field, for those lines only, and count them per field.
        bad = bad.withColumn(PROBLEM, F.when(F.col(PROBLEM) == WRONG_TYPE,
                                             wrong_field_column(F.col(TEXT)))
                             .otherwise(F.col(PROBLEM)))
        refined = bad.where(F.col(PROBLEM).startswith(WRONG_TYPE)).groupBy(PROBLEM, "event") \
            .count().collect()
        overview = [entry for entry in overview if entry[PROBLEM] != WRONG_TYPE]
        overview += [{PROBLEM: row[PROBLEM], "event": row["event"], "n": row["count"],
                      "first": None, "last": None} for row in refined]
    order = Window.partitionBy(PROBLEM).orderBy(FILE, BLOCK, ROW)
    picked = (bad.select(PROBLEM, FILE, BLOCK, PART, ROW,
                         F.substring(F.col(TEXT), 1, _SAMPLE_CHARS).alias(TEXT), "event")
              .withColumn("_n", F.row_number().over(order))
              .where(F.col("_n") <= 5).orderBy(PROBLEM, "_n").collect())
    first_line: dict[tuple[int, str, int], tuple[int, int]] = {}
    usable_by_file: dict[str, int] = {_display_path(f): 0 for f in files}
    by_file: dict[str, list[Any]] = {}
    for split in splits:
        by_file.setdefault(split[FILE], []).append(split)
    for file, parts in by_file.items():
        before = 0
        for split in sorted(parts, key=lambda r: r[BLOCK]):
            first_line[(split[PART], file, split[BLOCK])] = (before, split["first_row"])
            before += split["n"]
        name = _display_path(file)
        usable_by_file[name] = usable_by_file.get(name, 0) + sum(p["usable"] for p in parts)
    samples: dict[str, list[str]] = {}
    for row in picked:
        before, first_row = first_line.get((row[PART], row[FILE], row[BLOCK]), (0, row[ROW]))
        number = before + row[ROW] - first_row + 1
        text = row[TEXT] or ""
        label = row[PROBLEM]
        if label == "unknown event":
            text = f"event {row['event']!r}: {text}"
        samples.setdefault(label, []).append(f"{_display_path(row[FILE])}:{number}: {text}")
    return LineAccounts(overview, samples, usable_by_file, events_in_range)


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


def _latency(row: Mapping[str, Any]) -> dict[str, Any]:
    return {"requests": row["requests"], "errors": row["errors"], "p50": row["p50_total_ms"],
            "p95": row["p95_total_ms"], "p99": row["p99_total_ms"], "max": row["max_total_ms"],
            "p99_service": row["p99_service_ms"]}


def build_summary(accounts: LineAccounts, tables: Mapping[str, list[dict[str, Any]]],
                  files: Sequence[str], since: datetime | None,
                  until: datetime | None) -> dict[str, Any]:
    """The machine-readable answers: counts per question plus the data-quality figures."""
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
    warnings = [f"{name}: no broker events in this file"
                for name, usable in accounts.usable_by_file.items() if not usable]

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
    timeline = tables["metrics_timeline"]
    idle = [r["network_processor_avg_idle_percent"] for r in timeline
            if r.get("network_processor_avg_idle_percent") is not None]
    queue_sizes = [r["request_queue_size"] for r in timeline
                   if r.get("request_queue_size") is not None]
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
        "generated_at": _jsonable(datetime.now(UTC)),
        "inputs": list(files),
        "since": _jsonable(since),
        "until": _jsonable(until),
        "lines": lines_total,
        "usable_lines": lines_total - sum(e["count"] for e in unusable.values()),
        "unusable_lines": sum(e["count"] for e in unusable.values()),
        "unusable": dict(sorted(unusable.items())),
        "warnings": warnings,
        "time_range": {"first": _jsonable(first), "last": _jsonable(last)},
        "events_by_name": dict(sorted(events_by_name.items())),
        "unknown_events": dict(sorted(unknown.items())),
        "percentiles": {
            "latency_ms_by_api": f"p50/p95/p99 of total_ms: percentile_approx with accuracy "
                                 f"{HEADLINE_ACCURACY:,} (exact nearest rank up to that many "
                                 "requests per API)",
            "other": f"percentile_approx with accuracy {_PERCENTILE_ACCURACY:,}: rank error at "
                     f"most {1 / _PERCENTILE_ACCURACY:.2%} of the group's count"},
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
        "network_processor_idle_percent": {
            "min": min(idle) if idle else None,
            "avg": sum(idle) / len(idle) if idle else None},
        "max_request_queue_size": max(queue_sizes) if queue_sizes else None,
        "metrics_snapshots": len(timeline),
        "top_clients": [{"client_id": r["client_id"], "requests": r["requests"],
                         "total_bytes": r["total_bytes"]} for r in tables["top_clients"][:10]],
        "throttled_clients": {_key(r["client_id"]): r["total_throttle_ms"] for r in throttled},
        "group_rebalances": rebalances,
        "authentication_failures": {
            f"{_key(r['principal'])} from {_key(r['ip'])}": int(r["failures"])
            for r in tables["authentication_failures"]},
        "tables": [f"{q.name}.parquet" for q in QUESTIONS],
    }
