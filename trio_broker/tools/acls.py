"""``trio_broker acls``: kafka-acls.sh for users who have no Kafka tools.

::

    trio_broker acls --bootstrap-server HOST:PORT --add --allow-principal User:alice \\
                     --operation Read --operation Describe --topic orders [--group app]
    trio_broker acls --bootstrap-server HOST:PORT --add --allow-principal User:alice \\
                     --producer --topic orders [--idempotent] [--transactional-id tx]
    trio_broker acls --bootstrap-server HOST:PORT --add --allow-principal User:bob \\
                     --consumer --topic orders --group app
    trio_broker acls --bootstrap-server HOST:PORT --remove [--force] ... (same resource options)
    trio_broker acls --bootstrap-server HOST:PORT --list [--topic orders] [--principal User:a]

Options, their defaults and the output are those of Kafka's ``AclCommand``: ``--allow-host`` /
``--deny-host`` default to ``*`` when a principal of that kind is given, ``--operation`` to
All, ``--resource-pattern-type`` to literal (``any`` and ``match`` are filters for --list and
--remove); ``--producer`` grants WRITE, DESCRIBE and CREATE on the topics (plus WRITE and
DESCRIBE on --transactional-id, IDEMPOTENT_WRITE on the cluster with --idempotent),
``--consumer`` READ and DESCRIBE on the topics and READ on the group. It talks to the broker
with CreateAcls / DescribeAcls / DeleteAcls over one connection. Exit status 0 on success,
1 on any error.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TextIO

from kio.schema.errors import ErrorCode

from ..server.acl import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AclBinding,
    AclFilter,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
    entry_text,
    pattern_text,
    sort_key,
)
from .admin_client import AdminClientError, AdminConnection, UnsupportedVersion, request_module
from .common import (
    ToolError,
    client_settings,
    connect_with,
    help_or_version,
    usage_if_empty,
)

DESCRIBE_ACLS = 29
CREATE_ACLS = 30
DELETE_ACLS = 31

DESCRIPTION = "This tool helps to manage acls on kafka."
NL = "\n"


class CommandError(Exception):
    """A usage error, printed before the usage (exit 1)."""


class BrokerError(Exception):
    def __init__(self, code: ErrorCode, message: str | None) -> None:
        name = code.name.upper()
        super().__init__(f"{name}: {message}" if message else name)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise CommandError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="trio_broker acls", description=DESCRIPTION, add_help=False)
    add = parser.add_argument
    add("--help", action="store_true", help="Print usage information.")
    add("--version", action="store_true", help="Display trio_broker version.")
    add("--bootstrap-server", metavar="HOST:PORT",
        help="A list of host/port pairs to use for establishing the connection.")
    add("--command-config", metavar="FILE",
        help="Property file with client settings (client.id, request.timeout.ms, "
             "security.protocol, ssl.*, sasl.*).")
    add("--add", action="store_true", help="Indicates you are trying to add ACLs.")
    add("--remove", action="store_true", help="Indicates you are trying to remove ACLs.")
    add("--list", action="store_true",
        help="List ACLs for the specified resource, use --topic <topic> or --group <group> or "
             "--cluster to specify a resource.")
    add("--topic", action="append", default=[], metavar="TOPIC",
        help="topic to which ACLs should be added or removed. A value of '*' indicates ACL "
             "should apply to all topics.")
    add("--group", action="append", default=[], metavar="GROUP",
        help="Consumer Group to which the ACLs should be added or removed. A value of '*' "
             "indicates the ACLs should apply to all groups.")
    add("--cluster", action="store_true", help="Add/Remove cluster ACLs.")
    add("--transactional-id", action="append", default=[], metavar="ID",
        help="The transactionalId to which ACLs should be added or removed. A value of '*' "
             "indicates the ACLs should apply to all transactionalIds.")
    add("--delegation-token", action="append", default=[], metavar="TOKEN",
        help="Delegation token to which ACLs should be added or removed (refused by this "
             "broker).")
    add("--resource-pattern-type", default="literal", metavar="TYPE",
        help="The type of the resource pattern or pattern filter: literal or prefixed when "
             "adding; also any or match when listing or removing. (default: LITERAL)")
    add("--allow-principal", action="append", default=[], metavar="PRINCIPAL",
        help="principal is in principalType:name format (User:alice). Repeatable.")
    add("--deny-principal", action="append", default=[], metavar="PRINCIPAL",
        help="principal is in principalType:name format. Repeatable.")
    add("--principal", action="append", default=[], metavar="PRINCIPAL",
        help="List ACLs for the specified principal. Repeatable.")
    add("--allow-host", action="append", default=[], metavar="HOST",
        help="Host from which principals listed in --allow-principal will have access. "
             "Default: * when --allow-principal is given.")
    add("--deny-host", action="append", default=[], metavar="HOST",
        help="Host from which principals listed in --deny-principal will be denied access. "
             "Default: * when --deny-principal is given.")
    add("--operation", action="append", default=[], metavar="OPERATION",
        help="Operation that is being allowed or denied: " + ", ".join(
            _camel(op) for op in AclOperation if op > AclOperation.ANY) + " (default: All)")
    add("--producer", action="store_true",
        help="Convenience option to add/remove ACLs for producer role: WRITE, DESCRIBE and "
             "CREATE on the topic.")
    add("--consumer", action="store_true",
        help="Convenience option to add/remove ACLs for consumer role: READ and DESCRIBE on "
             "the topic, READ on the consumer group.")
    add("--idempotent", action="store_true",
        help="Enable idempotence for the producer (with --producer).")
    add("--force", action="store_true", help="Assume Yes to all queries and do not prompt.")
    return parser


def _camel(op: AclOperation) -> str:
    return "".join(part.capitalize() for part in op.name.split("_"))


def parse_operation(text: str) -> AclOperation:
    """``Read``, ``DescribeConfigs``, ``describe_configs`` or ``DESCRIBE-CONFIGS``."""
    key = re.sub(r"(?<=[a-z])(?=[A-Z])", "_", text.strip()).replace("-", "_").upper()
    try:
        op = AclOperation[key]
    except KeyError:
        raise CommandError(f"Invalid operation: {text}") from None
    if op in (AclOperation.ANY, AclOperation.UNKNOWN):
        raise CommandError(f"Invalid operation: {text}")
    return op


def parse_pattern_type(text: str) -> PatternType:
    try:
        pattern = PatternType[text.strip().upper()]
    except KeyError:
        raise CommandError(f"Invalid resource pattern type: {text}") from None
    if pattern is PatternType.UNKNOWN:
        raise CommandError(f"Invalid resource pattern type: {text}")
    return pattern


# --------------------------------------------------------------------- formatting
def _block(header: str, entries: list[str]) -> str:
    # AclCommand: s"$header: $Newline ${acls.map("\t" + _).mkString(Newline)} $Newline"
    return f"{header}: {NL} " + NL.join("\t" + e for e in entries) + f" {NL}"


# ------------------------------------------------------------------------ requests
Resource = tuple[ResourceType, str]


def resources_of(ns: argparse.Namespace) -> list[Resource]:
    found: list[Resource] = [(ResourceType.TOPIC, t) for t in ns.topic]
    if ns.cluster:
        found.append((ResourceType.CLUSTER, CLUSTER_NAME))
    found += [(ResourceType.GROUP, g) for g in ns.group]
    found += [(ResourceType.TRANSACTIONAL_ID, t) for t in ns.transactional_id]
    found += [(ResourceType.DELEGATION_TOKEN, t) for t in ns.delegation_token]
    return found


def entries_of(ns: argparse.Namespace, ops: Sequence[AclOperation]
               ) -> list[tuple[str, str, AclOperation, PermissionType]]:
    """AclCommand.getAcl: allowed principals x hosts x operations, then the denied ones."""
    result = []
    for principals, hosts, perm in ((ns.allow_principal, ns.allow_host, PermissionType.ALLOW),
                                    (ns.deny_principal, ns.deny_host, PermissionType.DENY)):
        for principal in principals:
            for host in hosts or ["*"]:
                for op in ops:
                    result.append((principal, host, op, perm))
    return result


def resource_to_entries(ns: argparse.Namespace, pattern: PatternType
                        ) -> dict[Resource, list[tuple[str, str, AclOperation, PermissionType]]]:
    resources = resources_of(ns)
    if ns.producer or ns.consumer:
        out: dict[Resource, list[tuple[str, str, AclOperation, PermissionType]]] = {}
        Op = AclOperation
        for rt, name in resources:
            if rt is ResourceType.TOPIC:
                ops = [Op.WRITE, Op.DESCRIBE, Op.CREATE] if ns.producer else []
                ops += [Op.READ, Op.DESCRIBE] if ns.consumer else []
                out[(rt, name)] = entries_of(ns, list(dict.fromkeys(ops)))
            elif rt is ResourceType.GROUP and ns.consumer:
                out[(rt, name)] = entries_of(ns, [Op.READ])
            elif rt is ResourceType.TRANSACTIONAL_ID and ns.producer:
                out[(rt, name)] = entries_of(ns, [Op.WRITE, Op.DESCRIBE])
        if ns.producer and ns.idempotent:
            out[(ResourceType.CLUSTER, CLUSTER_NAME)] = entries_of(ns, [Op.IDEMPOTENT_WRITE])
        return out
    ops = [parse_operation(o) for o in ns.operation] or [AclOperation.ALL]
    for rt, _name in resources:
        supported = SUPPORTED_OPERATIONS.get(rt, ())
        for op in ops:
            if op is not AclOperation.ALL and op not in supported:
                raise CommandError(
                    f"ResourceType {rt.name} only supports operations "
                    + ",".join(o.name for o in (*supported, AclOperation.ALL)))
    return {resource: entries_of(ns, ops) for resource in resources}


def create(conn: AdminConnection, bindings: list[AclBinding]) -> None:
    version = conn.version_for(CREATE_ACLS)
    module = request_module(CREATE_ACLS, version)
    body = module.CreateAclsRequest(creations=tuple(
        module.AclCreation(resource_type=int(b.resource_type), resource_name=b.name,
                           resource_pattern_type=int(b.pattern_type), principal=b.principal,
                           host=b.host, operation=int(b.operation),
                           permission_type=int(b.permission))
        for b in bindings))
    response = conn.send(CREATE_ACLS, version, body)
    for result in response.results:
        if result.error_code != ErrorCode.none:
            raise BrokerError(result.error_code, result.error_message)


def _filter_fields(flt: AclFilter) -> dict[str, Any]:
    return {"resource_type_filter": int(flt.resource_type), "resource_name_filter": flt.name,
            "pattern_type_filter": int(flt.pattern_type), "principal_filter": flt.principal,
            "host_filter": flt.host, "operation": int(flt.operation),
            "permission_type": int(flt.permission)}


def describe(conn: AdminConnection, flt: AclFilter) -> list[AclBinding]:
    version = conn.version_for(DESCRIBE_ACLS)
    module = request_module(DESCRIBE_ACLS, version)
    response = conn.send(DESCRIBE_ACLS, version,
                         module.DescribeAclsRequest(**_filter_fields(flt)))
    if response.error_code != ErrorCode.none:
        raise BrokerError(response.error_code, response.error_message)
    return [AclBinding(ResourceType(r.resource_type), r.resource_name,
                       PatternType(r.pattern_type), a.principal, a.host,
                       AclOperation(a.operation), PermissionType(a.permission_type))
            for r in response.resources for a in r.acls]


def delete(conn: AdminConnection, filters: list[AclFilter]) -> None:
    version = conn.version_for(DELETE_ACLS)
    module = request_module(DELETE_ACLS, version)
    body = module.DeleteAclsRequest(filters=tuple(
        module.DeleteAclsFilter(**_filter_fields(f)) for f in filters))
    response = conn.send(DELETE_ACLS, version, body)
    for result in response.filter_results:
        if result.error_code != ErrorCode.none:
            raise BrokerError(result.error_code, result.error_message)


# ------------------------------------------------------------------------- actions
def list_filters(ns: argparse.Namespace, pattern: PatternType) -> list[AclFilter]:
    resources = resources_of(ns)
    if not resources:
        return [AclFilter(ResourceType.ANY, None, PatternType.ANY, None, None, AclOperation.ANY,
                          PermissionType.ANY)]
    return [AclFilter(rt, name, pattern, None, None, AclOperation.ANY, PermissionType.ANY)
            for rt, name in resources]


def run_list(conn: AdminConnection, ns: argparse.Namespace, pattern: PatternType,
             out: TextIO) -> None:
    found: dict[tuple[ResourceType, str, PatternType], list[AclBinding]] = {}
    for flt in list_filters(ns, pattern):
        for acl in describe(conn, flt):
            bucket = found.setdefault((acl.resource_type, acl.name, acl.pattern_type), [])
            if acl not in bucket:
                bucket.append(acl)

    def print_all(keep: Callable[[AclBinding], bool]) -> None:
        for (rt, name, pt), acls in sorted(found.items()):
            chosen = sorted((a for a in acls if keep(a)), key=sort_key)
            if chosen:
                print(_block(f"Current ACLs for resource `{pattern_text(rt, name, pt)}`",
                             [entry_text(a.principal, a.host, a.operation, a.permission)
                              for a in chosen]), file=out)

    if not ns.principal:
        print_all(lambda _acl: True)
        return
    for principal in ns.principal:
        print(f"ACLs for principal `{principal}`", file=out)
        print_all(lambda acl, p=principal: acl.principal == p)  # type: ignore[misc]


def run_add(conn: AdminConnection, ns: argparse.Namespace, pattern: PatternType,
            out: TextIO) -> None:
    if pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise CommandError(f"A '--resource-pattern-type' value of '{pattern.name}' is not "
                           "valid when adding acls.")
    for (rt, name), entries in resource_to_entries(ns, pattern).items():
        print(_block(f"Adding ACLs for resource `{pattern_text(rt, name, pattern)}`",
                     [entry_text(*e) for e in entries]), file=out)
        create(conn, [AclBinding(rt, name, pattern, *e) for e in entries])
    run_list(conn, ns, pattern, out)


def run_remove(conn: AdminConnection, ns: argparse.Namespace, pattern: PatternType,
               out: TextIO, confirm: Callable[[str], bool]) -> None:
    with_principals = bool(ns.allow_principal or ns.deny_principal)
    for (rt, name), entries in resource_to_entries(ns, pattern).items():
        resource = pattern_text(rt, name, pattern)
        if not with_principals:
            if confirm(f"Are you sure you want to delete all ACLs for resource filter "
                       f"`{resource}`? (y/n)"):
                delete(conn, [AclFilter(rt, name, pattern, None, None, AclOperation.ANY,
                                        PermissionType.ANY)])
            continue
        shown = NL.join("\t" + entry_text(*e) for e in entries)
        if confirm(f"Are you sure you want to remove ACLs: {NL} {shown} {NL} from resource "
                   f"filter `{resource}`? (y/n)"):
            delete(conn, [AclFilter(rt, name, pattern, principal, host, op, perm)
                          for principal, host, op, perm in entries])
    run_list(conn, ns, pattern, out)


def check_options(ns: argparse.Namespace) -> None:
    actions = sum((ns.add, ns.remove, ns.list))
    if actions != 1:
        raise CommandError("Command must include exactly one action: --list, --add, --remove. ")
    if not ns.bootstrap_server:
        raise CommandError("--bootstrap-server must be specified")
    if ns.list and (ns.allow_principal or ns.deny_principal or ns.producer or ns.consumer):
        raise CommandError("Option --list does not accept --allow-principal, --deny-principal, "
                           "--producer or --consumer")
    if ns.producer and ns.consumer:
        raise CommandError("With --producer and --consumer give one role at a time")
    if ns.idempotent and not ns.producer:
        raise CommandError("The --idempotent option is only available if --producer is set")
    if ns.producer and (not ns.topic and not ns.transactional_id or ns.group):
        raise CommandError("With --producer you must specify a --topic or "
                           "--transactional-id, and no --group")
    if ns.consumer and (not ns.topic or not ns.group or ns.cluster or ns.transactional_id):
        raise CommandError("With --consumer you must specify a --topic and a --group and no "
                           "--cluster or --transactional-id option should be specified.")
    if (ns.add or ns.remove) and not resources_of(ns):
        raise CommandError("You must provide at least one resource: --topic <topic> or "
                           "--cluster or --group <group> or --transactional-id <id>")
    if ns.add and not (ns.allow_principal or ns.deny_principal):
        raise CommandError("You must specify one of: --allow-principal, --deny-principal when "
                           "trying to add ACLs.")
    for principal in (*ns.allow_principal, *ns.deny_principal, *ns.principal):
        if ":" not in principal:
            raise CommandError(f"Could not parse principal from `{principal}` (no colon is "
                               "present separating the principal type from the principal name)")


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None,
         err: TextIO | None = None, stdin: TextIO | None = None) -> int:
    """Run the command; 0 on success, 1 on any error."""
    args = list(sys.argv[1:] if argv is None else argv)
    out = out if out is not None else sys.stdout
    err = err if err is not None else sys.stderr
    reader = stdin if stdin is not None else sys.stdin
    parser = build_parser()
    if usage_if_empty(args, parser, DESCRIPTION, err):
        return 1
    try:
        ns = parser.parse_args(args)
        if help_or_version(ns, parser, out):
            return 0
        check_options(ns)
        pattern = parse_pattern_type(ns.resource_pattern_type)

        def confirm(question: str) -> bool:
            if ns.force:
                return True
            print(question, file=out, flush=True)
            return reader.readline().strip().lower() == "y"

        # a bad --command-config fails as AclCommand's Admin.create does: no usage
        settings = client_settings(ns.command_config, "acls")
        with connect_with(ns.bootstrap_server, settings, "acls") as conn:
            if ns.add:
                run_add(conn, ns, pattern, out)
            elif ns.remove:
                run_remove(conn, ns, pattern, out, confirm)
            else:
                run_list(conn, ns, pattern, out)
    except CommandError as exc:
        print(exc, file=err)
        parser.print_help(err)
        return 1
    except UnsupportedVersion as exc:
        print(exc, file=err)
        return 1
    except (BrokerError, ToolError, AdminClientError, OSError, ValueError) as exc:
        print(f"Error while executing ACL command: {exc}", file=err)
        return 1
    return 0
