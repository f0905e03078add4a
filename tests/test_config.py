"""Configuration: Kafka's keys and defaults, properties files, source precedence, validation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest

from trio_broker.config import (
    INT_MAX,
    KAFKA_KEYS_WITHOUT_EFFECT,
    LONG_MAX,
    BrokerConfig,
    ConfigError,
    Endpoint,
    known_keys,
    load_config,
    load_properties_file,
    parse_override,
    parse_properties,
)

TWO_LISTENERS = {
    "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
}

# Kafka's own defaults (KafkaConfig / SocketServerConfigs / ServerLogConfigs / GroupCoordinator).
KAFKA_DEFAULTS: dict[str, Any] = {
    "num.network.threads": 3,
    "num.io.threads": 8,
    "queued.max.requests": 500,
    "queued.max.request.bytes": -1,
    "socket.request.max.bytes": 104857600,
    "socket.send.buffer.bytes": 102400,
    "socket.receive.buffer.bytes": 102400,
    "socket.listen.backlog.size": 50,
    "connections.max.idle.ms": 600000,
    "max.connections": 2147483647,
    "max.connections.per.ip": 2147483647,
    "max.connections.per.ip.overrides": "",
    "max.connection.creation.rate": 2147483647,
    "quota.window.size.seconds": 1,
    "quota.window.num": 11,
    "listener.security.protocol.map":
        "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
    "control.plane.listener.name": None,
    "advertised.listeners": None,
    "auto.create.topics.enable": True,
    "delete.topic.enable": True,
    "num.partitions": 1,
    "default.replication.factor": 1,
    "message.max.bytes": 1048588,
    "log.segment.bytes": 1073741824,
    "log.roll.hours": 168,
    "log.retention.hours": 168,
    "log.retention.bytes": -1,
    "log.retention.check.interval.ms": 300000,
    "log.flush.interval.messages": LONG_MAX,
    "log.flush.scheduler.interval.ms": LONG_MAX,
    "log.index.interval.bytes": 4096,
    "log.index.size.max.bytes": 10485760,
    "log.message.timestamp.type": "CreateTime",
    "log.cleanup.policy": "delete",
    "producer.id.expiration.ms": 86400000,
    "group.initial.rebalance.delay.ms": 3000,
    "group.min.session.timeout.ms": 6000,
    "group.max.session.timeout.ms": 1800000,
    "group.max.size": 2147483647,
    "offsets.retention.minutes": 10080,
    "offsets.retention.check.interval.ms": 600000,
    "offsets.topic.num.partitions": 50,
    "offset.metadata.max.bytes": 4096,
}

OUR_DEFAULTS: dict[str, Any] = {
    "listeners": "PLAINTEXT://localhost:9092",
    "queued.max.connections": 20,  # Kafka hard-codes 20
    "connection.max.inflight.requests": 1,  # Kafka's mute rule
    "node.id": 1,
}


def attr(key: str) -> str:
    return key.replace(".", "_")


def error_of(*sources: dict[str, str]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config(*sources)
    return info.value


# ------------------------------------------------------------------------------ defaults
@pytest.mark.parametrize(("key", "default"), sorted({**KAFKA_DEFAULTS, **OUR_DEFAULTS}.items()))
def test_defaults(key: str, default: Any) -> None:
    config = load_config()
    assert getattr(config, attr(key)) == default


def test_every_key_is_an_attribute_named_after_it() -> None:
    names = {f.name for f in attrs.fields(BrokerConfig)}
    for key in known_keys():
        assert attr(key) in names, key


def test_default_config_serves_plaintext_localhost_9092() -> None:
    config = load_config()
    assert config.endpoints == (Endpoint("PLAINTEXT", "localhost", 9092),)
    assert config.ignored_keys == ()
    assert config.listener_overrides == {}


def test_config_is_frozen() -> None:
    config = load_config()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        config.num_io_threads = 4  # type: ignore[misc]


# --------------------------------------------------------------------------- properties
def test_properties_parsing_like_java() -> None:
    text = (
        "# a comment\n"
        "! another comment\n"
        "\n"
        "   num.io.threads = 4\n"
        "num.network.threads:5\n"
        "socket.listen.backlog.size 60\n"
        "listeners=PLAINTEXT://127.0.0.1:9092,\\\n"
        "          OTHER://127.0.0.1:9093\n"
        "log.dirs=/tmp/a\\\n"
        "   # not a comment inside a continuation\n"
        "empty.key\n"
        "with.equals=a=b:c\n"
        "escaped\\=key=v\n"
    )
    assert parse_properties(text) == {
        "num.io.threads": "4",
        "num.network.threads": "5",
        "socket.listen.backlog.size": "60",
        "listeners": "PLAINTEXT://127.0.0.1:9092,OTHER://127.0.0.1:9093",
        "log.dirs": "/tmp/a# not a comment inside a continuation",
        "empty.key": "",
        "with.equals": "a=b:c",
        "escaped=key": "v",
    }


def test_properties_value_escapes_like_java() -> None:
    # java.util.Properties turns "\\" into "\" and "\t" into a tab in values; a Windows path in a
    # Kafka server.properties is written with doubled backslashes.
    assert parse_properties("log.dirs=C:\\\\kafka\\\\logs\n") == {"log.dirs": "C:\\kafka\\logs"}


def test_properties_later_line_wins() -> None:
    assert parse_properties("a=1\na=2\n") == {"a": "2"}


def test_properties_file_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("broker.id=7\nnum.io.threads=2\nzookeeper.connect=localhost:2181\n",
                    encoding="utf-8")
    config = load_config(load_properties_file(path))
    assert config.node_id == 7
    assert config.num_io_threads == 2
    assert config.ignored_keys == ("zookeeper.connect",)


def test_missing_properties_file_names_the_option(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_properties_file(tmp_path / "nope.properties")
    assert info.value.key == "--config"
    assert "nope.properties" in str(info.value)


def test_parse_override() -> None:
    assert parse_override("num.io.threads=4") == ("num.io.threads", "4")
    assert parse_override(" a = b=c") == ("a", " b=c")
    for bad in ("no-equals", "=value", "  =x"):
        with pytest.raises(ConfigError) as info:
            parse_override(bad)
        assert info.value.key == "--override"
        assert "key=value" in str(info.value)


# ---------------------------------------------------------------------------- precedence
def test_later_sources_win() -> None:
    config = load_config({"num.io.threads": "4", "num.network.threads": "2"},
                         {"num.io.threads": "6"},
                         [("num.io.threads", "7")])
    assert config.num_io_threads == 7
    assert config.num_network_threads == 2


def test_broker_id_alias() -> None:
    assert load_config({"broker.id": "5"}).node_id == 5
    # alias and key are the same setting: the later source wins either way
    assert load_config({"broker.id": "5"}, {"node.id": "6"}).node_id == 6
    assert load_config({"node.id": "6"}, {"broker.id": "5"}).node_id == 5
    assert "broker.id" not in load_config({"broker.id": "5"}).ignored_keys


def test_keys_and_values_are_trimmed() -> None:
    config = load_config({" num.io.threads ": " 4 ", "listeners": " PLAINTEXT://127.0.0.1:0 "})
    assert config.num_io_threads == 4
    assert config.endpoints == (Endpoint("PLAINTEXT", "127.0.0.1", 0),)


# ------------------------------------------------------------------------ listener prefix
def test_listener_prefixed_keys() -> None:
    config = load_config({
        **TWO_LISTENERS,
        "max.connections": "100",
        "listener.name.plaintext.max.connections": "10",
        "listener.name.CONTROLLER.max.connection.creation.rate": "3",
        "listener.name.controller.num.network.threads": "1",
    })
    assert config.listener_setting("PLAINTEXT", "max.connections") == 10
    assert config.listener_setting("plaintext", "max.connections") == 10
    assert config.listener_setting("CONTROLLER", "max.connections") == 100  # broker-wide fallback
    assert config.listener_setting("CONTROLLER", "max.connection.creation.rate") == 3
    assert config.listener_setting("CONTROLLER", "num.network.threads") == 1
    assert config.listener_setting("PLAINTEXT", "num.network.threads") == 3
    assert config.ignored_keys == ()


def test_listener_prefixed_key_is_validated_under_its_own_name() -> None:
    error = error_of({"listener.name.plaintext.max.connections": "many"})
    assert error.key == "listener.name.plaintext.max.connections"
    assert "listener.name.plaintext.max.connections" in str(error)
    assert "int" in str(error)
    error = error_of({"listener.name.plaintext.max.connections": "-1"})
    assert error.key == "listener.name.plaintext.max.connections"
    assert "at least 0" in str(error)


def test_listener_prefix_must_name_a_listener() -> None:
    error = error_of({"listener.name.external.max.connections": "5"})
    assert "listener.name.external" in str(error)
    assert "listeners" in str(error)


def test_listener_connection_creation_rate_must_be_above_zero() -> None:
    # Kafka's ConnectionQuotasTest.testMaxListenerConnectionListenerMustBeAboveZero: a listener
    # connection rate of 0 is a ConfigException (it would also divide by zero in the throttle).
    error = error_of({"listener.name.plaintext.max.connection.creation.rate": "0"})
    assert "listener.name.plaintext.max.connection.creation.rate" in str(error)


def test_listener_prefixed_key_that_is_not_prefixable_is_ignored() -> None:
    config = load_config({"listener.name.plaintext.log.retention.ms": "5"})
    assert config.ignored_keys == ("listener.name.plaintext.log.retention.ms",)


def test_listener_prefixed_security_keys_are_kept_per_listener() -> None:
    config = load_config({"listener.name.plaintext.ssl.client.auth": "required",
                          "listener.name.plaintext.scram-sha-256.sasl.jaas.config": "x y;"})
    assert config.security_setting("PLAINTEXT", "ssl.client.auth") == "required"
    assert config.security_setting("PLAINTEXT", "scram-sha-256.sasl.jaas.config") == "x y;"
    assert config.ssl_client_auth == "none"
    error = error_of({"listener.name.plaintext.ssl.client.auth": "sometimes"})
    assert error.key == "listener.name.plaintext.ssl.client.auth"


# --------------------------------------------------------------------------- ignored keys
def test_unknown_and_kafka_only_keys_are_reported() -> None:
    config = load_config({"no.such.key": "1", "zookeeper.connect": "zk:2181",
                          "process.roles": "broker", "num.io.threads": "2"})
    assert config.ignored_keys == ("no.such.key", "process.roles", "zookeeper.connect")


@pytest.mark.parametrize("key", sorted(KAFKA_KEYS_WITHOUT_EFFECT))
def test_kafka_keys_without_effect_land_in_ignored_keys(key: str) -> None:
    assert load_config({key: "x"}).ignored_keys == (key,)


# ----------------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    ("key", "value", "allowed"),
    [
        ("num.io.threads", "eight", "type int"),
        ("num.io.threads", "1.5", "type int"),
        ("num.io.threads", "0", "at least 1"),
        ("num.network.threads", "0", "at least 1"),
        ("queued.max.requests", "0", "at least 1"),
        ("queued.max.connections", "0", "at least 1"),
        ("socket.request.max.bytes", "0", "at least 1"),
        ("socket.send.buffer.bytes", "-2", "at least -1"),
        ("socket.receive.buffer.bytes", "-2", "at least -1"),
        ("socket.listen.backlog.size", "0", "at least 1"),
        ("max.connections", "-1", "at least 0"),
        ("max.connections.per.ip", "-1", "at least 0"),
        ("max.connection.creation.rate", "-1", "at least 0"),
        ("connection.max.inflight.requests", "0", "between 1 and 1024"),
        ("connections.max.idle.ms", "soon", "type long"),
        ("auto.create.topics.enable", "yes", "type boolean"),
        ("logging.format", "xml", "one of json, console"),
        ("default.replication.factor", "3", "between 1 and 1"),
        ("node.id", "-1", "at least 0"),
        ("broker.id", "x", "type int"),
        # Kafka's INT and LONG are Java's: more is "Not a number of type INT"
        ("num.io.threads", "99999999999999999999", "type int (at most 2147483647)"),
        ("log.segment.bytes", "2147483648", "type int (at most 2147483647)"),
        ("node.id", "-2147483649", "type int"),
        ("connections.max.idle.ms", "9223372036854775808", "type long"),
        ("log.retention.bytes", "-9223372036854775809", "type long"),
        ("metrics.prometheus.listener", "127.0.0.1:99999", "between 0 and 65535"),
    ],
)
def test_bad_value_names_key_and_allowed(key: str, value: str, allowed: str) -> None:
    error = error_of({key: value})
    stored_key = "node.id" if key == "broker.id" else key
    assert error.key == stored_key
    assert stored_key in str(error)
    assert allowed in str(error)
    assert value.strip() in str(error)


@pytest.mark.parametrize("protocol", ["SSL", "SASL_PLAINTEXT", "SASL_SSL"])
def test_every_security_protocol_is_accepted(protocol: str) -> None:
    # The keystore and SASL settings are checked when the listeners are built (tests/security).
    config = load_config({"listeners": f"{protocol}://127.0.0.1:9093"})
    assert config.security_protocols[protocol] == protocol


def test_listener_without_protocol_mapping_fails() -> None:
    error = error_of({"listeners": "EXTERNAL://127.0.0.1:9093"})
    assert error.key == "listener.security.protocol.map"
    assert "EXTERNAL" in str(error)


def test_bad_protocol_map_entry() -> None:
    error = error_of({"listener.security.protocol.map": "PLAINTEXT:TLS"})
    assert error.key == "listener.security.protocol.map"
    assert "PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL" in str(error)


@pytest.mark.parametrize(
    ("listeners", "allowed"),
    [
        ("localhost:9092", "NAME://host:port"),
        ("PLAINTEXT://localhost", "NAME://host:port"),
        ("PLAINTEXT://localhost:70000", "between 0 and 65535"),
        ("PLAINTEXT://a:1,PLAINTEXT://b:2", "only once"),
        ("", "at least one listener"),
    ],
)
def test_bad_listeners(listeners: str, allowed: str) -> None:
    error = error_of({"listeners": listeners})
    assert error.key == "listeners"
    assert allowed in str(error)


def test_listener_hosts_ipv6_and_wildcard() -> None:
    config = load_config({"listeners": "PLAINTEXT://[::1]:9092"})
    assert config.endpoints[0].bind_host == "::1"
    config = load_config({"listeners": "PLAINTEXT://:9092"})
    assert config.endpoints[0].bind_host is None
    assert str(config.endpoints[0]) == "PLAINTEXT://:9092"


@pytest.mark.parametrize("host", ["0.0.0.0", "[::]"])
def test_advertised_wildcard_fails(host: str) -> None:
    error = error_of({"advertised.listeners": f"PLAINTEXT://{host}:9092"})
    assert error.key == "advertised.listeners"
    assert "wildcard" in str(error)


def test_advertised_listener_must_be_a_listener() -> None:
    error = error_of({"advertised.listeners": "EXTERNAL://broker.example:9092"})
    assert error.key == "advertised.listeners"
    assert "EXTERNAL" in str(error)


def test_advertised_listeners_parsed() -> None:
    config = load_config({"advertised.listeners": "PLAINTEXT://broker.example:19092"})
    assert config.advertised_endpoints == (Endpoint("PLAINTEXT", "broker.example", 19092),)


def test_control_plane_listener_must_be_a_listener() -> None:
    error = error_of({**TWO_LISTENERS, "control.plane.listener.name": "INTERNAL"})
    assert error.key == "control.plane.listener.name"
    assert "CONTROLLER, PLAINTEXT" in str(error)


def test_control_plane_needs_a_data_plane_listener() -> None:
    error = error_of({"control.plane.listener.name": "PLAINTEXT"})
    assert error.key == "control.plane.listener.name"
    assert "second listener" in str(error)


def test_control_plane_listener_accepted() -> None:
    config = load_config({**TWO_LISTENERS, "control.plane.listener.name": "controller"})
    assert config.control_plane_listener_name == "controller"


@pytest.mark.parametrize("value", ["1", "1000", "104857599"])
def test_queued_max_request_bytes_below_request_max_fails(value: str) -> None:
    error = error_of({"queued.max.request.bytes": value})
    assert error.key == "queued.max.request.bytes"
    assert "socket.request.max.bytes (104857600)" in str(error)


@pytest.mark.parametrize("value", ["-1", "0", "104857600", "500000000"])
def test_queued_max_request_bytes_allowed(value: str) -> None:
    assert load_config({"queued.max.request.bytes": value}).queued_max_request_bytes == int(value)


def test_queued_max_request_bytes_compared_with_configured_request_max() -> None:
    config = load_config({"socket.request.max.bytes": "1000", "queued.max.request.bytes": "1000"})
    assert config.queued_max_request_bytes == 1000
    error = error_of({"socket.request.max.bytes": "1000", "queued.max.request.bytes": "999"})
    assert "(1000)" in str(error)


def test_zero_max_connections_per_ip_needs_overrides() -> None:
    error = error_of({"max.connections.per.ip": "0"})
    assert error.key == "max.connections.per.ip"
    assert "max.connections.per.ip.overrides" in str(error)
    config = load_config({"max.connections.per.ip": "0",
                          "max.connections.per.ip.overrides": "127.0.0.1:5"})
    assert config.ip_overrides == {"127.0.0.1": 5}


def test_ip_overrides_parsed() -> None:
    config = load_config({"max.connections.per.ip.overrides":
                          "localhost:3, 10.0.0.1:0,[::1]:7"})
    assert config.ip_overrides == {"localhost": 3, "10.0.0.1": 0, "::1": 7}


@pytest.mark.parametrize("value", ["localhost", "localhost:x", ":3", "host:-1"])
def test_bad_ip_overrides(value: str) -> None:
    error = error_of({"max.connections.per.ip.overrides": value})
    assert error.key == "max.connections.per.ip.overrides"
    assert "host:count" in str(error)


def test_group_session_timeouts_ordered() -> None:
    error = error_of({"group.min.session.timeout.ms": "10", "group.max.session.timeout.ms": "5"})
    assert error.key == "group.min.session.timeout.ms"
    assert "group.max.session.timeout.ms" in str(error)


def test_prometheus_listener_must_be_host_port() -> None:
    error = error_of({"metrics.prometheus.listener": "localhost"})
    assert error.key == "metrics.prometheus.listener"
    assert "host:port" in str(error)
    assert load_config({"metrics.prometheus.listener": "127.0.0.1:0"}).metrics_prometheus_listener


# ----------------------------------------------------------------------------- derived
def test_data_dir_prefers_first_log_dir(tmp_path: Path) -> None:
    config = load_config({"log.dirs": f"{tmp_path}/a, {tmp_path}/b"})
    assert config.data_dir == tmp_path / "a"
    assert load_config({"log.dir": str(tmp_path)}).data_dir == tmp_path


def test_retention_resolution_like_kafka() -> None:
    assert load_config().log_retention_effective_ms == 168 * 3_600_000
    assert load_config({"log.retention.minutes": "5"}).log_retention_effective_ms == 300_000
    config = load_config({"log.retention.minutes": "5", "log.retention.ms": "1234"})
    assert config.log_retention_effective_ms == 1234
    assert load_config({"log.roll.ms": "99"}).log_roll_effective_ms == 99
    assert load_config().log_roll_effective_ms == 168 * 3_600_000


def test_int_max_constant() -> None:
    assert INT_MAX == 2**31 - 1


def test_rebalance_protocols_must_keep_classic() -> None:
    assert load_config({"group.coordinator.rebalance.protocols": "classic"}) \
        .group_coordinator_rebalance_protocols == "classic"
    for bad in ("consumer", "classic,eager"):
        with pytest.raises(ConfigError):
            load_config({"group.coordinator.rebalance.protocols": bad})
