"""``trio_broker configs``: kafka-configs.sh over the wire.

Topics and brokers go through DescribeConfigs / IncrementalAlterConfigs; users, clients and
ips (client quotas) go to :mod:`trio_broker.tools.quotas`, the same code ``trio_broker quotas``
runs, so the two commands accept the same flags and print the same lines.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from . import quotas
from .admin_client import AdminConnection
from .common import (
    Parser,
    Request,
    ToolError,
    UsageError,
    add_connection_options,
    check,
    connect,
    emit_json,
    kafka_text,
    run,
)
from .topics import metadata

DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 44
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
SET, DELETE = 0, 1
#: Java's ``ConfigEntry.ConfigSource`` names by wire code.
SOURCES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
           3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG",
           6: "DYNAMIC_BROKER_LOGGER_CONFIG", 7: "CLIENT_METRICS_CONFIG", 8: "GROUP_CONFIG"}
QUOTA_FLAGS = ("--user", "--client", "--ip", "--user-defaults", "--client-defaults",
               "--ip-defaults")

EXAMPLES = """\
  trio_broker configs --bootstrap-server localhost:9092 --describe --entity-type topics \\
      --entity-name orders [--all]
  trio_broker configs --bootstrap-server localhost:9092 --alter --entity-type topics \\
      --entity-name orders --add-config retention.ms=3600000,cleanup.policy=compact
  trio_broker configs --bootstrap-server localhost:9092 --alter --entity-type topics \\
      --entity-name orders --delete-config retention.ms
  trio_broker configs --bootstrap-server localhost:9092 --describe --entity-type brokers \\
      --entity-name 1
  trio_broker configs --bootstrap-server localhost:9092 --alter --entity-type brokers \\
      --entity-default --add-config log.retention.ms=604800000
  # client quotas (the same code as `trio_broker quotas`):
  trio_broker configs --bootstrap-server localhost:9092 --alter --entity-type users \\
      --entity-name alice --add-config producer_byte_rate=1048576
  trio_broker configs --bootstrap-server localhost:9092 --describe --entity-type ips
"""


def build_parser() -> argparse.ArgumentParser:
    parser = Parser("trio_broker configs",
                    "Add, delete and describe configs of topics, brokers, and (as "
                    "`trio_broker quotas`) client quotas of users, clients and ips "
                    "(kafka-configs.sh).", EXAMPLES)
    add_connection_options(parser)
    actions = parser.add_mutually_exclusive_group(required=True)
    actions.add_argument("--describe", action="store_true", help="list configs of the entity")
    actions.add_argument("--alter", action="store_true", help="change configs of the entity")
    add = parser.add_argument
    add("--entity-type",
        choices=("topics", "brokers", "users", "clients", "ips"), help="the kind of entity")
    add("--topic", metavar="TOPIC", help="= --entity-type topics --entity-name TOPIC")
    add("--broker", metavar="ID", help="= --entity-type brokers --entity-name ID")
    add("--broker-defaults", action="store_true",
        help="= --entity-type brokers --entity-default")
    name = parser.add_mutually_exclusive_group()
    name.add_argument("--entity-name", metavar="NAME", help="topic name or broker id")
    name.add_argument("--entity-default", action="store_true",
                      help="the cluster-wide default (brokers)")
    add("--add-config", action="append", default=[], metavar="K=V[,K=V]",
        help="configs to set; values with commas go in brackets: k=[v1,v2]")
    add("--delete-config", action="append", default=[], metavar="K[,K]",
        help="config keys to remove")
    add("--all", action="store_true", help="--describe every config, not only the dynamic ones")
    return parser


def uses_quotas(argv: Sequence[str]) -> bool:
    """Whether the command is about client quotas (handled by tools/quotas.py)."""
    args = list(argv)
    if any(a in QUOTA_FLAGS for a in args):
        return True
    types = [args[i + 1] for i, a in enumerate(args[:-1]) if a == "--entity-type"]
    types += [a.split("=", 1)[1] for a in args if a.startswith("--entity-type=")]
    return any(t in quotas.ENTITY_TYPES for t in types)


def parse_pairs(items: Sequence[str]) -> dict[str, str]:
    """``--add-config`` as kafka-configs.sh splits it (commas outside ``[...]``)."""
    found: dict[str, str] = {}
    for item in items:
        try:
            found.update(quotas.parse_add_config(item))
        except quotas.CommandError as exc:
            raise UsageError(str(exc)) from None
    return found


def resource(ns: argparse.Namespace) -> tuple[int, str]:
    kind = TOPIC_RESOURCE if ns.entity_type == "topics" else BROKER_RESOURCE
    return kind, "" if ns.entity_default else (ns.entity_name or "")


def describe_entries(conn: AdminConnection, kind: int, name: str, everything: bool
                     ) -> list[dict[str, Any]]:
    """ConfigCommand.getResourceConfigs: the dynamic entries (all with ``--all``)."""
    request = Request(conn, DESCRIBE_CONFIGS)
    response = request.send(resources=(request.nested(
        "DescribeConfigsResource", resource_type=kind, resource_name=name,
        configuration_keys=None),), include_synonyms=True, include_documentation=False)
    (result,) = response.results
    check(result.error_code, result.error_message, name or "default")
    wanted = {TOPIC_RESOURCE: (1,), BROKER_RESOURCE: (3,) if name == "" else (2,)}[kind]
    entries = []
    for c in sorted(result.configs, key=lambda c: c.name):
        source = int(getattr(c, "config_source", 0))
        if not everything and source not in wanted:
            continue
        entries.append({"name": c.name, "value": c.value, "sensitive": bool(c.is_sensitive),
                        "source": SOURCES.get(source, "UNKNOWN"), "synonyms": [
                            {"name": s.name, "value": s.value,
                             "source": SOURCES.get(int(s.source), "UNKNOWN")}
                            for s in getattr(c, "synonyms", ())]})
    return entries


def entry_line(entry: dict[str, Any]) -> str:
    """ConfigCommand's ``  name=value sensitive=false synonyms={SOURCE:name=value, ...}``
    (``null`` for a value the broker leaves out: unset, or sensitive)."""
    synonyms = ", ".join(f"{s['source']}:{s['name']}={kafka_text(s['value'])}"
                         for s in entry["synonyms"])
    return f"  {entry['name']}={kafka_text(entry['value'])} " \
           f"sensitive={kafka_text(entry['sensitive'])} synonyms={{{synonyms}}}"


def header(entity_type: str, name: str, everything: bool) -> str:
    if name == "":
        return f"Default configs for {entity_type} in the cluster are:"
    return f"{'All' if everything else 'Dynamic'} configs for {entity_type[:-1]} {name} are:"


def run_describe(conn: AdminConnection, ns: argparse.Namespace, out: TextIO) -> None:
    kind, name = resource(ns)
    if ns.entity_default or ns.entity_name:
        names = [name]
    elif kind == TOPIC_RESOURCE:
        names = sorted(t.name for t in metadata(conn).topics)
    else:
        names = [str(b.node_id) for b in metadata(conn).brokers] + [""]
    described = {}
    for entity in names:
        described[entity] = describe_entries(conn, kind, entity, ns.all)
        if ns.output == "text":
            print(header(ns.entity_type, entity, ns.all), file=out)
            for entry in described[entity]:
                print(entry_line(entry), file=out)
    if ns.output == "json":
        emit_json([{"entity_type": ns.entity_type, "entity_name": n or None, "configs": e}
                   for n, e in described.items()], out)


def run_alter(conn: AdminConnection, ns: argparse.Namespace, out: TextIO) -> None:
    kind, name = resource(ns)
    if kind == TOPIC_RESOURCE and not name:
        raise UsageError("an --entity-name is required to alter a topic")
    if kind == BROKER_RESOURCE and not (ns.entity_default or name):
        raise UsageError("--entity-name or --entity-default is required with --alter")
    add = parse_pairs(ns.add_config)
    remove = [k.strip() for item in ns.delete_config for k in item.split(",") if k.strip()]
    if not add and not remove:
        raise UsageError("At least one of --add-config or --delete-config must be specified "
                         "with --alter")
    if remove:
        # ConfigCommand.alterConfig: deleting a config that is not set fails the command
        present = {e["name"] for e in describe_entries(conn, kind, name, False)}
        invalid = [k for k in remove if k not in present]
        if invalid:
            raise ToolError(f"Invalid config(s): {','.join(invalid)}")
    request = Request(conn, INCREMENTAL_ALTER_CONFIGS)
    configs = [request.nested("AlterableConfig", name=k, config_operation=SET, value=v)
               for k, v in add.items()]
    configs += [request.nested("AlterableConfig", name=k, config_operation=DELETE, value=None)
                for k in remove]
    response = request.send(resources=(request.nested(
        "AlterConfigsResource", resource_type=kind, resource_name=name,
        configs=tuple(configs)),), validate_only=False)
    for result in response.responses:
        check(result.error_code, result.error_message, name or "default")
    if ns.output == "json":
        emit_json({"entity_type": ns.entity_type, "entity_name": name or None,
                   "set": add, "deleted": remove}, out)
    elif name:
        print(f"Completed updating config for {ns.entity_type[:-1]} {name}.", file=out)
    else:
        print(f"Completed updating default config for {ns.entity_type} in the cluster.",
              file=out)


def entity_shortcuts(ns: argparse.Namespace) -> None:
    """kafka-configs.sh's ``--topic``, ``--broker`` and ``--broker-defaults``: the entity type
    and name in one flag."""
    given = [f for f, v in (("--topic", ns.topic), ("--broker", ns.broker),
                            ("--broker-defaults", ns.broker_defaults or None)) if v is not None]
    if not given:
        if ns.entity_type is None:
            raise UsageError("one of --entity-type, --topic, --broker, --broker-defaults is "
                             "required")
        return
    if len(given) > 1 or ns.entity_type or ns.entity_name or ns.entity_default:
        raise UsageError(f"{given[0]} cannot be combined with --entity-type, --entity-name, "
                         "--entity-default or another entity flag")
    ns.entity_type = "topics" if ns.topic is not None else "brokers"
    ns.entity_name = ns.topic if ns.topic is not None else ns.broker
    ns.entity_default = ns.broker_defaults


def execute(ns: argparse.Namespace, out: TextIO) -> None:
    entity_shortcuts(ns)
    if ns.describe and (ns.add_config or ns.delete_config):
        raise UsageError("--describe cannot be used with --add-config or --delete-config")
    if ns.entity_type == "brokers" and ns.entity_name and not re.fullmatch(r"\d+", ns.entity_name):
        raise UsageError(f"The entity name for brokers must be a valid integer broker id, "
                         f"but it is: {ns.entity_name}")
    with connect(ns, "configs") as conn:
        if ns.describe:
            run_describe(conn, ns, out)
        else:
            run_alter(conn, ns, out)


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None,
         err: TextIO | None = None) -> int:
    """Run ``trio_broker configs``; 0 on success, 1 on a failure, 2 on a bad command line
    (quota entities keep ``trio_broker quotas``' statuses, Kafka's: 1 for every error)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if uses_quotas(args) and "--help" not in args and "-h" not in args:
        return quotas.main(args, out=out, err=err)
    output = out if out is not None else sys.stdout
    return run(build_parser(), args, lambda ns: execute(ns, output), err)


def users_main(argv: Sequence[str] | None = None, *, out: TextIO | None = None,
               err: TextIO | None = None) -> int:
    """``trio_broker users``: ``configs --entity-type users`` (SCRAM credentials and user
    quotas, kafka-configs.sh's flags and output)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not any(a in ("--entity-type", "--user", "--user-defaults") or
               a.startswith("--entity-type=") for a in args):
        args = ["--entity-type", "users", *args]
    return quotas.main(args, out=out, err=err)
