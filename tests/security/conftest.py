"""Certificates for the security tests, made with trustme: a CA, the broker's certificate for
127.0.0.1/localhost, a client certificate with a subject DN, and an unrelated CA."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
import trustme


@attrs.frozen
class Certs:
    ca: trustme.CA
    ca_pem: Path
    keystore: Path  # the broker's key and chain (PEM)
    client_cert: trustme.LeafCert
    client_keystore: Path
    client_cert_pem: Path
    client_key_pem: Path
    other_ca_pem: Path


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def make_certs(directory: Path) -> Certs:
    """A CA, the broker's and a client's certificate, and another CA, as PEM files."""
    ca = trustme.CA(organization_name="trio-broker-test")
    ca_pem = directory / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_pem))
    server = ca.issue_cert("localhost", "127.0.0.1")
    keystore = directory / "broker.pem"
    server.private_key_and_cert_chain_pem.write_to_path(str(keystore))
    client = ca.issue_cert("alice@example.com", common_name="alice",
                           organization_unit_name="eng")
    client_keystore = directory / "client.pem"
    client.private_key_and_cert_chain_pem.write_to_path(str(client_keystore))
    client_cert_pem = directory / "client-cert.pem"
    client.cert_chain_pems[0].write_to_path(str(client_cert_pem))
    client_key_pem = directory / "client-key.pem"
    client.private_key_pem.write_to_path(str(client_key_pem))
    other = trustme.CA(organization_name="someone-else")
    other_ca_pem = directory / "other-ca.pem"
    other.cert_pem.write_to_path(str(other_ca_pem))
    return Certs(ca, ca_pem, keystore, client, client_keystore, client_cert_pem, client_key_pem,
                 other_ca_pem)


def tls_settings(certs: Certs, listener: str = "SSL", **extra: str) -> dict[str, str]:
    """Broker settings of one TLS listener on a free port."""
    return {"listeners": f"{listener}://127.0.0.1:0",
            "ssl.keystore.location": str(certs.keystore), **extra}
