"""``trio_broker get-offsets`` (kafka-get-offsets.sh, Kafka's GetOffsetShell) and
``trio_broker delete-records`` (kafka-delete-records.sh, DeleteRecordsCommand) over the wire:
Metadata, ListOffsets and DeleteRecords, with their options, output and exit statuses."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Container, Sequence
from pathlib import Path
from typing import TextIO

from kio.schema.errors import ErrorCode

from .admin_client import AdminConnection
from .common import (
    Parser,
    Reported,
    Request,
    ToolError,
    UsageError,
    add_connection_options,
    connect,
    emit_json,
    java_error,
    ms,
    run,
)
from .topics import metadata

LIST_OFFSETS, DELETE_RECORDS = 2, 21

GET_OFFSETS_EXAMPLES = """\
  trio_broker get-offsets --bootstrap-server localhost:9092 --topic orders
  trio_broker get-offsets --bootstrap-server localhost:9092 --topic-partitions 'orders:0-2,audit'
  trio_broker get-offsets --bootstrap-server localhost:9092 --topic orders --time earliest
  trio_broker get-offsets --bootstrap-server localhost:9092 --time 1700000000000
"""

DELETE_RECORDS_EXAMPLES = """\
  echo '{"partitions": [{"topic": "orders", "partition": 0, "offset": 42}], "version": 1}' \\
      > delete.json
  trio_broker delete-records --bootstrap-server localhost:9092 --offset-json-file delete.json
"""

#: ``--time`` names and the ListOffsets timestamps they stand for (GetOffsetShell).
TIME_SPECS = {"latest": -1, "earliest": -2, "max-timestamp": -3, "earliest-local": -4,
              "latest-tiered": -5, "earliest-pending-upload": -6}
#: The first ListOffsets version that knows each special timestamp (below -2).
_TIMESTAMP_VERSIONS = {-3: 7, -4: 8, -5: 9, -6: 11}
#: GetOffsetShell's TOPIC_PARTITION_PATTERN.
_RULE = re.compile(r"([^:,]*)(?::(?:([0-9]*)|(?:([0-9]*)-([0-9]*))))?")
_INT_MAX = 2**31 - 1


# --------------------------------------------------------------------------- get-offsets
def get_offsets_parser() -> argparse.ArgumentParser:
    parser = Parser("trio_broker get-offsets",
                    "An interactive shell for getting topic-partition offsets "
                    "(kafka-get-offsets.sh): one topic:partition:offset line per partition.",
                    GET_OFFSETS_EXAMPLES)
    add_connection_options(parser)
    add = parser.add_argument
    add("--topic-partitions", metavar="topic1:1,topic2:0-3,topic3,topic4:5-,topic5:-3",
        help="comma-separated topic-partition patterns: a topic regular expression (omitted: "
             "any topic), then optionally ':' and a partition, a range N-M (M excluded), N- "
             "or -M; not with --topic or --partitions")
    add("--topic", metavar="TOPIC",
        help="the topic (a regular expression matched against whole names); all topics if "
             "omitted")
    add("--partitions", metavar="P,P",
        help="comma-separated partition ids (all if omitted)")
    add("--time", default="latest",
        metavar="<timestamp> / -1 or latest / -2 or earliest / -3 or max-timestamp",
        help="which offset: latest (default), earliest, max-timestamp (the offset of the "
             "record with the largest timestamp), earliest-local, latest-tiered, "
             "earliest-pending-upload, or a timestamp in ms (the first offset at or after "
             "it)")
    add("--exclude-internal-topics", action="store_true",
        help="leave out internal topics (included by default)")
    return parser


def include_list(regex: str) -> re.Pattern[str]:
    """Kafka's ``TopicFilter.IncludeList``: commas mean "or", spaces and surrounding quotes
    are dropped, and the whole name must match."""
    cleaned = regex.strip().replace(",", "|").replace(" ", "")
    cleaned = re.sub(r"""^["']+|["']+$""", "", cleaned)
    try:
        return re.compile(cleaned)
    except re.error as exc:
        raise UsageError(f"{regex} is an invalid regex: {exc}") from None


def parse_time(text: str) -> int:
    """``--time``: a name or a number (GetOffsetShell.parseOffsetSpec)."""
    if text in TIME_SPECS:
        return TIME_SPECS[text]
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"Malformed time argument {text}. Please use -1 or latest / -2 or "
                         "earliest / -3 or max-timestamp / -4 or earliest-local / -5 or "
                         "latest-tiered / -6 or earliest-pending-upload, or a specified long "
                         "format timestamp") from None


def partition_filter(ns: argparse.Namespace
                     ) -> list[tuple[re.Pattern[str], Container[int] | None]]:
    """The rules: ``(topic pattern, partitions or None for all)``; a partition passes one
    rule."""
    if ns.topic_partitions is not None:
        if ns.topic is not None or ns.partitions is not None:
            raise UsageError("--topic-partitions cannot be used with --topic or --partitions")
        rules: list[tuple[re.Pattern[str], Container[int] | None]] = []
        for spec in ns.topic_partitions.split(","):
            match = _RULE.fullmatch(spec)
            if match is None:
                raise UsageError(f"Invalid rule specification: {spec}")
            topic, single, low, high = (g or None for g in match.groups())
            pattern = include_list(topic) if topic else re.compile(".*")
            if single is not None:
                rules.append((pattern, range(int(single), int(single) + 1)))
            else:
                rules.append((pattern, range(int(low or 0), int(high) if high else _INT_MAX)))
        return rules
    wanted: set[int] = set()
    if ns.partitions:
        try:
            wanted = {int(p) for p in ns.partitions.split(",")}
        except ValueError:
            raise UsageError("--partitions expects a comma separated list of numeric partition "
                             f"ids, but received: {ns.partitions}") from None
    pattern = include_list(ns.topic) if ns.topic is not None else re.compile(".*")
    return [(pattern, wanted or None)]


def get_offsets(conn: AdminConnection, ns: argparse.Namespace, err: TextIO
                ) -> list[tuple[str, int, int]]:
    rules = partition_filter(ns)
    timestamp = parse_time(ns.time)
    chosen = sorted(
        (str(t.name), int(p.partition_index)) for t in metadata(conn).topics
        if t.error_code == ErrorCode.none and not (ns.exclude_internal_topics and t.is_internal)
        for p in t.partitions
        if any(pattern.fullmatch(str(t.name))
               and (allowed is None or int(p.partition_index) in allowed)
               for pattern, allowed in rules))
    if not chosen:
        raise ToolError("Could not match any topic-partitions with the specified filters")
    request = Request(conn, LIST_OFFSETS)
    # A timestamp this broker's ListOffsets version cannot carry: without tiered storage the
    # local log is the whole log (earliest-local is earliest) and nothing is tiered.
    if timestamp < -2 and request.version < _TIMESTAMP_VERSIONS.get(timestamp, 0):
        if timestamp == -4:
            timestamp = -2
        elif timestamp in (-5, -6):
            return []
    by_topic: dict[str, list[int]] = {}
    for topic, partition in chosen:
        by_topic.setdefault(topic, []).append(partition)
    response = request.send(replica_id=-1, isolation_level=0, timeout=ms(30000), topics=tuple(
        request.nested("ListOffsetsTopic", name=topic, partitions=tuple(
            request.nested("ListOffsetsPartition", partition_index=p, current_leader_epoch=-1,
                           timestamp=timestamp, max_num_offsets=1) for p in parts))
        for topic, parts in by_topic.items()))
    found = []
    for topic in response.topics:
        for p in topic.partitions:
            name = f"{topic.name}-{p.partition_index}"
            if p.error_code != ErrorCode.none:
                print(f"Skip getting offsets for topic-partition {name} due to error: "
                      f"{java_error(p.error_code)}", file=err)
                continue
            if int(p.offset) != -1:  # ListOffsetsResponse.UNKNOWN_OFFSET: not printed
                found.append((str(topic.name), int(p.partition_index), int(p.offset)))
    # GetOffsetShell's TreeMap orders by TopicPartition.toString(): "topic-partition".
    return sorted(found, key=lambda row: f"{row[0]}-{row[1]}")


def get_offsets_execute(ns: argparse.Namespace, out: TextIO, err: TextIO) -> None:
    with connect(ns, "get-offsets") as conn:
        rows = get_offsets(conn, ns, err)
    if ns.output == "json":
        emit_json([{"topic": t, "partition": p, "offset": o} for t, p, o in rows], out)
        return
    for topic, partition, offset in rows:
        print(f"{topic}:{partition}:{offset}", file=out)


def get_offsets_main(argv: Sequence[str] | None = None, *, out: TextIO | None = None,
                     err: TextIO | None = None) -> int:
    """Run ``trio_broker get-offsets``; 0 on success, 1 on a failure, 2 on a bad command
    line."""
    output = out if out is not None else sys.stdout
    errors = err if err is not None else sys.stderr
    return run(get_offsets_parser(), argv, lambda ns: get_offsets_execute(ns, output, errors),
               err)


# ------------------------------------------------------------------------ delete-records
def delete_records_parser() -> argparse.ArgumentParser:
    parser = Parser("trio_broker delete-records",
                    "Delete the records of partitions before an offset (kafka-delete-records.sh"
                    "): the log start offset moves up to it.", DELETE_RECORDS_EXAMPLES)
    add_connection_options(parser)
    parser.add_argument(
        "--offset-json-file", required=True, metavar="FILE",
        help='the JSON file with the offset per partition: {"partitions": [{"topic": "foo", '
             '"partition": 1, "offset": 1}], "version": 1}; offset -1 is the high watermark')
    return parser


def parse_offset_json(text: str) -> dict[tuple[str, int], int]:
    """DeleteRecordsCommand.parseOffsetJsonStringWithoutDedup, duplicates refused."""
    try:
        document = json.loads(text)
    except ValueError:
        raise ToolError("The input string is not a valid JSON") from None
    if not isinstance(document, dict):
        raise ToolError("The input string is not a valid JSON")
    version = document.get("version", 1)
    if version != 1:
        raise ToolError(f"Not supported version field value {version}")
    if "partitions" not in document:
        raise ToolError("Missing partitions field")
    found: dict[tuple[str, int], list[int]] = {}
    try:
        for entry in document["partitions"]:
            topic, partition, offset = entry["topic"], entry["partition"], entry["offset"]
            if not (isinstance(topic, str) and isinstance(partition, int)
                    and isinstance(offset, int)):
                raise TypeError
            found.setdefault((topic, partition), []).append(offset)
    except (KeyError, TypeError) as exc:
        raise ToolError(f"Invalid partition entry in the offset JSON file: {exc}") from None
    duplicates = [f"{t}-{p}" for (t, p), offsets in found.items() if len(offsets) > 1]
    if duplicates:
        raise ToolError("Offset json file contains duplicate topic partitions: "
                        + ",".join(duplicates))
    return {tp: offsets[0] for tp, offsets in found.items()}


def delete_records(conn: AdminConnection, wanted: dict[tuple[str, int], int]
                   ) -> dict[tuple[str, int], tuple[int | None, str | None]]:
    """DeleteRecords: ``{(topic, partition): (low watermark, None) or (None, error)}``."""
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for (topic, partition), offset in sorted(wanted.items()):
        by_topic.setdefault(topic, []).append((partition, offset))
    request = Request(conn, DELETE_RECORDS)
    response = request.send(timeout=ms(30000), topics=tuple(
        request.nested("DeleteRecordsTopic", name=topic, partitions=tuple(
            request.nested("DeleteRecordsPartition", partition_index=p, offset=o)
            for p, o in parts)) for topic, parts in by_topic.items()))
    results: dict[tuple[str, int], tuple[int | None, str | None]] = {}
    for topic in response.topics:
        for p in topic.partitions:
            key = (str(topic.name), int(p.partition_index))
            results[key] = ((int(p.low_watermark), None) if p.error_code == ErrorCode.none
                            else (None, java_error(p.error_code)))
    return results


def delete_records_execute(ns: argparse.Namespace, out: TextIO) -> None:
    try:
        text = Path(ns.offset_json_file).read_text(encoding="utf-8")
    except OSError as exc:
        raise ToolError(f"{ns.offset_json_file}: {exc.strerror}") from None
    wanted = parse_offset_json(text)
    json_out = ns.output == "json"
    with connect(ns, "delete-records") as conn:
        if not json_out:
            print("Executing records delete operation", file=out)
        results = delete_records(conn, wanted)
    failed = any(error is not None for _, error in results.values())
    if json_out:
        emit_json([{"topic": t, "partition": p, "low_watermark": low, "error": error}
                   for (t, p), (low, error) in sorted(results.items())], out)
    else:
        print("Records delete operation completed:", file=out)
        for (topic, partition), (low, error) in sorted(results.items()):
            if error is None:
                print(f"partition: {topic}-{partition}\tlow_watermark: {low}", file=out)
            else:
                print(f"partition: {topic}-{partition}\terror: {error}", file=out)
    if failed:
        raise Reported("delete-records failed")


def delete_records_main(argv: Sequence[str] | None = None, *, out: TextIO | None = None,
                        err: TextIO | None = None) -> int:
    """Run ``trio_broker delete-records``; 0 on success, 1 on a failure (a partition whose
    records could not be deleted), 2 on a bad command line."""
    output = out if out is not None else sys.stdout
    return run(delete_records_parser(), argv, lambda ns: delete_records_execute(ns, output),
               err)
