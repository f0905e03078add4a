"""What each listener needs for security, built once at start-up from the configuration."""

from __future__ import annotations

import ssl
from typing import Any

import attrs

from ..config import BrokerConfig, ConfigError
from .sasl import JaasError, SaslAuthenticator, check_mechanisms, parse_jaas, plain_users
from .scram import ScramStore
from .tls import PrincipalMapper, build_ssl_context, subject_dn


@attrs.frozen
class ListenerSecurity:
    """A listener's TLS context (SSL, SASL_SSL), SASL mechanisms and PLAIN users (SASL_*)."""

    listener: str
    protocol: str
    ssl_context: ssl.SSLContext | None = None
    principal_mapper: PrincipalMapper | None = None
    mechanisms: tuple[str, ...] = ()
    plain: dict[str, str] = attrs.field(factory=dict)
    scram: ScramStore | None = None
    reauth_ms: int = 0
    #: sasl.server.max.receive.size: the frame limit until the connection has authenticated.
    max_receive_size: int = 0

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def certificate_principal(self, cert: dict[str, Any] | None) -> str | None:
        """The principal of an SSL connection: ``User:`` + the mapped subject DN of the client
        certificate, ``User:ANONYMOUS`` without one; None when no mapping rule applies."""
        if not cert or self.principal_mapper is None:
            return "User:ANONYMOUS"
        try:
            return "User:" + self.principal_mapper.name(subject_dn(cert))
        except ValueError:
            return None

    def new_authenticator(self) -> SaslAuthenticator | None:
        """The per-connection SASL state (None on a listener without SASL)."""
        if not self.sasl:
            return None
        store = self.scram
        return SaslAuthenticator(self.mechanisms, self.plain,
                                 store.get if store is not None else lambda _u, _m: None,
                                 self.reauth_ms)


def listener_security(config: BrokerConfig, store: ScramStore | None = None
                      ) -> dict[str, ListenerSecurity]:
    """Every listener's security, by upper-case name; :class:`ConfigError` names the bad key."""
    protocols = config.security_protocols
    result: dict[str, ListenerSecurity] = {}
    for endpoint in config.endpoints:
        name = endpoint.listener_name
        protocol = protocols[name]
        fields: dict[str, object] = {}
        if protocol in ("SSL", "SASL_SSL"):
            fields["ssl_context"] = build_ssl_context(config, name)
            fields["principal_mapper"] = PrincipalMapper.parse(
                config.security_setting(name, "ssl.principal.mapping.rules"))
        if protocol.startswith("SASL_"):
            fields.update(_sasl_fields(config, name, store))
        result[name] = ListenerSecurity(name, protocol, **fields)  # type: ignore[arg-type]
    return result


def _sasl_fields(config: BrokerConfig, name: str, store: ScramStore | None
                 ) -> dict[str, object]:
    prefix = f"listener.name.{name.lower()}."
    text = config.security_setting(name, "sasl.enabled.mechanisms")
    mechanisms = tuple(m.strip().upper() for m in text.split(",") if m.strip())
    problem = check_mechanisms(mechanisms)
    if problem:
        given = "sasl.enabled.mechanisms" in config.listener_security.get(name.lower(), {})
        raise ConfigError((prefix if given else "") + "sasl.enabled.mechanisms", text, problem)
    plain: dict[str, str] = {}
    if "PLAIN" in mechanisms:
        key = "plain.sasl.jaas.config"
        jaas = config.security_setting(name, key)
        if not jaas:
            raise ConfigError(prefix + key, None,
                              f"listener {name} enables PLAIN and needs its JAAS entry "
                              "(PlainLoginModule required user_<name>=\"<password>\";)")
        try:
            plain = plain_users(parse_jaas(jaas))
        except JaasError as exc:
            raise ConfigError(prefix + key, "(hidden)", str(exc)) from None
    for mechanism in mechanisms:
        key = f"{mechanism.lower()}.sasl.jaas.config"
        jaas = config.security_setting(name, key)
        if jaas and mechanism != "PLAIN":
            try:
                parse_jaas(jaas)  # ScramLoginModule needs no options on a broker; check syntax
            except JaasError as exc:
                raise ConfigError(prefix + key, "(hidden)", str(exc)) from None
    if store is None:
        store = ScramStore(config.data_dir)
    return {"mechanisms": mechanisms, "plain": plain, "scram": store,
            "reauth_ms": config.security_setting(name, "connections.max.reauth.ms"),
            "max_receive_size": config.security_setting(name, "sasl.server.max.receive.size")}
