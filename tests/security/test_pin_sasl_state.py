"""The SASL connection state's rules, sans-IO: what an unauthenticated connection may send,
what an expired session may send, who may re-authenticate with what, and how JAAS quoting reads
passwords. The mutation run left these open (docs/development.md)."""

from __future__ import annotations

import pytest

from trio_broker.security.sasl import (
    AuthenticationFailed,
    JaasError,
    SaslAuthenticator,
    parse_jaas,
    plain_users,
)

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE, METADATA, PRODUCE = 18, 17, 36, 3, 0


def plain(reauth_ms: int = 0) -> SaslAuthenticator:
    return SaslAuthenticator(("PLAIN", "SCRAM-SHA-256"), {"alice": "pw"}, lambda u, m: None,
                             reauth_ms)


def logged_in(reauth_ms: int = 0, now: float = 0.0) -> SaslAuthenticator:
    auth = plain(reauth_ms)
    assert auth.handshake("PLAIN")
    assert auth.authenticate(b"\0alice\0pw", now)[0]
    return auth


def test_one_api_versions_before_the_handshake_and_nothing_else() -> None:
    auth = plain()
    assert not auth.admits(METADATA, 0.0)
    assert auth.admits(API_VERSIONS, 0.0, unsupported_version=True)  # answered as v0: a retry
    assert auth.admits(API_VERSIONS, 0.0)
    assert not auth.admits(API_VERSIONS, 0.0)  # a second one would keep the connection alive
    assert auth.admits(SASL_HANDSHAKE, 0.0)
    assert auth.handshake("PLAIN")
    assert not auth.admits(API_VERSIONS, 0.0)  # not between handshake and authentication
    assert auth.admits(SASL_AUTHENTICATE, 0.0)
    assert not auth.admits(PRODUCE, 0.0)


def test_no_api_versions_between_handshake_and_authentication() -> None:
    auth = plain()
    assert auth.handshake("PLAIN")
    assert not auth.admits(API_VERSIONS, 0.0)


def test_an_authenticated_session_admits_everything_until_it_expires() -> None:
    auth = logged_in(reauth_ms=1000, now=10.0)
    assert auth.session_expires_at == pytest.approx(11.0)
    assert auth.admits(PRODUCE, 11.0) and auth.admits(API_VERSIONS, 11.0)
    assert not auth.admits(PRODUCE, 11.001)
    assert auth.admits(SASL_HANDSHAKE, 11.5)  # only a re-authentication now


def test_a_session_without_reauth_never_expires() -> None:
    auth = logged_in(reauth_ms=0)
    assert auth.session_expires_at is None
    assert auth.admits(PRODUCE, 1e12)


def test_reauthentication_keeps_the_mechanism() -> None:
    auth = logged_in(reauth_ms=1000)
    assert not auth.handshake("GSSAPI")  # not enabled: UNSUPPORTED_SASL_MECHANISM
    assert not auth.reauthenticating
    assert auth.handshake("PLAIN")
    assert auth.reauthenticating
    assert not auth.admits(PRODUCE, 0.5)  # in the middle of re-authenticating
    assert auth.authenticate(b"\0alice\0pw", 0.5)[0]
    assert auth.authenticated and not auth.reauthenticating


def test_reauthentication_with_another_enabled_mechanism_fails_its_exchange() -> None:
    # Kafka's SaslServerAuthenticator answers the handshake and fails the SaslAuthenticate
    # after it (REAUTH_BAD_MECHANISM), whatever the token.
    auth = logged_in(reauth_ms=1000)
    assert auth.handshake("SCRAM-SHA-256")
    assert auth.reauthenticating and auth.mechanism == "PLAIN"
    with pytest.raises(AuthenticationFailed) as failed:
        auth.authenticate(b"\0alice\0pw", 0.5)
    assert failed.value.message == (
        "SASL mechanism 'SCRAM-SHA-256' requested by client is not supported for "
        "re-authentication of mechanism 'PLAIN'")
    assert failed.value.principal == "User:alice"
    assert not auth.authenticated


def test_an_unknown_or_disabled_mechanism_starts_nothing() -> None:
    auth = plain()
    assert not auth.handshake("SCRAM-SHA-512")
    assert not auth.handshake("GSSAPI")
    assert not auth.authenticated
    assert auth.handshake("SCRAM-SHA-256")


@pytest.mark.parametrize("jaas, users", [
    ('org.apache.kafka.common.security.plain.PlainLoginModule required '
     'user_alice="al\\"ice" user_bob=bob-pw;', {"alice": 'al"ice', "bob": "bob-pw"}),
    ('PlainLoginModule required user_a="x y;z=" user_b="";', {"a": "x y;z=", "b": ""}),
    ('PlainLoginModule required user_a="back\\\\slash";', {"a": "back\\slash"}),
    ('PlainLoginModule required user_a="ends in a quote\\"";', {"a": 'ends in a quote"'}),
    ('A required user_a="1"; B optional user_b="2";', {"a": "1", "b": "2"}),
])
def test_jaas_quoting_reads_passwords_exactly(jaas: str, users: dict[str, str]) -> None:
    assert plain_users(parse_jaas(jaas)) == users


@pytest.mark.parametrize("jaas", [
    'PlainLoginModule required user_a="unterminated;',
    "PlainLoginModule required user_a=x",  # no ';'
    "PlainLoginModule sometimes user_a=x;",
    "PlainLoginModule required user_a;",
    "PlainLoginModule required user_a=",
    '"PlainLoginModule" required;',
    "",
])
def test_bad_jaas_is_refused(jaas: str) -> None:
    with pytest.raises(JaasError):
        parse_jaas(jaas)
