"""The TLS listener's start-up rules, sans-IO but for certificate files (trustme): who may
connect (``ssl.client.auth``), which protocol versions, the key's password, and the principal
mapping's case rules. The mutation run left these open (docs/development.md)."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from tests.security.conftest import Certs, tls_settings
from trio_broker.config import ConfigError, load_config
from trio_broker.security.tls import PrincipalMapper, build_ssl_context


def context(certs: Certs, **extra: str) -> ssl.SSLContext:
    return build_ssl_context(load_config(tls_settings(certs, **extra)), "SSL")


@pytest.mark.parametrize("auth, mode", [("none", ssl.CERT_NONE),
                                        ("requested", ssl.CERT_OPTIONAL),
                                        ("required", ssl.CERT_REQUIRED)])
def test_client_auth_decides_whether_a_client_certificate_is_asked_for(
        certs: Certs, auth: str, mode: ssl.VerifyMode) -> None:
    ctx = context(certs, **{"ssl.client.auth": auth, "ssl.truststore.location": str(certs.ca_pem)})
    assert ctx.verify_mode == mode


@pytest.mark.parametrize("auth", ["requested", "required"])
def test_client_auth_without_a_truststore_fails_at_start_naming_the_key(
        certs: Certs, auth: str) -> None:
    with pytest.raises(ConfigError) as refused:
        context(certs, **{"ssl.client.auth": auth})
    assert "ssl.client.auth" in str(refused.value)
    with pytest.raises(ConfigError) as per_listener:
        context(certs, **{"listener.name.ssl.ssl.client.auth": auth})
    assert "listener.name.ssl.ssl.client.auth" in str(per_listener.value)
    context(certs, **{"ssl.client.auth": auth,
                      "ssl.truststore.certificates": certs.ca_pem.read_text()})


@pytest.mark.parametrize("protocols, lowest, highest", [
    ("TLSv1.2", ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_2),
    ("TLSv1.3", ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_3),
    ("TLSv1.3, TLSv1.2", ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3),
])
def test_enabled_protocols_bound_the_versions(certs: Certs, protocols: str,
                                              lowest: ssl.TLSVersion,
                                              highest: ssl.TLSVersion) -> None:
    ctx = context(certs, **{"ssl.enabled.protocols": protocols})
    assert (ctx.minimum_version, ctx.maximum_version) == (lowest, highest)


@pytest.mark.parametrize("protocols", ["SSLv3", "TLSv1.2,TLSv9", " , "])
def test_unknown_or_no_protocols_fail_at_start(certs: Certs, protocols: str) -> None:
    with pytest.raises(ConfigError) as refused:
        context(certs, **{"ssl.enabled.protocols": protocols})
    assert "ssl.enabled.protocols" in str(refused.value)


def _encrypted_key(certs: Certs, password: bytes) -> str:
    key = serialization.load_pem_private_key(certs.keystore.read_bytes(), password=None)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.BestAvailableEncryption(password)).decode()


def _chain(keystore: Path) -> str:
    text = keystore.read_text()
    return text[text.index("-----BEGIN CERTIFICATE-----"):]


def test_an_inline_encrypted_key_is_opened_with_the_key_password(certs: Certs) -> None:
    inline = {"ssl.keystore.location": "", "ssl.keystore.certificate.chain": _chain(certs.keystore),
              "ssl.keystore.key": _encrypted_key(certs, b"s3cret")}
    context(certs, **inline, **{"ssl.key.password": "s3cret"})
    with pytest.raises(ConfigError) as wrong:
        context(certs, **inline, **{"ssl.key.password": "wrong"})
    assert "ssl.keystore.certificate.chain" in str(wrong.value)
    with pytest.raises(ConfigError):
        context(certs, **inline)  # no password given


def test_mapping_rules_apply_their_case_and_the_first_match_wins() -> None:
    mapper = PrincipalMapper.parse(
        "RULE:^CN=([a-zA-Z]+),OU=Ops$/$1/U, RULE:^CN=([a-zA-Z]+),.*$/$1/L,"
        " RULE:^UID=(.*)$/user-$1/, DEFAULT")
    assert mapper.name("CN=Alice,OU=Ops") == "ALICE"
    assert mapper.name("CN=Alice,OU=Dev") == "alice"
    assert mapper.name("UID=Bob") == "user-Bob"  # no case flag: as it is
    assert mapper.name("O=Acme") == "O=Acme"  # DEFAULT: the DN itself


def test_a_dn_no_rule_matches_without_default_is_refused() -> None:
    mapper = PrincipalMapper.parse("RULE:^CN=(.*)$/$1/")
    with pytest.raises(ValueError, match="No rules apply"):
        mapper.name("O=Acme")


def test_the_inline_key_leaves_no_file_behind(certs: Certs, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """``load_cert_chain`` reads files only: the private key goes through a temporary file,
    which must be gone at once (and on failure too)."""
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    inline = {"ssl.keystore.location": "", "ssl.keystore.certificate.chain": _chain(certs.keystore),
              "ssl.keystore.key": _encrypted_key(certs, b"pw")}
    context(certs, **inline, **{"ssl.key.password": "pw"})
    with pytest.raises(ConfigError):
        context(certs, **inline, **{"ssl.key.password": "wrong"})
    assert list(tmp_path.iterdir()) == []
