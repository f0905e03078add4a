"""A SASL listener's keys checked at start-up (``security.listeners._sasl_fields``): each refusal
names the key as the user wrote it (with the ``listener.name.<l>.`` prefix when it was given per
listener), says what is allowed, and never repeats a JAAS entry (it holds passwords)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trio_broker.config import ConfigError, load_config
from trio_broker.security.listeners import listener_security
from trio_broker.security.scram import ScramStore

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_admin="s3cret-admin";')


def refusal(tmp_path: Path, **settings: str) -> ConfigError:
    config = load_config({"listeners": "SASL_PLAINTEXT://127.0.0.1:0",
                          "log.dirs": str(tmp_path), **settings})
    with pytest.raises(ConfigError) as caught:
        listener_security(config, ScramStore(tmp_path))
    return caught.value


def test_unknown_mechanisms_name_the_key_as_given(tmp_path: Path) -> None:
    broker_wide = refusal(tmp_path, **{"sasl.enabled.mechanisms": "PLAIN,GSSAPI"})
    assert broker_wide.key == "sasl.enabled.mechanisms"
    assert broker_wide.allowed.startswith("GSSAPI not implemented; allowed: ")
    assert "SCRAM-SHA-256" in broker_wide.allowed
    per_listener = refusal(tmp_path, **{
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "OAUTHBEARER"})
    assert per_listener.key == "listener.name.sasl_plaintext.sasl.enabled.mechanisms"
    assert refusal(tmp_path, **{"sasl.enabled.mechanisms": " , "}).allowed == \
        "a SASL listener needs at least one mechanism"


def test_plain_needs_its_jaas_entry(tmp_path: Path) -> None:
    missing = refusal(tmp_path, **{"sasl.enabled.mechanisms": "PLAIN"})
    assert missing.key == "listener.name.sasl_plaintext.plain.sasl.jaas.config"
    assert missing.value is None
    assert "enables PLAIN and needs its JAAS entry" in missing.allowed


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_a_broken_jaas_entry_is_named_and_hidden(tmp_path: Path, mechanism: str) -> None:
    key = f"listener.name.sasl_plaintext.{mechanism.lower()}.sasl.jaas.config"
    broken = JAAS.replace('";', '"')  # no closing semicolon
    error = refusal(tmp_path, **{"sasl.enabled.mechanisms": mechanism, key: broken})
    assert error.key == key
    assert error.value == "(hidden)"
    assert "s3cret-admin" not in str(error)


def test_good_keys_start(tmp_path: Path) -> None:
    config = load_config({"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path),
                          "sasl.enabled.mechanisms": "plain, scram-sha-512",
                          "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS})
    security = listener_security(config, ScramStore(tmp_path))["SASL_PLAINTEXT"]
    assert security.mechanisms == ("PLAIN", "SCRAM-SHA-512")
    assert security.plain == {"admin": "s3cret-admin"}
