"""Log compaction in process: the cleaner's rules (newest per key, tombstones after
delete.retention.ms, lags, dirty ratio, memory bound), idempotent producer state, gzip, and a
crash at every step of the swap."""

from __future__ import annotations

import contextlib
import gzip
import struct
import threading
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_broker.config import load_config
from trio_broker.observability.metrics import BrokerMetrics
from trio_broker.protocol import records as rb
from trio_broker.storage import LogManager, log_cleaner
from trio_broker.storage import cleaner as cl
from trio_broker.storage import errors as se
from trio_broker.storage.log import PartitionLog, now_ms
from trio_broker.storage.segment import unlink_all as unlink_now

COMPACT = {"cleanup.policy": "compact", "segment.bytes": "1000"}


def make(tmp_path: Path, **settings: str) -> LogManager:
    lm = LogManager(load_config({"log.dirs": str(tmp_path), **settings}))
    lm.open()
    return lm


def crash(lm: LogManager) -> LogManager:
    """What kill -9 leaves, then a restart."""
    for log in lm.all_partitions():
        log.close()
    lm._release_lock()
    fresh = LogManager(lm.config)
    fresh.open()
    return fresh


def restart(lm: LogManager) -> LogManager:
    lm.close()
    fresh = LogManager(lm.config)
    fresh.open()
    return fresh


def record(key: bytes | None, value: bytes | None, ts: int | None = None
           ) -> tuple[bytes | None, bytes | None, list[Any], int]:
    return (key, value, [], now_ms() if ts is None else ts)


async def produce(lm: LogManager, topic: str, count: int, keys: int, *,
                  tombstone_every: int = 0, ts: int | None = None) -> dict[bytes, tuple[int, bytes | None]]:
    """``count`` single-record batches over ``keys`` keys; returns the newest (offset, value)
    per key."""
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    for i in range(count):
        key = b"key-%d" % (i % keys)
        value = None if tombstone_every and i % tombstone_every == 0 else b"value-%d" % i
        result = await lm.append(topic, 0, rb.build_batch([record(key, value, ts)]))
        latest[key] = (result.base_offset, value)
    return latest


def all_batches(lm: LogManager, topic: str) -> list[bytes]:
    """Every batch from the log start, fetching from each next offset (gaps included)."""
    log = lm.get_partition(topic, 0)
    assert log is not None
    offset, found = log.log_start_offset, []
    while offset < log.log_end_offset:
        data = lm.read(topic, 0, offset, 1 << 16).records
        assert data, f"no batch at or after {offset}"
        for position, size in rb.iter_batches(data):
            batch = data[position:position + size]
            header = rb.decode_header(batch)
            if header.next_offset > offset:
                found.append(batch)
            offset = max(offset, header.next_offset)
    return found


def read_all(lm: LogManager, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every record from offset 0."""
    return [(r.offset, r.key, r.value) for batch in all_batches(lm, topic)
            for r in rb.decode_records(batch)]


def expected(latest: dict[bytes, tuple[int, bytes | None]], *, tombstones: bool
             ) -> list[tuple[int, bytes | None, bytes | None]]:
    return sorted((offset, key, value) for key, (offset, value) in latest.items()
                  if tombstones or value is not None)


async def test_compaction_keeps_the_newest_record_per_key_at_its_offset(
        tmp_path: Path, log_events: Any) -> None:
    lm = make(tmp_path)
    lm.create_topic("c", 1, COMPACT)
    latest = await produce(lm, "c", 600, 20)
    log = lm.get_partition("c", 0)
    assert log is not None
    before = (log.log_start_offset, log.log_end_offset, len(log.segments))
    sentinel = (await lm.append("c", 0, rb.build_batch([record(b"last", b"x")]))).base_offset
    assert log.active.base_offset == sentinel or log.active.base_offset < sentinel
    assert await lm.cleaner.clean_once()
    (event,) = log_events.events("log_cleaned", topic="c")
    assert event["records_removed"] > 500 and event["bytes_after"] < event["bytes_before"]
    closed_end = event["end_offset"]
    got = read_all(lm, "c")
    # below the cleaned end: exactly the newest record of each key, at its original offset
    assert [r for r in got if r[0] < closed_end] == [
        r for r in expected(latest, tombstones=True) if r[0] < closed_end]
    # the log's offsets did not move; fetch into a gap returns the next record
    assert (log.log_start_offset, log.log_end_offset) == (before[0], sentinel + 1)
    assert lm.list_offset("c", 0, -2) == (0, -1)
    first_kept = got[0][0]
    if first_kept > 0:
        data = lm.read("c", 0, first_kept - 1, 1 << 16).records
        assert rb.decode_records(data[:rb.decode_header(data).size])[-1].offset >= first_kept
    # the cleaned segments survive a restart (indexes trusted), and a crash (rescanned)
    lm = restart(lm)
    assert read_all(lm, "c") == got
    assert not log_events.events("log_index_rebuilt")
    lm = crash(lm)
    assert read_all(lm, "c") == got
    # a second clean has nothing new to remove, and merges the small cleaned segments
    lm.cleaner.checkpoints.pop(("c", 0))
    segments = len(lm.get_partition("c", 0).segments)  # type: ignore[union-attr]
    assert await lm.cleaner.clean_once()
    assert read_all(lm, "c") == got
    assert len(lm.get_partition("c", 0).segments) < segments  # type: ignore[union-attr]
    lm.close()


async def test_tombstones_go_after_delete_retention_from_their_first_clean(
        tmp_path: Path, log_events: Any) -> None:
    lm = make(tmp_path)
    lm.create_topic("t", 1, {**COMPACT, "delete.retention.ms": "60000"})
    clock = [now_ms()]
    lm.cleaner.wall_clock = lambda: clock[0]
    created = now_ms() - 1000
    latest = await produce(lm, "t", 300, 10, tombstone_every=7, ts=created)
    await lm.append("t", 0, rb.build_batch([record(b"end", b"x")]))
    tombstoned = {k for k, (_, v) in latest.items() if v is None}
    assert tombstoned
    assert await lm.cleaner.clean_once()
    got = read_all(lm, "t")
    # kept for now (their horizon is stamped), with their own timestamps unchanged
    assert {k for _, k, v in got if v is None} == tombstoned
    log = lm.get_partition("t", 0)
    assert log is not None
    batches = all_batches(lm, "t")
    stamped = [rb.decode_header(b) for b in batches
               if rb.decode_header(b).attributes & cl.DELETE_HORIZON_BIT]
    assert stamped and all(h.base_timestamp == clock[0] + 60000 for h in stamped)
    assert all(r.timestamp == created for b in batches[:-1] for r in rb.decode_records(b))
    # not yet: nothing is due
    clock[0] += 59000
    assert not await lm.cleaner.clean_once()
    # past the horizon: the kept tombstones make the log due although nothing is dirty
    clock[0] += 1000
    assert await lm.cleaner.clean_once()
    assert read_all(lm, "t")[:-1] == expected(latest, tombstones=False)
    assert log_events.events("log_cleaned")[-1]["tombstones_retained"] == 0
    lm.close()


async def test_dirty_ratio_and_compaction_lags(tmp_path: Path) -> None:
    lm = make(tmp_path)
    now = now_ms()
    lm.cleaner.wall_clock = lambda: now
    lm.create_topic("r", 1, {**COMPACT, "min.cleanable.dirty.ratio": "0.9"})
    await produce(lm, "r", 200, 5)
    assert await lm.cleaner.clean_once()  # everything dirty: ratio 1.0
    await produce(lm, "r", 40, 5)  # a little more dirt: below 0.9 of the log
    candidate = lm.cleaner.candidate(lm.get_partition("r", 0), now)  # type: ignore[arg-type]
    assert candidate is not None and 0 < candidate.ratio < 0.9
    assert not await lm.cleaner.clean_once()
    # max.compaction.lag.ms: dirty records older than it are cleaned whatever the ratio
    lm.alter_topic_config("r", {"max.compaction.lag.ms": "1000"}, incremental=True)
    now += 10_000
    assert await lm.cleaner.clean_once()

    # min.compaction.lag.ms: segments with records younger than it are not cleaned
    lm.create_topic("m", 1, {**COMPACT, "min.compaction.lag.ms": "60000"})
    old = now - 120_000
    await produce(lm, "m", 100, 5, ts=old)
    young = await produce(lm, "m", 100, 5, ts=now - 1000)
    log = lm.get_partition("m", 0)
    assert log is not None
    candidate = lm.cleaner.candidate(log, now)
    assert candidate is not None
    boundary = candidate.first_uncleanable
    assert 0 < boundary <= 100 < log.active.base_offset
    assert await lm.cleaner.clean_once()
    got = read_all(lm, "m")
    assert [o for o, _, _ in got if o >= boundary] == list(range(boundary, log.log_end_offset))
    assert len([o for o, _, _ in got if o < boundary]) <= 5
    # once they are old enough they are cleaned too
    now += 120_000
    log.roll()
    assert await lm.cleaner.clean_once()
    assert read_all(lm, "m") == expected(young, tombstones=True)
    lm.close()


async def test_records_without_a_key_are_refused_by_compacted_topics(tmp_path: Path) -> None:
    lm = make(tmp_path)
    lm.create_topic("k", 1, COMPACT)
    # Kafka's text (LogValidator.validateKey), which a Produce answer carries to the client.
    with pytest.raises(se.InvalidRecord) as refused:
        await lm.append("k", 0, rb.build_batch([record(b"a", b"1"), record(None, b"2")]))
    assert str(refused.value) == ("Compacted topic cannot accept message without key in topic "
                                  "partition k-0.")
    for codec in CODECS:
        with pytest.raises(se.InvalidRecord, match="without key"):
            await lm.append("k", 0, _compressed_batch([record(b"a", b"0"), record(None, b"1")],
                                                      codec))
    await lm.append("k", 0, rb.build_batch([record(b"a", b"1")]))
    lm.create_topic("d", 1)
    await lm.append("d", 0, rb.build_batch([record(None, b"1")]))
    lm.close()


def _gzip_batch(records: list[Any], **kw: Any) -> bytes:
    plain = bytearray(rb.build_batch(records, **kw))
    payload = gzip.compress(bytes(plain[rb.HEADER_SIZE:]))
    out = plain[:rb.HEADER_SIZE] + payload
    struct.pack_into(">i", out, 8, len(out) - rb.LOG_OVERHEAD)
    struct.pack_into(">h", out, rb.ATTRIBUTES_OFFSET, rb.COMPRESSION_GZIP)
    struct.pack_into(">I", out, rb.CRC_OFFSET, rb.compute_crc(out))
    return bytes(out)


#: Every codec; gzip through the standard library's writer, the others as Kafka writes them.
CODECS = [rb.COMPRESSION_GZIP, rb.COMPRESSION_SNAPPY, rb.COMPRESSION_LZ4, rb.COMPRESSION_ZSTD]


def _compressed_batch(records: list[Any], codec: int, **kw: Any) -> bytes:
    if codec == rb.COMPRESSION_GZIP:
        return _gzip_batch(records, **kw)
    return rb.build_batch(records, attributes=codec, **kw)


@pytest.mark.parametrize("codec", CODECS)
async def test_compressed_batches_are_recompressed_and_producer_state_survives(
        tmp_path: Path, codec: int) -> None:
    lm = make(tmp_path)
    lm.create_topic("g", 1, COMPACT)
    # an idempotent producer writes gzip batches of 5 records over 3 keys
    pid, sequence = 7, 0
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    for i in range(40):
        records = [record(b"k%d" % ((i * 5 + j) % 3), b"v%d-%d" % (i, j)) for j in range(5)]
        result = await lm.append("g", 0, _compressed_batch(
            records, codec, producer_id=pid, producer_epoch=0, base_sequence=sequence))
        for j in range(5):
            latest[records[j][0]] = (result.base_offset + j, records[j][1])  # type: ignore[index]
        sequence += 5
    last_batch = rb.build_batch([record(b"k0", b"overwritten")], producer_id=pid,
                                producer_epoch=0, base_sequence=sequence)
    # the producer's last batch is superseded by a non-idempotent record of the same key
    await lm.append("g", 0, last_batch)
    await lm.append("g", 0, rb.build_batch([record(b"k0", b"final")]))
    latest[b"k0"] = (lm.get_partition("g", 0).log_end_offset - 1, b"final")  # type: ignore[union-attr]
    lm.get_partition("g", 0).roll()  # type: ignore[union-attr]
    assert await lm.cleaner.clean_once()
    assert read_all(lm, "g") == expected(latest, tombstones=True)
    headers = [rb.decode_header(b) for b in all_batches(lm, "g")]
    assert any(h.compression == codec and h.record_count < 5 for h in headers)
    # the rewritten batches are in the codec's Kafka format (xerial snappy, independent lz4)
    for batch in all_batches(lm, "g"):
        header = rb.decode_header(batch)
        if header.compression == codec and header.record_count:
            payload = batch[rb.HEADER_SIZE:]
            if codec == rb.COMPRESSION_SNAPPY:
                assert payload.startswith(b"\x82SNAPPY\x00")
            if codec == rb.COMPRESSION_LZ4:
                assert payload[:4] == b"\x04\x22\x4d\x18" and payload[4] & 0x20
    # the producer's last batch stays as an empty header with its offsets and sequence
    (empty,) = [h for h in headers if h.producer_id == pid and h.record_count == 0]
    assert (empty.base_sequence, empty.last_offset_delta) == (sequence, 0)
    # after a crash the producer's state is rebuilt from the cleaned log: a retry of its last
    # batch is a duplicate, the next sequence is accepted
    lm = crash(lm)
    retry = await lm.append("g", 0, last_batch)
    assert retry.duplicate
    await lm.append("g", 0, rb.build_batch([record(b"k1", b"next")], producer_id=pid,
                                           producer_epoch=0, base_sequence=sequence + 1))
    lm.close()


async def test_the_offset_map_is_bounded_by_the_dedupe_buffer(
        tmp_path: Path, log_events: Any) -> None:
    # 16-slot maps (the smallest): 14 keys fit; a segment holds about 14 records here
    lm = make(tmp_path, **{"log.cleaner.dedupe.buffer.size": "1024"})
    lm.create_topic("b", 1, {**COMPACT, "segment.bytes": "1200",
                             "min.cleanable.dirty.ratio": "0"})
    latest = await produce(lm, "b", 200, 200)  # every key distinct: nothing to remove
    log = lm.get_partition("b", 0)
    assert log is not None and len(log.segments) > 4
    assert await lm.cleaner.clean_once()
    first = log_events.events("log_cleaned")[-1]
    assert first["end_offset"] < log.active.base_offset  # mapped only part of the dirty section
    while await lm.cleaner.clean_once():
        pass
    assert lm.cleaner.checkpoints[("b", 0)] == log.active.base_offset
    assert read_all(lm, "b") == expected(latest, tombstones=True)
    # a map that cannot hold one dirty segment: the partition is marked uncleanable
    lm.create_topic("u", 1, {**COMPACT, "segment.bytes": "100000"})
    await produce(lm, "u", 100, 100)
    lm.get_partition("u", 0).roll()  # type: ignore[union-attr]
    assert not await lm.cleaner.clean_once()
    assert log_events.events("log_cleaning_failed", topic="u")
    assert ("u", 0) in lm.cleaner.uncleanable
    # Deleting the topic forgets the mark (it stayed for good, and a topic created again under
    # the name was never cleaned).
    lm.delete_topic("u")
    assert not lm.cleaner.uncleanable
    lm.close()


@pytest.mark.parametrize("point", ["cleaned", "swapped", "deleted", "renamed"])
async def test_a_crash_at_any_step_of_the_swap_loses_nothing(
        tmp_path: Path, point: str, monkeypatch: pytest.MonkeyPatch) -> None:
    lm = make(tmp_path)
    lm.create_topic("s", 1, COMPACT)
    latest = await produce(lm, "s", 400, 15, tombstone_every=9)
    lm.get_partition("s", 0).roll()  # type: ignore[union-attr]
    before = read_all(lm, "s")

    class Crash(Exception):
        pass

    def fault(at: str) -> None:
        if at == point:
            raise Crash(at)

    monkeypatch.setattr(cl, "_fault", fault)
    if point == "cleaned":
        real = cl.clean_group

        def crash_after_copy(*args: Any) -> Path:
            real(*args)
            raise Crash("cleaned")

        monkeypatch.setattr("trio_broker.storage.log_cleaner.clean_group", crash_after_copy)
    with pytest.raises(Crash):
        await lm.cleaner._clean(lm.cleaner.grab_filthiest(now_ms()), now_ms(), 0)  # type: ignore[arg-type]
    directory = tmp_path / "s-0"
    leftovers = sorted(p.name for p in directory.iterdir()
                       if p.name.endswith((".cleaned", ".swap")))
    # the crash left the protocol's files behind (after the last rename: none, but the old
    # segments are gone from the disk and still in memory)
    assert bool(leftovers) == (point != "renamed")
    # the replaced segments are renamed .deleted in the swap and unlinked after it, off the
    # event loop: a crash in between leaves them for the next start-up
    retired = [p for p in directory.iterdir() if p.name.endswith(".deleted")]
    assert bool(retired) == (point in ("deleted", "renamed"))
    lm = crash(lm)
    assert not [p for p in directory.iterdir()
                if p.name.endswith((".cleaned", ".swap", ".deleted"))]
    after = read_all(lm, "s")
    if point == "cleaned":
        assert after == before  # never committed: the old segments are intact
    else:
        # committed: the first group is clean, every surviving record is there
        assert set(expected(latest, tombstones=True)) <= set(after) <= set(before)
    monkeypatch.undo()
    lm.cleaner.checkpoints.clear()
    assert await lm.cleaner.clean_once()
    assert read_all(lm, "s") == expected(latest, tombstones=True)
    lm.close()


async def test_the_replaced_segments_are_unlinked_by_a_worker_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The segments a clean replaces (up to segment.bytes each: 1 GiB by default) are renamed
    ``.deleted`` in the swap and unlinked by a worker thread, never on the event loop."""
    lm = make(tmp_path)
    lm.create_topic("s", 1, COMPACT)
    latest = await produce(lm, "s", 400, 15, tombstone_every=9)
    lm.get_partition("s", 0).roll()  # type: ignore[union-attr]
    calls: list[tuple[bool, list[Path]]] = []

    def unlink_all(paths: list[Path]) -> None:
        calls.append((threading.current_thread() is threading.main_thread(), list(paths)))
        unlink_now(paths)

    monkeypatch.setattr(log_cleaner, "unlink_all", unlink_all)
    assert await lm.cleaner.clean_once()
    assert calls and not any(on_loop for on_loop, _ in calls)
    assert all(p.name.endswith(".deleted") for _, paths in calls for p in paths)
    assert not [p for p in (tmp_path / "s-0").iterdir() if p.name.endswith(".deleted")]
    assert read_all(lm, "s") == expected(latest, tombstones=True)
    lm.close()


async def test_the_cleaner_task_cleans_in_the_background(
        tmp_path: Path, autojump_clock: trio.testing.MockClock, log_events: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The autojump clock jumps while a worker thread runs (nothing is runnable on the loop),
    # which would fire the virtual timeouts mid-copy: run the worker steps inline here.
    async def inline(fn: Any, *args: Any, **_: Any) -> Any:
        return fn(*args)

    monkeypatch.setattr(trio.to_thread, "run_sync", inline)
    lm = make(tmp_path, **{"log.cleaner.backoff.ms": "1000", "log.cleaner.threads": "2"})
    lm.create_topic("a", 1, COMPACT)
    lm.create_topic("b", 1, COMPACT)
    latest_a = await produce(lm, "a", 300, 10)
    latest_b = await produce(lm, "b", 300, 10)
    for topic in ("a", "b"):
        lm.get_partition(topic, 0).roll()  # type: ignore[union-attr]
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(lm.run)
            await log_events.wait_for("log_cleaned", topic="a", timeout=30)
            await log_events.wait_for("log_cleaned", topic="b", timeout=30)
            await trio.sleep(5)  # idle rounds: nothing more to do
            nursery.cancel_scope.cancel()
    assert len(log_events.events("log_cleaned")) == 2
    assert read_all(lm, "a") == expected(latest_a, tombstones=True)
    assert read_all(lm, "b") == expected(latest_b, tombstones=True)
    stats = lm.cleaner.stats
    assert 0 < stats.recopy_percent < 100
    metrics = BrokerMetrics()
    metrics.watch_logs(lm)
    text = metrics.exposition().decode()
    assert f"kafka_log_logcleaner_cleaner_recopy_percent {int(stats.recopy_percent)}.0" in text
    assert "kafka_log_logcleaner_max_clean_time_secs 0.0" in text  # whole seconds, as Kafka
    assert "kafka_log_logcleanermanager_max_dirty_percent 0.0" in text  # all clean now
    lm.close()
    # the checkpoint persists: after a restart nothing is dirty
    lm = make(tmp_path)
    assert lm.cleaner.checkpoints[("a", 0)] == lm.get_partition("a", 0).active.base_offset  # type: ignore[union-attr]
    assert not await lm.cleaner.clean_once()
    lm.close()


def test_cleanup_policy_configs(tmp_path: Path) -> None:
    lm = make(tmp_path, **{"log.cleanup.policy": "compact",
                           "log.cleaner.delete.retention.ms": "5"})
    lm.create_topic("default", 1)
    lm.create_topic("both", 1, {"cleanup.policy": "compact,delete"})
    lm.create_topic("del", 1, {"cleanup.policy": "delete"})
    configs = {name: lm.get_partition(name, 0).config  # type: ignore[union-attr]
               for name in ("default", "both", "del")}
    assert configs["default"].compact and not configs["default"].delete_enabled
    assert configs["both"].compact and configs["both"].delete_enabled
    assert not configs["del"].compact
    assert configs["default"].delete_retention_ms == 5
    entries = {e.name: e for e in lm.describe_topic_config("default")}
    assert entries["cleanup.policy"].value == "compact"
    assert entries["delete.retention.ms"].source == "STATIC_BROKER_CONFIG"
    with pytest.raises(se.InvalidConfig):
        lm.create_topic("bad", 1, {"cleanup.policy": "shred"})
    # Kafka's list type keeps empty elements, and "" is no policy.
    for policy in ("compact,,delete", "compact,", ",delete", ""):
        with pytest.raises(se.InvalidConfig, match="must be a list of delete, compact"):
            lm.create_topic("bad", 1, {"cleanup.policy": policy})
    assert "bad" not in lm.topics
    lm.close()


def test_min_compaction_lag_above_max_is_refused_as_kafka_does(tmp_path: Path) -> None:
    """Kafka's LogConfig.validateValues, on the effective values (overrides and defaults), for
    a creation, a full change and an incremental one."""
    lm = make(tmp_path)
    conflict = "conflict topic config setting min.compaction.lag.ms"
    with pytest.raises(se.InvalidConfig, match=r"\(2000\) > max.compaction.lag.ms \(1000\)"):
        lm.create_topic("t", 1, {**COMPACT, "min.compaction.lag.ms": "2000",
                                 "max.compaction.lag.ms": "1000"})
    assert "t" not in lm.topics
    lm.create_topic("t", 1, {**COMPACT, "max.compaction.lag.ms": "1000"})
    with pytest.raises(se.InvalidConfig, match=conflict):
        lm.alter_topic_config("t", {"min.compaction.lag.ms": "5000"}, incremental=True)
    with pytest.raises(se.InvalidConfig, match=conflict):
        lm.alter_topic_config("t", {"min.compaction.lag.ms": "5000", "max.compaction.lag.ms": "10"},
                              incremental=False)
    assert lm.topics["t"].configs["max.compaction.lag.ms"] == "1000"
    assert "min.compaction.lag.ms" not in lm.topics["t"].configs
    lm.alter_topic_config("t", {"min.compaction.lag.ms": "1000"}, incremental=True)  # equal: fine
    lm.close()


def test_an_offsets_topic_from_before_compaction_is_switched_to_it(tmp_path: Path) -> None:
    from trio_broker.coordinator import GroupCoordinator

    lm = make(tmp_path)
    lm.create_topic("__consumer_offsets", 1, {"retention.ms": "-1", "retention.bytes": "-1",
                                              "segment.bytes": "104857600"}, internal=True)
    GroupCoordinator(lm.config, lm).load()
    configs = lm.topics["__consumer_offsets"].configs
    assert configs == {"cleanup.policy": "compact", "segment.bytes": "104857600"}
    assert lm.get_partition("__consumer_offsets", 0).config.compact  # type: ignore[union-attr]
    lm.close()


async def test_a_copy_overtaken_by_delete_records_is_discarded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, log_events: Any) -> None:
    lm = make(tmp_path)
    lm.create_topic("x", 1, {**COMPACT, "cleanup.policy": "compact,delete"})
    await produce(lm, "x", 300, 10)
    log = lm.get_partition("x", 0)
    assert log is not None
    log.roll()
    cut = log.segments[2].base_offset
    real = cl.clean_group

    def copy_then_delete(*args: Any) -> Path:
        path = real(*args)
        log.delete_records_before(cut)  # runs "meanwhile": the first segments go
        return path

    monkeypatch.setattr("trio_broker.storage.log_cleaner.clean_group", copy_then_delete)
    before = read_all(lm, "x")
    assert await lm.cleaner.clean_once()
    assert not log_events.events("log_cleaned")
    assert not [p for p in (tmp_path / "x-0").iterdir() if p.name.endswith(".cleaned")]
    assert read_all(lm, "x") == [r for r in before if r[0] >= cut]
    assert ("x", 0) not in lm.cleaner.checkpoints
    lm.close()


@given(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=40)),
                          st.one_of(st.none(), st.binary(max_size=300))), min_size=1, max_size=8),
       st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=6),
       st.sampled_from([rb.COMPRESSION_NONE, *CODECS]))
@settings(max_examples=300, deadline=None)
def test_the_record_reader_takes_any_client_bytes(
        records: list[tuple[bytes | None, bytes | None]], flips: list[tuple[int, int]],
        codec: int) -> None:
    """The key check at produce reads client record bytes: a valid batch reads back exactly,
    and any corruption of the records (CRC fixed so it gets that far) is a RecordBatchError,
    never another exception."""
    inputs = [record(k, v, 1_700_000_000_000 + i) for i, (k, v) in enumerate(records)]
    batch = bytearray(_compressed_batch(inputs, codec) if codec else rb.build_batch(inputs))
    header = rb.decode_header(batch)
    assert cl.batch_has_keyless_record(batch, 0, header) == any(k is None for k, _ in records)
    spans = list(cl.iter_records(rb.records_payload(bytes(batch), header), header.record_count))
    assert [(s.key, s.tombstone) for s in spans] == [(k, v is None) for k, v in records]
    for position, value in flips:
        at = rb.HEADER_SIZE + position % max(len(batch) - rb.HEADER_SIZE, 1)
        batch[at] = value
    struct.pack_into(">I", batch, rb.CRC_OFFSET, rb.compute_crc(batch))
    with contextlib.suppress(rb.RecordBatchError):
        cl.batch_has_keyless_record(batch, 0, rb.decode_header(batch))


async def test_list_offsets_by_timestamp_skips_batches_compaction_emptied(
        tmp_path: Path) -> None:
    lm = make(tmp_path)
    lm.create_topic("ts", 1, COMPACT)
    base = now_ms() - 100_000
    for i in range(60):  # key-0 .. key-2, timestamps base + i
        await lm.append("ts", 0, rb.build_batch([record(b"key-%d" % (i % 3), b"v", base + i)]))
    await lm.append("ts", 0, rb.build_batch([record(b"key-0", b"newest", base + 1000)]))
    lm.get_partition("ts", 0).roll()  # type: ignore[union-attr]
    assert await lm.cleaner.clean_once()
    kept = [o for o, _, _ in read_all(lm, "ts")]
    assert kept == [58, 59, 60]
    # offset 10's record is gone: the answer is the first record at or after the time
    assert lm.list_offset("ts", 0, base + 10) == (58, base + 58)
    assert lm.list_offset("ts", 0, base + 59) == (59, base + 59)
    assert lm.list_offset("ts", 0, base + 999) == (60, base + 1000)
    lm.close()


async def cleaned_to_empty_segments(lm: LogManager) -> PartitionLog:
    """Topic ``c``: 60 rounds of the same three keys in small segments, cleaned, so that the
    older segments keep one record-less batch each."""
    lm.create_topic("c", 1, {**COMPACT, "segment.bytes": "300"})
    for i in range(60):
        values = [record(b"key-%d" % k, b"v-%d-%d" % (i, k)) for k in range(3)]
        await lm.append("c", 0, rb.build_batch(values))
    assert await lm.cleaner.clean_once()
    log = lm.get_partition("c", 0)
    assert log is not None
    return log


@pytest.mark.parametrize("region", [False, True])
async def test_a_read_passes_segments_left_with_only_empty_batches(
        tmp_path: Path, region: bool) -> None:
    """Small segments whose records all have newer versions are cleaned to one record-less
    batch each. A read there answered that one empty batch and stopped at the segment's end;
    librdkafka, given nothing but empty batches ten fetches in a row, gave up with
    MSG_SIZE_TOO_LARGE and never reached the data. The read goes on into the next segments."""
    lm = make(tmp_path)
    log = await cleaned_to_empty_segments(lm)
    empty = [s for s in log.segments if s.size == rb.HEADER_SIZE]
    assert len(empty) > 10  # the situation: many segments of one empty batch each
    result = log.read(0, 1 << 20, region=region)
    records = result.records
    data = records if isinstance(records, bytes) else records.read()
    if not isinstance(records, bytes):
        records.release()
    headers = [rb.decode_header(data, p) for p, _ in rb.iter_batches(data)]
    assert headers[0].record_count == 0 and any(h.record_count for h in headers)
    assert [v for _, _, v in read_all(lm, "c")][-3:] == [b"v-59-0", b"v-59-1", b"v-59-2"]
    lm.close()


@pytest.mark.parametrize("region", [False, True])
async def test_a_read_past_empty_segments_answers_exactly_their_batches_then_the_data(
        tmp_path: Path, region: bool) -> None:
    """The read above, byte for byte: every leading record-less batch, then the first segment
    with records; and ``max_bytes`` counts the empty batches (two headers' worth: two)."""
    lm = make(tmp_path)
    log = await cleaned_to_empty_segments(lm)

    def read(max_bytes: int) -> bytes:
        assert log is not None
        records = log.read(0, max_bytes, region=region).records
        if isinstance(records, bytes):
            return records
        try:
            return records.read()
        finally:
            records.release()

    leading = []
    for segment in log.segments:
        if segment.size != rb.HEADER_SIZE:
            data_segment = segment
            break
        leading.append(segment)
    assert len(leading) > 10
    whole = [s.pread(s.size, 0) for s in leading]
    assert read(1 << 20) == b"".join(whole) + data_segment.pread(data_segment.size, 0)
    assert read(2 * rb.HEADER_SIZE) == whole[0] + whole[1]
    lm.close()


@pytest.mark.parametrize("content", [b"", bytes(100)])
async def test_a_swap_file_without_a_batch_is_not_installed(
        tmp_path: Path, content: bytes, log_events: Any) -> None:
    """A ``.swap`` is a committed clean and always holds its group's last batch; an empty or
    zero-filled one (damage) used to be installed all the same, deleting the segment at its
    base with every record in it."""
    lm = make(tmp_path)
    lm.create_topic("c", 1, COMPACT)
    latest = await produce(lm, "c", 60, 60)
    log = lm.get_partition("c", 0)
    assert log is not None and len(log.segments) > 2
    target = log.segments[1].base_offset
    lm.close()
    (tmp_path / "c-0" / f"{target:020d}.log.swap").write_bytes(content)
    lm = make(tmp_path)
    assert read_all(lm, "c") == expected(latest, tombstones=True)
    assert not list((tmp_path / "c-0").glob("*.swap"))
    [line] = log_events.events("log_cleaning_failed")
    assert (line["topic"], line["partition"]) == ("c", 0)
    assert line["error"] == (f"{target:020d}.log.swap holds no record batch: discarded, old "
                             "segments kept")
    lm.close()
