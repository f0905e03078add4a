"""What a transaction marker does to a partition's producer state, as Kafka's
``ProducerAppendInfo.appendEndTxnMarker`` / ``ProducerStateEntry.update`` do it (issue 36).

A marker written under the producer's own epoch (every COMMIT/ABORT of the KIP-98 protocol that
librdkafka, aiokafka and kafka-python speak) keeps the producer's batches: the next transaction
continues the sequence, so a client that skipped sequence numbers in an aborted transaction
(librdkafka purging a Produce request that was built but never sent) gets
OUT_OF_ORDER_SEQUENCE_NUMBER on its first batch after the abort, from Kafka as from us. A marker
of a bumped epoch (a fence, a timed-out transaction, an operator's abort) clears them: the
producer then starts at sequence 0 of that epoch, and nowhere else.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.storage.test_storage import make, reopen
from trio_broker.protocol import records as rb
from trio_broker.storage import errors as se
from trio_broker.storage.errors import ProducerRefusal
from trio_broker.storage.log import now_ms
from trio_broker.storage.manager import LogManager
from trio_broker.storage.txn_index import build_marker


def txn_batch(pid: int, epoch: int, seq: int, count: int = 5) -> bytes:
    return rb.build_batch([(None, b"v", [], now_ms()) for _ in range(count)], producer_id=pid,
                          producer_epoch=epoch, base_sequence=seq,
                          attributes=rb.TRANSACTIONAL_BIT)


async def abort(lm: LogManager, pid: int, epoch: int) -> None:
    """The coordinator's ABORT marker (its own writer: no producer checks, as in Kafka)."""
    await lm.append("t", 0, build_marker(pid, epoch, False, now_ms()), producer_check=False)


async def test_an_abort_marker_of_the_same_epoch_keeps_the_sequence(tmp_path: Path) -> None:
    """The issue's three errors: librdkafka's first batch after the abort starts 5 past what
    the partition expects (the 5 records of a purged, never sent request of the aborted
    transaction). Kafka's checkSequence refuses it the same way: the marker of the same epoch
    left the last sequence where it was."""
    lm = make(tmp_path)
    lm.create_topic("t", 1)
    pid = lm.allocate_producer_id()
    await lm.append("t", 0, txn_batch(pid, 0, 0))  # sequences 0..4, then the abort
    await abort(lm, pid, 0)
    for restarted in (False, True):  # the same from a snapshot and from a replayed log
        with pytest.raises(se.OutOfOrderSequence) as gap:
            await lm.append("t", 0, txn_batch(pid, 0, 10))
        assert gap.value.refusal == ProducerRefusal(
            "OUT_OF_ORDER_SEQUENCE_NUMBER", "t", 0, pid, 0, 0, 5, 10)
        assert "10 (incoming seq. number), 4 (current end sequence number)" in (
            gap.value.message)
        with pytest.raises(se.OutOfOrderSequence):  # nor does it restart at 0
            await lm.append("t", 0, txn_batch(pid, 0, 0, count=2))
        if not restarted:
            lm = reopen(lm, after_crash=True)
    # The sequence goes on where it was: the next transaction's first batch is 5.
    assert (await lm.append("t", 0, txn_batch(pid, 0, 5))).base_offset == 6
    lm.close()


async def test_after_a_marker_of_a_bumped_epoch_the_producer_starts_at_zero(
        tmp_path: Path) -> None:
    """A marker under a bumped epoch (the coordinator fencing the producer or timing its
    transaction out) clears the producer's batches and takes the new epoch. A batch of that
    epoch must then start at sequence 0 (Kafka: ``inSequence(NO_SEQUENCE, seq)``, -1 + 1);
    trio_broker took any sequence there."""
    lm = make(tmp_path)
    lm.create_topic("t", 1)
    pid = lm.allocate_producer_id()
    await lm.append("t", 0, txn_batch(pid, 0, 0))
    await abort(lm, pid, 1)
    for restarted in (False, True):
        with pytest.raises(se.OutOfOrderSequence) as gap:
            await lm.append("t", 0, txn_batch(pid, 1, 5))
        assert gap.value.refusal == ProducerRefusal(
            "OUT_OF_ORDER_SEQUENCE_NUMBER", "t", 0, pid, 1, 1, 0, 5)
        assert gap.value.refusal.describe() == (
            f"t-0 OUT_OF_ORDER_SEQUENCE_NUMBER pid={pid} epoch=1 expected_seq=0 got_seq=5")
        with pytest.raises(se.InvalidProducerEpoch):  # the fenced epoch
            await lm.append("t", 0, txn_batch(pid, 0, 5))
        if not restarted:
            lm = reopen(lm)
    assert (await lm.append("t", 0, txn_batch(pid, 1, 0))).base_offset == 6
    assert (await lm.append("t", 0, txn_batch(pid, 1, 5))).base_offset == 11
    lm.close()


async def test_a_producer_the_partition_knows_no_epoch_of_may_start_anywhere(
        tmp_path: Path) -> None:
    """Unchanged: with no state at all (a new partition, or every batch of the producer
    deleted by retention) Kafka accepts any first sequence."""
    lm = make(tmp_path)
    lm.create_topic("t", 1)
    pid = lm.allocate_producer_id()
    assert (await lm.append("t", 0, txn_batch(pid, 3, 42))).base_offset == 0
    lm.close()
