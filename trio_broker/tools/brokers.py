"""Kafka's broker-level tools over the wire, with their options, output and exit statuses:
``broker-api-versions`` (kafka-broker-api-versions.sh), ``log-dirs`` (kafka-log-dirs.sh),
``features`` (kafka-features.sh), ``leader-election`` (kafka-leader-election.sh) and
``metadata-quorum`` (kafka-metadata-quorum.sh; DescribeQuorum, which trio_broker answers for
its single voter)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode

from .. import __version__
from ..protocol.codec import API_VERSIONS_KEY
from .admin_client import CLIENT_SOFTWARE_NAME, AdminClientError, AdminConnection
from .cluster import api_name, usable
from .common import (
    Parser,
    Reported,
    Request,
    ToolError,
    UsageError,
    add_connection_options,
    check,
    client_settings,
    connect_with,
    emit_json,
    java_error,
    kafka_text,
    ms,
    run,
)

DESCRIBE_LOG_DIRS, ELECT_LEADERS, UPDATE_FEATURES, DESCRIBE_CLUSTER = 35, 43, 57, 60
METADATA = 3


# ------------------------------------------------------------------------------ brokers
def cluster_nodes(conn: AdminConnection) -> list[dict[str, Any]]:
    """The brokers of the cluster (DescribeCluster, else Metadata), by id."""
    if DESCRIBE_CLUSTER in conn.broker_versions:
        response = Request(conn, DESCRIBE_CLUSTER).send(
            include_cluster_authorized_operations=False, endpoint_type=1)
        check(response.error_code, response.error_message, "DescribeCluster")
        nodes = [{"id": int(b.broker_id), "host": str(b.host), "port": int(b.port),
                  "rack": b.rack} for b in response.brokers]
    else:
        response = Request(conn, METADATA).send(
            topics=(), allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False)
        nodes = [{"id": int(b.node_id), "host": str(b.host), "port": int(b.port),
                  "rack": b.rack} for b in response.brokers]
    return sorted(nodes, key=lambda n: n["id"])


def node_text(node: dict[str, Any]) -> str:
    """Kafka's ``Node.toString``: ``host:port (id: 1 rack: null)``."""
    return f"{node['host']}:{node['port']} (id: {node['id']} rack: {kafka_text(node['rack'])})"


def is_contacted(conn: AdminConnection, node: dict[str, Any]) -> bool:
    peer = conn._sock.getpeername()
    return bool(node["port"] == peer[1] and node["host"] in (peer[0], "localhost"))


def with_node(conn: AdminConnection, settings: dict[str, str], node: dict[str, Any],
              tool: str, action: Callable[[AdminConnection], Any]) -> Any:
    """``action`` on a connection to ``node`` (the bootstrap connection when it is that
    node)."""
    if is_contacted(conn, node):
        return action(conn)
    with connect_with(f"{node['host']}:{node['port']}", settings, tool) as other:
        return action(other)


def _connect(ns: argparse.Namespace, tool: str) -> tuple[AdminConnection, dict[str, str]]:
    settings = client_settings(ns.command_config, tool)
    return connect_with(ns.bootstrap_server, settings, tool), settings


# ---------------------------------------------------------------- broker-api-versions
#: APIs only controllers (or brokers among themselves) serve: never listed as UNSUPPORTED by a
#: broker (Kafka's NodeApiVersions lists the client-facing ones it knows).
_NOT_CLIENT_APIS = frozenset({52, 53, 54, 56, 58, 59, 62, 63, 67, 70, 73, 82,
                              83, 84, 85, 86, 87})


def api_versions_lines(versions: dict[int, tuple[int, int]]) -> list[str]:
    """NodeApiVersions.toString(true): each API the node has (``Name(key): min to max
    [usable: v]``, ``min`` alone when min == max, ``[unusable: node too old/new]``), each
    API this client knows that the node lacks (``UNSUPPORTED``), in key order."""
    from kio.schema.index import api_key_map

    texts: dict[int, str] = {}
    for key, (low, high) in versions.items():
        span = f"{low}" if low == high else f"{low} to {high}"
        if key not in api_key_map:
            texts[key] = f"UNKNOWN({key}): {span}"
            continue
        best = usable(key, low, high)
        if best is not None:
            note = f" [usable: {best}]"
        else:
            from .admin_client import client_versions

            ours = client_versions(key)
            note = " [unusable: node too new]" if ours[1] < low else " [unusable: node too old]"
        texts[key] = f"{api_name(key)}({key}): {span}{note}"
    for key in api_key_map:
        if key not in texts and key not in _NOT_CLIENT_APIS:
            texts[key] = f"{api_name(key)}({key}): UNSUPPORTED"
    return ["(", ",\n".join(f"\t{texts[key]}" for key in sorted(texts)), ")"]


def broker_api_versions_parser() -> argparse.ArgumentParser:
    parser = Parser("trio_broker broker-api-versions",
                    "Print the API versions of every broker of the cluster "
                    "(kafka-broker-api-versions.sh).",
                    "  trio_broker broker-api-versions --bootstrap-server localhost:9092\n")
    add_connection_options(parser)
    return parser


def broker_api_versions_execute(ns: argparse.Namespace, out: TextIO) -> None:
    conn, settings = _connect(ns, "broker-api-versions")
    with conn:
        found: list[tuple[dict[str, Any], dict[int, tuple[int, int]] | str]] = []
        for node in cluster_nodes(conn):
            try:
                versions = with_node(conn, settings, node, "broker-api-versions",
                                     lambda c: dict(c.broker_versions))
            except (AdminClientError, OSError) as exc:
                found.append((node, str(exc)))
                continue
            found.append((node, versions))
    if ns.output == "json":
        emit_json([{"node": node, "error": apis if isinstance(apis, str) else None,
                    "apis": [] if isinstance(apis, str) else [
                        {"api_key": k, "name": api_name(k), "min_version": lo,
                         "max_version": hi, "usable": usable(k, lo, hi)}
                        for k, (lo, hi) in sorted(apis.items())]}
                   for node, apis in found], out)
        return
    for node, apis in found:
        if isinstance(apis, str):  # BrokerApiVersionsCommand: "<node> -> ERROR: <e>"
            print(f"{node_text(node)} -> ERROR: {apis}", file=out)
            continue
        first, body, last = api_versions_lines(apis)
        print(f"{node_text(node)} -> {first}\n{body}\n{last}", file=out)


def broker_api_versions_main(argv: Sequence[str] | None = None, *, out: TextIO | None = None,
                             err: TextIO | None = None) -> int:
    """Run ``trio_broker broker-api-versions``; 0 on success, 1 on a failure, 2 on a bad
    command line."""
    output = out if out is not None else sys.stdout
    return run(broker_api_versions_parser(), argv,
               lambda ns: broker_api_versions_execute(ns, output), err)


# ----------------------------------------------------------------------------- log-dirs
def java_hash(text: str) -> int:
    """Java's ``String.hashCode`` (a 32-bit int)."""
    h = 0
    for char in text:
        h = (31 * h + ord(char)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def hash_map_order(keys: Sequence[Any], hash_of: Callable[[Any], int]) -> list[Any]:
    """The iteration order of a ``java.util.HashMap`` holding ``keys`` (inserted in that
    order): by bucket of the final table (16, doubled past 3/4 full), then insertion."""
    size = 16
    while len(keys) > size * 3 // 4:
        size *= 2

    def bucket(key: Any) -> int:
        h = hash_of(key) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (size - 1)

    return [key for _, _, key in sorted((bucket(k), i, k) for i, k in enumerate(keys))]


def _topic_partition_hash(tp: tuple[str, int]) -> int:
    """``TopicPartition.hashCode``: ``31 * (31 + partition) + topic.hashCode()``."""
    return (31 * (31 + tp[1]) + java_hash(tp[0])) & 0xFFFFFFFF


def log_dirs_json(described: dict[int, list[Any]], topics: set[str]) -> str:
    """LogDirsCommand.formatAsJson, field order and all: Jackson writes its HashMaps, so
    ``{"brokers":[{"broker":..,"logDirs":[{"partitions":[{"partition":..,"size":..,
    "offsetLag":..,"isFuture":..}],"error":..,"logDir":..}]}],"version":1}``."""
    brokers = []
    for broker in hash_map_order(sorted(described), lambda b: b):
        dirs = {str(result.log_dir): result for result in described[broker]}
        log_dirs = []
        for name in hash_map_order(list(dirs), java_hash):
            result = dirs[name]
            replicas = {(str(t.name), int(p.partition_index)): p for t in result.topics
                        for p in t.partitions if not topics or str(t.name) in topics}
            partitions = [{"partition": f"{tp[0]}-{tp[1]}",
                           "size": int(replicas[tp].partition_size),
                           "offsetLag": int(replicas[tp].offset_lag),
                           "isFuture": bool(replicas[tp].is_future_key)}
                          for tp in hash_map_order(sorted(replicas), _topic_partition_hash)]
            error = (None if result.error_code == ErrorCode.none
                     else java_error(result.error_code).split(":")[0])
            log_dirs.append({"partitions": partitions, "error": error, "logDir": name})
        brokers.append({"broker": broker, "logDirs": log_dirs})
    return json.dumps({"brokers": brokers, "version": 1}, separators=(",", ":"))


def log_dirs_parser() -> argparse.ArgumentParser:
    parser = Parser("trio_broker log-dirs",
                    "This tool helps to query log directory usage on the specified brokers "
                    "(kafka-log-dirs.sh).",
                    "  trio_broker log-dirs --bootstrap-server localhost:9092 --describe\n"
                    "  trio_broker log-dirs --bootstrap-server localhost:9092 --describe "
                    "--topic-list orders,audit --broker-list 1\n")
    add_connection_options(parser, output=False)
    add = parser.add_argument
    add("--describe", action="store_true", required=True,
        help="describe the log directories of the brokers")
    add("--topic-list", default="", metavar="topic1,topic2",
        help="only these topics (all if omitted)")
    add("--broker-list", default="", metavar="0,1,2",
        help="only these brokers (all of the cluster if omitted)")
    return parser


def log_dirs_execute(ns: argparse.Namespace, out: TextIO) -> None:
    topics = {t for t in ns.topic_list.split(",") if t}
    try:
        wanted = {int(b) for b in ns.broker_list.split(",") if b}
    except ValueError:
        raise UsageError(f"Invalid --broker-list {ns.broker_list}") from None
    conn, settings = _connect(ns, "log-dirs")
    with conn:
        nodes = cluster_nodes(conn)
        ids = {n["id"] for n in nodes}
        missing = wanted - ids
        if missing:
            raise ToolError("ERROR: The given brokers do not exist from --broker-list: "
                            f"{','.join(map(str, sorted(missing)))}. Current existent brokers: "
                            f"{','.join(map(str, sorted(ids)))}")
        chosen = [n for n in nodes if not wanted or n["id"] in wanted]
        print("Querying brokers for log directories information", file=out)
        described: dict[int, list[Any]] = {}
        for node in chosen:
            def ask(c: AdminConnection) -> list[Any]:
                response = Request(c, DESCRIBE_LOG_DIRS).send(topics=None)
                check(getattr(response, "error_code", ErrorCode.none), None,
                      "DescribeLogDirs")
                return list(response.results)

            described[node["id"]] = with_node(conn, settings, node, "log-dirs", ask)
    print("Received log directory information from brokers "
          f"{','.join(str(n['id']) for n in chosen)}", file=out)
    print(log_dirs_json(described, topics), file=out)


def log_dirs_main(argv: Sequence[str] | None = None, *, out: TextIO | None = None,
                  err: TextIO | None = None) -> int:
    """Run ``trio_broker log-dirs``; 0 on success, 1 on a failure, 2 on a bad command line."""
    output = out if out is not None else sys.stdout
    return run(log_dirs_parser(), argv, lambda ns: log_dirs_execute(ns, output), err)


# ----------------------------------------------------------------------------- features
def features_parser() -> argparse.ArgumentParser:
    parser = Parser("trio_broker features",
                    "Describe and change the cluster's feature flags (kafka-features.sh).",
                    "  trio_broker features --bootstrap-server localhost:9092 describe\n"
                    "  trio_broker features --bootstrap-server localhost:9092 upgrade "
                    "--feature transaction.version=2\n")
    add_connection_options(parser)
    commands = parser.add_subparsers(dest="action", metavar="ACTION", required=True,
                                     parser_class=argparse.ArgumentParser)
    commands.add_parser("describe", help="each feature: supported range, finalized level")
    for name, verb in (("upgrade", "raise"), ("downgrade", "lower")):
        sub = commands.add_parser(name, help=f"{verb} finalized feature levels")
        sub.add_argument("--feature", action="append", default=[], metavar="NAME=LEVEL",
                         help="a feature and its new level (repeatable)")
        sub.add_argument("--metadata", metavar="VERSION",
                         help="metadata.version's new level (a number here)")
        sub.add_argument("--dry-run", action="store_true", help="validate only")
        if name == "downgrade":
            sub.add_argument("--unsafe", action="store_true",
                             help="allow a downgrade that may lose metadata")
    disable = commands.add_parser("disable", help="disable features")
    disable.add_argument("--feature", action="append", default=[], metavar="NAME",
                         help="a feature to disable (repeatable)")
    disable.add_argument("--dry-run", action="store_true", help="validate only")
    return parser


def describe_features(conn: AdminConnection) -> list[dict[str, Any]]:
    """ApiVersions' supported and finalized features (Admin.describeFeatures)."""
    response = conn.send(API_VERSIONS_KEY, 3, ApiVersionsRequest(
        client_software_name=CLIENT_SOFTWARE_NAME, client_software_version=__version__))
    check(response.error_code, None, "ApiVersions")
    finalized = {str(f.name): int(f.max_version_level)
                 for f in getattr(response, "finalized_features", ())}
    epoch = int(getattr(response, "finalized_features_epoch", -1))
    return [{"feature": str(f.name), "supported_min_version": int(f.min_version),
             "supported_max_version": int(f.max_version),
             "finalized_version_level": finalized.get(str(f.name), 0),
             "epoch": epoch if epoch >= 0 else None}
            for f in sorted(getattr(response, "supported_features", ()),
                            key=lambda f: str(f.name))]


def update_features(conn: AdminConnection, ns: argparse.Namespace, out: TextIO) -> None:
    """UpdateFeatures (FeatureCommand.handleUpgradeOrDowngrade / handleDisable)."""
    updates: dict[str, int] = {}
    for item in ns.feature:
        if ns.action == "disable":
            updates[item] = 0
            continue
        name, sep, level = item.partition("=")
        if not sep or not level.strip().lstrip("-").isdigit():
            raise UsageError(f"Can't parse feature={item}. Use the form feature=level")
        updates[name.strip()] = int(level)
    if getattr(ns, "metadata", None) is not None:
        if not ns.metadata.isdigit():
            raise UsageError(f"Unsupported metadata.version {ns.metadata} (give its level)")
        updates["metadata.version"] = int(ns.metadata)
    if not updates:
        raise UsageError("You must specify at least one feature to "
                         f"{ns.action if ns.action != 'disable' else 'disable'}")
    upgrade_type = {"upgrade": 1, "downgrade": 3 if getattr(ns, "unsafe", False) else 2,
                    "disable": 2}[ns.action]
    request = Request(conn, UPDATE_FEATURES)
    response = request.send(timeout=ms(30000), validate_only=bool(ns.dry_run), feature_updates=tuple(
        request.nested("FeatureUpdateKey", feature=name, max_version_level=level,
                       upgrade_type=upgrade_type, allow_downgrade=ns.action != "upgrade")
        for name, level in sorted(updates.items())))
    failures = 0
    results = {str(r.feature): r for r in getattr(response, "results", ())}
    for name, level in sorted(updates.items()):
        result = results.get(name)
        code = result.error_code if result is not None else response.error_code
        message = (result.error_message if result is not None else response.error_message)
        verb = {"upgrade": "upgraded to", "downgrade": "downgraded to",
                "disable": "disabled"}[ns.action]
        if code == ErrorCode.none:
            done = f"{name} was {verb}" + (f" {level}" if ns.action != "disable" else "")
            print(done + "." if not ns.dry_run else f"{name} can be {verb.split()[0]}"
                  + (f" to {level}" if ns.action != "disable" else "") + ".", file=out)
        else:
            failures += 1
            target = f"{ns.action} {name}" + (f" to {level}" if ns.action != "disable" else "")
            print(f"Could not {target}. {java_error(code, message)}", file=out)
    if failures:
        raise ToolError(f"{failures} out of {len(updates)} operation(s) failed.")


def features_execute(ns: argparse.Namespace, out: TextIO) -> None:
    conn, _settings = _connect(ns, "features")
    with conn:
        if ns.action != "describe":
            update_features(conn, ns, out)
            return
        features = describe_features(conn)
    if ns.output == "json":
        emit_json(features, out)
        return
    for f in features:
        print(f"Feature: {f['feature']}\tSupportedMinVersion: {f['supported_min_version']}\t"
              f"SupportedMaxVersion: {f['supported_max_version']}\t"
              f"FinalizedVersionLevel: {f['finalized_version_level']}\t"
              f"Epoch: {'-' if f['epoch'] is None else f['epoch']}", file=out)


def features_main(argv: Sequence[str] | None = None, *, out: TextIO | None = None,
                  err: TextIO | None = None) -> int:
    """Run ``trio_broker features``; 0 on success, 1 on a failure, 2 on a bad command line."""
    output = out if out is not None else sys.stdout
    return run(features_parser(), argv, lambda ns: features_execute(ns, output), err)


# ---------------------------------------------------------------------- leader-election
ELECTION_TYPES = {"PREFERRED": 0, "UNCLEAN": 1}


def leader_election_parser() -> argparse.ArgumentParser:
    parser = Parser("trio_broker leader-election",
                    "This tool attempts to elect a new leader for a set of topic partitions. "
                    "The type of elections supported are preferred replicas and unclean "
                    "replicas (kafka-leader-election.sh).",
                    "  trio_broker leader-election --bootstrap-server localhost:9092 "
                    "--election-type preferred --all-topic-partitions\n"
                    "  trio_broker leader-election --bootstrap-server localhost:9092 "
                    "--election-type unclean --topic orders --partition 0\n")
    add_connection_options(parser, output=False)
    add = parser.add_argument
    add("--admin.config", dest="admin_config", metavar="FILE",
        help="(deprecated) = --command-config")
    add("--election-type", type=str.upper, choices=tuple(ELECTION_TYPES),
        metavar="preferred|unclean", help="preferred: elect the preferred replica where it is "
        "not the leader; unclean: elect any replica where there is no leader. REQUIRED")
    add("--topic", help="the topic (with --partition)")
    add("--partition", type=int, help="the partition of --topic")
    add("--all-topic-partitions", action="store_true",
        help="every partition eligible for the election type")
    add("--path-to-json-file", metavar="FILE",
        help='the partitions: {"partitions": [{"topic": "foo", "partition": 1}]}')
    return parser


def election_partitions(ns: argparse.Namespace) -> list[tuple[str, int]] | None:
    """LeaderElectionCommandOptions.validate, then the partitions (None: all)."""
    if ns.election_type is None:
        raise ToolError("Missing required option(s): election-type")
    if ns.admin_config is not None and ns.command_config is not None:
        raise UsageError("Option admin.config cannot be used with command-config")
    given = [ns.topic is not None, ns.all_topic_partitions, ns.path_to_json_file is not None]
    if sum(given) != 1:
        raise ToolError("One and only one of the following options is required: topic, "
                        "all-topic-partitions, path-to-json-file")
    if ns.topic is not None and ns.partition is None:
        raise ToolError("Missing required option(s): partition")
    if ns.topic is None and ns.partition is not None:
        raise ToolError("Option partition is only allowed if topic is used")
    if ns.topic is not None:
        return [(ns.topic, ns.partition)]
    if ns.path_to_json_file is None:
        return None
    try:
        document = json.loads(Path(ns.path_to_json_file).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ToolError(f"{ns.path_to_json_file}: {exc.strerror}") from None
    except ValueError:
        raise ToolError("Replica election data is empty") from None
    if not isinstance(document, dict) or "partitions" not in document:
        raise ToolError('Replica election data is missing "partitions" field')
    try:
        partitions = [(str(p["topic"]), int(p["partition"])) for p in document["partitions"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise ToolError(f"Invalid partition in the replica election data: {exc}") from None
    duplicates = sorted({tp for tp in partitions if partitions.count(tp) > 1})
    if duplicates:
        raise ToolError("Replica election data contains duplicate partitions: ["
                        + ", ".join(f"{t}-{p}" for t, p in duplicates) + "]")
    return sorted(set(partitions))


def leader_election_execute(ns: argparse.Namespace, out: TextIO, err: TextIO) -> None:
    partitions = election_partitions(ns)
    if ns.admin_config is not None:
        print("Option --admin.config has been deprecated and will be removed in a future "
              "version. Use --command-config instead.", file=out)
        ns.command_config = ns.admin_config
    kind = ns.election_type
    conn, _settings = _connect(ns, "leader-election")
    with conn:
        request = Request(conn, ELECT_LEADERS)
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions or ():
            by_topic.setdefault(topic, []).append(partition)
        response = request.send(
            election_type=ELECTION_TYPES[kind], timeout=ms(30000),
            topic_partitions=None if partitions is None else tuple(
                request.nested("TopicPartitions", topic=t, partitions=tuple(ps))
                for t, ps in by_topic.items()))
    top = ErrorCode(getattr(response, "error_code", ErrorCode.none))
    if top == ErrorCode.cluster_authorization_failed:
        print("Not authorized to perform leader election", file=out)
        raise ToolError("Not authorized to perform leader election")
    check(top, None, "ElectLeaders")
    succeeded, noop, failed = [], [], []
    for result in response.replica_election_results:
        for p in result.partition_result:
            name = f"{result.topic}-{p.partition_id}"
            if p.error_code == ErrorCode.none:
                succeeded.append(name)
            elif p.error_code == ErrorCode.election_not_needed:
                noop.append(name)
            else:
                failed.append((name, java_error(p.error_code, p.error_message)))
    if succeeded:
        print(f"Successfully completed leader election ({kind}) for partitions "
              f"{', '.join(succeeded)}", file=out)
    if noop:
        print(f"Valid replica already elected for partitions {', '.join(noop)}", file=out)
    for name, error in failed:
        print(f"Error completing leader election ({kind}) for partition: {name}: {error}",
              file=out)
    if failed:
        print(f"{len(failed)} replica(s) could not be elected", file=err)
        raise Reported(f"{len(failed)} replica(s) could not be elected")


def leader_election_main(argv: Sequence[str] | None = None, *, out: TextIO | None = None,
                         err: TextIO | None = None) -> int:
    """Run ``trio_broker leader-election``; 0 on success, 1 on a failure (a partition that
    could not be elected, or options Kafka's tool refuses after parsing), 2 on a bad command
    line."""
    output = out if out is not None else sys.stdout
    errors = err if err is not None else sys.stderr
    return run(leader_election_parser(), argv,
               lambda ns: leader_election_execute(ns, output, errors), err)


# ---------------------------------------------------------------------- metadata-quorum
DESCRIBE_QUORUM = 55
METADATA_TOPIC = "__cluster_metadata"


def uuid_text(value: Any) -> str:
    """Kafka's ``Uuid.toString()``: the 16 bytes in URL-safe base64, no padding."""
    import base64

    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()


def metadata_quorum_parser() -> argparse.ArgumentParser:
    parser = Parser("trio_broker metadata-quorum",
                    "This tool describes kraft metadata quorum status "
                    "(kafka-metadata-quorum.sh). trio_broker answers DescribeQuorum for its "
                    "single voter (one node is broker and controller).",
                    "  trio_broker metadata-quorum --bootstrap-server localhost:9092 describe "
                    "--status\n"
                    "  trio_broker metadata-quorum --bootstrap-controller localhost:9093 describe "
                    "--replication --human-readable\n")
    connection = parser.add_mutually_exclusive_group(required=True)
    connection.add_argument("--bootstrap-server", metavar="HOST:PORT",
                            help="the Kafka cluster to connect to")
    connection.add_argument("--bootstrap-controller", metavar="HOST:PORT",
                            help="the Kafka controllers to connect to")
    parser.add_argument("--command-config", metavar="FILE",
                        help="client properties file (as the other tools)")
    commands = parser.add_subparsers(dest="action", metavar="ACTION", required=True,
                                     parser_class=argparse.ArgumentParser)
    describe = commands.add_parser("describe", help="describe the metadata quorum")
    describe.add_argument("--status", action="store_true",
                          help="a short summary of the quorum status")
    describe.add_argument("--replication", action="store_true",
                          help="the replication status of each voter and observer")
    describe.add_argument("--human-readable", action="store_true",
                          help="with --replication: times as 'N ms ago'")
    return parser


def describe_quorum(conn: AdminConnection) -> tuple[Any, dict[int, list[str]]]:
    """DescribeQuorum of ``__cluster_metadata``: the partition's data and each node's
    endpoints (``NAME://host:port``)."""
    request = Request(conn, DESCRIBE_QUORUM)
    response = request.send(topics=(request.nested(
        "TopicData", topic_name=METADATA_TOPIC,
        partitions=(request.nested("PartitionData", partition_index=0),)),))
    check(response.error_code, response.error_message, "DescribeQuorum")
    (topic,) = response.topics
    (partition,) = topic.partitions
    check(partition.error_code, partition.error_message, "DescribeQuorum")
    endpoints = {int(n.node_id): [f"{lst.name}://{lst.host}:{lst.port}" for lst in n.listeners]
                 for n in getattr(response, "nodes", ())}
    return partition, endpoints


def replica_text(replica: Any, endpoints: dict[int, list[str]]) -> str:
    """MetadataQuorumCommand's Node.toString: ``{"id": 1, "directoryId": "...",
    "endpoints": ["CONTROLLER://host:9093"]}`` (a zero directory id and no endpoints left
    out)."""
    text = f'{{"id": {int(replica.replica_id)}'
    directory = getattr(replica, "replica_directory_id", None)
    if directory is not None and directory.int != 0:
        text += f', "directoryId": "{uuid_text(directory)}"'
    found = endpoints.get(int(replica.replica_id), [])
    if found:
        text += ', "endpoints": [' + ", ".join(f'"{e}"' for e in found) + "]"
    return text + "}"


def metadata_quorum_execute(ns: argparse.Namespace, out: TextIO) -> None:
    if ns.status and ns.replication:
        raise ToolError("Only one of --status or --replication should be specified with "
                        "describe sub-command")
    if not (ns.status or ns.replication):
        raise ToolError("One of --status or --replication must be specified with describe "
                        "sub-command")
    if ns.status and ns.human_readable:
        raise ToolError("The option --human-readable is only supported along with "
                        "--replication")
    settings = client_settings(ns.command_config, "metadata-quorum")
    bootstrap = ns.bootstrap_server or ns.bootstrap_controller
    with connect_with(bootstrap, settings, "metadata-quorum") as conn:
        if DESCRIBE_QUORUM not in conn.broker_versions:
            raise ToolError("The broker does not support DESCRIBE_QUORUM (no KRaft quorum to "
                            "describe; `trio_broker cluster describe` shows the controller)")
        partition, endpoints = describe_quorum(conn)
        cluster_id = None
        if ns.status and DESCRIBE_CLUSTER in conn.broker_versions:
            cluster_id = Request(conn, DESCRIBE_CLUSTER).send(
                include_cluster_authorized_operations=False, endpoint_type=1).cluster_id
    voters, observers = list(partition.current_voters), list(partition.observers)
    leader_id = int(partition.leader_id)
    leader = next(v for v in voters if int(v.replica_id) == leader_id)
    if ns.status:
        laggard = min(voters, key=lambda v: int(v.log_end_offset))
        lag = int(leader.log_end_offset) - int(laggard.log_end_offset)
        if laggard is leader:
            lag_ms = 0
        elif leader.last_caught_up_timestamp >= 0 and laggard.last_caught_up_timestamp >= 0:
            lag_ms = int(leader.last_caught_up_timestamp) - int(laggard.last_caught_up_timestamp)
        else:
            lag_ms = -1
        print(f"ClusterId:              {kafka_text(cluster_id)}\n"
              f"LeaderId:               {leader_id}\n"
              f"LeaderEpoch:            {int(partition.leader_epoch)}\n"
              f"HighWatermark:          {int(partition.high_watermark)}\n"
              f"MaxFollowerLag:         {lag}\n"
              f"MaxFollowerLagTimeMs:   {lag_ms}\n"
              "CurrentVoters:          ["
              + ", ".join(replica_text(v, endpoints) for v in voters) + "]\n"
              "CurrentObservers:       ["
              + ", ".join(replica_text(o, endpoints) for o in observers) + "]", file=out)
        return
    from .transactions import table

    now = time.time() * 1000

    def when(value: int) -> str:
        if value < 0:
            return "-1"
        return f"{int(now - value)} ms ago" if ns.human_readable else str(value)

    rows = []
    for status, group in (("Leader", [leader]),
                          ("Follower", [v for v in voters if int(v.replica_id) != leader_id]),
                          ("Observer", observers)):
        for r in group:
            directory = getattr(r, "replica_directory_id", None)
            rows.append([int(r.replica_id),
                         uuid_text(directory) if directory is not None else "AAAAAAAAAAAAAAAAAAAAAA",
                         int(r.log_end_offset),
                         int(leader.log_end_offset) - int(r.log_end_offset),
                         when(int(r.last_fetch_timestamp)),
                         when(int(r.last_caught_up_timestamp)), status])
    print("\n".join(table(["NodeId", "DirectoryId", "LogEndOffset", "Lag",
                           "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status"], rows)),
          file=out)


def metadata_quorum_main(argv: Sequence[str] | None = None, *, out: TextIO | None = None,
                         err: TextIO | None = None) -> int:
    """Run ``trio_broker metadata-quorum``; 0 on success, 1 on a failure (against
    trio_broker: DescribeQuorum is not served), 2 on a bad command line."""
    output = out if out is not None else sys.stdout
    return run(metadata_quorum_parser(), argv, lambda ns: metadata_quorum_execute(ns, output),
               err)
