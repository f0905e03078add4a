"""In-process tests of the Metadata and admin handlers against a real Broker (and real storage).

Each request is encoded with the codec, decoded as the front end would, handled, and the answer
is encoded and decoded again, so the wire format of every version is exercised too.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from trio_broker.config import BrokerConfig, Endpoint, load_config
from trio_broker.protocol.codec import (
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    request_schema,
)
from trio_broker.server.broker import Broker
from trio_broker.server.context import ConnectionInfo, RequestContext
from trio_broker.server.registry import supported_versions

METADATA = 3
CREATE_TOPICS = 19
DELETE_TOPICS = 20
DESCRIBE_CONFIGS = 32
ALTER_CONFIGS = 33
CREATE_PARTITIONS = 37
INCREMENTAL_ALTER_CONFIGS = 44
DESCRIBE_CLUSTER = 60
TOPIC, BROKER = 2, 4
_correlation = itertools.count(1)


def make_broker(config: BrokerConfig, log_manager: Any = None) -> Broker:
    return Broker(
        config,
        cluster_id="test-cluster",
        log_manager=log_manager,
        advertised={"PLAINTEXT": Endpoint("PLAINTEXT", "broker.example", 19092)},
    )


async def call(broker: Broker, api_key: int, version: int, body: Any) -> Any:
    """Send ``body`` through the codec and the registered handler; return the decoded answer."""
    correlation_id = next(_correlation)
    frame = encode_request(api_key, version, correlation_id, "test-client", body)
    request = decode_request(frame[4:], supported_versions())
    connection = ConnectionInfo(
        connection_id="127.0.0.1:9092-127.0.0.1:5555-0-0", listener="PLAINTEXT",
        security_protocol="PLAINTEXT", peer="127.0.0.1:5555", processor=0,
    )
    ctx = RequestContext(request=request, connection=connection, broker=broker)
    from trio_broker.server.registry import handlers

    response = await handlers()[api_key].handle(ctx, request.body)
    wire = encode_response(request, response)
    got_id, decoded = decode_response(api_key, version, wire[4:])
    assert got_id == correlation_id
    return decoded


def req_module(api_key: int, version: int) -> Any:
    """The kio module of a request class, with its nested entity classes."""
    return sys.modules[request_schema(api_key, version).__module__]


def metadata_request(version: int, names: list[str] | None, *, allow_create: bool = True) -> Any:
    schema = request_schema(METADATA, version)
    module = __import__(schema.__module__, fromlist=["MetadataRequestTopic"])
    topic_cls = module.MetadataRequestTopic
    topics: tuple[Any, ...] | None
    if names is None:
        topics = () if version == 0 else None
    elif version >= 10:
        topics = tuple(topic_cls(name=n, topic_id=None) for n in names)
    else:
        topics = tuple(topic_cls(name=n) for n in names)
    fields = {"topics": topics}
    if version >= 4:
        fields["allow_auto_topic_creation"] = allow_create
    if version >= 8:
        fields["include_topic_authorized_operations"] = False
        if version <= 10:
            fields["include_cluster_authorized_operations"] = False
    return schema(**fields)


@pytest.fixture
def config(tmp_path: Path) -> BrokerConfig:
    return load_config({"log.dirs": str(tmp_path), "node.id": "7"})


# ------------------------------------------------------------------------------- Metadata
@pytest.mark.parametrize("version", range(0, 13))
async def test_metadata_without_storage_names_this_broker(config: BrokerConfig,
                                                          version: int) -> None:
    broker = make_broker(config)
    answer = await call(broker, METADATA, version, metadata_request(version, None))
    assert [(b.node_id, b.host, b.port) for b in answer.brokers] == [(7, "broker.example", 19092)]
    assert answer.topics == ()
    if version >= 1:
        assert answer.controller_id == 7
        assert answer.brokers[0].rack is None
    if version >= 2:
        assert answer.cluster_id == "test-cluster"


async def test_metadata_without_storage_reports_named_topics_unknown(
        config: BrokerConfig) -> None:
    broker = make_broker(config)
    answer = await call(broker, METADATA, 12, metadata_request(12, ["a", "bad name"]))
    errors = {t.name: t.error_code for t in answer.topics}
    assert errors == {"a": ErrorCode.unknown_topic_or_partition,
                      "bad name": ErrorCode.invalid_topic_exception}


async def test_metadata_uses_the_requests_listener(tmp_path: Path) -> None:
    config = load_config({
        "log.dirs": str(tmp_path),
        "listeners": "PLAINTEXT://localhost:0,INTERNAL://localhost:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
    })
    broker = Broker(config, cluster_id="c", advertised={
        "PLAINTEXT": Endpoint("PLAINTEXT", "public.example", 1),
        "INTERNAL": Endpoint("INTERNAL", "internal.example", 2),
    })
    answer = await call(broker, METADATA, 9, metadata_request(9, None))
    assert (answer.brokers[0].host, answer.brokers[0].port) == ("public.example", 1)


def test_metadata_versions_are_registered() -> None:
    assert supported_versions()[METADATA] == (0, 12)



# ----------------------------------------------------------------------- DescribeCluster
@pytest.mark.parametrize("version", [0, 1, 2])
async def test_describe_cluster(config: BrokerConfig, version: int) -> None:
    broker = make_broker(config)
    schema = request_schema(DESCRIBE_CLUSTER, version)
    fields: dict[str, Any] = {"include_cluster_authorized_operations": True}
    if version >= 1:
        fields["endpoint_type"] = 1
    if version >= 2:
        fields["include_fenced_brokers"] = False
    answer = await call(broker, DESCRIBE_CLUSTER, version, schema(**fields))
    assert answer.error_code == ErrorCode.none
    assert answer.cluster_id == "test-cluster"
    assert answer.controller_id == 7
    assert [(b.broker_id, b.host, b.port) for b in answer.brokers] == [
        (7, "broker.example", 19092)]
    # DESCRIBE (8) and ALTER_CONFIGS (11) among the operations reported without an authorizer.
    assert answer.cluster_authorized_operations & (1 << 8)
    assert answer.cluster_authorized_operations & (1 << 11)


async def test_describe_cluster_refuses_controller_endpoints(config: BrokerConfig) -> None:
    broker = make_broker(config)
    schema = request_schema(DESCRIBE_CLUSTER, 1)
    answer = await call(broker, DESCRIBE_CLUSTER, 1, schema(
        include_cluster_authorized_operations=False, endpoint_type=2))
    assert answer.error_code == ErrorCode.unsupported_endpoint_type
    assert answer.brokers == ()


# ----------------------------------------------------------- DescribeConfigs (broker side)
def describe_request(version: int, resources: list[tuple[int, str, list[str] | None]], *,
                     synonyms: bool = False, docs: bool = False) -> Any:
    module = req_module(DESCRIBE_CONFIGS, version)
    fields: dict[str, Any] = {
        "resources": tuple(
            module.DescribeConfigsResource(resource_type=kind, resource_name=name,
                                           configuration_keys=None if keys is None
                                           else tuple(keys))
            for kind, name, keys in resources),
        "include_synonyms": synonyms,
    }
    if version >= 3:
        fields["include_documentation"] = docs
    return module.DescribeConfigsRequest(**fields)


@pytest.mark.parametrize("version", [1, 2, 3, 4])
async def test_describe_broker_configs(tmp_path: Path, version: int) -> None:
    config = load_config({"log.dirs": str(tmp_path), "node.id": "7", "num.partitions": "3"})
    broker = make_broker(config)
    answer = await call(broker, DESCRIBE_CONFIGS, version,
                        describe_request(version, [(BROKER, "7", None)], synonyms=True,
                                         docs=True))
    (result,) = answer.results
    assert result.error_code == ErrorCode.none
    entries = {c.name: c for c in result.configs}
    assert entries["num.partitions"].value == "3"
    assert entries["num.partitions"].config_source == 4  # STATIC_BROKER_CONFIG
    assert entries["log.dirs"].value == str(tmp_path)
    assert entries["auto.create.topics.enable"].value == "true"
    assert entries["auto.create.topics.enable"].config_source == 5  # DEFAULT_CONFIG
    assert entries["socket.request.max.bytes"].value == "104857600"
    assert all(c.read_only for c in result.configs)
    assert entries["num.partitions"].synonyms[0].name == "num.partitions"
    if version >= 3:
        assert entries["num.partitions"].config_type == 3  # INT
        assert entries["auto.create.topics.enable"].config_type == 1  # BOOLEAN
        assert entries["num.partitions"].documentation


async def test_describe_broker_configs_filters_names(config: BrokerConfig) -> None:
    broker = make_broker(config)
    answer = await call(broker, DESCRIBE_CONFIGS, 4, describe_request(
        4, [(BROKER, "7", ["num.io.threads", "no.such.key"])]))
    assert [(c.name, c.value) for c in answer.results[0].configs] == [("num.io.threads", "8")]


async def test_describe_configs_of_another_broker_or_unknown_type(config: BrokerConfig) -> None:
    broker = make_broker(config)
    answer = await call(broker, DESCRIBE_CONFIGS, 4, describe_request(
        4, [(BROKER, "8", None), (BROKER, "x", None), (BROKER, "", None), (99, "t", None)]))
    codes = [r.error_code for r in answer.results]
    assert codes == [ErrorCode.invalid_request, ErrorCode.invalid_request, ErrorCode.none,
                     ErrorCode.invalid_request]
    assert answer.results[2].configs == ()  # no dynamic cluster-wide defaults


# --------------------------------------------------------------- AlterConfigs (broker side)
async def test_broker_configs_cannot_be_altered(config: BrokerConfig) -> None:
    broker = make_broker(config)
    module = req_module(INCREMENTAL_ALTER_CONFIGS, 1)
    body = module.IncrementalAlterConfigsRequest(resources=(
        module.AlterConfigsResource(resource_type=BROKER, resource_name="7", configs=(
            module.AlterableConfig(name="num.io.threads", config_operation=0, value="4"),)),
    ), validate_only=False)
    answer = await call(broker, INCREMENTAL_ALTER_CONFIGS, 1, body)
    assert answer.responses[0].error_code == ErrorCode.invalid_request
    assert "restart" in answer.responses[0].error_message

    module = req_module(ALTER_CONFIGS, 2)
    body = module.AlterConfigsRequest(resources=(
        module.AlterConfigsResource(resource_type=BROKER, resource_name="7", configs=(
            module.AlterableConfig(name="num.io.threads", value="4"),)),
    ), validate_only=True)
    answer = await call(broker, ALTER_CONFIGS, 2, body)
    assert answer.responses[0].error_code == ErrorCode.invalid_request
