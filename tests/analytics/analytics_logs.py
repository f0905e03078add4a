"""Log files for the analytics tests, written through the broker's real logging path.

Every line is produced by :func:`trio_broker.observability.log.emit` under
:func:`configure_logging` in strict mode (an undeclared event or field fails the test), written by
the real ``LineWriter`` with its size-based rotation. Only the timestamps are rewritten afterwards,
to spread a scenario over several minutes without the test waiting for them.
"""

from __future__ import annotations

import contextlib
import json
import random
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import structlog

from trio_broker.observability import log
from trio_broker.observability.events import EVENTS

BASE_TIME = datetime(2026, 3, 14, 9, 0, 0, tzinfo=UTC)


@attrs.frozen
class Emission:
    """One event to emit ``offset`` seconds after :data:`BASE_TIME`."""

    offset: float
    event: str
    fields: dict[str, Any]


@contextlib.contextmanager
def logging_to(path: Path, *, max_bytes: int = 0, backup_count: int = 0,
               broker_id: int = 1) -> Iterator[log.LineWriter]:
    """Point the broker's logging at ``path`` for the block, then restore the test's set-up."""
    saved_config = structlog.get_config()
    saved_state = {k: v for k, v in log._state.items() if k != "violations"}
    log._state["writer"] = None  # so configure_logging does not close the test's writer
    writer = log.configure_logging(broker_id=broker_id, file=str(path), fmt="json",
                                   level="DEBUG", max_bytes=max_bytes,
                                   backup_count=backup_count, strict=True)
    try:
        yield writer
    finally:
        writer.flush()
        writer.close()
        structlog.configure(**saved_config)
        log._state.update(saved_state)


def rotation_order(path: Path) -> list[Path]:
    """``path`` and its rotated files, oldest first (``x.log.3``, ``x.log.2``, ... ``x.log``)."""
    rotated = sorted((p for p in path.parent.glob(path.name + ".*") if p.suffix[1:].isdigit()),
                     key=lambda p: -int(p.suffix[1:]))
    return [*rotated, path] if path.exists() else rotated


def write_scenario(path: Path, emissions: Sequence[Emission], *, max_bytes: int = 0,
                   backup_count: int = 0) -> list[Path]:
    """Emit every event, then give line i the timestamp of emission i. Returns the files."""
    with logging_to(path, max_bytes=max_bytes, backup_count=backup_count):
        for emission in emissions:
            log.emit(emission.event, **emission.fields)
    files = rotation_order(path)
    index = 0
    for file in files:
        lines = file.read_text(encoding="utf-8").splitlines()
        rewritten = []
        for line in lines:
            record = json.loads(line)
            assert record["event"] == emissions[index].event
            moment = BASE_TIME + timedelta(seconds=emissions[index].offset)
            record["timestamp"] = moment.isoformat().replace("+00:00", "Z")
            rewritten.append(json.dumps(record))
            index += 1
        file.write_text("".join(line + "\n" for line in rewritten), encoding="utf-8")
    assert index == len(emissions), "every emitted line must be in the files"
    return files


def _connection(index: int, ip: str, listener: str = "PLAINTEXT") -> dict[str, Any]:
    return {"connection_id": f"127.0.0.1:9092-{ip}:{40000 + index}-{index % 2}-{index}",
            "listener": listener, "processor": index % 2, "peer": f"{ip}:{40000 + index}",
            "security_protocol": "PLAINTEXT"}


CLIENTS = {
    "producer-a": ("10.0.0.1", ["Produce", "Produce", "Produce", "Metadata"]),
    "consumer-b": ("10.0.0.2", ["Fetch", "Fetch", "OffsetCommit", "Heartbeat"]),
    "admin-c": ("10.0.0.3", ["Metadata", "CreateTopics", "ApiVersions"]),
}
REJECTIONS = [("10.0.0.9", "PLAINTEXT", "per_ip_limit", 3),
              ("10.0.0.9", "PLAINTEXT", "per_ip_limit", 3),
              ("10.0.0.9", "PLAINTEXT", "per_ip_limit", 3),
              ("10.0.0.8", "PLAINTEXT", "max_connections", 10),
              ("10.0.0.8", "CONTROLLER", "connection_rate", 5)]


#: authentication_failed events of every minute: (principal, ip, mechanism).
AUTH_FAILURES = [("User:mallory", "10.0.0.66", "SCRAM-SHA-512"),
                 ("User:mallory", "10.0.0.66", "PLAIN"),
                 ("User:alice", "10.0.0.1", "SCRAM-SHA-512"),
                 ("", "10.0.0.7", "SSL")]


def scenario(minutes: int = 3, seed: int = 5) -> list[Emission]:
    """A few minutes of a busy broker: requests, snapshots, refusals, mutes, throttles, groups."""
    rng = random.Random(seed)
    out: list[Emission] = [
        Emission(0, "broker_starting", {"version": "0.1.0", "data_dir": "/tmp/d",
                                        "ignored_config_keys": ""}),
        Emission(0.1, "listener_bound", {"listener": "PLAINTEXT", "host": "127.0.0.1",
                                         "port": 9092, "security_protocol": "PLAINTEXT",
                                         "control_plane": False}),
        Emission(0.2, "broker_ready", {"listeners": "PLAINTEXT://127.0.0.1:9092",
                                       "advertised": "127.0.0.1:9092", "startup_ms": 80.5}),
    ]
    conn_index = 0
    for minute in range(minutes):
        base = 60.0 * minute + 1
        for snap in range(4):
            out.append(Emission(base + 15 * snap, "metrics_snapshot", {
                "request_queue_size": rng.randint(0, 40),
                "response_queue_size": rng.randint(0, 5),
                "network_processor_avg_idle_percent": round(rng.uniform(0.2, 0.99), 4),
                "request_handler_avg_idle_percent": round(rng.uniform(0.1, 0.99), 4),
                "memory_pool_available": rng.randint(1 << 20, 100 << 20),
                "memory_pool_used": rng.randint(0, 1 << 20),
                "connection_count": rng.randint(3, 9)}))
        for client_id, (ip, apis) in CLIENTS.items():
            conn_index += 1
            conn = _connection(conn_index, ip)
            out.append(Emission(base + 0.5, "connection_accepted", {**conn, "ip": ip}))
            for i in range(rng.randint(4, 9)):
                api = apis[i % len(apis)]
                stages = {"request_queue_ms": round(rng.uniform(0, 5), 3),
                          "local_ms": round(rng.uniform(0, 20), 3),
                          "remote_ms": round(rng.choice([0.0, 0.0, rng.uniform(0, 500)]), 3),
                          "throttle_ms": 0.0,
                          "response_queue_ms": round(rng.uniform(0, 2), 3),
                          "send_ms": round(rng.uniform(0, 3), 3)}
                if client_id == "consumer-b" and i == 1:
                    stages["throttle_ms"] = 250.0
                total = round(sum(stages.values()) + 0.25, 3)
                error = "NONE"
                if api == "CreateTopics" and i % 2 == 0:
                    error = "TOPIC_ALREADY_EXISTS"
                out.append(Emission(base + 1 + i * 0.7, "request", {
                    **conn, "api": api, "api_key": 0, "api_version": 9,
                    "correlation_id": i, "client_id": client_id,
                    "client_software_name": "librdkafka", "client_software_version": "2.3.0",
                    "principal": "User:ANONYMOUS", "request_bytes": rng.randint(50, 5000),
                    "response_bytes": rng.randint(20, 20000), "error": error,
                    "response_action": "send", **stages, "total_ms": total}))
                if stages["throttle_ms"]:
                    out.append(Emission(base + 1 + i * 0.7 + 0.01, "throttle_started", {
                        **conn, "client_id": client_id, "user": "ANONYMOUS",
                        "quota_type": "consumer_byte_rate", "throttle_ms": 250.0}))
                    out.append(Emission(base + 1 + i * 0.7 + 0.3, "throttle_ended", {
                        **conn, "client_id": client_id, "user": "ANONYMOUS"}))
            if client_id == "producer-a":
                out.append(Emission(base + 2, "connection_muted",
                                    {**conn, "reason": "memory", "inflight": 1}))
                out.append(Emission(base + 2.1, "connection_unmuted",
                                    {**conn, "reason": "memory", "muted_ms": 100.0}))
            out.append(Emission(base + 20, "connection_muted",
                                {**conn, "reason": "inflight", "inflight": 1}))
            out.append(Emission(base + 20.01, "connection_unmuted",
                                {**conn, "reason": "inflight", "muted_ms": 10.0}))
            if client_id == "admin-c":
                out.append(Emission(base + 39, "invalid_request", {
                    **conn, "reason": "invalid_size" if minute % 2 else "unknown_api_key",
                    "api_key": 999, "api_version": 0, "size": 12, "detail": "refused"}))
            if client_id == "consumer-b" and minute == 1:
                out.append(Emission(base + 39.5, "connection_expired",
                                    {**conn, "idle_ms": 600000.0}))
            out.append(Emission(base + 40, "connection_closed", {
                **conn, "reason": "client" if client_id != "admin-c" else "idle",
                "detail": "", "requests": 5, "duration_ms": 39500.0}))
        for ip, listener, reason, limit in REJECTIONS[minute % 2::2]:
            out.append(Emission(base + 30, "connection_rejected", {
                "listener": listener, "ip": ip, "peer": f"{ip}:5555", "reason": reason,
                "limit": limit}))
        if "rebalance_started" in EVENTS and minute < 2:
            group = {"group_id": "orders", **_connection(conn_index, "10.0.0.2")}
            out.append(Emission(base + 5, "rebalance_started", {
                **group, "reason": "member joined", "generation": minute, "members": 1,
                "previous_state": "Stable"}))
            out.append(Emission(base + 5.5, "group_join", {
                **group, "member_id": f"m-{minute}", "client_id": "consumer-b",
                "generation": minute, "state": "PreparingRebalance"}))
            out.append(Emission(base + 8, "rebalance_completed", {
                **group, "generation": minute + 1, "protocol": "range", "members": 1,
                "state": "Stable", "duration_ms": 3000.0 + minute}))
        if "authentication_failed" in EVENTS:
            for index, (principal, ip, mechanism) in enumerate(AUTH_FAILURES):
                conn = {**_connection(900 + index, ip, "SASL_SSL"),
                        "security_protocol": "SASL_SSL"}
                out.append(Emission(base + 45 + index, "authentication_failed", {
                    **conn, "mechanism": mechanism, "principal": principal,
                    "error": "SASL_AUTHENTICATION_FAILED", "detail": f"minute {minute}"}))
        if "transaction_committed" in EVENTS:
            txn = {"transactional_id": f"etl-{minute % 2}", "producer_id": 7 + minute % 2,
                   "producer_epoch": 0, **_connection(conn_index, "10.0.0.3")}
            ended = "transaction_committed" if minute != 1 else "transaction_aborted"
            out.append(Emission(base + 12, ended, {
                **txn, "partitions": 2 + minute, "topic_names": "out,__consumer_offsets",
                "duration_ms": 100.0 * (minute + 1)}))
            if minute == 1:
                out.append(Emission(base + 11, "transaction_timed_out", {
                    **txn, "partitions": 3, "timeout_ms": 60000, "duration_ms": 60001.0}))
        if "consumer_group_epoch_bumped" in EVENTS and minute < 2:
            # A KIP-848 group: its rebalances are group epoch bumps.
            group = {"group_id": "payments", **_connection(conn_index, "10.0.0.3")}
            out.append(Emission(base + 6, "group_member_joined", {
                **group, "member_id": f"p-{minute}", "group_instance_id": "",
                "member_epoch": 0, "rejoined": False}))
            out.append(Emission(base + 6, "consumer_group_epoch_bumped", {
                **group, "group_epoch": minute + 1, "reason": f"member p-{minute} joined"}))
            out.append(Emission(base + 6.5, "assignment_changed", {
                **group, "member_id": f"p-{minute}", "member_epoch": minute + 1,
                "state": "stable", "added": "pay-0", "removed": ""}))
    out.append(Emission(60.0 * minutes + 5, "broker_stopped", {"uptime_s": 60.0 * minutes}))
    out.sort(key=lambda e: e.offset)
    return out


#: Lines appended to a log to check they are counted, not fatal: two unparseable (a line cut
#: in the middle, as a crash leaves it, and text that is not JSON), one with a wrongly typed field.
MALFORMED_LINES = [
    '{"timestamp": "2026-03-14T09:01:00Z", "level": "info", "event": "request", "api": "Pro',
    "Traceback (most recent call last): this is not JSON",
    json.dumps({"timestamp": "2026-03-14T09:01:00Z", "level": "info", "event": "request",
                "broker": "one", "api": "Produce"}),
]


#: A line from a newer broker: an event (and a field) this declaration does not know. It is
#: well-formed, so it is counted under ``unknown_events``, not as malformed.
FUTURE_LINE = json.dumps({"timestamp": "2026-03-14T09:02:30Z", "level": "info",
                          "event": "quorum_elected", "broker": 1, "schema_version": 2,
                          "term": 5})


def read_raw(files: Sequence[Path]) -> tuple[list[dict[str, Any]], int]:
    """The JSON objects in ``files`` (the reference the job's numbers are checked against),
    and how many non-blank lines were not parseable JSON objects."""
    records: list[dict[str, Any]] = []
    bad = 0
    for file in files:
        for line in file.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                bad += 1
                continue
            if isinstance(record, dict):
                records.append(record)
            else:
                bad += 1
    return records, bad


def count_by(records: Sequence[dict[str, Any]], event: str, key: str) -> dict[str, int]:
    """How many ``event`` lines have each value of ``key``."""
    return dict(Counter(str(r.get(key)) for r in records if r.get("event") == event))
