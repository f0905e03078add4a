"""A mutation fuzzer over real client request frames, and a driver that aims it at a broker.

Shared by ``tests/server/test_fuzz_frames.py`` (about 10^4 frames in the normal test run) and
``python -m bench --only fuzz`` (10^6 frames).

* :class:`Mutator` turns the frames captured from real clients (``tests/data/client_frames``,
  written by ``python -m bench.capture_frames``) into mutants, deterministically from one seed:
  bit flips, byte replacement, interesting integers over 1/2/4-byte fields, huge and overlong
  varints (compact lengths of flexible versions), truncation, junk extension, splicing two frames.
  Each (API key, version) seen in the data gets an equal share. The 4-byte size prefix matches
  the payload most of the time, so the body parser is reached, and is occasionally broken.
* :func:`fuzz` sends them over many concurrent connections (a valid ApiVersions first on some,
  many frames per write, then a half-close), reads what comes back with its own frame splitter
  (:func:`split_frames`, independent of the broker's ``FrameDecoder``), and watches the broker
  process: when it dies, the frames in flight at that moment are the suspects, and
  :func:`find_killers` replays them one by one through the codec in a fresh process to name the
  one that kills it.
"""

from __future__ import annotations

import contextlib
import json
import random
import struct
import subprocess
import sys
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

from .common import REPO_ROOT, bench_env

SEED_DIR = REPO_ROOT / "tests" / "data" / "client_frames"
_SIZE = struct.Struct(">i")
_KEY_VERSION = struct.Struct(">hh")

#: Values that sit on the edges of Kafka's integer fields (counts, lengths, ids, sizes).
INTERESTING_INTS = (-1, 0, 1, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF, -(2**31))
#: Unsigned varints: huge values (a compact length of 2^32-2 is the issue-9 abort), overlong
#: encodings (more than 5 bytes, continuation bits with no end) and the small edge values.
VARINTS = (
    b"\xff\xff\xff\xff\x0f",  # 2^32 - 1: compact length 2^32 - 2
    b"\xfe\xff\xff\xff\x0f",
    b"\xff\xff\xff\xff\x07",  # 2^31 - 1
    b"\x80\x80\x80\x80\x08",  # 2^31
    b"\xff\xff\xff\x7f",
    b"\x80\x80\x80\x80\x80\x01",  # 6 bytes: overlong for a 32-bit varint
    b"\xff" * 10,  # continuation bits that never end
    b"\x80" * 9 + b"\x01",  # 2^63 as a 10-byte varint
    b"\x00", b"\x01", b"\x02", b"\x7f", b"\x80\x01",
)

MUTATIONS = ("bit_flip", "byte_replace", "interesting_int", "varint_replace", "varint_insert",
             "truncate", "extend", "splice")
#: How often the size prefix is left inconsistent with the payload.
BROKEN_PREFIX_RATE = 0.03


def split_frames(data: bytes | bytearray) -> tuple[list[bytes], bytes]:
    """Complete size-prefixed frames in ``data`` and the incomplete rest.

    Written for the test clients on its own (not the broker's ``FrameDecoder``), so that
    checking the broker does not rest on the broker's own code.
    """
    frames = []
    position = 0
    while len(data) - position >= 4:
        size = int.from_bytes(data[position:position + 4], "big", signed=True)
        if size < 0 or len(data) - position - 4 < size:
            break
        frames.append(bytes(data[position + 4:position + 4 + size]))
        position += 4 + size
    return frames, bytes(data[position:])


def load_seed_frames(directory: Path = SEED_DIR) -> dict[str, list[bytes]]:
    """The captured frames of each client (``<client>.bin``), payloads without size prefixes."""
    seeds = {}
    for path in sorted(directory.glob("*.bin")):
        frames, rest = split_frames(path.read_bytes())
        if rest:
            raise ValueError(f"{path}: {len(rest)} trailing bytes")
        seeds[path.stem] = frames
    return seeds


def api_of(payload: bytes) -> tuple[int, int]:
    """(API key, version) of a request payload."""
    key, version = _KEY_VERSION.unpack_from(payload, 0)
    return int(key), int(version)


def frame(payload: bytes) -> bytes:
    return _SIZE.pack(len(payload)) + payload


#: Requests that create things, with the version from which they are flexible (their last byte
#: is then the tagged-field count and ``validate_only`` the byte before it).
_VALIDATE_ONLY_APIS = {19: 5, 37: 2}  # CreateTopics, CreatePartitions


def validate_only(payload: bytes) -> bytes:
    """CreateTopics and CreatePartitions (v1+/v0+) switched to ``validate_only``.

    Otherwise a mutated partition count (0x7fff) or topic name creates thousands of partition
    directories and the fuzz run measures the disk, not the front end.
    """
    key, version = api_of(payload)
    flexible_from = _VALIDATE_ONLY_APIS.get(key)
    if flexible_from is None or (key == 19 and version < 1):
        return payload
    position = len(payload) - (2 if version >= flexible_from else 1)
    return payload[:position] + b"\x01" + payload[position + 1:]


@attrs.frozen
class Mutant:
    """One fuzzed frame: the bytes sent and how they were made (for failure messages)."""

    index: int
    wire: bytes
    seed_api: tuple[int, int]
    ops: tuple[str, ...]
    prefix_ok: bool

    def describe(self) -> str:
        key, version = self.seed_api
        return (f"mutant #{self.index} of api {key} v{version} via {'+'.join(self.ops)}"
                f"{'' if self.prefix_ok else ' (broken size prefix)'}: {self.wire.hex()}")


class Mutator:
    """Deterministic mutants of the seed frames: the same ``seed`` gives the same sequence."""

    def __init__(self, seeds: Iterable[bytes], seed: int) -> None:
        seeds = [validate_only(p) for p in seeds]
        self.seed = seed
        self._rng = random.Random(seed)
        groups: dict[tuple[int, int], list[bytes]] = {}
        for payload in seeds:
            if len(payload) >= 4:
                groups.setdefault(api_of(payload), []).append(payload)
        if not groups:
            raise ValueError("no seed frames")
        self.apis = sorted(groups)
        self._groups = groups
        self._all = [p for api in self.apis for p in groups[api]]
        self._made = 0
        #: How many mutants each mutation, and each seed (API, version), went into.
        self.op_counts: Counter[str] = Counter()
        self.api_counts: Counter[tuple[int, int]] = Counter()

    def __iter__(self) -> Iterator[Mutant]:
        while True:
            yield self.next()

    def next(self) -> Mutant:
        rng = self._rng
        api = self.apis[rng.randrange(len(self.apis))]
        group = self._groups[api]
        data = bytearray(group[rng.randrange(len(group))])
        ops = tuple(rng.choice(MUTATIONS) for _ in range(rng.choice((1, 1, 1, 2, 2, 3))))
        for op in ops:
            data = self._apply(op, data)
        prefix_ok = rng.random() >= BROKEN_PREFIX_RATE
        if prefix_ok:
            wire = _SIZE.pack(len(data)) + bytes(data)
        else:
            size = rng.choice((-1, -(2**31), 0x7FFFFFFF, 0x10000000, len(data) + rng.randint(1, 64),
                               max(0, len(data) - rng.randint(1, 8))))
            wire = _SIZE.pack(size) + bytes(data)
        self.op_counts.update(ops)
        self.op_counts["prefix_ok" if prefix_ok else "prefix_broken"] += 1
        self.api_counts[api] += 1
        self._made += 1
        return Mutant(self._made - 1, wire, api, ops, prefix_ok)

    def _position(self, data: bytearray, width: int = 1) -> int:
        """Where to mutate: past the API key and version most of the time, so that the frame
        still reaches the body parser of its API."""
        low = 4 if self._rng.random() < 0.95 and len(data) > 4 + width else 0
        return self._rng.randint(low, max(low, len(data) - width))

    def _apply(self, op: str, data: bytearray) -> bytearray:
        rng = self._rng
        if not data:
            return bytearray(rng.randbytes(rng.randint(1, 16)))
        if op == "bit_flip":
            for _ in range(rng.randint(1, 4)):
                position = self._position(data)
                if position < len(data):
                    data[position] ^= 1 << rng.randrange(8)
        elif op == "byte_replace":
            for _ in range(rng.randint(1, 4)):
                position = self._position(data)
                if position < len(data):
                    data[position] = rng.randrange(256)
        elif op == "interesting_int":
            width = rng.choice((1, 2, 4))
            value = rng.choice(INTERESTING_INTS) & ((1 << (8 * width)) - 1)
            position = self._position(data, width)
            data[position:position + width] = value.to_bytes(width, "big")
        elif op == "varint_replace":
            position = self._position(data)
            varint = rng.choice(VARINTS)
            data[position:position + rng.randint(1, len(varint))] = varint
        elif op == "varint_insert":
            data[self._position(data):self._position(data)] = rng.choice(VARINTS)
            position = self._position(data)
            data[position:position] = rng.choice(VARINTS)
        elif op == "truncate":
            del data[rng.randint(0, len(data) - 1):]
        elif op == "extend":
            data += rng.randbytes(rng.randint(1, 64))
        elif op == "splice":
            other = self._all[rng.randrange(len(self._all))]
            cut = rng.randint(0, len(data))
            data = data[:cut] + other[rng.randint(0, len(other)):]
        else:  # pragma: no cover - MUTATIONS lists every op above
            raise ValueError(op)
        return data


# ------------------------------------------------------------------------ valid traffic
def api_versions_frame(correlation_id: int = 0x7FFF0001) -> bytes:
    """A valid ApiVersions v3 request frame (size prefix included)."""
    from kio.schema.api_versions.v3.request import ApiVersionsRequest

    from trio_broker.protocol.codec import encode_request

    body = ApiVersionsRequest(client_software_name="fuzz", client_software_version="1.0")
    return encode_request(18, 3, correlation_id, "fuzz", body)


def create_topics_frame(names: Sequence[str]) -> bytes:
    """CreateTopics v4 (two partitions each) for topics the captured clients auto-created;
    the fuzzed broker runs without auto-creation."""
    import datetime

    from kio.schema.create_topics.v4.request import CreatableTopic, CreateTopicsRequest
    from kio.schema.types import TopicName
    from kio.static.primitive import i16, i32, i32Timedelta

    from trio_broker.protocol.codec import encode_request

    body = CreateTopicsRequest(
        topics=tuple(CreatableTopic(name=TopicName(name), num_partitions=i32(2),
                                    replication_factor=i16(1), assignments=(), configs=())
                     for name in names),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)), validate_only=False)
    return encode_request(19, 4, 0x7FFF0002, "fuzz", body)


#: Topics of the captured clients that relied on auto-creation.
AUTO_CREATED_TOPICS = ("cap-aiokafka", "cap-kcat")


async def replay(port: int, payloads: Sequence[bytes], limit: float = 10.0) -> int:
    """Send frames unchanged on one connection, half-close, and return how many were answered
    before the broker closed it (or ``limit`` seconds passed)."""
    answered = 0
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(b"".join(frame(p) for p in payloads))
        await stream.send_eof()
        pending = b""
        with trio.move_on_after(limit):
            while data := await stream.receive_some(65536):
                answers, pending = split_frames(pending + data)
                answered += len(answers)
    return answered


async def prepare_broker(port: int, seeds: dict[str, list[bytes]]) -> int:
    """Real traffic first, unchanged: topics, data, groups and offsets exist, so mutants of
    Produce, Fetch and OffsetCommit reach real partitions and groups. Returns the number of
    valid frames sent."""
    sent = 1
    if not await replay(port, [create_topics_frame(AUTO_CREATED_TOPICS)[4:]]):
        raise RuntimeError("CreateTopics was not answered")
    for frames in seeds.values():
        sent += len(frames)
        if not await replay(port, frames):
            raise RuntimeError("captured frames were not answered")
    return sent


# -------------------------------------------------------------------------------- driver
@attrs.define
class FuzzStats:
    """What one :func:`fuzz` run did and saw (client side)."""

    frames_sent: int = 0
    #: Valid ApiVersions requests sent before the mutants on some connections.
    preambles: int = 0
    connections: int = 0
    responses: int = 0
    #: Connections that ended with no answer within the per-connection time limit.
    stalled: int = 0
    #: Connections the client could not open (refused: the broker is gone).
    connect_failures: int = 0
    deaths: int = 0
    #: For each death: the suspects (frames in flight) and, when found, the killer.
    death_reports: list[str] = attrs.field(factory=list)
    killers: list[bytes] = attrs.field(factory=list)


@attrs.define
class _InFlight:
    mutants: list[Mutant]
    responses: int = 0

    def suspects(self) -> list[Mutant]:
        # The broker answers in order, so the frame it was handling is at or after the number
        # answered (later if an earlier one needed no answer: Produce with acks=0).
        return self.mutants[self.responses:]


async def _run_connection(port: int, mutants: list[Mutant], preamble: bytes | None,
                          in_flight: _InFlight, stats: FuzzStats, limit: float) -> None:
    try:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
    except OSError:
        stats.connect_failures += 1
        return
    stats.connections += 1
    pending = b""
    with trio.move_on_after(limit) as scope:
        try:
            async with stream:
                if preamble is not None:
                    await stream.send_all(preamble)
                    stats.preambles += 1
                    got: list[bytes] = []
                    while not got:
                        data = await stream.receive_some(65536)
                        if not data:
                            return
                        got, pending = split_frames(pending + data)
                await stream.send_all(b"".join(m.wire for m in mutants))
                stats.frames_sent += len(mutants)
                await stream.send_eof()
                while data := await stream.receive_some(65536):
                    answers, pending = split_frames(pending + data)
                    in_flight.responses += len(answers)
                    stats.responses += len(answers)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass  # the broker closed or reset the connection: expected for refused frames
    if scope.cancelled_caught:
        stats.stalled += 1


async def fuzz(port: int, mutants: Iterator[Mutant], *, count: int, is_alive: Callable[[], bool],
               concurrency: int = 8, max_batch: int = 12, preamble: bytes | None = None,
               preamble_rate: float = 0.5, seed: int = 0, connection_limit: float = 5.0,
               stop_on_death: bool = True, restart: Callable[[], Awaitable[int]] | None = None,
               progress: Callable[[FuzzStats], None] | None = None) -> FuzzStats:
    """Send ``count`` mutants to the broker on ``port``; watch ``is_alive`` after every
    connection (each lasts at most ``connection_limit`` seconds). On a death: record the suspects, then stop, or (with ``restart``, which returns
    the new port) start a new broker and go on."""
    rng = random.Random(seed)
    stats = FuzzStats()
    active: set[int] = set()
    flights: dict[int, _InFlight] = {}
    recent: deque[_InFlight] = deque(maxlen=4 * concurrency)
    remaining = count
    next_id = 0
    state: dict[str, Any] = {"port": port, "dead": False}

    def record_death() -> None:
        suspects = [m for key in sorted(active) for m in flights[key].suspects()]
        suspects += [m for flight in recent for m in flight.suspects()]
        unique = list({m.index: m for m in suspects}.values())
        killers = find_killers([m.wire for m in unique])
        by_wire = {m.wire: m for m in unique}
        stats.deaths += 1
        stats.killers.extend(killers)
        if killers:
            report = "killed by " + "; ".join(by_wire[k].describe() for k in killers)
        else:
            report = ("no single suspect reproduced the death in the decoder; suspects: "
                      + "; ".join(m.describe() for m in unique[:20]))
        stats.death_reports.append(report)

    async def worker() -> None:
        nonlocal remaining, next_id
        while remaining > 0 and not state["dead"]:
            take = min(remaining, rng.randint(1, max_batch))
            remaining -= take
            batch = [next(mutants) for _ in range(take)]
            key = next_id
            next_id += 1
            flight = flights[key] = _InFlight(batch)
            active.add(key)
            use_preamble = preamble if preamble is not None and rng.random() < preamble_rate \
                else None
            try:
                await _run_connection(state["port"], batch, use_preamble, flight, stats,
                                      connection_limit)
            finally:
                active.discard(key)
                del flights[key]
                recent.append(flight)
            if not is_alive() and not state["dead"]:
                state["dead"] = True
                record_death()
                if restart is None or stop_on_death:
                    return
                state["port"] = await restart()
                recent.clear()
                state["dead"] = False
            if progress is not None:
                progress(stats)

    async with trio.open_nursery() as nursery:
        for _ in range(concurrency):
            nursery.start_soon(worker)
    return stats


# --------------------------------------------------------------------- killer search
def find_killers(wires: Sequence[bytes], timeout: float = 60.0) -> list[bytes]:
    """The frames (size prefix included) that kill a fresh process decoding them with the
    broker's codec, one per process run: the process decodes suspects in order and reports each
    one it survives, so a death names the frame it died on."""
    killers: list[bytes] = []
    todo = list(wires)
    while todo:
        process = subprocess.run(
            [sys.executable, "-m", "bench.fuzzing", "--decode"],
            input="".join(w.hex() + "\n" for w in todo).encode(), capture_output=True,
            env=bench_env(), cwd=str(REPO_ROOT), timeout=timeout, check=False)
        survived = process.stdout.count(b"ok\n")
        if process.returncode == 0:
            break
        if survived >= len(todo):  # died after the last one: not a decoder death
            break
        killers.append(todo[survived])
        todo = todo[survived + 1:]
    return killers


def _decode_stdin() -> int:
    """``python -m bench.fuzzing --decode``: decode hex frames from stdin, print ok after each."""
    from trio_broker.protocol.codec import decode_request
    from trio_broker.server.registry import supported_versions

    supported = supported_versions()
    for line in sys.stdin:
        wire = bytes.fromhex(line.strip())
        # Only a process death matters here: a refusal or an exception is survived.
        with contextlib.suppress(Exception):
            decode_request(wire[4:], supported)
        sys.stdout.write("ok\n")
        sys.stdout.flush()
    return 0


def summary(mutator: Mutator) -> dict[str, Any]:
    """The mutation and API counts of a run, for reports."""
    return {"seed": mutator.seed, "ops": dict(mutator.op_counts),
            "apis": {f"{k} v{v}": n for (k, v), n in sorted(mutator.api_counts.items())}}


if __name__ == "__main__":
    if sys.argv[1:] == ["--decode"]:
        sys.exit(_decode_stdin())
    print(json.dumps({k: len(v) for k, v in load_seed_frames().items()}))
