"""Kafka's network-layer metrics, in a Prometheus registry owned by one broker.

Names follow the jmx-exporter convention for Kafka's MBeans, ``kafka_<domain>_<type>_<name>``
(lower-cased), so existing dashboards' queries read naturally; docs/metrics.md maps each to its
Kafka MBean.
"""

from __future__ import annotations

import time
from typing import Any

import trio
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

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


class IdleInstrument(trio.abc.Instrument):
    """Measures how long the run loop waits for I/O: Kafka's io-wait-ratio of a processor.

    All processors share Trio's one event loop, so NetworkProcessorAvgIdlePercent is the share
    of wall time the loop spent idle in ``epoll_wait`` since the previous reading.
    """

    def __init__(self) -> None:
        self._waiting_since: float | None = None
        self._waited = 0.0
        self._last_read = time.perf_counter()
        self._waited_at_last_read = 0.0

    def before_io_wait(self, timeout: float) -> None:
        self._waiting_since = time.perf_counter()

    def after_io_wait(self, timeout: float) -> None:
        if self._waiting_since is not None:
            self._waited += time.perf_counter() - self._waiting_since
            self._waiting_since = None

    def idle_ratio(self) -> float:
        """Idle share (0..1) since the previous call."""
        now = time.perf_counter()
        waited = self._waited
        if self._waiting_since is not None:
            waited += now - self._waiting_since
        elapsed = now - self._last_read
        ratio = (waited - self._waited_at_last_read) / elapsed if elapsed > 0 else 1.0
        self._last_read = now
        self._waited_at_last_read = waited
        return min(max(ratio, 0.0), 1.0)


class BrokerMetrics:
    """Every metric of one broker. Gauges read live state through callbacks set at start-up."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.idle = IdleInstrument()
        self.network_processor_avg_idle_percent = Gauge(
            "kafka_network_socketserver_networkprocessoravgidlepercent",
            "Share of time the network event loop waited for I/O (0..1)", registry=r)
        self.network_processor_avg_idle_percent.set_function(self.read_idle_ratio)
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
        self.requests = Counter(
            "kafka_network_requestmetrics_requests", "Requests completed (RequestsPerSec)",
            ["request", "version"], registry=r)
        self.errors = Counter(
            "kafka_network_requestmetrics_errors", "Responses by error code (ErrorsPerSec)",
            ["request", "error"], registry=r)
        self.request_bytes = Counter(
            "kafka_network_requestmetrics_requestbytes", "Request bytes received",
            ["request"], registry=r)
        self.request_handler_avg_idle_percent = Gauge(
            "kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent",
            "Share of handler tasks waiting for a request (0..1)", registry=r)
        self.request_times = {
            field: Histogram(
                f"kafka_network_requestmetrics_{name.lower()}", f"Kafka's {name}",
                ["request"], buckets=_MS_BUCKETS, registry=r)
            for field, name in REQUEST_TIME_HISTOGRAMS.items()
        }
        # Label lookups take a lock and build a key: resolve each series once, not per request.
        self._per_api: dict[str, tuple[list[tuple[str, Any]], Any]] = {}
        self._per_version: dict[tuple[str, int], Any] = {}
        self._per_error: dict[tuple[str, str], Any] = {}

    def watch_quotas(self, managers: Any) -> None:
        """Serve the per-client quota metrics of ``managers`` (a ``QuotaManagers``)."""
        self.registry.register(_QuotaCollector(managers))

    def read_idle_ratio(self) -> float:
        return self.idle.idle_ratio()

    def observe_request(self, api: str, version: int, timings: dict[str, float], error: str,
                        request_bytes: int) -> None:
        """Record one completed request in RequestsPerSec, ErrorsPerSec and the histograms."""
        per_api = self._per_api.get(api)
        if per_api is None:
            per_api = self._per_api[api] = (
                [(f, h.labels(api)) for f, h in self.request_times.items()],
                self.request_bytes.labels(api))
        histograms, bytes_counter = per_api
        for field, child in histograms:
            child.observe(timings[field])
        bytes_counter.inc(request_bytes)
        requests = self._per_version.get((api, version))
        if requests is None:
            requests = self._per_version[(api, version)] = self.requests.labels(api, str(version))
        requests.inc()
        errors = self._per_error.get((api, error))
        if errors is None:
            errors = self._per_error[(api, error)] = self.errors.labels(api, error)
        errors.inc()

    def exposition(self) -> bytes:
        """The registry in Prometheus text format."""
        return generate_latest(self.registry)


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
        from prometheus_client.core import GaugeMetricFamily

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
