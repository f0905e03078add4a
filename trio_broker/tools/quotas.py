"""``trio_broker quotas``: kafka-configs.sh for client quotas, for users who have no Kafka tools.

::

    trio_broker quotas --bootstrap-server HOST:PORT --describe [--entity-type users|clients|ips]
                       [--entity-name NAME | --entity-default]
    trio_broker quotas --bootstrap-server HOST:PORT --alter
                       --add-config 'producer_byte_rate=1024,consumer_byte_rate=2048'
                       [--delete-config KEY[,KEY]]
                       --entity-type users --entity-name alice --entity-type clients --entity-name app

Options, their checks, their order rules and every message are those of Kafka's
``ConfigCommand`` (``kafka-configs.sh``) for the ``users``, ``clients`` and ``ips`` entity types:
repeatable ``--entity-type``/``--entity-name``/``--entity-default`` paired in command-line order,
the ``--user``/``--client``/``--ip`` and ``--user-defaults``/``--client-defaults``/
``--ip-defaults`` shorthands, DescribeClientQuotas with a strict filter, AlterClientQuotas after
checking that every key to delete exists. It talks to the broker with
:class:`~trio_broker.tools.admin_client.AdminConnection` (one socket, versions negotiated through
ApiVersions). Exit status 0 on success, 1 on any error (as Kafka's tool).
"""

from __future__ import annotations

import argparse
import hashlib
import ipaddress
import math
import os
import re
import socket
import sys
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any, NoReturn, TextIO

import attrs
from kio.schema.errors import ErrorCode

from ..config import parse_properties
from .admin_client import AdminClientError, AdminConnection, UnsupportedVersion, request_module
from .common import (
    ToolError,
    client_settings,
    connect_with,
    help_or_version,
    usage_if_empty,
)

DESCRIBE_CLIENT_QUOTAS = 48
ALTER_CLIENT_QUOTAS = 49
DESCRIBE_USER_SCRAM_CREDENTIALS = 50
ALTER_USER_SCRAM_CREDENTIALS = 51

#: kafka-configs.sh's entity types (``ConfigType``) handled here.
USERS, CLIENTS, IPS = "users", "clients", "ips"
ENTITY_TYPES = (USERS, CLIENTS, IPS)
#: The wire names of quota entity types (``ClientQuotaEntity``).
USER, CLIENT_ID, IP = "user", "client-id", "ip"
_WIRE_TYPE = {USERS: USER, CLIENTS: CLIENT_ID, IPS: IP}
#: How ``describe`` names each wire type, in the order it prints them.
_DESCRIBED_AS = {USER: "user-principal", CLIENT_ID: "client-id", IP: "ip"}

#: ``QuotaConfig.isClientOrUserQuotaConfig``.
CLIENT_OR_USER_QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage",
                             "controller_mutation_rate")
#: ``DynamicConfig.Ip.names``.
IP_QUOTA_KEYS = ("connection_creation_rate",)
#: ``ScramMechanism`` names, which kafka-configs.sh accepts as user configs.
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")

#: DescribeClientQuotas ``match_type``.
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2

DESCRIPTION = "This tool helps to manipulate and describe quota configs for a client, user or ip"

# kafka-configs.sh splits --add-config on commas outside [...], then each pair on '='.
_OUTSIDE_BRACKETS = r"(?=[^\]]*(?:\[|$))"
_CONFIG_KEY = re.compile(r"[a-zA-Z0-9._-]*")
# java.lang.Double.parseDouble's decimal grammar (hexadecimal literals left out).
_JAVA_DOUBLE = re.compile(r"[+-]?(?:NaN|Infinity|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[fFdD]?)")


class CommandError(Exception):
    """What Kafka's tool reports as an IllegalArgumentException: the message, then exit 1."""


class UsageError(CommandError):
    """What Kafka's tool reports with ``printUsageAndExit``: the message and the usage."""


class BrokerError(Exception):
    """An error code the broker answered with, printed with Kafka's error name."""

    def __init__(self, code: ErrorCode, message: str | None) -> None:
        self.code = code
        self.message = message
        super().__init__(f"{code.name.upper()}: {message}" if message else code.name.upper())


# ----------------------------------------------------------------------------- options
@attrs.frozen
class QuotaOptions:
    """The parsed command line, as ``ConfigCommandOptions`` sees it."""

    alter: bool
    describe: bool
    help: bool
    version: bool
    bootstrap_server: str | None
    command_config: str | None
    #: ``--entity-type`` values, then the types of the shorthand flags (Kafka's order).
    entity_types: tuple[str, ...]
    #: Names paired with ``entity_types`` by position; ``""`` is the default entity.
    entity_names: tuple[str, ...]
    add_config: str | None
    add_config_file: str | None
    delete_config: tuple[str, ...]
    #: Which of --entity-type/--entity-name/--entity-default were given (for the checks).
    generic_entity_options: bool
    shorthand_entity_options: bool
    #: Every ``--entity-name`` and ``--ip`` value (Kafka checks these as IPs).
    entity_name_values: tuple[str, ...]
    ip_values: tuple[str, ...]


class _Parser(argparse.ArgumentParser):
    """argparse, reporting errors as joptsimple words them instead of exiting."""

    def error(self, message: str) -> NoReturn:
        missing = re.match(r"argument (--[\w-]+)(?:/[^:]*)?: expected one argument", message)
        if missing:
            raise CommandError(f"Option {missing.group(1)[2:]} requires an argument")
        raise CommandError(message)


class _EntityName(argparse.Action):
    """``--entity-name`` and ``--entity-default`` keep one list, in command-line order."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        name = "" if self.const is not None else str(values)
        namespace.entity_specs = [*(namespace.entity_specs or []), name]
        if self.const is None:
            namespace.entity_name = [*(namespace.entity_name or []), name]


def build_parser() -> argparse.ArgumentParser:
    """kafka-configs.sh's options for quota entities."""
    parser = _Parser(prog="trio_broker quotas", description=DESCRIPTION, add_help=False,
                     formatter_class=argparse.RawDescriptionHelpFormatter,
                     epilog="Entity types 'users' and 'clients' may be specified together to "
                            "update config for clients of a specific user.")
    add = parser.add_argument
    add("--help", action="store_true", help="Print usage information.")
    add("--version", action="store_true", help="Display trio_broker version.")
    add("--bootstrap-server", metavar="HOST:PORT", action="append",
        help="The Kafka server to connect to (host:port[,host:port]).")
    add("--command-config", metavar="FILE", action="append",
        help="Property file with client settings (client.id, request.timeout.ms).")
    add("--alter", action="store_true", help="Alter the configuration for the entity.")
    add("--describe", action="store_true", help="List configs for the given entity.")
    add("--entity-type", action="append", metavar="TYPE",
        help="Type of entity (users/clients/ips); repeat 'users' and 'clients' for a "
             "<user, client-id> entity.")
    add("--entity-name", action=_EntityName, dest="entity_specs", metavar="NAME",
        help="Name of entity (client id/user principal name/ip).")
    add("--entity-default", action=_EntityName, nargs=0, const="", dest="entity_specs",
        help="Default entity name for clients/users/ips (applies to corresponding entity "
             "type).")
    add("--add-config", action="append", metavar="K=V,...",
        help="Key Value pairs of configs to add. For entity-type 'users' and 'clients': "
             + ", ".join(CLIENT_OR_USER_QUOTA_KEYS) + ". For entity-type 'ips': "
             + ", ".join(IP_QUOTA_KEYS) + ".")
    add("--add-config-file", action="append", metavar="FILE",
        help="Path to a properties file with configs to add.")
    add("--delete-config", action="append", metavar="K,K",
        help="config keys to remove 'k1,k2'")
    add("--force", action="store_true", help="Suppress console prompts")
    add("--client", action="append", metavar="CLIENT_ID", help="The client's ID.")
    add("--client-defaults", action="store_true", help="The config defaults for all clients.")
    add("--user", action="append", metavar="PRINCIPAL", help="The user's principal name.")
    add("--user-defaults", action="store_true", help="The config defaults for all users.")
    add("--ip", action="append", metavar="IP", help="The IP address.")
    add("--ip-defaults", action="store_true", help="The config defaults for all IPs.")
    parser.set_defaults(entity_specs=None, entity_name=None)
    return parser


def _single(values: list[str] | None, option: str) -> str | None:
    """joptsimple's ``valueOf``: one value, or an error naming the option."""
    if not values:
        return None
    if len(values) > 1:
        raise CommandError(f"Found multiple arguments for option {option}, but you asked for "
                           "only one")
    return values[0]


def parse_options(argv: Sequence[str]) -> QuotaOptions:
    """Parse ``argv`` (what follows ``quotas``) into :class:`QuotaOptions`."""
    ns, extras = build_parser().parse_known_args(list(argv))
    for extra in extras:
        if extra.startswith("-"):
            raise CommandError(f"{extra.lstrip('-').split('=')[0]} is not a recognized option")
        raise CommandError(f"Unexpected argument: {extra}")
    # Kafka's entityFlags / entityDefaultsFlags order: client, user, ip.
    flags = [(CLIENTS, ns.client, "client"), (USERS, ns.user, "user"), (IPS, ns.ip, "ip")]
    default_flags = [(CLIENTS, ns.client_defaults), (USERS, ns.user_defaults),
                     (IPS, ns.ip_defaults)]
    flag_values = [(kind, _single(values, option)) for kind, values, option in flags if values]
    types = [*(ns.entity_type or []), *(kind for kind, _ in flag_values),
             *(kind for kind, given in default_flags if given)]
    names = [*(ns.entity_specs or []), *(value or "" for _, value in flag_values),
             *("" for _, given in default_flags if given)]
    delete = tuple(key.strip() for item in ns.delete_config or [] for key in item.split(","))
    return QuotaOptions(
        alter=ns.alter, describe=ns.describe, help=ns.help, version=ns.version,
        bootstrap_server=_single(ns.bootstrap_server, "bootstrap-server"),
        command_config=_single(ns.command_config, "command-config"),
        entity_types=tuple(types), entity_names=tuple(names),
        add_config=_single(ns.add_config, "add-config"),
        add_config_file=_single(ns.add_config_file, "add-config-file"),
        delete_config=delete,
        generic_entity_options=bool(ns.entity_type or ns.entity_specs),
        shorthand_entity_options=bool(flag_values) or any(g for _, g in default_flags),
        entity_name_values=tuple(ns.entity_name or ()), ip_values=tuple(ns.ip or ()))


def check_options(opts: QuotaOptions) -> None:
    """``ConfigCommandOptions.checkArgs`` and ``processCommand``'s checks, in Kafka's order."""
    if (opts.alter, opts.describe).count(True) != 1:
        raise UsageError("Command must include exactly one action: --describe, --alter")
    if opts.describe:
        for given, name in ((opts.add_config is not None, "add-config"),
                            (bool(opts.delete_config), "delete-config")):
            if given:
                raise UsageError(f'Option "[describe]" can\'t be used with option "[{name}]"')
    types = list(opts.entity_types)
    duplicates = list(types)
    for kind in dict.fromkeys(types):
        duplicates.remove(kind)
    if duplicates:
        raise CommandError(f"Duplicate entity type(s) specified: {','.join(duplicates)}")
    if opts.bootstrap_server is None:
        raise UsageError("You must specify --bootstrap-server.")
    for kind in types:
        if kind not in ENTITY_TYPES:
            raise CommandError(f"Invalid entity type {kind}, the entity type must be one of "
                               f"{', '.join(ENTITY_TYPES)} with a --bootstrap-server argument")
    if not types:
        raise CommandError("At least one entity type must be specified")
    if len(types) > 1 and set(types) != {USERS, CLIENTS}:
        raise CommandError(f"Only '{USERS}' and '{CLIENTS}' entity types may be specified "
                           "together")
    if opts.generic_entity_options and opts.shorthand_entity_options:
        raise CommandError("--entity-{type,name,default} should not be used in conjunction "
                           "with specific entity flags")
    has_name = any(opts.entity_names)
    has_default = "" in opts.entity_names
    if has_name and IPS in types:
        for values, option in ((opts.entity_name_values, "entity-name"),
                               (opts.ip_values, "ip")):
            ip_name = _single(list(values), option)
            if ip_name is not None and not valid_ip_entity(ip_name):
                raise CommandError(f"The entity name for {types[0]} must be a valid IP or "
                                   f"resolvable host, but it is: {ip_name}")
    if opts.alter:
        if not has_name and not has_default:
            raise CommandError("An entity-name or default entity must be specified with --alter "
                               "of users, clients, brokers or ips")
        if opts.add_config is not None and opts.add_config_file is not None:
            raise CommandError("Only one of --add-config or --add-config-file must be specified")
        if opts.add_config is None and opts.add_config_file is None and not opts.delete_config:
            raise CommandError("At least one of --add-config, --add-config-file, or "
                               "--delete-config must be specified with --alter")
        if len(opts.entity_types) != len(opts.entity_names):
            raise CommandError("An entity name must be specified for every entity type")


def valid_ip_entity(name: str) -> bool:
    """``DynamicConfig.Ip.isValidIpEntity``: an IP address, or a host name that resolves."""
    if name == "":
        return True
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        pass
    try:
        socket.getaddrinfo(name, None)
    except (OSError, UnicodeError):
        return False
    return True


# ------------------------------------------------------------------------ config values
def parse_add_config(text: str) -> dict[str, str]:
    """``--add-config`` as Kafka splits it: commas outside ``[...]``, ``key=value`` pairs,
    brackets removed from values, keys limited to ``[a-zA-Z0-9._-]``."""
    pairs = re.split("," + _OUTSIDE_BRACKETS, text)
    if len(pairs) > 1:
        while pairs and pairs[-1] == "":  # Java's String.split drops trailing empty strings
            pairs.pop()
    split = [re.split(r"\s*=\s*" + _OUTSIDE_BRACKETS, pair) for pair in pairs]
    if not all(len(pair) == 2 for pair in split):
        raise CommandError('Invalid entity config: all configs to be added must be in the format '
                           '"key=val" or  "key=[val1,val2]" to group values which contain '
                           'commas.')
    props = {key.strip(): value.replace("[", "").replace("]", "").strip()
             for key, value in split}
    validate_keys(props)
    return props


def validate_keys(props: dict[str, str]) -> None:
    for key in props:
        if not _CONFIG_KEY.fullmatch(key):
            raise CommandError(f"Invalid character found for config key: {key}")


def configs_to_add(opts: QuotaOptions) -> dict[str, str]:
    """``parseConfigsToBeAdded``: the ``--add-config-file`` properties, then ``--add-config``."""
    props: dict[str, str] = {}
    if opts.add_config_file is not None:
        try:
            text = Path(opts.add_config_file).read_text(encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"{opts.add_config_file}: {exc.strerror}") from None
        props.update(parse_properties(text))
    if opts.add_config is not None:
        props.update(parse_add_config(opts.add_config))
    validate_keys(props)
    return props


def parse_java_double(text: str) -> float | None:
    """``java.lang.Double.parseDouble`` (decimal forms), or None where it would throw."""
    stripped = text.strip(" \t\n\r\f\v\x00")
    if not _JAVA_DOUBLE.fullmatch(stripped):
        return None
    return float(stripped[:-1] if stripped[-1] in "fFdD" else stripped)


def java_double(value: float) -> str:
    """``java.lang.Double.toString``: ``1024.0``, ``0.001``, ``1.0E7``, ``1.048576E7``, ``NaN``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign = "-" if value < 0 else ""
    decimal = Decimal(repr(abs(value))).normalize()  # shortest round-trip digits
    _, digit_tuple, exponent = decimal.as_tuple()
    digits = "".join(map(str, digit_tuple))
    assert isinstance(exponent, int)
    point = len(digits) + exponent - 1  # the exponent in d.ddd x 10^point
    if -3 <= point < 7:
        if point >= 0:
            whole = digits[:point + 1].ljust(point + 1, "0")
            return f"{sign}{whole}.{digits[point + 1:] or '0'}"
        return f"{sign}0.{'0' * (-point - 1)}{digits}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{point}"


def scala_collection(kind: str, items: Sequence[str]) -> str:
    """How Scala prints a collection in Kafka's messages: ``Set(a, b)``, ``Buffer(a)``."""
    return f"{kind}({', '.join(items)})"


# -------------------------------------------------------------------------- formatting
def describe_line(entity: dict[str, str | None], values: Sequence[tuple[str, float]]) -> str:
    """``Quota configs for user-principal 'alice', client-id 'app' are producer_byte_rate=1024.0``
    (``the default user-principal`` for a default entity)."""
    parts = []
    for wire_type, label in _DESCRIBED_AS.items():
        if wire_type in entity:
            name = entity[wire_type]
            parts.append(f"{label} '{name}'" if name is not None else f"the default {label}")
    configs = ", ".join(f"{key}={java_double(value)}" for key, value in values)
    return f"Quota configs for {', '.join(parts)} are {configs}"


def alter_done_line(entity_types: Sequence[str], entity_names: Sequence[str]) -> str:
    """What kafka-configs.sh prints after an alter (it names the first entity type only)."""
    if entity_names[0]:
        return f"Completed updating config for {entity_types[0][:-1]} {entity_names[0]}."
    return f"Completed updating default config for {entity_types[0]} in the cluster."


# -------------------------------------------------------------------------- operations
def filter_components(entity_types: Sequence[str], entity_names: Sequence[str]
                      ) -> list[tuple[str, int, str | None]]:
    """``getAllClientQuotasConfigs``: types and names zipped by position (``zipAll``)."""
    components: list[tuple[str, int, str | None]] = []
    for index in range(max(len(entity_types), len(entity_names))):
        if index >= len(entity_types):
            raise CommandError("More entity names specified than entity types")
        wire_type = _WIRE_TYPE[entity_types[index]]
        if index >= len(entity_names):
            components.append((wire_type, MATCH_ANY, None))
        elif entity_names[index] == "":
            components.append((wire_type, MATCH_DEFAULT, None))
        else:
            components.append((wire_type, MATCH_EXACT, entity_names[index]))
    return components


QuotaEntry = tuple[dict[str, str | None], list[tuple[str, float]]]


def describe_quotas(conn: AdminConnection, components: Sequence[tuple[str, int, str | None]]
                    ) -> list[QuotaEntry]:
    """DescribeClientQuotas with a strict filter (``ClientQuotaFilter.containsOnly``)."""
    version = conn.version_for(DESCRIBE_CLIENT_QUOTAS)
    module = request_module(DESCRIBE_CLIENT_QUOTAS, version)
    body = module.DescribeClientQuotasRequest(
        components=tuple(module.ComponentData(entity_type=t, match_type=m, match=n)
                         for t, m, n in components),
        strict=True)
    response = conn.send(DESCRIBE_CLIENT_QUOTAS, version, body)
    if response.error_code != ErrorCode.none:
        raise BrokerError(response.error_code, response.error_message)
    return [({e.entity_type: e.entity_name for e in entry.entity},
             [(v.key, float(v.value)) for v in entry.values])
            for entry in response.entries or ()]


def alter_quotas(conn: AdminConnection, entity: Sequence[tuple[str, str | None]],
                 add: dict[str, float], delete: Sequence[str]) -> None:
    """AlterClientQuotas for one entity; the entry's error, if any, as a :class:`BrokerError`."""
    version = conn.version_for(ALTER_CLIENT_QUOTAS)
    module = request_module(ALTER_CLIENT_QUOTAS, version)
    ops = [module.OpData(key=k, value=v, remove=False) for k, v in add.items()]
    ops += [module.OpData(key=k, value=0.0, remove=True) for k in delete]
    body = module.AlterClientQuotasRequest(
        entries=(module.EntryData(
            entity=tuple(module.EntityData(entity_type=t, entity_name=n) for t, n in entity),
            ops=tuple(ops)),),
        validate_only=False)
    response = conn.send(ALTER_CLIENT_QUOTAS, version, body)
    for entry in response.entries:
        if entry.error_code != ErrorCode.none:
            raise BrokerError(entry.error_code, entry.error_message)


def run_describe(conn: AdminConnection, opts: QuotaOptions, out: TextIO) -> None:
    components = filter_components(opts.entity_types, opts.entity_names)
    for entity, values in describe_quotas(conn, components):
        print(describe_line(entity, values), file=out)
    # ConfigCommand: SCRAM credentials too for users, unless clients or a default are named
    if (opts.entity_types[0] == USERS and CLIENTS not in opts.entity_types
            and "" not in opts.entity_names
            and DESCRIBE_USER_SCRAM_CREDENTIALS in conn.broker_versions):
        for user, infos in describe_scram(conn, opts.entity_names):
            print(f"SCRAM credential configs for user-principal '{user}' are "
                  + ", ".join(f"{m}=iterations={i}" for m, i in infos), file=out)


#: ``ScramMechanism`` wire codes.
_SCRAM_CODES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
_SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
#: ``ConfigCommand.DefaultScramIterations``.
DEFAULT_SCRAM_ITERATIONS = 4096


def describe_scram(conn: AdminConnection, users: Sequence[str]
                   ) -> list[tuple[str, list[tuple[str, int]]]]:
    """DescribeUserScramCredentials: each user's ``(mechanism, iterations)``; users without
    credentials are left out (as AdminClient's ``users()``)."""
    version = conn.version_for(DESCRIBE_USER_SCRAM_CREDENTIALS)
    module = request_module(DESCRIBE_USER_SCRAM_CREDENTIALS, version)
    body = module.DescribeUserScramCredentialsRequest(
        users=tuple(module.UserName(name=u) for u in users) if users else None)
    response = conn.send(DESCRIBE_USER_SCRAM_CREDENTIALS, version, body)
    if response.error_code != ErrorCode.none:
        raise BrokerError(response.error_code, response.error_message)
    names = {code: name for name, code in _SCRAM_CODES.items()}
    found = []
    for result in response.results:
        if result.error_code == ErrorCode.resource_not_found:
            continue
        if result.error_code != ErrorCode.none:
            raise BrokerError(result.error_code, result.error_message)
        found.append((result.user, [(names.get(int(c.mechanism), "UNKNOWN"), int(c.iterations))
                                    for c in result.credential_infos]))
    return found


def scram_settings(mechanism: str, value: str) -> tuple[int, str]:
    """``SCRAM-SHA-256=[iterations=8192,password=alice-secret]``: (iterations, password)."""
    fields = dict(item.split("=", 1) for item in value.split(",") if "=" in item)
    if "password" not in fields:
        raise CommandError(f"You must supply 'password=...' when adding SCRAM credentials "
                           f"({mechanism})")
    try:
        iterations = int(fields.get("iterations", DEFAULT_SCRAM_ITERATIONS))
    except ValueError:
        raise CommandError(f"Invalid iterations for {mechanism}: "
                           f"{fields['iterations']}") from None
    return iterations, fields["password"]


def alter_scram(conn: AdminConnection, user: str, add: dict[str, str],
                delete: Sequence[str]) -> None:
    """AlterUserScramCredentials: the salt and salted password are made here, as Kafka's
    AdminClient does, so the password never crosses the wire."""
    version = conn.version_for(ALTER_USER_SCRAM_CREDENTIALS)
    module = request_module(ALTER_USER_SCRAM_CREDENTIALS, version)
    upsertions = []
    for mechanism, value in add.items():
        iterations, password = scram_settings(mechanism, value)
        salt = os.urandom(32)
        salted = hashlib.pbkdf2_hmac(_SCRAM_HASHES[mechanism], password.encode(), salt,
                                     iterations)
        upsertions.append(module.ScramCredentialUpsertion(
            name=user, mechanism=_SCRAM_CODES[mechanism], iterations=iterations, salt=salt,
            salted_password=salted))
    body = module.AlterUserScramCredentialsRequest(
        deletions=tuple(module.ScramCredentialDeletion(name=user, mechanism=_SCRAM_CODES[m])
                        for m in delete),
        upsertions=tuple(upsertions))
    response = conn.send(ALTER_USER_SCRAM_CREDENTIALS, version, body)
    for result in response.results:
        if result.error_code != ErrorCode.none:
            raise BrokerError(result.error_code, result.error_message)


def check_alter_keys(opts: QuotaOptions, add: dict[str, str]) -> None:
    """Which keys kafka-configs.sh lets through for each entity type, with its messages."""
    types, delete = opts.entity_types, opts.delete_config
    head = types[0]
    if head == IPS:
        unknown = [k for k in (*add, *delete) if k not in IP_QUOTA_KEYS]
        if unknown:
            raise CommandError(f"Only connection quota configs can be added for '{IPS}' using "
                               f"--bootstrap-server. Unexpected config names: {','.join(unknown)}")
        return
    known = (*CLIENT_OR_USER_QUOTA_KEYS, *SCRAM_MECHANISMS)
    unknown_add = [k for k in add if k not in known]
    scram_add = [k for k in add if k in SCRAM_MECHANISMS]
    unknown_delete = [k for k in delete if k not in known]
    scram_delete = [k for k in delete if k in SCRAM_MECHANISMS]
    if head == CLIENTS or len(types) == 2:
        if unknown_add or scram_add:
            raise CommandError(f"Only quota configs can be added for '{CLIENTS}' using "
                               "--bootstrap-server. Unexpected config names: "
                               + scala_collection("Set", unknown_add + scram_add))
        if unknown_delete or scram_delete:
            raise CommandError(f"Only quota configs can be deleted for '{CLIENTS}' using "
                               "--bootstrap-server. Unexpected config names: "
                               + scala_collection("Buffer", unknown_delete + scram_delete))
        return
    if unknown_add:
        raise CommandError(f"Only quota and SCRAM credential configs can be added for '{USERS}' "
                           "using --bootstrap-server. Unexpected config names: "
                           + scala_collection("Set", unknown_add))
    if unknown_delete:
        raise CommandError(f"Only quota and SCRAM credential configs can be deleted for "
                           f"'{USERS}' using --bootstrap-server. Unexpected config names: "
                           + scala_collection("Buffer", unknown_delete))
    if scram_add or scram_delete:
        if "" in opts.entity_names:
            raise CommandError("The use of --entity-default or --user-defaults is not allowed "
                               "with User SCRAM Credentials using --bootstrap-server.")
        if len(scram_add) != len(add) or len(scram_delete) != len(delete):
            raise CommandError("Cannot alter both quota and SCRAM credential configs "
                               f"simultaneously for '{USERS}' using --bootstrap-server.")


def run_alter(conn: AdminConnection, opts: QuotaOptions, out: TextIO) -> None:
    add = configs_to_add(opts)
    check_alter_keys(opts, add)
    if any(k in SCRAM_MECHANISMS for k in (*add, *opts.delete_config)):
        if ALTER_USER_SCRAM_CREDENTIALS not in conn.broker_versions:
            raise UnsupportedVersion("The broker does not support ALTER_USER_SCRAM_CREDENTIALS")
        alter_scram(conn, opts.entity_names[0], add, opts.delete_config)
        print(alter_done_line(opts.entity_types, opts.entity_names), file=out)
        return
    # getClientQuotasConfig: every key to delete must exist on the entity.
    components = filter_components(opts.entity_types, opts.entity_names)
    found = describe_quotas(conn, components)
    current = {key for key, _ in found[0][1]} if found else set()
    invalid = [key for key in opts.delete_config if key not in current]
    if invalid:
        raise CommandError(f"Invalid config(s): {','.join(invalid)}")
    values: dict[str, float] = {}
    for key, text in add.items():
        value = parse_java_double(text)
        if value is None:
            raise CommandError(f"Cannot parse quota configuration value for {key}: {text}")
        values[key] = value
    entity = [(_WIRE_TYPE[t], n or None) for t, n in zip(opts.entity_types, opts.entity_names,
                                                          strict=True)]
    alter_quotas(conn, entity, values, opts.delete_config)
    print(alter_done_line(opts.entity_types, opts.entity_names), file=out)


def _client_settings(opts: QuotaOptions) -> dict[str, str]:
    """``--command-config``: the tools' one reader (client.id, request.timeout.ms)."""
    try:
        return client_settings(opts.command_config, "quotas")
    except ToolError as exc:
        raise CommandError(str(exc)) from None


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None,
         err: TextIO | None = None) -> int:
    """Run the command; 0 on success, 1 on any error (Kafka's exit statuses)."""
    args = list(sys.argv[1:] if argv is None else argv)
    out = out if out is not None else sys.stdout
    err = err if err is not None else sys.stderr
    parser = build_parser()
    if usage_if_empty(args, parser, DESCRIPTION, err):
        return 1
    try:
        opts = parse_options(args)
        if help_or_version(opts, parser, out):
            return 0
        check_options(opts)
        settings = _client_settings(opts)
        assert opts.bootstrap_server is not None
        with connect_with(opts.bootstrap_server, settings, "quotas") as conn:
            if opts.alter:
                run_alter(conn, opts, out)
            else:
                run_describe(conn, opts, out)
    except UsageError as exc:
        print(exc, file=err)
        parser.print_help(err)
        return 1
    except (CommandError, UnsupportedVersion) as exc:
        print(exc, file=err)
        return 1
    except (BrokerError, AdminClientError, OSError, ValueError) as exc:
        print(f"Error while executing config command with args '{' '.join(args)}'", file=err)
        print(exc, file=err)
        return 1
    return 0
