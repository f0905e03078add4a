"""``trio_broker topics``: kafka-topics.sh over the wire (Metadata, CreateTopics, DeleteTopics,
CreatePartitions, DescribeConfigs), with its options and its ``--describe`` format."""

from __future__ import annotations

import argparse
import base64
import re
import sys
import uuid
from collections.abc import Sequence
from typing import Any, TextIO

from kio.schema.errors import ErrorCode

from .admin_client import AdminConnection
from .common import (
    BrokerError,
    Parser,
    Request,
    ToolError,
    UsageError,
    add_connection_options,
    check,
    connect,
    emit_json,
    ms,
    run,
)

METADATA, CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_CONFIGS, CREATE_PARTITIONS = 3, 19, 20, 32, 37
TOPIC_RESOURCE = 2
DEFAULT_CONFIG_SOURCE = 5

EXAMPLES = """\
  trio_broker topics --bootstrap-server localhost:9092 --create --topic orders \\
      --partitions 3 --config retention.ms=86400000 --config cleanup.policy=compact
  trio_broker topics --bootstrap-server localhost:9092 --list
  trio_broker topics --bootstrap-server localhost:9092 --describe --topic orders
  trio_broker topics --bootstrap-server localhost:9092 --describe --output json | jq .
  trio_broker topics --bootstrap-server localhost:9092 --alter --topic orders --partitions 6
  trio_broker topics --bootstrap-server localhost:9092 --delete --topic orders --if-exists
"""


def build_parser() -> argparse.ArgumentParser:
    parser = Parser("trio_broker topics",
                    "Create, delete, describe, or change a topic (kafka-topics.sh).", EXAMPLES)
    add_connection_options(parser)
    actions = parser.add_mutually_exclusive_group(required=True)
    for flag, text in (("--create", "create a new topic"), ("--list", "list all topics"),
                       ("--describe", "list details for the given topics (all by default)"),
                       ("--alter", "change the number of partitions of a topic"),
                       ("--delete", "delete a topic")):
        actions.add_argument(flag, action="store_true", help=text)
    add = parser.add_argument
    add("--topic", metavar="TOPIC",
        help="the topic (a regular expression for --describe/--alter/--delete/--list, as "
             "kafka-topics.sh; a name for --create)")
    add("--partitions", type=int, metavar="N",
        help="number of partitions (--create: default num.partitions; --alter: new total)")
    add("--replication-factor", type=int, metavar="N",
        help="replication factor (default: default.replication.factor)")
    add("--config", action="append", default=[], metavar="KEY=VALUE",
        help="a topic config override for --create (repeatable)")
    add("--if-exists", action="store_true",
        help="with --alter, --describe or --delete: do nothing if the topic does not exist")
    add("--if-not-exists", action="store_true",
        help="with --create: do nothing if the topic already exists")
    add("--exclude-internal", action="store_true", help="leave internal topics out")
    reports = parser.add_mutually_exclusive_group()
    for flag, text in REPORTS.items():
        reports.add_argument(f"--{flag}", action="store_true", help=f"with --describe: {text}")
    return parser


#: kafka-topics.sh's ``--describe`` filters: the topics with overrides (their Topic lines
#: only), or the partitions in one state (their partition lines only).
REPORTS = {
    "topics-with-overrides": "only show topics that have overridden configs",
    "under-replicated-partitions": "only show under replicated partitions",
    "unavailable-partitions": "only show partitions whose leader is not available",
    "under-min-isr-partitions": "only show partitions whose isr count is less than the "
                                "configured minimum",
    "at-min-isr-partitions": "only show partitions whose isr count is equal to the configured "
                             "minimum",
}


def uuid_text(value: uuid.UUID | None) -> str | None:
    """Kafka's ``Uuid.toString``: URL-safe base64 of the 16 bytes, no padding."""
    if value is None or value.int == 0:
        return None
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()


def metadata(conn: AdminConnection, topics: Sequence[str] | None = None, *,
             auto_create: bool = False) -> Any:
    """A Metadata response for ``topics`` (all topics with None); ``auto_create`` lets a
    broker with ``auto.create.topics.enable`` create the missing ones (as producers ask)."""
    request = Request(conn, METADATA)
    wanted = None if topics is None else tuple(
        request.nested("MetadataRequestTopic", topic_id=None, name=t) for t in topics)
    return request.send(topics=wanted, allow_auto_topic_creation=auto_create,
                        include_cluster_authorized_operations=False,
                        include_topic_authorized_operations=False)


def topic_names(conn: AdminConnection, exclude_internal: bool = False) -> list[str]:
    return sorted(t.name for t in metadata(conn).topics
                  if t.error_code == ErrorCode.none and not (exclude_internal and t.is_internal))


def matching(conn: AdminConnection, ns: argparse.Namespace) -> list[str]:
    """The topics ``--topic`` names: a regular expression matched in full, as Kafka's tool."""
    names = topic_names(conn, ns.exclude_internal)
    if ns.topic is None:
        return names
    try:
        pattern = re.compile(ns.topic)
    except re.error:
        return [n for n in names if n == ns.topic]
    return [n for n in names if pattern.fullmatch(n)]


def topic_configs(conn: AdminConnection, names: Sequence[str]) -> dict[str, dict[str, str]]:
    """Each topic's configs that are not defaults (what ``--describe`` prints)."""
    if not names:
        return {}
    request = Request(conn, DESCRIBE_CONFIGS)
    response = request.send(resources=tuple(
        request.nested("DescribeConfigsResource", resource_type=TOPIC_RESOURCE, resource_name=n,
                       configuration_keys=None) for n in names),
        include_synonyms=False, include_documentation=False)
    found: dict[str, dict[str, str]] = {}
    for result in response.results:
        check(result.error_code, result.error_message, result.resource_name)
        found[result.resource_name] = {
            c.name: c.value for c in result.configs
            if getattr(c, "config_source", None) != DEFAULT_CONFIG_SOURCE
            and not getattr(c, "is_default", False) and c.value is not None}
    return found


def describe(conn: AdminConnection, names: Sequence[str]) -> list[dict[str, Any]]:
    """Topic descriptions as plain data (the JSON output; the text output is made from it)."""
    if not names:
        return []
    response = metadata(conn, names)
    configs = topic_configs(conn, names)
    described = []
    for topic in sorted(response.topics, key=lambda t: t.name):
        check(topic.error_code, None, topic.name)
        partitions = sorted(topic.partitions, key=lambda p: p.partition_index)
        described.append({
            "name": topic.name, "topic_id": uuid_text(getattr(topic, "topic_id", None)),
            "partition_count": len(partitions),
            "replication_factor": len(partitions[0].replica_nodes) if partitions else 0,
            "configs": configs.get(topic.name, {}),
            "partitions": [{"partition": int(p.partition_index),
                            "leader": int(p.leader_id) if p.leader_id >= 0 else None,
                            "replicas": [int(r) for r in p.replica_nodes],
                            "isr": [int(r) for r in p.isr_nodes]} for p in partitions]})
    return described


def describe_lines(topic: dict[str, Any]) -> list[str]:
    """kafka-topics.sh ``--describe`` (TopicCommand's TopicDescription / PartitionDescription)."""
    configs = ",".join(f"{k}={v}" for k, v in topic["configs"].items())
    head = f"Topic: {topic['name']}"
    if topic["topic_id"]:
        head += f"\tTopicId: {topic['topic_id']}"
    head += (f"\tPartitionCount: {topic['partition_count']}"
             f"\tReplicationFactor: {topic['replication_factor']}\tConfigs: {configs}")
    lines = [head]
    for p in topic["partitions"]:
        leader = "none" if p["leader"] is None else p["leader"]
        lines.append(f"\tTopic: {topic['name']}\tPartition: {p['partition']}\tLeader: {leader}"
                     f"\tReplicas: {','.join(map(str, p['replicas']))}"
                     f"\tIsr: {','.join(map(str, p['isr']))}")
    return lines


def min_insync_replicas(conn: AdminConnection, names: Sequence[str]) -> dict[str, int]:
    """Each topic's ``min.insync.replicas`` (its override or the broker's default)."""
    request = Request(conn, DESCRIBE_CONFIGS)
    response = request.send(resources=tuple(
        request.nested("DescribeConfigsResource", resource_type=TOPIC_RESOURCE, resource_name=n,
                       configuration_keys=("min.insync.replicas",)) for n in names),
        include_synonyms=False, include_documentation=False)
    found = {}
    for result in response.results:
        check(result.error_code, result.error_message, result.resource_name)
        for c in result.configs:
            if c.name == "min.insync.replicas" and c.value is not None:
                found[result.resource_name] = int(c.value)
    return found


def reported(conn: AdminConnection, topics: list[dict[str, Any]], ns: argparse.Namespace
             ) -> list[dict[str, Any]]:
    """TopicCommand's describe filters: the topics (or partitions) ``ns`` asks to report, each
    topic with a ``"lines"`` key saying which of its lines are printed."""
    if ns.topics_with_overrides:
        return [{**t, "lines": "topic"} for t in topics if t["configs"]]
    if not (ns.under_replicated_partitions or ns.unavailable_partitions
            or ns.under_min_isr_partitions or ns.at_min_isr_partitions):
        return topics
    min_isr = (min_insync_replicas(conn, [t["name"] for t in topics])
               if ns.under_min_isr_partitions or ns.at_min_isr_partitions else {})
    found = []
    for topic in topics:
        wanted = min_isr.get(topic["name"], 1)
        kept = [p for p in topic["partitions"] if (
            ns.under_replicated_partitions and len(p["isr"]) < len(p["replicas"])
            or ns.unavailable_partitions and p["leader"] is None
            or ns.under_min_isr_partitions and len(p["isr"]) < wanted
            or ns.at_min_isr_partitions and len(p["isr"]) == wanted)]
        if kept:
            found.append({**topic, "partitions": kept, "lines": "partitions"})
    return found


def parse_configs(items: Sequence[str]) -> dict[str, str]:
    configs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"Invalid topic config: all configs to be added must be in the "
                             f"format \"key=val\": {item}")
        configs[key.strip()] = value.strip()
    return configs


def create(conn: AdminConnection, ns: argparse.Namespace, out: TextIO) -> dict[str, Any]:
    request = Request(conn, CREATE_TOPICS)
    topic = request.nested(
        "CreatableTopic", name=ns.topic, num_partitions=-1 if ns.partitions is None
        else ns.partitions, replication_factor=-1 if ns.replication_factor is None
        else ns.replication_factor, assignments=(),
        configs=tuple(request.nested("CreatableTopicConfig", name=k, value=v)
                      for k, v in parse_configs(ns.config).items()))
    response = request.send(topics=(topic,), timeout=ms(30000), validate_only=False)
    result = response.topics[0]
    if result.error_code == ErrorCode.topic_already_exists and ns.if_not_exists:
        return {"topic": ns.topic, "created": False}
    if result.error_code == ErrorCode.topic_already_exists:
        raise ToolError(f"Topic '{ns.topic}' already exists.")
    check(result.error_code, result.error_message, ns.topic)
    if ns.output == "text":
        print(f"Created topic {ns.topic}.", file=out)
    return {"topic": ns.topic, "created": True}


def require_found(names: list[str], ns: argparse.Namespace) -> list[str]:
    if not names and ns.topic is not None and not ns.if_exists:
        raise ToolError(f"Topic '{ns.topic}' does not exist as expected")
    return names


def delete(conn: AdminConnection, names: list[str]) -> None:
    if not names:
        return
    request = Request(conn, DELETE_TOPICS)
    response = request.send(topic_names=tuple(names), topics=tuple(
        request.nested("DeleteTopicState", name=n, topic_id=uuid.UUID(int=0)) for n in names),
        timeout=ms(30000))
    for result in response.responses:
        check(result.error_code, getattr(result, "error_message", None), result.name)


def alter(conn: AdminConnection, names: list[str], partitions: int) -> None:
    if not names:
        return
    request = Request(conn, CREATE_PARTITIONS)
    response = request.send(topics=tuple(
        request.nested("CreatePartitionsTopic", name=n, count=partitions, assignments=None)
        for n in names), timeout=ms(30000), validate_only=False)
    for result in response.results:
        check(result.error_code, result.error_message, result.name)


def check_options(ns: argparse.Namespace) -> None:
    if (ns.create or ns.alter or ns.delete) and not ns.topic:
        raise UsageError("--topic is required with --create, --alter and --delete")
    if ns.alter and ns.partitions is None:
        raise UsageError("--alter needs --partitions (the new total)")
    if ns.create and ns.partitions is not None and ns.partitions < 1:
        raise UsageError("The partitions must be greater than 0")
    if ns.config and not ns.create:
        raise UsageError("--config is only valid with --create (use `trio_broker configs "
                         "--alter --entity-type topics` to change a topic's configs)")
    if ns.if_not_exists and not ns.create:
        raise UsageError("--if-not-exists is only valid with --create")
    if not ns.describe and any(getattr(ns, f.replace("-", "_")) for f in REPORTS):
        raise UsageError(f"--{'/--'.join(REPORTS)} are only valid with --describe")
    if ns.if_exists and not (ns.alter or ns.delete or ns.describe):
        raise UsageError("--if-exists is only valid with --alter, --describe or --delete")


def execute(ns: argparse.Namespace, out: TextIO) -> None:
    check_options(ns)
    with connect(ns, "topics") as conn:
        result: Any
        if ns.create:
            result = create(conn, ns, out)
        elif ns.list:
            result = matching(conn, ns)
            if ns.output == "text":
                for name in result:
                    print(name, file=out)
        elif ns.describe:
            result = reported(conn, describe(conn, require_found(matching(conn, ns), ns)), ns)
            if ns.output == "text":
                for topic in result:
                    lines = describe_lines(topic)
                    shown = {"topic": lines[:1], "partitions": lines[1:]}.get(
                        topic.pop("lines", ""), lines)
                    print("\n".join(shown), file=out)
            else:
                for topic in result:
                    topic.pop("lines", None)
        elif ns.alter:
            names = require_found(matching(conn, ns), ns)
            alter(conn, names, ns.partitions)
            result = {"altered": names, "partitions": ns.partitions}
        else:
            names = require_found(matching(conn, ns), ns)
            delete(conn, names)
            result = {"deleted": names}
        if ns.output == "json":
            emit_json(result, out)


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None,
         err: TextIO | None = None) -> int:
    """Run ``trio_broker topics``; 0 on success, 1 on a failure, 2 on a bad command line."""
    output = out if out is not None else sys.stdout
    return run(build_parser(), argv, lambda ns: execute(ns, output), err)


__all__ = ["BrokerError", "describe", "describe_lines", "main", "metadata", "uuid_text"]
