"""What every over-the-wire ``trio_broker`` tool shares: the common options
(``--bootstrap-server``, ``--command-config``, ``--output``), one connection helper, requests
built for whatever version the broker and kio agree on, and one way to exit.

Exit statuses: 0 on success, 2 for a bad command line (argparse's status, with the reason on
stderr), 1 for anything that failed after the command line was understood (one line on stderr).
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import ssl
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from kio.schema.errors import ErrorCode

from .. import __version__
from ..config import parse_properties
from ..protocol.client_codec import request_body
from .admin_client import (
    SASL_MECHANISMS,
    AdminClientError,
    AdminConnection,
    ClientSecurity,
    UnsupportedVersion,
    api_display_name,
)

#: The newest version of each API these tools build requests for (kio generates them all; the
#: tools pick ``min(this, broker max)`` so older brokers work as long as the fields exist).
PINNED_VERSIONS = {0: 9, 1: 12, 2: 7, 3: 12, 8: 9, 9: 8, 10: 4, 15: 5, 16: 5, 18: 3, 19: 7,
                   20: 6, 32: 4, 33: 2, 37: 3, 42: 2, 44: 1, 47: 0, 60: 0}


class ToolError(Exception):
    """A failure after the command line was understood: printed as one line, exit 1."""


class UsageError(ToolError):
    """A command line that cannot work (exit 2), found after argparse accepted it."""


class Reported(ToolError):
    """A failure whose message is already on stderr (in the Kafka tool's words): exit 1,
    nothing more printed."""


class BrokerError(ToolError):
    """An error code in a response, printed with Kafka's name for it."""

    def __init__(self, code: int, message: str | None = None, where: str = "") -> None:
        self.code = ErrorCode(code)
        text = self.code.name.upper()
        if where:
            text = f"{where}: {text}"
        if message:
            text += f": {message}"
        super().__init__(text)


def check(code: int, message: str | None = None, where: str = "") -> None:
    """Raise :class:`BrokerError` unless ``code`` is NONE."""
    if code != ErrorCode.none:
        raise BrokerError(code, message, where)


#: Kafka's exception class and ``Errors`` message of the errors its tools print as a Java
#: exception (``ExecutionException.getMessage()``: ``<class>: <message>``).
_JAVA_ERRORS = {
    ErrorCode.offset_out_of_range: (
        "OffsetOutOfRangeException",
        "The requested offset is not within the range of offsets maintained by the server."),
    ErrorCode.unknown_topic_or_partition: (
        "UnknownTopicOrPartitionException", "This server does not host this topic-partition."),
    ErrorCode.not_leader_or_follower: (
        "NotLeaderOrFollowerException",
        "For requests intended only for the leader, this error indicates that the broker is "
        "not the current leader. For requests intended for any replica, this error indicates "
        "that the broker is not a replica of the topic partition."),
    ErrorCode.policy_violation: ("PolicyViolationException",
                                 "Request parameters do not satisfy the configured policy."),
    ErrorCode.topic_authorization_failed: ("TopicAuthorizationException",
                                           "Topic authorization failed."),
    ErrorCode.cluster_authorization_failed: ("ClusterAuthorizationException",
                                             "Cluster authorization failed."),
    ErrorCode.election_not_needed: ("ElectionNotNeededException",
                                    "Leader election not needed for topic partition."),
    ErrorCode.preferred_leader_not_available: (
        "PreferredLeaderNotAvailableException",
        "The preferred leader was not available."),
    ErrorCode.eligible_leaders_not_available: (
        "EligibleLeadersNotAvailableException",
        "Eligible topic partition leaders are not available."),
    ErrorCode.unsupported_version: ("UnsupportedVersionException",
                                    "The version of API is not supported."),
}


def java_error(code: int, message: str | None = None) -> str:
    """An error code as a Kafka tool prints the exception it becomes:
    ``org.apache.kafka.common.errors.OffsetOutOfRangeException: The requested offset ...``
    (the response's error message when it has one; the error's name for the rest)."""
    error = ErrorCode(code)
    known = _JAVA_ERRORS.get(error)
    if known is None:
        return f"{error.name.upper()}" + (f": {message}" if message else "")
    return f"org.apache.kafka.common.errors.{known[0]}: {message or known[1]}"


def ms(value: float) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


def add_connection_options(parser: argparse.ArgumentParser, *, output: bool = True) -> None:
    """``--bootstrap-server``, ``--command-config`` and (for listing tools) ``--output``."""
    group = parser.add_argument_group("connection")
    group.add_argument("--bootstrap-server", "-b", metavar="HOST:PORT", required=True,
                       help="the broker(s) to connect to: host:port[,host:port]")
    group.add_argument("--command-config", metavar="FILE",
                       help="client properties file: client.id, request.timeout.ms, "
                            "security.protocol, ssl.*, sasl.* (PLAIN, SCRAM)")
    if output:
        group.add_argument("--output", choices=("text", "json"), default="text",
                           help="text (the Kafka tool's format, default) or json for scripts")


def client_settings(path: str | None, tool: str) -> dict[str, str]:
    """``--command-config``: the client properties file (checked by :func:`security_of`)."""
    if path is None:
        return {}
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ToolError(f"{path}: {exc.strerror}") from None
    settings = parse_properties(text)
    request_timeout(settings)
    security_of(settings)
    return settings


def request_timeout(settings: dict[str, str]) -> float:
    """``request.timeout.ms`` in seconds (30 s by default), refused as Kafka's ConfigDef
    refuses it: an INT of at least 0."""
    text = settings.get("request.timeout.ms", "30000").strip()
    try:
        value = int(text)
    except ValueError:
        raise ToolError(f"Invalid value {text} for configuration request.timeout.ms: "
                        "Not a number of type INT") from None
    if value < 0:
        raise ToolError(f"Invalid value {text} for configuration request.timeout.ms: "
                        "Value must be at least 0")
    return value / 1000


_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def security_of(settings: dict[str, str]) -> ClientSecurity:
    """``security.protocol``, ``ssl.*`` and ``sasl.*`` client properties as a
    :class:`ClientSecurity`. Credentials come from ``sasl.jaas.config`` (Java clients'
    ``username="..." password="..."``) or librdkafka's ``sasl.username``/``sasl.password``;
    CA and client certificates are PEM files (``ssl.ca.location`` or a PEM
    ``ssl.truststore.location``; ``ssl.certificate.location`` + ``ssl.key.location`` or a PEM
    ``ssl.keystore.location``)."""
    protocol = settings.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        raise ToolError(f"Invalid value {protocol} for configuration security.protocol")
    context = None
    if protocol.endswith("SSL"):
        ca = settings.get("ssl.ca.location") or settings.get("ssl.truststore.location")
        try:
            context = ssl.create_default_context(cafile=ca or None)
            if settings.get("ssl.endpoint.identification.algorithm", "https") == "":
                context.check_hostname = False
            cert = settings.get("ssl.certificate.location") or settings.get(
                "ssl.keystore.location")
            if cert:
                context.load_cert_chain(cert, settings.get("ssl.key.location") or None,
                                        settings.get("ssl.key.password") or None)
        except (OSError, ssl.SSLError) as exc:
            raise ToolError(f"Cannot load the TLS files of --command-config: {exc}") from None
    mechanism = username = password = None
    if protocol.startswith("SASL_"):
        mechanism = settings.get("sasl.mechanism", "GSSAPI").strip().upper()
        if mechanism not in SASL_MECHANISMS:
            raise ToolError(f"sasl.mechanism={mechanism} is not supported (use one of "
                            f"{', '.join(SASL_MECHANISMS)})")
        jaas = dict(_JAAS_OPTION.findall(settings.get("sasl.jaas.config", "")))
        username = settings.get("sasl.username", jaas.get("username"))
        password = settings.get("sasl.password", jaas.get("password"))
        if username is None or password is None:
            raise ToolError(f"{protocol} with {mechanism} needs a username and password "
                            "(sasl.jaas.config, or sasl.username and sasl.password)")
    return ClientSecurity(protocol, context, mechanism, username, password)


def connect(ns: argparse.Namespace, tool: str) -> AdminConnection:
    """One connection to the first reachable ``--bootstrap-server``."""
    return connect_with(ns.bootstrap_server, client_settings(ns.command_config, tool), tool)


def connect_with(bootstrap_server: str, settings: dict[str, str], tool: str) -> AdminConnection:
    """One connection to the first reachable of ``bootstrap_server``, with the client
    properties already read by :func:`client_settings` (request.timeout.ms, client.id,
    security)."""
    timeout = request_timeout(settings)
    return AdminConnection.connect(bootstrap_server, timeout=timeout,
                                   client_id=settings.get("client.id", f"trio-broker-{tool}"),
                                   security=security_of(settings))


def version_of(conn: AdminConnection, api_key: int) -> int:
    """The version to send: the highest both sides support, capped at :data:`PINNED_VERSIONS`."""
    broker = conn.broker_versions.get(api_key)
    if broker is None:
        raise UnsupportedVersion(f"The broker does not support {api_display_name(api_key)}")
    version = min(broker[1], PINNED_VERSIONS.get(api_key, broker[1]))
    if version < broker[0]:
        return conn.version_for(api_key)
    return version


class Request:
    """Build and send requests of one API at the negotiated version."""

    def __init__(self, conn: AdminConnection, api_key: int) -> None:
        self.conn = conn
        self.api_key = api_key
        self.version = version_of(conn, api_key)

    def nested(self, class_name: str, **fields: Any) -> Any:
        return request_body(self.api_key, self.version, class_name, **fields)

    def send(self, **fields: Any) -> Any:
        return self.conn.send(self.api_key, self.version,
                              request_body(self.api_key, self.version, **fields))


def usage_if_empty(args: Sequence[str], parser: argparse.ArgumentParser, description: str,
                   err: TextIO) -> bool:
    """Kafka's tools' answer to an empty command line (``CommandLineUtils.printUsageAndDie``):
    the description and the usage on stderr; True when the caller should exit with status 1."""
    if args:
        return False
    print(description, file=err)
    parser.print_help(err)
    return True


def help_or_version(options: Any, parser: argparse.ArgumentParser, out: TextIO) -> bool:
    """Kafka's tools' ``--help`` (usage) and ``--version`` flags, answered on stdout; True when
    one was given and the caller should exit with status 0."""
    if options.help:
        parser.print_help(out)
        return True
    if options.version:
        print(f"trio_broker {__version__}", file=out)
        return True
    return False


def kafka_text(value: Any) -> str:
    """A value as Kafka's tools print it in their text output: Java's string concatenation
    gives ``null`` for an absent value (None) and ``true``/``false`` for booleans. The JSON
    output keeps JSON's null."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def emit_json(value: Any, out: TextIO) -> None:
    """One JSON document on one line (``jq``-friendly)."""
    print(json.dumps(value, sort_keys=False, default=str), file=out)


class Parser(argparse.ArgumentParser):
    """argparse with the examples kept as written and errors as one line then exit 2."""

    def __init__(self, prog: str, description: str, examples: str) -> None:
        super().__init__(prog=prog, description=description,
                         formatter_class=argparse.RawDescriptionHelpFormatter,
                         epilog="examples:\n" + examples)
        self.add_argument("--version", action="version", version=f"trio_broker {__version__}")

    def error(self, message: str) -> Any:
        self.exit(2, f"{self.prog}: error: {message}\n")


def run(parser: argparse.ArgumentParser, argv: Sequence[str] | None,
        action: Callable[[argparse.Namespace], None], err: TextIO | None = None) -> int:
    """Parse, run ``action``, turn every failure into one line on stderr and a status."""
    err = err if err is not None else sys.stderr
    try:
        ns = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        action(ns)
    except UsageError as exc:
        print(f"{parser.prog}: error: {exc}", file=err)
        return 2
    except Reported:
        return 1
    except (ToolError, AdminClientError) as exc:
        print(f"{parser.prog}: {exc}", file=err)
        return 1
    except BrokenPipeError:  # `| head` closed the pipe: not an error for a shell tool
        return 0
    except (OSError, ValueError) as exc:
        print(f"{parser.prog}: {exc}", file=err)
        return 1
    return 0
