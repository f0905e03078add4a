"""``trio_broker producer-perf-test`` (kafka-producer-perf-test.sh, Kafka's
ProducerPerformance) and ``trio_broker consumer-perf-test`` (kafka-consumer-perf-test.sh,
ConsumerPerformance): their options and their progress and summary lines.

The producer batches records per partition (``batch.size``, ``linger.ms``, sticky partitioning
of keyless records) and keeps up to ``max.in.flight.requests.per.connection`` Produce requests
in flight on one connection, reading acknowledgements as they arrive, so that it measures the
broker rather than a request-response round trip per batch. A record's latency is from the
moment it was handed to the producer to the acknowledgement of its batch, as Kafka's callback
measures it.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import random
import select
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from kio.schema.errors import ErrorCode

from ..protocol import records as rb
from ..protocol.client_codec import request_body
from .admin_client import AdminConnection
from .common import (
    Parser,
    Request,
    ToolError,
    UsageError,
    client_settings,
    connect_with,
    java_error,
    ms,
    run,
)
from .console import (
    CODECS,
    client_properties,
    close_member,
    producer_metadata,
    reconcile,
    start_offsets,
    topic_partitions,
)
from .group_member import CONSUMER_GROUP_HEARTBEAT, GroupMember
from .groups import commit, coordinator

PRODUCE, FETCH = 0, 1

PRODUCER_EXAMPLES = """\
  trio_broker producer-perf-test --topic perf --num-records 100000 --record-size 100 \\
      --throughput -1 --producer-props bootstrap.servers=localhost:9092 acks=1
  trio_broker producer-perf-test --bootstrap-server localhost:9092 --topic perf \\
      --num-records 50000 --payload-monotonic --throughput 10000
"""

CONSUMER_EXAMPLES = """\
  trio_broker consumer-perf-test --bootstrap-server localhost:9092 --topic perf \\
      --messages 100000
  trio_broker consumer-perf-test --bootstrap-server localhost:9092 --include 'perf.*' \\
      --messages 100000 --show-detailed-stats --reporting-interval 1000
"""


# ------------------------------------------------------------------------ producer side
class ProducerStats:
    """ProducerPerformance.Stats: every completed record counted, one latency in
    ``sampling`` kept for the percentiles, a progress line per reporting interval."""

    def __init__(self, num_records: int, reporting_interval_ms: int, out: TextIO) -> None:
        self.start = self.window_start = time.time() * 1000
        self.sampling = max(1, num_records // min(num_records, 500_000))
        self.latencies: list[int] = []
        self.iteration = 0
        self.count = self.bytes = self.total_latency = 0
        self.max_latency = 0
        self.window_count = self.window_bytes = self.window_total = self.window_max = 0
        self.interval = reporting_interval_ms
        self.out = out

    def record_batch(self, latencies: Sequence[int], size: int, now_ms: float) -> None:
        """The records of one acknowledged batch: their latencies (ms) and total size."""
        n = len(latencies)
        total, biggest = sum(latencies), max(latencies)
        self.count += n
        self.bytes += size
        self.total_latency += total
        self.max_latency = max(self.max_latency, biggest)
        self.window_count += n
        self.window_bytes += size
        self.window_total += total
        self.window_max = max(self.window_max, biggest)
        first = (-self.iteration) % self.sampling
        self.latencies += latencies[first::self.sampling]
        self.iteration += n
        if now_ms - self.window_start >= self.interval:
            self.print_window(now_ms)
            self.window_start = now_ms
            self.window_count = self.window_bytes = self.window_total = self.window_max = 0

    def print_window(self, now_ms: float) -> None:
        elapsed = max(now_ms - self.window_start, 1e-9)
        print(f"{self.window_count} records sent, "
              f"{1000.0 * self.window_count / elapsed:.1f} records/sec "
              f"({1000.0 * self.window_bytes / elapsed / (1024 * 1024):.2f} MB/sec), "
              f"{self.window_total / max(self.window_count, 1):.1f} ms avg latency, "
              f"{float(self.window_max):.1f} ms max latency.", file=self.out, flush=True)

    def summary(self) -> dict[str, Any]:
        elapsed = max(time.time() * 1000 - self.start, 1e-9)
        ordered = sorted(self.latencies)

        def percentile(share: float) -> int:
            return ordered[int(share * len(ordered))] if ordered else 0

        return {"records": self.count, "records_per_sec": 1000.0 * self.count / elapsed,
                "mb_per_sec": 1000.0 * self.bytes / elapsed / (1024 * 1024),
                "avg_latency_ms": self.total_latency / max(self.count, 1),
                "max_latency_ms": float(self.max_latency), "p50_ms": percentile(0.5),
                "p95_ms": percentile(0.95), "p99_ms": percentile(0.99),
                "p999_ms": percentile(0.999)}

    def print_total(self) -> None:
        s = self.summary()
        print(f"{s['records']} records sent, {s['records_per_sec']:f} records/sec "
              f"({s['mb_per_sec']:.2f} MB/sec), {s['avg_latency_ms']:.2f} ms avg latency, "
              f"{s['max_latency_ms']:.2f} ms max latency, {s['p50_ms']} ms 50th, "
              f"{s['p95_ms']} ms 95th, {s['p99_ms']} ms 99th, {s['p999_ms']} ms 99.9th.",
              file=self.out, flush=True)


class PipelinedProducer:
    """Batches per partition, several Produce requests in flight, acknowledgements read as
    they arrive (a non-blocking look after every request sent)."""

    def __init__(self, conn: AdminConnection, topic: str, partitions: int, *, acks: int,
                 codec: int, batch_size: int, linger_ms: int, max_in_flight: int,
                 max_request_size: int, stats: ProducerStats) -> None:
        self.conn = conn
        self.request = Request(conn, PRODUCE)
        self.topic = topic
        self.partitions = partitions
        self.acks, self.codec = acks, codec
        self.batch_size, self.linger_s = batch_size, linger_ms / 1000
        self.max_in_flight, self.max_request_size = max_in_flight, max_request_size
        self.stats = stats
        self.partition = random.randrange(partitions)
        self.values: list[bytes] = []
        self.times: list[int] = []
        self.batch_bytes = 0
        self.batch_started = 0.0
        #: Full batches waiting for a request: ``(partition, values, send times in ms)``.
        self.ready: list[tuple[int, list[bytes], list[int]]] = []
        self.in_flight: collections.deque[tuple[int, list[tuple[int, list[int], int]]]] = (
            collections.deque())
        self.errors: dict[str, int] = {}

    def send(self, value: bytes) -> None:
        now = time.time()
        if not self.values:
            self.batch_started = now
        self.values.append(value)
        self.times.append(int(now * 1000))
        self.batch_bytes += len(value) + 8
        if self.batch_bytes >= self.batch_size or now - self.batch_started >= self.linger_s:
            self._close_batch()
            self.drain()

    def _close_batch(self) -> None:
        if not self.values:
            return
        self.ready.append((self.partition, self.values, self.times))
        self.values, self.times, self.batch_bytes = [], [], 0
        # The sticky partitioner: keyless records go to one partition until its batch closes.
        self.partition = (self.partition + 1) % self.partitions

    def drain(self, *, block: bool = False) -> None:
        """Send what is ready while fewer than max.in.flight requests are out; read the
        acknowledgements that have arrived (waiting for one when the window is full)."""
        while self.ready:
            while len(self.in_flight) >= self.max_in_flight:
                self._receive_one()
            self._send_request()
            self._receive_available(0.0)
        if block:
            self._receive_available(0.0)

    def _send_request(self) -> None:
        r = self.request
        taken: list[tuple[int, list[bytes], list[int]]] = []
        size = 0
        while self.ready and (not taken or size + self.batch_size <= self.max_request_size):
            item = self.ready.pop(0)
            taken.append(item)
            size += sum(len(v) for v in item[1])
        by_partition: dict[int, list[tuple[list[bytes], list[int]]]] = {}
        for partition, values, times in taken:
            by_partition.setdefault(partition, []).append((values, times))
        data = []
        accounting: list[tuple[int, list[int], int]] = []
        for partition, parts in sorted(by_partition.items()):
            values = [v for vs, _ in parts for v in vs]
            times = [t for _, ts in parts for t in ts]
            batch = rb.build_batch([(None, v, (), t) for v, t in zip(values, times, strict=True)],
                                   attributes=self.codec)
            data.append(r.nested("PartitionProduceData", index=partition, records=batch))
            accounting.append((partition, times, sum(len(v) for v in values)))
        body = request_body(PRODUCE, r.version, transactional_id=None, acks=self.acks,
                            timeout=ms(30000), topic_data=(r.nested(
                                "TopicProduceData", name=self.topic,
                                partition_data=tuple(data)),))
        correlation = self.conn.send_nowait(PRODUCE, r.version, body,
                                            expect_response=self.acks != 0)
        if self.acks == 0:  # no acknowledgement comes: done once written (Kafka alike)
            self._complete(accounting, {}, time.time() * 1000)
            return
        self.in_flight.append((correlation, accounting))

    def _receive_available(self, timeout: float) -> None:
        sock = self.conn._sock
        while self.in_flight:
            pending = getattr(sock, "pending", lambda: 0)()  # TLS bytes already decrypted
            if not pending and not select.select([sock], [], [], timeout)[0]:
                return
            self._receive_one()
            timeout = 0.0

    def _receive_one(self) -> None:
        correlation, accounting = self.in_flight.popleft()
        got, response = self.conn.receive()
        if got != correlation:
            raise ToolError(f"Produce response {got} out of order (expected {correlation})")
        errors: dict[int, int] = {}
        for topic in response.responses:
            for p in topic.partition_responses:
                if p.error_code != ErrorCode.none:
                    errors[int(p.index)] = int(p.error_code)
        self._complete(accounting, errors, time.time() * 1000)

    def _complete(self, accounting: list[tuple[int, list[int], int]], errors: dict[int, int],
                  now_ms: float) -> None:
        now = int(now_ms)
        for partition, times, size in accounting:
            if partition in errors:
                name = java_error(errors[partition])
                self.errors[name] = self.errors.get(name, 0) + len(times)
                continue
            self.stats.record_batch([now - t for t in times], size, now_ms)

    def flush(self) -> None:
        self._close_batch()
        self.drain()
        while self.in_flight:
            self._receive_one()

    def wait(self, seconds: float) -> None:
        """Sleep (the throughput throttle), sending lingering batches and reading
        acknowledgements meanwhile, so that latencies are not stretched by the sleep."""
        deadline = time.time() + seconds
        while (left := deadline - time.time()) > 0:
            if self.values and time.time() - self.batch_started >= self.linger_s:
                self._close_batch()
                self.drain()
            if self.in_flight:
                self._receive_available(min(left, self.linger_s or left))
            else:
                time.sleep(min(left, self.linger_s or left))


def producer_perf_parser() -> argparse.ArgumentParser:
    parser = Parser("trio_broker producer-perf-test",
                    "This tool is used to verify the producer performance "
                    "(kafka-producer-perf-test.sh).", PRODUCER_EXAMPLES)
    add = parser.add_argument
    add("--bootstrap-server", metavar="HOST:PORT",
        help="the broker(s) to connect to (or bootstrap.servers in --producer-props or "
             "--producer.config)")
    add("--topic", required=True, help="produce messages to this topic")
    add("--num-records", type=int, required=True, metavar="NUM-RECORDS",
        help="number of messages to produce")
    payload = parser.add_mutually_exclusive_group(required=True)
    payload.add_argument("--record-size", type=int, metavar="RECORD-SIZE",
                         help="message size in bytes (random upper-case letters)")
    payload.add_argument("--payload-file", metavar="PAYLOAD-FILE",
                         help="a file of payloads, one picked at random per message")
    payload.add_argument("--payload-monotonic", action="store_true",
                         help="payload is the message's number as text (1, 2, 3, ...)")
    add("--payload-delimiter", default="\\n", metavar="PAYLOAD-DELIMITER",
        help="the delimiter of the payloads in --payload-file (default \\n)")
    add("--throughput", type=float, required=True, metavar="THROUGHPUT",
        help="throttle to about this many messages/sec; -1: no throttle")
    add("--producer-props", nargs="+", default=[], metavar="PROP-NAME=PROP-VALUE",
        help="producer properties: bootstrap.servers, acks (default all), compression.type, "
             "batch.size (16384), linger.ms (5), max.in.flight.requests.per.connection (5), "
             "max.request.size, client.id, security.protocol, ssl.*, sasl.*")
    add("--producer.config", "--command-config", dest="producer_config", metavar="CONFIG-FILE",
        help="producer config properties file")
    add("--reporting-interval", type=int, default=5000, metavar="INTERVAL-MS",
        help="interval of the progress lines in ms (default 5000)")
    add("--print-metrics", action="store_true", help="print the producer's totals at the end")
    add("--transactional-id", help="not supported: the test is not transactional here")
    add("--transaction-duration-ms", type=int, help="not supported (see --transactional-id)")
    return parser


def _int_setting(settings: dict[str, str], key: str, default: int) -> int:
    text = settings.get(key, str(default)).strip()
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"Invalid value {text} for configuration {key}: Not a number of type "
                         "INT") from None


def payloads(ns: argparse.Namespace) -> Any:
    """A function ``i -> payload`` (ProducerPerformance: one random payload reused, a random
    one of the file's, or the number)."""
    if ns.record_size is not None:
        if ns.record_size <= 0:
            raise UsageError("--record-size must be positive")
        fixed = bytes(random.randrange(26) + 65 for _ in range(ns.record_size))
        return lambda i: fixed
    if ns.payload_monotonic:
        return lambda i: str(i).encode()
    delimiter = ns.payload_delimiter.encode().decode("unicode_escape")
    try:
        text = Path(ns.payload_file).read_text(encoding="utf-8")
    except OSError as exc:
        raise ToolError(f"{ns.payload_file}: {exc.strerror}") from None
    choices = [p.encode() for p in text.split(delimiter) if p]
    if not choices:
        raise ToolError(f"File {ns.payload_file} contains no payload")
    return lambda i: random.choice(choices)


def producer_perf_execute(ns: argparse.Namespace, out: TextIO, err: TextIO) -> None:
    if ns.transactional_id is not None or ns.transaction_duration_ms is not None:
        raise UsageError("--transactional-id and --transaction-duration-ms are not supported "
                         "by this producer-perf-test")
    if ns.num_records <= 0:
        raise UsageError("--num-records must be positive")
    settings = client_settings(ns.producer_config, "producer-perf-test")
    settings.update(client_properties(ns.producer_props))
    bootstrap = ns.bootstrap_server or settings.get("bootstrap.servers")
    if not bootstrap:
        raise UsageError("Either --bootstrap-server or bootstrap.servers in --producer-props "
                         "or --producer.config must be specified")
    acks_text = settings.get("acks", "all").strip().lower()
    acks = {"all": -1, "-1": -1, "1": 1, "0": 0}.get(acks_text)
    if acks is None:
        raise UsageError(f"Invalid value {acks_text} for configuration acks: String must be "
                         "one of: all, -1, 0, 1")
    codec_name = settings.get("compression.type", "none").strip().lower()
    if codec_name not in CODECS:
        raise UsageError(f"Invalid value {codec_name} for configuration compression.type")
    payload = payloads(ns)
    settings.setdefault("client.id", "perf-producer-client")
    stats = ProducerStats(ns.num_records, ns.reporting_interval, out)
    with connect_with(bootstrap, settings, "producer-perf-test") as conn:
        partitions = len(producer_metadata(conn, ns.topic).partitions)
        producer = PipelinedProducer(
            conn, ns.topic, partitions, acks=acks, codec=CODECS[codec_name],
            batch_size=max(1, _int_setting(settings, "batch.size", 16384)),
            linger_ms=_int_setting(settings, "linger.ms", 5),
            max_in_flight=max(1, _int_setting(settings,
                                              "max.in.flight.requests.per.connection", 5)),
            max_request_size=_int_setting(settings, "max.request.size", 1048576), stats=stats)
        stats.start = stats.window_start = time.time() * 1000
        started = time.time()
        for i in range(ns.num_records):
            producer.send(payload(i))
            if ns.throughput > 0:  # ThroughputThrottler: ahead of the target rate: wait
                ahead = (i + 1) / ns.throughput - (time.time() - started)
                if ahead > 0.002:
                    producer.wait(ahead)
        producer.flush()
    stats.print_total()
    if producer.errors:
        for name, count in sorted(producer.errors.items()):
            print(f"{count} records failed: {name}", file=err)
        raise ToolError(f"{sum(producer.errors.values())} of {ns.num_records} records were "
                        "not acknowledged")
    if ns.print_metrics:
        s = stats.summary()
        for key, value in s.items():
            print(f"producer-metrics:{key.replace('_', '-')}:{{client-id=perf-producer-client}}"
                  f" : {value}", file=out)


def producer_perf_main(argv: Sequence[str] | None = None, *, out: TextIO | None = None,
                       err: TextIO | None = None) -> int:
    """Run ``trio_broker producer-perf-test``; 0 on success, 1 on a failure (records not
    acknowledged), 2 on a bad command line."""
    output = out if out is not None else sys.stdout
    errors = err if err is not None else sys.stderr
    return run(producer_perf_parser(), argv,
               lambda ns: producer_perf_execute(ns, output, errors), err)


# ------------------------------------------------------------------------ consumer side
def java_date_format(pattern: str) -> str:
    """A SimpleDateFormat pattern (the usual letters) as a strftime format; ``SSS`` is
    replaced after formatting."""
    table = [("yyyy", "%Y"), ("yy", "%y"), ("MM", "%m"), ("dd", "%d"), ("HH", "%H"),
             ("hh", "%I"), ("mm", "%M"), ("ss", "%S"), ("a", "%p"), ("EEE", "%a"),
             ("Z", "%z")]
    out, i = "", 0
    while i < len(pattern):
        for java, python in table:
            if pattern.startswith(java, i):
                out += python
                i += len(java)
                break
        else:
            if pattern.startswith("SSS", i):
                out += "<<SSS>>"
                i += 3
            else:
                out += pattern[i].replace("%", "%%")
                i += 1
    return out


def format_ms(fmt: str, at_ms: float) -> str:
    moment = datetime.datetime.fromtimestamp(at_ms / 1000).astimezone()
    return moment.strftime(fmt).replace("<<SSS>>", f"{int(at_ms) % 1000:03d}")


def consumer_perf_parser() -> argparse.ArgumentParser:
    parser = Parser("trio_broker consumer-perf-test",
                    "This tool is used to verify the consumer performance "
                    "(kafka-consumer-perf-test.sh).", CONSUMER_EXAMPLES)
    add = parser.add_argument
    add("--bootstrap-server", required=True, metavar="HOST:PORT",
        help="REQUIRED: the server(s) to connect to")
    add("--topic", help="the topic to consume from")
    add("--include", metavar="REGEX", help="consume the topics matching this regex (whole "
        "names), instead of --topic")
    add("--group", default=f"perf-consumer-{random.randrange(100_000)}", metavar="GID",
        help="the group id to consume on: its committed offsets are the start, and the "
             "position is committed at the end")
    add("--messages", type=int, required=True, metavar="COUNT",
        help="REQUIRED: the number of messages to consume")
    add("--fetch-size", type=int, default=1024 * 1024, metavar="SIZE",
        help="the amount of data to fetch in a single request per partition (1 MiB)")
    add("--from-latest", action="store_true",
        help="without a committed offset, start at the latest message instead of the "
             "earliest")
    add("--socket-buffer-size", type=int, default=2 * 1024 * 1024, metavar="SIZE",
        help="the size of the TCP receive buffer")
    add("--consumer.config", "--command-config", dest="consumer_config", metavar="FILE",
        help="consumer config properties file")
    add("--print-metrics", action="store_true", help="print the consumer's totals at the end")
    add("--show-detailed-stats", action="store_true",
        help="report stats for each reporting interval")
    add("--timeout", type=int, default=10000, metavar="MS",
        help="the maximum allowed time in milliseconds between returned records (10000)")
    add("--reporting-interval", type=int, default=5000, metavar="MS",
        help="interval in milliseconds of the detailed stats (5000)")
    add("--date-format", default="yyyy-MM-dd HH:mm:ss:SSS", metavar="FORMAT",
        help="the date format (java.text.SimpleDateFormat letters)")
    add("--hide-header", action="store_true", help="skip the header line")
    return parser


def consumer_perf_execute(ns: argparse.Namespace, out: TextIO) -> None:
    if (ns.topic is None) == (ns.include is None):
        raise UsageError("Exactly one of the following arguments is required: topic, include")
    if ns.messages <= 0:
        raise UsageError("--messages must be positive")
    date_format = java_date_format(ns.date_format)
    detailed = ns.show_detailed_stats
    if not ns.hide_header:
        extra = ", rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
        print(("time, threadId" if detailed else "start.time, end.time")
              + f", data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec{extra}",
              file=out, flush=True)
    settings = client_settings(ns.consumer_config, "consumer-perf-test")
    settings.setdefault("client.id", "perf-consumer-client")
    start_ms = time.time() * 1000
    with connect_with(ns.bootstrap_server, settings, "consumer-perf-test") as conn:
        import socket as socket_module

        conn._sock.setsockopt(socket_module.SOL_SOCKET, socket_module.SO_RCVBUF,
                              ns.socket_buffer_size)
        scope = argparse.Namespace(topic=ns.topic, include=ns.include, partition=None,
                                   offset=None, from_beginning=not ns.from_latest,
                                   group=ns.group)
        group_conn = coordinator(conn, ns.group)
        member: GroupMember | None = None
        positions: dict[tuple[str, int], int] = {}
        try:
            if CONSUMER_GROUP_HEARTBEAT in group_conn.broker_versions:
                # subscribe(): join the group; the broker assigns the partitions.
                member = GroupMember(group_conn, conn, ns.group,
                                     topics=[ns.topic] if ns.topic is not None else None,
                                     regex=ns.include)
                reconcile(conn, scope, member, positions, member.join(), group_conn)
            else:  # a broker without KIP-848: every partition, simple commits
                partitions = topic_partitions(conn, scope)
                positions.update(start_offsets(conn, scope, partitions, group_conn))
            # ConsumerPerfRebListener: the time until the partitions are assigned.
            join_ms = int(time.time() * 1000 - start_ms)
            counts = _consume(conn, ns, positions, out, date_format, join_ms,
                              member, group_conn, scope)
            if member is None and counts[0]:
                commit(group_conn, ns.group, positions)
        finally:
            try:
                if member is not None:
                    close_member(member, group_conn, ns.group, positions)
            finally:
                if group_conn is not conn:
                    group_conn.close()
    end_ms = time.time() * 1000
    messages, read_bytes = counts
    if messages < ns.messages:
        print(f"WARNING: Exiting before consuming the expected number of messages: timeout "
              f"({ns.timeout} ms) exceeded. You can use the --timeout option to increase the "
              "timeout.", file=out)
    if not detailed:
        elapsed = max((end_ms - start_ms) / 1000, 1e-9)
        fetch_ms = int(end_ms - start_ms) - join_ms
        mb = read_bytes / (1024 * 1024)
        fetch_s = max(fetch_ms / 1000, 1e-9)
        print(f"{format_ms(date_format, start_ms)}, {format_ms(date_format, end_ms)}, "
              f"{mb:.4f}, {mb / elapsed:.4f}, {messages}, {messages / elapsed:.4f}, "
              f"{join_ms}, {fetch_ms}, {mb / fetch_s:.4f}, {messages / fetch_s:.4f}", file=out)
    if ns.print_metrics:
        print(f"consumer-fetch-manager-metrics:records-consumed-total:"
              f"{{client-id=perf-consumer-client}} : {float(messages)}", file=out)
        print(f"consumer-fetch-manager-metrics:bytes-consumed-total:"
              f"{{client-id=perf-consumer-client}} : {float(read_bytes)}", file=out)


def _consume(conn: AdminConnection, ns: argparse.Namespace,
             positions: dict[tuple[str, int], int], out: TextIO, date_format: str,
             join_ms: int, member: GroupMember | None = None,
             group_conn: AdminConnection | None = None,
             scope: argparse.Namespace | None = None) -> tuple[int, int]:
    """Fetch until ``--messages`` records or ``--timeout`` without one; (messages, bytes).
    A group member heartbeats between fetches and follows its assignment."""
    request = Request(conn, FETCH)
    messages = read_bytes = last_messages = last_bytes = 0
    now = last_report = last_consumed = time.time() * 1000
    single_round_join = join_ms
    while messages < ns.messages and now - last_consumed <= ns.timeout:
        if member is not None and group_conn is not None and scope is not None \
                and member.due():
            assigned = member.heartbeat()
            if assigned is not None:
                reconcile(conn, scope, member, positions, assigned, group_conn)
        if not positions:  # nothing assigned (yet): wait as a poll would
            time.sleep(0.1)
            now = time.time() * 1000
            continue
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for (topic, partition), offset in sorted(positions.items()):
            by_topic.setdefault(topic, []).append((partition, offset))
        response = request.send(
            cluster_id=None, replica_id=-1, max_wait=ms(100), min_bytes=1,
            max_bytes=50 * 1024 * 1024, isolation_level=0, session_id=0, session_epoch=-1,
            rack_id="", forgotten_topics_data=(), topics=tuple(
                request.nested("FetchTopic", topic=topic, partitions=tuple(
                    request.nested("FetchPartition", partition=p, current_leader_epoch=-1,
                                   fetch_offset=o, last_fetched_epoch=-1, log_start_offset=-1,
                                   partition_max_bytes=ns.fetch_size) for p, o in parts))
                for topic, parts in by_topic.items()))
        if response.error_code != ErrorCode.none:
            raise ToolError(f"Fetch: {java_error(response.error_code)}")
        now = time.time() * 1000
        got_any = False
        for topic in response.responses:
            for part in topic.partitions:
                if part.error_code != ErrorCode.none:
                    raise ToolError(f"{topic.topic}-{part.partition_index}: "
                                    f"{java_error(part.error_code)}")
                key = (topic.topic, int(part.partition_index))
                data = part.records or b""
                for position, size in rb.iter_batches(data):
                    batch = data[position:position + size]
                    header = rb.decode_header(batch)
                    if not header.is_control and messages < ns.messages:
                        for record in rb.decode_records(batch):
                            if record.offset < positions[key] or messages >= ns.messages:
                                continue
                            messages += 1
                            read_bytes += len(record.key or b"") + len(record.value or b"")
                            positions[key] = record.offset + 1
                            got_any = True
                    if messages >= ns.messages:
                        break
                    positions[key] = max(positions[key], header.next_offset)
        if got_any:
            last_consumed = now
        # Kafka checks the interval for each record it reads: no line while none arrive.
        if got_any and now - last_report >= ns.reporting_interval:
            if ns.show_detailed_stats:
                _progress(out, date_format, read_bytes, last_bytes, messages, last_messages,
                          last_report, now, single_round_join)
            single_round_join = 0
            last_report, last_messages, last_bytes = now, messages, read_bytes
    return messages, read_bytes


def _progress(out: TextIO, date_format: str, read_bytes: int, last_bytes: int, messages: int,
              last_messages: int, start_ms: float, end_ms: float, join_ms: int) -> None:
    """ConsumerPerformance.printConsumerProgress (thread id 0)."""
    elapsed = max(end_ms - start_ms, 1e-9)
    total_mb = read_bytes / (1024 * 1024)
    interval_mb = (read_bytes - last_bytes) / (1024 * 1024)
    fetch_ms = int(end_ms - start_ms) - join_ms
    print(f"{format_ms(date_format, end_ms)}, 0, {total_mb:.4f}, "
          f"{1000.0 * interval_mb / elapsed:.4f}, {messages}, "
          f"{(messages - last_messages) / elapsed * 1000.0:.4f}, {join_ms}, {fetch_ms}, "
          f"{0.0 if fetch_ms <= 0 else 1000.0 * interval_mb / fetch_ms:.4f}, "
          f"{0.0 if fetch_ms <= 0 else 1000.0 * (messages - last_messages) / fetch_ms:.4f}",
          file=out, flush=True)


def consumer_perf_main(argv: Sequence[str] | None = None, *, out: TextIO | None = None,
                       err: TextIO | None = None) -> int:
    """Run ``trio_broker consumer-perf-test``; 0 on success (also when the timeout ends it
    early, with Kafka's WARNING line), 1 on a failure, 2 on a bad command line."""
    output = out if out is not None else sys.stdout
    return run(consumer_perf_parser(), argv, lambda ns: consumer_perf_execute(ns, output), err)

