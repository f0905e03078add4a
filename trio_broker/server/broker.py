"""The broker: configuration, storage, coordinator and the socket server, under one nursery."""

from __future__ import annotations

import attrs
import trio

from ..config import BrokerConfig, Endpoint
from ..config.dynamic import DynamicBrokerConfigs
from ..coordinator import GroupCoordinator
from ..coordinator.transaction import TransactionCoordinator
from ..observability.metrics import AuthenticationMetrics, BrokerTopicMetrics
from ..security.scram import ScramStore
from ..storage.manager import LogManager
from .authorizer import Authorizer
from .client_quotas import ClientQuotas
from .feature_store import FeatureStore
from .fetch_session import FetchSessionCache
from .purgatory import Purgatory


@attrs.define
class Broker:
    """Everything a handler may need. Built and run by :func:`trio_broker.server.app.run_broker`.

    ``log_manager`` is the storage layer (``trio_broker.storage``), ``group_coordinator`` the
    classic group coordinator (``trio_broker.coordinator``).
    """

    config: BrokerConfig
    cluster_id: str
    #: Not opened here: the app opens it (in a worker thread) before serving.
    log_manager: LogManager = attrs.field(
        default=attrs.Factory(lambda self: LogManager(self.config), takes_self=True))
    group_coordinator: GroupCoordinator = attrs.field(
        default=attrs.Factory(lambda self: GroupCoordinator(self.config, self.log_manager),
                              takes_self=True))
    transaction_coordinator: TransactionCoordinator = attrs.field(
        default=attrs.Factory(lambda self: TransactionCoordinator(
            self.config, self.log_manager, self.group_coordinator), takes_self=True))
    #: Client quotas (connection creation rate of IPs); None when no socket server runs.
    client_quotas: ClientQuotas | None = None
    #: ACL authorization; None when ``authorizer.class.name`` is empty (everything allowed).
    authorizer: Authorizer | None = None
    #: Advertised endpoint of each listener (by upper-case name), known once bound.
    advertised: dict[str, Endpoint] = attrs.field(factory=dict)
    #: Where parked (delayed) operations wait; its tasks run while the broker runs.
    purgatory: Purgatory = attrs.field(factory=Purgatory)
    #: Kafka's BrokerTopicMetrics, counted by the produce and fetch handlers.
    topic_metrics: BrokerTopicMetrics = attrs.field(factory=BrokerTopicMetrics)
    #: Successful and failed authentications per listener, counted by the SASL handler.
    authentication_metrics: AuthenticationMetrics = attrs.field(factory=AuthenticationMetrics)
    #: Incremental fetch sessions (KIP-227), shared by all connections as in Kafka.
    fetch_sessions: FetchSessionCache = attrs.field(default=attrs.Factory(
        lambda self: FetchSessionCache(self.config.max_incremental_fetch_session_cache_slots),
        takes_self=True))
    #: SCRAM credentials (DescribeUserScramCredentials / AlterUserScramCredentials, SASL/SCRAM).
    scram: ScramStore = attrs.field(
        default=attrs.Factory(lambda self: ScramStore(self.config.data_dir), takes_self=True))
    #: Worker threads for work that grows with what a client sent (``trio_broker/offload.py``):
    #: ``num.io.threads`` at once, as Kafka's request-handler threads.
    workers: trio.CapacityLimiter = attrs.field(default=attrs.Factory(
        lambda self: trio.CapacityLimiter(self.config.num_io_threads), takes_self=True))

    #: Finalized features and the metadata quorum's counters (UpdateFeatures, DescribeQuorum).
    features: FeatureStore = attrs.field(default=attrs.Factory(
        lambda self: FeatureStore(self.config.data_dir), takes_self=True))
    #: Dynamic broker configs (IncrementalAlterConfigs on BROKER resources); ``config`` is
    #: their effective result over the static config.
    dynamic_configs: DynamicBrokerConfigs = attrs.field(default=attrs.Factory(
        lambda self: DynamicBrokerConfigs(self.config), takes_self=True))

    def reconfigure(self, config: BrokerConfig) -> None:
        """Apply a new effective config (a dynamic broker config changed): storage takes the
        new log defaults at once; handlers read ``config`` from here on."""
        self.config = config
        self.log_manager.apply_broker_config(config)

    @property
    def node_id(self) -> int:
        return self.config.node_id

    def advertised_endpoint(self, listener: str) -> Endpoint:
        return self.advertised[listener.upper()]
