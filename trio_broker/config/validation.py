"""Cross-key validation: rules that involve more than one setting (Kafka's ``KafkaConfig``
checks); single values were checked when they were parsed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .fields import ConfigError
from .listeners import IMPLEMENTED_SECURITY_PROTOCOLS

if TYPE_CHECKING:
    from .settings import BrokerConfig


def validate(config: BrokerConfig) -> None:
    """Cross-field rules (Kafka's KafkaConfig checks); single values were checked on parse."""
    endpoints = config.endpoints
    if not endpoints:
        raise ConfigError("listeners", config.listeners, "at least one listener is required")
    protocols = config.security_protocols
    for endpoint in endpoints:
        protocol = protocols.get(endpoint.listener_name)
        if protocol is None:
            raise ConfigError(
                "listener.security.protocol.map",
                config.listener_security_protocol_map,
                f"listener {endpoint.listener_name} has no security protocol mapped",
            )
        if protocol not in IMPLEMENTED_SECURITY_PROTOCOLS:
            raise ConfigError(
                "listeners",
                str(endpoint),
                f"security protocol {protocol} of listener {endpoint.listener_name} is not "
                "implemented yet; allowed: " + ", ".join(IMPLEMENTED_SECURITY_PROTOCOLS),
            )
    names = {e.listener_name for e in endpoints}
    for advertised in config.advertised_endpoints:
        if advertised.listener_name not in names:
            raise ConfigError(
                "advertised.listeners", config.advertised_listeners,
                f"listener {advertised.listener_name} is not in listeners",
            )
        if advertised.host in ("0.0.0.0", "::", "[::]"):
            raise ConfigError(
                "advertised.listeners", config.advertised_listeners,
                "advertising the wildcard address is not allowed",
            )
    if config.control_plane_listener_name is not None:
        control = config.control_plane_listener_name.upper()
        if control not in names:
            raise ConfigError(
                "control.plane.listener.name", config.control_plane_listener_name,
                "must name one of the listeners: " + ", ".join(sorted(names)),
            )
        if len(names) < 2:
            raise ConfigError(
                "control.plane.listener.name", config.control_plane_listener_name,
                "needs a second listener for the data plane",
            )
    for listener in config.listener_security:
        if listener.upper() not in names:
            raise ConfigError(
                f"listener.name.{listener}", listener, "must name one of the listeners"
            )
    for listener, overrides in config.listener_overrides.items():
        if listener.upper() not in names:
            raise ConfigError(
                f"listener.name.{listener}", listener, "must name one of the listeners"
            )
        if overrides.get("max.connection.creation.rate", 1) <= 0:
            # Kafka refuses a listener rate of zero (ConnectionQuotas.validateReconfiguration).
            raise ConfigError(f"listener.name.{listener}.max.connection.creation.rate",
                              overrides["max.connection.creation.rate"], "must be above 0")
    if 0 < config.queued_max_request_bytes < config.socket_request_max_bytes:
        raise ConfigError(
            "queued.max.request.bytes", config.queued_max_request_bytes,
            f"must be <= 0 or at least socket.request.max.bytes ({config.socket_request_max_bytes})",
        )
    ip_overrides = config.ip_overrides  # parses, so a malformed value fails here
    if config.max_connections_per_ip == 0 and not ip_overrides:
        raise ConfigError(
            "max.connections.per.ip", 0,
            "may be 0 only when max.connections.per.ip.overrides is set",
        )
    if config.group_min_session_timeout_ms > config.group_max_session_timeout_ms:
        raise ConfigError(
            "group.min.session.timeout.ms", config.group_min_session_timeout_ms,
            "must not exceed group.max.session.timeout.ms",
        )
    if config.metrics_prometheus_listener is not None:
        host, sep, port = config.metrics_prometheus_listener.rpartition(":")
        if not sep or not port.isdigit():
            raise ConfigError(
                "metrics.prometheus.listener", config.metrics_prometheus_listener,
                "must look like host:port",
            )
        if int(port) > 65535:
            raise ConfigError(
                "metrics.prometheus.listener", config.metrics_prometheus_listener,
                "the port must be between 0 and 65535",
            )
