"""SaslHandshake v0 and the bare SASL tokens that follow it (Kafka 3.9's SaslServerAuthenticator
without SaslAuthenticate, issue 33): the sans-IO step (and its fuzzing), then a real broker
on a SASL_PLAINTEXT listener over a real socket."""

from __future__ import annotations

import struct
from typing import Any

import pytest
import scramp
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as SaslHandshakeV0
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest as SaslHandshakeV1

from tests.kafka_wire import METADATA_ALL_V12, WireClient
from trio_broker.protocol.framing import FrameDecoder, InvalidFrameSize, frame
from trio_broker.security.raw_sasl import serve_raw_token
from trio_broker.security.sasl import SaslAuthenticator, State
from trio_broker.security.scram import ScramStore, credential_from_password

from .test_sasl import (
    HANDSHAKE,
    METADATA,
    PROMPTLY,
    closed_within,
    sasl_settings,
    scrape_failed_authentications,
)
from .test_sasl_fuzz import CRED, MECHANISMS, survives, tokens

ILLEGAL_SASL_STATE = 34


def authenticator(reauth_ms: int = 0) -> SaslAuthenticator:
    return SaslAuthenticator(MECHANISMS, {"alice": "pw"},
                             lambda user, mech: CRED[mech] if user == "alice" else None, reauth_ms)


# ---------------------------------------------------------------------- sans-IO


def test_raw_plain_completes_with_an_empty_frame_and_no_session_expiry() -> None:
    """PlainSaslServer answers ``new byte[0]``, which Kafka sends size-prefixed: 4 zero bytes.
    A v0 session has no expiry even with connections.max.reauth.ms set (KIP-368 needs v1)."""
    auth = authenticator(reauth_ms=1000)
    assert not auth.expects_raw_token
    assert auth.handshake("PLAIN", raw_tokens=True)
    assert auth.expects_raw_token
    outcome = serve_raw_token(auth, b"\0alice\0pw", 5.0)
    assert outcome.reply == b"\0\0\0\0" and outcome.complete and outcome.failure is None
    assert auth.principal == "User:alice" and auth.authenticated
    assert auth.session_expires_at is None and not auth.reauthenticable
    assert not auth.expects_raw_token  # later frames are requests again
    with pytest.raises(ValueError):
        serve_raw_token(auth, b"\0alice\0pw", 6.0)
    # the same with a v1 handshake: a session that ends and can be renewed
    framed = authenticator(reauth_ms=1000)
    assert framed.handshake("PLAIN")
    assert not framed.expects_raw_token
    framed.authenticate(b"\0alice\0pw", 5.0)
    assert framed.session_expires_at == 6.0 and framed.reauthenticable


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_raw_scram_challenges_are_size_prefixed(mechanism: str) -> None:
    auth = authenticator()
    auth.handshake(mechanism, raw_tokens=True)
    client = scramp.ScramClient([mechanism], "alice", "pw")
    first = serve_raw_token(auth, client.get_client_first().encode(), 0.0)
    assert first.reply is not None and not first.complete
    (size,) = struct.unpack(">i", first.reply[:4])
    assert size == len(first.reply) - 4
    client.set_server_first(first.reply[4:].decode())
    final = serve_raw_token(auth, client.get_client_final().encode(), 0.0)
    assert final.complete and final.reply is not None
    client.set_server_final(final.reply[4:].decode())  # raises if the server's proof is wrong
    assert auth.principal == "User:alice"


def test_a_wrong_raw_token_fails_without_a_reply() -> None:
    auth = authenticator()
    auth.handshake("PLAIN", raw_tokens=True)
    outcome = serve_raw_token(auth, b"\0alice\0wrong", 0.0)
    assert outcome.reply is None and not outcome.complete
    assert outcome.failure is not None and outcome.failure.principal == "User:alice"
    assert auth.state is State.FAILED and not auth.expects_raw_token


def test_a_reauthentication_keeps_the_framing_of_its_session() -> None:
    """Kafka turns headers on with a v1 handshake and never off: a v1 session re-authenticated
    with a v0 handshake still uses SaslAuthenticate."""
    auth = authenticator(reauth_ms=1000)
    auth.handshake("PLAIN")
    auth.authenticate(b"\0alice\0pw", 0.0)
    assert auth.handshake("PLAIN", raw_tokens=True)
    assert auth.reauthenticating and not auth.expects_raw_token


def _chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:], strict=False)]


#: What a peer may send after SaslHandshake v0: random bytes, well-framed random tokens, and
#: framed tokens followed by a random tail (a cut or absurd size prefix).
byte_streams = st.one_of(
    st.binary(max_size=400),
    st.lists(tokens, min_size=1, max_size=4).map(lambda ts: b"".join(frame(t) for t in ts)),
    st.lists(tokens, max_size=3).flatmap(lambda ts: st.binary(max_size=12).map(
        lambda tail: b"".join(frame(t) for t in ts) + tail)))


@settings(max_examples=500, deadline=None)
@given(mechanism=st.sampled_from(MECHANISMS), stream=byte_streams,
       cuts=st.lists(st.integers(min_value=0, max_value=500), max_size=8),
       limit=st.sampled_from([0, 16, 64, 4096]))
def test_random_bytes_after_a_v0_handshake(mechanism: str, stream: bytes, cuts: list[int],
                                           limit: int) -> None:
    """The connection's path for bare tokens, sans-IO: any bytes, cut anywhere, through the
    frame reader at a sasl.server.max.receive.size, each frame to :func:`serve_raw_token`.
    Only three things happen: a size beyond the limit is refused before its token is buffered,
    a token fails (no reply), or the exchange goes on with a well-formed size-prefixed reply;
    nothing authenticates without alice's password, nothing else is raised."""
    auth = authenticator()
    auth.handshake(mechanism, raw_tokens=True)
    decoder = FrameDecoder(limit)
    for chunk in _chunks(stream, cuts):
        decoder.feed(chunk)
        while auth.expects_raw_token:
            try:
                size = decoder.pending_size()
            except InvalidFrameSize as bad:
                assert bad.size < 0 or bad.size > limit
                return
            if size is None:
                break
            assert 0 <= size <= limit
            token = decoder.take(size)
            if token is None:
                break
            assert len(token) == size
            outcome = serve_raw_token(auth, token, 0.0)
            if outcome.failure is not None:
                assert outcome.reply is None and outcome.failure.message
                assert auth.state is State.FAILED
                return
            assert outcome.reply is not None
            assert struct.unpack(">i", outcome.reply[:4])[0] == len(outcome.reply) - 4
            if outcome.complete:
                # Only PLAIN can complete from random bytes, and only with the password.
                assert mechanism == "PLAIN" and token.split(b"\0")[1:] == [b"alice", b"pw"]
                return


# ---------------------------------------------------------------------- a real broker


async def v0_handshake(client: WireClient, mechanism: str) -> None:
    response = await client.request(HANDSHAKE, 0, SaslHandshakeV0(mechanism=mechanism))
    assert response.error_code == 0
    assert mechanism in response.mechanisms


async def raw_exchange(client: WireClient, token: bytes) -> bytes | None:
    """Send a bare token; the bare frame the broker answers with (None: it closed)."""
    await client.send_raw(frame(token))
    with trio.fail_after(PROMPTLY):
        return await client.receive_frame()


async def test_v0_handshake_then_raw_plain(start_broker: Any, log_events: Any,
                                          autojump_clock: trio.testing.MockClock) -> None:
    autojump_clock.autojump_threshold = 0.02
    running = await start_broker(sasl_settings(**{"connections.max.reauth.ms": "1000"}))
    client = await WireClient.connect(running.port)
    await v0_handshake(client, "PLAIN")
    assert await raw_exchange(client, b"\0admin\0admin-secret") == b""  # PLAIN's empty answer
    assert (await client.request(METADATA, 12, METADATA_ALL_V12)).brokers
    # No re-authentication on a v0 session (KIP-368 needs SaslAuthenticate v1): a handshake
    # is KafkaApis' ILLEGAL_SASL_STATE, the connection stays open and its session never ends.
    again = await client.request(HANDSHAKE, 1, SaslHandshakeV1(mechanism="PLAIN"))
    assert again.error_code == ILLEGAL_SASL_STATE
    await trio.sleep(1.2)  # past connections.max.reauth.ms
    assert (await client.request(METADATA, 12, METADATA_ALL_V12)).brokers
    await client.aclose()
    [ok] = await log_events.wait_for("authentication_succeeded")
    assert (ok["mechanism"], ok["principal"], ok["reauthentication"]) == (
        "PLAIN", "User:admin", False)
    assert {e["principal"] for e in log_events.events("request", api="Metadata")} == {
        "User:admin"}
    metrics = running.broker.authentication_metrics
    assert metrics.total("successful", "SASL_PLAINTEXT") == 1
    assert metrics.total("failed", "SASL_PLAINTEXT") == 0


@pytest.mark.parametrize(("mechanism", "inflight"), [
    ("SCRAM-SHA-256", "1"), ("SCRAM-SHA-512", "1"), ("SCRAM-SHA-256", "5")])
async def test_v0_handshake_then_raw_scram(start_broker: Any, log_events: Any,
                                           mechanism: str, inflight: str) -> None:
    """Also with pipelining (connection.max.inflight.requests > 1), where the reader sends the
    bare answers while a writer task exists."""
    running = await start_broker(sasl_settings(
        **{"connection.max.inflight.requests": inflight}))
    ScramStore(running.data_dir).alter(
        [("bob", mechanism, credential_from_password(mechanism, "bob-pw", 4096))], [])
    client = await WireClient.connect(running.port)
    await v0_handshake(client, mechanism)
    scram = scramp.ScramClient([mechanism], "bob", "bob-pw")
    server_first = await raw_exchange(client, scram.get_client_first().encode())
    assert server_first is not None
    scram.set_server_first(server_first.decode())
    server_final = await raw_exchange(client, scram.get_client_final().encode())
    assert server_final is not None
    scram.set_server_final(server_final.decode())  # the broker proved it knows the key
    assert (await client.request(METADATA, 12, METADATA_ALL_V12)).brokers
    await client.aclose()
    [ok] = await log_events.wait_for("authentication_succeeded")
    assert (ok["mechanism"], ok["principal"]) == (mechanism, "User:bob")


async def test_a_wrong_raw_password_closes_after_the_delay_counted_once(
        start_broker: Any, log_events: Any, autojump_clock: trio.testing.MockClock) -> None:
    """No error response exists for a bare token: nothing is sent, the connection closes after
    connection.failed.authentication.delay.ms, one failed authentication is counted (in the
    broker and in what Prometheus scrapes) and logged."""
    autojump_clock.autojump_threshold = 0.02
    running = await start_broker(sasl_settings(**{
        "connection.failed.authentication.delay.ms": "2500",
        "metrics.prometheus.listener": "127.0.0.1:0"}))
    client = await WireClient.connect(running.port)
    await v0_handshake(client, "PLAIN")
    sent = trio.current_time()
    await client.send_raw(frame(b"\0alice\0wrong"))
    assert await client.closed_by_peer()  # closed with no frame at all
    assert 2.5 <= trio.current_time() - sent < 2.6
    [closed] = await log_events.wait_for("connection_closed", reason="authentication_failed")
    assert closed["detail"] == "Authentication failed: Invalid username or password"
    await trio.testing.wait_all_tasks_blocked()
    [failed] = log_events.events("authentication_failed")
    assert (failed["mechanism"], failed["principal"], failed["error"]) == (
        "PLAIN", "User:alice", "SASL_AUTHENTICATION_FAILED")
    metrics = running.broker.authentication_metrics
    assert metrics.total("failed", "SASL_PLAINTEXT") == 1
    assert metrics.total("successful", "SASL_PLAINTEXT") == 0
    assert await scrape_failed_authentications(running, "SASL_PLAINTEXT") == 1


async def test_an_oversized_raw_token_closes_at_once(start_broker: Any,
                                                     log_events: Any) -> None:
    """sasl.server.max.receive.size (CVE-2022-34917) bounds bare tokens as it bounds requests:
    the size prefix alone fails the authentication, none of the token is waited for."""
    running = await start_broker(sasl_settings(**{"sasl.server.max.receive.size": "4096",
                                                  "connection.failed.authentication.delay.ms":
                                                      "0"}))
    client = await WireClient.connect(running.port)
    await v0_handshake(client, "SCRAM-SHA-256")
    await client.send_raw(struct.pack(">i", 4097) + b"n,,n=x,r=" + b"a" * 100)
    assert await closed_within(client, PROMPTLY)
    [closed] = await log_events.wait_for("connection_closed", reason="invalid_frame")
    assert "larger than 4096)" in closed["detail"]
    [failed] = log_events.events("authentication_failed")
    assert "invalid receive size" in failed["detail"]
    assert running.broker.authentication_metrics.total("failed", "SASL_PLAINTEXT") == 1
    # 4096 itself is a token (a failed one here), not a refused size
    client = await WireClient.connect(running.port)
    await v0_handshake(client, "PLAIN")
    assert await raw_exchange(client, b"\0admin\0" + b"x" * 4089) is None
    await log_events.wait_for("connection_closed", reason="authentication_failed")


@pytest.mark.parametrize("garbage", [
    b"\xff\xff\xff\xff",  # a negative size
    frame(b"\x00\x03\x00\x0c\x00\x00\x00\x01"),  # a request header: still a token here
    frame(b"hello, broker"),
    frame(b""),
])
async def test_garbage_after_a_v0_handshake_closes(start_broker: Any, log_events: Any,
                                                   garbage: bytes) -> None:
    running = await start_broker(sasl_settings(
        **{"connection.failed.authentication.delay.ms": "0"}))
    client = await WireClient.connect(running.port)
    await v0_handshake(client, "SCRAM-SHA-512")
    await client.send_raw(garbage)
    assert await closed_within(client, PROMPTLY)
    await log_events.wait_for("connection_closed")
    assert running.broker.authentication_metrics.total("failed", "SASL_PLAINTEXT") == 1
    [failed] = log_events.events("authentication_failed")
    assert failed["mechanism"] == "SCRAM-SHA-512"
    assert not log_events.events("request", api="Metadata")
    closes = [e["reason"] for e in log_events.events("connection_closed")]
    assert closes in (["authentication_failed"], ["invalid_frame"])


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mechanism=st.sampled_from(MECHANISMS), real_first=st.booleans(), data=byte_streams,
       cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=4))
def test_random_bytes_after_a_v0_handshake_never_crash_the_connection(
        tmp_path: Any, log_events: Any, mechanism: str, real_first: bool, data: bytes,
        cuts: list[int]) -> None:
    """A whole broker per example: v0 handshake, then random bytes in random pieces (for
    SCRAM, half the time after a real client-first, so that the broker has challenged); the
    broker answers, waits or closes, and no connection task fails."""
    if real_first and mechanism != "PLAIN":
        ScramStore(tmp_path).alter([("alice", mechanism, CRED[mechanism])], [])
        first = scramp.ScramClient([mechanism], "alice", "pw").get_client_first().encode()
        data = frame(first) + data

    async def talk(client: WireClient) -> None:
        with trio.move_on_after(0.5):
            await v0_handshake(client, mechanism)
            for piece in _chunks(data, cuts):
                await client.send_raw(piece)
            while await client.receive_frame() is not None:
                pass

    survives(tmp_path, log_events, talk)
