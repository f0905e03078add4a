"""Kafka's network-layer metrics, in a Prometheus registry owned by one broker.

Names follow the jmx-exporter convention for Kafka's MBeans, ``kafka_<domain>_<type>_<name>``
(lower-cased), so existing dashboards' queries read naturally; docs/metrics.md maps each to its
Kafka MBean.
"""

from __future__ import annotations

import itertools
import operator
from bisect import bisect_left
from typing import Any

import trio
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString

from .loop import LoopInstrument

# Kafka reports request times in ms; these buckets cover 0.05 ms .. 60 s.
_MS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000,
               10000, 30000, 60000)

#: Kafka's seven request-time histograms, keyed by the field of ``Request.timings_ms``.
REQUEST_TIME_HISTOGRAMS = {
    "request_queue_ms": "RequestQueueTimeMs",
    "local_ms": "LocalTimeMs",
    "remote_ms": "RemoteTimeMs",
    "throttle_ms": "ThrottleTimeMs",
    "response_queue_ms": "ResponseQueueTimeMs",
    "send_ms": "ResponseSendTimeMs",
    "total_ms": "TotalTimeMs",
}


class BrokerMetrics:
    """Every metric of one broker. Gauges read live state through callbacks set at start-up."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        #: The event loop's idle share, lag and blocked runs (``observability/loop.py``).
        self.loop = LoopInstrument()
        self.network_processor_avg_idle_percent = Gauge(
            "kafka_network_socketserver_networkprocessoravgidlepercent",
            "Share of time the network event loop waited for I/O (0..1)", registry=r)
        self.network_processor_avg_idle_percent.set_function(self.read_idle_ratio)
        self.event_loop_lag = Gauge(
            "trio_broker_event_loop_lag_seconds",
            "Longest run of the event loop between two polls for I/O since the previous "
            "scrape: the longest any ready connection waited for its turn", registry=r)
        self.event_loop_lag.set_function(lambda: self.loop.read_lag("scrape"))
        self.request_queue_size = Gauge(
            "kafka_network_requestchannel_requestqueuesize", "Requests waiting for a handler",
            ["plane"], registry=r)
        self.response_queue_size = Gauge(
            "kafka_network_requestchannel_responsequeuesize",
            "Responses completed but not yet picked up by their connection", registry=r)
        self.memory_pool_available = Gauge(
            "kafka_network_socketserver_memorypoolavailable",
            "Bytes free in the request memory pool (-1: unbounded)", registry=r)
        self.memory_pool_used = Gauge(
            "kafka_network_socketserver_memorypoolused", "Bytes held by request frames",
            registry=r)
        self.acceptor_blocked_seconds = Counter(
            "kafka_network_acceptor_acceptorblocked_seconds",
            "Time acceptors spent blocked on full processor queues or connection quotas",
            ["listener"], registry=r)
        self.connection_count = Gauge(
            "kafka_server_socket_server_metrics_connection_count", "Open connections",
            ["listener"], registry=r)
        self.connection_creation = Counter(
            "kafka_server_socket_server_metrics_connection_creation",
            "Connections accepted", ["listener"], registry=r)
        self.connection_close = Counter(
            "kafka_server_socket_server_metrics_connection_close",
            "Connections closed", ["listener", "reason"], registry=r)
        self.connection_rejected = Counter(
            "kafka_network_connection_rejected", "Connections refused at accept time",
            ["listener", "reason"], registry=r)
        #: successful-authentication-total, successful-reauthentication-total and
        #: failed-authentication-total of Kafka's socket-server-metrics.
        self.authentication = AuthenticationMetrics(r)
        self.request_handler_avg_idle_percent = Gauge(
            "kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent",
            "Idle share of the handler tasks since the previous reading (0..1)", registry=r)
        #: RequestsPerSec, ErrorsPerSec, RequestBytes and the seven request-time histograms.
        self.request_metrics = RequestMetrics()
        r.register(self.request_metrics)
        #: Kafka's BrokerTopicMetrics, counted by the produce and fetch handlers.
        self.topics = BrokerTopicMetrics()
        r.register(self.topics)

    def watch_quotas(self, managers: Any) -> None:
        """Serve the per-client quota metrics of ``managers`` (a ``QuotaManagers``)."""
        self.registry.register(_QuotaCollector(managers))

    def watch_fetch_sessions(self, cache: Any) -> None:
        """Serve Kafka's FetchSessionCache metrics from ``cache`` (a ``FetchSessionCache``)."""
        self.registry.register(_FetchSessionCollector(cache))

    def read_idle_ratio(self) -> float:
        return self.loop.idle_ratio()

    def watch_logs(self, log_manager: Any) -> None:
        """Serve ``kafka_log_log_size{topic,partition}`` from ``log_manager``'s partitions."""
        self.registry.register(_LogSizeCollector(log_manager))
        cleaner = getattr(log_manager, "cleaner", None)
        if cleaner is not None:
            self.registry.register(_CleanerCollector(cleaner))

    def watch_transactions(self, coordinator: Any) -> None:
        """Serve ``kafka_coordinator_transaction_transactions{state}`` from the transaction
        coordinator (transactional ids per state, read at scrape time)."""
        self.registry.register(_TransactionStateCollector(coordinator))

    def observe_request(self, api: str, version: int, timings: dict[str, float], error: str,
                        request_bytes: int) -> None:
        """Record one completed request in RequestsPerSec, ErrorsPerSec and the histograms."""
        self.request_metrics.observe(api, version, timings, error, request_bytes)

    def exposition(self) -> bytes:
        """The registry in Prometheus text format."""
        return generate_latest(self.registry)


class AuthenticationMetrics:
    """Kafka's socket-server-metrics ``successful-authentication-total``,
    ``successful-reauthentication-total`` and ``failed-authentication-total``, per listener.

    As Kafka's Selector counts them: a connection counts once it has authenticated (the TLS
    handshake of an SSL listener, SaslAuthenticate on a SASL listener; PLAINTEXT connections
    never authenticate), a KIP-368 renewal as a reauthentication, and as a failure a failed TLS
    handshake or SASL authentication, an unsupported SASL mechanism or a request before
    authentication (Kafka's AuthenticationExceptions).
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        prefix = "kafka_server_socket_server_metrics_"
        self._successful = Counter(prefix + "successful_authentication",
                                   "Connections that authenticated", ["listener"],
                                   registry=registry)
        self._reauthentication = Counter(prefix + "successful_reauthentication",
                                         "Successful re-authentications (KIP-368)",
                                         ["listener"], registry=registry)
        self._failed = Counter(prefix + "failed_authentication",
                               "Failed TLS handshakes and SASL authentications", ["listener"],
                               registry=registry)

    def succeeded(self, listener: str, *, reauthentication: bool = False) -> None:
        (self._reauthentication if reauthentication else self._successful).labels(
            listener).inc()

    def failed(self, listener: str) -> None:
        self._failed.labels(listener).inc()

    def total(self, kind: str, listener: str) -> float:
        """The count so far of ``kind`` (``successful``, ``successful_reauthentication`` or
        ``failed``) on ``listener``."""
        counter = {"successful": self._successful, "failed": self._failed,
                   "successful_reauthentication": self._reauthentication}[kind]
        for family in counter.collect():
            for sample in family.samples:
                if sample.name.endswith("_total") and sample.labels == {"listener": listener}:
                    return float(sample.value)
        return 0.0


class _ApiSeries:
    """One API's request metrics as plain numbers (see :class:`RequestMetrics`)."""

    __slots__ = ("buckets", "bytes", "errors", "sums", "versions")

    def __init__(self, histograms: int, buckets: int) -> None:
        #: Per histogram, the count of observations in each bucket (not cumulative; the last
        #: one is +Inf).
        self.buckets = [[0] * (buckets + 1) for _ in range(histograms)]
        self.sums = [0.0] * histograms
        self.bytes = 0
        self.versions: dict[int, int] = {}
        self.errors: dict[str, int] = {}


class RequestMetrics:
    """Kafka's RequestMetrics per API: RequestsPerSec{request,version}, ErrorsPerSec{request,error},
    RequestBytes{request} and the seven request-time histograms{request}.

    Counted per request with plain integer and float additions, and turned into Prometheus
    families only when scraped. prometheus_client's children take a lock for every increment
    and walk the buckets in Python for every observation (about 7 µs per request for these ten
    series); everything here runs on the broker's one event-loop thread, scrapes included, so
    no lock is needed.
    """

    FIELDS = tuple(REQUEST_TIME_HISTOGRAMS)

    def __init__(self, buckets: tuple[float, ...] = _MS_BUCKETS) -> None:
        if not buckets or buckets[0] <= 0:
            raise ValueError("histogram bounds must be positive (observe puts zeros first)")
        self._bounds = buckets
        self._values = operator.itemgetter(*self.FIELDS)
        self._series: dict[str, _ApiSeries] = {}

    def observe(self, api: str, version: int, timings: dict[str, float], error: str,
                request_bytes: int) -> None:
        series = self._series.get(api)
        if series is None:
            series = self._series[api] = _ApiSeries(len(self.FIELDS), len(self._bounds))
        bounds = self._bounds
        sums = series.sums
        buckets = series.buckets
        # Per request: the seven values in one C call, and no bisect or float addition for a
        # zero (most of them: no queue, remote or throttle time), which falls in the first
        # bucket (every bound is positive) and adds nothing to the sum (values are >= 0).
        for index, value in enumerate(self._values(timings)):
            if value:
                buckets[index][bisect_left(bounds, value)] += 1
                sums[index] += value
            else:
                buckets[index][0] += 1
        series.bytes += request_bytes
        versions = series.versions
        versions[version] = versions.get(version, 0) + 1
        errors = series.errors
        errors[error] = errors.get(error, 0) + 1

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Any:
        requests = CounterMetricFamily("kafka_network_requestmetrics_requests",
                                       "Requests completed (RequestsPerSec)",
                                       labels=["request", "version"])
        errors = CounterMetricFamily("kafka_network_requestmetrics_errors",
                                     "Responses by error code (ErrorsPerSec)",
                                     labels=["request", "error"])
        request_bytes = CounterMetricFamily("kafka_network_requestmetrics_requestbytes",
                                            "Request bytes received", labels=["request"])
        histograms = [HistogramMetricFamily(f"kafka_network_requestmetrics_{name.lower()}",
                                            f"Kafka's {name}", labels=["request"])
                      for name in REQUEST_TIME_HISTOGRAMS.values()]
        bounds = [floatToGoString(b) for b in self._bounds] + ["+Inf"]
        for api, series in sorted(self._series.items()):
            for version, count in sorted(series.versions.items()):
                requests.add_metric([api, str(version)], count)
            for error, count in sorted(series.errors.items()):
                errors.add_metric([api, error], count)
            request_bytes.add_metric([api], series.bytes)
            for family, counts, total in zip(histograms, series.buckets, series.sums, strict=True):
                cumulative = list(itertools.accumulate(counts))
                family.add_metric([api], list(zip(bounds, cumulative, strict=True)), total)
        yield requests
        yield errors
        yield request_bytes
        yield from histograms


class TopicCounts:
    """The BrokerTopicMetrics counters of one topic (or of all topics)."""

    __slots__ = ("bytes_in", "bytes_out", "failed_fetch_requests", "failed_produce_requests",
                 "messages_in", "total_fetch_requests", "total_produce_requests")

    def __init__(self) -> None:
        self.bytes_in = 0
        self.bytes_out = 0
        self.messages_in = 0
        self.total_produce_requests = 0
        self.total_fetch_requests = 0
        self.failed_produce_requests = 0
        self.failed_fetch_requests = 0


#: Each counter's Kafka name (``kafka.server:type=BrokerTopicMetrics,name=...``).
BROKER_TOPIC_METRICS = {
    "bytes_in": ("BytesInPerSec", "Bytes of record batches appended by producers"),
    "bytes_out": ("BytesOutPerSec", "Bytes of record batches sent to consumers"),
    "messages_in": ("MessagesInPerSec", "Records appended by producers"),
    "total_produce_requests": ("TotalProduceRequestsPerSec",
                               "Produce requests, counted once per topic-partition"),
    "total_fetch_requests": ("TotalFetchRequestsPerSec",
                             "Fetch requests, counted once per topic-partition"),
    "failed_produce_requests": ("FailedProduceRequestsPerSec",
                                "Produce requests that failed on a topic-partition"),
    "failed_fetch_requests": ("FailedFetchRequestsPerSec",
                              "Fetch requests that failed on a topic-partition"),
}


class BrokerTopicMetrics:
    """Kafka's BrokerTopicMetrics, per topic and for all topics.

    Kafka's JMX names are ``kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec`` (all
    topics) and the same with ``,topic=T``; the jmx exporter makes both samples of one counter,
    ``kafka_server_brokertopicmetrics_bytesin_total`` without and with a ``topic`` label. The
    handlers add to plain integers (:meth:`topic` returns a topic's counters, kept, so a request
    costs one dict lookup and a few additions); scrapes build the families.
    """

    def __init__(self) -> None:
        self.all_topics = TopicCounts()
        self._topics: dict[str, TopicCounts] = {}

    def topic(self, name: str) -> TopicCounts:
        counts = self._topics.get(name)
        if counts is None:
            counts = self._topics[name] = TopicCounts()
        return counts

    def forget(self, name: str) -> None:
        """A deleted topic's counters go (Kafka's ``BrokerTopicStats.removeMetrics``)."""
        self._topics.pop(name, None)

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Any:
        for attribute, (kafka_name, doc) in BROKER_TOPIC_METRICS.items():
            name = f"kafka_server_brokertopicmetrics_{kafka_name.removesuffix('PerSec').lower()}"
            family = Metric(name, f"{doc} ({kafka_name})", "counter")
            family.add_sample(name + "_total", {}, getattr(self.all_topics, attribute))
            for topic, counts in sorted(self._topics.items()):
                family.add_sample(name + "_total", {"topic": topic}, getattr(counts, attribute))
            yield family


class _LogSizeCollector:
    """``kafka.log:type=Log,name=Size,topic=T,partition=P``: bytes of a partition's segments,
    read at scrape time."""

    def __init__(self, log_manager: Any) -> None:
        self._log_manager = log_manager

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Any:
        family = GaugeMetricFamily("kafka_log_log_size", "Bytes of a partition's log segments",
                                   labels=["topic", "partition"])
        manager = self._log_manager
        for topic, info in sorted(manager.topics.items()):
            for partition in range(info.num_partitions):
                log = manager.get_partition(topic, partition)
                if log is not None:
                    family.add_metric([topic, str(partition)], log.size_bytes)
        yield family


class _FetchSessionCollector:
    """``kafka.server:type=FetchSessionCache``: NumIncrementalFetchSessions,
    NumIncrementalFetchPartitionsCached and IncrementalFetchSessionEvictionsPerSec (a counter
    here), read at scrape time."""

    def __init__(self, cache: Any) -> None:
        self._cache = cache

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Any:
        cache = self._cache
        yield GaugeMetricFamily("kafka_server_fetchsessioncache_num_incremental_fetch_sessions",
                                "Incremental fetch sessions (KIP-227) in the cache",
                                value=len(cache))
        yield GaugeMetricFamily(
            "kafka_server_fetchsessioncache_num_incremental_fetch_partitions_cached",
            "Partitions over all incremental fetch sessions", value=cache.num_partitions)
        yield CounterMetricFamily(
            "kafka_server_fetchsessioncache_incremental_fetch_session_evictions",
            "Fetch sessions evicted to make room for new ones", value=cache.evictions)


class _CleanerCollector:
    """Kafka's log cleaner gauges (``kafka.log:type=LogCleaner`` and ``LogCleanerManager``),
    read at scrape time from the cleaner's last-clean statistics."""

    def __init__(self, cleaner: Any) -> None:
        self._cleaner = cleaner

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Any:
        stats = self._cleaner.stats
        yield GaugeMetricFamily(
            "kafka_log_logcleaner_max_clean_time_secs",
            "Seconds of the longest last clean of the cleaner tasks (max-clean-time-secs)",
            value=int(stats.max_clean_time_secs))
        yield GaugeMetricFamily(
            "kafka_log_logcleaner_cleaner_recopy_percent",
            "Bytes written over bytes read by the cleaners' last cleans, in percent "
            "(cleaner-recopy-percent)", value=int(stats.recopy_percent))
        yield GaugeMetricFamily(
            "kafka_log_logcleanermanager_max_dirty_percent",
            "Dirty share of the dirtiest compacted log at the last check (max-dirty-percent)",
            value=int(100 * stats.max_dirty_ratio))


class _TransactionStateCollector:
    """Transactional ids by state (Kafka's state names), read at scrape time: a growing
    ``Ongoing`` count with no commits, or any ``PrepareCommit`` that stays, needs a look."""

    def __init__(self, coordinator: Any) -> None:
        self._coordinator = coordinator

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Any:
        family = GaugeMetricFamily("kafka_coordinator_transaction_transactions",
                                   "Transactional ids by transaction state", labels=["state"])
        counts: dict[str, int] = {}
        for meta in self._coordinator.transactions.values():
            name = meta.state.kafka_name
            counts[name] = counts.get(name, 0) + 1
        for name, count in sorted(counts.items()):
            family.add_metric([name], count)
        yield family


#: Per quota type: Kafka's metric group and the name of its quota metric (``byte-rate``, ...).
_QUOTA_METRICS = {
    "producer_byte_rate": ("produce", "byte_rate", "Bytes produced per second (byte-rate)"),
    "consumer_byte_rate": ("fetch", "byte_rate", "Bytes fetched per second (byte-rate)"),
    "request_percentage": ("request", "request_time",
                           "Handler time as a percentage of one handler (request-time)"),
    "controller_mutation_rate": ("controllermutation", "mutation_rate",
                                 "Partition mutations per second (mutation-rate)"),
}


class _QuotaCollector:
    """Kafka's per-(user, client-id) quota metrics, read from the quota sensors at scrape time:
    ``kafka_server_<type>_<metric>{user, client_id}`` for each sensor (an empty label is the
    part of the entity a quota does not distinguish, as Kafka's empty tag)."""

    def __init__(self, managers: Any) -> None:
        self._managers = managers
        self._last_now = 0.0

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Any:
        from ..network.quotas import to_ms

        try:
            now = trio.current_time()
            self._last_now = now
        except RuntimeError:  # scraped outside the broker's run loop
            now = self._last_now
        now_ms = to_ms(now)
        for manager in self._managers:
            group, name, doc = _QUOTA_METRICS[manager.key]
            value = GaugeMetricFamily(f"kafka_server_{group}_{name}", doc,
                                      labels=["user", "client_id"])
            throttle = GaugeMetricFamily(
                f"kafka_server_{group}_throttle_time",
                "Average throttle time in ms of throttled responses (throttle-time)",
                labels=["user", "client_id"])
            for (user, client_id), sensors in list(manager.sensors.items()):
                value.add_metric([user, client_id], sensors.rate.rate_ms(now_ms))
                throttle.add_metric([user, client_id], sensors.throttle_time.average(now_ms))
            yield value
            yield throttle
