"""In-process tests of the Metadata and admin handlers against a real Broker (and real storage).

Each request is encoded with the codec, decoded as the front end would, handled, and the answer
is encoded and decoded again, so the wire format of every version is exercised too.
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from trio_broker.config import BrokerConfig, Endpoint, load_config
from trio_broker.config.dynamic import DYNAMIC_KEYS
from trio_broker.coordinator import GroupCoordinator
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
from trio_broker.storage.manager import LogManager

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


@contextlib.contextmanager
def running(config: BrokerConfig) -> Iterator[Broker]:
    """A Broker with real storage and a real group coordinator, advertised at a fixed address."""
    lm = LogManager(config)
    lm.open()
    try:
        yield Broker(
            config,
            cluster_id="test-cluster",
            log_manager=lm,
            group_coordinator=GroupCoordinator(config, lm),
            advertised={"PLAINTEXT": Endpoint("PLAINTEXT", "broker.example", 19092)},
        )
    finally:
        lm.close()


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


@pytest.fixture
def storage_broker(config: BrokerConfig) -> Iterator[Broker]:
    with running(config) as broker:
        yield broker


# ------------------------------------------------------------------------------- Metadata
@pytest.mark.parametrize("version", range(0, 13))
async def test_metadata_names_this_broker(storage_broker: Broker, version: int) -> None:
    answer = await call(storage_broker, METADATA, version, metadata_request(version, None))
    assert [(b.node_id, b.host, b.port) for b in answer.brokers] == [(7, "broker.example", 19092)]
    assert answer.topics == ()
    if version >= 1:
        assert answer.controller_id == 7
        assert answer.brokers[0].rack is None
    if version >= 2:
        assert answer.cluster_id == "test-cluster"


async def test_metadata_uses_the_requests_listener(tmp_path: Path) -> None:
    config = load_config({
        "log.dirs": str(tmp_path),
        "listeners": "PLAINTEXT://localhost:0,INTERNAL://localhost:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
    })
    with running(config) as broker:
        broker.advertised = {"PLAINTEXT": Endpoint("PLAINTEXT", "public.example", 1),
                             "INTERNAL": Endpoint("INTERNAL", "internal.example", 2)}
        answer = await call(broker, METADATA, 9, metadata_request(9, None))
    assert (answer.brokers[0].host, answer.brokers[0].port) == ("public.example", 1)


def test_metadata_versions_are_registered() -> None:
    assert supported_versions()[METADATA] == (0, 13)



# ----------------------------------------------------------------------- DescribeCluster
@pytest.mark.parametrize("version", [0, 1, 2])
async def test_describe_cluster(storage_broker: Broker, version: int) -> None:
    broker = storage_broker
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


async def test_describe_cluster_refuses_controller_endpoints(storage_broker: Broker) -> None:
    broker = storage_broker
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
    with running(config) as broker:
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
    # read-only unless the broker changes it at run time (docs/dynamic-configs.md)
    assert {c.name for c in result.configs if not c.read_only} == DYNAMIC_KEYS
    assert entries["num.partitions"].synonyms[0].name == "num.partitions"
    if version >= 3:
        assert entries["num.partitions"].config_type == 3  # INT
        assert entries["auto.create.topics.enable"].config_type == 1  # BOOLEAN
        assert entries["num.partitions"].documentation


async def test_passwords_and_keys_are_described_as_sensitive_without_value(
        tmp_path: Path) -> None:
    """As Kafka's PASSWORD-type configs: no value (nor in synonyms), is_sensitive set."""
    config = load_config({"log.dirs": str(tmp_path), "node.id": "7",
                          "ssl.key.password": "s3cret", "ssl.truststore.password": "s3cret"})
    with running(config) as broker:
        answer = await call(broker, DESCRIBE_CONFIGS, 4, describe_request(
            4, [(BROKER, "7", None)], synonyms=True))
    entries = {c.name: c for c in answer.results[0].configs}
    for name in ("ssl.key.password", "ssl.truststore.password", "ssl.keystore.key"):
        assert entries[name].is_sensitive and entries[name].value is None, name
        assert all(s.value is None for s in entries[name].synonyms), name
    assert entries["ssl.key.password"].config_source == 4  # STATIC_BROKER_CONFIG: it is set
    assert not entries["num.partitions"].is_sensitive
    assert "s3cret" not in repr(answer)


async def test_describe_broker_configs_filters_names(storage_broker: Broker) -> None:
    broker = storage_broker
    answer = await call(broker, DESCRIBE_CONFIGS, 4, describe_request(
        4, [(BROKER, "7", ["num.io.threads", "no.such.key"])]))
    assert [(c.name, c.value) for c in answer.results[0].configs] == [("num.io.threads", "8")]


async def test_describe_configs_of_another_broker_or_unknown_type(storage_broker: Broker) -> None:
    broker = storage_broker
    answer = await call(broker, DESCRIBE_CONFIGS, 4, describe_request(
        4, [(BROKER, "8", None), (BROKER, "x", None), (BROKER, "", None), (99, "t", None)]))
    codes = [r.error_code for r in answer.results]
    assert codes == [ErrorCode.invalid_request, ErrorCode.invalid_request, ErrorCode.none,
                     ErrorCode.invalid_request]
    assert answer.results[2].configs == ()  # no dynamic cluster-wide defaults


# --------------------------------------------------------------- AlterConfigs (broker side)
async def test_broker_configs_cannot_be_altered(storage_broker: Broker) -> None:
    broker = storage_broker
    module = req_module(INCREMENTAL_ALTER_CONFIGS, 1)
    body = module.IncrementalAlterConfigsRequest(resources=(
        module.AlterConfigsResource(resource_type=BROKER, resource_name="7", configs=(
            module.AlterableConfig(name="num.io.threads", config_operation=0, value="4"),)),
    ), validate_only=False)
    answer = await call(broker, INCREMENTAL_ALTER_CONFIGS, 1, body)
    assert answer.responses[0].error_code == ErrorCode.invalid_request
    assert answer.responses[0].error_message == \
        "Cannot update these configs dynamically: Set(num.io.threads)"

    module = req_module(ALTER_CONFIGS, 2)
    body = module.AlterConfigsRequest(resources=(
        module.AlterConfigsResource(resource_type=BROKER, resource_name="7", configs=(
            module.AlterableConfig(name="num.io.threads", value="4"),)),
    ), validate_only=True)
    answer = await call(broker, ALTER_CONFIGS, 2, body)
    assert answer.responses[0].error_code == ErrorCode.invalid_request


# ---------------------------------------------------------------------- topics and storage
def create_request(version: int, topics: list[tuple[str, int, int]], *,
                   configs: dict[str, str | None] | None = None,
                   assignments: dict[int, list[int]] | None = None,
                   validate_only: bool = False) -> Any:
    module = req_module(CREATE_TOPICS, version)
    return module.CreateTopicsRequest(
        topics=tuple(
            module.CreatableTopic(
                name=name, num_partitions=partitions, replication_factor=factor,
                assignments=tuple(
                    module.CreatableReplicaAssignment(partition_index=p, broker_ids=tuple(b))
                    for p, b in (assignments or {}).items()),
                configs=tuple(module.CreatableTopicConfig(name=k, value=v)
                              for k, v in (configs or {}).items()))
            for name, partitions, factor in topics),
        timeout=datetime.timedelta(seconds=5), validate_only=validate_only)


async def create(broker: Broker, name: str, partitions: int = 1, version: int = 7,
                 **kw: Any) -> Any:
    answer = await call(broker, CREATE_TOPICS, version,
                        create_request(version, [(name, partitions, -1)], **kw))
    (result,) = answer.topics
    return result


@pytest.mark.parametrize("version", range(2, 8))
async def test_create_topics_then_metadata(storage_broker: Broker, version: int) -> None:
    result = await create(storage_broker, "orders", 3, version=version,
                          configs={"retention.ms": "1000"})
    assert result.error_code == ErrorCode.none, result.error_message
    if version >= 5:
        assert result.num_partitions == 3
        assert result.replication_factor == 1
        configs = {c.name: c for c in result.configs}
        assert configs["retention.ms"].value == "1000"
        assert configs["retention.ms"].config_source == 1  # TOPIC_CONFIG
    if version >= 7:
        assert result.topic_id == storage_broker.log_manager.topics["orders"].topic_id
    answer = await call(storage_broker, METADATA, 12, metadata_request(12, ["orders"]))
    (topic,) = answer.topics
    assert topic.error_code == ErrorCode.none
    assert topic.topic_id == storage_broker.log_manager.topics["orders"].topic_id
    assert [(p.partition_index, p.leader_id, p.replica_nodes, p.isr_nodes, p.leader_epoch)
            for p in topic.partitions] == [(i, 7, (7,), (7,), 0) for i in range(3)]


async def test_create_topics_errors(storage_broker: Broker) -> None:
    assert (await create(storage_broker, "dup")).error_code == ErrorCode.none
    assert (await create(storage_broker, "dup")).error_code == ErrorCode.topic_already_exists
    assert (await create(storage_broker, "bad/name")).error_code == \
        ErrorCode.invalid_topic_exception
    assert (await create(storage_broker, "zero", 0)).error_code == ErrorCode.invalid_partitions
    assert (await create(storage_broker, "cfg", configs={"no.such": "1"})).error_code == \
        ErrorCode.invalid_config
    assert (await create(storage_broker, "cfg", configs={"retention.ms": "soon"})).error_code \
        == ErrorCode.invalid_config
    answer = await call(storage_broker, CREATE_TOPICS, 7,
                        create_request(7, [("rf3", 1, 3), ("rf0", 1, 0), ("rf1", 2, 1)]))
    assert [(t.name, t.error_code) for t in answer.topics] == [
        ("rf3", ErrorCode.invalid_replication_factor),
        ("rf0", ErrorCode.invalid_replication_factor),
        ("rf1", ErrorCode.none)]
    # The same name twice in one request: one INVALID_REQUEST answer, nothing created.
    answer = await call(storage_broker, CREATE_TOPICS, 7,
                        create_request(7, [("twice", 1, -1), ("twice", 2, -1)]))
    assert [(t.name, t.error_code) for t in answer.topics] == [
        ("twice", ErrorCode.invalid_request)]
    # '.' and '_' collide (their metric names would be the same).
    assert (await create(storage_broker, "a.b")).error_code == ErrorCode.none
    assert (await create(storage_broker, "a_b")).error_code == ErrorCode.invalid_topic_exception
    assert set(storage_broker.log_manager.topics) == {"dup", "rf1", "a.b"}


async def test_create_topics_defaults_and_assignments(storage_broker: Broker) -> None:
    result = await create(storage_broker, "default", -1)
    assert result.error_code == ErrorCode.none
    assert result.num_partitions == storage_broker.config.num_partitions
    answer = await call(storage_broker, CREATE_TOPICS, 7, create_request(
        7, [("assigned", -1, -1)], assignments={0: [7], 1: [7]}))
    assert answer.topics[0].error_code == ErrorCode.none
    assert storage_broker.log_manager.topics["assigned"].num_partitions == 2
    answer = await call(storage_broker, CREATE_TOPICS, 7, create_request(
        7, [("foreign", -1, -1)], assignments={0: [8]}))
    assert answer.topics[0].error_code == ErrorCode.invalid_replica_assignment
    answer = await call(storage_broker, CREATE_TOPICS, 7, create_request(
        7, [("both", 2, -1)], assignments={0: [7]}))
    assert answer.topics[0].error_code == ErrorCode.invalid_request
    assert "foreign" not in storage_broker.log_manager.topics


async def test_create_topics_bounds_the_partitions_of_one_request(tmp_path: Path) -> None:
    """Kafka's controller creates at most 10,000 partitions per request: past that, every
    topic of the request is refused with POLICY_VIOLATION and nothing is created. Topics that
    ask for the default (-1) count ``num.partitions`` each."""
    config = load_config({"log.dirs": str(tmp_path), "node.id": "7", "num.partitions": "2"})
    with running(config) as broker:
        answer = await call(broker, CREATE_TOPICS, 7, create_request(
            7, [("a", 5_000, -1), ("b", 4_999, -1), ("c", -1, -1), ("a", 1, -1)],
            validate_only=True))
        assert [(t.name, t.error_code) for t in answer.topics] == [
            ("a", ErrorCode.policy_violation), ("b", ErrorCode.policy_violation),
            ("c", ErrorCode.policy_violation)]
        assert {t.error_message for t in answer.topics} == {
            "Excessively large number of partitions per request."}
        # 10,000 exactly is allowed (validate_only: nothing is opened).
        answer = await call(broker, CREATE_TOPICS, 7, create_request(
            7, [("a", 5_000, -1), ("b", 4_998, -1), ("c", -1, -1)], validate_only=True))
        assert [t.error_code for t in answer.topics] == [ErrorCode.none] * 3
        assert broker.log_manager is not None and not broker.log_manager.topics


async def test_create_partitions_bounds_the_partitions_of_one_request(
        storage_broker: Broker) -> None:
    await create(storage_broker, "one", 1)
    await create(storage_broker, "two", 1)
    module = req_module(CREATE_PARTITIONS, 3)

    def request(counts: dict[str, int]) -> Any:
        return module.CreatePartitionsRequest(
            topics=tuple(module.CreatePartitionsTopic(name=n, count=c, assignments=None)
                         for n, c in counts.items()),
            timeout=datetime.timedelta(seconds=5), validate_only=True)

    answer = await call(storage_broker, CREATE_PARTITIONS, 3,
                        request({"one": 5_002, "two": 5_001, "missing": 3}))  # 10,001 new
    assert [(r.name, r.error_code, r.error_message) for r in answer.results] == [
        (name, ErrorCode.policy_violation, "Unable to perform excessively large batch operation.")
        for name in ("one", "two", "missing")]
    answer = await call(storage_broker, CREATE_PARTITIONS, 3,
                        request({"one": 5_001, "two": 5_001}))  # 10,000 new
    assert [r.error_code for r in answer.results] == [ErrorCode.none] * 2
    assert storage_broker.log_manager.topics["one"].num_partitions == 1


async def test_create_topics_validate_only(storage_broker: Broker) -> None:
    result = await create(storage_broker, "dry", 2, validate_only=True)
    assert result.error_code == ErrorCode.none
    assert "dry" not in storage_broker.log_manager.topics
    assert (await create(storage_broker, "dry", 0, validate_only=True)).error_code == \
        ErrorCode.invalid_partitions


@pytest.mark.parametrize("version", [0, 4, 9, 12, 13])
async def test_metadata_auto_creates(storage_broker: Broker, version: int) -> None:
    answer = await call(storage_broker, METADATA, version, metadata_request(version, ["auto"]))
    (topic,) = answer.topics
    assert topic.error_code == ErrorCode.none
    assert len(topic.partitions) == storage_broker.config.num_partitions
    assert "auto" in storage_broker.log_manager.topics


async def test_metadata_auto_create_refused(tmp_path: Path) -> None:
    config = load_config({"log.dirs": str(tmp_path), "auto.create.topics.enable": "false"})
    with running(config) as broker:
        lm = broker.log_manager
        answer = await call(broker, METADATA, 12, metadata_request(12, ["nope", "in valid"]))
        assert [(t.name, t.error_code) for t in answer.topics] == [
            ("nope", ErrorCode.unknown_topic_or_partition),
            ("in valid", ErrorCode.invalid_topic_exception)]
        # The client may forbid it too, even when the broker allows it.
    config = load_config({"log.dirs": str(tmp_path)})
    with running(config) as broker:
        lm = broker.log_manager
        answer = await call(broker, METADATA, 9,
                            metadata_request(9, ["nope"], allow_create=False))
        assert answer.topics[0].error_code == ErrorCode.unknown_topic_or_partition
        assert "nope" not in lm.topics


async def test_metadata_auto_creates_at_most_10000_partitions_per_request(
        tmp_path: Path) -> None:
    """Kafka auto-creates a request's missing topics in one CreateTopics, refused whole past
    10,000 partitions: none is created, the would-be-created get POLICY_VIOLATION."""
    config = load_config({"log.dirs": str(tmp_path), "num.partitions": "100"})
    with running(config) as broker:
        await create(broker, "exists", 1)
        names = ["exists", "__consumer_offsets", "in valid", *(f"t{i}" for i in range(101))]
        answer = await call(broker, METADATA, 12, metadata_request(12, names))
        codes = {t.name: t.error_code for t in answer.topics}
        assert codes.pop("exists") == ErrorCode.none
        assert codes.pop("__consumer_offsets") == ErrorCode.unknown_topic_or_partition
        assert codes.pop("in valid") == ErrorCode.invalid_topic_exception
        assert set(codes.values()) == {ErrorCode.policy_violation} and len(codes) == 101
        assert set(broker.log_manager.topics) == {"exists"}
        # Fewer at a time are created (10,000 exactly is allowed: checked for CreateTopics).
        answer = await call(broker, METADATA, 12, metadata_request(12, names[3:5]))
        assert {t.error_code for t in answer.topics} == {ErrorCode.none}
        assert set(broker.log_manager.topics) == {"exists", "t0", "t1"}


async def test_metadata_all_topics_and_by_id(storage_broker: Broker) -> None:
    await create(storage_broker, "b", 2)
    await create(storage_broker, "a", 1)
    storage_broker.log_manager.create_topic("__consumer_offsets", 2, internal=True)
    answer = await call(storage_broker, METADATA, 12, metadata_request(12, None))
    assert [(t.name, t.is_internal, len(t.partitions)) for t in answer.topics] == [
        ("__consumer_offsets", True, 2), ("a", False, 1), ("b", False, 2)]
    # v1-v3: an empty list means no topics (v0: all topics).
    answer = await call(storage_broker, METADATA, 1, req_module(METADATA, 1).MetadataRequest(
        topics=()))
    assert answer.topics == ()
    answer = await call(storage_broker, METADATA, 0, metadata_request(0, None))
    assert len(answer.topics) == 3
    # v12 lookups by topic id.
    module = req_module(METADATA, 12)
    topic_id = storage_broker.log_manager.topics["b"].topic_id
    unknown = uuid.uuid4()
    answer = await call(storage_broker, METADATA, 12, module.MetadataRequest(
        topics=(module.MetadataRequestTopic(topic_id=topic_id, name=None),
                module.MetadataRequestTopic(topic_id=unknown, name=None)),
        allow_auto_topic_creation=False, include_topic_authorized_operations=True))
    assert [(t.name, t.error_code) for t in answer.topics] == [
        ("b", ErrorCode.none), (None, ErrorCode.unknown_topic_id)]
    assert answer.topics[0].topic_authorized_operations & (1 << 3)  # READ
    # Java's Admin.describeTopics(TopicCollection.ofTopicIds(...)): id with an empty name ""
    answer = await call(storage_broker, METADATA, 12, module.MetadataRequest(
        topics=(module.MetadataRequestTopic(topic_id=topic_id, name=""),
                module.MetadataRequestTopic(topic_id=unknown, name=""),
                module.MetadataRequestTopic(topic_id=topic_id, name="b")),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    assert [(t.name, t.topic_id, t.error_code) for t in answer.topics] == [
        ("b", topic_id, ErrorCode.none), (None, unknown, ErrorCode.unknown_topic_id),
        ("b", topic_id, ErrorCode.invalid_request)]


@pytest.mark.parametrize("version", [1, 5, 6])
async def test_delete_topics(storage_broker: Broker, config: BrokerConfig, version: int) -> None:
    await create(storage_broker, "gone", 2)
    await create(storage_broker, "kept", 1)
    directories = sorted(p.name for p in config.data_dir.iterdir() if p.is_dir())
    assert "gone-0" in directories and "gone-1" in directories
    module = req_module(DELETE_TOPICS, version)
    if version >= 6:
        body = module.DeleteTopicsRequest(topics=(
            module.DeleteTopicState(name="gone", topic_id=None),
            module.DeleteTopicState(name="missing", topic_id=None),
            module.DeleteTopicState(name=None, topic_id=uuid.uuid4()),
        ), timeout=datetime.timedelta(seconds=5))
    else:
        body = module.DeleteTopicsRequest(topic_names=("gone", "missing"),
                                          timeout=datetime.timedelta(seconds=5))
    answer = await call(storage_broker, DELETE_TOPICS, version, body)
    codes = [r.error_code for r in answer.responses]
    expected = [ErrorCode.none, ErrorCode.unknown_topic_or_partition]
    if version >= 6:
        expected.append(ErrorCode.unknown_topic_id)
    assert codes == expected
    assert set(storage_broker.log_manager.topics) == {"kept"}
    assert not any(p.name.startswith("gone-") for p in config.data_dir.iterdir())


async def test_delete_topic_by_id(storage_broker: Broker) -> None:
    await create(storage_broker, "by-id")
    topic_id = storage_broker.log_manager.topics["by-id"].topic_id
    module = req_module(DELETE_TOPICS, 6)
    answer = await call(storage_broker, DELETE_TOPICS, 6, module.DeleteTopicsRequest(
        topics=(module.DeleteTopicState(name=None, topic_id=topic_id),),
        timeout=datetime.timedelta(seconds=5)))
    assert [(r.name, r.topic_id, r.error_code) for r in answer.responses] == [
        ("by-id", topic_id, ErrorCode.none)]
    assert "by-id" not in storage_broker.log_manager.topics


async def test_delete_topics_disabled(tmp_path: Path) -> None:
    config = load_config({"log.dirs": str(tmp_path), "delete.topic.enable": "false"})
    with running(config) as broker:
        lm = broker.log_manager
        lm.create_topic("stays", 1)
        module = req_module(DELETE_TOPICS, 4)
        answer = await call(broker, DELETE_TOPICS, 4, module.DeleteTopicsRequest(
            topic_names=("stays",), timeout=datetime.timedelta(seconds=5)))
        assert answer.responses[0].error_code == ErrorCode.topic_deletion_disabled
        assert "stays" in lm.topics


@pytest.mark.parametrize("version", [0, 3])
async def test_create_partitions(storage_broker: Broker, version: int) -> None:
    await create(storage_broker, "grow", 2)
    module = req_module(CREATE_PARTITIONS, version)

    def topic(name: str, count: int, assignments: list[list[int]] | None = None) -> Any:
        return module.CreatePartitionsTopic(
            name=name, count=count,
            assignments=None if assignments is None else tuple(
                module.CreatePartitionsAssignment(broker_ids=tuple(a)) for a in assignments))

    body = module.CreatePartitionsRequest(
        topics=(topic("grow", 4), topic("missing", 3)), timeout=datetime.timedelta(seconds=5),
        validate_only=False)
    answer = await call(storage_broker, CREATE_PARTITIONS, version, body)
    assert [r.error_code for r in answer.results] == [ErrorCode.none,
                                                       ErrorCode.unknown_topic_or_partition]
    assert storage_broker.log_manager.topics["grow"].num_partitions == 4
    for count, assignments, code in [
        (4, None, ErrorCode.invalid_partitions),
        (3, None, ErrorCode.invalid_partitions),
        (6, [[7]], ErrorCode.invalid_replica_assignment),
        (5, [[8]], ErrorCode.invalid_replica_assignment),
        (5, [[7]], ErrorCode.none),
    ]:
        body = module.CreatePartitionsRequest(
            topics=(topic("grow", count, assignments),), timeout=datetime.timedelta(seconds=5),
            validate_only=False)
        answer = await call(storage_broker, CREATE_PARTITIONS, version, body)
        assert answer.results[0].error_code == code, (count, assignments)
    assert storage_broker.log_manager.topics["grow"].num_partitions == 5
    body = module.CreatePartitionsRequest(topics=(topic("grow", 9),),
                                          timeout=datetime.timedelta(seconds=5),
                                          validate_only=True)
    answer = await call(storage_broker, CREATE_PARTITIONS, version, body)
    assert answer.results[0].error_code == ErrorCode.none
    assert storage_broker.log_manager.topics["grow"].num_partitions == 5


async def test_describe_and_alter_topic_configs(storage_broker: Broker) -> None:
    await create(storage_broker, "conf", configs={"retention.ms": "5000"})
    answer = await call(storage_broker, DESCRIBE_CONFIGS, 4, describe_request(
        4, [(TOPIC, "conf", None), (TOPIC, "missing", None)]))
    ok, missing = answer.results
    assert missing.error_code == ErrorCode.unknown_topic_or_partition
    entries = {c.name: c for c in ok.configs}
    assert (entries["retention.ms"].value, entries["retention.ms"].config_source) == ("5000", 1)
    assert entries["segment.bytes"].config_source == 5  # DEFAULT_CONFIG
    assert entries["segment.bytes"].config_type == 3  # INT
    assert entries["cleanup.policy"].value == "delete"

    # AlterConfigs replaces every override.
    module = req_module(ALTER_CONFIGS, 2)
    answer = await call(storage_broker, ALTER_CONFIGS, 2, module.AlterConfigsRequest(
        resources=(module.AlterConfigsResource(resource_type=TOPIC, resource_name="conf",
                                               configs=(module.AlterableConfig(
                                                   name="segment.bytes", value="100000"),)),),
        validate_only=False))
    assert answer.responses[0].error_code == ErrorCode.none
    assert dict(storage_broker.log_manager.topics["conf"].configs) == {"segment.bytes": "100000"}

    # IncrementalAlterConfigs: SET, DELETE, APPEND on a list key; bad ones refused.
    module = req_module(INCREMENTAL_ALTER_CONFIGS, 1)

    def incremental(*ops: tuple[str, int, str | None], validate_only: bool = False) -> Any:
        return module.IncrementalAlterConfigsRequest(resources=(module.AlterConfigsResource(
            resource_type=TOPIC, resource_name="conf", configs=tuple(
                module.AlterableConfig(name=n, config_operation=o, value=v) for n, o, v in ops)),
        ), validate_only=validate_only)

    answer = await call(storage_broker, INCREMENTAL_ALTER_CONFIGS, 1, incremental(
        ("retention.ms", 0, "7000"), ("segment.bytes", 1, None),
        ("cleanup.policy", 2, "compact")))
    assert answer.responses[0].error_code == ErrorCode.none, answer.responses[0].error_message
    assert dict(storage_broker.log_manager.topics["conf"].configs) == {
        "retention.ms": "7000", "cleanup.policy": "delete,compact"}
    answer = await call(storage_broker, INCREMENTAL_ALTER_CONFIGS, 1, incremental(
        ("cleanup.policy", 3, "compact")))
    assert answer.responses[0].error_code == ErrorCode.none
    assert storage_broker.log_manager.topics["conf"].configs["cleanup.policy"] == "delete"
    for ops, code in [
        ((("retention.ms", 2, "1"),), ErrorCode.invalid_config),  # APPEND on a non-list key
        ((("retention.ms", 0, "x"),), ErrorCode.invalid_config),
        ((("no.such.key", 0, "1"),), ErrorCode.invalid_config),
        ((("retention.ms", 0, "1"), ("retention.ms", 1, None)), ErrorCode.invalid_request),
        ((("retention.ms", 9, "1"),), ErrorCode.invalid_request),
    ]:
        answer = await call(storage_broker, INCREMENTAL_ALTER_CONFIGS, 1, incremental(*ops))
        assert answer.responses[0].error_code == code, ops
    answer = await call(storage_broker, INCREMENTAL_ALTER_CONFIGS, 1, incremental(
        ("retention.ms", 0, "1"), validate_only=True))
    assert answer.responses[0].error_code == ErrorCode.none
    assert storage_broker.log_manager.topics["conf"].configs["retention.ms"] == "7000"


async def test_describe_topic_configs_with_synonyms(tmp_path: Path) -> None:
    config = load_config({"log.dirs": str(tmp_path), "node.id": "7",
                          "log.segment.bytes": "2000000"})
    with running(config) as broker:
        await create(broker, "syn", configs={"retention.ms": "5000"})
        answer = await call(broker, DESCRIBE_CONFIGS, 4, describe_request(
            4, [(TOPIC, "syn", ["retention.ms", "segment.bytes"])], synonyms=True))
        entries = {c.name: c for c in answer.results[0].configs}
        assert set(entries) == {"retention.ms", "segment.bytes"}
        retention = [(s.name, s.value, s.source) for s in entries["retention.ms"].synonyms]
        # log.retention.ms and .minutes are unset: the chain goes on to log.retention.hours.
        assert retention == [("retention.ms", "5000", 1), ("log.retention.hours", "168", 5)]
        segment = entries["segment.bytes"]
        assert (segment.value, segment.config_source) == ("2000000", 4)
        # Kafka's ConfigHelper lists the key at every level that has it: static, then default
        assert [(s.name, s.value, s.source) for s in segment.synonyms] == [
            ("log.segment.bytes", "2000000", 4), ("log.segment.bytes", "1073741824", 5)]
