"""Dynamic broker configs at the handler level: AlterConfigs / IncrementalAlterConfigs on BROKER
resources with Kafka's ``ConfigAdminManager`` rules, DescribeConfigs' sources and synonyms, and
the saved file read back at start-up (docs/dynamic-configs.md). Real clients: tests/interop/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
from kio.schema.errors import ErrorCode

from tests.server.test_admin_handlers import (
    ALTER_CONFIGS,
    BROKER,
    DESCRIBE_CONFIGS,
    INCREMENTAL_ALTER_CONFIGS,
    call,
    create,
    describe_request,
    req_module,
    running,
)
from trio_broker.config import load_config
from trio_broker.config.dynamic import DYNAMIC_CONFIGS_FILE, DynamicBrokerConfigs
from trio_broker.server.app import BrokerApp
from trio_broker.server.broker import Broker

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


async def incremental(broker: Broker, name: str, *ops: tuple[str, str | None, int],
                      validate_only: bool = False, kind: int = BROKER) -> Any:
    module = req_module(INCREMENTAL_ALTER_CONFIGS, 1)
    body = module.IncrementalAlterConfigsRequest(resources=(
        module.AlterConfigsResource(resource_type=kind, resource_name=name, configs=tuple(
            module.AlterableConfig(name=k, config_operation=op, value=v) for k, v, op in ops)),
    ), validate_only=validate_only)
    (result,) = (await call(broker, INCREMENTAL_ALTER_CONFIGS, 1, body)).responses
    return result.error_code, result.error_message


async def legacy(broker: Broker, name: str, configs: dict[str, str | None]) -> Any:
    module = req_module(ALTER_CONFIGS, 2)
    body = module.AlterConfigsRequest(resources=(
        module.AlterConfigsResource(resource_type=BROKER, resource_name=name, configs=tuple(
            module.AlterableConfig(name=k, value=v) for k, v in configs.items())),
    ), validate_only=False)
    (result,) = (await call(broker, ALTER_CONFIGS, 2, body)).responses
    return result.error_code, result.error_message


async def describe(broker: Broker, name: str, keys: list[str] | None = None) -> dict[str, Any]:
    answer = await call(broker, DESCRIBE_CONFIGS, 4, describe_request(
        4, [(BROKER, name, keys)], synonyms=True))
    (result,) = answer.results
    assert result.error_code == ErrorCode.none
    return {c.name: c for c in result.configs}


@pytest.fixture
def broker7(tmp_path: Path) -> Any:
    config = load_config({"log.dirs": str(tmp_path), "node.id": "7",
                          "log.retention.hours": "24"})
    with running(config) as broker:
        yield broker


async def test_kafka_refusals(broker7: Broker) -> None:
    b = broker7
    ok = (ErrorCode.none, None)
    assert await incremental(b, "8", ("log.retention.ms", "1", SET)) == (
        ErrorCode.invalid_request, "Unexpected broker id, expected 7, but received 8")
    assert await incremental(b, "x", ("log.retention.ms", "1", SET)) == (
        ErrorCode.invalid_request, "Node id must be an integer, but it is: x")
    assert await incremental(b, "7", ("log.retention.ms", None, SET)) == (
        ErrorCode.invalid_request, "Null value not supported for : log.retention.ms")
    assert await incremental(b, "7", ("log.retention.ms", "1", SET),
                             ("log.retention.ms", "2", SET)) == (
        ErrorCode.invalid_request, "Error due to duplicate config keys")
    assert await incremental(b, "7", ("listeners", "PLAINTEXT://:1", SET),
                             ("num.io.threads", "1", SET)) == (
        ErrorCode.invalid_request,
        "Cannot update these configs dynamically: Set(listeners, num.io.threads)")
    # a Kafka key without effect here cannot change either; a key Kafka does not know at all
    # is reported (Kafka would keep it as a custom config)
    assert (await incremental(b, "7", ("controller.listener.names", "C", SET)))[0] == \
        ErrorCode.invalid_request
    assert await incremental(b, "", ("log.retension.ms", "1", SET)) == (
        ErrorCode.invalid_config, "Unknown broker configs: Set(log.retension.ms)")
    code, message = await incremental(b, "7", ("log.segment.bytes", "10", SET))
    assert code == ErrorCode.invalid_request and "log.segment.bytes" in message
    assert await incremental(b, "7", ("message.max.bytes", "2", SUBTRACT)) == (
        ErrorCode.invalid_config, "Config value subtract is not allowed for config key: "
        "message.max.bytes")
    assert (await incremental(b, "7", ("logger.x", "DEBUG", SET), kind=8))[0] == \
        ErrorCode.invalid_request
    # validate_only: checked, nothing changed
    assert await incremental(b, "7", ("log.retention.ms", "5000", SET),
                             validate_only=True) == ok
    assert b.dynamic_configs.per_broker == {}
    assert b.config.log_retention_effective_ms == 24 * 3_600_000


async def test_incremental_then_legacy_replace(broker7: Broker, log_events: Any) -> None:
    b = broker7
    await create(b, "t")
    ok = (ErrorCode.none, None)
    assert await incremental(b, "7", ("log.retention.minutes", "30", SET),
                             ("log.cleanup.policy", "compact", APPEND)) == ok
    log = b.log_manager.get_partition("t", 0)
    assert log is not None
    assert (log.config.retention_ms, log.config.compact, log.config.delete_enabled) == (
        30 * 60_000, True, True)
    assert await incremental(b, "7", ("log.cleanup.policy", "delete", SUBTRACT)) == ok
    assert not log.config.delete_enabled and log.config.compact
    # AlterConfigs replaces the resource's set: retention and cleanup policy go back
    assert await legacy(b, "7", {"log.flush.interval.messages": "10"}) == ok
    assert b.dynamic_configs.per_broker == {"log.flush.interval.messages": "10"}
    assert (log.config.retention_ms, log.config.compact, log.config.flush_messages) == (
        24 * 3_600_000, False, 10)
    assert await legacy(b, "7", {"log.flush.interval.messages": None}) == (
        ErrorCode.invalid_request, "Null value not supported for : log.flush.interval.messages")
    assert await legacy(b, "7", {"log.dirs": "/elsewhere"}) == (
        ErrorCode.invalid_request, "Cannot update these configs dynamically: Set(log.dirs)")
    assert [e["resource"] for e in log_events.events("broker_config_changed")] == ["7"] * 3


async def test_describe_sources_and_synonyms(broker7: Broker) -> None:
    b = broker7
    assert (await incremental(b, "", ("log.retention.ms", "7000", SET),
                              ("message.max.bytes", "9000", SET)))[0] == ErrorCode.none
    assert (await incremental(b, "7", ("log.retention.minutes", "3", SET)))[0] == ErrorCode.none
    entries = await describe(b, "7")
    synonyms = [(s.name, s.value, s.source) for s in entries["log.retention.ms"].synonyms]
    # Kafka's ConfigHelper order: per-broker, cluster default, static, default; by source
    # (the finer per-broker log.retention.minutes comes before log.retention.ms: dropped)
    assert synonyms == [("log.retention.ms", "7000", 3), ("log.retention.hours", "24", 4),
                        ("log.retention.hours", "168", 5)]
    assert entries["log.retention.ms"].config_source == 3  # DYNAMIC_DEFAULT_BROKER_CONFIG
    assert entries["log.retention.minutes"].config_source == 2  # DYNAMIC_BROKER_CONFIG
    assert [(s.name, s.source) for s in entries["log.retention.minutes"].synonyms] == [
        ("log.retention.minutes", 2), ("log.retention.ms", 3), ("log.retention.hours", 4),
        ("log.retention.hours", 5)]
    assert entries["log.retention.hours"].config_source == 4  # STATIC_BROKER_CONFIG
    assert entries["message.max.bytes"].value == "9000"
    assert not entries["message.max.bytes"].read_only and entries["node.id"].read_only
    defaults = await describe(b, "")
    assert {k: (e.value, e.config_source) for k, e in defaults.items()} == {
        "log.retention.ms": ("7000", 3), "message.max.bytes": ("9000", 3)}
    # the effective retention: ms (the default level) wins over minutes, as in Kafka
    assert b.config.log_retention_effective_ms == 7000


async def test_saved_and_read_back(tmp_path: Path) -> None:
    settings = {"log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:0",
                "logging.metrics.snapshot.interval.ms": "0"}
    app = BrokerApp(load_config(settings))
    async with trio.open_nursery() as nursery:
        await nursery.start(app.serve)
        assert app.broker is not None
        assert (await incremental(app.broker, "1", ("log.segment.bytes", "4096", SET)))[0] == \
            ErrorCode.none
        await app.shutdown()
    saved = DynamicBrokerConfigs(load_config(settings))
    saved.load()
    assert saved.per_broker == {"log.segment.bytes": "4096"}
    assert saved.current.log_segment_bytes == 4096

    app = BrokerApp(load_config(settings))
    async with trio.open_nursery() as nursery:
        await nursery.start(app.serve)
        assert app.broker is not None
        assert app.broker.config.log_segment_bytes == 4096
        assert app.broker.log_manager.config.log_segment_bytes == 4096
        await app.shutdown()

    # a saved value that is no longer valid stops the start, naming the file and key
    (tmp_path / DYNAMIC_CONFIGS_FILE).write_text(
        '{"version": 1, "broker": {"log.segment.bytes": "ten"}, "default": {}}')
    with pytest.raises(RuntimeError, match="log.segment.bytes"):
        DynamicBrokerConfigs(load_config(settings)).load()
