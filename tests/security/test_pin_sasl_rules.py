"""The SASL server's refusals, sans-IO (``SaslAuthenticator``): what each failure tells the
client (Kafka's PlainSaslServer and ScramSaslServer texts), which principal the failure is
counted for, the PLAIN authorization-id rule and SCRAM re-authentication. Each test kills
mutants that survived ``nox -s mutation`` (docs/development.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import scramp

from trio_broker.security.sasl import (
    PLAIN_FAILED,
    UNKNOWN_SCRAM_USER,
    AuthenticationFailed,
    SaslAuthenticator,
)
from trio_broker.security.scram import ScramStore, credential_from_password

MECH = "SCRAM-SHA-256"
INVALID = ("Authentication failed during authentication due to invalid credentials with SASL "
           f"mechanism {MECH}")


def plain() -> SaslAuthenticator:
    auth = SaslAuthenticator(("PLAIN",), {"alice": "alice-secret"}, lambda u, m: None, 0)
    assert auth.handshake("PLAIN")
    return auth


def refusal(auth: SaslAuthenticator, token: bytes) -> AuthenticationFailed:
    with pytest.raises(AuthenticationFailed) as failed:
        auth.authenticate(token, 0.0)
    assert str(failed.value) == failed.value.message
    return failed.value


@pytest.mark.parametrize(("token", "message"), [
    (b"\0alice\xff\0pw", "Invalid SASL/PLAIN response: not UTF-8"),
    (b"\0alice", "Invalid SASL/PLAIN response: expected 3 tokens, got 2"),
    (b"\0\0alice-secret", "Authentication failed: username not specified"),
    (b"\0alice\0", "Authentication failed: password not specified"),
])
def test_malformed_plain_responses_are_refused_with_kafkas_words(token: bytes,
                                                                  message: str) -> None:
    failed = refusal(plain(), token)
    assert failed.message == message
    assert failed.principal == ""  # no user to count the failure for


def test_plain_authorization_id_must_be_the_user_itself() -> None:
    failed = refusal(plain(), b"bob\0alice\0alice-secret")
    assert failed.message == ("Authentication failed: Client requested an authorization id "
                              "that is different from username")
    assert failed.principal == "User:alice"
    auth = plain()
    assert auth.authenticate(b"alice\0alice\0alice-secret", 0.0) == (True, b"")
    assert auth.principal == "User:alice"
    wrong = refusal(plain(), b"\0alice\0nope")
    assert (wrong.message, wrong.principal) == (PLAIN_FAILED, "User:alice")


def scram_auth() -> SaslAuthenticator:
    cred = credential_from_password(MECH, "pw", 4096)

    def lookup(user: str, mechanism: str) -> Any:
        return cred if user == "alice" else None

    auth = SaslAuthenticator((MECH,), {}, lookup, 60_000)
    assert auth.handshake(MECH)
    return auth


def scram_login(auth: SaslAuthenticator, password: str = "pw") -> tuple[bool, bytes]:
    client = scramp.ScramClient([MECH], "alice", password)
    done, first = auth.authenticate(client.get_client_first().encode(), 0.0)
    assert not done
    client.set_server_first(first.decode())
    return auth.authenticate(client.get_client_final().encode(), 0.0)


@pytest.mark.parametrize("token", [b"\xff\xfe", b"garbage", b"n,,", b"n,,n=alice"])
def test_a_malformed_scram_client_first_is_invalid_credentials(token: bytes) -> None:
    failed = refusal(scram_auth(), token)
    assert failed.message == INVALID
    assert failed.principal in ("", "User:alice")
    if token == b"\xff\xfe":
        assert failed.principal == ""


def test_scram_failures_name_the_user_tried() -> None:
    unknown = refusal(scram_auth(), b"n,,n=mallory,r=abcdef")
    assert (unknown.message, unknown.principal) == (UNKNOWN_SCRAM_USER, "User:mallory")
    auth = scram_auth()
    with pytest.raises(AuthenticationFailed) as failed:
        scram_login(auth, password="wrong")
    assert (failed.value.message, failed.value.principal) == (INVALID, "User:alice")


def test_scram_reauthentication_starts_a_new_exchange() -> None:
    auth = scram_auth()
    assert scram_login(auth)[0]
    assert auth.principal == "User:alice"
    assert auth.handshake(MECH) and auth.reauthenticating
    done, final = scram_login(auth)
    assert done and final.startswith(b"v=")
    assert auth.principal == "User:alice" and auth.authenticated


def test_an_unreadable_credentials_file_is_invalid_credentials_for_the_user_tried(
        tmp_path: Path) -> None:
    """Kafka's ScramSaslServer turns a credential lookup that throws into a SaslException
    ("Credentials could not be obtained"), which SaslServerAuthenticator answers with the
    invalid-credentials text; the failure counts for the user the client named."""
    store = ScramStore(tmp_path)
    store.path.write_text("{not json", encoding="utf-8")  # hand-edited, broken
    auth = SaslAuthenticator((MECH,), {}, store.get, 0)
    assert auth.handshake(MECH)
    client = scramp.ScramClient([MECH], "alice", "pw")
    failed = refusal(auth, client.get_client_first().encode())
    assert (failed.message, failed.principal) == (INVALID, "User:alice")
    assert not auth.authenticated
