"""Re-authentication (KIP-368) and the session's lifetime, sans-IO (``SaslAuthenticator``):
the state a new connection starts in, Kafka's texts when a re-authentication changes the
principal (SaslServerAuthenticator.ReauthInfo) or fails SCRAM, and when the session ends
(``connections.max.reauth.ms`` from the end of each exchange). Each test kills mutants that
survived ``nox -s mutation`` (docs/development.md)."""

from __future__ import annotations

from typing import Any

import pytest
import scramp

from trio_broker.security.sasl import AuthenticationFailed, SaslAuthenticator, State
from trio_broker.security.scram import credential_from_password

pytestmark = pytest.mark.timeout(30)

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE, PRODUCE = 18, 17, 36, 0
MECH = "SCRAM-SHA-256"
USERS = {"admin": "admin-secret", "alice": "alice-secret"}


def plain(reauth_ms: int = 60_000) -> SaslAuthenticator:
    return SaslAuthenticator(("PLAIN", MECH), USERS, lambda u, m: None, reauth_ms)


def plain_login(auth: SaslAuthenticator, user: str, now: float) -> tuple[bool, bytes]:
    assert auth.handshake("PLAIN")
    return auth.authenticate(f"\0{user}\0{USERS[user]}".encode(), now)


def scram(reauth_ms: int = 60_000) -> SaslAuthenticator:
    creds = {user: credential_from_password(MECH, password, 4096)
             for user, password in USERS.items()}

    def lookup(user: str, mechanism: str) -> Any:
        return creds.get(user) if mechanism == MECH else None

    return SaslAuthenticator((MECH,), {}, lookup, reauth_ms)


def scram_login(auth: SaslAuthenticator, user: str, password: str, now: float
                ) -> tuple[bool, bytes]:
    assert auth.handshake(MECH)
    client = scramp.ScramClient([MECH], user, password)
    done, first = auth.authenticate(client.get_client_first().encode(), now)
    assert not done
    client.set_server_first(first.decode())
    return auth.authenticate(client.get_client_final().encode(), now)


def test_a_new_connection_starts_unauthenticated_with_no_session() -> None:
    auth = SaslAuthenticator(("PLAIN",), USERS, lambda u, m: None, 5000)
    assert (auth.mechanisms, auth.reauth_ms) == (("PLAIN",), 5000)
    assert auth.state is State.HANDSHAKE and not auth.authenticated
    assert (auth.mechanism, auth.principal) == ("", "")
    assert auth.session_expires_at is None
    assert auth.reauthenticating is False
    assert auth.raw_tokens is False and auth.reauthenticable
    assert not auth.expects_raw_token
    # the first exchange is an authentication, not a re-authentication: any user may log in
    assert plain_login(auth, "alice", 0.0) == (True, b"")
    assert auth.principal == "User:alice"


def test_the_first_scram_exchange_starts_with_no_user_known() -> None:
    auth = scram()
    assert auth.handshake(MECH)
    with pytest.raises(AuthenticationFailed) as failed:
        auth.authenticate(b"\xff", 0.0)  # not UTF-8: no user named yet
    assert failed.value.principal == ""
    assert auth.state is State.FAILED


def test_reauthentication_as_another_principal_fails_with_kafkas_text() -> None:
    """Kafka's ReauthInfo.ensurePrincipalUnchanged: ``from <type>.<name>: <type>.<name>``."""
    auth = plain()
    assert plain_login(auth, "admin", 0.0)[0]
    with pytest.raises(AuthenticationFailed) as failed:
        plain_login(auth, "alice", 10.0)
    assert failed.value.message == ("Cannot change principals during re-authentication from "
                                    "User.admin: User.alice")
    assert failed.value.principal == "User:alice"
    assert auth.state is State.FAILED and not auth.authenticated
    assert auth.principal == "User:admin"


def test_scram_reauthentication_as_another_user_fails_with_kafkas_text() -> None:
    auth = scram()
    assert scram_login(auth, "admin", "admin-secret", 0.0)[0]
    with pytest.raises(AuthenticationFailed) as failed:
        scram_login(auth, "alice", "alice-secret", 10.0)
    assert failed.value.message == ("Cannot change principals during re-authentication from "
                                    "User.admin: User.alice")
    assert auth.state is State.FAILED


def test_a_wrong_scram_proof_on_reauthentication_says_re_authentication() -> None:
    """SaslServerAuthenticator: "Authentication failed during " +
    authenticationOrReauthenticationText() + " due to invalid credentials ..."."""
    auth = scram()
    with pytest.raises(AuthenticationFailed) as first:
        scram_login(auth, "admin", "wrong", 0.0)
    assert first.value.message == ("Authentication failed during authentication due to "
                                   f"invalid credentials with SASL mechanism {MECH}")
    auth = scram()
    assert scram_login(auth, "admin", "admin-secret", 0.0)[0]
    with pytest.raises(AuthenticationFailed) as again:
        scram_login(auth, "admin", "wrong", 10.0)
    assert again.value.message == ("Authentication failed during re-authentication due to "
                                   f"invalid credentials with SASL mechanism {MECH}")
    assert auth.state is State.FAILED


def test_a_failed_authentication_fails_the_connection() -> None:
    auth = plain()
    assert auth.handshake("PLAIN")
    with pytest.raises(AuthenticationFailed):
        auth.authenticate(b"\0admin\0wrong", 0.0)
    assert auth.state is State.FAILED and not auth.authenticated
    assert not auth.admits(PRODUCE, 0.0)


def test_the_session_ends_reauth_ms_after_the_exchange_completes() -> None:
    auth = plain(reauth_ms=60_000)
    assert plain_login(auth, "admin", 100.0) == (True, b"")
    assert auth.session_expires_at == pytest.approx(160.0)
    assert not auth.reauthenticating
    assert auth.admits(PRODUCE, 160.0) and not auth.admits(PRODUCE, 160.001)


def test_a_reauthentication_renews_the_session_from_its_own_end() -> None:
    auth = plain(reauth_ms=60_000)
    assert plain_login(auth, "admin", 100.0)[0]
    assert auth.handshake("PLAIN") and auth.reauthenticating
    assert not auth.admits(PRODUCE, 150.0)  # nothing else in the middle of the exchange
    assert auth.admits(SASL_AUTHENTICATE, 150.0)
    assert auth.authenticate(b"\0admin\0admin-secret", 150.0) == (True, b"")
    assert auth.reauthenticating is False and auth.authenticated
    assert auth.session_expires_at == pytest.approx(210.0)
    assert auth.admits(PRODUCE, 200.0) and auth.admits(PRODUCE, 210.0)
    assert not auth.admits(PRODUCE, 210.5)
    # and once more, as many times as the client renews it
    assert plain_login(auth, "admin", 205.0)[0]
    assert auth.session_expires_at == pytest.approx(265.0)


def test_a_scram_session_ends_reauth_ms_after_the_final_message() -> None:
    auth = scram(reauth_ms=1500)
    done, final = scram_login(auth, "admin", "admin-secret", 7.0)
    assert done and final.startswith(b"v=")
    assert auth.session_expires_at == pytest.approx(8.5)
    assert auth.principal == "User:admin" and auth.mechanism == MECH


def test_without_connections_max_reauth_ms_the_session_never_ends() -> None:
    auth = plain(reauth_ms=0)
    assert plain_login(auth, "admin", 100.0)[0]
    assert auth.session_expires_at is None and not auth.reauthenticable
    assert auth.admits(PRODUCE, 1e12)


def test_a_session_begun_with_handshake_v0_never_ends() -> None:
    """KIP-368 needs SaslAuthenticate v1: Kafka gives a v0 session no expiry."""
    auth = plain(reauth_ms=60_000)
    assert auth.handshake("PLAIN", raw_tokens=True)
    assert auth.raw_tokens and auth.expects_raw_token
    assert auth.authenticate(b"\0admin\0admin-secret", 100.0) == (True, b"")
    assert auth.session_expires_at is None
    assert auth.admits(PRODUCE, 1e12)
