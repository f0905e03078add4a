"""One request never freezes the broker (issue 31): heavy requests beside an ApiVersions probe.

A probe connection sends ApiVersions every 20 ms and times each answer while another connection
sends one heavy request (the loads of :data:`LOADS`: decompression bombs, a Metadata naming
millions of topics, thousands of partitions created, deleted, fetched, committed, described).
Every connection shares the broker's event loop, so the probe's worst wait is how long the loop
was held. Targets, per load: probe p99 <= 50 ms, worst <= 100 ms, Kafka's answer to the heavy
request, and the broker's RSS back within 20 MiB of where the load started.

``tests/server/test_event_loop.py`` sends the same loads to an in-process broker and checks the
answers; the timings are only measured here.
"""

from __future__ import annotations

import gzip
import struct
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs
import cramjam
import trio
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
from kio.schema.describe_configs.v4.request import (
    DescribeConfigsRequest,
    DescribeConfigsResource,
)
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.offset_commit.v8.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.produce.v9.request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from kio.schema.types import BrokerId, GroupId, TopicName
from kio.static.primitive import Records, i8, i16, i32, i64

from trio_broker.protocol import records as rb
from trio_broker.protocol.codec import decode_response, encode_request
from trio_broker.protocol.framing import FrameDecoder

from .common import BenchResult, Figure, percentile, rss_bytes, running_broker
from .wire import api_versions_frame

PROBE_INTERVAL = 0.020
#: Probe time before and after the heavy request (the answer's wait is in between).
QUIET_BEFORE = 0.3
QUIET_AFTER = 0.3
P99_TARGET_MS = 50.0
WORST_TARGET_MS = 100.0
RSS_TARGET_MIB = 20.0

BOMB_TOPIC = "bombs"
BOMB_PARTITIONS = 200
WIDE_TOPIC = "wide"
WIDE_PARTITIONS = 5000
FETCH_PARTITIONS = 10_000
COMMIT_PARTITIONS = 100_000
DESCRIBED_TOPICS = 10_000
METADATA_NAMES = 2_000_000
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def bomb_batch(codec: int, decompressed: int) -> bytes:
    """A one-record v2 batch whose records are ``decompressed`` zero bytes compressed with
    ``codec``: a few KB on the wire, far more once inflated (the record length varint 0 makes
    the first record invalid: Kafka's reader fails it at once)."""
    zeros = bytes(decompressed)
    payload = (gzip.compress(zeros, 9) if codec == rb.COMPRESSION_GZIP
               else bytes(cramjam.zstd.compress(zeros, level=19)))
    batch = bytearray(rb.HEADER_SIZE) + payload
    struct.pack_into(">qiibIhiqqqhii", batch, 0, 0, len(batch) - rb.LOG_OVERHEAD, -1, rb.MAGIC,
                     0, codec, 0, 0, 0, -1, -1, -1, 1)
    struct.pack_into(">I", batch, rb.CRC_OFFSET, rb.compute_crc(batch))
    return bytes(batch)


def produce_frame(correlation_id: int, batches: Sequence[bytes]) -> bytes:
    body = ProduceRequest(transactional_id=None, acks=i16(1), timeout=_ms(30_000), topic_data=(
        TopicProduceData(name=TopicName(BOMB_TOPIC), partition_data=tuple(
            PartitionProduceData(index=i32(index), records=Records(batch))
            for index, batch in enumerate(batches))),))
    return encode_request(0, 9, correlation_id, "bench-event-loop", body)


def metadata_names_frame(correlation_id: int, names: int = METADATA_NAMES) -> bytes:
    """Metadata v1 naming ``names`` empty topics (built as bytes: kio would take seconds)."""
    client = b"bench-event-loop"
    header = struct.pack(">hhih", 3, 1, correlation_id, len(client)) + client
    body = _I32.pack(names) + b"\x00\x00" * names
    return _I32.pack(len(header) + len(body)) + header + body


def create_frame(correlation_id: int, name: str = WIDE_TOPIC,
                 partitions: int = WIDE_PARTITIONS) -> bytes:
    body = CreateTopicsRequest(topics=(CreatableTopic(
        name=TopicName(name), num_partitions=i32(partitions), replication_factor=i16(1), assignments=(),
        configs=()),), timeout=_ms(60_000), validate_only=False)
    return encode_request(19, 7, correlation_id, "bench-event-loop", body)


def delete_frame(correlation_id: int, name: str = WIDE_TOPIC) -> bytes:
    body = DeleteTopicsRequest(topics=(DeleteTopicState(name=TopicName(name), topic_id=None),),
                               timeout=_ms(60_000))
    return encode_request(20, 6, correlation_id, "bench-event-loop", body)


def fetch_frame(correlation_id: int, partitions: int = FETCH_PARTITIONS) -> bytes:
    body = FetchRequest(
        cluster_id=None, replica_id=BrokerId(-1), max_wait=_ms(0),
        min_bytes=i32(1), max_bytes=i32(50 << 20), isolation_level=i8(0),
        session_id=i32(0), session_epoch=i32(-1), topics=(FetchTopic(
            topic=TopicName(WIDE_TOPIC), partitions=tuple(
                FetchPartition(partition=i32(index), current_leader_epoch=i32(-1),
                               fetch_offset=i64(0), last_fetched_epoch=i32(-1),
                               log_start_offset=i64(-1), partition_max_bytes=i32(1 << 20),
                               )
                for index in range(partitions))),),
        forgotten_topics_data=(), rack_id="")
    return encode_request(1, 12, correlation_id, "bench-event-loop", body)


def commit_frame(correlation_id: int, partitions: int = COMMIT_PARTITIONS) -> bytes:
    body = OffsetCommitRequest(
        group_id=GroupId("bench-event-loop"), generation_id_or_member_epoch=i32(-1), member_id="",
        group_instance_id=None, topics=(OffsetCommitRequestTopic(
            name=TopicName(WIDE_TOPIC), partitions=tuple(
                OffsetCommitRequestPartition(partition_index=i32(index),
                                             committed_offset=i64(0),
                                             committed_leader_epoch=i32(-1),
                                             committed_metadata="")
                for index in range(partitions))),))
    return encode_request(8, 8, correlation_id, "bench-event-loop", body)


def describe_configs_frame(correlation_id: int, topics: int = DESCRIBED_TOPICS) -> bytes:
    resources = tuple(
        DescribeConfigsResource(resource_type=i8(2),
                                resource_name=WIDE_TOPIC if index == 0 else f"topic-{index}",
                                configuration_keys=None)
        for index in range(topics))
    body = DescribeConfigsRequest(resources=resources, include_synonyms=False,
                                  include_documentation=False)
    return encode_request(32, 4, correlation_id, "bench-event-loop", body)


def _ms(value: int) -> Any:
    import datetime
    return datetime.timedelta(milliseconds=value)


def _errors(values: Sequence[int]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return counts


# ---------------------------------------------------------------------------- answers
# Each check returns None when the answer is Kafka's, else what was wrong.
CORRUPT_MESSAGE = 2
INVALID_RECORD = 87
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_TOPIC = 17


def check_bombs(body: Any) -> str | None:
    codes = _errors([int(p.error_code) for t in body.responses for p in t.partition_responses])
    if set(codes) <= {CORRUPT_MESSAGE, INVALID_RECORD}:
        return None
    return f"produce answered {codes}, wanted CORRUPT_MESSAGE/INVALID_RECORD everywhere"


def check_metadata(body: Any) -> str | None:
    names = [t.name for t in body.topics]
    codes = _errors([int(t.error_code) for t in body.topics])
    if names == [""] and codes == {INVALID_TOPIC: 1}:
        return None
    return f"metadata answered {len(names)} topics {codes}, wanted one INVALID_TOPIC_EXCEPTION"


def check_created(body: Any) -> str | None:
    codes = [int(t.error_code) for t in body.topics]
    return None if codes == [0] else f"create answered {codes}"


def check_deleted(body: Any) -> str | None:
    codes = [int(t.error_code) for t in body.responses]
    return None if codes == [0] else f"delete answered {codes}"


def check_fetch(body: Any) -> str | None:
    if int(body.error_code):
        return f"fetch answered {int(body.error_code)}"
    codes = _errors([int(p.error_code) for t in body.responses for p in t.partitions])
    want = {0: WIDE_PARTITIONS, UNKNOWN_TOPIC_OR_PARTITION: FETCH_PARTITIONS - WIDE_PARTITIONS}
    return None if codes == want else f"fetch answered {codes}, wanted {want}"


def check_commit(body: Any) -> str | None:
    codes = _errors([int(p.error_code) for t in body.topics for p in t.partitions])
    want = {0: WIDE_PARTITIONS,
            UNKNOWN_TOPIC_OR_PARTITION: COMMIT_PARTITIONS - WIDE_PARTITIONS}
    return None if codes == want else f"commit answered {codes}, wanted {want}"


def check_describe(body: Any) -> str | None:
    codes = _errors([int(r.error_code) for r in body.results])
    want = {0: 1, UNKNOWN_TOPIC_OR_PARTITION: DESCRIBED_TOPICS - 1}
    return None if codes == want else f"describe configs answered {codes}, wanted {want}"


@attrs.frozen
class Load:
    """One heavy request: its name (the table's row), how to build it, and Kafka's answer."""

    name: str
    api_key: int
    api_version: int
    frame: Callable[[int], bytes]
    check: Callable[[Any], str | None]


def loads() -> list[Load]:
    """The loads in the order they run (later ones use the topic ``wide`` created earlier)."""
    zstd = bomb_batch(rb.COMPRESSION_ZSTD, 128 << 20)
    gzip_bomb = bomb_batch(rb.COMPRESSION_GZIP, 128 << 20)
    return [
        Load(f"Produce: {BOMB_PARTITIONS} zstd batches of 128 MiB of zeros "
             f"({BOMB_PARTITIONS * len(zstd) // 1024} KiB)", 0, 9,
             lambda c: produce_frame(c, [zstd] * BOMB_PARTITIONS), check_bombs),
        Load(f"Produce: 7 gzip bombs of {len(gzip_bomb) // 1024} KiB", 0, 9,
             lambda c: produce_frame(c, [gzip_bomb] * 7), check_bombs),
        Load(f"Metadata v1 naming {METADATA_NAMES:,} empty topics", 3, 1,
             metadata_names_frame, check_metadata),
        Load(f"CreateTopics: one topic of {WIDE_PARTITIONS:,} partitions", 19, 7,
             create_frame, check_created),
        Load(f"Fetch naming {FETCH_PARTITIONS:,} partitions", 1, 12, fetch_frame, check_fetch),
        Load(f"OffsetCommit of {COMMIT_PARTITIONS:,} partitions", 8, 8, commit_frame,
             check_commit),
        Load(f"DescribeConfigs of {DESCRIBED_TOPICS:,} topics", 32, 4, describe_configs_frame,
             check_describe),
        Load(f"DeleteTopics of that topic ({WIDE_PARTITIONS:,} partitions)", 20, 6,
             delete_frame, check_deleted),
    ]


# ------------------------------------------------------------------------------ client side
class Connection:
    """A raw Kafka connection: send a frame, read one response payload."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.frames = FrameDecoder(2**31 - 1)

    @classmethod
    async def open(cls, port: int) -> Connection:
        return cls(await trio.open_tcp_stream("127.0.0.1", port))

    async def exchange(self, frame: bytes) -> bytes:
        await self.stream.send_all(frame)
        while (payload := self.frames.next_frame()) is None:
            data = await self.stream.receive_some(1 << 20)
            if not data:
                raise ConnectionError("the broker closed the connection")
            self.frames.feed(data)
        return bytes(payload)


async def probe(port: int, waits: list[float], stop: trio.Event) -> None:
    """ApiVersions every :data:`PROBE_INTERVAL` (or at once when the last answer was late);
    appends each answer's wait in seconds."""
    connection = await Connection.open(port)
    frame = api_versions_frame()
    next_at = trio.current_time()
    async with connection.stream:
        while not stop.is_set():
            await trio.sleep_until(next_at)
            sent = time.perf_counter()
            await connection.exchange(frame)
            waits.append(time.perf_counter() - sent)
            next_at = max(next_at + PROBE_INTERVAL, trio.current_time())


@attrs.frozen
class LoadResult:
    name: str
    waits_ms: list[float]
    answer_ms: float
    problem: str | None

    @property
    def p99_ms(self) -> float:
        return percentile(self.waits_ms, 99) if self.waits_ms else 0.0

    @property
    def worst_ms(self) -> float:
        return max(self.waits_ms, default=0.0)


async def run_load(port: int, load: Load, correlation_id: int = 7) -> LoadResult:
    """``load`` sent once beside the probe; the probe's waits and the answer's problem."""
    frame = load.frame(correlation_id)
    waits: list[float] = []
    stop = trio.Event()
    heavy = await Connection.open(port)
    async with heavy.stream, trio.open_nursery() as nursery:
        nursery.start_soon(probe, port, waits, stop)
        await trio.sleep(QUIET_BEFORE)
        started = time.perf_counter()
        payload = await heavy.exchange(frame)
        answered = time.perf_counter() - started
        await trio.sleep(QUIET_AFTER)
        stop.set()
    _, body = decode_response(load.api_key, load.api_version, payload)
    return LoadResult(load.name, [w * 1000 for w in waits], answered * 1000, load.check(body))


async def run_all(port: int, chosen: Sequence[Load], between: Callable[[str], Awaitable[None]]
                  ) -> list[LoadResult]:
    results = []
    for load in chosen:
        outcome = await run_load(port, load)
        results.append(outcome)
        await between(load.name)
        print(f"  {load.name}: probe p99 {outcome.p99_ms:.1f} ms, worst {outcome.worst_ms:.1f} ms,"
              f" answered in {outcome.answer_ms:.0f} ms; {outcome.problem or 'ok'}",
              file=sys.stderr, flush=True)
    return results


async def create_bomb_topic(port: int) -> None:
    connection = await Connection.open(port)
    async with connection.stream:
        await connection.exchange(create_frame(1, BOMB_TOPIC, BOMB_PARTITIONS))


def _settled_rss(pid: int, seconds: float = 1.0) -> int:
    """The broker's RSS once it has had ``seconds`` to give memory back."""
    time.sleep(seconds)
    return rss_bytes(pid)


def run(quick: bool) -> BenchResult:
    """Every load once, on one broker (``quick``: the same; the loads are single requests)."""
    del quick
    result = BenchResult("event_loop")
    chosen = loads()
    with running_broker({"num.partitions": "1"}) as broker:
        rss: dict[str, tuple[int, int]] = {}
        start = [rss_bytes(broker.pid)]

        async def between(name: str) -> None:
            after = await trio.to_thread.run_sync(_settled_rss, broker.pid)
            rss[name] = (start[0], after)
            start[0] = after

        async def main() -> list[LoadResult]:
            await create_bomb_topic(broker.port)
            start[0] = await trio.to_thread.run_sync(_settled_rss, broker.pid)
            return await run_all(broker.port, chosen, between)

        outcomes = trio.run(main)
    for outcome in outcomes:
        before, after = rss[outcome.name]
        grown = (after - before) / 2**20
        met = (outcome.p99_ms <= P99_TARGET_MS and outcome.worst_ms <= WORST_TARGET_MS
               and outcome.problem is None and grown <= RSS_TARGET_MIB)
        result.figures.append(Figure(
            f"{outcome.name}: probe worst", outcome.worst_ms, "ms",
            target=f"p99 <= {P99_TARGET_MS:.0f} ms, worst <= {WORST_TARGET_MS:.0f} ms, "
                   f"Kafka's answer, RSS back within {RSS_TARGET_MIB:.0f} MiB",
            met=met,
            note=(f"p99 {outcome.p99_ms:.1f} ms over {len(outcome.waits_ms)} probes; answered "
                  f"in {outcome.answer_ms:.0f} ms; RSS {before / 2**20:.0f} -> "
                  f"{after / 2**20:.0f} MiB; "
                  + (outcome.problem or "Kafka's answer"))))
    return result
