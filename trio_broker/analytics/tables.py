"""The questions: one function per table, from the parsed events to a small DataFrame."""

from __future__ import annotations

import math
import shutil
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from trio_broker.observability.events import EVENTS

from .reading import iso_utc
from .schema import union_fields

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pyspark.sql import Column, DataFrame

#: Kafka's request-time breakdown, in the order a request passes through the stages.
STAGES = ("request_queue_ms", "local_ms", "remote_ms", "throttle_ms", "response_queue_ms",
          "send_ms")
PERCENTILES = (0.5, 0.95, 0.99)
#: k of the KLL sketches (``kll_sketch_agg_double``) behind every percentile but the headline
#: one (per-API stages and service time, per client, per minute): exact while a group holds at most k values, beyond that
#: a rank error of about :data:`KLL_RANK_ERROR` of the group's count (DataSketches' bound,
#: 99% confidence). Each sketch keeps about k values: 8 KB per sketch per group and task.
KLL_K = 1000
#: DataSketches' normalised rank error of a KLL doubles sketch of :data:`KLL_K` (one quantile).
KLL_RANK_ERROR = 2.296 / KLL_K**0.9723
#: The headline p50/p95/p99 of ``total_ms`` per API are exact: ``percentile_disc``, the nearest
#: rank (what the plain-Python baseline computes).
HEADLINE_METHOD = "exact (percentile_disc, nearest rank)"
#: Stand-in for a Fetch's max wait, which the request line does not carry: Kafka consumers'
#: default ``fetch.max.wait.ms``.
DEFAULT_FETCH_MAX_WAIT_MS = 500.0
#: APIs whose ``remote_ms`` is a wait for the group's rebalance.
REBALANCE_WAIT_APIS = ("JoinGroup", "SyncGroup")

#: Error names that mean success on a request line.
_NO_ERROR = ("NONE", "")


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


def _sketched(column: str, pct: float) -> Column:
    """The ``pct`` quantile of ``column`` over a group, from a KLL sketch (:data:`KLL_K`)."""
    from pyspark.sql import functions as F

    sketch = F.kll_sketch_agg_double(F.col(column), KLL_K)
    return F.when(F.kll_sketch_get_n_double(sketch) > 0,
                  F.kll_sketch_get_quantile_double(sketch, F.lit(pct)))


def request_queue_by_minute(requests: DataFrame, other: DataFrame) -> DataFrame:
    """Per minute and broker: queue time of requests, request queue size, memory pool left.

    ``requests`` are the request lines, ``other`` holds the ``metrics_snapshot`` lines."""
    from pyspark.sql import functions as F

    requests = (_of(requests, "request")
                .groupBy(_minute(), "broker")
                .agg(F.count(F.lit(1)).alias("requests"),
                     F.avg("request_queue_ms").alias("avg_request_queue_ms"),
                     _sketched("request_queue_ms", 0.95).alias("p95_request_queue_ms"),
                     F.max("request_queue_ms").alias("max_request_queue_ms"),
                     F.try_sum("request_bytes").alias("request_bytes"),
                     F.try_sum(_is_error().cast("long")).alias("errors"),
                     _sketched("service_ms", 0.99).alias("p99_service_ms")))
    gauges = (_of(other, "metrics_snapshot")
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


#: The request-time columns the request tables summarise, with a KLL sketch each in
#: :func:`request_grain`.
LATENCY_COLUMNS = ("total_ms", "service_ms", *STAGES)
#: ``lgConfigK`` of the HyperLogLog sketches counting each client's distinct connections.
_HLL_LG_K = 14


def request_grain(events: DataFrame) -> DataFrame:
    """The request lines aggregated once, per broker, client id, API and error code: counts,
    bytes, sums and maxima of every time, first and last time, throttled requests, the client's
    software, a KLL sketch per time column (:data:`KLL_K`) and a HyperLogLog sketch of the
    connection ids. Every per-API, per-client and per-error table is merged from these rows
    (a few hundred, cached), so the request lines are aggregated once for all of them."""
    from pyspark.sql import functions as F

    throttled = F.col("throttle_ms") > 0
    aggregates: list[Column] = [
        F.count(F.lit(1)).alias("requests"),
        F.try_sum("request_bytes").alias("request_bytes"),
        F.try_sum("response_bytes").alias("response_bytes"),
        F.sum("expected_wait_ms").alias("sum_expected_wait_ms"),
        F.min("ts").alias("first_seen"), F.max("ts").alias("last_seen"),
        F.count(F.when(throttled, 1)).alias("throttled_requests"),
        F.sum(F.when(throttled, F.col("throttle_ms"))).alias("request_throttle_ms"),
        F.hll_sketch_agg(F.col("connection_id"), _HLL_LG_K).alias("_hll_connections"),
        F.first("client_software_name", ignorenulls=True).alias("client_software_name"),
        F.first("client_software_version", ignorenulls=True).alias("client_software_version"),
    ]
    for column in LATENCY_COLUMNS:
        aggregates += [F.kll_sketch_agg_double(F.col(column), KLL_K).alias(f"_kll_{column}"),
                       F.max(column).alias(f"max_{column}"),
                       F.sum(column).alias(f"_sum_{column}")]
    return _of(events, "request").groupBy("broker", "client_id", "api", "error") \
        .agg(*aggregates)


def _errors() -> Column:
    """Failed requests of a :func:`request_grain` row (its error code is not success)."""
    from pyspark.sql import functions as F

    return F.when(_is_error(), F.col("requests")).otherwise(F.lit(0))


def _merged_percentiles(column: str) -> Column:
    from pyspark.sql import functions as F

    merged = F.kll_merge_agg_double(F.col(f"_kll_{column}"))
    ranks = F.array(*(F.lit(p) for p in PERCENTILES))
    # An all-null group's sketch is empty: its percentiles are null, as percentile_approx's.
    return F.when(F.kll_sketch_get_n_double(merged) > 0,
                  F.kll_sketch_get_quantile_double(merged, ranks))


def _latency_aggregates() -> list[Column]:
    from pyspark.sql import functions as F

    aggregates = [F.sum("requests").alias("requests"), F.sum(_errors()).alias("errors")]
    for column in ("total_ms", "service_ms"):
        aggregates.append(_merged_percentiles(column).alias(f"_pct_{column}"))
        aggregates.append(F.max(f"max_{column}").alias(f"max_{column}"))
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


def headline_percentiles(events: DataFrame) -> DataFrame:
    """Per API: the exact p50/p95/p99 of ``total_ms`` (nearest rank, what ``percentile_disc``
    gives), in ``_pct_total_ms``.

    Computed from the count of each distinct (API, ``total_ms``) value, then a running count
    per API: the request lines go through one hash aggregation, and only the distinct values
    are ordered (``percentile_disc`` kept every distinct value of a group in an object map and
    sorted it per API)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    counts = (_of(events, "request").where(F.col("total_ms").isNotNull())
              .groupBy("api", "total_ms").agg(F.count(F.lit(1)).alias("_n")))
    running = Window.partitionBy("api").orderBy("total_ms") \
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    ranked = (counts.withColumn("_upto", F.sum("_n").over(running))
              .withColumn("_all", F.sum("_n").over(Window.partitionBy("api"))))
    # Nearest rank: the smallest value whose running count reaches ceil(p * n) (at least 1).
    exact = [F.min(F.when(F.col("_upto") >= F.greatest(F.ceil(F.lit(pct) * F.col("_all")),
                                                       F.lit(1)), F.col("total_ms")))
             for pct in PERCENTILES]
    return ranked.groupBy("api").agg(F.array(*exact).alias("_pct_total_ms"))


def latency_by_api(grain: DataFrame, headline: DataFrame) -> DataFrame:
    """Per API: count, errors, p50/p95/p99/max of ``total_ms``, and the same for every stage.

    ``<stage>_share`` is the stage's part of the API's summed total time, which says where the
    time goes when the percentiles alone do not. ``total_ms`` percentiles are exact
    (``headline``, from :func:`headline_percentiles`); ``service_ms`` (total minus expected
    waits) and the stages are merged from the KLL sketches of ``grain`` (:data:`KLL_K`).
    """
    from pyspark.sql import functions as F

    aggregates: list[Column] = [
        F.sum("requests").alias("requests"),
        F.sum(_errors()).alias("errors"),
        F.try_sum("request_bytes").alias("request_bytes"),
        F.try_sum("response_bytes").alias("response_bytes"),
        F.sum("_sum_total_ms").alias("sum_total_ms"),
        F.sum("sum_expected_wait_ms").alias("sum_expected_wait_ms"),
    ]
    for column in LATENCY_COLUMNS:
        if column != "total_ms":
            aggregates.append(_merged_percentiles(column).alias(f"_pct_{column}"))
        aggregates.append(F.max(f"max_{column}").alias(f"max_{column}"))
        if column in STAGES:
            aggregates.append(F.sum(f"_sum_{column}").alias(f"_sum_{column}"))
    grouped = grain.groupBy("api").agg(*aggregates).join(headline, "api", "left")
    columns: list[Column] = [F.col("api"), F.col("requests"), F.col("errors"),
                             F.col("request_bytes"), F.col("response_bytes")]
    for column in LATENCY_COLUMNS:
        short = column.removesuffix("_ms")
        for index, pct in enumerate(PERCENTILES):
            columns.append(F.col(f"_pct_{column}")[index].alias(f"p{_pct_label(pct)}_{short}_ms"))
        columns.append(F.col(f"max_{column}"))
        if column in STAGES:
            columns.append(F.when(F.col("sum_total_ms") > 0,
                                  F.col(f"_sum_{column}") / F.col("sum_total_ms"))
                           .alias(f"{short}_share"))
    columns.append(F.col("sum_expected_wait_ms"))
    return grouped.select(*columns).orderBy(F.desc("requests"), F.asc_nulls_last("api"))


def latency_by_client(grain: DataFrame) -> DataFrame:
    """Per client id: requests, errors, p50/p95/p99/max of total and service time (merged
    from the KLL sketches of :func:`request_grain`)."""
    from pyspark.sql import functions as F

    return (grain.groupBy("client_id").agg(*_latency_aggregates())
            .select("client_id", *_latency_columns())
            .orderBy(F.desc("p99_service_ms"), F.asc_nulls_last("client_id")))


def latency_by_client_api(grain: DataFrame) -> DataFrame:
    """Per client id and API: requests, errors, p50/p95/p99/max of total and service time."""
    from pyspark.sql import functions as F

    return (grain.groupBy("client_id", "api").agg(*_latency_aggregates())
            .select("client_id", "api", *_latency_columns())
            .orderBy(F.desc("p99_service_ms"), F.asc_nulls_last("client_id"),
                     F.asc_nulls_last("api")))


def errors_by_code(grain: DataFrame) -> DataFrame:
    """Failed requests by API and error code, with how many clients saw each, first and last."""
    from pyspark.sql import functions as F

    return (grain.where(_is_error())
            .groupBy("api", "error")
            .agg(F.sum("requests").alias("count"),
                 F.countDistinct("client_id").alias("clients"),
                 F.min("first_seen").alias("first_seen"), F.max("last_seen").alias("last_seen"))
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


def service_bound(grain: DataFrame, limit: int) -> float | None:
    """A lower bound of the ``limit``-th largest ``service_ms`` of the request lines, from the
    per-group maxima of :func:`request_grain`: the ``limit``-th largest group maximum, or None
    when fewer than ``limit`` groups have one.

    Each of those ``limit`` groups has a line at its maximum, so at least ``limit`` lines have
    a service time at or above the bound: every line of the top ``limit`` (ties included) does.
    """
    from pyspark.sql import functions as F

    if limit <= 0:
        return None
    maxima = [row[0] for row in grain.where(F.col("max_service_ms").isNotNull())
              .select("max_service_ms").orderBy(F.desc("max_service_ms")).limit(limit).collect()]
    return maxima[-1] if len(maxima) == limit else None


def slowest_requests(events: DataFrame, limit: int = 50,
                     grain: DataFrame | None = None) -> DataFrame:
    """The ``limit`` slowest requests by service time (total time minus the expected wait of
    :func:`expected_wait_column`), with the stage that dominated each one's total time;
    ``waited`` flags a request whose expected wait is most of its total time.

    With ``grain`` (:func:`request_grain` of the same lines), only the lines at or above
    :func:`service_bound` are ordered: the same rows, fewer of them kept for the top ``limit``.
    """
    from pyspark.sql import functions as F

    waited = F.col("expected_wait_ms") > F.col("service_ms")
    requests = _of(events, "request")
    bound = service_bound(grain, limit) if grain is not None else None
    if bound is not None:
        requests = requests.where(F.col("service_ms") >= F.lit(bound))
    # Ordered and cut first: the dominant stage is then worked out for the kept rows only.
    return (requests
            .select("ts", "broker", "api", "api_version", "correlation_id", "client_id",
                    "connection_id", "error", "request_bytes", "response_bytes", "service_ms",
                    "expected_wait_ms", "total_ms", *STAGES)
            .orderBy(F.desc_nulls_last("service_ms"), F.desc_nulls_last("total_ms"), "ts")
            .limit(limit)
            .select("ts", "broker", "api", "api_version", "correlation_id", "client_id",
                    "connection_id", "error", "request_bytes", "response_bytes", "service_ms",
                    "expected_wait_ms", "total_ms", *STAGES,
                    dominant_stage_column().alias("dominant_stage"),
                    F.coalesce(waited, F.lit(False)).alias("waited")))


#: Relative standard error of ``top_clients``' count of distinct connections per client
#: (HyperLogLog, ``lgConfigK`` 14): 0.8%, so about 95% of counts are within 1.6% of the exact one.
CONNECTIONS_RSD = 1.04 / 2 ** (_HLL_LG_K / 2)


def top_clients(grain: DataFrame) -> DataFrame:
    """Every client id by requests (then bytes), with the bytes it sent and received and its
    number of distinct connections (approximate: :data:`CONNECTIONS_RSD`)."""
    from pyspark.sql import functions as F

    return (grain
            .groupBy("client_id")
            .agg(F.sum("requests").alias("requests"),
                 F.try_sum("request_bytes").alias("request_bytes"),
                 F.try_sum("response_bytes").alias("response_bytes"),
                 F.try_add(F.coalesce(F.try_sum("request_bytes"), F.lit(0)),
                           F.coalesce(F.try_sum("response_bytes"), F.lit(0)))
                 .alias("total_bytes"),
                 # Approximate (HyperLogLog, CONNECTIONS_RSD): an exact distinct count
                 # shuffled every (client, connection) pair, a quarter of the run's time on
                 # the bench log where nearly every request has its own connection id.
                 F.hll_sketch_estimate(F.hll_union_agg("_hll_connections")).alias("connections"),
                 F.sort_array(F.collect_set("api")).alias("apis"),
                 F.first("client_software_name", ignorenulls=True).alias("client_software_name"),
                 F.first("client_software_version", ignorenulls=True)
                 .alias("client_software_version"),
                 F.sum("_sum_total_ms").alias("sum_total_ms"))
            .orderBy(F.desc("requests"), F.desc("total_bytes"), "client_id"))


def throttled_clients(events: DataFrame, grain: DataFrame) -> DataFrame:
    """Clients throttled by quotas: throttle events and their throttle time, per client id,
    with the users (principal names) and the quota types (``producer_byte_rate``, ...) involved.

    One throttle shows twice: as a ``throttle_started`` event and as the ``throttle_ms`` of the
    request's line (counted in ``grain``, :func:`request_grain`); ``total_throttle_ms`` takes
    the larger of the two sums, never their total.
    """
    from pyspark.sql import functions as F

    started = (_of(events, "throttle_started").groupBy("client_id")
               .agg(F.count(F.lit(1)).alias("throttle_events"),
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


def collect_and_write(frame: DataFrame, path: Path) -> list[dict[str, Any]]:
    """Collect a small DataFrame once, as Arrow, write it as ``path/part-00000.parquet`` from
    the driver and return its rows as :func:`collect_rows` does.

    One Spark job per table instead of three (cache, Parquet write, collect): a table is at
    most thousands of rows, and each job's fixed cost (planning, two stages, the write's
    commit) was most of the tables' time (docs/performance.md).
    """
    import pyarrow.parquet as pq

    table = frame.toArrow()
    # Overwrite, as Spark's writer did: a file left by an earlier run would be read as rows.
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    pq.write_table(table, str(path / "part-00000.parquet"))
    fields = [(field.name, field.type) for field in table.schema]
    return [{name: _from_arrow(row[name], kind) for name, kind in fields}
            for row in table.to_pylist()]


def _from_arrow(value: Any, kind: Any) -> Any:
    """An Arrow value (as ``to_pylist`` gives it) as :func:`collect_rows` gives it."""
    import pyarrow as pa

    if value is None:
        return None
    if pa.types.is_timestamp(kind):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if pa.types.is_map(kind):
        return {str(k): _from_arrow(v, kind.item_type) for k, v in value}
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return [_from_arrow(v, kind.value_type) for v in value]
    if pa.types.is_struct(kind):
        return {field.name: _from_arrow(value[field.name], field.type) for field in kind}
    return _jsonable(value)


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
