"""10,000 connections (issue 35): a burst of connects, then held idle, then fresh-connection probes.

The real broker process (``trio_broker run``) and this process as the client. Every connection
is started at once, in one scheduler batch (10,000 ``connect`` calls back to back, the way a
fleet of clients reconnects after a broker restart); each sends one ApiVersions v3 and reads the
answer, then stays idle. The broker runs with Kafka's defaults (``max.connections`` and
``max.connections.per.ip`` unlimited) except ``socket.listen.backlog.size``, set to the
kernel's cap (``net.core.somaxconn``), as an operator expecting such bursts sets it
(docs/decisions.md, "10,000 connections"). While they are held:

- **refused, reset or timed out**: connects refused, connections reset or closed by the broker,
  or not answered within 10 s (a Kafka client's ``socket.connection.setup.timeout.ms``: it would
  give up and reconnect), during the burst or while held (every held socket is peeked at the
  end). Target 0.
- **RSS per idle connection**: (broker RSS with N held) - (RSS with 0, after one connection
  came and went), divided by N. Target <= 10 KiB.
- **ApiVersions on a fresh connection**: 200 probes, one at a time, 20 ms apart, each timed
  from ``connect`` to the answer's last byte; p50 and p99. Target p99 <= 5 ms. Baseline: the
  same probes on the same broker before the burst, with no connection held.

Then the same burst against a second broker at Kafka's default backlog, 50: how many of the
connections fail there. A SYN (or handshake ACK) that finds the listen queue full is dropped,
not refused (``tcp_abort_on_overflow`` is 0 by default), and retried by the client's kernel
after 1 s, 3 s, ...; a connection whose handshake ACK kept being dropped looks established to
the client but is unknown to the server, and hangs. The kernel's ``ListenOverflows`` counter
(machine-wide) is printed beside each burst. The machine's load average and the CPU time of
broker and client are printed with the figures: this is a 2-core machine shared with other
work, and a latency figure means little without them.
"""

from __future__ import annotations

import errno
import json
import os
import resource
import socket
import statistics
import time
from pathlib import Path

import attrs
import trio

from trio_broker.config import BrokerConfig

from .common import BenchResult, Figure, raise_fd_limit, rss_bytes, running_broker
from .reference import cpu_seconds
from .wire import api_versions_frame, read_one_frame

CONNECTIONS = 10_000
QUICK_CONNECTIONS = 50
PROBES = 200
QUICK_PROBES = 20
TARGET_PER_CONNECTION = 10 * 1024
TARGET_P99_MS = 5.0
#: Connects slower than this are counted: a dropped SYN is retried after 1 s, but this
#: client's own scheduling of 10,000 tasks also reaches it (ListenOverflows tells them apart).
SYN_RETRY_SECONDS = 0.9
#: A connection not connected and answered by then failed: a Kafka client gives up on a
#: connection after ``socket.connection.setup.timeout.ms`` (10 s) and opens another.
SETUP_TIMEOUT_SECONDS = 10.0
#: Descriptors this process keeps for itself beyond the connections (probes, pipes, files).
RESERVE_FDS = 300


@attrs.define
class Burst:
    """What became of the burst's connections."""

    held: list[trio.socket.SocketType] = attrs.field(factory=list)
    #: The same sockets, for the final synchronous peek (trio's ``recv`` is async).
    plain: list[socket.socket] = attrs.field(factory=list)
    refused: int = 0
    reset: int = 0
    closed: int = 0
    #: Not connected and answered within SETUP_TIMEOUT_SECONDS (a Kafka client reconnects).
    timed_out: int = 0
    other_errors: dict[str, int] = attrs.field(factory=dict)
    connect_seconds: list[float] = attrs.field(factory=list)
    answered_seconds: list[float] = attrs.field(factory=list)
    wall: float = 0.0

    def failed(self, exc: OSError) -> None:
        if isinstance(exc, ConnectionRefusedError):
            self.refused += 1
        elif isinstance(exc, (ConnectionResetError, BrokenPipeError)):
            self.reset += 1
        elif type(exc) is ConnectionError:  # read_one_frame: closed before the answer
            self.closed += 1
        else:
            name = errno.errorcode.get(exc.errno or 0, type(exc).__name__)
            self.other_errors[name] = self.other_errors.get(name, 0) + 1


async def _exchange(sock: trio.socket.SocketType, frame: bytes) -> None:
    """Send one request frame and read one response frame on a connected trio socket."""
    view = memoryview(frame)
    while view:
        sent = await sock.send(view)
        view = view[sent:]
    stream = trio.SocketStream(sock)
    await read_one_frame(stream)


async def _burst(port: int, count: int, frame: bytes) -> Burst:
    burst = Burst()
    started = time.perf_counter()

    async def one() -> None:
        plain = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        plain.setblocking(False)
        sock = trio.socket.from_stdlib_socket(plain)
        try:
            with trio.fail_after(SETUP_TIMEOUT_SECONDS):
                connecting = time.perf_counter()
                await sock.connect(("127.0.0.1", port))
                burst.connect_seconds.append(time.perf_counter() - connecting)
                await _exchange(sock, frame)
        except trio.TooSlowError:
            sock.close()
            burst.timed_out += 1
            return
        except OSError as exc:
            sock.close()
            burst.failed(exc)
            return
        except trio.BrokenResourceError as exc:  # read_one_frame's stream wraps the OSError
            sock.close()
            burst.failed(exc.__cause__ if isinstance(exc.__cause__, OSError)
                         else ConnectionResetError())
            return
        burst.answered_seconds.append(time.perf_counter() - started)
        burst.held.append(sock)
        burst.plain.append(plain)

    async with trio.open_nursery() as nursery:
        for _ in range(count):
            nursery.start_soon(one)
    burst.wall = time.perf_counter() - started
    return burst


async def _probe(port: int, frame: bytes) -> float:
    """Seconds from connect to the ApiVersions answer on a new connection."""
    started = time.perf_counter()
    sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    with sock:
        await sock.connect(("127.0.0.1", port))
        await _exchange(sock, frame)
    return time.perf_counter() - started


def _still_open(held: list[socket.socket]) -> tuple[int, int]:
    """(closed by the peer, reset) among the held sockets, without reading anything: the broker
    sends nothing unasked, so an open connection has nothing to read."""
    closed = reset = 0
    for sock in held:
        try:
            data = sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            continue
        except ConnectionResetError:
            reset += 1
            continue
        closed += 1 if not data else 0
    return closed, reset


def _listen_overflows() -> int | None:
    """The kernel's TcpExt ListenOverflows counter (all sockets of the machine), if readable."""
    try:
        with open("/proc/net/netstat", encoding="ascii") as netstat:
            lines = netstat.read().splitlines()
    except OSError:
        return None
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        if names.startswith("TcpExt:"):
            fields = dict(zip(names.split()[1:], values.split()[1:], strict=False))
            return int(fields["ListenOverflows"]) if "ListenOverflows" in fields else None
    return None


def _broker_events(log_path: Path) -> dict[str, int]:
    """How many connection and acceptor events of each kind (and reason) the broker logged,
    besides accepts and closes by the client."""
    counts: dict[str, int] = {}
    with open(log_path, "rb") as log_file:
        for line in log_file:
            if (b'"event":"connection_' not in line and b'"event":"acceptor_' not in line) \
                    or b'"connection_accepted"' in line or b'"reason":"client"' in line:
                continue
            event = json.loads(line)
            key = f"{event['event']}:{event.get('reason', '')}"
            counts[key] = counts.get(key, 0) + 1
    return counts


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


@attrs.define
class Held:
    """Everything measured in one run (one broker, one burst)."""

    burst: Burst
    rss_empty: int
    rss_held: int
    probes: list[float]
    #: The same probes before the burst, with no connection held: the baseline.
    probes_empty: list[float]
    closed_while_held: int
    reset_while_held: int
    broker_cpu_burst: float
    broker_cpu_probes: float
    client_cpu: float
    overflows: int | None
    load: tuple[float, float, float]


def _self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _probes(port: int, frame: bytes, count: int) -> list[float]:
    latencies = []
    for _ in range(count):
        latencies.append(await _probe(port, frame))
        # Probes apart, as new clients arriving one by one; not a load of their own.
        await trio.sleep(0.02)
    return latencies


async def _run(pid: int, port: int, count: int, probes: int, settle: float) -> Held:
    frame = api_versions_frame()
    # The baseline probes also pay the first connections' one-time costs before "RSS with 0".
    latencies_empty = await _probes(port, frame, probes)
    await trio.sleep(settle / 2)
    rss_empty = rss_bytes(pid)
    overflows_before = _listen_overflows()
    cpu_before, client_before = cpu_seconds(pid), _self_cpu()
    burst = await _burst(port, count, frame)
    try:
        # Let the broker finish its per-connection work (log lines, buffers) before reading.
        await trio.sleep(settle)
        cpu_after_burst = cpu_seconds(pid)
        rss_held = rss_bytes(pid)
        overflows_after = _listen_overflows()
        latencies = await _probes(port, frame, probes)
        cpu_after_probes = cpu_seconds(pid)
        closed, reset = _still_open(burst.plain)
        load = os.getloadavg()
        client_cpu = _self_cpu() - client_before
    finally:
        for sock in burst.held:
            sock.close()
    return Held(burst, rss_empty, rss_held, latencies, latencies_empty, closed, reset,
                cpu_after_burst - cpu_before, cpu_after_probes - cpu_after_burst, client_cpu,
                None if overflows_before is None or overflows_after is None
                else overflows_after - overflows_before, load)


async def _burst_only(port: int, count: int) -> tuple[Burst, int | None]:
    """A burst, closed at once (the comparison run at Kafka's listen backlog), and the
    kernel's ListenOverflows increase over it."""
    before = _listen_overflows()
    burst = await _burst(port, count, api_versions_frame())
    after = _listen_overflows()
    for sock in burst.held:
        sock.close()
    return burst, None if before is None or after is None else after - before


def somaxconn() -> int:
    """The kernel's cap on a listen backlog (what trio's ``open_tcp_listeners`` asks for)."""
    try:
        with open("/proc/sys/net/core/somaxconn", encoding="ascii") as value:
            return int(value.read())
    except (OSError, ValueError):
        return 4096


def _failures(burst: Burst) -> int:
    return (burst.refused + burst.reset + burst.closed + burst.timed_out
            + sum(burst.other_errors.values()))


def _describe(burst: Burst) -> str:
    return (f"refused {burst.refused}, reset {burst.reset}, closed {burst.closed}, timed out "
            f"{burst.timed_out} (> {SETUP_TIMEOUT_SECONDS:g} s), other "
            f"{burst.other_errors or 'none'}")


def run(quick: bool, overrides: dict[str, str] | None = None) -> BenchResult:
    count = QUICK_CONNECTIONS if quick else CONNECTIONS
    probes = QUICK_PROBES if quick else PROBES
    settle = 0.2 if quick else 3.0
    result = BenchResult("many_connections")
    limit = raise_fd_limit()
    if limit < count + RESERVE_FDS:
        count = max(QUICK_CONNECTIONS, limit - RESERVE_FDS)
        result.notes.append(f"RLIMIT_NOFILE is {limit} here: measured {count} connections")
    # The measured run: a listen queue as long as the kernel allows (socket.listen.backlog.size
    # is capped at net.core.somaxconn), what an operator expecting bursts sets, as Kafka's
    # documentation of the key says (KIP-764). Then the same burst at Kafka's default, 50.
    backlog = somaxconn()
    settings = {"logging.metrics.snapshot.interval.ms": "0",
                "socket.listen.backlog.size": str(backlog), **(overrides or {})}
    load_before = os.getloadavg()
    with running_broker(settings) as broker:
        held = trio.run(_run, broker.pid, broker.port, count, probes, settle)
        broker.check_alive()
        events = _broker_events(broker.log_path)
    kafka_backlog = BrokerConfig().socket_listen_backlog_size
    with running_broker({**settings, "socket.listen.backlog.size": str(kafka_backlog)}
                        ) as broker:
        narrow, narrow_overflows = trio.run(_burst_only, broker.port, count)
        broker.check_alive()
    burst = held.burst
    failures = _failures(burst)
    lost = held.closed_while_held + held.reset_while_held
    per_connection = (held.rss_held - held.rss_empty) / max(1, len(burst.held))
    p50 = statistics.median(held.probes) * 1000
    p99 = _percentile(held.probes, 0.99) * 1000
    p50_empty = statistics.median(held.probes_empty) * 1000
    p99_empty = _percentile(held.probes_empty, 0.99) * 1000
    answered = burst.answered_seconds
    load = (f"load average {load_before[0]:.2f} before, {held.load[0]:.2f} "
            f"(1 min) / {held.load[1]:.2f} (5 min) after; 2 cores")
    result.figures += [
        Figure(f"connections refused, reset or timed out ({count} in a burst, then held; "
               f"backlog {settings['socket.listen.backlog.size']})",
               float(failures + lost), "connections", target="0", met=failures + lost == 0,
               note=f"burst: {_describe(burst)}; while held: {held.closed_while_held} closed, "
                    f"{held.reset_while_held} reset"),
        Figure(f"broker RSS per idle connection ({len(burst.held)})", per_connection / 1024,
               "KiB", target=f"<= {TARGET_PER_CONNECTION // 1024} KiB",
               met=per_connection <= TARGET_PER_CONNECTION,
               note=f"RSS {held.rss_empty / 2**20:.1f} MiB with 0, "
                    f"{held.rss_held / 2**20:.1f} MiB with {len(burst.held)}"),
        Figure(f"ApiVersions on a fresh connection, p99 ({len(held.probes)} probes, "
               f"{len(burst.held)} held)", p99, "ms", "the same, none held", p99_empty,
               target=f"<= {TARGET_P99_MS:g} ms",
               met=p99 <= TARGET_P99_MS, note=load),
        Figure("ApiVersions on a fresh connection, p50", p50, "ms", "the same, none held",
               p50_empty,
               note=f"max {max(held.probes) * 1000:.2f} ms; connect -> answer"),
        Figure(f"burst of {count}: all answered", burst.wall, "s",
               note=(f"median answer at {statistics.median(answered):.3f} s; " if answered
                     else "") + _connects(burst, held.overflows)),
        Figure(f"the same burst at Kafka's default socket.listen.backlog.size="
               f"{kafka_backlog}: failed", float(_failures(narrow)), "connections",
               note=f"{_describe(narrow)}; all done in {narrow.wall:.1f} s; "
                    + _connects(narrow, narrow_overflows)),
        Figure("broker CPU per connection of the burst", held.broker_cpu_burst / max(1, count)
               * 1e6, "µs", note=f"{held.broker_cpu_burst:.2f} s for the burst and settling; "
                                 f"{held.broker_cpu_probes:.2f} s during the probes"),
        Figure("client CPU (this process)", held.client_cpu, "s",
               note="burst, settle, probes and the final check"),
    ]
    result.notes.append(load)
    result.notes.append("broker's connection and acceptor events (besides connection_accepted "
                        f"and closed by the client), measured run: {events or 'none'}")
    return result


def _connects(burst: Burst, overflows: int | None) -> str:
    slow = sum(1 for seconds in burst.connect_seconds if seconds > SYN_RETRY_SECONDS)
    text = (f"slowest connect {max(burst.connect_seconds, default=0.0):.2f} s, {slow} over "
            f"{SYN_RETRY_SECONDS} s (this client's own scheduling of 10,000 tasks included)")
    if overflows is not None:
        text += (f"; kernel ListenOverflows +{overflows} (machine-wide: SYNs or handshake ACKs "
                 "dropped on a full listen queue, retried by the client's kernel after 1 s, "
                 "3 s, ...)")
    return text
