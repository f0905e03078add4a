"""The SASL exchange is untrusted input: random tokens, in any order and after any handshake,
never raise anything but a failed authentication (sans-IO), and never crash the connection task
or a handler of a real broker."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import scramp
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from tests.conftest import TEST_DEFAULTS
from tests.kafka_wire import WireClient
from trio_broker.config import load_config
from trio_broker.security.sasl import AuthenticationFailed, SaslAuthenticator, State
from trio_broker.security.scram import credential_from_password
from trio_broker.server.app import BrokerApp

from .test_sasl import AUTHENTICATE, HANDSHAKE, sasl_settings

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
CRED = {m: credential_from_password(m, "pw", 4096, salt=b"0123456789abcdef") for m in MECHANISMS[1:]}


def authenticator() -> SaslAuthenticator:
    return SaslAuthenticator(MECHANISMS, {"alice": "pw"},
                             lambda user, mech: CRED[mech] if user == "alice" else None, 0)


def scram_like(draw: Any) -> bytes:
    """Client-first-shaped tokens with random parts, so the fuzzer gets past the first check."""
    name = draw(st.text(max_size=12))
    nonce = draw(st.text(max_size=24))
    header = draw(st.sampled_from(["n,,", "y,,", "p=tls-unique,,", "n,a=x,", "", ",,"]))
    extra = draw(st.sampled_from(["", ",ext=1", ",m=x", ",r="]))
    return f"{header}n={name},r={nonce}{extra}".encode("utf-8", "surrogatepass")


tokens = st.one_of(
    st.binary(max_size=300),
    st.builds(lambda a, b, c: b"\0".join([a, b, c]), st.binary(max_size=20),
              st.binary(max_size=20), st.binary(max_size=20)),
    st.composite(scram_like)(),
    st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")),
)


@settings(max_examples=600, deadline=None)
@given(mechanism=st.sampled_from(MECHANISMS), steps=st.lists(tokens, min_size=1, max_size=4))
def test_random_tokens_only_ever_fail_authentication(mechanism: str, steps: list[bytes]) -> None:
    auth = authenticator()
    assert auth.handshake(mechanism)
    for token in steps:
        try:
            auth.authenticate(token, 0.0)
        except AuthenticationFailed as failed:
            assert failed.message
            assert auth.state is State.FAILED
            return
        if auth.state is State.COMPLETE:
            return


@settings(max_examples=200, deadline=None)
@given(final=tokens)
def test_random_client_final_after_a_real_client_first(final: bytes) -> None:
    auth = authenticator()
    auth.handshake("SCRAM-SHA-256")
    client = scramp.ScramClient(["SCRAM-SHA-256"], "alice", "pw")
    done, response = auth.authenticate(client.get_client_first().encode(), 0.0)
    assert not done and response.startswith(b"r=")
    try:
        auth.authenticate(final, 0.0)
    except AuthenticationFailed:
        assert auth.state is State.FAILED
    else:
        raise AssertionError("a random client-final authenticated")


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mechanism=st.sampled_from((*MECHANISMS, "GSSAPI", "")),
       steps=st.lists(tokens, min_size=1, max_size=3))
def test_random_tokens_over_the_wire_never_crash_the_connection(
        tmp_path: Any, log_events: Any, mechanism: str, steps: list[bytes]) -> None:
    """A whole broker per example (each runs its own trio.run): handshake, then random tokens;
    the broker answers or closes, and neither a handler nor a connection task fails."""

    async def talk(client: WireClient) -> None:
        with trio.fail_after(10):
            await client.request(HANDSHAKE, 1, SaslHandshakeRequest(mechanism=mechanism))
            for token in steps:
                response = await client.request(
                    AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=token))
                if response.error_code:
                    break

    survives(tmp_path, log_events, talk)


def survives(tmp_path: Any, log_events: Any,
             talk: Callable[[WireClient], Awaitable[None]]) -> None:
    """A whole SASL broker in its own trio.run for one client that ``talk``s to it; the broker
    may close the connection at any point, but no handler or connection task may fail."""

    async def main() -> None:
        config = load_config({**TEST_DEFAULTS, **sasl_settings(
            **{"connection.failed.authentication.delay.ms": "0"}), "log.dirs": str(tmp_path)})
        app = BrokerApp(config)
        async with trio.open_nursery() as nursery:
            await nursery.start(app.serve)
            client = await WireClient.connect(app.listeners[0].port)
            try:
                await talk(client)
            except trio.BrokenResourceError:
                pass  # the broker closed the connection: allowed
            finally:
                await client.aclose()
            await app.shutdown()

    trio.run(main)
    assert not log_events.events("request_failed")
    assert not [e for e in log_events.events("connection_closed") if e["reason"] == "error"]
