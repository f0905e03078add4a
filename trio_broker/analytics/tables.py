"""The questions: one function per table, from the parsed events to a small DataFrame. The
tables of the request lines are in :mod:`.request_tables`; this module has the others (each
over the other events) and the list of every question."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from trio_broker.observability.events import EVENTS

from .reading import by_minute, of_event
from .request_tables import STAGES
from .schema import union_fields

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pyspark.sql import Column, DataFrame


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
             "Per minute: metrics_snapshot's queue sizes, idle percent, memory pool and "
             "connections (average, lowest, highest)."),
    Question("mutes_by_reason", "Requests are slow although the handlers are fine (slow I/O)",
             "How often connections stopped reading, why, and for how long."),
    Question("event_loop_blocked", "Every connection stalls at once (one request holds the "
             "event loop)",
             "Runs of the event loop past event.loop.blocked.threshold.ms, by the request "
             "being handled (API, client) and the broker function it was in."),
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
    Question("errors_by_client", "Requests fail",
             "Which clients got which error: failed requests by client id, API and code."),
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


# -- the questions ------------------------------------------------------------------------------


def rejected_connections(events: DataFrame) -> DataFrame:
    """Connections refused at accept time, by IP, listener and reason (most refused first)."""
    from pyspark.sql import functions as F

    return (of_event(events, "connection_rejected")
            .groupBy("ip", "listener", "reason")
            .agg(F.count(F.lit(1)).alias("count"), F.max("limit").alias("limit"),
                 F.min("ts").alias("first_seen"), F.max("ts").alias("last_seen"))
            .orderBy(F.desc("count"), "ip", "listener", "reason"))


def closed_connections(events: DataFrame) -> DataFrame:
    """Connections closed, by reason, with how long they had lived and served."""
    from pyspark.sql import functions as F

    return (of_event(events, "connection_closed")
            .groupBy("reason")
            .agg(F.count(F.lit(1)).alias("count"),
                 F.avg("duration_ms").alias("avg_duration_ms"),
                 F.try_sum("requests").alias("requests"))
            .orderBy(F.desc("count"), "reason"))


def metrics_timeline(events: DataFrame) -> DataFrame:
    """The ``metrics_snapshot`` gauges per minute and broker (``ts`` is the minute): how many
    snapshots, each gauge's average under its own name, and its ``min_``/``max_``.

    Per minute rather than per snapshot: the table reaches the driver, and a broker writes a
    snapshot every few seconds, so one row per snapshot grew with the log (345,000 rows for
    2,000,000 lines of the bench log); a minute per row grows only with the time it spans.
    """
    from pyspark.sql import functions as F

    aggregates = [F.count(F.lit(1)).alias("snapshots")]
    for field in EVENTS["metrics_snapshot"].fields:
        aggregates += [F.avg(field).alias(field), F.min(field).alias(f"min_{field}"),
                       F.max(field).alias(f"max_{field}")]
    return (of_event(events, "metrics_snapshot")
            .groupBy(F.date_trunc("minute", F.col("ts")).alias("ts"), "broker")
            .agg(*aggregates)
            .orderBy("ts", "broker"))


def saturation_by_minute(events: DataFrame) -> DataFrame:
    """Per minute and broker: processor/handler idle percent, mutes, throttles, rejections."""
    from pyspark.sql import functions as F

    snapshots = (of_event(events, "metrics_snapshot")
                 .groupBy(by_minute(), "broker")
                 .agg(F.avg("network_processor_avg_idle_percent").alias("avg_network_idle_percent"),
                      F.min("network_processor_avg_idle_percent").alias("min_network_idle_percent"),
                      F.avg("request_handler_avg_idle_percent").alias("avg_handler_idle_percent"),
                      F.max("connection_count").alias("max_connections"),
                      F.count(F.lit(1)).alias("snapshots")))
    counted = (events.where(F.col("event").isin("connection_muted", "throttle_started",
                                                "connection_rejected"))
               .groupBy(by_minute(), "broker")
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

    muted = (of_event(events, "connection_muted").groupBy("reason")
             .agg(F.count(F.lit(1)).alias("mutes"),
                  F.countDistinct("connection_id").alias("connections"),
                  F.max("inflight").alias("max_inflight")))
    unmuted = (of_event(events, "connection_unmuted").groupBy("reason")
               .agg(F.count(F.lit(1)).alias("unmutes"),
                    F.sum("muted_ms").alias("total_muted_ms"),
                    F.avg("muted_ms").alias("avg_muted_ms"),
                    F.max("muted_ms").alias("max_muted_ms")))
    return (muted.join(unmuted, "reason", "full_outer")
            .fillna(0, subset=["mutes", "unmutes", "connections"])
            .orderBy(F.desc("mutes"), "reason"))


def event_loop_blocked(events: DataFrame) -> DataFrame:
    """``event_loop_blocked`` by API, client and function: how often, the worst and the total
    time every connection waited."""
    from pyspark.sql import functions as F

    return (of_event(events, "event_loop_blocked")
            .groupBy("api", "client_id", "where")
            .agg(F.count(F.lit(1)).alias("count"),
                 F.max("duration_ms").alias("max_duration_ms"),
                 F.sum("duration_ms").alias("total_duration_ms"),
                 F.min("ts").alias("first_seen"), F.max("ts").alias("last_seen"))
            .orderBy(F.desc("total_duration_ms"), F.asc_nulls_last("api"),
                     F.asc_nulls_last("client_id")))


def invalid_frames(events: DataFrame) -> DataFrame:
    """Frames refused (``invalid_request``), by reason and peer, with the largest size seen."""
    from pyspark.sql import functions as F

    return (of_event(events, "invalid_request")
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
             .groupBy(by_minute())
             .agg(F.count(F.when(event == "connection_accepted", 1)).alias("accepted"),
                  F.count(F.when(event == "connection_closed", 1)).alias("closed"),
                  F.count(F.when(event == "connection_expired", 1)).alias("expired"),
                  F.count(F.when(event == "connection_rejected", 1)).alias("refused"),
                  F.max(F.when(event == "metrics_snapshot", F.col("connection_count")))
                  .alias("connection_count")))
    by_reason = (of_event(events, "connection_closed")
                 .groupBy(by_minute(), F.coalesce(F.col("reason"), F.lit("(none)")).alias("reason"))
                 .count()
                 .groupBy("minute")
                 .agg(F.map_from_entries(F.sort_array(F.collect_list(
                     F.struct("reason", "count")))).alias("closed_by_reason")))
    return churn.join(by_reason, "minute", "left").orderBy("minute")


def throttled_clients(events: DataFrame, grain: DataFrame) -> DataFrame:
    """Clients throttled by quotas: throttle events and their throttle time, per client id,
    with the users (principal names) and the quota types (``producer_byte_rate``, ...) involved.

    One throttle shows twice: as a ``throttle_started`` event and as the ``throttle_ms`` of the
    request's line (counted in ``grain``, :func:`request_grain`); ``total_throttle_ms`` takes
    the larger of the two sums, never their total. ``throttles_ended`` counts the
    ``throttle_ended`` events: the connection reading again (its unmute) after the throttle
    time; fewer than ``throttle_events`` means throttles still running when the log ended.
    """
    from pyspark.sql import functions as F

    ended = F.col("event") == "throttle_ended"
    started = (events.where(F.col("event").isin("throttle_started", "throttle_ended"))
               .groupBy("client_id")
               .agg(F.count(F.when(~ended, 1)).alias("throttle_events"),
                    F.count(F.when(ended, 1)).alias("throttles_ended"),
                    F.sum("throttle_ms").alias("throttle_event_ms"),
                    F.max("throttle_ms").alias("max_throttle_ms"),
                    F.sort_array(F.collect_set("user")).alias("users"),
                    F.sort_array(F.collect_set("quota_type")).alias("quota_types")))
    on_requests = (grain.where(F.col("throttled_requests") > 0).groupBy("client_id")
                   .agg(F.sum("throttled_requests").alias("throttled_requests"),
                        F.sum("request_throttle_ms").alias("request_throttle_ms")))
    joined = started.join(on_requests, "client_id", "full_outer")
    total = F.greatest(F.coalesce(F.col("throttle_event_ms"), F.lit(0.0)),
                       F.coalesce(F.col("request_throttle_ms"), F.lit(0.0)))
    return (joined.fillna(0, subset=["throttle_events", "throttles_ended", "throttled_requests"])
            .withColumn("total_throttle_ms", total)
            .orderBy(F.desc("total_throttle_ms"), "client_id"))


def authentication_failures(events: DataFrame) -> DataFrame:
    """``authentication_failed`` by claimed principal and client IP (the peer without its
    port): failures, mechanisms, first and last, the last error detail (most failures first)."""
    from pyspark.sql import functions as F

    return (of_event(events, "authentication_failed")
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


#: The parsed columns the questions read: the only ones kept in the cached copy of the lines
#: (a wide cache costs more to build than the parse). A question reading another field must
#: add it here.
ANALYSED_COLUMNS: tuple[str, ...] = (
    "schema_version", "broker", "connection_id", "listener", "peer", "ip", "reason", "detail", "limit",
    "requests", "duration_ms", "inflight", "muted_ms", "size", "api", "api_key", "api_version",
    "correlation_id", "client_id", "client_software_name", "client_software_version",
    "request_bytes", "response_bytes", "error", *STAGES, "total_ms", "quota_type", "user",
    "group_id", "generation", "principal", "mechanism", "transactional_id", "partitions",
    "topic_names", "where", *EVENTS["metrics_snapshot"].fields)


def analysed_columns() -> list[str]:
    """:data:`ANALYSED_COLUMNS` that are declared (a field may not be, in an older schema)."""
    declared = union_fields()
    return [name for name in ANALYSED_COLUMNS if name in declared]
