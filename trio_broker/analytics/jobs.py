"""The batch job: the seeds' troubleshooting questions (§9.2) answered from the broker's logs.

Every question is one function from the parsed events to a small DataFrame; :func:`run_analysis`
writes each as a Parquet table in the output directory, then ``summary.json`` and ``report.html``
from the collected tables. pyspark is imported lazily (see :mod:`trio_broker.analytics`).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from trio_broker.observability.events import EVENTS, SCHEMA_VERSION

from .schema import CORRUPT_RECORD, log_schema

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pyspark.sql import Column, DataFrame, SparkSession

#: Kafka's request-time breakdown, in the order a request passes through the stages.
STAGES = ("request_queue_ms", "local_ms", "remote_ms", "throttle_ms", "response_queue_ms",
          "send_ms")
PERCENTILES = (0.5, 0.95, 0.99)
_PERCENTILE_ACCURACY = 10000

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
             "The slowest requests, with the stage that dominated each."),
    Question("top_clients", "One client overloads the broker",
             "Clients by requests and by bytes in and out."),
    Question("throttled_clients", "Clients are throttled",
             "Clients throttled by quotas, how often and for how long in total."),
    Question("group_rebalances", "Consumers stall or re-read data: group rebalances",
             "Per consumer group: rebalances, their duration and reasons, joins and leaves."),
)


@attrs.frozen
class AnalysisResult:
    """What :func:`run_analysis` produced."""

    summary: dict[str, Any]
    tables: dict[str, list[dict[str, Any]]]
    out: Path


# -- session ------------------------------------------------------------------------------------


def get_spark(master: str | None = None, app_name: str = "trio_broker analyze",
              extra_conf: Mapping[str, str] | None = None) -> tuple[SparkSession, bool]:
    """A SparkSession and whether this call created it (so the caller knows to stop it).

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
        # Broker logs analysed on one machine are small for Spark: compiling whole-stage code
        # and re-planning adaptively cost more (tens of seconds on a cold JVM) than they save.
        for key, value in (("spark.sql.shuffle.partitions", "2"),
                           ("spark.sql.codegen.wholeStage", "false"),
                           ("spark.sql.adaptive.enabled", "false")):
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


def read_logs(spark: SparkSession, files: Sequence[str]) -> DataFrame:
    """Every line of ``files`` under the declared schema, plus ``ts`` (the parsed timestamp).

    Malformed lines are kept with ``_corrupt_record`` set (PERMISSIVE mode); a line that is valid
    JSON but carries a value of the wrong type for its field is also marked corrupt (its event
    name survives). Blank lines are skipped by Spark.
    """
    from pyspark.sql import functions as F

    raw = (spark.read.schema(log_schema())
           .option("mode", "PERMISSIVE")
           .option("columnNameOfCorruptRecord", CORRUPT_RECORD)
           .json(list(files)))
    return raw.withColumn("ts", F.to_timestamp(F.col("timestamp")))


def valid_events(lines: DataFrame, since: datetime | None = None,
                 until: datetime | None = None) -> DataFrame:
    """The well-formed lines, optionally restricted to ``since <= ts < until``."""
    from pyspark.sql import functions as F

    events = lines.where(F.col(CORRUPT_RECORD).isNull() & F.col("event").isNotNull())
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
                 F.sum("requests").alias("requests"))
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
               .agg(F.sum((F.col("event") == "connection_muted").cast("long")).alias("mutes"),
                    F.sum((F.col("event") == "throttle_started").cast("long")).alias("throttles"),
                    F.sum((F.col("event") == "connection_rejected").cast("long"))
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
                     F.sum("request_bytes").alias("request_bytes")))
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


def latency_by_api(events: DataFrame) -> DataFrame:
    """Per API: count, errors, p50/p95/p99/max of ``total_ms``, and the same for every stage.

    ``<stage>_share`` is the stage's part of the API's summed total time, which says where the
    time goes when the percentiles alone do not.
    """
    from pyspark.sql import functions as F

    aggregates: list[Column] = [
        F.count(F.lit(1)).alias("requests"),
        F.sum((F.coalesce(F.col("error"), F.lit("NONE")).isin(*_NO_ERROR) == F.lit(False))
              .cast("long")).alias("errors"),
        F.sum("request_bytes").alias("request_bytes"),
        F.sum("response_bytes").alias("response_bytes"),
        F.sum("total_ms").alias("sum_total_ms"),
    ]
    for column in ("total_ms", *STAGES):
        aggregates.append(F.percentile_approx(column, list(PERCENTILES), _PERCENTILE_ACCURACY)
                          .alias(f"_pct_{column}"))
        aggregates.append(F.max(column).alias(f"max_{column}"))
        if column != "total_ms":
            aggregates.append(F.sum(column).alias(f"_sum_{column}"))
    grouped = _of(events, "request").groupBy("api").agg(*aggregates)
    columns: list[Column] = [F.col("api"), F.col("requests"), F.col("errors"),
                             F.col("request_bytes"), F.col("response_bytes")]
    for column in ("total_ms", *STAGES):
        short = column.removesuffix("_ms")
        for index, pct in enumerate(PERCENTILES):
            columns.append(F.col(f"_pct_{column}")[index].alias(f"p{_pct_label(pct)}_{short}_ms"))
        columns.append(F.col(f"max_{column}"))
        if column != "total_ms":
            columns.append(F.when(F.col("sum_total_ms") > 0,
                                  F.col(f"_sum_{column}") / F.col("sum_total_ms"))
                           .alias(f"{short}_share"))
    return grouped.select(*columns).orderBy(F.desc("requests"), "api")


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
    """The ``limit`` slowest requests, with the stage that dominated each one's total time."""
    from pyspark.sql import functions as F

    return (_of(events, "request")
            .select("ts", "broker", "api", "api_version", "correlation_id", "client_id",
                    "connection_id", "error", "request_bytes", "response_bytes", "total_ms",
                    *STAGES, dominant_stage_column().alias("dominant_stage"))
            .orderBy(F.desc_nulls_last("total_ms"), "ts")
            .limit(limit))


def top_clients(events: DataFrame) -> DataFrame:
    """Every client id by requests (then bytes), with the bytes it sent and received."""
    from pyspark.sql import functions as F

    return (_of(events, "request")
            .groupBy("client_id")
            .agg(F.count(F.lit(1)).alias("requests"),
                 F.sum("request_bytes").alias("request_bytes"),
                 F.sum("response_bytes").alias("response_bytes"),
                 (F.coalesce(F.sum("request_bytes"), F.lit(0))
                  + F.coalesce(F.sum("response_bytes"), F.lit(0))).alias("total_bytes"),
                 F.countDistinct("connection_id").alias("connections"),
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
        return F.sum((event == name).cast("long")).alias(_COUNT_COLUMNS.get(name, name))

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
                 F.sort_array(F.collect_set(F.when(event == "rebalance_started",
                                                   F.col("reason")))).alias("reasons"),
                 F.min("ts").alias("first_seen"), F.max("ts").alias("last_seen"))
            .orderBy(F.desc("rebalances"), "group_id"))


#: Group events counted per group, and the column each count goes to.
_COUNT_COLUMNS = {"rebalance_started": "rebalances", "rebalance_completed": "completed",
                  "group_join": "joins", "member_left": "members_left",
                  "member_expired": "members_expired"}


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


def run_analysis(spark: SparkSession, files: Sequence[str], out: Path, *,
                 since: datetime | None = None, until: datetime | None = None,
                 slowest: int = 50, progress: Progress = _no_progress) -> AnalysisResult:
    """Read ``files``, answer every question, write tables, ``summary.json`` and ``report.html``."""
    from pyspark.sql import functions as F

    from .report import render_report

    started = time.monotonic()
    spark.conf.set("spark.sql.session.timeZone", "UTC")  # timestamps are UTC end to end
    out.mkdir(parents=True, exist_ok=True)
    steps = len(QUESTIONS) + 3
    step = 0

    def stage(message: str) -> None:
        nonlocal step
        step += 1
        progress(f"[{step}/{steps}] {message} ({time.monotonic() - started:.1f}s)")

    stage(f"reading {len(files)} file(s)")
    lines = read_logs(spark, files).cache()
    overview = (lines.groupBy(
        F.col("event"),
        F.col(CORRUPT_RECORD).isNotNull().alias("corrupt"),
        F.col("ts").isNull().alias("no_ts"))
        .agg(F.count(F.lit(1)).alias("n"), iso_utc(F.min("ts")).alias("first"),
             iso_utc(F.max("ts")).alias("last"))
        .collect())
    events = valid_events(lines, since, until).cache()

    builders: dict[str, Callable[[DataFrame], DataFrame]] = {
        "rejected_connections": rejected_connections,
        "closed_connections": closed_connections,
        "saturation_by_minute": saturation_by_minute,
        "metrics_timeline": metrics_timeline,
        "mutes_by_reason": mutes_by_reason,
        "request_queue_by_minute": request_queue_by_minute,
        "latency_by_api": latency_by_api,
        "slowest_requests": lambda frame: slowest_requests(frame, slowest),
        "top_clients": top_clients,
        "throttled_clients": throttled_clients,
        "group_rebalances": group_rebalances,
    }
    tables: dict[str, list[dict[str, Any]]] = {}
    for question in QUESTIONS:
        stage(f"{question.name}: {question.description}")
        frame = builders[question.name](events).cache()
        # One file per table: they are aggregates, small, and read whole.
        frame.coalesce(1).write.mode("overwrite").parquet(str(out / f"{question.name}.parquet"))
        tables[question.name] = collect_rows(frame)
        frame.unpersist()

    stage("summary.json")
    summary = build_summary(overview, tables, files, since, until)
    in_range = events.groupBy("event").count().collect()
    summary["events_in_range"] = {row["event"]: row["count"] for row in in_range}
    summary["elapsed_s"] = round(time.monotonic() - started, 3)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n",
                                      encoding="utf-8")
    stage("report.html")
    (out / "report.html").write_text(render_report(summary, tables), encoding="utf-8")
    events.unpersist()
    lines.unpersist()
    progress(f"done in {time.monotonic() - started:.1f}s: {out}")
    return AnalysisResult(summary, tables, out)


def build_summary(overview: Sequence[Any], tables: Mapping[str, list[dict[str, Any]]],
                  files: Sequence[str], since: datetime | None,
                  until: datetime | None) -> dict[str, Any]:
    """The machine-readable answers: counts per question plus the data-quality figures."""
    lines_total = 0
    unparseable = schema_mismatch = no_timestamp = 0
    events_by_name: dict[str, int] = {}
    first: str | None = None  # ISO 8601 UTC text of one format: compares as time does
    last: str | None = None
    for row in overview:
        n = int(row["n"])
        lines_total += n
        if row["corrupt"]:
            if row["event"] is None:
                unparseable += n
            else:
                schema_mismatch += n
            continue
        if row["event"] is None:  # a JSON object without "event": not one of ours
            unparseable += n
            continue
        events_by_name[row["event"]] = events_by_name.get(row["event"], 0) + n
        if row["no_ts"]:
            no_timestamp += n
        if row["first"] is not None and (first is None or row["first"] < first):
            first = row["first"]
        if row["last"] is not None and (last is None or row["last"] > last):
            last = row["last"]

    requests = tables["latency_by_api"]
    rejected = tables["rejected_connections"]
    rejected_by_reason: dict[str, int] = {}
    rejected_by_ip: dict[str, int] = {}
    rejected_by_listener: dict[str, int] = {}
    for row in rejected:
        for key, target in ((row["reason"], rejected_by_reason), (row["ip"], rejected_by_ip),
                            (row["listener"], rejected_by_listener)):
            label = str(key)
            target[label] = target.get(label, 0) + int(row["count"])
    timeline = tables["metrics_timeline"]
    idle = [r["network_processor_avg_idle_percent"] for r in timeline
            if r.get("network_processor_avg_idle_percent") is not None]
    queue_sizes = [r["request_queue_size"] for r in timeline
                   if r.get("request_queue_size") is not None]
    throttled = tables["throttled_clients"]
    rebalances = {str(r["group_id"]): int(r["rebalances"])
                  for r in tables["group_rebalances"] if r["rebalances"]}
    return {
        "schema_version": SCHEMA_VERSION,
        "generated_at": _jsonable(datetime.now(UTC)),
        "inputs": list(files),
        "since": _jsonable(since),
        "until": _jsonable(until),
        "lines": lines_total,
        "malformed_lines": unparseable + schema_mismatch,
        "malformed": {"unparseable": unparseable, "schema_mismatch": schema_mismatch},
        "lines_without_timestamp": no_timestamp,
        "time_range": {"first": _jsonable(first), "last": _jsonable(last)},
        "events_by_name": dict(sorted(events_by_name.items())),
        "unknown_events": {k: v for k, v in sorted(events_by_name.items()) if k not in EVENTS},
        "requests": sum(int(r["requests"]) for r in requests),
        "requests_by_api": {r["api"]: int(r["requests"]) for r in requests},
        "errors_by_api": {r["api"]: int(r["errors"]) for r in requests if r["errors"]},
        "latency_ms_by_api": {
            r["api"]: {"p50": r["p50_total_ms"], "p95": r["p95_total_ms"],
                       "p99": r["p99_total_ms"], "max": r["max_total_ms"]} for r in requests},
        "rejected_connections": rejected_by_reason,
        "rejected_connections_by_ip": rejected_by_ip,
        "rejected_connections_by_listener": rejected_by_listener,
        "closed_connections": {str(r["reason"]): int(r["count"])
                               for r in tables["closed_connections"]},
        "mutes_by_reason": {str(r["reason"]): int(r["mutes"])
                            for r in tables["mutes_by_reason"] if r["mutes"]},
        "network_processor_idle_percent": {
            "min": min(idle) if idle else None,
            "avg": sum(idle) / len(idle) if idle else None},
        "max_request_queue_size": max(queue_sizes) if queue_sizes else None,
        "metrics_snapshots": len(timeline),
        "top_clients": [{"client_id": r["client_id"], "requests": r["requests"],
                         "total_bytes": r["total_bytes"]} for r in tables["top_clients"][:10]],
        "throttled_clients": {str(r["client_id"]): r["total_throttle_ms"] for r in throttled},
        "group_rebalances": rebalances,
        "tables": [f"{q.name}.parquet" for q in QUESTIONS],
    }
