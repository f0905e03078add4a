"""Real clients meet the front end: ApiVersions and Metadata from librdkafka, kcat,
kafka-python and aiokafka, against ``trio_broker run`` started as a user starts it."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import pytest

pytestmark = pytest.mark.interop


def _no_errors(process: Any) -> None:
    problems = [e for e in process.events() if e["level"] in ("warning", "error")]
    assert problems == []


def test_confluent_admin_list_topics(broker_process: Any) -> None:
    from confluent_kafka.admin import AdminClient

    process = broker_process()
    admin = AdminClient({"bootstrap.servers": process.bootstrap})
    metadata = admin.list_topics(timeout=10)
    assert {b.id: (b.host, b.port) for b in metadata.brokers.values()} == {
        1: ("127.0.0.1", process.port)}
    assert metadata.controller_id == 1
    assert metadata.cluster_id
    process.stop()
    requests = process.events("request")
    assert {"ApiVersions", "Metadata"} <= {e["api"] for e in requests}
    assert all(e["error"] == "NONE" for e in requests)
    assert any(e["client_software_name"] == "confluent-kafka-python" for e in requests)
    _no_errors(process)


def test_kcat_metadata_listing(broker_process: Any) -> None:
    kcat = shutil.which("kcat")
    assert kcat, "kcat is required (.ci/run installs the Debian package)"
    process = broker_process()
    result = subprocess.run([kcat, "-L", "-b", process.bootstrap, "-m", "10"],
                            capture_output=True, text=True, timeout=30, check=True)
    assert f"broker 1 at 127.0.0.1:{process.port} (controller)" in result.stdout
    process.stop()
    _no_errors(process)


def test_kafka_python_bootstrap(broker_process: Any) -> None:
    from kafka import KafkaAdminClient

    process = broker_process()
    admin = KafkaAdminClient(bootstrap_servers=process.bootstrap, request_timeout_ms=10000)
    try:
        cluster = admin.describe_cluster()
        assert cluster["controller_id"] == 1
        assert [(b["host"], b["port"]) for b in cluster["brokers"]] == [
            ("127.0.0.1", process.port)]
    finally:
        admin.close()
    process.stop()
    _no_errors(process)


async def test_aiokafka_bootstrap(broker_process: Any) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    process = broker_process()
    # aiokafka runs on asyncio; drive it from a worker thread so the trio test loop stays free.
    import asyncio

    import trio

    async def describe() -> Any:
        admin = AIOKafkaAdminClient(bootstrap_servers=process.bootstrap)
        await admin.start()
        try:
            return await admin.describe_cluster()
        finally:
            await admin.close()

    cluster = await trio.to_thread.run_sync(asyncio.run, describe())
    assert cluster["controller_id"] == 1
    process.stop()
    _no_errors(process)
