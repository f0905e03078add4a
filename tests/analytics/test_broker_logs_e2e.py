"""End to end: run ``trio_broker run``, drive it with confluent-kafka, provoke refused connections,
stop it, run ``trio_broker analyze`` over its log files, and check the numbers against what the
test did and against counts taken from the raw lines.
"""

from __future__ import annotations

import json
import socket
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.analytics.analytics_logs import read_raw, rotation_order
from trio_broker.analytics.cli import main

pytestmark = pytest.mark.spark

PER_IP_LIMIT = 4
EXTRA_SOCKETS = 3
RECORDS = 30


def _wait_for(predicate: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _count(process: Any, event: str) -> int:
    return sum(1 for e in process.events() if e["event"] == event)


def _drive_with_clients(bootstrap: str) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "e2e-admin"})
    assert admin.list_topics(timeout=15).brokers
    for future in admin.create_topics([NewTopic("analytics-e2e", 2, 1)]).values():
        future.result(15)
    del admin

    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "e2e-producer",
                         "linger.ms": 0, "batch.num.messages": 1})
    delivered: list[Any] = []
    for index in range(RECORDS):
        producer.produce("analytics-e2e", value=b"x" * 200, key=str(index).encode(),
                         on_delivery=lambda err, msg: delivered.append(err))
        producer.poll(0)
    assert producer.flush(20) == 0
    assert delivered == [None] * RECORDS
    del producer

    consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": "e2e-consumer",
                         "group.id": "e2e-group", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe(["analytics-e2e"])
    received = 0
    deadline = time.monotonic() + 30
    while received < RECORDS and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            received += 1
    consumer.close()
    assert received == RECORDS


def _wait_all_closed(process: Any) -> None:
    """Until the broker has closed every connection it accepted (the per-IP count is free)."""
    _wait_for(lambda: _count(process, "connection_closed") >= _count(process,
                                                                     "connection_accepted"),
              "the clients' connections to close")


def _refuse_connections(process: Any, port: int) -> None:
    """Hold PER_IP_LIMIT connections, then open EXTRA_SOCKETS more: each is refused."""
    _wait_all_closed(process)
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(PER_IP_LIMIT)]
    try:
        _wait_for(lambda: _count(process, "connection_accepted")
                  - _count(process, "connection_closed") == PER_IP_LIMIT,
                  "the held connections to be accepted")
        refused = [socket.create_connection(("127.0.0.1", port)) for _ in range(EXTRA_SOCKETS)]
        for sock in refused:
            sock.settimeout(10)
            assert sock.recv(1) == b""  # the broker closed it at once
            sock.close()
        _wait_for(lambda: _count(process, "connection_rejected") == EXTRA_SOCKETS,
                  "the refusals to be logged")
    finally:
        for sock in held:
            sock.close()


def _throttle_the_producer(port: int) -> None:
    """A producer_byte_rate quota the producer's ~9 KB go over (windows of 1 s, 2 of them)."""
    import trio
    from kio.schema.errors import ErrorCode

    from tests.server.test_client_quotas import alter

    result = trio.run(alter, port, {"client-id": "e2e-producer"}, {"producer_byte_rate": 4000})
    assert [code for code, _ in result] == [ErrorCode.none]


def _raw_count(raw: list[dict[str, Any]], event: str) -> int:
    return sum(1 for r in raw if r["event"] == event)


def _send_invalid_frame(process: Any, port: int) -> None:
    """A frame with a negative size: the broker logs invalid_request and closes the socket."""
    # The held connections of _refuse_connections may not be closed on the broker's side yet:
    # this one would then be refused by the per-IP limit (reset, never read).
    _wait_all_closed(process)
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(10)
        sock.sendall(b"\xff\xff\xff\xfe")
        assert sock.recv(1) == b""
    _wait_for(lambda: _count(process, "invalid_request") == 1, "the invalid frame to be logged")


def test_analyze_a_real_broker_run(spark: Any, broker_process: Any, tmp_path: Path) -> None:
    process = broker_process({"max.connections.per.ip": str(PER_IP_LIMIT),
                              "logging.file.max.bytes": "30000",
                              "logging.file.backup.count": "50",
                              "quota.window.num": "2", "quota.window.size.seconds": "1"})
    _throttle_the_producer(process.port)
    _drive_with_clients(process.bootstrap)
    _refuse_connections(process, process.port)
    _send_invalid_frame(process, process.port)
    time.sleep(1.2)  # at least one periodic metrics_snapshot with the broker busy
    assert process.stop() == 0

    files = rotation_order(process.log_path)
    assert len(files) >= 2, "the run should have rotated its log at least once"
    raw, bad = read_raw(files)
    assert bad == 0

    out = tmp_path / "analysis"
    assert main([str(process.log_path) + "*", "--out", str(out), "--quiet"]) == 0
    summary = json.loads((out / "summary.json").read_text())

    requests = Counter(r["api"] for r in raw if r["event"] == "request")
    assert summary["requests_by_api"] == dict(requests)
    assert requests["Produce"] >= 1 and requests["Fetch"] >= 1
    assert summary["rejected_connections"] == {"per_ip_limit": EXTRA_SOCKETS}
    assert summary["rejected_connections_by_ip"] == {"127.0.0.1": EXTRA_SOCKETS}
    assert summary["unusable_lines"] == 0 and summary["warnings"] == []
    assert summary["lines"] == len(raw)
    assert summary["events_by_name"] == dict(sorted(Counter(r["event"] for r in raw).items()))
    assert summary["closed_connections"] == dict(
        Counter(r["reason"] for r in raw if r["event"] == "connection_closed"))
    assert summary["metrics_snapshots"] == sum(r["event"] == "metrics_snapshot" for r in raw) > 0

    rebalances = Counter(r["group_id"] for r in raw if r["event"] == "rebalance_started")
    assert summary["group_rebalances"] == dict(rebalances)
    assert rebalances["e2e-group"] >= 1  # the consumer joined its group
    idle = [r["network_processor_avg_idle_percent"] for r in raw
            if r["event"] == "metrics_snapshot"]
    assert summary["network_processor_idle_percent"]["min"] == min(idle)

    clients = {c["client_id"]: c for c in summary["top_clients"]}
    assert {"e2e-admin", "e2e-producer", "e2e-consumer"} <= set(clients)
    produced = [r for r in raw if r["event"] == "request" and r["client_id"] == "e2e-producer"]
    assert clients["e2e-producer"]["requests"] == len(produced)
    assert clients["e2e-producer"]["total_bytes"] == sum(
        r["request_bytes"] + r["response_bytes"] for r in produced)
    assert sum(r["request_bytes"] for r in produced if r["api"] == "Produce") \
        >= RECORDS * 200  # every record's value went through Produce requests

    throttles = [r for r in raw if r["event"] == "throttle_started"]
    assert throttles, "the producer should have been throttled"
    assert {(r["client_id"], r["user"], r["quota_type"]) for r in throttles} == {
        ("e2e-producer", "ANONYMOUS", "producer_byte_rate")}
    assert summary["throttled_clients"] == {
        "e2e-producer": max(sum(r["throttle_ms"] for r in throttles),
                            sum(r["throttle_ms"] for r in raw if r["event"] == "request"
                                and r["client_id"] == "e2e-producer"))}

    invalid = [r for r in raw if r["event"] == "invalid_request"]
    assert summary["invalid_frames_by_reason"] == dict(Counter(r["reason"] for r in invalid))
    assert summary["invalid_frames_by_peer"] == {invalid[0]["peer"]: 1}
    failed: dict[str, dict[str, int]] = {}
    for r in raw:
        if r["event"] == "request" and r["error"] not in ("NONE", ""):
            failed.setdefault(r["api"], {}).setdefault(r["error"], 0)
            failed[r["api"]][r["error"]] += 1
    assert summary["errors_by_api_code"] == failed
    assert {"e2e-admin", "e2e-producer", "e2e-consumer"} <= set(summary["latency_ms_by_client"])
    assert summary["connection_churn"] == {
        "accepted": _raw_count(raw, "connection_accepted"),
        "closed": _raw_count(raw, "connection_closed"),
        "expired": _raw_count(raw, "connection_expired"),
        "refused": EXTRA_SOCKETS}
    # The consumer's long polls and its JoinGroup wait are not "slow requests": the slowest are
    # ranked by total time less those waits.
    def service(r: dict[str, Any]) -> float:
        remote = r["remote_ms"]
        wait = (min(remote, 500.0) if r["api"] == "Fetch" else
                remote if r["api"] in ("JoinGroup", "SyncGroup") else 0.0)
        return float(max(r["total_ms"] - wait, 0.0))

    ranked = sorted((service(r) for r in raw if r["event"] == "request"), reverse=True)
    assert [r["service_ms"] for r in summary["slowest_requests"]] == pytest.approx(ranked[:10])
    longest = max((r for r in raw if r["event"] == "request"), key=lambda r: r["total_ms"])
    assert longest["api"] in ("Fetch", "JoinGroup", "SyncGroup")  # a wait, set aside
    assert summary["slowest_requests"][0]["total_ms"] <= longest["total_ms"]

    page = (out / "report.html").read_text()
    assert "per_ip_limit" in page and "e2e-producer" in page
