"""Dynamic broker configs (docs/dynamic-configs.md) driven by real admin clients: confluent-kafka's
``incremental_alter_configs`` / ``describe_configs`` (IncrementalAlterConfigs, DescribeConfigs)
and kafka-python's legacy ``alter_configs`` (AlterConfigs), against the in-process broker.

Each client call runs in a worker thread; the broker's state is checked directly as well (the
topics' LogConfigs), so a change that is answered but not applied fails.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

from tests.test_tools_cli import tool

pytestmark = pytest.mark.interop

TIMEOUT = 15.0
NODE = "1"


def _failure(future: Any) -> tuple[int, str]:
    """The KafkaError code and message a confluent-kafka future ended with."""
    try:
        future.result(timeout=TIMEOUT)
    except KafkaException as exc:
        return int(exc.args[0].code()), exc.args[0].str()
    return int(KafkaError.NO_ERROR), ""


def _alter(admin: AdminClient, name: str, *ops: tuple[str, str | None, AlterConfigOpType]
           ) -> tuple[int, str]:
    resource = ConfigResource(ResourceType.BROKER, name, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=op) for key, value, op in ops])
    (future,) = admin.incremental_alter_configs([resource], request_timeout=TIMEOUT).values()
    return _failure(future)


def _describe(admin: AdminClient, kind: ResourceType, name: str) -> dict[str, Any]:
    resource = ConfigResource(kind, name)
    (future,) = admin.describe_configs([resource], request_timeout=TIMEOUT).values()
    return dict(future.result(timeout=TIMEOUT))


SET, DELETE, APPEND = (AlterConfigOpType.SET, AlterConfigOpType.DELETE,
                       AlterConfigOpType.APPEND)


def confluent_session(bootstrap: str) -> dict[str, Any]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic("plain", 1, 1), NewTopic(
        "pinned", 1, 1, config={"retention.ms": "123456"})], request_timeout=TIMEOUT)
    for future in futures.values():
        future.result(timeout=TIMEOUT)
    seen: dict[str, Any] = {}

    # per broker (the cluster default was set by the caller: confluent-kafka cannot name "")
    assert _alter(admin, NODE, ("log.retention.ms", "3600000", SET),
                  ("log.cleanup.policy", "compact", APPEND)) == (0, "")
    broker = _describe(admin, ResourceType.BROKER, NODE)
    seen["broker"] = {k: (e.value, e.source, e.is_read_only,
                          [(s.name, s.value, s.source) for s in e.synonyms.values()])
                      for k, e in broker.items()
                      if k in ("log.retention.ms", "log.segment.bytes", "log.cleanup.policy",
                               "log.retention.bytes", "num.io.threads")}
    topic = _describe(admin, ResourceType.TOPIC, "plain")
    seen["plain"] = {k: (topic[k].value, topic[k].source) for k in (
        "retention.ms", "segment.bytes", "cleanup.policy", "retention.bytes")}
    pinned = _describe(admin, ResourceType.TOPIC, "pinned")
    seen["pinned"] = (pinned["retention.ms"].value, pinned["retention.ms"].source)

    # per-broker wins over the default; deleting it brings the default back
    assert _alter(admin, NODE, ("log.retention.bytes", "2000", SET)) == (0, "")
    seen["bytes_per_broker"] = _describe(admin, ResourceType.TOPIC, "plain")[
        "retention.bytes"].value
    assert _alter(admin, NODE, ("log.retention.bytes", None, DELETE)) == (0, "")
    seen["bytes_after_delete"] = _describe(admin, ResourceType.TOPIC, "plain")[
        "retention.bytes"].value

    # Kafka's refusals
    seen["refusals"] = [
        _alter(admin, NODE, ("num.io.threads", "4", SET)),
        _alter(admin, NODE, ("log.retention.ms", "3600000", SET), ("log.dirs", "/x", SET)),
        _alter(admin, NODE, ("no.such.key", "1", SET)),
        _alter(admin, NODE, ("log.retention.ms", "soon", SET)),
        _alter(admin, NODE, ("log.segment.bytes", "1", SET)),
        _alter(admin, NODE, ("log.retention.ms", "5", APPEND)),
    ]
    return seen


async def test_confluent_alters_broker_configs_live(start_broker: Any, log_events: Any
                                                    ) -> None:
    running = await start_broker()
    assert (await tool(running.bootstrap, "configs", "--alter", "--entity-type", "brokers",
                       "--entity-default", "--add-config",
                       "log.segment.bytes=2097152,log.retention.bytes=1000"))[0] == 0
    with trio.fail_after(120):
        seen = await trio.to_thread.run_sync(confluent_session, running.bootstrap)
    dyn_broker = ConfigSource.DYNAMIC_BROKER_CONFIG.value
    dyn_default = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    default = ConfigSource.DEFAULT_CONFIG.value

    broker = seen["broker"]
    assert broker["log.retention.ms"] == ("3600000", dyn_broker, False, [
        ("log.retention.ms", "3600000", dyn_broker), ("log.retention.hours", "168", default)])
    # (confluent-kafka keeps synonyms in a dict by name: the tool test below sees them all)
    assert broker["log.segment.bytes"][:3] == ("2097152", dyn_default, False)
    # APPEND to the default value of a list key
    assert broker["log.cleanup.policy"][:2] == ("delete,compact", dyn_broker)
    assert broker["num.io.threads"][:3] == ("8", default, True)
    # a topic without overrides inherits the new defaults, with their sources
    assert seen["plain"] == {"retention.ms": ("3600000", dyn_broker),
                             "segment.bytes": ("2097152", dyn_default),
                             "cleanup.policy": ("delete,compact", dyn_broker),
                             "retention.bytes": ("1000", dyn_default)}
    assert seen["pinned"] == ("123456", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert (seen["bytes_per_broker"], seen["bytes_after_delete"]) == ("2000", "1000")

    invalid_request, invalid_config = KafkaError.INVALID_REQUEST, KafkaError.INVALID_CONFIG
    codes = [code for code, _ in seen["refusals"]]
    assert codes == [invalid_request, invalid_request, invalid_config, invalid_request,
                     invalid_request, invalid_config]
    messages = [message for _, message in seen["refusals"]]
    assert "Cannot update these configs dynamically: Set(num.io.threads)" in messages[0]
    assert "Cannot update these configs dynamically: Set(log.dirs)" in messages[1]
    assert "no.such.key" in messages[2]
    assert "log.retention.ms" in messages[3] and "log.segment.bytes" in messages[4]
    assert "Config value append is not allowed for config key: log.retention.ms" in messages[5]

    # applied live: the partitions' own configs changed, and not the overridden one's
    manager = running.broker.log_manager
    plain = manager.get_partition("plain", 0).config
    assert (plain.retention_ms, plain.segment_bytes, plain.retention_bytes, plain.compact) == (
        3600000, 2097152, 1000, True)
    assert manager.get_partition("pinned", 0).config.retention_ms == 123456
    # a refused request changed nothing (log.retention.ms was sent along with log.dirs)
    assert running.broker.dynamic_configs.per_broker == {
        "log.retention.ms": "3600000", "log.cleanup.policy": "delete,compact"}
    events = log_events.events("broker_config_changed")
    assert [e["resource"] for e in events] == ["", NODE, NODE, NODE]
    assert json.loads(events[0]["configs"]) == {"log.segment.bytes": "2097152",
                                                "log.retention.bytes": "1000"}

    # kept across a restart
    data_dir = str(running.data_dir)
    await running.shutdown()
    again = await start_broker({"log.dirs": data_dir})

    def after_restart() -> dict[str, Any]:
        admin = AdminClient({"bootstrap.servers": again.bootstrap})
        topic = _describe(admin, ResourceType.TOPIC, "plain")
        return {k: (topic[k].value, topic[k].source) for k in ("retention.ms", "segment.bytes")}

    with trio.fail_after(60):
        assert await trio.to_thread.run_sync(after_restart) == {
            "retention.ms": ("3600000", dyn_broker), "segment.bytes": ("2097152", dyn_default)}
    assert again.broker.log_manager.get_partition("plain", 0).config.retention_ms == 3600000


def kafka_python_session(bootstrap: str) -> list[Any]:
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    try:
        results = []
        for configs in ({"log.retention.ms": "60000", "message.max.bytes": "5000"},
                        {"log.retention.bytes": "4096"},
                        {"num.io.threads": "2"}):
            results.append(admin.alter_configs(
                [KConfigResource(ConfigResourceType.BROKER, NODE, configs)], incremental=False,
                raise_on_unknown=False))
        return results
    finally:
        admin.close()


async def test_kafka_python_legacy_alter_configs(broker: Any, log_events: Any) -> None:
    """AlterConfigs (API 33) replaces the resource's dynamic configs: kafka-python first
    describes the broker and sends the DYNAMIC_BROKER_CONFIG entries it finds along with the
    new ones, so the earlier keys survive only if DescribeConfigs reports their source."""
    with trio.fail_after(60):
        results = await trio.to_thread.run_sync(kafka_python_session, broker.bootstrap)
    assert "InvalidRequest" in repr(results[2]) and "num.io.threads" in repr(results[2])
    assert broker.broker.dynamic_configs.per_broker == {
        "log.retention.ms": "60000", "message.max.bytes": "5000", "log.retention.bytes": "4096"}
    config = broker.broker.config
    assert (config.log_retention_ms, config.message_max_bytes, config.log_retention_bytes) == (
        60000, 5000, 4096)
    assert len(log_events.events("broker_config_changed")) == 2


async def test_configs_tool_alters_broker_defaults(broker: Any) -> None:
    """``trio_broker configs --entity-type brokers --alter`` as kafka-configs.sh."""
    b = broker.bootstrap
    assert (await tool(b, "topics", "--create", "--topic", "t"))[0] == 0
    assert await tool(b, "configs", "--alter", "--entity-type", "brokers", "--entity-default",
                      "--add-config", "log.retention.ms=1000,log.flush.interval.messages=7") == (
        0, "Completed updating default config for brokers in the cluster.\n", "")
    code, out, _ = await tool(b, "configs", "--describe", "--entity-type", "brokers",
                              "--entity-default")
    assert code == 0 and [line.split(" sensitive=")[0] for line in out.splitlines()] == [
        "Default configs for brokers in the cluster are:",
        "  log.flush.interval.messages=7", "  log.retention.ms=1000"]
    assert await tool(b, "configs", "--alter", "--entity-type", "brokers", "--entity-name", "1",
                      "--add-config", "log.retention.ms=2000") == (
        0, "Completed updating config for broker 1.\n", "")
    code, out, _ = await tool(b, "configs", "--describe", "--entity-type", "brokers",
                              "--entity-name", "1")
    assert code == 0 and "  log.retention.ms=2000 sensitive=false synonyms={" \
        "DYNAMIC_BROKER_CONFIG:log.retention.ms=2000, " \
        "DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=1000, " \
        "DEFAULT_CONFIG:log.retention.hours=168}" in out.splitlines()
    log_config = broker.broker.log_manager.get_partition("t", 0).config
    assert (log_config.retention_ms, log_config.flush_messages) == (2000, 7)
    assert await tool(b, "configs", "--alter", "--entity-type", "brokers", "--entity-name", "1",
                      "--delete-config", "log.retention.ms") == (
        0, "Completed updating config for broker 1.\n", "")
    assert broker.broker.log_manager.get_partition("t", 0).config.retention_ms == 1000
    code, out, err = await tool(b, "configs", "--alter", "--entity-type", "brokers",
                                "--entity-default", "--add-config", "num.network.threads=2")
    assert code == 1 and "Cannot update these configs dynamically" in err
