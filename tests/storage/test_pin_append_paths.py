"""The two ways into a partition and what they carry through: the off-loop append passes the
caller's ``from_client`` and ``producer_check`` on; records a produce handler checked ahead (in a
worker thread: :func:`.record_walk.check_records`) are not walked again on the event loop while
the log's limits are still the ones they were checked against, and are checked again when they
are not; a compressed batch is walked once per append; an append wakes the parked fetches. The
mutation run over ``storage/log`` found these unpinned (docs/development.md, "Eighth run")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from tests.storage.test_storage import batch, make, new_partition, read_all
from trio_broker.protocol import compression
from trio_broker.protocol import records as rb
from trio_broker.protocol.record_walk import CheckedRecords, WalkBudget, check_records
from trio_broker.storage import errors as se
from trio_broker.storage import log as log_module
from trio_broker.storage.log import PartitionLog

COMPACT = {"cleanup.policy": "compact"}
NOW = 1_700_000_000_000


def keyed(key: bytes | None, *, codec: int = compression.COMPRESSION_NONE) -> bytes:
    return rb.build_batch([(key, b"v", [], NOW)], attributes=codec)


def idempotent(sequence: int) -> bytes:
    return rb.build_batch([(None, b"v", [], NOW)], producer_id=7, producer_epoch=0,
                          base_sequence=sequence)


def checked_for(log: PartitionLog, records: bytes, *, inline: bool = False,
                **limits: int) -> CheckedRecords:
    """What the produce handler hands the log: the records checked against the log's limits
    (or the ones given), in a worker thread or, ``inline``, on the loop with an allowance."""
    max_size = limits.get("max_size", log.config.max_message_bytes)
    limit = limits.get("limit", log.decompressed_limit)
    return check_records(records, max_size=max_size, limit=limit,
                         budget=WalkBudget(limit, defer=inline))


@pytest.fixture
def walks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names the log's own reads of a batch's records that cost what the records weigh: a walk
    (``summarize``: a compressed batch streamed record by record) and a whole decompression
    for the keys (``records_payload``)."""
    counted: list[str] = []

    def counting(module: Any, name: str) -> None:
        real = getattr(module, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            counted.append(name)
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)

    counting(log_module, "summarize")
    counting(rb, "records_payload")
    return counted


# ------------------------------------------------------------------ either way in
async def put(log: PartitionLog, records: bytes, off_loop: bool, **kwargs: Any
              ) -> log_module.AppendResult:
    """An append on the loop or with the bytes written by a worker thread."""
    if not off_loop:
        return log.append(records, **kwargs)
    async with log.write_lock:
        return await log.append_off_loop(records, **kwargs)


@pytest.mark.parametrize("off_loop", [False, True])
async def test_an_append_checks_a_clients_records_by_default(tmp_path: Path,
                                                             off_loop: bool) -> None:
    lm = make(tmp_path)
    log = new_partition(lm, COMPACT)
    with pytest.raises(se.InvalidRecord, match="Compacted topic cannot accept message "
                                               "without key"):
        await put(log, keyed(None), off_loop)
    # The log's own writers (the coordinators' tombstones, a replica) are not a client.
    assert (await put(log, keyed(None), off_loop, from_client=False)).base_offset == 0
    lm.close()


@pytest.mark.parametrize("off_loop", [False, True])
async def test_an_append_answers_a_retry_unless_told_not_to_check(tmp_path: Path,
                                                                  off_loop: bool) -> None:
    lm = make(tmp_path)
    log = new_partition(lm)
    first = await put(log, idempotent(0), off_loop)
    retry = await put(log, idempotent(0), off_loop)
    assert (retry.duplicate, retry.base_offset) == (True, first.base_offset)
    # Without the producer check (the coordinators' own appends) the batch is written.
    again = await put(log, idempotent(0), off_loop, producer_check=False)
    assert (again.duplicate, again.base_offset) == (False, 1)
    assert [offset for offset, _ in read_all(lm, "t")] == [0, 1]
    lm.close()


# --------------------------------------------------------------- records checked ahead
@pytest.mark.parametrize("off_loop", [False, True])
async def test_records_checked_against_the_logs_limits_are_not_walked_again(
        tmp_path: Path, walks: list[str], off_loop: bool) -> None:
    lm = make(tmp_path)
    log = new_partition(lm)
    records = keyed(b"k", codec=compression.COMPRESSION_GZIP)
    await put(log, records, off_loop, checked=checked_for(log, records))
    assert walks == []
    log.append(records)  # unchecked: the log walks it itself, once
    assert walks == ["summarize"]
    walks.clear()
    log.append(keyed(b"k"))  # uncompressed: its timestamps read in place, never streamed
    assert walks == []
    lm.close()


async def test_records_checked_against_a_larger_batch_limit_are_checked_again(
        tmp_path: Path) -> None:
    lm = make(tmp_path)
    log = new_partition(lm, {"max.message.bytes": "100"})
    records = rb.build_batch([(None, b"x" * 100, [], NOW)])
    checked = checked_for(log, records, max_size=1 << 20)
    with pytest.raises(se.MessageTooLarge):
        log.append(records, checked=checked)
    assert log.log_end_offset == 0
    lm.close()


async def test_records_checked_against_a_larger_decompression_limit_are_checked_again(
        tmp_path: Path) -> None:
    lm = make(tmp_path)
    log = new_partition(lm, {"max.message.bytes": "100000"})
    assert log.decompressed_limit == compression.MIN_DECOMPRESSED_LIMIT
    # A bomb for this log: 17 MiB of zeros in about 17 KB of gzip.
    bomb = rb.build_batch([(None, bytes(17 << 20), [], NOW)],
                          attributes=compression.COMPRESSION_GZIP)
    checked = checked_for(log, bomb, limit=64 << 20)
    with pytest.raises(se.CorruptMessage, match="decompress past the limit"):
        log.append(bomb, checked=checked)
    assert log.log_end_offset == 0
    lm.close()


@pytest.mark.parametrize("codec", [compression.COMPRESSION_NONE, compression.COMPRESSION_GZIP])
async def test_a_compacted_topic_refuses_keyless_records_checked_on_the_loop(
        tmp_path: Path, codec: int) -> None:
    # Checked inline (the event loop's allowance), the records were read for lengths and
    # timestamps only: the keys are read when the log needs them.
    lm = make(tmp_path)
    log = new_partition(lm, COMPACT)
    with pytest.raises(se.InvalidRecord):
        log.append(keyed(None, codec=codec), checked=checked_for(log, keyed(None, codec=codec),
                                                                  inline=True))
    records = keyed(b"k", codec=codec)
    assert log.append(records, checked=checked_for(log, records, inline=True)).base_offset == 0
    lm.close()


async def test_a_compacted_topics_batch_is_read_once_per_append(tmp_path: Path,
                                                                  walks: list[str]) -> None:
    # The keys and the timestamps come from the same walk of a compressed batch; an
    # uncompressed one is read in place (its keys, then its timestamps), never streamed.
    lm = make(tmp_path)
    log = new_partition(lm, COMPACT)
    log.append(keyed(b"k", codec=compression.COMPRESSION_GZIP))
    assert walks == ["summarize"]
    walks.clear()
    log.append(keyed(b"k"))
    assert walks == ["records_payload"]
    lm.close()


# ------------------------------------------------------------------------ parked fetches
async def test_an_append_wakes_every_parked_fetch_once(tmp_path: Path) -> None:
    lm = make(tmp_path)
    log = new_partition(lm)
    parked = [trio.Event(), trio.Event()]
    log.waiters.update(parked)
    log.append(batch([b"a"]))
    assert all(event.is_set() for event in parked)
    assert log.waiters == set()  # the next append wakes only the fetches parked after it
    late = trio.Event()
    log.waiters.add(late)
    await put(log, batch([b"b"]), off_loop=True)
    assert late.is_set() and log.waiters == set()
    lm.close()
