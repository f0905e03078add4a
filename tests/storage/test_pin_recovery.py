"""Opening a partition after a crash or a clean shutdown, as Kafka's ``LogLoader`` does: what
the mutation run over ``storage/log`` found unpinned (docs/development.md, "Eighth run").

- A damaged segment below the recovery point (flushed: acknowledged data after it was synced)
  is cut alone; one above it is cut and every later segment dropped (``recoverLog``: unflushed
  segments after a corrupt one cannot follow on from it).
- A segment cut to nothing before the last one is removed; the recovery point after a crash
  is the checkpoint's (or the log end, if lower).
- Debris is cleared: ``*.tmp`` files, index files without a log (any name), and a ``.log`` of
  24 characters that are not 20 digits is not a segment.
- Each repair is logged with the segment it touched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.storage.test_storage import batch, crash, make, new_partition, read_all
from trio_broker.protocol import records as rb
from trio_broker.storage import LogManager
from trio_broker.storage.log import PartitionLog
from trio_broker.storage.txn_index import build_marker


async def written(tmp_path: Path, flushed: int, total: int) -> tuple[LogManager, PartitionLog]:
    """``total`` one-record batches in segments of about six, the first ``flushed`` of them
    synced and checkpointed as the recovery point, then a crash (files closed, no clean
    shutdown); the log manager opened again and the partition."""
    lm = make(tmp_path)
    log = new_partition(lm, {"segment.bytes": "400"})
    for i in range(total):
        if i == flushed:
            await log.flush()
            lm._write_recovery_points()
        log.append(batch([b"%02d" % i]), from_client=False, producer_check=False)
    if flushed >= total:
        await log.flush()
        lm._write_recovery_points()
    crash(lm)
    return lm, log


def tear(path: Path) -> None:
    """Cut the last 10 bytes of a segment file: its last batch is torn."""
    with open(path, "r+b") as handle:
        handle.truncate(path.stat().st_size - 10)


def reopen(lm: LogManager) -> tuple[LogManager, PartitionLog]:
    fresh = LogManager(lm.config)
    fresh.open()
    log = fresh.get_partition("t", 0)
    assert log is not None
    return fresh, log


@pytest.mark.parametrize("flushed", [24, 10])  # 10: the damaged segment ends exactly there
async def test_a_damaged_flushed_segment_is_cut_alone_after_a_crash(tmp_path: Path,
                                                                     flushed: int) -> None:
    lm, log = await written(tmp_path, flushed=flushed, total=30)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 4 and bases[2] <= flushed
    tear(log.segments[1].log_path)  # below the recovery point
    lm, log = reopen(lm)
    lost = bases[2] - 1  # the torn batch: segment 1's last
    assert read_all(lm, "t") == [(i, b"%02d" % i) for i in range(30) if i != lost]
    assert log.log_end_offset == 30
    lm.close()


async def test_a_damaged_unflushed_segment_drops_every_later_one(
        tmp_path: Path, log_events: Any) -> None:
    lm, log = await written(tmp_path, flushed=6, total=30)
    bases = [s.base_offset for s in log.segments]
    damaged = next(n for n, b in enumerate(bases) if b >= 6 and n + 2 < len(bases))
    path = log.segments[damaged].log_path
    size = path.stat().st_size
    tear(path)
    later = [s.log_path for s in log.segments[damaged + 1:]]
    lm, log = reopen(lm)
    cut = bases[damaged + 1] - 1
    assert read_all(lm, "t") == [(i, b"%02d" % i) for i in range(cut)]
    assert log.log_end_offset == cut
    assert [s.base_offset for s in log.segments] == bases[:damaged + 1]
    assert not any(p.exists() for p in later)
    [line] = log_events.events("log_tail_truncated")
    assert {k: line[k] for k in ("topic", "partition", "segment")} == {
        "topic": "t", "partition": 0, "segment": bases[damaged]}
    assert line["bytes"] == size - 10 - path.stat().st_size > 0
    assert line["reason"] == "torn or undersized batch"
    # The recovery point is the checkpoint's, not the log end; the next flush syncs what lies
    # past it (no message was appended since the open) and moves it.
    assert log.recovery_point == 6 and log.unflushed_messages == 0
    await log.flush()
    assert log.recovery_point == cut
    lm.close()


@pytest.mark.parametrize("which", [1, -2])
async def test_a_segment_cut_to_nothing_before_the_last_is_removed(
        tmp_path: Path, log_events: Any, which: int) -> None:
    lm, log = await written(tmp_path, flushed=30, total=30)
    bases = [s.base_offset for s in log.segments]
    which %= len(bases)
    with open(log.segments[which].log_path, "r+b") as handle:
        handle.write(b"\xff" * 12)  # its first batch's offset and length: nothing holds up
    lm, log = reopen(lm)
    assert bases[which] not in [s.base_offset for s in log.segments]
    deleted = [(e["topic"], e["partition"], e["segment"], e["size"], e["reason"])
               for e in log_events.events("log_segment_deleted")]
    assert deleted == [("t", 0, bases[which], 0, "empty_after_recovery")]
    kept = [o for o, _ in read_all(lm, "t")]
    assert kept == [i for i in range(30) if not bases[which] <= i < bases[which + 1]]
    lm.close()


async def test_debris_is_cleared_and_odd_names_are_not_segments(
        tmp_path: Path, log_events: Any) -> None:
    lm = make(tmp_path)
    lm.create_topic("t", 1)
    for i in range(3):
        await lm.append("t", 0, batch([b"%d" % i]))
    lm.close()
    directory = tmp_path / "t-0"
    debris = [directory / "00000000000000000000.log.tmp", directory / "x.tmp",
              directory / f"{99:020d}.index", directory / f"{99:020d}.timeindex",
              directory / "foo.index"]
    for path in debris:
        path.write_bytes(b"\x00" * 8)
    odd = directory / "0000000000000000000x.log"  # 24 characters, not 20 digits
    odd.write_bytes(b"")
    lm = make(tmp_path)
    assert not any(p.exists() for p in debris)
    assert odd.exists()
    log = lm.get_partition("t", 0)
    assert log is not None and [s.base_offset for s in log.segments] == [0]
    assert read_all(lm, "t") == [(i, b"%d" % i) for i in range(3)]
    assert log_events.events("log_index_rebuilt") == []
    lm.close()


async def test_a_missing_index_at_a_clean_open_is_rebuilt_and_logged(
        tmp_path: Path, log_events: Any) -> None:
    lm = make(tmp_path)
    lm.create_topic("t", 1, {"segment.bytes": "400"})
    for i in range(20):
        await lm.append("t", 0, batch([b"%02d" % i]))
    lm.close()
    directory = tmp_path / "t-0"
    second = sorted(directory.glob("*.index"))[1]
    second.unlink()
    lm = make(tmp_path)
    assert [(e["topic"], e["partition"], e["segment"])
            for e in log_events.events("log_index_rebuilt")] == [
        ("t", 0, int(second.name.split(".")[0]))]
    assert [v for _, v in read_all(lm, "t")] == [b"%02d" % i for i in range(20)]
    lm.close()


async def test_without_snapshots_transactions_are_replayed_from_the_log(tmp_path: Path) -> None:
    # No producer snapshot and no transaction index left (lost with the crash): the open replays
    # the batches; an abort marker must be recognised as one, or a read_committed consumer is
    # given the aborted records and the last stable offset never passes the transaction.
    lm = make(tmp_path)
    log = new_partition(lm)
    now = 1_700_000_000_000
    log.append(rb.build_batch([(None, b"aborted", [], now)], producer_id=42, producer_epoch=0,
                              base_sequence=0, attributes=rb.TRANSACTIONAL_BIT),
               from_client=False, producer_check=False)
    log.append(build_marker(42, 0, False, now), from_client=False, producer_check=False)
    # A data record whose key reads like an abort marker's (version 0, type 0): data all the
    # same, as its batch is not a control batch.
    log.append(rb.build_batch([(bytes(4), b"open", [], now)], producer_id=43, producer_epoch=0,
                              base_sequence=0, attributes=rb.TRANSACTIONAL_BIT),
               from_client=False, producer_check=False)
    crash(lm)
    for debris in [*(tmp_path / "t-0").glob("*.snapshot"), *(tmp_path / "t-0").glob("*.txnindex")]:
        debris.unlink()
    lm, log = reopen(lm)
    assert log.txn_index.aborted_ranges() == ((42, 0, 1),)
    assert log.last_stable_offset == 2  # the open transaction of producer 43
    assert log.producer_state.map_end_offset == log.log_end_offset == 3
    lm.close()


async def test_without_a_checkpointed_recovery_point_every_segment_is_unflushed(
        tmp_path: Path) -> None:
    # A crash before the partition's first checkpoint: everything is recovered, and the
    # recovery point is 0, so the next flush syncs every segment.
    lm = make(tmp_path)
    log = new_partition(lm, {"segment.bytes": "400"})
    for i in range(12):
        log.append(batch([b"%02d" % i]), from_client=False, producer_check=False)
    crash(lm)
    (tmp_path / "recovery-point-offset-checkpoint").unlink()
    lm, log = reopen(lm)
    assert len(log.segments) > 1
    assert (log.recovery_point, log.log_end_offset) == (0, 12)
    lm.close()
