"""The structured-log contract: every event the broker writes, with its fields and their types.

The broker emits events only through :func:`trio_broker.observability.log.emit`, which (in tests)
checks each call against :data:`EVENTS`; the Spark jobs in ``trio_broker.analytics`` build their
explicit schemas from the same declarations. Adding a field means adding it here first.

Types are Spark's simple type names: ``string``, ``long``, ``double``, ``boolean``.
Every line also carries the :data:`COMMON_FIELDS`.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

#: Bumped whenever an event or field is removed or changes type (adding is compatible).
SCHEMA_VERSION = 2

STRING = "string"
LONG = "long"
DOUBLE = "double"
BOOLEAN = "boolean"


@attrs.frozen
class EventSpec:
    """One event: its name, level and the fields it may carry (besides the common ones)."""

    name: str
    description: str
    fields: Mapping[str, str]
    level: str = "info"
    #: Fields every line of the event carries; the others are optional (readers must cope).
    required: tuple[str, ...] = ()


#: Fields on every line. ``timestamp`` is ISO 8601 UTC, ``broker`` the node id.
#: Of these, :data:`REQUIRED_COMMON_FIELDS` are what makes a line a broker event.
COMMON_FIELDS: Mapping[str, str] = {
    "timestamp": STRING,
    "level": STRING,
    "event": STRING,
    "broker": LONG,
    "schema_version": LONG,
}

#: Fields bound to every event emitted inside a connection's task.
CONNECTION_FIELDS: Mapping[str, str] = {
    "connection_id": STRING,
    "listener": STRING,
    "processor": LONG,
    "peer": STRING,
    "security_protocol": STRING,
}

#: The common fields a reader needs on every line (the rest of a line may be missing).
REQUIRED_COMMON_FIELDS = ("timestamp", "event")

_LISTENER = {"listener": STRING}
_GROUP = {**CONNECTION_FIELDS, "group_id": STRING}
_AUTHZ = {**CONNECTION_FIELDS, "principal": STRING, "host": STRING, "operation": STRING,
          "resource_type": STRING, "resource_name": STRING, "reason": STRING, "acl": STRING}
_TXN = {**CONNECTION_FIELDS, "transactional_id": STRING, "producer_id": LONG,
        "producer_epoch": LONG}

#: The canonical per-request line, with Kafka's request-time breakdown in milliseconds.
REQUEST_FIELDS: Mapping[str, str] = {
    **CONNECTION_FIELDS,
    "api": STRING,
    "api_key": LONG,
    "api_version": LONG,
    "correlation_id": LONG,
    "client_id": STRING,
    "client_software_name": STRING,
    "client_software_version": STRING,
    "principal": STRING,
    "request_bytes": LONG,
    "response_bytes": LONG,
    "error": STRING,
    "response_action": STRING,
    "request_queue_ms": DOUBLE,
    "local_ms": DOUBLE,
    "remote_ms": DOUBLE,
    "throttle_ms": DOUBLE,
    "response_queue_ms": DOUBLE,
    "send_ms": DOUBLE,
    "total_ms": DOUBLE,
    # Fetch v7+ only: the incremental fetch session (KIP-227) the request names; 0 and -1
    # (no session, closing) for clients that do not use sessions.
    "fetch_session_id": LONG,
    "fetch_session_epoch": LONG,
    # Produce only, and only when a partition's producer state refused a batch
    # (OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH): per refused partition, what
    # Kafka's broker logs with such a refusal, "; "-separated, at most 10 partitions then
    # "; +N more": "orders-3 OUT_OF_ORDER_SEQUENCE_NUMBER pid=4000 epoch=2 expected_seq=15
    # got_seq=17". current_epoch=E follows epoch= when the partition knows another epoch (a
    # stale one, or a new one not starting at sequence 0); expected_seq is left out when the
    # epoch alone decided. Absent from every other line.
    "sequence_errors": STRING,
}


def _spec(name: str, description: str, fields: Mapping[str, str], level: str = "info",
          required: tuple[str, ...] = ()) -> EventSpec:
    return EventSpec(name, description, dict(fields), level, required)


_EVENT_LIST = [
    # -- life cycle
    _spec("broker_starting", "The broker process is starting.",
          {"version": STRING, "data_dir": STRING, "ignored_config_keys": STRING}),
    _spec("log_lines_dropped",
          "Log lines were lost: the writer fell 100,000 lines behind, or writing failed "
          "(a full disk, a closed pipe); written once lines can be written again. `lines` "
          "counts whole failed writes: an upper bound, as part of a failed write may still "
          "reach the file.",
          {"lines": LONG}, "warning"),
    _spec("open_file_limit_raised",
          "`trio_broker run` raised its soft limit on open files to the hard limit.",
          {"before": LONG, "limit": LONG}),
    _spec("open_file_limit",
          "`trio_broker run`'s limit on open files at start-up, its connection cap "
          "(2147483647: none) and the connections the limit leaves room for.",
          {"limit": LONG, "max_connections": LONG, "connections_possible": LONG}),
    _spec("open_file_limit_short",
          "The limit on open files is lower than `max.connections` needs; the broker starts "
          "anyway (accepts wait while no descriptor is free).",
          {"limit": LONG, "max_connections": LONG, "connections_possible": LONG}, "warning"),
    _spec("config_key_ignored", "A configuration key was given that has no effect here.",
          {"key": STRING, "reason": STRING}, "warning"),
    _spec("listener_bound", "A listener's socket is bound and listening.",
          {**_LISTENER, "host": STRING, "port": LONG, "security_protocol": STRING,
           "control_plane": BOOLEAN}),
    _spec("broker_ready", "Every listener is bound; the broker serves requests.",
          {"listeners": STRING, "advertised": STRING, "startup_ms": DOUBLE}),
    _spec("shutdown_step", "One step of the ordered shutdown.",
          {"step": STRING, "elapsed_ms": DOUBLE, "detail": STRING}),
    _spec("broker_stopped", "The broker finished shutting down.", {"uptime_s": DOUBLE}),
    _spec("background_task_failed", "A periodic background job raised; it runs again later.",
          {"task": STRING, "error": STRING, "detail": STRING}, "error"),
    _spec("metrics_server_started", "Prometheus metrics are served over HTTP.",
          {"host": STRING, "port": LONG}),
    _spec("metrics_snapshot", "Periodic snapshot of the front end's gauges. The two "
          "*_idle_percent values are ratios from 0 to 1, as Kafka's gauges of those names are; "
          "memory_pool_available is -1 when the pool is unbounded.",
          {"request_queue_size": LONG, "response_queue_size": LONG,
           "network_processor_avg_idle_percent": DOUBLE, "memory_pool_available": LONG,
           "memory_pool_used": LONG, "connection_count": LONG, "request_handler_avg_idle_percent": DOUBLE,
           "event_loop_lag_ms": DOUBLE}),
    _spec("event_loop_blocked", "The event loop ran longer than event.loop.blocked.threshold.ms "
          "without polling for I/O: every connection waited that long. api, client_id and "
          "blocked_connection_id name the request being handled then (empty when none was), "
          "where the broker function it was in; gc_ms the part of the run spent in Python's "
          "cyclic garbage collector (the watchdog cannot look during a collection).",
          {"duration_ms": DOUBLE, "api": STRING, "client_id": STRING,
           "blocked_connection_id": STRING, "where": STRING, "gc_ms": DOUBLE}, "warning"),
    # -- connections
    _spec("connection_accepted", "A connection was accepted and handed to a processor.",
          {**CONNECTION_FIELDS, "ip": STRING}),
    _spec("connection_rejected", "A connection was refused at accept time.",
          {**_LISTENER, "ip": STRING, "peer": STRING, "reason": STRING, "limit": LONG,
           "detail": STRING},
          "warning"),
    _spec("connection_closed", "A connection ended.",
          {**CONNECTION_FIELDS, "reason": STRING, "detail": STRING, "requests": LONG,
           "duration_ms": DOUBLE}),
    _spec("connection_expired", "A connection was closed after connections.max.idle.ms idle.",
          {**CONNECTION_FIELDS, "idle_ms": DOUBLE}),
    _spec("connection_send_stalled",
          "A response write made no progress for socket.send.stall.timeout.ms; the connection "
          "is closed (reason send_stalled).",
          {**CONNECTION_FIELDS, "stalled_ms": DOUBLE, "unsent_bytes": LONG,
           "buffered_bytes": LONG}, "warning"),
    _spec("acceptor_blocked", "The acceptor waited: all processor queues full, or no free slot.",
          {**_LISTENER, "reason": STRING, "blocked_ms": DOUBLE}),
    _spec("connection_muted", "A connection stopped reading.",
          {**CONNECTION_FIELDS, "reason": STRING, "inflight": LONG}),
    _spec("connection_unmuted", "A connection resumed reading.",
          {**CONNECTION_FIELDS, "reason": STRING, "muted_ms": DOUBLE}),
    _spec("invalid_request", "A frame was refused; the connection is closed as Kafka does. "
          "`reason`: invalid_size, header_too_short, unknown_api_key, unsupported_api (a known "
          "API this broker does not serve), unsupported_version, bad_header, bad_body.",
          {**CONNECTION_FIELDS, "reason": STRING, "api_key": LONG, "api_version": LONG,
           "size": LONG, "detail": STRING}, "warning"),
    _spec("client_registered", "A client identified itself with ApiVersions (KIP-511).",
          {**CONNECTION_FIELDS, "client_software_name": STRING,
           "client_software_version": STRING}),
    _spec("authentication_succeeded", "A client authenticated: mechanism SSL (the TLS handshake "
          "of an SSL listener; the principal from the client certificate, or User:ANONYMOUS), "
          "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512. reauthentication: a KIP-368 renewal.",
          {**CONNECTION_FIELDS, "mechanism": STRING, "principal": STRING,
           "reauthentication": BOOLEAN}),
    _spec("authentication_failed", "A client failed to authenticate (a failed TLS handshake is "
          "mechanism SSL); principal is the one it claimed, if any (cut to 256 characters). The "
          "SASL failure response and the close follow after "
          "connection.failed.authentication.delay.ms.",
          {**CONNECTION_FIELDS, "mechanism": STRING, "principal": STRING, "error": STRING,
           "detail": STRING}, "warning"),
    _spec("request", "One completed request (the canonical line). `sequence_errors` (Produce "
          "only, present only when a partition's producer state refused a batch: "
          "OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH) names each refused partition "
          "with the producer id, the batch's epoch, the partition's epoch when another, the "
          "expected and the received first sequence, \"; \"-separated, at most 10 then "
          "\"; +N more\": `orders-3 OUT_OF_ORDER_SEQUENCE_NUMBER pid=4000 epoch=2 "
          "expected_seq=15 got_seq=17; orders-5 INVALID_PRODUCER_EPOCH pid=4000 epoch=1 "
          "current_epoch=2 got_seq=0`.", REQUEST_FIELDS, required=("api",)),
    _spec("request_failed", "A handler raised; the request is answered with the API's error "
          "response (UNKNOWN_SERVER_ERROR), or the connection closed when there is none.",
          {**CONNECTION_FIELDS, "api": STRING, "correlation_id": LONG, "error": STRING,
           "detail": STRING, "traceback": STRING}, "error"),
    _spec("throttle_started", "A response over a client quota was sent with throttle_time_ms "
          "set; the connection reads nothing more until the throttle time has passed (KIP-219). "
          "quota_type is the quota's key (producer_byte_rate, consumer_byte_rate, "
          "request_percentage, controller_mutation_rate); user is the principal's name.",
          {**CONNECTION_FIELDS, "client_id": STRING, "user": STRING, "quota_type": STRING,
           "throttle_ms": DOUBLE}),
    _spec("throttle_ended", "A throttled connection may read again.",
          {**CONNECTION_FIELDS, "client_id": STRING, "user": STRING}),
    # -- authorization (ACLs)
    _spec("authorization_denied", "The authorizer denied an operation on a resource (Kafka's "
          "authorizer log at INFO). host is the client's IP; reason says why (no matching "
          "ALLOW ACL, or denied by ACL); acl is the ACL that decided, as Kafka's AclBinding "
          "prints it, or empty when none did.", _AUTHZ, required=("principal", "operation")),
    _spec("authorization_allowed", "The authorizer allowed an operation; written only when "
          "logging.level is DEBUG (Kafka logs allowed decisions at DEBUG).", _AUTHZ, "debug"),
    _spec("acl_changed", "CreateAcls or DeleteAcls added or removed an ACL. principal is the "
          "requester, acl_principal the ACL's.",
          {**CONNECTION_FIELDS, "action": STRING, "principal": STRING, "acl_principal": STRING,
           "resource_type": STRING, "resource_name": STRING, "pattern_type": STRING,
           "host": STRING, "operation": STRING, "permission": STRING}),
    _spec("acls_loaded", "The ACLs saved in the data directory were loaded at start-up.",
          {"path": STRING, "count": LONG}),
    # -- storage
    _spec("log_manager_opened", "The storage layer loaded its topics (after any recovery).",
          {"data_dir": STRING, "topics": LONG, "partitions": LONG, "clean_shutdown": BOOLEAN,
           "duration_ms": DOUBLE}),
    _spec("log_tail_truncated", "Recovery cut a torn or corrupt segment tail (after a crash, "
          "or a damaged segment found at start-up).",
          {"topic": STRING, "partition": LONG, "segment": LONG, "bytes": LONG,
           "reason": STRING}, "warning"),
    _spec("log_index_rebuilt", "A missing or broken segment index was rebuilt from the log.",
          {"topic": STRING, "partition": LONG, "segment": LONG}, "warning"),
    _spec("log_segment_rolled", "A partition started a new active segment (with the "
          "connection's fields when a request rolled it).",
          {**CONNECTION_FIELDS, "topic": STRING, "partition": LONG, "segment": LONG, "previous_size": LONG}),
    _spec("log_segment_deleted", "Retention deleted a segment (with the connection's fields "
          "when a request, DeleteRecords, deleted it).",
          {**CONNECTION_FIELDS, "topic": STRING, "partition": LONG, "segment": LONG, "size": LONG,
           "reason": STRING}),
    _spec("log_start_offset_advanced", "DeleteRecords moved a partition's log start offset.",
          {**CONNECTION_FIELDS, "topic": STRING, "partition": LONG, "log_start_offset": LONG,
           "reason": STRING}),
    _spec("log_cleaned", "The log cleaner compacted a partition's closed segments.",
          {"topic": STRING, "partition": LONG, "first_dirty_offset": LONG, "end_offset": LONG,
           "segments_before": LONG, "segments_after": LONG, "bytes_before": LONG,
           "bytes_after": LONG, "records_removed": LONG, "tombstones_retained": LONG,
           "map_entries": LONG, "duration_ms": DOUBLE}),
    _spec("log_cleaning_failed", "A clean of a partition failed; the log is left as it was.",
          {"topic": STRING, "partition": LONG, "error": STRING}, "error"),
    _spec("log_cleaner_swap_recovered",
          "Start-up completed a clean interrupted after its commit point (a .swap file).",
          {"topic": STRING, "partition": LONG, "segment": LONG, "end_offset": LONG}, "warning"),
    _spec("log_roll_failed", "A partition could not start a new segment (no file descriptor "
          "or no space left); the append that needed it failed with KAFKA_STORAGE_ERROR.",
          {**CONNECTION_FIELDS, "topic": STRING, "partition": LONG, "segment": LONG,
           "error": STRING}, "error"),
    _spec("log_flush_failed", "An fsync or snapshot write failed.",
          {"topic": STRING, "partition": LONG, "error": STRING}, "error"),
    _spec("topic_created", "A topic was created.",
          {**CONNECTION_FIELDS, "topic": STRING, "partitions": LONG, "internal": BOOLEAN,
           "configs": STRING}),
    _spec("topic_deleted", "A topic and its partition directories were deleted.",
          {**CONNECTION_FIELDS, "topic": STRING}),
    _spec("topic_config_changed", "A topic's config overrides changed.",
          {**CONNECTION_FIELDS, "topic": STRING, "configs": STRING}),
    _spec("broker_config_changed",
          "Dynamic broker configs changed (IncrementalAlterConfigs / AlterConfigs on a BROKER "
          "resource) and were applied: resource is this node's id, or empty for the "
          "cluster-wide default; configs the resource's dynamic configs now (JSON).",
          {**CONNECTION_FIELDS, "resource": STRING, "configs": STRING}),
    _spec("partitions_created", "A topic got more partitions.",
          {**CONNECTION_FIELDS, "topic": STRING, "partitions": LONG}),
    _spec("partition_create_failed",
          "New partitions could not be created (e.g. no file descriptor left); none were.",
          {**CONNECTION_FIELDS, "topic": STRING, "partitions": LONG, "created": LONG,
           "error": STRING}, "error"),
    _spec("stray_partition_removed", "A partition directory of no known topic was removed.",
          {"directory": STRING}, "warning"),
    # -- consumer groups (connection fields are present when a request caused the event)
    _spec("group_join", "A member's JoinGroup was accepted (it waits for the rebalance).",
          {**_GROUP, "member_id": STRING, "group_instance_id": STRING,
           "client_id": STRING, "client_host": STRING, "protocol_type": STRING,
           "protocols": STRING, "session_timeout_ms": LONG, "rebalance_timeout_ms": LONG,
           "generation": LONG, "state": STRING, "reason": STRING}),
    _spec("group_sync", "A member's SyncGroup was accepted.",
          {**_GROUP, "member_id": STRING, "generation": LONG, "is_leader": BOOLEAN,
           "state": STRING}),
    _spec("rebalance_started", "A group started a rebalance (PreparingRebalance).",
          {**_GROUP, "reason": STRING, "generation": LONG, "members": LONG,
           "previous_state": STRING}),
    _spec("rebalance_completed", "A rebalance ended: the group is Stable (or Empty).",
          {**_GROUP, "generation": LONG, "protocol": STRING, "leader": STRING,
           "members": LONG, "state": STRING, "duration_ms": DOUBLE}),
    _spec("member_expired", "The coordinator removed a member that missed a deadline.",
          {**_GROUP, "member_id": STRING, "group_instance_id": STRING,
           "reason": STRING, "state": STRING}),
    _spec("member_left", "A member left the group (LeaveGroup).",
          {**_GROUP, "member_id": STRING, "group_instance_id": STRING,
           "reason": STRING}),
    _spec("group_member_joined", "A member joined a consumer-protocol group (KIP-848).",
          {**_GROUP, "member_id": STRING, "group_instance_id": STRING, "member_epoch": LONG,
           "rejoined": BOOLEAN}),
    _spec("group_member_left", "A member left a consumer-protocol group (KIP-848).",
          {**_GROUP, "member_id": STRING, "group_instance_id": STRING, "reason": STRING}),
    _spec("group_member_fenced", "A consumer-protocol member was fenced: stale epoch or "
          "session expired (KIP-848).",
          {**_GROUP, "member_id": STRING, "member_epoch": LONG, "request_epoch": LONG,
           "reason": STRING}),
    _spec("assignment_changed", "A consumer-protocol member's assignment changed (KIP-848); "
          "partitions as topic-partition lists.",
          {**_GROUP, "member_id": STRING, "member_epoch": LONG, "state": STRING,
           "added": STRING, "removed": STRING}),
    _spec("consumer_group_epoch_bumped", "A consumer-protocol group's epoch went up.",
          {**_GROUP, "group_epoch": LONG, "reason": STRING}),
    _spec("static_member_replaced", "A static member rejoined and got a new member id.",
          {**_GROUP, "group_instance_id": STRING, "old_member_id": STRING,
           "member_id": STRING, "rebalance": BOOLEAN}),
    _spec("group_state_changed", "A group moved to another state.",
          {**_GROUP, "old_state": STRING, "new_state": STRING, "generation": LONG}),
    _spec("offsets_committed", "Offsets were committed for a group.",
          {**_GROUP, "member_id": STRING, "generation": LONG, "partitions": LONG,
           "errors": LONG}, "debug"),
    _spec("offsets_expired", "offsets.retention.minutes expired offsets of a group.",
          {**_GROUP, "partitions": LONG, "state": STRING}),
    _spec("group_deleted", "A group and its offsets were removed.",
          {**_GROUP, "reason": STRING}),
    _spec("groups_loaded", "The coordinator loaded groups and offsets from __consumer_offsets.",
          {"partitions": LONG, "groups": LONG, "offsets": LONG, "records": LONG,
           "duration_ms": DOUBLE}),
    _spec("group_load_skipped",
          "A consumer-protocol group's snapshot in __consumer_offsets could not be read at "
          "load (damaged): the group starts empty and its members rejoin; its committed "
          "offsets are separate records and are kept.",
          {"group_id": STRING, "error": STRING}, "error"),
    _spec("transactions_loaded",
          "The transaction coordinator loaded __transaction_state (pending: interrupted "
          "PrepareCommit/PrepareAbort it will complete).",
          {"transactions": LONG, "pending": LONG, "duration_ms": DOUBLE}),
    _spec("transaction_started", "A transactional producer added its first partitions.",
          {**_TXN, "partitions": LONG}, "debug"),
    _spec("transaction_committed", "A transaction's COMMIT markers were written.",
          {**_TXN, "partitions": LONG, "topic_names": STRING, "duration_ms": DOUBLE}),
    _spec("transaction_aborted", "A transaction's ABORT markers were written.",
          {**_TXN, "partitions": LONG, "topic_names": STRING, "duration_ms": DOUBLE}),
    _spec("transaction_fenced",
          "A new producer with the same transactional id fenced the current one; its open "
          "transaction is aborted under the new epoch.",
          {**_TXN, "new_epoch": LONG, "partitions": LONG, "reason": STRING}, "warning"),
    _spec("transaction_timed_out",
          "A transaction was open longer than its transaction.timeout.ms: aborted, producer "
          "fenced.",
          {**_TXN, "partitions": LONG, "timeout_ms": LONG, "duration_ms": DOUBLE}, "warning"),
    _spec("transaction_marker_failed", "Writing a transaction marker to a partition failed.",
          {"transactional_id": STRING, "topic": STRING, "partition": LONG, "error": STRING},
          "error"),
    _spec("transactional_id_expired",
          "A transactional id idle past transactional.id.expiration.ms was removed.", _TXN),
    _spec("coordinator_write_failed", "Writing to __consumer_offsets failed.",
          {**CONNECTION_FIELDS, "partition": LONG, "error": STRING}, "error"),
]

#: Every declared event, by name.
EVENTS: Mapping[str, EventSpec] = {spec.name: spec for spec in _EVENT_LIST}

assert len(EVENTS) == len(_EVENT_LIST), "an event name is declared twice"


def all_fields(event: str) -> Mapping[str, str]:
    """The fields an event may carry, including the common ones."""
    return {**COMMON_FIELDS, **EVENTS[event].fields}


#: The Python values a JSON value of each declared type may come from (None is always allowed).
PYTHON_TYPES: Mapping[str, tuple[type, ...]] = {
    STRING: (str,), LONG: (int,), DOUBLE: (float, int), BOOLEAN: (bool,)}


def field_problems(event: str, fields: Mapping[str, object]) -> list[str]:
    """What is wrong with one line's fields: undeclared names, or values of the wrong type.

    A wrongly typed value makes Spark read the whole line as malformed, so strict logging should
    refuse it as it refuses an undeclared field. ``bool`` is not a ``long`` here, although it is
    an ``int`` in Python.
    """
    spec = EVENTS.get(event)
    if spec is None:
        return [f"event {event!r} is not declared in observability/events.py"]
    declared = {**COMMON_FIELDS, **spec.fields}
    problems = []
    for name, value in fields.items():
        type_name = declared.get(name)
        if type_name is None:
            problems.append(f"event {event!r} carries undeclared field {name!r}")
        elif value is not None and (not isinstance(value, PYTHON_TYPES[type_name]) or (
                type_name != BOOLEAN and isinstance(value, bool))):
            problems.append(f"event {event!r} field {name!r} is {type_name}, "
                            f"got {type(value).__name__} {value!r}")
    return problems
