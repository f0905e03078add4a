"""An OffsetCommit of thousands of partitions, and the tombstones of thousands of offsets: the
per-partition checks run a slice at a time in the shell, the records are encoded by the writer
(in a worker thread when many), and the outcome is the same as for a small commit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
from kio.schema.errors import ErrorCode

from tests.coordinator.group_harness import Harness
from trio_broker import offload
from trio_broker.coordinator import coordinator as shell
from trio_broker.coordinator import storage
from trio_broker.coordinator.classic_offsets import (
    CheckedEntries,
    ClassicOffsets,
    OffsetRecords,
    check_entries,
)
from trio_broker.coordinator.classic_state import ClassicGroups, Rules
from trio_broker.coordinator.group import CommittedOffset
from trio_broker.coordinator.records import (
    GroupKey,
    OffsetKey,
    OffsetValue,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_offset_key,
    encode_offset_value,
)
from trio_broker.coordinator.summaries import OffsetCommitEntry

E = ErrorCode


def _rules() -> tuple[ClassicGroups, ClassicOffsets]:
    core = ClassicGroups(Rules(offset_metadata_max_bytes=8), wall_ms=lambda: 5_000)
    core.loaded = core.running = True
    return core, ClassicOffsets(core)


def test_checks_made_before_a_topic_changed_are_made_again() -> None:
    """The shell checks a huge commit's partitions before the rules run, with the loop free in
    between: a topic deleted (or grown) meanwhile must not be judged by the stale count."""
    core, rules = _rules()
    offsets = {("gone", 0): OffsetCommitEntry(7), ("kept", 1): OffsetCommitEntry(8)}
    before = {"gone": 2, "kept": 2}
    checked = CheckedEntries(5_000)
    check_entries(offsets.items(), before.get, 8, checked)
    assert set(checked.accepted) == {("gone", 0), ("kept", 1)}

    after = {"kept": 2}  # "gone" was deleted while the commit waited for its turn
    decision = rules.commit_offsets(group_id="g", generation_id=-1, member_id="",
                                    group_instance_id=None, offsets=offsets,
                                    partitions=after.get, checked=checked)
    (write,) = decision.writes
    assert dict(write.records.committed) == {("kept", 1): CommittedOffset(8, -1, "", 5_000)}
    assert write.then.results == {("gone", 0): E.unknown_topic_or_partition}


def test_checks_still_valid_are_used_as_they_are() -> None:
    core, rules = _rules()
    offsets = {("t", 0): OffsetCommitEntry(1), ("t", 5): OffsetCommitEntry(2),
               ("t", 1): OffsetCommitEntry(3, metadata="123456789")}
    checked = CheckedEntries(4_000)  # the shell's clock when it checked
    check_entries(offsets.items(), {"t": 2}.get, 8, checked)
    decision = rules.commit_offsets(group_id="g", generation_id=-1, member_id="",
                                    group_instance_id=None, offsets=offsets,
                                    partitions={"t": 2}.get, checked=checked)
    (write,) = decision.writes
    assert dict(write.records.committed) == {("t", 0): CommittedOffset(1, -1, "", 4_000)}
    assert write.then.results == {("t", 5): E.unknown_topic_or_partition,
                                  ("t", 1): E.offset_metadata_too_large}


@pytest.mark.parametrize("metadata, fits", [
    ("12345678", True), ("123456789", False),
    ("\u00e9" * 4, True), ("\u00e9" * 4 + "x", False),  # two bytes each in UTF-8
    ("\U0001f600" * 2, True), ("\U0001f600" * 2 + "x", False),  # four bytes each
])
def test_the_metadata_limit_counts_utf8_bytes(metadata: str, fits: bool) -> None:
    checked = CheckedEntries(0)
    check_entries([(("t", 0), OffsetCommitEntry(1, metadata=metadata))], {"t": 1}.get, 8,
                  checked)
    assert (("t", 0) in checked.accepted) is fits
    assert checked.results == ({} if fits else {("t", 0): E.offset_metadata_too_large})


def test_offset_records_encode_commits_in_order_then_sorted_tombstones() -> None:
    committed = {("b", 1): CommittedOffset(10, 3, "m", 99), ("a", 0): CommittedOffset(5, -1, "", 98)}
    records = OffsetRecords("g", committed, removed={("z", 2), ("c", 0), ("c", 1)},
                            group_tombstone=True)
    assert len(records) == 6
    assert records.encode() == (
        (encode_offset_key(OffsetKey("g", "b", 1)), encode_offset_value(OffsetValue(10, 3, "m", 99))),
        (encode_offset_key(OffsetKey("g", "a", 0)), encode_offset_value(OffsetValue(5, -1, "", 98))),
        (encode_offset_key(OffsetKey("g", "c", 0)), None),
        (encode_offset_key(OffsetKey("g", "c", 1)), None),
        (encode_offset_key(OffsetKey("g", "z", 2)), None),
        (encode_group_key(GroupKey("g")), None),
    )


def _stored(harness: Harness) -> dict[tuple[str, int], int | None]:
    """What ``__consumer_offsets`` holds for group ``g``, read back from the log: the offset
    per partition, None for a tombstone (the last record of each key wins)."""
    found: dict[tuple[str, int], int | None] = {}
    for partition in range(harness.coord.store.num_partitions):
        for record in harness.coord.store._read_partition(partition):
            key = decode_key(record.key)
            if isinstance(key, OffsetKey) and key.group_id == "g":
                found[(key.topic, key.partition)] = (
                    None if record.value is None else decode_offset_value(record.value).offset)
    return found


async def test_a_huge_commit_in_slices_and_its_tombstones_in_a_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Real time (so the writer really uses a worker thread), small thresholds: a commit of
    many partitions is answered as a small one is, its records are on disk, and deleting the
    topic writes a tombstone for each."""
    monkeypatch.setattr(shell, "CHECK_IN_SLICES_FROM", 8)
    monkeypatch.setattr(shell, "CHECK_SLICE", 3)
    monkeypatch.setattr(storage, "ENCODE_IN_WORKER_FROM", 8)
    monkeypatch.setattr(offload, "STEP_SECONDS", 0.0)  # every slice yields
    threads: list[Any] = []
    real_in_worker = storage.in_worker

    async def counting_in_worker(limiter: Any, fn: Any, *args: Any) -> Any:
        threads.append(fn)
        return await real_in_worker(limiter, fn, *args)

    monkeypatch.setattr(storage, "in_worker", counting_in_worker)
    harness = Harness(tmp_path / "data", {})
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            coord = await harness.start(nursery)
            harness.create_topic("t", 12)
            offsets = {("t", index): OffsetCommitEntry(100 + index) for index in range(14)}
            offsets[("t", 3)] = OffsetCommitEntry(103, metadata="x" * 5000)
            errors = await coord.commit_offsets(group_id="g", generation_id=-1, member_id="",
                                                group_instance_id=None, offsets=offsets)
            assert errors == {**{("t", index): 0 for index in range(12)},
                              ("t", 3): E.offset_metadata_too_large,
                              ("t", 12): E.unknown_topic_or_partition,
                              ("t", 13): E.unknown_topic_or_partition}
            committed = {("t", index): 100 + index for index in range(12) if index != 3}
            assert _stored(harness) == committed
            assert len(threads) == 1  # the commit's 11 records, built off the loop

            assert coord.forget_topic("t") == 11
            await trio.testing.wait_all_tasks_blocked()
            while len(threads) < 2 or _stored(harness) != dict.fromkeys(committed):
                await trio.sleep(0.01)
            assert coord.fetch_offsets("g", None) == (0, {})
            await harness.stop()
            nursery.cancel_scope.cancel()
