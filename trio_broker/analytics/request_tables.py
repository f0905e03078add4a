"""The request tables: the request lines aggregated once per broker x client x API x error
(:func:`request_grain`, KLL sketches of every time column) and the tables drawn from that grain
or from the request lines themselves (latency per API and client, errors, slowest requests,
top clients, request queue per minute)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .reading import by_minute, of_event

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pyspark.sql import Column, DataFrame


def kll_rank_error(k: int) -> float:
    """DataSketches' normalised rank error of a KLL doubles sketch of ``k`` for one quantile
    (99% confidence): 1.33% at DataSketches' default k of 200."""
    return 2.296 / k**0.9723


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
KLL_RANK_ERROR = kll_rank_error(KLL_K)
#: The headline p50/p95/p99 of ``total_ms`` per API are exact: ``percentile_disc``, the nearest
#: rank (what the plain-Python baseline computes).
HEADLINE_METHOD = "exact (percentile_disc, nearest rank)"
#: Stand-in for a Fetch's max wait, which the request line does not carry: Kafka consumers'
#: default ``fetch.max.wait.ms``.
DEFAULT_FETCH_MAX_WAIT_MS = 500.0
#: APIs whose ``remote_ms`` is a wait for the group's rebalance.
REBALANCE_WAIT_APIS = ("JoinGroup", "SyncGroup")
#: The error of a SaslAuthenticate answered after the deliberate failed-login delay.
FAILED_LOGIN_ERROR = "SASL_AUTHENTICATION_FAILED"

#: Error names that mean success on a request line.
_NO_ERROR = ("NONE", "")


def nearest_rank(pct: float, count: Any, *, ceil: Callable[[Any], Any] = math.ceil,
                 at_least: Callable[[Any, int], Any] = max) -> Any:
    """The nearest rank of the ``pct`` quantile among ``count`` ordered values (1-based, what
    ``percentile_disc`` picks): ``ceil(pct * count)``, at least 1. The headline percentile is
    the smallest value whose running count reaches it.

    On numbers as it stands; :func:`headline_percentiles` passes Spark's ``ceil`` and
    ``greatest`` to build the same rule over a count column."""
    return at_least(ceil(pct * count), 1)


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

    requests = (of_event(requests, "request")
                .groupBy(by_minute(), "broker")
                .agg(F.count(F.lit(1)).alias("requests"),
                     F.avg("request_queue_ms").alias("avg_request_queue_ms"),
                     _sketched("request_queue_ms", 0.95).alias("p95_request_queue_ms"),
                     F.max("request_queue_ms").alias("max_request_queue_ms"),
                     F.try_sum("request_bytes").alias("request_bytes"),
                     F.try_sum(_is_error().cast("long")).alias("errors"),
                     _sketched("service_ms", 0.99).alias("p99_service_ms")))
    gauges = (of_event(other, "metrics_snapshot")
              .groupBy(by_minute(), "broker")
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
    JoinGroup or SyncGroup waits (``remote_ms``) for the rest of the group to rebalance; a
    failed SaslAuthenticate is answered after ``connection.failed.authentication.delay.ms``
    on purpose (``remote_ms``), which slows down password guessing, not the broker.
    """
    from pyspark.sql import functions as F

    api = F.col("api")
    remote = F.coalesce(F.col("remote_ms"), F.lit(0.0))
    failed_login = (api == "SaslAuthenticate") & (F.col("error") == FAILED_LOGIN_ERROR)
    return (F.when(api == "Fetch", F.least(remote, F.lit(float(fetch_max_wait_ms))))
            .when(api.isin(*REBALANCE_WAIT_APIS) | failed_login, remote)
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


def request_grain(events: DataFrame, slowest: int = 0) -> DataFrame:
    """The request lines aggregated once, per broker, client id, API and error code: counts,
    bytes, sums and maxima of every time, first and last time, throttled requests, the client's
    software, a KLL sketch per time column (:data:`KLL_K`), a HyperLogLog sketch of the
    connection ids and, with ``slowest``, the group's ``slowest`` slowest lines (``_slowest``,
    :func:`slowest_requests`). Every per-API, per-client and per-error table is merged from
    these rows (a few hundred, cached), so the request lines are aggregated once for all of
    them."""
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
    if slowest > 0:
        # The global top is within the union of every group's top: no line is kept twice.
        aggregates.append(F.max_by(F.struct(*SLOWEST_COLUMNS), _slowness(), slowest)
                          .alias("_slowest"))
    return of_event(events, "request").groupBy("broker", "client_id", "api", "error") \
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

    counts = (of_event(events, "request").where(F.col("total_ms").isNotNull())
              .groupBy("api", "total_ms").agg(F.count(F.lit(1)).alias("_n")))
    running = Window.partitionBy("api").orderBy("total_ms") \
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    ranked = (counts.withColumn("_upto", F.sum("_n").over(running))
              .withColumn("_all", F.sum("_n").over(Window.partitionBy("api"))))
    # Nearest rank: the smallest value whose running count reaches ceil(p * n) (at least 1).
    def rank(pct: float) -> Column:
        return nearest_rank(pct, F.col("_all"), ceil=F.ceil,
                            at_least=lambda rank, low: F.greatest(rank, F.lit(low)))

    exact = [F.min(F.when(F.col("_upto") >= rank(pct), F.col("total_ms")))
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


def errors_by_client(grain: DataFrame) -> DataFrame:
    """Which clients got which error: failed requests per client id, API and error code, with
    the first and last time (most first)."""
    from pyspark.sql import functions as F

    return (grain.where(_is_error())
            .groupBy("client_id", "api", "error")
            .agg(F.sum("requests").alias("count"),
                 F.min("first_seen").alias("first_seen"), F.max("last_seen").alias("last_seen"))
            .orderBy(F.desc("count"), F.asc_nulls_last("client_id"), F.asc_nulls_last("api"),
                     F.asc_nulls_last("error")))


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


#: The columns of a slowest request (before its dominant stage and ``waited`` are added).
SLOWEST_COLUMNS = ("ts", "broker", "api", "api_version", "correlation_id", "client_id",
                   "connection_id", "error", "request_bytes", "response_bytes", "service_ms",
                   "expected_wait_ms", "total_ms", *STAGES)


def _slowness() -> Column:
    """What ranks a request among the slowest, largest first: service time, then total time
    (nulls last, as a struct orders a null field below any value), then the earlier line."""
    from pyspark.sql import functions as F

    return F.struct(F.col("service_ms"), F.col("total_ms"), -F.unix_micros(F.col("ts")))


def _slowest_columns(frame: DataFrame, limit: int) -> DataFrame:
    from pyspark.sql import functions as F

    waited = F.col("expected_wait_ms") > F.col("service_ms")
    # Ordered and cut first: the dominant stage is then worked out for the kept rows only.
    return (frame.orderBy(F.desc_nulls_last("service_ms"), F.desc_nulls_last("total_ms"), "ts")
            .limit(limit)
            .select(*SLOWEST_COLUMNS, dominant_stage_column().alias("dominant_stage"),
                    F.coalesce(waited, F.lit(False)).alias("waited")))


def slowest_requests(events: DataFrame, limit: int = 50,
                     grain: DataFrame | None = None) -> DataFrame:
    """The ``limit`` slowest requests by service time (total time minus the expected wait of
    :func:`expected_wait_column`), with the stage that dominated each one's total time;
    ``waited`` flags a request whose expected wait is most of its total time.

    With ``grain`` (:func:`request_grain` of the same lines with ``slowest`` >= ``limit``),
    they are taken from the groups' own slowest lines, and ``events`` is not read again.
    """
    from pyspark.sql import functions as F

    if grain is not None:
        kept = grain.select(F.explode("_slowest").alias("_line")).select("_line.*")
        return _slowest_columns(kept, limit)
    return _slowest_columns(of_event(events, "request").select(*SLOWEST_COLUMNS), limit)


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
