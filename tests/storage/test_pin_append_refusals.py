"""The appends a partition refuses, at their boundaries and with Kafka's texts (a Produce
answer carries the text to the client, ProduceResponse v8+): record timestamps outside
``message.timestamp.before.max.ms`` / ``after.max.ms`` of now (KIP-937; the bounds themselves
accepted, either bound alone enforced), a batch larger than ``segment.bytes`` (one exactly that
large accepted), a partition whose log failed. The mutation run over ``storage/log`` found these
unpinned (docs/development.md, "Eighth run")."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.storage.test_pin_append_paths import idempotent
from tests.storage.test_storage import make, new_partition
from trio_broker.protocol import records as rb
from trio_broker.storage import errors as se
from trio_broker.storage import log as log_module

NOW = 1_700_000_000_000


@pytest.fixture(autouse=True)
def frozen_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log_module, "now_ms", lambda: NOW)


def stamped(*stamps: int) -> bytes:
    return rb.build_batch([(None, b"v", [], ts) for ts in stamps])


@pytest.mark.parametrize("bounds, accepted, refused, text", [
    ({"message.timestamp.before.max.ms": "1000"}, [NOW - 1000, NOW + 10**9], NOW - 1001,
     f"[{NOW - 1000}, {NOW + 2**63 - 1}]"),
    ({"message.timestamp.after.max.ms": "1000"}, [NOW + 1000, 0], NOW + 1001,
     f"[{NOW - 2**63 + 1}, {NOW + 1000}]"),
])
async def test_record_timestamps_outside_either_bound_are_refused(
        tmp_path: Path, bounds: dict[str, str], accepted: list[int], refused: int,
        text: str) -> None:
    lm = make(tmp_path)
    log = new_partition(lm, bounds)
    for ts in accepted:
        log.append(stamped(ts), from_client=False, producer_check=False)
    # Either record of the batch: the smallest and the largest are both checked.
    for batch in (stamped(refused, accepted[0]), stamped(accepted[0], refused)):
        with pytest.raises(se.InvalidTimestamp) as out:
            log.append(batch, from_client=False, producer_check=False)
        assert str(out.value) == (f"Timestamp {refused} of message in partition t-0 is out of "
                                  f"range. The timestamp should be within {text}")
    lm.close()


async def test_a_batch_larger_than_a_segment_is_refused(tmp_path: Path) -> None:
    lm = make(tmp_path)
    batch = stamped(NOW)
    log = new_partition(lm, {"segment.bytes": str(len(batch))})
    log.append(batch, from_client=False, producer_check=False)  # exactly a segment: taken
    bigger = rb.build_batch([(None, b"vv", [], NOW)])
    with pytest.raises(se.RecordListTooLarge) as out:
        log.append(bigger, from_client=False, producer_check=False)
    assert str(out.value) == (
        f"Message batch size is {len(bigger)} bytes in append to partition t-0 which exceeds "
        f"the maximum configured segment size of {len(batch)}.")
    lm.close()


async def test_a_failed_log_refuses_appends_as_offline(tmp_path: Path) -> None:
    lm = make(tmp_path)
    log = new_partition(lm)
    log.failed = True
    with pytest.raises(se.KafkaStorageError, match="^partition t-0 is offline$"):
        log.append(stamped(NOW), from_client=False, producer_check=False)
    lm.close()


async def test_a_refused_batch_carries_the_parsers_reason(tmp_path: Path) -> None:
    lm = make(tmp_path)
    log = new_partition(lm)
    bad_crc = bytearray(stamped(NOW))
    bad_crc[-1] ^= 1
    with pytest.raises(rb.RecordBatchError) as parsed:
        rb.split_batches(bytes(bad_crc), max_size=1 << 20, from_client=True)
    with pytest.raises(se.CorruptMessage) as refused:
        log.append(bytes(bad_crc))
    assert str(refused.value) == parsed.value.message != ""
    lm.close()


async def test_a_retried_batch_is_answered_with_its_first_offsets(tmp_path: Path) -> None:
    # Not a refusal: Kafka answers a duplicate of one of a producer's last five batches with
    # the offsets it got the first time, no append time, and the current log start.
    lm = make(tmp_path)
    log = new_partition(lm)
    idempotent = rb.build_batch([(None, b"a", [], NOW), (None, b"b", [], NOW)], producer_id=7,
                                producer_epoch=0, base_sequence=0)
    first = log.append(stamped(NOW), from_client=False, producer_check=False)
    assert first.base_offset == 0
    assert log.append(idempotent).base_offset == 1
    await lm.delete_records("t", 0, 1)
    assert log.append(idempotent) == log_module.AppendResult(1, -1, 1, 2, duplicate=True)
    assert log.log_end_offset == 3
    lm.close()


async def test_an_append_holding_a_retried_batch_is_answered_as_the_retry(tmp_path: Path) -> None:
    # Kafka checks every batch of an append for a duplicate, in turn: one found answers the
    # append with its first offsets and nothing of it is written, not OUT_OF_ORDER_SEQUENCE.
    lm = make(tmp_path)
    log = new_partition(lm)
    log.append(idempotent(0))
    log.append(idempotent(1))
    for request, retried_at in ((idempotent(0) + idempotent(2), 0),
                                (idempotent(2) + idempotent(1), 1)):
        answer = log.append(request)
        assert (answer.duplicate, answer.base_offset) == (True, retried_at)
        assert log.log_end_offset == 2
    lm.close()
