"""The settings table: :class:`BrokerConfig`, every setting of the broker as one attribute declared
with the Kafka key it is read from, its default, its validator and its documentation
(:func:`~.fields.setting`), plus views derived from them (endpoints, effective retention,
per-listener values).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from .fields import (
    INT_MAX,
    LONG_MAX,
    _assignor_list,
    _bool_setting,
    _cleanup_policy,
    _convert,
    _long,
    _parse_optional_int,
    _protocol_list,
    _ratio,
    _str_setting,
    at_least,
    between,
    one_of,
    setting,
)
from .listeners import Endpoint, parse_endpoints, parse_ip_overrides, parse_protocol_map


# ------------------------------------------------------------------------------- config
def _two_phase_commit_off(value: Any) -> str | None:
    """Only false: two-phase commit is not implemented"""
    if not value:
        return None
    return ("two-phase commit (KIP-939) is not implemented (InitProducerId answers a request "
            "for it TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka with this key false); "
            "remove it or set it to false")


@attrs.frozen(kw_only=True)
class BrokerConfig:
    """Every setting of the broker, under Kafka's names and with Kafka's defaults.

    Build one with :func:`load_config`; the attribute declarations below are also the source of
    ``docs/configuration.md``.
    """

    # -- identity and listeners
    node_id: int = setting("node.id", 1, "This broker's id, advertised in Metadata.",
                           validator=at_least(0), group="Broker")
    cluster_id: str | None = _str_setting(
        "cluster.id", None,
        "Cluster id reported to clients. Unset: generated once and kept in meta.properties.",
        group="Broker")
    listeners: str = _str_setting(
        "listeners", "PLAINTEXT://localhost:9092",
        "Comma-separated NAME://host:port endpoints to listen on. Port 0 picks a free port; an "
        "empty host binds every interface.")
    advertised_listeners: str | None = _str_setting(
        "advertised.listeners", None,
        "Endpoints given to clients in Metadata. Unset: the listeners, with their bound ports.")
    listener_security_protocol_map: str = _str_setting(
        "listener.security.protocol.map",
        "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        "Security protocol of each listener name (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL).")
    control_plane_listener_name: str | None = _str_setting(
        "control.plane.listener.name", None,
        "Listener served by a separate control plane: its own acceptor, one processor, a request "
        "channel of capacity 20 and its own handler.")
    # -- network threads and queues
    num_network_threads: int = setting(
        "num.network.threads", 3, "Processor tasks per data-plane listener.", validator=at_least(1))
    num_io_threads: int = setting(
        "num.io.threads", 8, "Request-handler tasks consuming the data-plane request channel.",
        validator=at_least(1))
    queued_max_connections: int = setting(
        "queued.max.connections", 20,
        "Capacity of each processor's new-connection channel (Kafka hard-codes 20).",
        validator=at_least(1))
    queued_max_requests: int = setting(
        "queued.max.requests", 500,
        "Capacity of the request channel between processors and handlers; a full channel stops "
        "the readers.", validator=at_least(1))
    queued_max_request_bytes: int = _long(
        "queued.max.request.bytes", -1,
        "Bytes of request frames that may be held at once (memory pool). -1 or 0: no limit. "
        "Otherwise at least socket.request.max.bytes.")
    connection_max_inflight_requests: int = setting(
        "connection.max.inflight.requests", 1,
        "Requests read from one connection before its responses are sent. 1 is Kafka's mute rule; "
        "more is AutoMQ-style pipelining (responses still leave in request order).",
        validator=between(1, 1024))
    socket_request_max_bytes: int = setting(
        "socket.request.max.bytes", 104857600, "Largest request frame accepted.",
        validator=at_least(1))
    socket_send_buffer_bytes: int = setting(
        "socket.send.buffer.bytes", 102400, "SO_SNDBUF of accepted sockets; -1: OS default.",
        validator=at_least(-1))
    socket_receive_buffer_bytes: int = setting(
        "socket.receive.buffer.bytes", 102400,
        "SO_RCVBUF set on the listening socket before bind; -1: OS default.",
        validator=at_least(-1))
    socket_listen_backlog_size: int = setting(
        "socket.listen.backlog.size", 50, "Backlog passed to listen().", validator=at_least(1))
    connections_max_idle_ms: int = _long(
        "connections.max.idle.ms", 600000,
        "Close connections idle for longer than this; negative disables.")
    socket_send_stall_timeout_ms: int = _long(
        "socket.send.stall.timeout.ms", 60000,
        "Close a connection whose response write has had no byte accepted by the kernel for this "
        "long (the peer neither reads nor acknowledges). -1 disables (idle expiry still applies). "
        "Not a Kafka key.",
        validator=at_least(-1))
    socket_sendfile_enable: bool = _bool_setting(
        "socket.sendfile.enable", True,
        "Zero-copy fetch: send a Fetch response's record bytes from the segment file with "
        "sendfile on plaintext connections (Kafka always does; TLS connections read them). "
        "false reads them from the file and sends them a chunk of 256 KiB at a time, as TLS "
        "connections do (for comparison, and file systems without sendfile). Not a Kafka key.")
    max_connections: int = setting(
        "max.connections", INT_MAX,
        "Connections allowed across the broker; the acceptor waits for a free slot.",
        validator=at_least(0))
    max_connections_per_ip: int = setting(
        "max.connections.per.ip", INT_MAX,
        "Connections allowed from one IP; more are closed at once. 0 only with overrides.",
        validator=at_least(0))
    max_connections_per_ip_overrides: str = _str_setting(
        "max.connections.per.ip.overrides", "",
        "Per-host or per-IP limits, 'host:n,ip:n'; host names are resolved at start-up.")
    max_connection_creation_rate: int = setting(
        "max.connection.creation.rate", INT_MAX,
        "New connections per second accepted across the broker; the acceptor waits when over.",
        validator=at_least(0))
    quota_window_size_seconds: int = setting(
        "quota.window.size.seconds", 1, "Length of one quota sample window.",
        validator=at_least(1), group="Quotas")
    quota_window_num: int = setting(
        "quota.window.num", 11, "Number of quota sample windows.", validator=at_least(1),
        group="Quotas")
    controller_quota_window_size_seconds: int = setting(
        "controller.quota.window.size.seconds", 1,
        "Length of one sample window of the controller mutation quota (KIP-599).",
        validator=at_least(1), group="Quotas")
    controller_quota_window_num: int = setting(
        "controller.quota.window.num", 11,
        "Number of sample windows of the controller mutation quota (KIP-599).",
        validator=at_least(1), group="Quotas")
    shutdown_graceful_timeout_ms: int = _long(
        "shutdown.graceful.timeout.ms", 10000,
        "How long in-flight requests may finish at shutdown before they are cancelled.",
        validator=at_least(0))
    # -- storage
    log_dirs: str | None = _str_setting(
        "log.dirs", None, "Data directory (the first of a comma-separated list is used).",
        group="Log")
    log_dir: str = _str_setting(
        "log.dir", "/tmp/trio-broker-logs", "Data directory when log.dirs is unset.", group="Log")
    auto_create_topics_enable: bool = _bool_setting(
        "auto.create.topics.enable", True, "Create unknown topics named in Metadata requests.",
        group="Log")
    delete_topic_enable: bool = _bool_setting(
        "delete.topic.enable", True, "Allow DeleteTopics.", group="Log")
    num_partitions: int = setting(
        "num.partitions", 1, "Partitions of auto-created topics.", validator=at_least(1),
        group="Log")
    default_replication_factor: int = setting(
        "default.replication.factor", 1, "Replication factor of auto-created topics (must be 1).",
        validator=between(1, 1), group="Log")
    message_max_bytes: int = setting(
        "message.max.bytes", 1048588, "Largest record batch accepted.", validator=at_least(0),
        group="Log", dynamic=True)
    fetch_max_bytes: int = setting(
        "fetch.max.bytes", 57671680,
        "Largest Fetch response: a request's max_bytes above it is lowered to it (the first "
        "batch is still sent whole). Kafka's key and default (55 MiB).",
        validator=at_least(1024), group="Log")
    max_incremental_fetch_session_cache_slots: int = setting(
        "max.incremental.fetch.session.cache.slots", 1000,
        "Incremental fetch sessions (KIP-227) kept at most; when full, a new one evicts a "
        "stale or smaller session, else the fetch is answered without a session.",
        validator=at_least(0), group="Log")
    log_segment_bytes: int = setting(
        "log.segment.bytes", 1073741824, "Roll a segment when it reaches this size.",
        validator=at_least(14), group="Log", dynamic=True)
    log_roll_ms: int | None = _long(
        "log.roll.ms", None, "Roll a segment this old; unset: log.roll.hours.",
        validator=at_least(1), group="Log", dynamic=True)
    log_roll_hours: int = setting(
        "log.roll.hours", 168, "Roll a segment this old.", validator=at_least(1), group="Log",
        dynamic=True)
    log_retention_ms: int | None = _long(
        "log.retention.ms", None, "Delete segments older than this; -1 keeps them forever.",
        validator=at_least(-1), group="Log", dynamic=True)
    log_retention_minutes: int | None = setting(
        "log.retention.minutes", None, "Retention in minutes when log.retention.ms is unset.",
        parser=_parse_optional_int, validator=at_least(-1), group="Log", dynamic=True)
    log_retention_hours: int = setting(
        "log.retention.hours", 168, "Retention in hours when the finer keys are unset.",
        validator=at_least(-1), group="Log", dynamic=True)
    log_retention_bytes: int = _long(
        "log.retention.bytes", -1, "Delete old segments while a partition is larger; -1: no limit.",
        group="Log", dynamic=True)
    log_retention_check_interval_ms: int = _long(
        "log.retention.check.interval.ms", 300000, "How often retention runs.",
        validator=at_least(1), group="Log")
    log_flush_interval_messages: int = _long(
        "log.flush.interval.messages", LONG_MAX,
        "fsync a partition after this many appended messages (default: leave it to the OS).",
        validator=at_least(1), group="Log", dynamic=True)
    log_flush_interval_ms: int | None = _long(
        "log.flush.interval.ms", None,
        "fsync a partition whose oldest unflushed data is this old; unset: "
        "log.flush.scheduler.interval.ms.", validator=at_least(0), group="Log", dynamic=True)
    log_flush_scheduler_interval_ms: int = _long(
        "log.flush.scheduler.interval.ms", LONG_MAX, "How often the time-based flush runs.",
        validator=at_least(1), group="Log")
    log_index_interval_bytes: int = setting(
        "log.index.interval.bytes", 4096, "Bytes between offset-index entries.",
        validator=at_least(0), group="Log", dynamic=True)
    log_index_size_max_bytes: int = setting(
        "log.index.size.max.bytes", 10485760, "Largest offset index; the segment rolls when full.",
        validator=at_least(4), group="Log", dynamic=True)
    log_message_timestamp_type: str = _str_setting(
        "log.message.timestamp.type", "CreateTime", "CreateTime or LogAppendTime.",
        validator=one_of("CreateTime", "LogAppendTime"), group="Log", dynamic=True)
    log_message_downconversion_enable: bool = _bool_setting(
        "log.message.downconversion.enable", True,
        "Down-convert records for old consumers (Fetch v0-v3); off: those fetches get "
        "UNSUPPORTED_VERSION. Default of the topic key message.downconversion.enable.",
        group="Log", dynamic=True)
    log_cleanup_policy: str = _str_setting(
        "log.cleanup.policy", "delete",
        "Default cleanup.policy of topics: delete, compact or compact,delete.",
        validator=_cleanup_policy, group="Log", dynamic=True)
    log_cleaner_enable: bool = _bool_setting(
        "log.cleaner.enable", True, "Run the log cleaner (compaction of compacted topics).",
        group="Log")
    log_cleaner_threads: int = setting(
        "log.cleaner.threads", 1, "Cleaner tasks (each cleans one partition at a time).",
        validator=at_least(1), group="Log")
    log_cleaner_dedupe_buffer_size: int = _long(
        "log.cleaner.dedupe.buffer.size", 134217728,
        "Memory of the cleaners' offset maps (key hash to offset), shared by all cleaner tasks.",
        validator=at_least(1024), group="Log")
    log_cleaner_backoff_ms: int = _long(
        "log.cleaner.backoff.ms", 15000, "How long a cleaner sleeps when no log needs cleaning.",
        validator=at_least(0), group="Log")
    log_cleaner_min_cleanable_ratio: float = setting(
        "log.cleaner.min.cleanable.ratio", 0.5,
        "Default min.cleanable.dirty.ratio: dirty bytes over log bytes before a clean.",
        parser=float, validator=_ratio, type_name="double", group="Log", dynamic=True)
    log_cleaner_min_compaction_lag_ms: int = _long(
        "log.cleaner.min.compaction.lag.ms", 0,
        "Default min.compaction.lag.ms: records younger than this are not compacted.",
        validator=at_least(0), group="Log", dynamic=True)
    log_cleaner_max_compaction_lag_ms: int = _long(
        "log.cleaner.max.compaction.lag.ms", LONG_MAX,
        "Default max.compaction.lag.ms: dirty records older than this are compacted whatever "
        "the dirty ratio.", validator=at_least(1), group="Log", dynamic=True)
    log_cleaner_delete_retention_ms: int = _long(
        "log.cleaner.delete.retention.ms", 86400000,
        "Default delete.retention.ms: tombstones survive this long after their first clean.",
        validator=at_least(0), group="Log", dynamic=True)
    producer_id_expiration_ms: int = setting(
        "producer.id.expiration.ms", 86400000,
        "Forget idempotent producer state this long after its last write.", validator=at_least(1),
        group="Log", dynamic=True)
    # -- group coordinator
    group_initial_rebalance_delay_ms: int = setting(
        "group.initial.rebalance.delay.ms", 3000,
        "How long the first rebalance of an empty group waits for more members.",
        validator=at_least(0), group="Groups")
    group_min_session_timeout_ms: int = setting(
        "group.min.session.timeout.ms", 6000, "Smallest session timeout a member may ask for.",
        validator=at_least(0), group="Groups")
    group_max_session_timeout_ms: int = setting(
        "group.max.session.timeout.ms", 1800000, "Largest session timeout a member may ask for.",
        validator=at_least(0), group="Groups")
    group_max_size: int = setting(
        "group.max.size", INT_MAX, "Members allowed in one group.", validator=at_least(1),
        group="Groups")
    group_coordinator_rebalance_protocols: str = _str_setting(
        "group.coordinator.rebalance.protocols", "classic,consumer",
        "Group protocols served (comma-separated): classic (JoinGroup/SyncGroup) and consumer "
        "(KIP-848 ConsumerGroupHeartbeat).", validator=_protocol_list, group="Groups")
    group_consumer_heartbeat_interval_ms: int = setting(
        "group.consumer.heartbeat.interval.ms", 5000,
        "Heartbeat interval the coordinator gives consumer-protocol members.",
        validator=at_least(1), group="Groups")
    group_consumer_session_timeout_ms: int = setting(
        "group.consumer.session.timeout.ms", 45000,
        "A consumer-protocol member without a heartbeat for this long is removed.",
        validator=at_least(1), group="Groups")
    group_consumer_max_size: int = setting(
        "group.consumer.max.size", INT_MAX, "Members allowed in one consumer-protocol group.",
        validator=at_least(1), group="Groups")
    group_consumer_assignors: str = _str_setting(
        "group.consumer.assignors", "uniform,range",
        "Server-side assignors (comma-separated, uniform and/or range); the first is the "
        "default.", validator=_assignor_list, group="Groups")
    offsets_retention_minutes: int = setting(
        "offsets.retention.minutes", 10080,
        "Committed offsets of an empty group expire after this long.", validator=at_least(1),
        group="Groups")
    offsets_retention_check_interval_ms: int = _long(
        "offsets.retention.check.interval.ms", 600000, "How often offset expiry runs.",
        validator=at_least(1), group="Groups")
    offsets_topic_num_partitions: int = setting(
        "offsets.topic.num.partitions", 50, "Partitions of the internal __consumer_offsets log.",
        validator=at_least(1), group="Groups")
    offsets_topic_segment_bytes: int = setting(
        "offsets.topic.segment.bytes", 104857600,
        "segment.bytes of __consumer_offsets (its closed segments are compacted).",
        validator=at_least(14), group="Groups")
    offset_metadata_max_bytes: int = setting(
        "offset.metadata.max.bytes", 4096, "Largest metadata string of a committed offset.",
        validator=at_least(0), group="Groups")
    # -- authorization (ACLs)
    authorizer_class_name: str = _str_setting(
        "authorizer.class.name", "",
        "Turns ACL authorization on: org.apache.kafka.metadata.authorizer.StandardAuthorizer "
        "(also kafka.security.authorizer.AclAuthorizer, or the alias standard). Empty: off, "
        "every request is allowed.", validator=one_of(
            "", "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "kafka.security.authorizer.AclAuthorizer", "standard"), group="Security")
    super_users: str = _str_setting(
        "super.users", "",
        "Principals allowed everything, separated by semicolons (User:admin;User:ops).",
        group="Security")
    allow_everyone_if_no_acl_found: bool = _bool_setting(
        "allow.everyone.if.no.acl.found", False,
        "Allow a request on a resource that has no ACL at all (otherwise denied).",
        group="Security")
    # -- security (docs/security.md); every key may be given per listener as
    # listener.name.<listener>.<key>
    ssl_keystore_type: str = _str_setting(
        "ssl.keystore.type", "PEM",
        "Only PEM is implemented (Kafka's default is JKS; JKS and PKCS12 are refused at start-up).",
        validator=one_of("PEM", "JKS", "PKCS12"), group="Security")
    ssl_keystore_location: str | None = _str_setting(
        "ssl.keystore.location", None,
        "PEM file holding the private key and the certificate chain.", group="Security")
    ssl_keystore_password: str | None = _str_setting(
        "ssl.keystore.password", None,
        "Not used by PEM keystores (Kafka: invalid with PEM); the key's password is "
        "ssl.key.password.", group="Security")
    ssl_keystore_certificate_chain: str | None = _str_setting(
        "ssl.keystore.certificate.chain", None,
        "The certificate chain in PEM, inline (instead of ssl.keystore.location).",
        group="Security")
    ssl_keystore_key: str | None = _str_setting(
        "ssl.keystore.key", None, "The private key in PEM, inline (with "
        "ssl.keystore.certificate.chain).", group="Security")
    ssl_key_password: str | None = _str_setting(
        "ssl.key.password", None, "Password of an encrypted private key.", group="Security")
    ssl_truststore_type: str = _str_setting(
        "ssl.truststore.type", "PEM", "Only PEM is implemented.",
        validator=one_of("PEM", "JKS", "PKCS12"), group="Security")
    ssl_truststore_location: str | None = _str_setting(
        "ssl.truststore.location", None,
        "PEM file of the CA certificates client certificates are verified against.",
        group="Security")
    ssl_truststore_password: str | None = _str_setting(
        "ssl.truststore.password", None, "Not used by PEM truststores.", group="Security")
    ssl_truststore_certificates: str | None = _str_setting(
        "ssl.truststore.certificates", None, "Trusted CA certificates in PEM, inline.",
        group="Security")
    ssl_client_auth: str = _str_setting(
        "ssl.client.auth", "none",
        "required: clients must present a certificate the truststore verifies (mTLS); requested: "
        "verified when presented; none: not asked for.",
        validator=one_of("none", "requested", "required"), group="Security")
    ssl_enabled_protocols: str = _str_setting(
        "ssl.enabled.protocols", "TLSv1.2,TLSv1.3", "TLS versions accepted.", group="Security")
    ssl_protocol: str = _str_setting(
        "ssl.protocol", "TLSv1.3", "Kafka's SSLContext protocol; accepted, the enabled protocols "
        "decide.", group="Security")
    ssl_cipher_suites: str = _str_setting(
        "ssl.cipher.suites", "",
        "Comma-separated cipher suites (IANA or OpenSSL names) for TLS 1.2; empty: the defaults. "
        "TLS 1.3 suites are not restricted.", group="Security")
    ssl_endpoint_identification_algorithm: str = _str_setting(
        "ssl.endpoint.identification.algorithm", "https",
        "https or empty. As in Kafka, a broker does not verify client host names; the key matters "
        "for clients only.", group="Security")
    ssl_principal_mapping_rules: str = _str_setting(
        "ssl.principal.mapping.rules", "DEFAULT",
        "Rules mapping a client certificate's subject DN to the principal name: DEFAULT (the "
        "whole DN) or Kafka's RULE:pattern/replacement/[LU] list.", group="Security")
    sasl_enabled_mechanisms: str = _str_setting(
        "sasl.enabled.mechanisms", "GSSAPI",
        "SASL mechanisms of SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (Kafka's default "
        "GSSAPI is not implemented: a SASL listener must set this).", group="Security")
    connections_max_reauth_ms: int = _long(
        "connections.max.reauth.ms", 0,
        "Lifetime of a SASL session (KIP-368), told to clients in SaslAuthenticate v1+; a client "
        "must re-authenticate before it ends or is disconnected. 0: unlimited.",
        validator=at_least(0), group="Security")
    sasl_server_max_receive_size: int = setting(
        "sasl.server.max.receive.size", 524288,
        "Largest frame a SASL connection may send before it has authenticated (and while it "
        "re-authenticates); a larger one fails the authentication and closes the connection.",
        validator=at_least(1), group="Security")
    connection_failed_authentication_delay_ms: int = setting(
        "connection.failed.authentication.delay.ms", 100,
        "Delay before the failure response and close of a failed authentication.",
        validator=at_least(0), group="Security")
    # -- transaction coordinator
    transaction_max_timeout_ms: int = setting(
        "transaction.max.timeout.ms", 900000,
        "Largest transaction.timeout.ms a transactional producer may ask for.",
        validator=at_least(1), group="Transactions")
    transaction_state_log_num_partitions: int = setting(
        "transaction.state.log.num.partitions", 50,
        "Partitions of the internal __transaction_state log.", validator=at_least(1),
        group="Transactions")
    transaction_state_log_segment_bytes: int = setting(
        "transaction.state.log.segment.bytes", 104857600,
        "Segment size of the __transaction_state log.", validator=at_least(1),
        group="Transactions")
    transaction_state_log_load_buffer_size: int = setting(
        "transaction.state.log.load.buffer.size", 5242880,
        "Bytes read at a time when loading __transaction_state at start-up.",
        validator=at_least(1), group="Transactions")
    transaction_two_phase_commit_enable: bool = _bool_setting(
        "transaction.two.phase.commit.enable", False,
        "Whether transactional producers may take part in two-phase commit (KIP-939); "
        "InitProducerId v6 asking for it is answered TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as "
        "by Kafka with this key false (its default).",
        validator=_two_phase_commit_off, group="Transactions")
    transactional_id_expiration_ms: int = setting(
        "transactional.id.expiration.ms", 604800000,
        "Forget a transactional id with no transaction in progress after this long idle.",
        validator=at_least(1), group="Transactions")
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = setting(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms", 10000,
        "How often transactions open past their timeout are looked for and aborted.",
        validator=at_least(1), group="Transactions")
    transaction_remove_expired_transaction_cleanup_interval_ms: int = setting(
        "transaction.remove.expired.transaction.cleanup.interval.ms", 3600000,
        "How often expired transactional ids are removed.", validator=at_least(1),
        group="Transactions")
    # -- observability
    metrics_prometheus_listener: str | None = _str_setting(
        "metrics.prometheus.listener", None,
        "host:port on which Prometheus text-format metrics are served over HTTP at /metrics; "
        "unset: not served.", group="Observability")
    logging_file: str | None = _str_setting(
        "logging.file", None, "File for the structured log; unset: standard output.",
        group="Observability")
    logging_format: str | None = _str_setting(
        "logging.format", None,
        "json or console; unset: console on a terminal, json otherwise.",
        validator=one_of("json", "console"), group="Observability")
    logging_level: str = _str_setting(
        "logging.level", "INFO", "Lowest level written.",
        validator=one_of("DEBUG", "INFO", "WARNING", "ERROR"), group="Observability")
    logging_traffic: str = _str_setting(
        "logging.traffic", "auto",
        "The per-request and per-connection lines (request, connection_accepted, "
        "connection_closed, client_registered, authentication_succeeded, throttle_started, "
        "throttle_ended): auto writes them in json output and leaves them out of console "
        "output (Kafka's request logger is off by default); true: always; false: never (the "
        "analyze jobs then have no requests to read).",
        validator=one_of("auto", "true", "false"), group="Observability")
    logging_file_max_bytes: int = _long(
        "logging.file.max.bytes", 104857600, "Rotate logging.file at this size; 0: never.",
        validator=at_least(0), group="Observability")
    logging_file_backup_count: int = setting(
        "logging.file.backup.count", 5, "Rotated files kept.", validator=at_least(0),
        group="Observability")
    logging_metrics_snapshot_interval_ms: int = _long(
        "logging.metrics.snapshot.interval.ms", 10000,
        "Interval of the metrics_snapshot log event; 0 disables it.", validator=at_least(0),
        group="Observability")
    event_loop_blocked_threshold_ms: int = _long(
        "event.loop.blocked.threshold.ms", 100,
        "A run of the event loop longer than this (every connection waited) is logged as "
        "event_loop_blocked, naming the request being handled; 0 disables it.",
        validator=at_least(0), group="Observability")

    #: ``listener.name.<listener>.<key>`` settings, by lower-case listener name then key.
    listener_overrides: Mapping[str, Mapping[str, int]] = attrs.field(factory=dict)
    #: ``listener.name.<listener>.<key>`` security settings (ssl.*, sasl.*, JAAS), as given.
    listener_security: Mapping[str, Mapping[str, str]] = attrs.field(factory=dict)
    #: Keys that were given but have no effect here (unknown, or Kafka-only), for the start-up log.
    ignored_keys: tuple[str, ...] = attrs.field(default=())

    # ---------------------------------------------------------------- derived views
    @property
    def data_dir(self) -> Path:
        """The directory holding partitions and broker metadata."""
        if self.log_dirs:
            return Path(self.log_dirs.split(",")[0].strip()).expanduser()
        return Path(self.log_dir).expanduser()

    @property
    def endpoints(self) -> tuple[Endpoint, ...]:
        return parse_endpoints("listeners", self.listeners)

    @property
    def advertised_endpoints(self) -> tuple[Endpoint, ...]:
        return parse_endpoints("advertised.listeners", self.advertised_listeners)

    @property
    def security_protocols(self) -> dict[str, str]:
        return parse_protocol_map(self.listener_security_protocol_map)

    @property
    def ip_overrides(self) -> dict[str, int]:
        return parse_ip_overrides(self.max_connections_per_ip_overrides)

    @property
    def log_retention_effective_ms(self) -> int:
        """Retention from the finest key given, as Kafka resolves it."""
        if self.log_retention_ms is not None:
            return self.log_retention_ms
        if self.log_retention_minutes is not None:
            return self.log_retention_minutes * 60_000
        return self.log_retention_hours * 3_600_000

    @property
    def log_roll_effective_ms(self) -> int:
        return self.log_roll_ms if self.log_roll_ms is not None else self.log_roll_hours * 3_600_000

    def listener_setting(self, listener: str, key: str) -> int:
        """A listener-prefixable setting, with the broker-wide value as fallback."""
        override = self.listener_overrides.get(listener.lower(), {}).get(key)
        if override is not None:
            return override
        return int(getattr(self, _ATTR_BY_KEY[key]))

    def security_setting(self, listener: str, key: str) -> Any:
        """A security setting of one listener: ``listener.name.<l>.<key>`` or the broker-wide
        value; ``<mechanism>.sasl.jaas.config`` exists per listener only (None when unset)."""
        text = self.listener_security.get(listener.lower(), {}).get(key)
        field = _FIELDS.get(key)
        if field is None:
            return text
        if text is not None:
            return _convert(f"listener.name.{listener.lower()}.{key}", field, text)
        return getattr(self, field.name)


_FIELDS = {f.metadata["key"]: f for f in attrs.fields(BrokerConfig) if "key" in f.metadata}
_ATTR_BY_KEY = {key: f.name for key, f in _FIELDS.items()}


def known_keys() -> tuple[str, ...]:
    return tuple(_FIELDS)
