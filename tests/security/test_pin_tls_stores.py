"""The TLS listener's keystore and truststore at start-up (``security.tls._load_keystore`` and
``_load_truststore``), with certificate files from trustme: which key opens an encrypted private
key (Kafka's ``ssl.key.password``; ``ssl.keystore.password`` and ``ssl.truststore.password`` are
not used by PEM stores), a keystore given twice or by halves, and each refusal naming the key as
the operator wrote it (with ``listener.name.<l>.`` when given per listener) and its value (never
an inline PEM). Each test kills mutants that survived ``nox -s mutation``
(docs/development.md)."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from tests.security.conftest import Certs, tls_settings
from trio_broker.config import ConfigError, load_config
from trio_broker.security.tls import build_ssl_context

pytestmark = pytest.mark.timeout(30)

PER_LISTENER = "listener.name.ssl."


def context(certs: Certs, **extra: str) -> ssl.SSLContext:
    return build_ssl_context(load_config(tls_settings(certs, **extra)), "SSL")


def refusal(certs: Certs, **extra: str) -> ConfigError:
    with pytest.raises(ConfigError) as refused:
        context(certs, **extra)
    return refused.value


def encrypted_key(certs: Certs, password: bytes) -> str:
    key = serialization.load_pem_private_key(certs.keystore.read_bytes(), password=None)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.BestAvailableEncryption(password)).decode()


def chain(certs: Certs) -> str:
    text = certs.keystore.read_text()
    return text[text.index("-----BEGIN CERTIFICATE-----"):]


@pytest.fixture
def encrypted_keystore(certs: Certs, tmp_path: Path) -> Path:
    """The broker's key encrypted with "s3cret" and its chain, in one PEM file."""
    path = tmp_path / "broker-encrypted.pem"
    path.write_text(encrypted_key(certs, b"s3cret") + chain(certs))
    return path


def served_certificate(ctx: ssl.SSLContext) -> None:
    """The context holds a usable key: a handshake in memory completes (the server's side)."""
    client_ctx = ssl.create_default_context()
    client_ctx.check_hostname = False
    client_ctx.verify_mode = ssl.CERT_NONE
    server_in, server_out, client_in, client_out = (ssl.MemoryBIO() for _ in range(4))
    server = ctx.wrap_bio(server_in, server_out, server_side=True)
    client = client_ctx.wrap_bio(client_in, client_out)
    done: set[int] = set()
    for _ in range(10):
        for side in (client, server):
            try:
                side.do_handshake()
                done.add(id(side))
            except ssl.SSLWantReadError:
                pass
        server_in.write(client_out.read())
        client_in.write(server_out.read())
        if len(done) == 2:
            assert client.getpeercert(binary_form=True)
            return
    raise AssertionError("no TLS handshake")


def test_an_encrypted_keystore_file_is_opened_with_the_key_password(
        certs: Certs, encrypted_keystore: Path) -> None:
    location = str(encrypted_keystore)
    served_certificate(context(certs, **{"ssl.keystore.location": location,
                                         "ssl.key.password": "s3cret"}))
    served_certificate(context(certs, **{"ssl.keystore.location": location,
                                         PER_LISTENER + "ssl.key.password": "s3cret"}))
    wrong = refusal(certs, **{"ssl.keystore.location": location, "ssl.key.password": "nope"})
    assert (wrong.key, wrong.value) == ("ssl.keystore.location", location)
    assert wrong.allowed.startswith("cannot load the certificate chain and key (")
    assert wrong.allowed.endswith("); a wrong ssl.key.password fails here too")


def test_the_keystore_password_is_not_the_key_password(
        certs: Certs, encrypted_keystore: Path) -> None:
    """Kafka's PEM stores have no store password: ``ssl.keystore.password`` never opens the
    key (Kafka refuses it with PEM; here it is not used)."""
    wrong = refusal(certs, **{"ssl.keystore.location": str(encrypted_keystore),
                              "ssl.keystore.password": "s3cret", "ssl.key.password": "nope"})
    assert wrong.key == "ssl.keystore.location"


def test_a_plain_keystore_needs_no_password_and_ignores_the_store_passwords(
        certs: Certs) -> None:
    served_certificate(context(certs, **{"ssl.keystore.password": "unused",
                                         "ssl.truststore.location": str(certs.ca_pem),
                                         "ssl.truststore.password": "unused"}))


def test_an_inline_encrypted_key_is_named_by_its_chain_key_and_never_shown(
        certs: Certs) -> None:
    inline = {"ssl.keystore.location": "", "ssl.keystore.certificate.chain": chain(certs),
              "ssl.keystore.key": encrypted_key(certs, b"s3cret")}
    served_certificate(context(certs, **inline, **{"ssl.key.password": "s3cret"}))
    wrong = refusal(certs, **inline, **{"ssl.key.password": "nope"})
    assert (wrong.key, wrong.value) == ("ssl.keystore.certificate.chain", "(inline PEM)")
    assert wrong.allowed.startswith("cannot load the certificate chain and key (")
    assert "PRIVATE KEY" not in str(wrong)
    per_listener = refusal(certs, **{"ssl.keystore.location": "",
                                     PER_LISTENER + "ssl.keystore.certificate.chain":
                                     chain(certs),
                                     "ssl.keystore.key": encrypted_key(certs, b"s3cret"),
                                     "ssl.key.password": "nope"})
    assert per_listener.key == PER_LISTENER + "ssl.keystore.certificate.chain"


@pytest.mark.parametrize("half", ["ssl.keystore.certificate.chain", "ssl.keystore.key"])
def test_a_keystore_file_and_an_inline_one_are_refused_together(certs: Certs,
                                                                 half: str) -> None:
    value = chain(certs) if half.endswith("chain") else encrypted_key(certs, b"pw")
    both = refusal(certs, **{half: value})
    assert (both.key, both.value) == ("ssl.keystore.location", str(certs.keystore))
    assert both.allowed == ("give either the keystore file or ssl.keystore.certificate.chain "
                            "and ssl.keystore.key, not both")
    per_listener = refusal(certs, **{"ssl.keystore.location": "",
                                     PER_LISTENER + "ssl.keystore.location": str(certs.keystore),
                                     half: value})
    assert per_listener.key == PER_LISTENER + "ssl.keystore.location"


@pytest.mark.parametrize("half", ["ssl.keystore.certificate.chain", "ssl.keystore.key", None])
def test_an_ssl_listener_without_a_whole_keystore_is_refused(certs: Certs,
                                                             half: str | None) -> None:
    given = {half: chain(certs) if half.endswith("chain") else encrypted_key(certs, b"pw")
             } if half else {}
    missing = refusal(certs, **{"ssl.keystore.location": "", **given})
    assert (missing.key, missing.value) == ("ssl.keystore.location", None)
    assert missing.allowed == ("an SSL listener needs a keystore: ssl.keystore.location, or "
                               "ssl.keystore.certificate.chain with ssl.keystore.key")


def test_an_unreadable_keystore_file_is_named_with_its_location(certs: Certs,
                                                                tmp_path: Path) -> None:
    location = str(tmp_path / "missing.pem")
    missing = refusal(certs, **{"ssl.keystore.location": location})
    assert (missing.key, missing.value) == ("ssl.keystore.location", location)
    per_listener = refusal(certs, **{PER_LISTENER + "ssl.keystore.location": location})
    assert (per_listener.key, per_listener.value) == (PER_LISTENER + "ssl.keystore.location",
                                                      location)


def test_the_truststore_file_or_inline_certificates_are_what_client_certificates_meet(
        certs: Certs) -> None:
    ca_der = ssl.PEM_cert_to_DER_cert(certs.ca_pem.read_text())
    from_file = context(certs, **{"ssl.truststore.location": str(certs.ca_pem)})
    inline = context(certs, **{"ssl.truststore.certificates": certs.ca_pem.read_text()})
    for ctx in (from_file, inline):
        assert ctx.get_ca_certs(binary_form=True) == [ca_der]
    assert context(certs).get_ca_certs() == []  # none given: none trusted


def test_an_unreadable_truststore_is_named_with_its_value(certs: Certs, tmp_path: Path) -> None:
    location = str(tmp_path / "missing-ca.pem")
    missing = refusal(certs, **{"ssl.truststore.location": location})
    assert (missing.key, missing.value) == ("ssl.truststore.location", location)
    assert missing.allowed.startswith("cannot load the trusted certificates (")
    per_listener = refusal(certs, **{PER_LISTENER + "ssl.truststore.location": location})
    assert per_listener.key == PER_LISTENER + "ssl.truststore.location"
    broken = ("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n"
              "-----END CERTIFICATE-----")
    bad = refusal(certs, **{"ssl.truststore.certificates": broken})
    assert (bad.key, bad.value) == ("ssl.truststore.certificates", "(inline PEM)")
    assert bad.allowed.startswith("cannot load the trusted certificates (")
    per_listener = refusal(certs, **{PER_LISTENER + "ssl.truststore.certificates": broken})
    assert per_listener.key == PER_LISTENER + "ssl.truststore.certificates"
