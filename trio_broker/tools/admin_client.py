"""A small blocking admin client: one plain socket, ApiVersions negotiation, request/response.

Kafka's tools use the Java AdminClient; ours need one connection to one broker of the
``--bootstrap-server`` list, so a blocking socket is enough (no event loop, no threads).
The protocol work (request frames, correlation ids, response framing, decoding through the
broker's pre-scan) is the sans-IO core it shares with the pytest plugin's Trio client,
:class:`~trio_broker.protocol.client_codec.ClientCodec`; this module is the blocking I/O around it.
"""

from __future__ import annotations

import socket
import ssl
import sys
from types import ModuleType
from typing import Any

import attrs
from kio.index import UnknownEntity, load_request_schema
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from .. import __version__
from ..protocol.client_codec import ClientCodec, InvalidResponse
from ..protocol.codec import API_VERSIONS_KEY

#: What this client sends as its KIP-511 software name (letters, digits, '-' and '.').
CLIENT_SOFTWARE_NAME = "trio-broker-tools"
_API_VERSIONS_VERSION = 3
_SASL_HANDSHAKE, _SASL_AUTHENTICATE = 17, 36
#: The SASL mechanisms this client can log in with.
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_MAX_RESPONSE_BYTES = 100 * 1024 * 1024


class AdminClientError(Exception):
    """The broker could not be reached or answered something this client cannot use."""


class UnsupportedVersion(AdminClientError):
    """The broker does not support an API (or no version this client can encode)."""


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    """``host:port[,host:port]`` (IPv6 hosts in brackets) as ``[(host, port)]``.

    Raises :class:`ValueError` naming the first entry that is not ``host:port``.
    """
    endpoints = []
    for item in servers.split(","):
        entry = item.strip()
        if not entry:
            continue
        host, sep, port = entry.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"Invalid url in bootstrap.servers: {entry}")
        endpoints.append((host.strip("[]"), int(port)))
    if not endpoints:
        raise ValueError("No resolvable bootstrap urls given in bootstrap.servers")
    return endpoints


def client_versions(api_key: int) -> tuple[int, int]:
    """The versions of ``api_key`` this client can encode (those kio generates)."""
    versions: list[int] = []
    for version in range(0, 64):
        try:
            load_request_schema(api_key, version)
        except UnknownEntity:
            if versions:
                break
            continue
        versions.append(version)
    if not versions:
        raise AdminClientError(f"no request schema for api key {api_key}")
    return versions[0], versions[-1]


def api_display_name(api_key: int) -> str:
    """Kafka's ``ApiKeys`` constant name (``ALTER_CLIENT_QUOTAS``), as its errors print it."""
    return api_key_map.get(api_key, f"UNKNOWN_{api_key}").upper()


def request_module(api_key: int, api_version: int) -> ModuleType:
    """The kio module of a request version (its body class and nested entity classes)."""
    return sys.modules[load_request_schema(api_key, api_version).__module__]


@attrs.frozen(eq=False)
class ClientSecurity:
    """How to secure the connection: Kafka's ``security.protocol``, a TLS context for SSL and
    SASL_SSL, and the SASL mechanism and credentials for SASL_*."""

    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")


PLAINTEXT = ClientSecurity()


class AdminConnection:
    """One connection to one broker. Use as a context manager; :meth:`connect` opens it."""

    def __init__(self, sock: socket.socket, timeout: float, client_id: str) -> None:
        self._sock = sock
        self.client_id = client_id
        self._timeout = timeout
        self._codec = ClientCodec(client_id, _MAX_RESPONSE_BYTES)
        self.broker_versions: dict[int, tuple[int, int]] = {}
        self.security = PLAINTEXT
        #: ``host:port`` this connection was opened to (for :meth:`reopen`).
        self.address = ""

    @classmethod
    def connect(cls, bootstrap: str, *, timeout: float = 30.0,
                client_id: str = "trio-broker-tools",
                security: ClientSecurity = PLAINTEXT) -> AdminConnection:
        """Connect to the first reachable broker of ``bootstrap``, learn its API versions and
        authenticate as ``security`` says (TLS first, then ApiVersions, then SASL)."""
        errors = []
        for host, port in parse_bootstrap(bootstrap):
            try:
                sock = socket.create_connection((host, port), timeout=timeout)
            except OSError as exc:
                errors.append(f"{host}:{port} ({exc.strerror or exc})")
                continue
            if security.ssl_context is not None:
                try:
                    sock = security.ssl_context.wrap_socket(sock, server_hostname=host)
                except (OSError, ssl.SSLError) as exc:
                    sock.close()
                    raise AdminClientError(f"SSL handshake with {host}:{port} failed: "
                                           f"{getattr(exc, 'reason', None) or exc}") from None
            connection = cls(sock, timeout, client_id)
            connection.security = security
            connection.address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            try:
                connection._handshake()
                if security.uses_sasl:
                    connection._authenticate(security)
            except BaseException:
                connection.close()
                raise
            return connection
        raise AdminClientError("Connection could not be established to any of the bootstrap "
                               f"servers: {', '.join(errors)}. Broker may not be available.")

    def __enter__(self) -> AdminConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._sock.close()

    def _handshake(self) -> None:
        body = ApiVersionsRequest(client_software_name=CLIENT_SOFTWARE_NAME,
                                  client_software_version=__version__)
        response = self.send(API_VERSIONS_KEY, _API_VERSIONS_VERSION, body)
        if response.error_code != ErrorCode.none:
            raise AdminClientError(f"ApiVersions failed: {response.error_code.name.upper()}")
        self.broker_versions = {int(k.api_key): (int(k.min_version), int(k.max_version))
                                for k in response.api_keys}

    def _authenticate(self, security: ClientSecurity) -> None:
        """SaslHandshake v1 then SaslAuthenticate v2 rounds (PLAIN or SCRAM)."""
        mechanism = security.mechanism or "PLAIN"
        handshake = self.send(_SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism=mechanism))
        if handshake.error_code != ErrorCode.none:
            raise AdminClientError(
                f"SASL handshake failed: {handshake.error_code.name.upper()} (the broker "
                f"offers {', '.join(handshake.mechanisms) or 'no mechanism'})")
        user, password = security.username or "", security.password or ""

        def authenticate(token: bytes) -> bytes:
            answer = self.send(_SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=token))
            if answer.error_code != ErrorCode.none:
                raise AdminClientError(
                    f"Authentication failed: {answer.error_code.name.upper()}"
                    + (f": {answer.error_message}" if answer.error_message else ""))
            return bytes(answer.auth_bytes)

        if mechanism == "PLAIN":
            authenticate(f"\0{user}\0{password}".encode())
            return
        import scramp

        scram = scramp.ScramClient([mechanism], user, password)
        first = authenticate(scram.get_client_first().encode())
        scram.set_server_first(first.decode())
        final = authenticate(scram.get_client_final().encode())
        try:
            scram.set_server_final(final.decode())
        except scramp.ScramException as exc:
            raise AdminClientError(f"The broker's SCRAM proof is wrong: {exc}") from None

    def version_for(self, api_key: int) -> int:
        """The highest version of ``api_key`` both this client and the broker support."""
        broker = self.broker_versions.get(api_key)
        ours = client_versions(api_key)
        if broker is None or broker[0] > ours[1] or ours[0] > broker[1]:
            raise UnsupportedVersion(
                f"The broker does not support {api_display_name(api_key)}"
                + (f" (broker v{broker[0]}-v{broker[1]}, client v{ours[0]}-v{ours[1]})"
                   if broker is not None else ""))
        return min(broker[1], ours[1])

    def send(self, api_key: int, api_version: int, body: Any) -> Any:
        """Send one request and return the decoded response body.

        A response this client cannot read (bad size, unknown correlation id, a length the
        pre-scan refuses, a value kio refuses) raises :class:`AdminClientError`."""
        _, frame = self._codec.encode(api_key, api_version, body)
        self._sock.sendall(frame)
        try:
            return self._codec.decode(self._receive_frame())[1]
        except InvalidResponse as exc:
            raise AdminClientError(
                f"Invalid {api_display_name(api_key)} response from the broker: {exc}") from None

    @property
    def in_sync(self) -> bool:
        """No request is waiting for its response: the next response read is the next
        request's (false after an interrupted call, e.g. Ctrl-C during a Fetch)."""
        return not self._codec.pending

    def reopen(self) -> AdminConnection:
        """A new connection to the same broker, with the same client id and security."""
        return AdminConnection.connect(self.address, timeout=self._timeout,
                                       client_id=self.client_id, security=self.security)

    def send_nowait(self, api_key: int, api_version: int, body: Any, *,
                    expect_response: bool = True) -> int:
        """Send one request without waiting for its response (pipelining, as a producer with
        several requests in flight); :meth:`receive` reads the responses in order. With
        ``expect_response`` False (Produce with acks=0) no response will come."""
        correlation, frame = self._codec.encode(api_key, api_version, body)
        if not expect_response:
            self._codec.forget(correlation)
        self._sock.sendall(frame)
        return correlation

    def receive(self) -> tuple[int, Any]:
        """The next response: ``(correlation id, decoded body)``."""
        try:
            return self._codec.decode(self._receive_frame())
        except InvalidResponse as exc:
            raise AdminClientError(f"Invalid response from the broker: {exc}") from None

    def _receive_frame(self) -> bytes:
        while (payload := self._codec.next_frame()) is None:
            try:
                data = self._sock.recv(65536)
            except TimeoutError:
                raise AdminClientError(
                    f"Timed out waiting for a response after {self._timeout:g} s") from None
            if not data:
                raise AdminClientError("The broker closed the connection")
            self._codec.feed(data)
        return payload
