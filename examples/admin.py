"""Topic administration with confluent-kafka's AdminClient: create, list, describe, alter, delete.

    python examples/admin.py            # a tour: create 'example', list, describe, alter, describe
    python examples/admin.py create demo --partitions 3 --config retention.ms=3600000
    python examples/admin.py list
    python examples/admin.py describe demo
    python examples/admin.py alter demo retention.ms=60000 segment.bytes=1048576
    python examples/admin.py partitions demo 6
    python examples/admin.py delete demo
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)


def _pairs(items: list[str]) -> dict[str, str]:
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"expected key=value, got {item!r}")
        pairs[key] = value
    return pairs


def _wait(futures: dict[Any, Any], timeout: float) -> int:
    status = 0
    for key, future in futures.items():
        try:
            future.result(timeout=timeout)
            print(f"{key}: ok")
        except KafkaException as exc:
            print(f"{key}: {exc.args[0].str()}", file=sys.stderr)
            status = 1
    return status


def _describe(admin: AdminClient, topic: str, timeout: float) -> int:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    futures = admin.describe_configs([resource], request_timeout=timeout)
    try:
        configs = futures[resource].result(timeout=timeout)
    except KafkaException as exc:
        print(exc.args[0].str(), file=sys.stderr)
        return 1
    for name, entry in sorted(configs.items()):
        print(f"  {name} = {entry.value}  ({ConfigSource(entry.source).name.lower()})")
    return 0


def _tour(admin: AdminClient, topic: str, timeout: float) -> int:
    """Every command once, on ``topic`` (created with 3 partitions unless it exists)."""
    metadata = admin.list_topics(timeout=timeout)
    if topic not in metadata.topics:
        print(f"creating {topic} with 3 partitions and retention.ms=86400000")
        new = NewTopic(topic, num_partitions=3, replication_factor=1,
                       config={"retention.ms": "86400000"})
        if _wait(admin.create_topics([new], request_timeout=timeout), timeout):
            return 1
        metadata = admin.list_topics(timeout=timeout)
    print(f"cluster {metadata.cluster_id}: topics")
    for name, info in sorted(metadata.topics.items()):
        print(f"  {name}: {len(info.partitions)} partition(s)")
    print(f"{topic} configuration:")
    if _describe(admin, topic, timeout):
        return 1
    print(f"setting retention.ms=3600000 and segment.bytes=16777216 on {topic}")
    entries = [ConfigEntry("retention.ms", "3600000",
                           incremental_operation=AlterConfigOpType.SET),
               ConfigEntry("segment.bytes", "16777216",
                           incremental_operation=AlterConfigOpType.SET)]
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
    if _wait(admin.incremental_alter_configs([resource], request_timeout=timeout), timeout):
        return 1
    print(f"{topic} configuration now:")
    return _describe(admin, topic, timeout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="localhost:9092", help="host:port of the broker")
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--topic", default="example", help="topic of the tour (no command)")
    commands = parser.add_subparsers(dest="command")
    create = commands.add_parser("create", help="create a topic")
    create.add_argument("topic")
    create.add_argument("--partitions", type=int, default=1)
    create.add_argument("--config", action="append", default=[], help="key=value, repeatable")
    commands.add_parser("list", help="list topics and their partition counts")
    describe = commands.add_parser("describe", help="show a topic's configuration")
    describe.add_argument("topic")
    alter = commands.add_parser("alter", help="set topic configs (incrementally)")
    alter.add_argument("topic")
    alter.add_argument("settings", nargs="+", help="key=value")
    partitions = commands.add_parser("partitions", help="raise the partition count")
    partitions.add_argument("topic")
    partitions.add_argument("count", type=int)
    delete = commands.add_parser("delete", help="delete a topic")
    delete.add_argument("topic")
    args = parser.parse_args(argv)

    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    try:
        return _command(admin, args)
    except KafkaException as exc:  # e.g. no broker there: one line, not a traceback
        print(f"admin.py: {exc.args[0].str()} ({args.bootstrap})", file=sys.stderr)
        return 1


def _command(admin: AdminClient, args: argparse.Namespace) -> int:
    if args.command is None:
        return _tour(admin, args.topic, args.timeout)
    if args.command == "create":
        topic = NewTopic(args.topic, num_partitions=args.partitions, replication_factor=1,
                         config=_pairs(args.config))
        return _wait(admin.create_topics([topic], request_timeout=args.timeout), args.timeout)
    if args.command == "list":
        metadata = admin.list_topics(timeout=args.timeout)
        print(f"cluster {metadata.cluster_id}, controller {metadata.controller_id}")
        for broker in metadata.brokers.values():
            print(f"broker {broker.id} at {broker.host}:{broker.port}")
        for name, info in sorted(metadata.topics.items()):
            print(f"topic {name}: {len(info.partitions)} partition(s)")
        return 0
    if args.command == "describe":
        return _describe(admin, args.topic, args.timeout)
    if args.command == "alter":
        entries = [ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
                   for key, value in _pairs(args.settings).items()]
        resource = ConfigResource(ResourceType.TOPIC, args.topic,
                                  incremental_configs=entries)
        return _wait(admin.incremental_alter_configs([resource], request_timeout=args.timeout),
                     args.timeout)
    if args.command == "partitions":
        return _wait(admin.create_partitions([NewPartitions(args.topic, args.count)],
                                             request_timeout=args.timeout), args.timeout)
    return _wait(admin.delete_topics([args.topic], request_timeout=args.timeout), args.timeout)


if __name__ == "__main__":
    sys.exit(main())
