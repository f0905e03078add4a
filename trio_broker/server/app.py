"""Running a whole broker: storage, coordinator, handlers and the socket server in one nursery.

:class:`BrokerApp` is what ``trio_broker run`` and the test fixtures start::

    app = BrokerApp(config)
    async with trio.open_nursery() as nursery:
        await nursery.start(app.serve)   # returns once every listener is bound
        ...
        await app.shutdown()             # Kafka's order, under a graceful deadline

Shutdown order (Kafka's ``BrokerServer.shutdown``): stop accepting, stop reading, answer parked
requests (long polls with what they have, group joins and syncs with NOT_COORDINATOR), let in-flight
requests finish until ``shutdown.graceful.timeout.ms``, close connections, stop the handlers and
delayed operations, stop the coordinator, close storage, flush logs.
"""

from __future__ import annotations

import base64
import time
import uuid
from typing import Any

import trio

from .. import __version__
from ..config import KAFKA_KEYS_WITHOUT_EFFECT, BrokerConfig, Endpoint, parse_properties
from ..config.dynamic import DynamicBrokerConfigs
from ..coordinator import GroupCoordinator
from ..network.socket_server import BoundListener, SocketServer, advertised_endpoints
from ..observability import log
from ..observability.log import emit
from ..observability.metrics import BrokerMetrics
from ..offload import collector_pause, virtual_time
from ..security.listeners import listener_security
from ..security.scram import ScramStore
from ..storage.durable import write_durably
from ..storage.manager import LogManager
from .authorizer import Authorizer
from .broker import Broker
from .client_quotas import ClientQuotas
from .feature_store import FeatureStore
from .handler_pool import RequestHandlerPool
from .metrics_http import serve_metrics
from .registry import supported_versions

META_PROPERTIES = "meta.properties"


def load_or_create_cluster_id(config: BrokerConfig) -> str:
    """The cluster id from ``meta.properties`` in the data directory, created on first start.

    Kafka keeps ``cluster.id`` and ``node.id`` there and refuses to start when they disagree with
    the configuration; so do we.
    """
    data_dir = config.data_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / META_PROPERTIES
    if path.exists():
        meta = parse_properties(path.read_text(encoding="utf-8"))
        cluster_id = meta.get("cluster.id", "")
        stored_node = meta.get("node.id")
        if stored_node is not None and not stored_node.lstrip("-").isdigit():
            raise RuntimeError(f"node.id {stored_node!r} stored in {path} is not a number")
        if stored_node is not None and int(stored_node) != config.node_id:
            raise RuntimeError(
                f"node.id {config.node_id} does not match node.id {stored_node} stored in {path}")
        if config.cluster_id and cluster_id and config.cluster_id != cluster_id:
            raise RuntimeError(
                f"cluster.id {config.cluster_id} does not match {cluster_id} stored in {path}")
        if cluster_id:
            return cluster_id
    cluster_id = config.cluster_id or base64.urlsafe_b64encode(uuid.uuid4().bytes).decode()[:22]
    write_durably(path, f"version=1\ncluster.id={cluster_id}\nnode.id={config.node_id}\n")
    return cluster_id


def _open_storage(config: BrokerConfig) -> LogManager:
    """Open the log directory: lock it, load topics, recover what a crash left behind."""
    manager = LogManager(config)
    manager.open()
    return manager


class BrokerApp:
    """One running broker."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.metrics = BrokerMetrics()
        self.broker: Broker | None = None
        self.scram = ScramStore(config.data_dir)
        self.scram.describe()  # an unreadable credentials file fails start-up, naming it
        self.socket_server = SocketServer(config, self.metrics, supported_versions(),
                                          listener_security(config, self.scram))
        self.listeners: list[BoundListener] = []
        self.metrics_port: int | None = None
        self._shutdown_requested = trio.Event()
        self._stopped = trio.Event()
        self._killed = False
        self._root: trio.Nursery | None = None
        self._started_at = time.monotonic()

    @property
    def advertised(self) -> dict[str, Endpoint]:
        assert self.broker is not None
        return self.broker.advertised

    async def serve(self, *, task_status: trio.TaskStatus[BrokerApp] = trio.TASK_STATUS_IGNORED
                    ) -> None:
        config = self.config
        started = time.perf_counter()
        for key in config.ignored_keys:
            emit("config_key_ignored", key=key,
                 reason="Kafka key without effect here" if key in KAFKA_KEYS_WITHOUT_EFFECT
                 else "unknown key")
        emit("broker_starting", version=__version__, data_dir=str(config.data_dir),
             ignored_config_keys=",".join(config.ignored_keys))
        cluster_id = await trio.to_thread.run_sync(load_or_create_cluster_id, config)
        # Before storage is opened (and locked): an unreadable ACL file stops the start cleanly.
        authorizer = Authorizer.from_config(config.data_dir, config)
        if authorizer is not None:
            await trio.to_thread.run_sync(authorizer.load)
        # Dynamic broker configs saved by an earlier run: storage opens with their defaults.
        dynamic = DynamicBrokerConfigs(config)
        await trio.to_thread.run_sync(dynamic.load)
        config = dynamic.current
        features = FeatureStore(config.data_dir)  # this start's election is recorded
        await trio.to_thread.run_sync(features.load)
        log_manager = await trio.to_thread.run_sync(_open_storage, config)
        client_quotas = ClientQuotas(config.data_dir, self.socket_server.quotas, config)
        self.metrics.watch_quotas(client_quotas.managers)
        await trio.to_thread.run_sync(client_quotas.load)
        self.metrics.watch_logs(log_manager)
        broker = Broker(config, cluster_id, log_manager=log_manager,
                        group_coordinator=GroupCoordinator(config, log_manager),
                        client_quotas=client_quotas, topic_metrics=self.metrics.topics,
                        authentication_metrics=self.metrics.authentication,
                        authorizer=authorizer, scram=self.scram, dynamic_configs=dynamic,
                        features=features)
        self.metrics.watch_fetch_sessions(broker.fetch_sessions)
        self.broker = broker
        self.metrics.watch_transactions(broker.transaction_coordinator)
        loop = self.metrics.loop
        loop.blocked_threshold_s = config.event_loop_blocked_threshold_ms / 1000
        loop.on_blocked = _loop_blocked
        trio.lowlevel.add_instrument(loop)
        loop.start_watchdog()
        server = self.socket_server
        try:
            async with trio.open_nursery() as root:
                self._root = root
                # Inner services first, so the front end never hands work to a missing back end.
                self._storage_scope = trio.CancelScope()
                await root.start(self._run_in_scope, self._storage_scope, log_manager.run)
                self._coordinator_scope = trio.CancelScope()
                await root.start(self._run_in_scope, self._coordinator_scope,
                                 broker.group_coordinator.run)
                self._txn_scope = trio.CancelScope()
                await root.start(self._run_in_scope, self._txn_scope,
                                 broker.transaction_coordinator.run)
                self._purgatory_scope = trio.CancelScope()
                await root.start(self._run_in_scope, self._purgatory_scope,
                                 broker.purgatory.run)
                self._pools = [RequestHandlerPool(broker, server, server.data_plane_channel,
                                                  config.num_io_threads)]
                if server.control_plane_channel is not None:
                    self._pools.append(RequestHandlerPool(broker, server,
                                                          server.control_plane_channel, 1))
                for pool in self._pools:
                    await root.start(pool.run)
                self.metrics.request_handler_avg_idle_percent.set_function(
                    self._pools[0].read_avg_idle_ratio)
                self.listeners = await root.start(server.serve)
                broker.advertised.update(advertised_endpoints(config, self.listeners))
                if config.metrics_prometheus_listener:
                    self.metrics_port = await root.start(
                        serve_metrics, config.metrics_prometheus_listener, self.metrics)
                if config.logging_metrics_snapshot_interval_ms > 0:
                    root.start_soon(self._snapshot_metrics)
                if not virtual_time():  # under the autojump clock a wake-up is never late
                    root.start_soon(loop.watch_lag)
                root.start_soon(collector_pause.keep_sweeping)
                emit("broker_ready",
                     listeners=",".join(f"{b.name}://{b.endpoint.host}:{b.port}"
                                        for b in self.listeners),
                     advertised=",".join(str(e) for e in broker.advertised.values()),
                     startup_ms=round((time.perf_counter() - started) * 1000, 3))
                task_status.started(self)
                await self._shutdown_requested.wait()
                await self._shutdown_in_order()
                root.cancel_scope.cancel()
        finally:
            loop.stop_watchdog()
            trio.lowlevel.remove_instrument(loop)
            with trio.CancelScope(shield=True):  # flush even when cancelled from outside
                await trio.to_thread.run_sync(
                    log_manager.abandon if self._killed else log_manager.close)
            emit("broker_stopped", uptime_s=round(time.monotonic() - self._started_at, 3))
            log.flush()
            self._stopped.set()

    @staticmethod
    async def _run_in_scope(scope: trio.CancelScope, service: Any, *,
                            task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with scope:
            await service(task_status=task_status)

    async def shutdown(self) -> None:
        """Ask for the ordered shutdown and wait until the broker has stopped."""
        self._shutdown_requested.set()
        await self._stopped.wait()

    async def kill(self) -> None:
        """Stop at once, as a killed process would (for ``trio_broker.testing``): no ordered
        shutdown, connections dropped, nothing flushed and no clean-shutdown marker."""
        self._killed = True
        if self._root is not None:
            self._root.cancel_scope.cancel()
        await self._stopped.wait()

    async def _shutdown_in_order(self) -> None:
        server = self.socket_server
        began = trio.current_time()

        def step(name: str, detail: str = "") -> None:
            emit("shutdown_step", step=name, detail=detail,
                 elapsed_ms=round((trio.current_time() - began) * 1000, 3))

        server.stop_accepting()
        step("acceptors_stopped")
        server.stop_reading()
        step("processors_stopped_reading")
        # Parked requests answer now, so the drain below does not wait out their waits: long
        # polls with what they have (Kafka force-completes delayed fetches), joins and syncs
        # with NOT_COORDINATOR (the coordinator resigns, as on Kafka's controlled shutdown).
        if self.broker is not None:
            self.broker.purgatory.complete_all()
            self.broker.group_coordinator.resign()
        step("delayed_operations_completed")
        graceful = self.config.shutdown_graceful_timeout_ms / 1000
        with trio.move_on_after(graceful) as drain_scope:
            await server.wait_drained()
        step("in_flight_requests_" + ("cancelled" if drain_scope.cancelled_caught else "finished"))
        server.close_connections()
        step("connections_closed")
        for pool in self._pools:
            pool.cancel_scope.cancel()
        self._purgatory_scope.cancel()
        step("handlers_stopped")
        self._txn_scope.cancel()
        self._coordinator_scope.cancel()
        self._storage_scope.cancel()
        step("storage_closing")

    async def _snapshot_metrics(self) -> None:
        interval = self.config.logging_metrics_snapshot_interval_ms / 1000
        server = self.socket_server
        while True:
            await trio.sleep(interval)
            emit("metrics_snapshot",
                 request_queue_size=server.data_plane_channel.queue_size,
                 response_queue_size=server.response_queue_size,
                 network_processor_avg_idle_percent=round(self.metrics.read_idle_ratio(), 4),
                 memory_pool_available=server.memory_pool.available,
                 memory_pool_used=server.memory_pool.used,
                 connection_count=server.connection_count,
                 request_handler_avg_idle_percent=round(self._pools[0].read_avg_idle_ratio(), 4),
                 event_loop_lag_ms=round(self.metrics.loop.read_lag("snapshot") * 1000, 3))


def _loop_blocked(ran_s: float, culprit: dict[str, Any]) -> None:
    """``event_loop_blocked``: the loop ran ``ran_s`` without polling for I/O."""
    emit("event_loop_blocked", duration_ms=round(ran_s * 1000, 3),
         api=culprit.get("api", ""), client_id=culprit.get("client_id", ""),
         blocked_connection_id=culprit.get("connection_id", ""),
         where=culprit.get("where", ""), gc_ms=culprit.get("gc_ms", 0.0))
