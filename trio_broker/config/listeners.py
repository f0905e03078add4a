"""Listeners: the ``listeners`` / ``advertised.listeners`` endpoints, the security protocol map,
per-IP connection overrides, and which keys may be given per listener
(``listener.name.<listener>.<key>``).
"""

from __future__ import annotations

import re

import attrs

from .fields import ConfigError

#: Listener-scoped settings that may be given as ``listener.name.<listener>.<key>``.
LISTENER_PREFIXABLE_KEYS = frozenset(
    {"max.connections", "max.connection.creation.rate", "num.network.threads"}
)

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
IMPLEMENTED_SECURITY_PROTOCOLS = SECURITY_PROTOCOLS

#: Security keys that may be given per listener (``listener.name.<l>.<key>``), kept as strings and
#: parsed with the broker-wide key's parser; ``<mechanism>.sasl.jaas.config`` is per listener only.
LISTENER_SECURITY_KEYS = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.key.password",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
    "ssl.truststore.certificates", "ssl.client.auth", "ssl.enabled.protocols", "ssl.protocol",
    "ssl.cipher.suites", "ssl.endpoint.identification.algorithm", "ssl.principal.mapping.rules",
    "sasl.enabled.mechanisms", "connections.max.reauth.ms", "sasl.server.max.receive.size",
})
_JAAS_KEY_RE = re.compile(r"^(?P<mechanism>[a-z0-9-]+)\.sasl\.jaas\.config$")


# --------------------------------------------------------------------------- listeners
_LISTENER_RE = re.compile(r"^(?P<name>[A-Za-z0-9_]+)://(?P<host>\[[^\]]*\]|[^:]*):(?P<port>\d+)$")


@attrs.frozen
class Endpoint:
    """One entry of ``listeners`` or ``advertised.listeners``."""

    listener_name: str
    host: str
    port: int

    @property
    def bind_host(self) -> str | None:
        """The address to bind; an empty host means every interface, as in Kafka."""
        return self.host.strip("[]") or None

    def __str__(self) -> str:
        return f"{self.listener_name}://{self.host}:{self.port}"


def parse_endpoints(key: str, text: str | None) -> tuple[Endpoint, ...]:
    """Parse a comma-separated listener list (``NAME://host:port,...``)."""
    if not text:
        return ()
    endpoints = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        match = _LISTENER_RE.match(item)
        if match is None:
            raise ConfigError(key, text, "each listener must look like NAME://host:port")
        port = int(match["port"])
        if port > 65535:
            raise ConfigError(key, text, "ports must be between 0 and 65535")
        endpoints.append(Endpoint(match["name"].upper(), match["host"], port))
    names = [e.listener_name for e in endpoints]
    if len(set(names)) != len(names):
        raise ConfigError(key, text, "each listener name may appear only once")
    return tuple(endpoints)


def parse_protocol_map(text: str) -> dict[str, str]:
    """Parse ``listener.security.protocol.map`` (``NAME:PROTOCOL,...``)."""
    mapping: dict[str, str] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        protocol = protocol.strip().upper()
        if not sep or protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(
                "listener.security.protocol.map",
                text,
                "entries must be NAME:PROTOCOL with PROTOCOL one of " + ", ".join(SECURITY_PROTOCOLS),
            )
        mapping[name.strip().upper()] = protocol
    return mapping


def parse_ip_overrides(text: str) -> dict[str, int]:
    """Parse ``max.connections.per.ip.overrides`` (``host:n,ip:n``) without resolving names."""
    overrides: dict[str, int] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        try:
            value = int(count)
        except ValueError:
            value = -1
        if not sep or not host or value < 0:
            raise ConfigError(
                "max.connections.per.ip.overrides",
                text,
                "entries must be host:count or ip:count with a non-negative count",
            )
        overrides[host.strip("[]")] = value
    return overrides
