"""In-process tests of the Metadata and admin handlers against a real Broker (and real storage).

Each request is encoded with the codec, decoded as the front end would, handled, and the answer
is encoded and decoded again, so the wire format of every version is exercised too.
"""

from __future__ import annotations

import itertools
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

