"""What a SASL listener is built with at start-up (``security.listeners._sasl_fields``), sans-IO
but for the data directory: the enabled mechanisms as Kafka reads the list, the PLAIN users of
the listener's own JAAS entry, which JAAS entries are read at all, the session lifetime
(``connections.max.reauth.ms``) and the pre-authentication frame limit
(``sasl.server.max.receive.size``), each broker-wide or per listener, and the credentials file
of the data directory. The refusals' keys and texts are in test_pin_sasl_listener_keys.py. Each
test kills mutants that survived ``nox -s mutation`` (docs/development.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trio_broker.config import ConfigError, load_config
from trio_broker.security.listeners import ListenerSecurity, listener_security
from trio_broker.security.scram import FILE_NAME, ScramStore

pytestmark = pytest.mark.timeout(30)

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_admin="admin-secret" user_alice="alice-secret";')
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
BROKEN = "org.apache.kafka.common.security.scram.ScramLoginModule required"  # no ';'


def security(tmp_path: Path, settings: dict[str, str], store: ScramStore | None = None
             ) -> ListenerSecurity:
    """The SASL_PLAINTEXT listener built from ``settings``."""
    config = load_config({"listeners": "SASL_PLAINTEXT://127.0.0.1:0",
                          "log.dirs": str(tmp_path), **settings})
    return listener_security(config, store)["SASL_PLAINTEXT"]


def test_mechanisms_are_read_as_kafka_lists_them(tmp_path: Path) -> None:
    got = security(tmp_path, {"sasl.enabled.mechanisms": " scram-sha-256 ,, Scram-Sha-512 ,"})
    assert got.mechanisms == ("SCRAM-SHA-256", "SCRAM-SHA-512")
    assert got.sasl and got.plain == {}  # no PLAIN: no users, and no JAAS entry needed
    assert got.new_authenticator() is not None


def test_a_mechanism_list_refused_is_shown_as_written(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        security(tmp_path, {"sasl.enabled.mechanisms": "PLAIN, gssapi"})
    assert (refused.value.key, refused.value.value) == ("sasl.enabled.mechanisms",
                                                        "PLAIN, gssapi")
    assert refused.value.allowed.startswith("GSSAPI not implemented; allowed: ")


def test_per_listener_mechanisms_replace_the_broker_wide_ones(tmp_path: Path) -> None:
    settings = {"listeners": "CLIENT://127.0.0.1:0,ADMIN://127.0.0.1:0",
                "listener.security.protocol.map": "CLIENT:SASL_PLAINTEXT,ADMIN:SASL_PLAINTEXT",
                "log.dirs": str(tmp_path), "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                "listener.name.client.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
                "listener.name.client.plain.sasl.jaas.config": PLAIN_JAAS}
    built = listener_security(load_config(settings), ScramStore(tmp_path))
    assert built["CLIENT"].mechanisms == ("PLAIN", "SCRAM-SHA-256")
    assert built["CLIENT"].plain == {"admin": "admin-secret", "alice": "alice-secret"}
    assert built["ADMIN"].mechanisms == ("SCRAM-SHA-512",)
    assert built["ADMIN"].plain == {}


def test_plain_users_come_from_the_listeners_own_jaas_entry(tmp_path: Path) -> None:
    """Kafka's ``listener.name.<l>.plain.sasl.jaas.config``, the listener's name lower-cased."""
    settings = {"listeners": "CLIENT://127.0.0.1:0",
                "listener.security.protocol.map": "CLIENT:SASL_PLAINTEXT",
                "log.dirs": str(tmp_path), "sasl.enabled.mechanisms": "PLAIN"}
    with pytest.raises(ConfigError) as missing:
        listener_security(load_config(settings), ScramStore(tmp_path))
    assert missing.value.key == "listener.name.client.plain.sasl.jaas.config"
    assert missing.value.allowed == (
        'listener CLIENT enables PLAIN and needs its JAAS entry '
        '(PlainLoginModule required user_<name>="<password>";)')
    settings["listener.name.client.plain.sasl.jaas.config"] = PLAIN_JAAS
    built = listener_security(load_config(settings), ScramStore(tmp_path))["CLIENT"]
    assert built.plain == {"admin": "admin-secret", "alice": "alice-secret"}
    auth = built.new_authenticator()
    assert auth is not None and auth.handshake("PLAIN")
    assert auth.authenticate(b"\0alice\0alice-secret", 0.0)[0]


def test_a_scram_jaas_entry_is_checked_and_the_disabled_ones_are_not_read(
        tmp_path: Path) -> None:
    prefix = "listener.name.sasl_plaintext."
    # a ScramLoginModule entry needs no options on a broker, but its syntax is checked
    got = security(tmp_path, {"sasl.enabled.mechanisms": "SCRAM-SHA-256",
                                prefix + "scram-sha-256.sasl.jaas.config": SCRAM_JAAS,
                                # PLAIN and SCRAM-SHA-512 are not enabled: never read
                                prefix + "plain.sasl.jaas.config": BROKEN,
                                prefix + "scram-sha-512.sasl.jaas.config": BROKEN})
    assert got.mechanisms == ("SCRAM-SHA-256",) and got.plain == {}
    with pytest.raises(ConfigError) as broken:
        security(tmp_path, {"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
                              prefix + "plain.sasl.jaas.config": PLAIN_JAAS,
                              prefix + "scram-sha-512.sasl.jaas.config": BROKEN})
    assert broken.value.key == prefix + "scram-sha-512.sasl.jaas.config"
    assert (broken.value.value, broken.value.allowed) == ("(hidden)",
                                                          "a login module must end with ';'")


def test_a_broken_plain_entry_says_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as broken:
        security(tmp_path, {"sasl.enabled.mechanisms": "PLAIN",
                              "listener.name.sasl_plaintext.plain.sasl.jaas.config":
                              PLAIN_JAAS.rstrip(";")})
    assert (broken.value.value, broken.value.allowed) == ("(hidden)",
                                                          "a login module must end with ';'")


def test_session_lifetime_and_receive_limit_broker_wide_or_per_listener(tmp_path: Path) -> None:
    scram = {"sasl.enabled.mechanisms": "SCRAM-SHA-256"}
    default = security(tmp_path, scram)
    assert (default.reauth_ms, default.max_receive_size) == (0, 524288)
    broker_wide = security(tmp_path, {**scram, "connections.max.reauth.ms": "60000",
                                      "sasl.server.max.receive.size": "4096"})
    assert (broker_wide.reauth_ms, broker_wide.max_receive_size) == (60000, 4096)
    per_listener = security(tmp_path, {
        **scram, "connections.max.reauth.ms": "60000",
        "listener.name.sasl_plaintext.connections.max.reauth.ms": "5000",
        "listener.name.sasl_plaintext.sasl.server.max.receive.size": "8192"})
    assert (per_listener.reauth_ms, per_listener.max_receive_size) == (5000, 8192)
    auth = per_listener.new_authenticator()
    assert auth is not None and auth.reauth_ms == 5000


def test_without_a_store_given_the_data_directorys_credentials_are_used(
        tmp_path: Path) -> None:
    got = security(tmp_path, {"sasl.enabled.mechanisms": "SCRAM-SHA-256"}, store=None)
    assert got.scram is not None
    assert got.scram.path == tmp_path / FILE_NAME
    given = ScramStore(tmp_path / "elsewhere")
    assert security(tmp_path, {"sasl.enabled.mechanisms": "SCRAM-SHA-256"},
                    store=given).scram is given
