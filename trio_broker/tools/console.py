"""``trio_broker produce`` / ``trio_broker consume``: kafka-console-producer.sh and
kafka-console-consumer.sh (with kcat's ``-f`` format string), reading stdin and writing stdout.

They speak Produce / Fetch / ListOffsets / OffsetFetch / OffsetCommit through the tools'
blocking :class:`~trio_broker.tools.admin_client.AdminConnection` (one connection to the
bootstrap broker; a single-node cluster, or a cluster whose bootstrap broker leads the
partitions used). Records are encoded and decoded with :mod:`trio_broker.protocol.records`.
``--group`` reads from and commits to the group's offsets without joining the group (as
``kcat -C -G`` does not, and AdminClient's offset calls do): all partitions are read.
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
    Parser,
    Request,
    ToolError,
    UsageError,
    add_connection_options,
    check,
    connect,
    ms,
    run,
)
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


class Producer:
    """Batches records per partition and sends them with acks=all (or ``--acks``)."""

    def __init__(self, conn: AdminConnection, topic: str, acks: int,
                 partition: int | None) -> None:
        self.conn = conn
        self.topic = topic
        self.acks = acks
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
            r.nested("PartitionProduceData", index=p, records=rb.build_batch(batch))
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
    add("--acks", "--request-required-acks", type=int, default=-1, choices=(-1, 1),
        help="acks: -1 (all, default) or 1")
    return parser


def produce_execute(ns: argparse.Namespace, stdin: BinaryIO, err: TextIO) -> None:
    props = _properties(ns.property)
    if ns.kcat_key_separator is not None:
        props.update({"parse.key": "true", "key.separator": ns.kcat_key_separator})
    reader = LineReader(props)
    with connect(ns, "produce") as conn:
        producer = Producer(conn, ns.topic, ns.acks, ns.partition)
        progress = Progress(err, "produced")
        for number, line in enumerate(_lines(stdin), 1):
            producer.add(*reader.parse(line, number))
            if number % _BATCH_RECORDS == 0:
                progress.show(number)
        producer.flush()
        progress.done(producer.sent)


# ----------------------------------------------------------------------------- consume
_FORMAT_TOKEN = re.compile(rb"%[tpokvhTKS%]|\\[ntr\\]")


class Formatter:
    """kcat's ``-f`` format, or kafka-console-consumer's DefaultMessageFormatter."""

    def __init__(self, fmt: str | None, props: dict[str, str]) -> None:
        self.fmt = fmt.encode() if fmt is not None else None
        self.props = props

    def __call__(self, topic: str, partition: int, record: rb.Record) -> bytes:
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
    add("--topic", "-t", required=True, help="the topic to consume")
    add("--partition", "-p", type=int, help="only this partition (default: all)")
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true",
                       help="start at the earliest offset (when there is no committed offset)")
    start.add_argument("--offset", "-o", metavar="N|earliest|latest",
                       help="start at this offset (needs --partition for a number)")
    add("--group", "-G", help="start at the group's committed offsets and commit what was "
        "written (the group is not joined: every partition is read)")
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
    add("--format", "-f", metavar="FMT",
        help="kcat format string: %%t topic, %%p partition, %%o offset, %%k key, %%v value, "
             "%%h headers (k=v,...), %%T timestamp (ms), %%K/%%S key/value length, \\n \\t")
    return parser


def start_offsets(conn: AdminConnection, ns: argparse.Namespace,
                  partitions: list[tuple[str, int]], group_conn: AdminConnection | None
                  ) -> dict[tuple[str, int], int]:
    if ns.offset is not None and ns.offset not in ("earliest", "latest", "beginning", "end"):
        try:
            offset = int(ns.offset)
        except ValueError:
            raise UsageError(f"Invalid --offset {ns.offset}") from None
        if offset < 0:  # kcat: -N is N from the end
            ends = list_offsets(conn, partitions, LATEST)
            return {tp: max(0, ends[tp] + offset) for tp in partitions}
        return dict.fromkeys(partitions, offset)
    earliest = ns.from_beginning or ns.offset in ("earliest", "beginning")
    chosen = list_offsets(conn, partitions, EARLIEST if earliest else LATEST)
    if group_conn is not None and ns.offset is None:
        chosen.update({tp: o for tp, o in committed(group_conn, ns.group).items()
                       if tp in chosen})
    return chosen


def fetch(request: Request, positions: dict[tuple[str, int], int], wait_ms: int
          ) -> list[tuple[str, int, list[rb.Record], int, int]]:
    """One Fetch of every partition: ``(topic, partition, records, high watermark, next
    offset)``; the next offset is past every batch returned, control batches (transaction
    markers) included, as a Kafka consumer's position moves past them."""
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for (topic, partition), offset in sorted(positions.items()):
        by_topic.setdefault(topic, []).append((partition, offset))
    response = request.send(
        cluster_id=None, replica_id=-1, max_wait=ms(wait_ms), min_bytes=1,
        max_bytes=50 * 1024 * 1024, isolation_level=0, session_id=0, session_epoch=-1,
        rack_id="", forgotten_topics_data=(), topics=tuple(
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
            records: list[rb.Record] = []
            next_offset = start
            for position, size in rb.iter_batches(data):
                batch = data[position:position + size]
                header = rb.decode_header(batch)
                next_offset = max(next_offset, header.next_offset)
                if header.is_control:
                    continue
                try:
                    records += [r for r in rb.decode_records(batch) if r.offset >= start]
                except rb.RecordBatchError as exc:
                    raise ToolError(f"{topic.topic}-{part.partition_index}: {exc}") from None
            found.append((topic.topic, int(part.partition_index), records,
                          int(part.high_watermark), next_offset))
    return found


def consume_execute(ns: argparse.Namespace, stdout: BinaryIO, err: TextIO) -> None:
    if ns.offset is not None and ns.offset.lstrip("-").isdigit() and ns.partition is None \
            and not ns.offset.startswith("-"):
        raise UsageError("The partition is required when offset is specified.")
    if ns.max_messages is not None and ns.max_messages < 0:
        raise UsageError("--max-messages must be positive")
    formatter = Formatter(ns.format, _properties(ns.property))
    with connect(ns, "consume") as conn:
        (answer,) = metadata(conn, [ns.topic]).topics
        check(answer.error_code, None, ns.topic)
        indexes = sorted(int(p.partition_index) for p in answer.partitions)
        if ns.partition is not None:
            if ns.partition not in indexes:
                raise ToolError(f"Partition {ns.partition} of topic {ns.topic} does not exist")
            indexes = [ns.partition]
        partitions = [(ns.topic, p) for p in indexes]
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
    positions = start_offsets(conn, ns, partitions, group_conn)
    request = Request(conn, FETCH)
    progress = Progress(err, "consumed")
    try:
        consumed = _poll_loop(ns, request, positions, group_conn, formatter, stdout, progress)
    except KeyboardInterrupt:  # Ctrl-C ends a console consumer normally, as Kafka's
        consumed = progress.count
    progress.done(None)
    return consumed


def _poll_loop(ns: argparse.Namespace, request: Request, positions: dict[tuple[str, int], int],
               group_conn: AdminConnection | None, formatter: Formatter, stdout: BinaryIO,
               progress: Progress) -> int:
    consumed = 0
    last_record = time.monotonic()
    done = ns.max_messages == 0
    while not done:
        wait = 500 if ns.timeout_ms is None else max(0, min(500, ns.timeout_ms))
        at_end = True
        before = consumed
        for topic, partition, records, high_watermark, next_offset in fetch(
                request, positions, wait):
            for record in records:
                stdout.write(formatter(topic, partition, record))
                consumed += 1
                positions[(topic, partition)] = record.offset + 1
                if ns.max_messages is not None and consumed >= ns.max_messages:
                    done = True
                    break
            else:  # every record written: move past control batches too
                positions[(topic, partition)] = max(positions[(topic, partition)], next_offset)
            if positions[(topic, partition)] < high_watermark:
                at_end = False
            if done:
                break
        stdout.flush()
        progress.show(consumed)
        if group_conn is not None and consumed > before:
            commit(group_conn, ns.group, positions)
        now = time.monotonic()
        if consumed > before:
            last_record = now
        if done or ns.exit_at_end and at_end:
            break
        if ns.timeout_ms is not None and (now - last_record) * 1000 >= ns.timeout_ms:
            break
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
