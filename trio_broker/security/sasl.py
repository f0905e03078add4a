"""The SASL server side of one connection (Kafka's SaslServerAuthenticator), sans-IO.

Mechanisms: PLAIN (users from the listener's JAAS entry, Kafka's ``user_<name>="<password>"``
options) and SCRAM-SHA-256/512 (RFC 5802/7677 through ``scramp``; credentials from the
:class:`~trio_broker.security.scram.ScramStore`). Every token is untrusted input: any malformed
token is an :class:`AuthenticationFailed`, never another exception (tests/security fuzz it).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping

import attrs
import scramp

from .scram import MECHANISMS, ScramCredential

API_VERSIONS = 18
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
#: What an unauthenticated connection may send (Kafka's SaslServerAuthenticator).
PRE_AUTHENTICATION_APIS = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})
IMPLEMENTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

PLAIN_FAILED = "Authentication failed: Invalid username or password"
UNKNOWN_SCRAM_USER = "Authentication failed: Invalid user credentials"


class AuthenticationFailed(Exception):
    """The client failed to authenticate; ``message`` is what SaslAuthenticate tells it."""

    def __init__(self, message: str, principal: str = "") -> None:
        self.message = message
        self.principal = principal
        super().__init__(message)


class JaasError(ValueError):
    """A ``sasl.jaas.config`` value Kafka's JaasConfig would refuse."""


@attrs.frozen
class JaasEntry:
    """One login module of a ``sasl.jaas.config`` value."""

    login_module: str
    control_flag: str
    options: Mapping[str, str]


def parse_jaas(text: str) -> tuple[JaasEntry, ...]:
    """Parse Kafka's JAAS syntax: ``<class> <flag> key="value" key2=value2;`` (one or more)."""
    tokens = _jaas_tokens(text)
    entries = []
    index = 0
    while index < len(tokens):
        module, flag = tokens[index], tokens[index + 1] if index + 1 < len(tokens) else ";"
        if module == ";" or flag == ";" or module.startswith('"'):
            raise JaasError(f"expected '<LoginModule> <controlFlag>' in {text!r}")
        if flag.lower() not in ("required", "requisite", "sufficient", "optional"):
            raise JaasError(f"invalid control flag {flag!r}")
        index += 2
        options: dict[str, str] = {}
        while True:
            if index >= len(tokens):
                raise JaasError("a login module must end with ';'")
            token = tokens[index]
            if token == ";":
                index += 1
                break
            if index + 2 >= len(tokens) or tokens[index + 1] != "=":
                raise JaasError(f"expected key=value after {token!r}")
            value = tokens[index + 2]
            options[token] = value[1:] if value.startswith('"') else value
            index += 3
        entries.append(JaasEntry(module, flag.lower(), options))
    if not entries:
        raise JaasError("no login module given")
    return tuple(entries)


def _jaas_tokens(text: str) -> list[str]:
    """Words, '=', ';' and quoted strings (kept with a leading '"' marker, escapes resolved)."""
    tokens: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char.isspace():
            index += 1
        elif char in "=;":
            tokens.append(char)
            index += 1
        elif char == '"':
            out = ['"']
            index += 1
            while True:
                if index >= len(text):
                    raise JaasError("unterminated quoted string")
                char = text[index]
                if char == "\\" and index + 1 < len(text):
                    out.append(text[index + 1])
                    index += 2
                    continue
                index += 1
                if char == '"':
                    break
                out.append(char)
            tokens.append("".join(out))
        else:
            start = index
            while index < len(text) and not text[index].isspace() and text[index] not in '=;"':
                index += 1
            tokens.append(text[start:index])
    return tokens


def plain_users(entries: tuple[JaasEntry, ...]) -> dict[str, str]:
    """The ``user_<name>="<password>"`` options of PlainLoginModule (Kafka's
    PlainServerCallbackHandler reads exactly those)."""
    users: dict[str, str] = {}
    for entry in entries:
        for key, value in entry.options.items():
            if key.startswith("user_"):
                users[key[len("user_"):]] = value
    return users


class State(enum.Enum):
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    COMPLETE = "complete"
    FAILED = "failed"


ScramLookup = Callable[[str, str], ScramCredential | None]


class SaslAuthenticator:
    """The SASL state of one connection: handshake, token exchange, authenticated session."""

    def __init__(self, mechanisms: tuple[str, ...], plain: Mapping[str, str],
                 scram: ScramLookup, reauth_ms: int) -> None:
        self.mechanisms = mechanisms
        self._plain = plain
        self._scram = scram
        self.reauth_ms = reauth_ms
        self.state = State.HANDSHAKE
        self.mechanism = ""
        self.principal = ""
        #: When the session ends (the caller's clock), None: never (connections.max.reauth.ms 0).
        self.session_expires_at: float | None = None
        self.reauthenticating = False
        self._scram_server: scramp.ScramServer | None = None
        self._scram_user = ""
        self._api_versions_answered = False
        #: A re-authentication's handshake named another enabled mechanism: Kafka answers it
        #: and fails the exchange that follows with this text (its REAUTH_BAD_MECHANISM).
        self._bad_mechanism: str | None = None
        #: The exchange began with SaslHandshake v0: the tokens come without Kafka headers
        #: (Kafka's ``enableKafkaSaslAuthenticateHeaders`` false), and the session can never be
        #: re-authenticated (KIP-368 needs SaslAuthenticate v1).
        self.raw_tokens = False

    @property
    def authenticated(self) -> bool:
        return self.state is State.COMPLETE

    def admits(self, api_key: int, now: float, unsupported_version: bool = False) -> bool:
        """Whether a request of ``api_key`` may be served now (recording an ApiVersions that
        is); otherwise the connection closes (Kafka's ILLEGAL_SASL_STATE before
        authentication, expiry after an unrenewed session)."""
        if self.state is State.COMPLETE and not self.reauthenticating:
            expires = self.session_expires_at
            return expires is None or now <= expires or api_key == SASL_HANDSHAKE
        if api_key == API_VERSIONS:
            # Kafka's SaslServerAuthenticator answers one ApiVersions, before SaslHandshake
            # (again after an UNSUPPORTED_VERSION answer: clients retry with a version the
            # broker knows). Otherwise an unauthenticated client could hold its connection
            # forever, idle expiry never coming, with ApiVersions alone.
            if self.state is not State.HANDSHAKE or self._api_versions_answered:
                return False
            self._api_versions_answered = not unsupported_version
            return True
        return api_key in PRE_AUTHENTICATION_APIS

    @property
    def expects_raw_token(self) -> bool:
        """The next frame is a bare SASL token, not a request (after SaslHandshake v0)."""
        return self.raw_tokens and self.state is State.AUTHENTICATE

    @property
    def reauthenticable(self) -> bool:
        """Whether a SaslHandshake after authentication starts a re-authentication: only with
        ``connections.max.reauth.ms`` set and a session opened with SaslHandshake v1 (Kafka
        gives a v0 session no expiry and answers its later handshakes ILLEGAL_SASL_STATE)."""
        return self.reauth_ms > 0 and not self.raw_tokens

    def handshake(self, mechanism: str, *, raw_tokens: bool = False) -> bool:
        """A SaslHandshake: True when the mechanism is enabled (the exchange starts).

        ``raw_tokens``: the handshake was v0, so the tokens that follow come without Kafka
        headers. A re-authentication keeps the framing its session began with (Kafka switches
        to headers on v1 and never back)."""
        if mechanism not in self.mechanisms:
            return False
        if self.state is State.COMPLETE:
            self.reauthenticating = True
            if mechanism != self.mechanism:
                # SaslServerAuthenticator.ReauthInfo.saslMechanismUnchanged
                self._bad_mechanism = (
                    f"SASL mechanism '{mechanism}' requested by client is not supported for "
                    f"re-authentication of mechanism '{self.mechanism}'")
        if self.state is State.HANDSHAKE:  # a re-authentication keeps its session's mechanism
            self.raw_tokens = raw_tokens
            self.mechanism = mechanism
        self.state = State.AUTHENTICATE
        return True

    def authenticate(self, token: bytes, now: float) -> tuple[bool, bytes]:
        """One SaslAuthenticate token: ``(complete, server bytes)``.

        Raises :class:`AuthenticationFailed` (the state becomes FAILED: the connection closes
        after the failure delay)."""
        if self._bad_mechanism is not None:
            self.state = State.FAILED
            raise AuthenticationFailed(self._bad_mechanism, self.principal)
        try:
            if self.mechanism == "PLAIN":
                principal, response, done = self._plain_step(token), b"", True
            else:
                principal, response, done = self._scram_step(token)
        except AuthenticationFailed:
            self.state = State.FAILED
            raise
        if not done:
            return False, response
        if self.reauthenticating and principal != self.principal:
            self.state = State.FAILED
            # Kafka's ReauthInfo.ensurePrincipalUnchanged names them <type>.<name>
            raise AuthenticationFailed(
                "Cannot change principals during re-authentication from "
                f"{_dotted(self.principal)}: {_dotted(principal)}", principal)
        self.principal = principal
        self.state = State.COMPLETE
        self.reauthenticating = False
        self.session_expires_at = (now + self.reauth_ms / 1000 if self.reauthenticable
                                   else None)
        return True, response

    def _plain_step(self, token: bytes) -> str:
        """RFC 4616 ``[authzid] NUL authcid NUL passwd``, with Kafka's PlainSaslServer checks."""
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: not UTF-8") from None
        parts = text.split("\0")
        if len(parts) != 3:
            raise AuthenticationFailed(
                f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid, username, password = parts
        if not username:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        principal = f"User:{username}"
        expected = self._plain.get(username)
        if expected is None or not _same(expected, password):
            raise AuthenticationFailed(PLAIN_FAILED, principal)
        if authzid and authzid != username:
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different "
                "from username", principal)
        return principal

    def _scram_step(self, token: bytes) -> tuple[str, bytes, bool]:
        mechanism = self.mechanism
        phase = "re-authentication" if self.reauthenticating else "authentication"
        invalid = (f"Authentication failed during {phase} due to invalid credentials with "
                   f"SASL mechanism {mechanism}")
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed(invalid, self._principal_tried()) from None
        if self._scram_server is None:
            claimed = _claimed_user(text)
            if claimed is not None:
                # An unknown user fails before scramp's SASLprep of the name, which costs ~3 µs
                # of CPU per character on the event loop (a 500 KB name: 1.5 s); Kafka does not
                # SASLprep names either.
                self._scram_user = claimed
                try:
                    known = self._scram(claimed, mechanism) is not None
                except Exception:  # an unreadable credentials file: no login, as below
                    raise AuthenticationFailed(invalid, self._principal_tried()) from None
                if not known:
                    raise AuthenticationFailed(UNKNOWN_SCRAM_USER, self._principal_tried())
            unknown: list[str] = []

            def lookup(user: str) -> tuple[bytes, bytes, bytes, int]:
                # scramp has unescaped the saslname already: once more would make a user
                # named "=2C" the user ",".
                self._scram_user = user
                cred = self._scram(user, mechanism)
                if cred is None:
                    unknown.append(user)
                    raise KeyError(user)
                return cred.auth_info()

            server = scramp.ScramMechanism(mechanism).make_server(lookup)
            try:
                server.set_client_first(text)
            except Exception:  # scramp raises ScramException, KeyError (lookup) and others
                message = UNKNOWN_SCRAM_USER if unknown else invalid
                raise AuthenticationFailed(message, self._principal_tried()) from None
            self._scram_server = server
            return "", server.get_server_first().encode("utf-8"), False
        server = self._scram_server
        self._scram_server = None
        try:
            server.set_client_final(text)
            final = server.get_server_final()
        except Exception:  # any malformed or wrong proof is a failed authentication
            raise AuthenticationFailed(invalid, self._principal_tried()) from None
        return f"User:{self._scram_user}", final.encode("utf-8"), True

    def _principal_tried(self) -> str:
        return f"User:{self._scram_user}" if self._scram_user else ""


#: The longest claimed principal an ``authentication_failed`` line carries whole. The name
#: comes from a peer that has not authenticated (up to ``sasl.server.max.receive.size``): a
#: line of that size per attempt would let one client fill the broker's log.
MAX_LOGGED_PRINCIPAL = 256


def loggable_principal(principal: str) -> str:
    """``principal`` for the log: cut to :data:`MAX_LOGGED_PRINCIPAL` characters, saying how
    many more there were."""
    if len(principal) <= MAX_LOGGED_PRINCIPAL:
        return principal
    return (f"{principal[:MAX_LOGGED_PRINCIPAL]}... "
            f"({len(principal) - MAX_LOGGED_PRINCIPAL} more characters)")


def _claimed_user(client_first: str) -> str | None:
    """The user name of a SCRAM client-first message (``gs2-header n=name,r=nonce...``), or
    None when it has none where RFC 5802 puts it (scramp then refuses the message)."""
    parts = client_first.split(",", 3)
    if len(parts) < 4 or not parts[2].startswith("n="):
        return None
    return _sasl_name(parts[2][2:])


def _sasl_name(name: str) -> str:
    """RFC 5802 saslname: '=2C' is ',' and '=3D' is '=' (Kafka's ScramFormatter.username)."""
    return name.replace("=2C", ",").replace("=3D", "=")


def _dotted(principal: str) -> str:
    """``User:alice`` as Kafka's texts print a KafkaPrincipal's type and name: ``User.alice``."""
    kind, _, name = principal.partition(":")
    return f"{kind}.{name}"


def _same(a: str, b: str) -> bool:
    import hmac

    return hmac.compare_digest(a.encode("utf-8"), b.encode("utf-8"))


def check_mechanisms(mechanisms: tuple[str, ...]) -> str | None:
    """None when every mechanism is implemented, else what is wrong."""
    if not mechanisms:
        return "a SASL listener needs at least one mechanism"
    unknown = [m for m in mechanisms if m not in IMPLEMENTED_MECHANISMS]
    if unknown:
        return (f"{', '.join(unknown)} not implemented; allowed: "
                + ", ".join(IMPLEMENTED_MECHANISMS))
    return None


__all__ = ["MECHANISMS", "AuthenticationFailed", "SaslAuthenticator", "parse_jaas"]
