"""``trio_broker produce`` / ``trio_broker consume``: kafka-console-producer.sh and
kafka-console-consumer.sh (with kcat's ``-f`` format string), reading stdin and writing stdout.

They speak Produce / Fetch / ListOffsets / OffsetFetch / OffsetCommit through the tools'
blocking :class:`~trio_broker.tools.admin_client.AdminConnection` (one connection to the
bootstrap broker; a single-node cluster, or a cluster whose bootstrap broker leads the
partitions used). Records are encoded and decoded with :mod:`trio_broker.protocol.records`.
``--group`` joins the group as a consumer-protocol member (KIP-848, :mod:`.group_member`):
the broker assigns the partitions, the consumer starts at their committed offsets, commits
what it wrote and leaves on exit; with ``--partition`` or ``--offset`` it reads the partitions
asked for without joining (Kafka's ``assign()``) and commits to the group's offsets.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any, BinaryIO, TextIO

from kio.schema.errors import ErrorCode

from ..protocol import records as rb
from .admin_client import AdminConnection
from .common import (
    BrokerError,
    Parser,
    Request,
    ToolError,
    UsageError,
    add_connection_options,
    check,
    client_settings,
    connect_with,
    ms,
    run,
)
from .group_member import CONSUMER_GROUP_HEARTBEAT, GroupMember
from .groups import EARLIEST, LATEST, commit, committed, coordinator, list_offsets
from .topics import metadata

PRODUCE, FETCH = 0, 1
_BATCH_RECORDS = 1000
_BATCH_BYTES = 512 * 1024
#: How long ``produce`` waits for the leaders of a topic it has just had auto-created.
_LEADER_WAIT_S = 10.0

PRODUCE_EXAMPLES = """\
  echo hello | trio_broker produce --bootstrap-server localhost:9092 --topic orders
  trio_broker produce --bootstrap-server localhost:9092 --topic orders \\
      --property parse.key=true --property key.separator=: < keyed.txt
  printf 'trace:abc,env:prod\\tk1\\tv1\\n' | trio_broker produce --bootstrap-server \\
      localhost:9092 --topic orders --property parse.headers=true --property parse.key=true
"""

CONSUME_EXAMPLES = """\
  trio_broker consume --bootstrap-server localhost:9092 --topic orders --from-beginning \\
      --max-messages 10
  trio_broker consume --bootstrap-server localhost:9092 --topic orders --partition 0 \\
      --offset 42 -f '%t [%p] @%o %T: %k=%v %h\\n' --timeout-ms 5000
  trio_broker consume --bootstrap-server localhost:9092 --topic orders --group app \\
      --property print.key=true --property key.separator=: -e
  trio_broker produce ... < in.txt && trio_broker consume ... --from-beginning -e > out.txt
"""


def _properties(items: Sequence[str]) -> dict[str, str]:
    found = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"Invalid property (want key=value): {item}")
        found[key.strip()] = value.encode().decode("unicode_escape")
    return found


def client_properties(items: Sequence[str]) -> dict[str, str]:
    """``--producer-property``/``--consumer-property`` ``KEY=VALUE`` pairs, taken as
    ``CommandLineUtils.parseKeyValueArgs`` takes them (split at the first ``=``)."""
    found = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"Invalid command line properties: {item}")
        found[key.strip()] = value.strip()
    return found


def _settings(ns: argparse.Namespace, extra: Sequence[str], tool: str) -> dict[str, str]:
    """The client's properties: the config file (``--command-config`` or the Kafka 3 name),
    then ``--producer-property``/``--consumer-property``, which win (as in Kafka)."""
    settings = client_settings(ns.command_config, tool)
    settings.update(client_properties(extra))
    return settings


def _flag(props: dict[str, str], key: str) -> bool:
    return props.get(key, "false").strip().lower() == "true"


# ----------------------------------------------------------------------------- produce
def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (the default partitioner's hash), as an unsigned int."""
    m, length = 0x5BD1E995, len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = length & ~3
    extra = length % 4
    if extra == 3:
        h ^= data[tail + 2] << 16
    if extra >= 2:
        h ^= data[tail + 1] << 8
    if extra >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def key_partition(key: bytes, partitions: int) -> int:
    """The default partitioner for keyed records: ``toPositive(murmur2(key)) % n``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


Parsed = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]


class LineReader:
    """kafka-console-producer's LineMessageReader: ``[headers<TAB>][key<SEP>]value``."""

    def __init__(self, props: dict[str, str]) -> None:
        self.parse_key = _flag(props, "parse.key")
        self.parse_headers = _flag(props, "parse.headers")
        self.key_separator = props.get("key.separator", "\t").encode()
        self.headers_delimiter = props.get("headers.delimiter", "\t").encode()
        self.headers_separator = props.get("headers.separator", ",").encode()
        self.headers_key_separator = props.get("headers.key.separator", ":").encode()
        marker = props.get("null.marker")
        self.null_marker = marker.encode() if marker is not None else None

    def _nullable(self, value: bytes) -> bytes | None:
        return None if self.null_marker is not None and value == self.null_marker else value

    def parse(self, line: bytes, number: int) -> Parsed:
        headers: list[tuple[str, bytes | None]] = []
        if self.parse_headers:
            text, sep, line = line.partition(self.headers_delimiter)
            if not sep:
                raise ToolError(f"No headers delimiter found on line number {number}: "
                                f"'{text.decode(errors='replace')}'")
            for pair in filter(None, text.split(self.headers_separator)):
                name, found, value = pair.partition(self.headers_key_separator)
                if not found:
                    raise ToolError(f"No header key separator found in pair "
                                    f"'{pair.decode(errors='replace')}' on line number "
                                    f"{number}")
                headers.append((name.decode(), self._nullable(value)))
        key: bytes | None = None
        if self.parse_key:
            key, sep, line = line.partition(self.key_separator)
            if not sep:
                raise ToolError(f"No key separator found on line number {number}: "
                                f"'{key.decode(errors='replace')}'")
            key = self._nullable(key)
        return key, self._nullable(line), headers


def _lines(stream: BinaryIO) -> Iterator[bytes]:
    for raw in stream:
        yield raw[:-1] if raw.endswith(b"\n") else raw


def producer_metadata(conn: AdminConnection, topic: str) -> Any:
    """The topic's Metadata as a Kafka producer fetches it: with allow_auto_topic_creation, so
    a broker with ``auto.create.topics.enable=true`` creates a missing topic (kcat,
    kafka-console-producer.sh), retried while its leaders are not there yet
    (LEADER_NOT_AVAILABLE, Kafka's first answer for a topic it is creating). With
    auto-creation off the broker's UNKNOWN_TOPIC_OR_PARTITION is the error."""
    deadline = time.monotonic() + _LEADER_WAIT_S
    delay = 0.05
    while True:
        (answer,) = metadata(conn, [topic], auto_create=True).topics
        waiting = answer.error_code == ErrorCode.leader_not_available or (
            answer.error_code == ErrorCode.none and any(
                p.error_code == ErrorCode.leader_not_available or p.leader_id < 0
                for p in answer.partitions))
        if not waiting or time.monotonic() + delay > deadline:
            break
        time.sleep(delay)
        delay = min(delay * 2, 1.0)
    check(answer.error_code, None, topic)
    for p in answer.partitions:
        if p.leader_id < 0:
            check(p.error_code or ErrorCode.leader_not_available, None,
                  f"{topic}-{p.partition_index}")
    return answer


#: ``--compression-codec`` / ``compression.type``: Kafka's names and the batch attribute bits.
CODECS = {"none": rb.COMPRESSION_NONE, "gzip": rb.COMPRESSION_GZIP,
          "snappy": rb.COMPRESSION_SNAPPY, "lz4": rb.COMPRESSION_LZ4,
          "zstd": rb.COMPRESSION_ZSTD}


class Producer:
    """Batches records per partition and sends them with acks=all (or ``--acks``)."""

    def __init__(self, conn: AdminConnection, topic: str, acks: int,
                 partition: int | None, codec: int = rb.COMPRESSION_NONE) -> None:
        self.conn = conn
        self.topic = topic
        self.acks = acks
        self.codec = codec
        self.request = Request(conn, PRODUCE)
        self.partitions = len(producer_metadata(conn, topic).partitions)
        if partition is not None and not 0 <= partition < self.partitions:
            raise ToolError(f"Partition {partition} of topic {topic} does not exist "
                            f"(the topic has {self.partitions})")
        self.fixed = partition
        self.pending: dict[int, list[rb.RecordInput]] = {}
        self.pending_bytes = 0
        self.sticky = 0
        self.sent = 0

    def add(self, key: bytes | None, value: bytes | None,
            headers: list[tuple[str, bytes | None]]) -> None:
        if self.fixed is not None:
            partition = self.fixed
        elif key is not None:
            partition = key_partition(key, self.partitions)
        else:
            partition = self.sticky  # the sticky partitioner: one partition per batch
        batch = self.pending.setdefault(partition, [])
        batch.append((key, value, headers, int(time.time() * 1000)))
        self.pending_bytes += len(key or b"") + len(value or b"") + 16
        if len(batch) >= _BATCH_RECORDS or self.pending_bytes >= _BATCH_BYTES:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        r = self.request
        body_topics = (r.nested("TopicProduceData", name=self.topic, partition_data=tuple(
            r.nested("PartitionProduceData", index=p,
                     records=rb.build_batch(batch, attributes=self.codec))
            for p, batch in sorted(self.pending.items()))),)
        count = sum(len(b) for b in self.pending.values())
        self.pending.clear()
        self.pending_bytes = 0
        self.sticky = (self.sticky + 1) % self.partitions
        if self.acks == 0:
            # No response comes for acks=0: send, then forget the correlation id.
            raise ToolError("--acks 0 is not supported (use 1 or -1)")
        response = r.send(transactional_id=None, acks=self.acks, timeout=ms(30000),
                          topic_data=body_topics)
        for topic in response.responses:
            for p in topic.partition_responses:
                check(p.error_code, getattr(p, "error_message", None),
                      f"{topic.name}-{p.index}")
        self.sent += count


def produce_parser() -> argparse.ArgumentParser:
    parser = Parser("trio_broker produce",
                    "Read lines from stdin and produce them to a topic "
                    "(kafka-console-producer.sh, kcat -P).", PRODUCE_EXAMPLES)
    add_connection_options(parser, output=False)
    add = parser.add_argument
    add("--producer.config", dest="command_config", metavar="FILE",
        help="= --command-config (kafka-console-producer.sh's name before Kafka 4)")
    add("--topic", "-t", required=True, help="the topic to produce to")
    add("--partition", "-p", type=int, help="always this partition (default: by key, as "
        "Kafka's default partitioner; records without a key: one partition per batch)")
    add("--property", "--reader-property", action="append", default=[], metavar="KEY=VALUE",
        help="line reader properties (--reader-property: Kafka 4's name): parse.key, "
             "key.separator (TAB), parse.headers, headers.delimiter (TAB), "
             "headers.separator (,), headers.key.separator (:), null.marker")
    add("-K", dest="kcat_key_separator", metavar="SEP",
        help="kcat's key delimiter: the same as --property parse.key=true --property "
             "key.separator=SEP")
    add("--acks", "--request-required-acks", type=int, choices=(-1, 1),
        help="acks: -1 (all, default) or 1 (wins over acks in --producer-property)")
    add("--compression-codec", nargs="?", const="gzip", choices=tuple(CODECS),
        metavar="CODEC", help="compress batches: none, gzip, snappy, lz4 or zstd; gzip when "
        "given without a value (wins over compression.type in --producer-property)")
    add("--sync", action="store_true",
        help="send each record on its own and wait for its acknowledgement, one at a time")
    add("--producer-property", action="append", default=[], metavar="KEY=VALUE",
        help="producer properties: acks, compression.type, client.id, request.timeout.ms, "
             "security.protocol, ssl.*, sasl.* (win over --command-config's; others are "
             "accepted and have no effect)")
    return parser


def producer_acks(ns: argparse.Namespace, settings: dict[str, str]) -> int:
    """``--request-required-acks``, else the ``acks`` property (all/-1, 1), else -1."""
    if ns.acks is not None:
        return int(ns.acks)
    text = settings.get("acks", "all").strip().lower()
    acks = {"all": -1, "-1": -1, "1": 1}.get(text)
    if acks is None:
        raise UsageError(f"Invalid value {text} for configuration acks: acks=0 is not "
                         "supported (use all, -1 or 1)" if text == "0" else
                         f"Invalid value {text} for configuration acks: String must be one "
                         "of: all, -1, 0, 1")
    return acks


def producer_codec(ns: argparse.Namespace, settings: dict[str, str]) -> int:
    """``--compression-codec``, else the ``compression.type`` property, else none."""
    name = ns.compression_codec or settings.get("compression.type", "none").strip().lower()
    if name not in CODECS:
        raise UsageError(f"Invalid value {name} for configuration compression.type: String "
                         f"must be one of: {', '.join(CODECS)}")
    return CODECS[name]


def produce_execute(ns: argparse.Namespace, stdin: BinaryIO, err: TextIO) -> None:
    props = _properties(ns.property)
    if ns.kcat_key_separator is not None:
        props.update({"parse.key": "true", "key.separator": ns.kcat_key_separator})
    reader = LineReader(props)
    settings = _settings(ns, ns.producer_property, "produce")
    acks, codec = producer_acks(ns, settings), producer_codec(ns, settings)
    with connect_with(ns.bootstrap_server, settings, "produce") as conn:
        producer = Producer(conn, ns.topic, acks, ns.partition, codec)
        progress = Progress(err, "produced")
        for number, line in enumerate(_lines(stdin), 1):
            producer.add(*reader.parse(line, number))
            if ns.sync:
                producer.flush()  # --sync: each record acknowledged before the next is read
            if number % _BATCH_RECORDS == 0:
                progress.show(number)
        producer.flush()
        progress.done(producer.sent)


# ----------------------------------------------------------------------------- consume
_FORMAT_TOKEN = re.compile(rb"%[tpokvhTKS%]|\\[ntr\\]")


#: ``--formatter`` classes, by simple name (any package: ``kafka.tools.`` before Kafka 3.7,
#: ``org.apache.kafka.tools.consumer.`` since). LoggingMessageFormatter prints as the default
#: one (Kafka's also logs each record); NoOpMessageFormatter prints nothing.
FORMATTERS = ("DefaultMessageFormatter", "LoggingMessageFormatter", "NoOpMessageFormatter")


def formatter_name(class_name: str) -> str:
    simple = class_name.rsplit(".", 1)[-1]
    if simple not in FORMATTERS:
        raise UsageError(f"Unknown --formatter {class_name}: this consumer has "
                         f"{', '.join(FORMATTERS)}")
    return simple


class Formatter:
    """kcat's ``-f`` format, or kafka-console-consumer's DefaultMessageFormatter."""

    def __init__(self, fmt: str | None, props: dict[str, str],
                 kind: str = "DefaultMessageFormatter") -> None:
        self.fmt = fmt.encode() if fmt is not None else None
        self.props = props
        self.silent = kind == "NoOpMessageFormatter"

    def __call__(self, topic: str, partition: int, record: rb.Record) -> bytes:
        if self.silent:
            return b""
        if self.fmt is not None:
            return _FORMAT_TOKEN.sub(lambda m: self._token(m.group(), topic, partition, record),
                                     self.fmt)
        return self._default(partition, record)

    @staticmethod
    def _token(token: bytes, topic: str, partition: int, record: rb.Record) -> bytes:
        escapes = {b"\\n": b"\n", b"\\t": b"\t", b"\\r": b"\r", b"\\\\": b"\\", b"%%": b"%"}
        if token in escapes:
            return escapes[token]
        letter = token[1:]
        if letter == b"t":
            return topic.encode()
        if letter == b"p":
            return str(partition).encode()
        if letter == b"o":
            return str(record.offset).encode()
        if letter == b"T":
            return str(record.timestamp).encode()
        if letter == b"k":
            return record.key if record.key is not None else b""
        if letter == b"v":
            return record.value if record.value is not None else b""
        if letter == b"K":
            return str(-1 if record.key is None else len(record.key)).encode()
        if letter == b"S":
            return str(-1 if record.value is None else len(record.value)).encode()
        return b",".join(name.encode() + b"=" + (value if value is not None else b"")
                         for name, value in record.headers)  # %h, kcat's form

    def _default(self, partition: int, record: rb.Record) -> bytes:
        p = self.props
        key_sep = p.get("key.separator", "\t").encode()
        line_sep = p.get("line.separator", "\n").encode()
        null = p.get("null.literal", "null").encode()
        out = b""
        if _flag(p, "print.timestamp"):
            out += b"CreateTime:" + str(record.timestamp).encode() + key_sep
        if _flag(p, "print.partition"):
            out += b"Partition:" + str(partition).encode() + key_sep
        if _flag(p, "print.offset"):
            out += b"Offset:" + str(record.offset).encode() + key_sep
        if _flag(p, "print.headers"):
            if record.headers:
                out += p.get("headers.separator", ",").encode().join(
                    name.encode() + b":" + (value if value is not None else null)
                    for name, value in record.headers)
            else:
                out += b"NO_HEADERS"
            out += key_sep
        if _flag(p, "print.key"):
            out += (record.key if record.key is not None else null) + key_sep
        if p.get("print.value", "true").strip().lower() == "true":
            out += record.value if record.value is not None else null
        return out + line_sep


def consume_parser() -> argparse.ArgumentParser:
    parser = Parser("trio_broker consume",
                    "Consume records of a topic and write them to stdout "
                    "(kafka-console-consumer.sh, kcat -C).", CONSUME_EXAMPLES)
    add_connection_options(parser, output=False)
    add = parser.add_argument
    add("--consumer.config", dest="command_config", metavar="FILE",
        help="= --command-config (kafka-console-consumer.sh's name before Kafka 4)")
    add("--topic", "-t", help="the topic to consume")
    add("--include", "--whitelist", metavar="REGEX",
        help="consume every topic whose whole name matches this regular expression (not "
             "internal topics; topics created later are picked up); instead of --topic "
             "(--whitelist: Kafka 3's name)")
    add("--partition", "-p", type=int, help="only this partition (default: all)")
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true",
                       help="start at the earliest offset (when there is no committed offset)")
    start.add_argument("--offset", "-o", metavar="N|earliest|latest",
                       help="start at this offset (needs --partition for a number)")
    add("--group", "-G", help="join this consumer group (KIP-848 consumer protocol): read "
        "the partitions the broker assigns, from their committed offsets, commit what was "
        "written, leave on exit (with --partition/--offset: read those without joining, "
        "commit to the group); = --consumer-property group.id=GROUP")
    add("--max-messages", "-c", type=int, metavar="N", help="exit after N records")
    add("--timeout-ms", type=int, metavar="MS",
        help="exit if no record arrives for this long")
    add("--exit-at-end", "-e", action="store_true",
        help="exit once every partition is read to its end (kcat -e)")
    add("--property", "--formatter-property", action="append", default=[],
        metavar="KEY=VALUE",
        help="formatter properties (--formatter-property: Kafka 4's name): print.key, "
             "print.value, print.headers, print.timestamp, print.partition, print.offset, "
             "key.separator, line.separator, headers.separator, null.literal")
    add("--formatter", metavar="CLASS",
        help="the record formatter: DefaultMessageFormatter (default), "
             "LoggingMessageFormatter, NoOpMessageFormatter (any package prefix, e.g. "
             "kafka.tools.DefaultMessageFormatter)")
    add("--isolation-level", choices=("read_committed", "read_uncommitted"),
        help="read_committed: only committed transactional records (none of an aborted "
             "transaction, nothing past the last stable offset); read_uncommitted: all "
             "(default; wins over isolation.level in --consumer-property)")
    add("--consumer-property", action="append", default=[], metavar="KEY=VALUE",
        help="consumer properties: group.id, auto.offset.reset (earliest, latest), "
             "isolation.level, client.id, request.timeout.ms, security.protocol, ssl.*, "
             "sasl.* (win over --command-config's; others are accepted and have no effect)")
    add("--format", "-f", metavar="FMT",
        help="kcat format string: %%t topic, %%p partition, %%o offset, %%k key, %%v value, "
             "%%h headers (k=v,...), %%T timestamp (ms), %%K/%%S key/value length, \\n \\t")
    return parser


READ_UNCOMMITTED, READ_COMMITTED = 0, 1
#: How often ``--include`` looks for new topics that match (a Kafka consumer subscribed to a
#: pattern finds them at its next metadata refresh).
_INCLUDE_RESCAN_S = 3.0


def consumer_options(ns: argparse.Namespace, settings: dict[str, str]) -> None:
    """Settle the options the consumer properties can also give, as ConsoleConsumerOptions
    does: ``group.id`` (must agree with ``--group``), ``auto.offset.reset`` (``--from-beginning``
    means earliest), ``isolation.level`` (``--isolation-level`` wins)."""
    if (ns.topic is None) == (ns.include is None):
        raise UsageError("Exactly one of --include/--topic is required.")
    if ns.include is not None:
        if ns.partition is not None:
            raise UsageError("Option --partition needs --topic, not --include")
        try:
            re.compile(ns.include)
        except re.error as exc:
            raise UsageError(f"Invalid --include {ns.include}: {exc}") from None
    ns.formatter_kind = formatter_name(ns.formatter or "DefaultMessageFormatter")
    property_group = settings.get("group.id")
    if ns.group is not None and property_group is not None and property_group != ns.group:
        raise UsageError("The group ids provided in different places (directly using "
                         "'--group', via '--consumer-property', or via '--consumer.config') "
                         f"do not match. Detected group ids: '{ns.group}', '{property_group}'")
    ns.group = ns.group or property_group or None
    reset = settings.get("auto.offset.reset", "").strip().lower()
    if reset and reset not in ("earliest", "latest", "none"):
        raise UsageError(f"Invalid value {reset} for configuration auto.offset.reset: "
                         "Invalid value for auto.offset.reset: earliest, latest, none")
    if ns.from_beginning and reset not in ("", "earliest"):
        raise UsageError(f"Can't simultaneously specify --from-beginning and "
                         f"'auto.offset.reset={reset}', as the former implies "
                         "'auto.offset.reset=earliest'")
    if reset == "earliest":
        ns.from_beginning = True
    ns.no_reset = reset == "none"
    level = ns.isolation_level or settings.get("isolation.level", "read_uncommitted")
    if level.strip().lower() not in ("read_committed", "read_uncommitted"):
        raise UsageError(f"Invalid value {level} for configuration isolation.level: String "
                         "must be one of: read_committed, read_uncommitted")
    ns.isolation = READ_COMMITTED if level.strip().lower() == "read_committed" \
        else READ_UNCOMMITTED


def start_offsets(conn: AdminConnection, ns: argparse.Namespace,
                  partitions: list[tuple[str, int]], group_conn: AdminConnection | None
                  ) -> dict[tuple[str, int], int]:
    isolation = getattr(ns, "isolation", READ_UNCOMMITTED)
    if ns.offset is not None and ns.offset not in ("earliest", "latest", "beginning", "end"):
        try:
            offset = int(ns.offset)
        except ValueError:
            raise UsageError(f"Invalid --offset {ns.offset}") from None
        if offset < 0:  # kcat: -N is N from the end
            ends = list_offsets(conn, partitions, LATEST, isolation)
            return {tp: max(0, ends[tp] + offset) for tp in partitions}
        return dict.fromkeys(partitions, offset)
    earliest = ns.from_beginning or ns.offset in ("earliest", "beginning")
    found: dict[tuple[str, int], int] = {}
    if group_conn is not None and ns.offset is None:
        found = {tp: o for tp, o in committed(group_conn, ns.group).items()
                 if tp in partitions}
        missing = [tp for tp in partitions if tp not in found]
        if missing and getattr(ns, "no_reset", False):
            raise ToolError("Undefined offset with no reset policy for partitions: ["
                            + ", ".join(f"{t}-{p}" for t, p in missing) + "]")
    chosen = list_offsets(conn, [tp for tp in partitions if tp not in found],
                          EARLIEST if earliest else LATEST, isolation)
    chosen.update(found)
    return chosen


def fetch(request: Request, positions: dict[tuple[str, int], int], wait_ms: int,
          isolation: int = READ_UNCOMMITTED
          ) -> list[tuple[str, int, list[rb.Record], int, int]]:
    """One Fetch of every partition: ``(topic, partition, records, end, next offset)``; the
    end is the high watermark (read_committed: the last stable offset), the next offset is
    past every batch returned, control batches (transaction markers) and aborted batches
    included, as a Kafka consumer's position moves past them."""
    if not positions:
        return []
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for (topic, partition), offset in sorted(positions.items()):
        by_topic.setdefault(topic, []).append((partition, offset))
    response = request.send(
        cluster_id=None, replica_id=-1, max_wait=ms(wait_ms), min_bytes=1,
        max_bytes=50 * 1024 * 1024, isolation_level=isolation, session_id=0,
        session_epoch=-1, rack_id="", forgotten_topics_data=(), topics=tuple(
            request.nested("FetchTopic", topic=topic, partitions=tuple(
                request.nested("FetchPartition", partition=p, current_leader_epoch=-1,
                               fetch_offset=o, last_fetched_epoch=-1, log_start_offset=-1,
                               partition_max_bytes=1024 * 1024) for p, o in parts))
            for topic, parts in by_topic.items()))
    check(response.error_code, None, "Fetch")
    found = []
    for topic in response.responses:
        for part in topic.partitions:
            check(part.error_code, None, f"{topic.topic}-{part.partition_index}")
            data = part.records or b""
            start = positions[(topic.topic, int(part.partition_index))]
            try:
                records, next_offset = _read_batches(
                    data, start, isolation,
                    [(int(a.producer_id), int(a.first_offset))
                     for a in (getattr(part, "aborted_transactions", None) or ())])
            except rb.RecordBatchError as exc:
                raise ToolError(f"{topic.topic}-{part.partition_index}: {exc}") from None
            end = int(part.high_watermark)
            stable = int(getattr(part, "last_stable_offset", -1))
            if isolation == READ_COMMITTED and stable >= 0:
                end = stable
            found.append((topic.topic, int(part.partition_index), records, end, next_offset))
    return found


#: A control record's key: version (int16) then type, ABORT 0 or COMMIT 1.
_ABORT_MARKER = 0


def _read_batches(data: bytes, start: int, isolation: int,
                  aborted: list[tuple[int, int]]) -> tuple[list[rb.Record], int]:
    """The records of a Fetch answer at or after ``start``, and the offset past its last
    batch. read_committed skips aborted transactions as Kafka's consumer does
    (``CompletedFetch``): a transactional batch of a producer whose aborted transaction
    began at or before the batch is skipped, until that producer's ABORT marker."""
    pending = sorted(aborted, key=lambda a: a[1])
    aborting: set[int] = set()
    records: list[rb.Record] = []
    next_offset = start
    for position, size in rb.iter_batches(data):
        batch = data[position:position + size]
        header = rb.decode_header(batch)
        next_offset = max(next_offset, header.next_offset)
        if isolation == READ_COMMITTED and header.has_producer_id:
            while pending and pending[0][1] <= header.last_offset:
                aborting.add(pending.pop(0)[0])
            if header.is_control:
                keys = [r.key for r in rb.decode_records(batch)]
                if keys and keys[0] is not None and len(keys[0]) >= 4 and \
                        int.from_bytes(keys[0][2:4], "big") == _ABORT_MARKER:
                    aborting.discard(header.producer_id)
                continue
            if header.is_transactional and header.producer_id in aborting:
                continue
        if header.is_control:
            continue
        records += [r for r in rb.decode_records(batch) if r.offset >= start]
    return records, next_offset


def topic_partitions(conn: AdminConnection, ns: argparse.Namespace) -> list[tuple[str, int]]:
    """The partitions to read: ``--topic`` (``--partition``), or every partition of the
    topics ``--include`` matches (whole names, internal topics left out)."""
    if ns.include is not None:
        pattern = re.compile(ns.include)
        answer = metadata(conn, None).topics
        return sorted((str(t.name), int(p.partition_index)) for t in answer
                      if t.error_code == ErrorCode.none and not t.is_internal
                      and pattern.fullmatch(str(t.name)) for p in t.partitions)
    (answer,) = metadata(conn, [ns.topic]).topics
    check(answer.error_code, None, ns.topic)
    indexes = sorted(int(p.partition_index) for p in answer.partitions)
    if ns.partition is not None:
        if ns.partition not in indexes:
            raise ToolError(f"Partition {ns.partition} of topic {ns.topic} does not exist")
        indexes = [ns.partition]
    return [(ns.topic, p) for p in indexes]


def consume_execute(ns: argparse.Namespace, stdout: BinaryIO, err: TextIO) -> None:
    if ns.offset is not None and ns.offset.lstrip("-").isdigit() and ns.partition is None \
            and not ns.offset.startswith("-"):
        raise UsageError("The partition is required when offset is specified.")
    if ns.max_messages is not None and ns.max_messages < 0:
        raise UsageError("--max-messages must be positive")
    settings = _settings(ns, ns.consumer_property, "consume")
    consumer_options(ns, settings)
    formatter = Formatter(ns.format, _properties(ns.property), ns.formatter_kind)
    with connect_with(ns.bootstrap_server, settings, "consume") as conn:
        partitions = topic_partitions(conn, ns)
        group_conn = coordinator(conn, ns.group) if ns.group else None
        try:
            consumed = _consume(conn, ns, partitions, group_conn, formatter, stdout, err)
        finally:
            if group_conn is not None and group_conn is not conn:
                group_conn.close()
    print(f"Processed a total of {consumed} messages", file=err)


def _consume(conn: AdminConnection, ns: argparse.Namespace, partitions: list[tuple[str, int]],
             group_conn: AdminConnection | None, formatter: Formatter, stdout: BinaryIO,
             err: TextIO) -> int:
    request = Request(conn, FETCH)
    progress = Progress(err, "consumed")
    member: GroupMember | None = None
    positions: dict[tuple[str, int], int] = {}
    try:
        joins = group_conn is not None and ns.partition is None and ns.offset is None
        if joins and group_conn is not None \
                and CONSUMER_GROUP_HEARTBEAT not in group_conn.broker_versions:
            # A broker before Kafka 4 (no KIP-848): read and commit without joining, as this
            # tool did before, rather than fail.
            print(f"WARN: the broker does not support ConsumerGroupHeartbeat (KIP-848): "
                  f"reading every partition without joining group {ns.group}", file=err)
            joins = False
        if joins and group_conn is not None:
            # subscribe(): a member of the group, reading what the broker assigns it.
            member = GroupMember(group_conn, conn, ns.group,
                                 topics=[ns.topic] if ns.topic is not None else None,
                                 regex=ns.include)
            reconcile(conn, ns, member, positions, member.join(), group_conn)
        else:  # assign(): the partitions asked for (--partition, --offset), or all
            positions.update(start_offsets(conn, ns, partitions, group_conn))
        consumed = _poll_loop(ns, request, positions, group_conn, formatter, stdout, progress,
                              member)
    except KeyboardInterrupt:  # Ctrl-C ends a console consumer normally, as Kafka's
        consumed = progress.count
    finally:
        if member is not None and group_conn is not None:
            close_member(member, group_conn, ns.group, positions)
    progress.done(None)
    return consumed


def close_member(member: GroupMember, group_conn: AdminConnection, group: str,
                  positions: dict[tuple[str, int], int]) -> None:
    """As KafkaConsumer.close(): commit what was consumed, then leave the group. A Ctrl-C
    in the middle of a request leaves its answer unread on the connection: then on a new
    one."""
    conn = group_conn if group_conn.in_sync else group_conn.reopen()
    member.coord = conn
    try:
        if member.epoch > 0:
            _member_commit(conn, group, member, positions)
    finally:
        try:
            member.leave()
        finally:
            if conn is not group_conn:
                conn.close()


def _member_commit(group_conn: AdminConnection, group: str, member: GroupMember,
                   positions: dict[tuple[str, int], int]) -> None:
    """A member's OffsetCommit; a stale or unknown member (the group moved on) rejoins at
    the next heartbeat instead of failing."""
    try:
        commit(group_conn, group, positions, member_id=member.member_id,
               member_epoch=member.epoch)
    except BrokerError as exc:
        if exc.code not in (ErrorCode.stale_member_epoch, ErrorCode.unknown_member_id,
                            ErrorCode.fenced_member_epoch):
            raise
        member.next_heartbeat = 0.0


def reconcile(conn: AdminConnection, ns: argparse.Namespace, member: GroupMember,
               positions: dict[tuple[str, int], int], assigned: frozenset[tuple[str, int]],
               group_conn: AdminConnection) -> None:
    """Move to a new assignment: commit and drop the partitions given up (dropped only,
    after a fencing), start the new ones at their committed offsets (else as
    auto.offset.reset says), then acknowledge."""
    revoked = {tp: o for tp, o in positions.items() if tp not in assigned}
    if revoked and member.epoch > 0:
        _member_commit(group_conn, ns.group, member, revoked)
    for tp in revoked:
        del positions[tp]
    added = sorted(tp for tp in assigned if tp not in positions)
    if added:
        positions.update(start_offsets(conn, ns, added, group_conn))
    member.reconciled(frozenset(assigned))


def _poll_loop(ns: argparse.Namespace, request: Request, positions: dict[tuple[str, int], int],
               group_conn: AdminConnection | None, formatter: Formatter, stdout: BinaryIO,
               progress: Progress, member: GroupMember | None = None) -> int:
    consumed = 0
    last_record = last_scan = time.monotonic()
    done = ns.max_messages == 0
    isolation = getattr(ns, "isolation", READ_UNCOMMITTED)
    while not done:
        if member is not None and group_conn is not None and member.due():
            assigned = member.heartbeat()
            if assigned is not None:
                reconcile(request.conn, ns, member, positions, assigned, group_conn)
        wait = 500 if ns.timeout_ms is None else max(0, min(500, ns.timeout_ms))
        if not positions:  # --include matched nothing yet: wait as a fetch would
            time.sleep(wait / 1000)
        at_end = True
        before = consumed
        for topic, partition, records, end, next_offset in fetch(
                request, positions, wait, isolation):
            for record in records:
                stdout.write(formatter(topic, partition, record))
                consumed += 1
                positions[(topic, partition)] = record.offset + 1
                if ns.max_messages is not None and consumed >= ns.max_messages:
                    done = True
                    break
            else:  # every record written: move past control and aborted batches too
                positions[(topic, partition)] = max(positions[(topic, partition)], next_offset)
            if positions[(topic, partition)] < end:
                at_end = False
            if done:
                break
        stdout.flush()
        progress.show(consumed)
        if group_conn is not None and consumed > before:
            if member is not None:
                _member_commit(group_conn, ns.group, member, positions)
            else:
                commit(group_conn, ns.group, positions)
        now = time.monotonic()
        if consumed > before:
            last_record = now
        if done or ns.exit_at_end and at_end:
            break
        if ns.timeout_ms is not None and (now - last_record) * 1000 >= ns.timeout_ms:
            break
        if member is None and getattr(ns, "include", None) is not None \
                and now - last_scan >= _INCLUDE_RESCAN_S:
            last_scan = now
            new = [tp for tp in topic_partitions(request.conn, ns) if tp not in positions]
            if new:  # a topic created since: read from where auto.offset.reset says
                positions.update(start_offsets(request.conn, ns, new, group_conn))
    return consumed


class Progress:
    """A progress line on stderr when it is a terminal; nothing when piped."""

    def __init__(self, err: TextIO, verb: str) -> None:
        self.err = err
        self.verb = verb
        self.tty = bool(getattr(err, "isatty", lambda: False)())
        self.last_shown = 0.0
        self.count = 0

    def show(self, count: int) -> None:
        self.count = count
        now = time.monotonic()
        if self.tty and count and now - self.last_shown >= 0.2:
            self.last_shown = now
            print(f"\r{count} records {self.verb}", end="", file=self.err, flush=True)

    def done(self, count: int | None) -> None:
        if self.tty and self.last_shown:
            print("\r\033[K", end="", file=self.err, flush=True)


def _binary_out(out: Any) -> BinaryIO:
    if hasattr(out, "buffer"):
        return out.buffer
    return _TextAdapter(out)  # type: ignore[return-value]


class _TextAdapter:
    """Bytes written to a text stream (tests pass StringIO), decoded as UTF-8."""

    def __init__(self, text: TextIO) -> None:
        self.text = text

    def write(self, data: bytes) -> int:
        return self.text.write(data.decode("utf-8", errors="replace"))

    def flush(self) -> None:
        self.text.flush()


def _binary_in(stream: Any) -> BinaryIO:
    if hasattr(stream, "buffer"):
        return stream.buffer
    return iter(line.encode() for line in stream)  # type: ignore[return-value]


def produce_main(argv: Sequence[str] | None = None, *, stdin: Any = None,
                 out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run ``trio_broker produce``; 0 on success, 1 on a failure, 2 on a bad command line."""
    source = _binary_in(stdin if stdin is not None else sys.stdin)
    errors = err if err is not None else sys.stderr
    return run(produce_parser(), argv, lambda ns: produce_execute(ns, source, errors), err)


def consume_main(argv: Sequence[str] | None = None, *, out: TextIO | None = None,
                 err: TextIO | None = None) -> int:
    """Run ``trio_broker consume``; 0 on success, 1 on a failure, 2 on a bad command line."""
    sink = _binary_out(out if out is not None else sys.stdout)
    errors = err if err is not None else sys.stderr
    return run(consume_parser(), argv, lambda ns: consume_execute(ns, sink, errors), err)
