"""The producer-state checks say why they refuse a batch: the error carries a frozen
:class:`~trio_broker.storage.errors.ProducerRefusal` (partition, producer id, epochs, expected and
received sequence) and Kafka's message, for the Produce's request line (issue 36)."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from tests.storage.test_storage import make
from trio_broker.protocol import records as rb
from trio_broker.storage import errors as se
from trio_broker.storage.errors import ProducerRefusal
from trio_broker.storage.log import now_ms


def batch(count: int = 1, **kw: int) -> bytes:
    return rb.build_batch([(None, b"v", [], now_ms()) for _ in range(count)], **kw)


async def test_each_refusal_carries_its_numbers(tmp_path: Path) -> None:
    lm = make(tmp_path)
    lm.create_topic("orders", 4)
    pid = lm.allocate_producer_id()
    await lm.append("orders", 3, batch(3, producer_id=pid, producer_epoch=2, base_sequence=0))

    with pytest.raises(se.OutOfOrderSequence) as gap:
        await lm.append("orders", 3, batch(producer_id=pid, producer_epoch=2, base_sequence=5))
    assert gap.value.refusal == ProducerRefusal(
        "OUT_OF_ORDER_SEQUENCE_NUMBER", "orders", 3, pid, 2, 2, 3, 5)
    assert gap.value.message == (
        f"Out of order sequence number for producer {pid} at offset 3 in partition orders-3: "
        "5 (incoming seq. number), 2 (current end sequence number)")
    assert gap.value.refusal.describe() == (
        f"orders-3 OUT_OF_ORDER_SEQUENCE_NUMBER pid={pid} epoch=2 expected_seq=3 got_seq=5")

    with pytest.raises(se.InvalidProducerEpoch) as stale:
        await lm.append("orders", 3, batch(producer_id=pid, producer_epoch=1, base_sequence=3))
    assert stale.value.refusal == ProducerRefusal(
        "INVALID_PRODUCER_EPOCH", "orders", 3, pid, 1, 2, -1, 3)
    assert stale.value.message == (
        f"Epoch 1 of producer {pid} at offset 3 in partition orders-3 is older than the "
        "current epoch 2")
    assert stale.value.refusal.describe() == (
        f"orders-3 INVALID_PRODUCER_EPOCH pid={pid} epoch=1 current_epoch=2 got_seq=3")

    with pytest.raises(se.OutOfOrderSequence) as new_epoch:
        await lm.append("orders", 3, batch(producer_id=pid, producer_epoch=3, base_sequence=4))
    assert new_epoch.value.refusal == ProducerRefusal(
        "OUT_OF_ORDER_SEQUENCE_NUMBER", "orders", 3, pid, 3, 2, 0, 4)
    assert "3 (request epoch), 4 (seq. number), 2 (current producer epoch)" in (
        new_epoch.value.message)

    # frozen: a value, safe to keep after the request
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        gap.value.refusal.received_seq = 0  # type: ignore[misc]
    lm.close()


async def test_the_expected_sequence_wraps_after_int32_max(tmp_path: Path) -> None:
    lm = make(tmp_path)
    lm.create_topic("t", 1)
    pid = lm.allocate_producer_id()
    await lm.append("t", 0, batch(producer_id=pid, producer_epoch=0,
                                  base_sequence=rb.INT32_MAX))
    with pytest.raises(se.OutOfOrderSequence) as gap:
        await lm.append("t", 0, batch(producer_id=pid, producer_epoch=0, base_sequence=1))
    assert gap.value.refusal is not None
    assert (gap.value.refusal.expected_seq, gap.value.refusal.received_seq) == (0, 1)
    lm.close()
