"""SSL listeners in process: the handshake in the connection's task, mTLS principals, failed
handshakes, and the start-up errors of keys that are not implemented."""

from __future__ import annotations

import contextlib
import re
import ssl
import tracemalloc
from typing import Any

import pytest
import trio
import trio.testing
import trustme

from tests.kafka_wire import API_VERSIONS_V3, METADATA_ALL_V12, WireClient
from tests.network.test_zero_copy import FETCH, fetch_request
from trio_broker.config import ConfigError, load_config
from trio_broker.protocol import records as rb
from trio_broker.protocol.codec import decode_response
from trio_broker.security.listeners import listener_security
from trio_broker.security.tls import PrincipalMapper, subject_dn

from .conftest import Certs, tls_settings

API_VERSIONS, METADATA = 18, 3


def client_context(certs: Certs, *, ca: Any = None, with_cert: bool = False) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca or certs.ca_pem))
    if with_cert:
        context.load_cert_chain(str(certs.client_keystore))
    return context


async def tls_client(port: int, context: ssl.SSLContext) -> WireClient:
    tcp = await trio.open_tcp_stream("127.0.0.1", port)
    stream = trio.SSLStream(tcp, context, server_hostname="localhost")
    try:
        await stream.do_handshake()
    except BaseException:
        await tcp.aclose()  # as a real client does: the broker sees the socket close
        raise
    return WireClient(stream)  # type: ignore[arg-type]


async def assert_refused(port: int, context: ssl.SSLContext) -> None:
    """The broker refuses the client's handshake: during it (TLS 1.2), or the client learns of
    it on its first read (TLS 1.3, where the client's handshake ends before the server's)."""
    try:
        client = await tls_client(port, context)
    except trio.BrokenResourceError:
        return
    with pytest.raises(trio.BrokenResourceError):
        await client.send(API_VERSIONS, 3, API_VERSIONS_V3)
        assert await client.closed_by_peer()
        await client.send(API_VERSIONS, 3, API_VERSIONS_V3)


async def test_ssl_listener_serves_requests(start_broker: Any, certs: Certs,
                                            log_events: Any) -> None:
    running = await start_broker(tls_settings(certs))
    client = await tls_client(running.port, client_context(certs))
    response = await client.request(API_VERSIONS, 3, API_VERSIONS_V3)
    assert response.error_code == 0
    metadata = await client.request(METADATA, 12, METADATA_ALL_V12)
    assert metadata.brokers[0].port == running.port
    await client.aclose()
    [ok] = await log_events.wait_for("authentication_succeeded")
    assert ok["mechanism"] == "SSL" and ok["principal"] == "User:ANONYMOUS"
    requests = log_events.events("request")
    assert requests and all(r["principal"] == "User:ANONYMOUS" for r in requests)
    assert all(r["security_protocol"] == "SSL" for r in requests)


async def test_ssl_listener_with_idle_expiry_off_serves_requests(start_broker: Any,
                                                                 certs: Certs) -> None:
    """connections.max.idle.ms=-1 (Kafka: never expire) also leaves the TLS handshake
    without a deadline, rather than failing it."""
    running = await start_broker(tls_settings(certs, **{"connections.max.idle.ms": "-1"}))
    client = await tls_client(running.port, client_context(certs))
    assert (await client.request(API_VERSIONS, 3, API_VERSIONS_V3)).error_code == 0
    await client.aclose()


async def test_mtls_principal_is_the_certificate_subject(start_broker: Any, certs: Certs,
                                                         log_events: Any) -> None:
    running = await start_broker(tls_settings(
        certs, **{"ssl.client.auth": "required", "ssl.truststore.location": str(certs.ca_pem)}))
    client = await tls_client(running.port, client_context(certs, with_cert=True))
    await client.request(METADATA, 12, METADATA_ALL_V12)
    await client.aclose()
    principal = "User:CN=alice,OU=eng,O=trustme v1.2.1"
    [ok] = await log_events.wait_for("authentication_succeeded")
    assert ok["principal"] == principal
    [request] = log_events.events("request", api="Metadata")
    assert request["principal"] == principal


async def test_mapping_rules_shorten_the_principal(start_broker: Any, certs: Certs,
                                                   log_events: Any) -> None:
    running = await start_broker(tls_settings(
        certs, **{"ssl.client.auth": "requested",
                  "ssl.truststore.location": str(certs.ca_pem),
                  "listener.name.ssl.ssl.principal.mapping.rules":
                      "RULE:^CN=(.*?),OU=eng.*$/$1/U,DEFAULT"}))
    client = await tls_client(running.port, client_context(certs, with_cert=True))
    await client.request(METADATA, 12, METADATA_ALL_V12)
    await client.aclose()
    [ok] = await log_events.wait_for("authentication_succeeded")
    assert ok["principal"] == "User:ALICE"


async def test_a_certificate_no_rule_maps_fails_the_handshake(start_broker: Any, certs: Certs,
                                                               log_events: Any) -> None:
    running = await start_broker(tls_settings(
        certs, **{"ssl.client.auth": "required", "ssl.truststore.location": str(certs.ca_pem),
                  "ssl.principal.mapping.rules": "RULE:^CN=bob,.*$/bob/"}))
    client = await tls_client(running.port, client_context(certs, with_cert=True))
    with pytest.raises(trio.BrokenResourceError):
        await client.send(API_VERSIONS, 3, API_VERSIONS_V3)
        assert await client.closed_by_peer()
        await client.send(API_VERSIONS, 3, API_VERSIONS_V3)
    [closed] = await log_events.wait_for("connection_closed", reason="ssl_handshake_failed")
    assert "no principal mapping rule" in closed["detail"]
    assert not log_events.events("request")


async def test_required_client_auth_refuses_a_client_without_certificate(
        start_broker: Any, certs: Certs, log_events: Any) -> None:
    running = await start_broker(tls_settings(
        certs, **{"ssl.client.auth": "required", "ssl.truststore.location": str(certs.ca_pem)}))
    await assert_refused(running.port, client_context(certs))
    [closed] = await log_events.wait_for("connection_closed", reason="ssl_handshake_failed")
    assert closed["peer"].startswith("127.0.0.1:")
    assert log_events.events("authentication_failed", mechanism="SSL")


async def test_required_client_auth_refuses_a_certificate_of_another_ca(
        start_broker: Any, certs: Certs, log_events: Any) -> None:
    running = await start_broker(tls_settings(
        certs, **{"ssl.client.auth": "required", "ssl.truststore.location": str(certs.ca_pem)}))
    other = trustme.CA(organization_name="mallory")
    context = client_context(certs)
    other.issue_cert("mallory@example.com", common_name="mallory").configure_cert(context)
    await assert_refused(running.port, context)
    [closed] = await log_events.wait_for("connection_closed", reason="ssl_handshake_failed")
    assert "certificate verify failed" in closed["detail"]
    assert not log_events.events("authentication_succeeded")
    assert not log_events.events("request")
    client = await tls_client(running.port, client_context(certs, with_cert=True))
    assert (await client.request(API_VERSIONS, 3, API_VERSIONS_V3)).error_code == 0
    await client.aclose()


async def test_a_corrupt_tls_record_closes_the_connection_saying_why(
        start_broker: Any, certs: Certs, log_events: Any) -> None:
    running = await start_broker(tls_settings(certs))
    client = await tls_client(running.port, client_context(certs))
    assert (await client.request(API_VERSIONS, 3, API_VERSIONS_V3)).error_code == 0
    tcp = client.stream.transport_stream  # type: ignore[attr-defined]
    await tcp.send_all(b"\x17\x03\x03\x00\x20" + b"A" * 32)  # application data, bad MAC
    [closed] = await log_events.wait_for("connection_closed")
    assert closed["reason"] == "client"
    assert "SSLError" in closed["detail"]  # OpenSSL's reason, not a bare BrokenResourceError
    await tcp.aclose()


async def test_client_with_the_wrong_ca_fails_and_the_broker_keeps_serving(
        start_broker: Any, certs: Certs, log_events: Any) -> None:
    running = await start_broker(tls_settings(certs))
    with pytest.raises(trio.BrokenResourceError):
        await tls_client(running.port, client_context(certs, ca=certs.other_ca_pem))
    [closed] = await log_events.wait_for("connection_closed", reason="ssl_handshake_failed")
    assert closed["peer"].startswith("127.0.0.1:")
    client = await tls_client(running.port, client_context(certs))
    assert (await client.request(API_VERSIONS, 3, API_VERSIONS_V3)).error_code == 0
    await client.aclose()
    metrics = running.broker.authentication_metrics  # Kafka's socket-server-metrics
    assert (metrics.total("failed", "SSL"), metrics.total("successful", "SSL")) == (1, 1)


async def test_a_silent_client_costs_its_task_until_idle_expiry_never_the_acceptor(
        start_broker: Any, certs: Certs, log_events: Any,
        autojump_clock: trio.testing.MockClock) -> None:
    autojump_clock.autojump_threshold = 0.02
    running = await start_broker(tls_settings(certs, **{"connections.max.idle.ms": "60000"}))
    silent = await trio.open_tcp_stream("127.0.0.1", running.port)
    started = trio.current_time()
    # Meanwhile others connect and are served.
    client = await tls_client(running.port, client_context(certs))
    assert (await client.request(API_VERSIONS, 3, API_VERSIONS_V3)).error_code == 0
    await client.aclose()
    assert trio.current_time() - started < 1
    assert await silent.receive_some(10) == b""  # closed by the broker
    elapsed = trio.current_time() - started
    assert 60 <= elapsed < 61
    [closed] = log_events.events("connection_closed", reason="ssl_handshake_failed")
    assert "connections.max.idle.ms" in closed["detail"]
    await silent.aclose()


def client_hello(certs: Certs) -> bytes:
    """The first flight of a real TLS client: its ClientHello."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = client_context(certs).wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


async def read_until_closed(stream: trio.SocketStream) -> None:
    with contextlib.suppress(trio.BrokenResourceError):
        while await stream.receive_some(65536):
            pass


async def test_half_open_handshakes_and_garbage_never_block_a_good_client(
        start_broker: Any, certs: Certs, log_events: Any,
        autojump_clock: trio.testing.MockClock) -> None:
    """A crowd of clients that send a ClientHello and fall silent, plain-text Kafka frames,
    garbage, or close mid-handshake: each costs its own task only; a good client is served
    meanwhile, the silent ones are closed at connections.max.idle.ms, and every one is an
    ssl_handshake_failed event."""
    autojump_clock.autojump_threshold = 0.02
    running = await start_broker(tls_settings(certs, **{"connections.max.idle.ms": "60000"}))
    hello = client_hello(certs)
    silent = []
    for _ in range(60):
        stream = await trio.open_tcp_stream("127.0.0.1", running.port)
        await stream.send_all(hello)
        silent.append(stream)
    plain = WireClient(await trio.open_tcp_stream("127.0.0.1", running.port))
    await plain.send(API_VERSIONS, 3, API_VERSIONS_V3)
    garbage = await trio.open_tcp_stream("127.0.0.1", running.port)
    await garbage.send_all(b"\x16\x03\x01\xff\xff" + bytes(range(256)) * 4)
    quitter = await trio.open_tcp_stream("127.0.0.1", running.port)
    await quitter.send_all(hello[:20])
    await quitter.aclose()
    started = trio.current_time()
    client = await tls_client(running.port, client_context(certs))
    assert (await client.request(API_VERSIONS, 3, API_VERSIONS_V3)).error_code == 0
    await client.aclose()
    assert await plain.closed_by_peer()
    await read_until_closed(garbage)
    assert trio.current_time() - started < 1
    for stream in silent:
        await read_until_closed(stream)  # the ServerHello, then the close
        await stream.aclose()
    assert 60 <= trio.current_time() - started < 61
    with trio.fail_after(5):  # the broker logs each close after the socket's
        while len(failed := log_events.events("connection_closed",
                                              reason="ssl_handshake_failed")) < 63:
            await trio.sleep(0.01)
    assert len(failed) == 63
    assert sum("connections.max.idle.ms" in e["detail"] for e in failed) == 60
    assert not [e for e in log_events.events("connection_closed") if e["reason"] == "error"]
    await plain.aclose()
    await garbage.aclose()


async def test_a_large_fetch_over_tls_is_read_from_the_file_a_chunk_at_a_time(
        start_broker: Any, certs: Certs) -> None:
    """TLS cannot use sendfile: the response's record bytes are read from the segment a chunk
    at a time as the client takes them (Kafka's SslTransportLayer.transferFrom), not read
    whole first. Read whole, four TLS clients not reading 20 MB fetches held 394 MB."""
    running = await start_broker(tls_settings(certs, **{"socket.send.stall.timeout.ms": "-1"}))
    lm = running.broker.log_manager
    lm.create_topic("t", 1)
    log = lm.get_partition("t", 0)
    for index in range(8):  # 8 MB
        log.append(rb.build_batch([(None, bytes([index]) * 1_000_000, [], 1_700_000_000_000)]))
    lm.create_topic("empty", 1)
    client = await tls_client(running.port, client_context(certs))
    # A first fetch imports the response's schema modules (kio builds their classes on import,
    # about 2 MB): measured below, they would depend on which tests ran before.
    await client.send(FETCH, 11, fetch_request(11, "empty", 0, max_bytes=16 << 20))
    with trio.fail_after(30):
        assert await client.receive_frame() is not None
    tracemalloc.start()
    try:
        await client.send(FETCH, 11, fetch_request(11, "t", 0, max_bytes=16 << 20))
        await trio.testing.wait_all_tasks_blocked()  # the client reads nothing: the write waits
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 << 20
    with trio.fail_after(30):
        payload = await client.receive_frame()
    assert payload is not None
    _, body = decode_response(FETCH, 11, payload)
    assert body.responses[0].partitions[0].records == log.segments[0].log_path.read_bytes()
    await client.aclose()


def test_jks_and_pkcs12_are_refused_naming_the_key(certs: Certs) -> None:
    config = load_config({**tls_settings(certs), "ssl.keystore.type": "JKS"})
    with pytest.raises(ConfigError, match="ssl.keystore.type"):
        listener_security(config)
    config = load_config({**tls_settings(certs),
                          "listener.name.ssl.ssl.truststore.type": "PKCS12"})
    with pytest.raises(ConfigError, match="listener.name.ssl.ssl.truststore.type"):
        listener_security(config)


def test_missing_keystore_and_wrong_key_password_name_the_key(certs: Certs, tmp_path: Any
                                                               ) -> None:
    config = load_config({"listeners": "SSL://127.0.0.1:0"})
    with pytest.raises(ConfigError, match="ssl.keystore.location"):
        listener_security(config)
    encrypted = tmp_path / "enc.pem"
    key = ssl_encrypted_key(certs)
    encrypted.write_bytes(key + certs.client_cert.cert_chain_pems[0].bytes())
    config = load_config({"listeners": "SSL://127.0.0.1:0",
                          "ssl.keystore.location": str(encrypted),
                          "ssl.key.password": "wrong"})
    with pytest.raises(ConfigError, match="ssl.keystore.location"):
        listener_security(config)
    config = load_config({"listeners": "SSL://127.0.0.1:0",
                          "ssl.keystore.location": str(encrypted),
                          "ssl.key.password": "secret"})
    assert listener_security(config)["SSL"].ssl_context is not None


def ssl_encrypted_key(certs: Certs) -> bytes:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(certs.client_cert.private_key_pem.bytes(), None)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.BestAvailableEncryption(b"secret"))


def test_inline_pem_keystore_and_truststore(certs: Certs) -> None:
    chain = certs.keystore.read_text()
    key_end = re.search(r"-----END [A-Z ]*PRIVATE KEY-----", chain).end()  # type: ignore[union-attr]
    config = load_config({
        "listeners": "SSL://127.0.0.1:0",
        "ssl.keystore.key": chain[:key_end],
        # Kafka allows the PEM on one line in a properties file
        "ssl.keystore.certificate.chain": chain[key_end:].strip().replace("\n", " "),
        "ssl.truststore.certificates": certs.ca_pem.read_text(),
        "ssl.client.auth": "required"})
    assert listener_security(config)["SSL"].ssl_context is not None


def test_enabled_protocols_and_cipher_suites(certs: Certs) -> None:
    config = load_config({**tls_settings(certs), "ssl.enabled.protocols": "TLSv1.3"})
    context = listener_security(config)["SSL"].ssl_context
    assert context is not None and context.minimum_version == ssl.TLSVersion.TLSv1_3
    config = load_config({**tls_settings(certs), "ssl.enabled.protocols": "SSLv3"})
    with pytest.raises(ConfigError, match="ssl.enabled.protocols"):
        listener_security(config)
    config = load_config({**tls_settings(certs),
                          "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"})
    assert listener_security(config)["SSL"].ssl_context is not None
    config = load_config({**tls_settings(certs), "ssl.cipher.suites": "NOT_A_CIPHER"})
    with pytest.raises(ConfigError, match="ssl.cipher.suites"):
        listener_security(config)


def test_subject_dn_and_rules() -> None:
    cert = {"subject": ((("countryName", "US"),), (("organizationName", "Acme, Inc."),),
                        (("commonName", "bob"),))}
    dn = subject_dn(cert)
    assert dn == "CN=bob,O=Acme\\, Inc.,C=US"
    assert PrincipalMapper.parse("DEFAULT").name(dn) == dn
    mapper = PrincipalMapper.parse("RULE:^CN=([a-z]+),O=.*$/$1@acme/L, DEFAULT")
    assert mapper.name(dn) == "bob@acme"
    assert mapper.name("CN=X Y") == "CN=X Y"
    with pytest.raises(ValueError):
        PrincipalMapper.parse("RULE:^CN=(.*)$/$1/").name("OU=x")
    with pytest.raises(ConfigError):
        PrincipalMapper.parse("RULE:broken")
