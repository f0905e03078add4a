"""The storage engine: append/read, roll, retention, crash recovery, idempotence, restarts."""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from trio_broker.config import load_config
from trio_broker.protocol import records as rb
from trio_broker.storage import LogManager
from trio_broker.storage import errors as se
from trio_broker.storage.log import PartitionLog, now_ms


def make(tmp_path: Path, **overrides: str) -> LogManager:
    settings = {"log.dirs": str(tmp_path)}
    settings.update({k.replace("_", "."): v for k, v in overrides.items()})
    lm = LogManager(load_config(settings))
    lm.open()
    return lm


def new_partition(lm: LogManager, config: dict[str, str] | None = None,
                  topic: str = "t") -> PartitionLog:
    """A new topic of one partition: its log."""
    lm.create_topic(topic, 1, config or {})
    log = lm.get_partition(topic, 0)
    assert log is not None
    return log


def crash(lm: LogManager) -> None:
    """What a killed process leaves: files closed, no clean-shutdown marker, lock released."""
    for log in lm.all_partitions():
        log.close()
    lm._release_lock()


def reopen(lm: LogManager, *, after_crash: bool = False) -> LogManager:
    if after_crash:
        crash(lm)
    else:
        lm.close()
    fresh = LogManager(lm.config)
    fresh.open()
    return fresh


def batch(values: list[bytes], ts: int | None = None, **kw: Any) -> bytes:
    stamp = now_ms() if ts is None else ts
    return rb.build_batch([(None, v, [], stamp) for v in values], **kw)


def values_of(data: bytes) -> list[tuple[int, bytes | None]]:
    out = []
    for position, size in rb.iter_batches(data):
        out += [(r.offset, r.value) for r in rb.decode_records(data[position:position + size])]
    return out


def read_all(lm: LogManager, topic: str, partition: int = 0) -> list[tuple[int, bytes | None]]:
    log = lm.get_partition(topic, partition)
    assert log is not None
    offset = log.log_start_offset
    found: list[tuple[int, bytes | None]] = []
    while offset < log.log_end_offset:
        got = values_of(lm.read(topic, partition, offset, 1 << 20).records)
        assert got, f"no progress at {offset}"
        found += [item for item in got if item[0] >= offset]
        offset = got[-1][0] + 1
    return found


async def test_append_assigns_dense_offsets_and_reads_whole_batches(tmp_path: Path) -> None:
    lm = make(tmp_path)
    lm.create_topic("t", 2)
    first = await lm.append("t", 0, batch([b"a", b"b", b"c"], base_offset=99))
    second = await lm.append("t", 0, batch([b"d"]))
    assert (first.base_offset, second.base_offset) == (0, 3)
    assert first.log_append_time == -1
    assert read_all(lm, "t") == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]
    # reading from the middle of a batch returns the whole batch
    assert values_of(lm.read("t", 0, 1, 1000).records)[0] == (0, b"a")
    # max_bytes smaller than a batch: still one whole batch, unless min_one_batch is off
    one = lm.read("t", 0, 0, 10)
    assert values_of(one.records) == [(0, b"a"), (1, b"b"), (2, b"c")]
    assert lm.read("t", 0, 0, 10, min_one_batch=False).records == b""
    result = lm.read("t", 0, 4, 1000)
    assert (result.records, result.high_watermark, result.log_start_offset) == (b"", 4, 0)
    with pytest.raises(se.OffsetOutOfRange):
        lm.read("t", 0, 5, 1000)
    with pytest.raises(se.UnknownTopicOrPartition):
        await lm.append("t", 2, batch([b"x"]))
    lm.close()


async def test_validation_errors(tmp_path: Path) -> None:
    lm = make(tmp_path)
    lm.create_topic("t", 1, {"max.message.bytes": "200"})
    good = batch([b"x"])
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 1
    with pytest.raises(se.CorruptMessage):
        await lm.append("t", 0, bytes(bad_crc))
    with pytest.raises(se.CorruptMessage):
        await lm.append("t", 0, good[:-3])
    with pytest.raises(se.MessageTooLarge):
        await lm.append("t", 0, batch([b"x" * 300]))
    with pytest.raises(se.InvalidRecord):
        await lm.append("t", 0, batch([b"x"], attributes=rb.CONTROL_BIT))
    # Kafka's size checks: a batch over max.message.bytes (topic) / message.max.bytes (broker
    # default) is MESSAGE_TOO_LARGE; an append over segment.bytes is RECORD_LIST_TOO_LARGE
    lm.create_topic("small-segments", 1, {"segment.bytes": "150"})
    with pytest.raises(se.RecordListTooLarge):
        await lm.append("small-segments", 0, batch([b"x" * 100]))
    await lm.append("small-segments", 0, batch([b"x" * 50]))
    other = make(tmp_path / "other", message_max_bytes="100")
    other.create_topic("broker-default", 1)
    with pytest.raises(se.MessageTooLarge):
        await other.append("broker-default", 0, batch([b"x" * 100]))
    other.close()
    assert lm.get_partition("t", 0).log_end_offset == 0  # type: ignore[union-attr]
    lm.close()


async def test_log_append_time_topics_stamp_batches(tmp_path: Path) -> None:
    lm = make(tmp_path)
    lm.create_topic("t", 1, {"message.timestamp.type": "LogAppendTime"})
    before = now_ms()
    result = await lm.append("t", 0, batch([b"x", b"y"], ts=5))
    assert result.log_append_time >= before
    data = lm.read("t", 0, 0, 1000).records
    header = rb.validate_batch(data)
    assert header.log_append_time and header.max_timestamp == result.log_append_time
    # compressed batches are stamped the same way (header only, records untouched) but are
    # decompressed once: a corrupt one is refused, never stored
    for codec in (rb.COMPRESSION_SNAPPY, rb.COMPRESSION_LZ4, rb.COMPRESSION_ZSTD):
        good = rb.build_batch([(b"k", b"v" * 100, [], 5)], attributes=codec)
        stamped = await lm.append("t", 0, good)
        data = lm.read("t", 0, stamped.base_offset, 10_000).records
        header = rb.validate_batch(data[:rb.decode_header(data).size])
        assert header.compression == codec and header.max_timestamp == stamped.log_append_time
        assert data[rb.HEADER_SIZE:header.size] == good[rb.HEADER_SIZE:]
        assert [r.value for r in rb.decode_records(data[:header.size])] == [b"v" * 100]
        bad = bytearray(good)
        bad[rb.HEADER_SIZE + 6:] = b"\xff" * (len(bad) - rb.HEADER_SIZE - 6)
        struct.pack_into(">I", bad, rb.CRC_OFFSET, rb.compute_crc(bad))
        with pytest.raises(se.CorruptMessage):
            await lm.append("t", 0, bytes(bad))
    assert lm.get_partition("t", 0).log_end_offset == 5  # type: ignore[union-attr]
    lm.close()


async def test_segments_roll_by_size_and_indexes_find_offsets(tmp_path: Path) -> None:
    lm = make(tmp_path, log_index_interval_bytes="100")
    lm.create_topic("t", 1, {"segment.bytes": "1000"})
    for i in range(60):
        await lm.append("t", 0, batch([b"%03d" % i] * 2, ts=1000 + i))
    log = lm.get_partition("t", 0)
    assert log is not None and len(log.segments) > 3
    files = sorted(p.name for p in (tmp_path / "t-0").iterdir())
    assert "00000000000000000000.log" in files and "00000000000000000000.index" in files
    assert all(s.size <= 1000 for s in log.segments)
    assert all(s.offset_index.offsets for s in log.segments[:-1])
    expected = [(2 * i + j, b"%03d" % i) for i in range(60) for j in range(2)]
    assert read_all(lm, "t") == expected
    for offset in (0, 17, 64, 119):
        assert values_of(lm.read("t", 0, offset, 50).records)[0][0] in (offset, offset - 1)
    # by timestamp through the time index; latest / earliest / max timestamp
    assert lm.list_offset("t", 0, 1000 + 33) == (66, 1033)
    assert lm.list_offset("t", 0, -2) == (0, -1)
    assert lm.list_offset("t", 0, -1) == (120, -1)
    assert lm.list_offset("t", 0, -3) == (118, 1059)
    assert lm.list_offset("t", 0, 10**13) == (-1, -1)
    lm.close()


async def test_roll_by_time(tmp_path: Path) -> None:
    lm = make(tmp_path)
    lm.create_topic("t", 1, {"segment.ms": "1"})
    await lm.append("t", 0, batch([b"a"], ts=1))  # first batch time 1 ms: long ago
    await lm.append("t", 0, batch([b"b"]))
    assert len(lm.get_partition("t", 0).segments) == 2  # type: ignore[union-attr]
    lm.close()


async def test_retention_by_time_and_bytes(tmp_path: Path) -> None:
    lm = make(tmp_path)
    lm.create_topic("old", 1, {"segment.bytes": "300", "retention.ms": "60000"})
    lm.create_topic("big", 1, {"segment.bytes": "300", "retention.bytes": "700"})
    now = now_ms()
    for i in range(10):
        await lm.append("old", 0, batch([b"x" * 50], ts=now - 3_600_000 + i))
        await lm.append("big", 0, batch([b"y" * 50]))
    await lm.append("old", 0, batch([b"fresh" * 10]))
    old, big = lm.get_partition("old", 0), lm.get_partition("big", 0)
    assert old is not None and big is not None
    old.delete_old_segments(now_ms())
    big.delete_old_segments(now_ms())
    assert read_all(lm, "old") == [(10, b"fresh" * 10)]
    assert old.log_start_offset == 10
    # Kafka's rule: delete the oldest while the log stays at or above retention.bytes
    assert big.log_start_offset > 0 and big.size_bytes - big.segments[0].size < 700 <= \
        big.size_bytes
    assert [o for o, _ in read_all(lm, "big")] == list(range(big.log_start_offset, 10))
    with pytest.raises(se.OffsetOutOfRange):
        lm.read("big", 0, 0, 100)
    # everything expired: the active segment is rolled and deleted too
    for i in range(3):
        await lm.append("old", 0, batch([b"z"], ts=now - 3_600_000 + i))
    lm.alter_topic_config("old", {"retention.ms": "1"}, incremental=True)
    old.delete_old_segments(now_ms() + 10)
    assert old.log_start_offset == old.log_end_offset == 14
    assert lm.read("old", 0, 14, 100).records == b""
    lm = reopen(lm)
    assert lm.get_partition("old", 0).log_start_offset == 14  # type: ignore[union-attr]
    assert (await lm.append("old", 0, batch([b"next"]))).base_offset == 14
    lm.close()


async def test_restart_keeps_topics_configs_and_data(tmp_path: Path) -> None:
    lm = make(tmp_path)
    info = lm.create_topic("keep", 3, {"retention.ms": "1234"})
    await lm.append("keep", 2, batch([b"one", b"two"]))
    lm = reopen(lm)
    assert lm.topics["keep"] == info
    assert read_all(lm, "keep", 2) == [(0, b"one"), (1, b"two")]
    entries = {e.name: e for e in lm.describe_topic_config("keep")}
    assert entries["retention.ms"].source == "TOPIC_CONFIG"
    assert entries["segment.bytes"].source == "DEFAULT_CONFIG"
    assert (tmp_path / ".kafka_cleanshutdown").exists() is False
    lm.close()
    assert (tmp_path / ".kafka_cleanshutdown").exists()


@pytest.mark.parametrize("damage", ["torn", "garbage", "flipped"])
async def test_crash_recovery_truncates_a_bad_tail(tmp_path: Path, damage: str) -> None:
    lm = make(tmp_path, log_index_interval_bytes="50")
    lm.create_topic("t", 1)
    for i in range(5):
        await lm.append("t", 0, batch([b"v%d" % i]))
    log_file = tmp_path / "t-0" / "00000000000000000000.log"
    good_size = log_file.stat().st_size
    last = batch([b"last"])
    await lm.append("t", 0, last)
    # the crash: files are closed without a clean shutdown, then the tail is damaged
    crash(lm)
    with open(log_file, "r+b") as handle:
        if damage == "torn":
            handle.truncate(good_size + len(last) - 7)
        elif damage == "garbage":
            handle.seek(0, os.SEEK_END)
            handle.write(b"\x00\x01garbage" * 5)
            good_size += len(last)
        else:
            handle.seek(good_size + len(last) - 2)
            handle.write(b"\xff\xff")
    (tmp_path / "t-0" / "00000000000000000000.index").write_bytes(b"\x00\x00\x07")
    lm2 = LogManager(lm.config)
    lm2.open()
    assert not lm2.clean_shutdown
    assert log_file.stat().st_size == good_size
    expected = [(i, b"v%d" % i) for i in range(5)]
    if damage == "garbage":
        expected.append((5, b"last"))
    assert read_all(lm2, "t") == expected
    assert (await lm2.append("t", 0, batch([b"after"]))).base_offset == len(expected)
    lm2.close()


async def test_missing_index_is_rebuilt_after_clean_shutdown(tmp_path: Path) -> None:
    lm = make(tmp_path, log_index_interval_bytes="10")
    lm.create_topic("t", 1, {"segment.bytes": "400"})
    for i in range(30):
        await lm.append("t", 0, batch([b"%02d" % i]))
    lm.close()
    for index in (tmp_path / "t-0").glob("*.index"):
        index.unlink()
    lm = LogManager(lm.config)
    lm.open()
    log = lm.get_partition("t", 0)
    assert log is not None and all(s.offset_index.offsets for s in log.segments if s.size > 200)
    assert [v for _, v in read_all(lm, "t")] == [b"%02d" % i for i in range(30)]
    lm.close()


@pytest.mark.parametrize("damage", ["zeros_last", "torn_last", "zeros_middle", "torn_middle",
                                    "offset_flipped_middle", "overlapping_copy"])
async def test_damage_found_after_a_clean_shutdown_is_cut_alone(
        tmp_path: Path, damage: str, log_events: Any) -> None:
    """A clean shutdown trusts the indexes, but not a tail that does not hold up: a zero-filled
    or torn tail, a base offset no segment can hold, a stray file overlapping its neighbours.
    The damaged segment is cut at its first bad batch; the segments after it stay (they were
    written after it was whole); the log end is right, so later appends are readable."""
    lm = make(tmp_path)
    lm.create_topic("t", 1, {"segment.bytes": "400"})
    for i in range(30):
        await lm.append("t", 0, batch([b"%02d" % i]))
    lm.close()
    logs = sorted((tmp_path / "t-0").glob("*.log"))
    bases = [int(p.name[:-4]) for p in logs]
    assert len(bases) > 3
    lost: set[int] = set()
    target = logs[1] if "middle" in damage or damage == "overlapping_copy" else logs[-1]
    size = target.stat().st_size
    first_size = len(batch([b"00"]))
    with open(target, "r+b") as handle:
        if damage.startswith("zeros"):
            handle.seek(0, os.SEEK_END)
            handle.write(bytes(4096))  # a preallocated tail
        elif damage.startswith("torn"):
            handle.truncate(size - 10)
            end = bases[bases.index(int(target.name[:-4])) + 1] if target != logs[-1] else 30
            lost = {end - 1}
        elif damage == "offset_flipped_middle":
            handle.seek(first_size)  # the second batch's base offset, outside the CRC
            handle.write(b"\x10")
            lost = set(range(bases[1] + 1, bases[2]))
    if damage == "overlapping_copy":
        (tmp_path / "t-0" / f"{bases[1] + 2:020d}.log").write_bytes(target.read_bytes())
    lm = LogManager(lm.config)
    lm.open()
    assert lm.clean_shutdown
    kept = [(i, b"%02d" % i) for i in range(30) if i not in lost]
    assert read_all(lm, "t") == kept
    truncated = log_events.events("log_tail_truncated")
    assert len(truncated) == 1 and truncated[0]["bytes"] > 0
    log = lm.get_partition("t", 0)
    assert log is not None and log.log_end_offset == (29 if damage == "torn_last" else 30)
    after = await lm.append("t", 0, batch([b"after"]))
    assert read_all(lm, "t") == [*kept, (after.base_offset, b"after")]
    lm.close()


async def test_log_files_not_named_by_twenty_digits_are_not_segments(
        tmp_path: Path, log_events: Any) -> None:
    """``5.log`` used to be opened as a segment at base 5 (creating an empty
    ``00000000000000000005.log`` inside segment 0's offsets, with an index-rebuilt warning)."""
    lm = make(tmp_path)
    lm.create_topic("t", 1)
    for i in range(3):
        await lm.append("t", 0, batch([b"v%d" % i]))
    lm.close()
    directory = tmp_path / "t-0"
    (directory / "5.log").write_bytes((directory / f"{0:020d}.log").read_bytes())
    (directory / "0000000000000000000007.log").write_bytes(b"")
    lm = LogManager(lm.config)
    lm.open()
    log = lm.get_partition("t", 0)
    assert log is not None and [s.base_offset for s in log.segments] == [0]
    assert {p.name for p in directory.glob("*.log")} == {
        "0000000000000000000007.log", f"{0:020d}.log", "5.log"}
    assert log_events.events("log_index_rebuilt") == []
    assert read_all(lm, "t") == [(i, b"v%d" % i) for i in range(3)]
    lm.close()


async def test_crash_recovery_cuts_a_batch_whose_base_offset_overflows_its_segment(
        tmp_path: Path) -> None:
    """The base offset field is outside the CRC: a flipped high bit must not move the log end
    by 2^60 (Kafka's ``ensureOffsetInRange`` in ``LogSegment.recover``)."""
    lm = make(tmp_path)
    lm.create_topic("t", 1)
    for i in range(5):
        await lm.append("t", 0, batch([b"v%d" % i]))
    crash(lm)
    log_file = tmp_path / "t-0" / "00000000000000000000.log"
    with open(log_file, "r+b") as handle:
        handle.seek(3 * len(batch([b"v0"])))
        handle.write(b"\x10")
    lm = LogManager(lm.config)
    lm.open()
    assert read_all(lm, "t") == [(i, b"v%d" % i) for i in range(3)]
    assert (await lm.append("t", 0, batch([b"after"]))).base_offset == 3
    lm.close()


async def test_a_lost_producer_id_block_never_reissues_a_known_id(tmp_path: Path) -> None:
    """Without ``producer-id-block`` the ids restarted at 0: a new idempotent producer was
    given the id of one the partition still knew, and its first batch (sequence 0) was answered
    as a duplicate and dropped. A garbage file is refused, naming it."""
    lm = make(tmp_path)
    lm.create_topic("t", 1)
    pid = lm.allocate_producer_id()
    await lm.append("t", 0, batch([b"old"], producer_id=pid, producer_epoch=0,
                                  base_sequence=0))
    lm.close()
    block = tmp_path / "producer-id-block"
    block.write_text("garbage\n")
    with pytest.raises(se.StorageError, match="producer-id-block is corrupt"):
        LogManager(lm.config).open()
    block.unlink()
    lm = LogManager(lm.config)
    lm.open()
    fresh = lm.allocate_producer_id()
    assert fresh > pid
    result = await lm.append("t", 0, batch([b"new"], producer_id=fresh, producer_epoch=0,
                                           base_sequence=0))
    assert not result.duplicate
    assert read_all(lm, "t") == [(0, b"old"), (1, b"new")]
    lm.close()


async def test_idempotent_duplicates_and_sequence_errors(tmp_path: Path) -> None:
    lm = make(tmp_path)
    lm.create_topic("t", 1)
    pid = lm.allocate_producer_id()
    b0 = batch([b"a", b"b"], producer_id=pid, producer_epoch=0, base_sequence=0)
    b1 = batch([b"c"], producer_id=pid, producer_epoch=0, base_sequence=2)
    assert (await lm.append("t", 0, b0)).base_offset == 0
    assert (await lm.append("t", 0, b1)).base_offset == 2
    again = await lm.append("t", 0, b0)  # a retry of the first batch
    assert (again.base_offset, again.duplicate) == (0, True)
    assert lm.get_partition("t", 0).log_end_offset == 3  # type: ignore[union-attr]
    gap = batch([b"d"], producer_id=pid, producer_epoch=0, base_sequence=5)
    with pytest.raises(se.OutOfOrderSequence):
        await lm.append("t", 0, gap)
    # a new epoch must restart at sequence 0
    with pytest.raises(se.OutOfOrderSequence):
        await lm.append("t", 0, batch([b"f"], producer_id=pid, producer_epoch=1,
                                      base_sequence=7))
    assert (await lm.append("t", 0, batch([b"g"], producer_id=pid, producer_epoch=1,
                                          base_sequence=0))).base_offset == 3
    with pytest.raises(se.InvalidProducerEpoch):
        await lm.append("t", 0, batch([b"h"], producer_id=pid, producer_epoch=0,
                                      base_sequence=3))
    # state survives a clean restart (snapshot) and a crash (replay of batch headers)
    for crashed in (False, True):
        lm = reopen(lm, after_crash=crashed)
        dup = await lm.append("t", 0, batch([b"g"], producer_id=pid, producer_epoch=1,
                                            base_sequence=0))
        assert (dup.base_offset, dup.duplicate) == (3, True)
        with pytest.raises(se.OutOfOrderSequence):
            await lm.append("t", 0, batch([b"x"], producer_id=pid, producer_epoch=1,
                                          base_sequence=9))
    # producer ids are never reused across restarts
    assert lm.allocate_producer_id() > pid
    lm.close()


async def test_a_batch_of_a_new_epoch_is_never_taken_for_a_duplicate(tmp_path: Path) -> None:
    """Duplicate detection compares the producer epoch: after a bump (a restart, a recovery)
    the producer starts again at sequence 0, and its first batches cover the same sequence
    ranges as batches of the old epoch. Answering them as retries (the old offsets, nothing
    written) would acknowledge records that were never stored. Batches of several records, so
    the ranges really coincide (a one-record batch at sequence 0 matches no earlier batch)."""
    lm = make(tmp_path)
    lm.create_topic("t", 1)
    pid = lm.allocate_producer_id()

    def produce(epoch: int, seq: int, *values: bytes) -> bytes:
        return batch(list(values), producer_id=pid, producer_epoch=epoch, base_sequence=seq)

    def log_end() -> int:
        log = lm.get_partition("t", 0)
        assert log is not None
        return log.log_end_offset

    old = [produce(0, 0, b"a0", b"a1", b"a2"), produce(0, 3, b"b0", b"b1"),
           produce(0, 5, b"c0", b"c1", b"c2")]
    assert [(await lm.append("t", 0, b)).base_offset for b in old] == [0, 3, 5]
    assert log_end() == 8
    # Within the epoch a retry is a duplicate (what a new epoch must not be taken for).
    retry = await lm.append("t", 0, old[0])
    assert (retry.base_offset, retry.duplicate, log_end()) == (0, True, 8)

    # Epoch 1: the same sequence ranges and record counts as old[0] and old[1], new records.
    first = await lm.append("t", 0, produce(1, 0, b"d0", b"d1", b"d2"))
    assert (first.base_offset, first.duplicate) == (8, False)
    assert log_end() == 11
    second = await lm.append("t", 0, produce(1, 3, b"e0", b"e1"))
    assert (second.base_offset, second.duplicate) == (11, False)
    assert log_end() == 13
    # Now a retry of the new epoch's first batch is the duplicate, answered with ITS offsets.
    again = await lm.append("t", 0, produce(1, 0, b"d0", b"d1", b"d2"))
    assert (again.base_offset, again.duplicate, log_end()) == (8, True, 13)
    assert read_all(lm, "t")[8:] == [(8, b"d0"), (9, b"d1"), (10, b"d2"),
                                     (11, b"e0"), (12, b"e1")]

    # The same after a crash (state rebuilt from the log): epoch 2 repeats epoch 1's ranges.
    lm = reopen(lm, after_crash=True)
    third = await lm.append("t", 0, produce(2, 0, b"f0", b"f1", b"f2"))
    assert (third.base_offset, third.duplicate, log_end()) == (13, False, 16)
    assert read_all(lm, "t")[13:] == [(13, b"f0"), (14, b"f1"), (15, b"f2")]
    lm.close()


async def test_flush_policy_advances_the_recovery_point(tmp_path: Path) -> None:
    lm = make(tmp_path, log_flush_interval_messages="2")
    lm.create_topic("t", 1)
    log = lm.get_partition("t", 0)
    assert log is not None
    await lm.append("t", 0, batch([b"a"]))
    assert log.recovery_point == 0 and log.unflushed_messages == 1
    await lm.append("t", 0, batch([b"b"]))
    assert log.recovery_point == 2 and log.unflushed_messages == 0
    lm.close()


async def test_a_cancelled_append_still_finishes_its_flush(tmp_path: Path) -> None:
    """The flush an append waits for is shielded: a produce handled inline in a connection
    that is being cancelled (idle expiry, shutdown) never leaves its records appended but
    unflushed (RequestHandlerPool.handle_inline has no shield of its own)."""
    lm = make(tmp_path, log_flush_interval_messages="1")
    lm.create_topic("t", 1)
    log = lm.get_partition("t", 0)
    assert log is not None
    with trio.CancelScope() as scope:
        scope.cancel()
        result = await lm.append("t", 0, batch([b"a"]))
        assert log.recovery_point == 1 and log.unflushed_messages == 0
        await trio.lowlevel.checkpoint()  # the cancellation takes effect after the append
    assert scope.cancelled_caught and result.base_offset == 0
    lm.close()


async def test_topic_admin(tmp_path: Path) -> None:
    lm = make(tmp_path)
    for bad in ("", ".", "..", "a" * 250, "bad name", "bad/name"):
        with pytest.raises(se.InvalidTopic):
            lm.create_topic(bad, 1)
    lm.create_topic("a.b", 1)
    with pytest.raises(se.InvalidTopic):
        lm.create_topic("a_b", 1)
    with pytest.raises(se.TopicAlreadyExists):
        lm.create_topic("a.b", 1)
    with pytest.raises(se.InvalidPartitions):
        lm.create_topic("zero", 0)
    with pytest.raises(se.InvalidConfig):
        lm.create_topic("c", 1, {"no.such.config": "1"})
    with pytest.raises(se.InvalidConfig):
        lm.create_topic("c", 1, {"retention.ms": "soon"})
    assert "c" not in lm.topics
    assert lm.create_topic("v", 2, validate_only=True).num_partitions == 2
    assert "v" not in lm.topics and not (tmp_path / "v-0").exists()
    lm.create_partitions("a.b", 3)
    with pytest.raises(se.InvalidPartitions):
        lm.create_partitions("a.b", 2)
    assert (tmp_path / "a.b-2").is_dir()
    await lm.append("a.b", 2, batch([b"x"]))
    lm.alter_topic_config("a.b", {"retention.ms": "5", "segment.bytes": "1000"},
                          incremental=True)
    lm.alter_topic_config("a.b", {"retention.ms": None}, incremental=True)
    assert dict(lm.topics["a.b"].configs) == {"segment.bytes": "1000"}
    lm.alter_topic_config("a.b", {"flush.ms": "10"}, incremental=False)
    assert dict(lm.topics["a.b"].configs) == {"flush.ms": "10"}
    lm.delete_topic("a.b")
    assert not (tmp_path / "a.b-0").exists() and "a.b" not in lm.topics
    with pytest.raises(se.UnknownTopicOrPartition):
        lm.delete_topic("a.b")
    lm = reopen(lm)
    assert "a.b" not in lm.topics
    lm.close()


def test_a_second_manager_on_the_same_directory_is_refused(tmp_path: Path) -> None:
    lm = make(tmp_path)
    with pytest.raises(se.KafkaStorageError):
        make(tmp_path)
    lm.close()
    make(tmp_path).close()  # released at close


async def test_failing_background_job_does_not_stop_the_broker(
        tmp_path: Path, autojump_clock: trio.testing.MockClock, log_events: Any) -> None:
    """A periodic job that raises (a disk error during retention, say) is logged and retried,
    as Kafka's scheduler does; it never takes the broker down."""
    manager = LogManager(load_config({"log.dirs": str(tmp_path),
                                      "log.retention.check.interval.ms": "1000"}))
    manager.open()
    calls = []

    def broken_retention(now: int, limit: int | None = None,
                         retired: list[Path] | None = None) -> None:
        calls.append(now)
        raise OSError(5, "Input/output error")

    manager.create_topic("t", 1)
    log = manager.get_partition("t", 0)
    assert log is not None
    log.delete_old_segments = broken_retention  # type: ignore[method-assign]
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        await trio.sleep(3.5)
        nursery.cancel_scope.cancel()
    manager.close()
    assert len(calls) == 3
    failed = log_events.events("background_task_failed")
    assert len(failed) == 3 and failed[0]["task"] == "_retention_pass"


async def test_delete_records_moves_the_log_start_offset_durably(tmp_path: Path) -> None:
    lm = make(tmp_path)
    lm.create_topic("d", 1, {"segment.bytes": "300"})
    lm.create_topic("compacted", 1, {"cleanup.policy": "compact"})
    for i in range(10):
        await lm.append("d", 0, batch([b"%02d" % i * 20]))
    log = lm.get_partition("d", 0)
    assert log is not None and len(log.segments) > 3
    segments_before = len(log.segments)
    assert await lm.delete_records("d", 0, 7) == 7
    # whole segments below the new start are gone; the one holding offset 7 stays
    assert len(log.segments) < segments_before and log.segments[0].base_offset <= 7
    assert lm.list_offset("d", 0, -2) == (7, -1)
    with pytest.raises(se.OffsetOutOfRange):
        lm.read("d", 0, 6, 1000)
    assert [o for o, _ in read_all(lm, "d") if o >= 7] == [7, 8, 9]
    # lower than the current start: no change; past the high watermark or negative: refused
    assert await lm.delete_records("d", 0, 3) == 7
    with pytest.raises(se.OffsetOutOfRange):
        await lm.delete_records("d", 0, 11)
    with pytest.raises(se.OffsetOutOfRange):
        await lm.delete_records("d", 0, -5)
    with pytest.raises(se.PolicyViolation):
        await lm.delete_records("compacted", 0, 0)
    # the start survives a clean restart and a crash (Kafka's log-start-offset checkpoint)
    lm = reopen(lm)
    assert lm.list_offset("d", 0, -2) == (7, -1)
    lm = reopen(lm, after_crash=True)
    assert lm.list_offset("d", 0, -2) == (7, -1)
    with pytest.raises(se.OffsetOutOfRange):
        lm.read("d", 0, 6, 1000)
    # -1 deletes up to the high watermark; appends continue from there
    assert await lm.delete_records("d", 0, -1) == 10
    assert (await lm.append("d", 0, batch([b"after"]))).base_offset == 10
    assert read_all(lm, "d") == [(10, b"after")]
    lm.close()


@pytest.mark.parametrize("name", ["log-start-offset-checkpoint",
                                  "recovery-point-offset-checkpoint",
                                  "cleaner-offset-checkpoint"])
@pytest.mark.parametrize("content", ["0\n1\nd 0 x\n", "zz\n", "0\n2\nd 0 3\n",
                                     "0\n1\nd 0 3 4\n", "1\n0\n"])
async def test_a_malformed_checkpoint_file_is_an_error_naming_it(
        tmp_path: Path, name: str, content: str) -> None:
    """As Kafka's CheckpointFile reader. A malformed log-start checkpoint was read as empty,
    so the records DeleteRecords had removed came back after a restart."""
    lm = make(tmp_path)
    lm.create_topic("d", 1)
    for i in range(5):
        await lm.append("d", 0, batch([b"%d" % i]))
    assert await lm.delete_records("d", 0, 3) == 3
    lm.close()
    good = (tmp_path / name).read_text() if (tmp_path / name).exists() else None
    (tmp_path / name).write_text(content)
    with pytest.raises(se.KafkaStorageError, match=f"Malformed checkpoint file .*{name}"):
        LogManager(lm.config).open()
    if good is None:
        (tmp_path / name).unlink()
    else:
        (tmp_path / name).write_text(good)
    lm = LogManager(lm.config)
    lm.open()
    assert lm.list_offset("d", 0, -2) == (3, -1)
    lm.close()


async def test_retention_keeps_working_after_delete_records(tmp_path: Path) -> None:
    lm = make(tmp_path)
    lm.create_topic("r", 1, {"segment.bytes": "300", "retention.bytes": "700"})
    now = now_ms()
    for _ in range(10):
        await lm.append("r", 0, batch([b"y" * 50]))
    log = lm.get_partition("r", 0)
    assert log is not None
    # a start offset inside a segment is kept by size-based retention when larger
    second = log.segments[1].base_offset
    await lm.delete_records("r", 0, second + 1)
    assert log.segments[0].base_offset == second
    log.delete_old_segments(now)
    assert log.log_start_offset >= second + 1
    assert log.size_bytes - log.segments[0].size < 700 <= log.size_bytes
    # time-based retention moves the start past a DeleteRecords start too
    lm.alter_topic_config("r", {"retention.ms": "1", "retention.bytes": "-1"}, incremental=True)
    log.delete_old_segments(now_ms() + 3_600_000)
    assert log.log_start_offset == log.log_end_offset == 10
    lm = reopen(lm)
    assert lm.list_offset("r", 0, -2) == (10, -1)
    lm.close()


def with_header_max_timestamp(data: bytes, max_timestamp: int, *, gzip: bool = False,
                              codec: int = 0) -> bytes:
    """A client's batch whose header max timestamp is ``max_timestamp`` whatever its records say
    (sarama 1.22 leaves it unset), optionally compressed (``gzip`` through zlib, or
    ``codec``); CRC valid."""
    import struct
    import zlib

    from trio_broker.protocol import compression

    out = bytearray(data[:rb.HEADER_SIZE])
    body = data[rb.HEADER_SIZE:]
    if gzip:
        packer = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)
        body = packer.compress(body) + packer.flush()
        struct.pack_into(">h", out, rb.ATTRIBUTES_OFFSET, rb.COMPRESSION_GZIP)
    elif codec:
        body = compression.compress(codec, body)
        struct.pack_into(">h", out, rb.ATTRIBUTES_OFFSET, codec)
    out += body
    struct.pack_into(">i", out, 8, len(out) - rb.LOG_OVERHEAD)
    struct.pack_into(">q", out, rb.MAX_TIMESTAMP_OFFSET, max_timestamp)
    struct.pack_into(">I", out, rb.CRC_OFFSET, rb.compute_crc(out))
    return bytes(out)


@pytest.mark.parametrize(("gzip", "codec"), [
    (False, 0), (True, 0), (False, rb.COMPRESSION_SNAPPY), (False, rb.COMPRESSION_LZ4),
    (False, rb.COMPRESSION_ZSTD)], ids=["none", "gzip", "snappy", "lz4", "zstd"])
async def test_max_timestamp_is_derived_from_the_records(tmp_path: Path, gzip: bool,
                                                         codec: int) -> None:
    lm = make(tmp_path, log_index_interval_bytes="0")
    lm.create_topic("ts", 1)
    base = 1_700_000_000_000
    for n, (claimed, stamps) in enumerate([(-1, (0, 5, 3)), (base, (10, 20)),
                                           (base + 999_999, (30, 31))]):
        records = [(None, b"%d" % n, [], base + s) for s in stamps]
        sent = with_header_max_timestamp(rb.build_batch(records), claimed, gzip=gzip,
                                         codec=codec)
        await lm.append("ts", 0, sent)
    data = lm.read("ts", 0, 0, 1 << 20).records
    headers = [rb.validate_batch(data[p:p + s]) for p, s in rb.iter_batches(data)]  # CRCs ok
    assert [h.max_timestamp for h in headers] == [base + 5, base + 20, base + 31]
    # by timestamp: the first record at or after it, through the time index
    assert lm.list_offset("ts", 0, base + 4) == (1, base + 5)
    assert lm.list_offset("ts", 0, base + 6) == (3, base + 10)
    assert lm.list_offset("ts", 0, base + 21) == (5, base + 30)
    assert lm.list_offset("ts", 0, base + 32) == (-1, -1)
    assert lm.list_offset("ts", 0, -3) == (6, base + 31)
    # the rewritten headers are what recovery and the indexes see after a crash too
    lm = reopen(lm, after_crash=True)
    assert lm.list_offset("ts", 0, base + 4) == (1, base + 5)
    assert lm.list_offset("ts", 0, -3) == (6, base + 31)
    # a record running past its batch is CORRUPT_MESSAGE
    bad = bytearray(rb.build_batch([(None, b"x", [], base)]))
    bad[rb.HEADER_SIZE] = 0x7E  # record length 63: past the end
    with pytest.raises(se.CorruptMessage):
        await lm.append("ts", 0, with_header_max_timestamp(bytes(bad), base))
    lm.close()


async def test_no_index_rebuilt_warning_for_partitions_created_since_a_clean_start(
        tmp_path: Path, log_events: Any) -> None:
    lm = make(tmp_path)
    lm.create_topic("before", 1)
    lm = reopen(lm)  # a clean restart: the previous run's flag says "clean"
    lm.create_topic("after", 2)
    lm.create_partitions("before", 3)
    for topic, partitions in (("after", 2), ("before", 3)):
        for partition in range(partitions):
            await lm.append(topic, partition, batch([b"x"]))
            assert values_of(lm.read(topic, partition, 0, 1000).records) == [(0, b"x")]
    lm = reopen(lm)
    for topic, partitions in (("after", 2), ("before", 3)):
        for partition in range(partitions):
            assert values_of(lm.read(topic, partition, 0, 1000).records) == [(0, b"x")]
    # and after a crash, partitions created by the recovering run are new, not suspect
    lm = reopen(lm, after_crash=True)
    lm.create_topic("post-crash", 1)
    await lm.append("post-crash", 0, batch([b"y"]))
    lm = reopen(lm)
    assert log_events.events("log_index_rebuilt") == []
    assert log_events.events("log_tail_truncated") == []
    lm.close()


async def test_record_timestamps_are_checked_against_the_topic_bounds(tmp_path: Path) -> None:
    """KIP-937: message.timestamp.before/after.max.ms (or the deprecated difference.max.ms)
    bound every CreateTime record's timestamp, not only the batch's."""
    lm = make(tmp_path)
    lm.create_topic("bounded", 1, {"message.timestamp.before.max.ms": "60000",
                                   "message.timestamp.after.max.ms": "1000"})
    lm.create_topic("legacy", 1, {"message.timestamp.difference.max.ms": "60000"})
    lm.create_topic("free", 1)
    now = now_ms()
    ok = rb.build_batch([(None, b"a", [], now - 30_000), (None, b"b", [], now)])
    old_inside = rb.build_batch([(None, b"a", [], now), (None, b"b", [], now - 3_600_000)])
    future = rb.build_batch([(None, b"a", [], now), (None, b"b", [], now + 600_000)])
    assert (await lm.append("bounded", 0, ok)).base_offset == 0
    for topic in ("bounded", "legacy"):  # the difference bounds both sides
        for bad in (old_inside, future):  # the out-of-range record is not the batch's max
            with pytest.raises(se.InvalidTimestamp):
                await lm.append(topic, 0, bad)
    for batch_ in (ok, old_inside, future):  # unbounded by default
        await lm.append("free", 0, batch_)
    lm.alter_topic_config("bounded", {"message.timestamp.type": "LogAppendTime"},
                          incremental=True)
    await lm.append("bounded", 0, future)  # LogAppendTime: the broker stamps, nothing checked
    assert lm.get_partition("bounded", 0).log_end_offset == 4  # type: ignore[union-attr]
    lm.close()


async def test_a_recreated_topic_does_not_inherit_a_deleted_log_start_offset(
        tmp_path: Path) -> None:
    lm = make(tmp_path)
    lm.create_topic("again", 1)
    await lm.append("again", 0, batch([b"a", b"b", b"c"]))
    assert await lm.delete_records("again", 0, 2) == 2
    lm.delete_topic("again")
    lm.create_topic("again", 1)
    await lm.append("again", 0, batch([b"new"]))
    await lm.flush("again", 0)
    lm = reopen(lm, after_crash=True)  # no periodic checkpoint ran in between
    assert read_all(lm, "again") == [(0, b"new")]
    lm.close()


def test_a_lone_plain_batch_is_stored_as_the_general_path_stores_it(tmp_path: Path) -> None:
    """``Segment.record_one`` (the log's path for one batch without a producer) leaves the
    same file, indexes, max timestamp and roll base as ``Segment.record`` with headers."""
    from trio_broker.storage.segment import Segment

    (tmp_path / "fast").mkdir()
    (tmp_path / "general").mkdir()
    fast = Segment(tmp_path / "fast", 0, index_max_bytes=4096, index_interval_bytes=300,
                   created_ms=0)
    general = Segment(tmp_path / "general", 0, index_max_bytes=4096, index_interval_bytes=300,
                      created_ms=0)
    offset = 0
    # Timestamps that go up and down, batches of one to three records, sizes that cross the
    # index interval at different points.
    for step, stamp in enumerate([5_000, 4_000, 9_000, 9_000, 2_000, 12_000, 11_000] * 3):
        count = step % 3 + 1
        batch = bytearray(rb.build_batch(
            [(None, b"v" * (40 * step), (), stamp + i) for i in range(count)]))
        rb.assign_offset(batch, 0, offset)
        header = rb.decode_header(batch)
        fast.write(batch)
        fast.record_one(len(batch), header.last_offset, header.max_timestamp)
        general.write(batch)
        general.record(len(batch), [(0, header)])
        offset = header.next_offset
    for name in ("size", "next_offset", "max_timestamp", "offset_of_max_timestamp",
                 "roll_base_ms", "bytes_since_index"):
        assert getattr(fast, name) == getattr(general, name), name
    assert list(fast.offset_index.offsets) == list(general.offset_index.offsets)
    assert list(fast.offset_index.positions) == list(general.offset_index.positions)
    assert len(fast.offset_index.offsets) > 2
    assert list(fast.time_index.timestamps) == list(general.time_index.timestamps)
    assert list(fast.time_index.offsets) == list(general.time_index.offsets)
    assert fast.pread(fast.size, 0) == general.pread(general.size, 0)


def test_topics_file_follows_every_change_and_survives_a_crash(tmp_path: Path) -> None:
    """Each topic's entry of ``topics.json`` is encoded when that topic changes: after creates,
    a config change, more partitions, a delete and a re-create under the same name, the file
    holds exactly the live topics with their ids, partitions and configs, and a broker
    restarted after a crash finds them as they were."""
    import json

    lm = make(tmp_path)
    for name in ("a", "b", "c"):
        lm.create_topic(name, 1)
    lm.alter_topic_config("b", {"retention.ms": "60000"}, incremental=True)
    lm.create_partitions("a", 3)
    first_c = lm.topics["c"].topic_id
    lm.delete_topic("c")
    lm.create_topic("c", 2, {"cleanup.policy": "compact"})
    assert lm.topics["c"].topic_id != first_c
    expected = {name: (str(info.topic_id), info.num_partitions, dict(info.configs))
                for name, info in lm.topics.items()}
    assert expected["a"][1:] == (3, {}) and expected["b"][2] == {"retention.ms": "60000"}
    stored = json.loads((tmp_path / "topics.json").read_text(encoding="utf-8"))
    assert {t["name"]: (t["topic_id"], t["num_partitions"], t["configs"])
            for t in stored["topics"]} == expected
    fresh = reopen(lm, after_crash=True)
    assert {name: (str(info.topic_id), info.num_partitions, dict(info.configs))
            for name, info in fresh.topics.items()} == expected
    fresh.close()


def test_colliding_names_checked_against_live_topics_only(tmp_path: Path) -> None:
    """'.' and '_' collide (Kafka's metric names); a deleted topic's name collides no more,
    and the one created in its place collides again, also after a restart."""
    lm = make(tmp_path)
    lm.create_topic("x.y", 1)
    with pytest.raises(se.InvalidTopic, match="collides with existing topic: x.y"):
        lm.create_topic("x_y", 1)
    lm.delete_topic("x.y")
    lm.create_topic("x_y", 1)
    with pytest.raises(se.InvalidTopic, match="collides with existing topic: x_y"):
        lm.create_topic("x.y", 1)
    fresh = reopen(lm)
    with pytest.raises(se.InvalidTopic, match="collides with existing topic: x_y"):
        fresh.create_topic("x.y", 1)
    fresh.close()
