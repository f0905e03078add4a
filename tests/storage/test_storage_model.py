"""The storage engine against a model (hypothesis stateful testing).

Random sequences of appends (plain and idempotent, with retries), rolls, DeleteRecords,
retention, clean restarts, crashes and torn tails, checked after every step against a plain
list of records: offsets, log start and end, every record's value and timestamp, ListOffsets
by timestamp, and idempotent retries answered with their first offsets. Real files in a
temporary directory; segments are small, so appends roll segments and retention deletes
several at once.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from trio_broker.config import load_config
from trio_broker.protocol import records as rb
from trio_broker.storage import LogManager
from trio_broker.storage import errors as se

TOPIC = "t"
#: Timestamps start here (a fixed past moment: retention by time is driven by ``now``).
EPOCH_MS = 1_700_000_000_000


@attrs.frozen
class Stored:
    """One record as the model holds it."""

    offset: int
    value: bytes
    timestamp: int


@attrs.frozen
class Sent:
    """An idempotent batch as sent, and the offset it was given: a retry gets that offset."""

    batch: bytes
    base_offset: int
    last_offset: int


def _batch(values: list[bytes], timestamps: list[int], **producer: int) -> bytes:
    return rb.build_batch([(None, v, [], t) for v, t in zip(values, timestamps, strict=True)],
                          **producer)


class StorageModel(RuleBasedStateMachine):
    """One partition of small segments and the list of records it must hold."""

    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="storage-model-"))
        self.manager = self._open()
        self.records: list[Stored] = []
        self.log_start = 0
        self.next_offset = 0
        self.clock = EPOCH_MS
        self.producer_id = -1
        self.sequence = 0
        self.sent: list[Sent] = []

    # ------------------------------------------------------------------ plumbing
    def _open(self) -> LogManager:
        manager = LogManager(load_config({"log.dirs": str(self.directory)}))
        manager.open()
        return manager

    @property
    def log(self) -> Any:
        found = self.manager.get_partition(TOPIC, 0)
        assert found is not None
        return found

    def _append(self, data: bytes) -> Any:
        return trio.run(self.manager.append, TOPIC, 0, data)

    def _stamps(self, count: int, spread: list[int]) -> list[int]:
        stamps = []
        for step in spread[:count]:
            self.clock += step
            stamps.append(self.clock)
        return stamps

    def _stored(self, base: int, values: list[bytes], stamps: list[int]) -> None:
        assert base == self.next_offset
        self.records += [Stored(base + i, v, t) for i, (v, t) in
                         enumerate(zip(values, stamps, strict=True))]
        self.next_offset = base + len(values)

    def _cut(self, start: int) -> None:
        self.log_start = start
        self.records = [r for r in self.records if r.offset >= start]

    def teardown(self) -> None:
        try:
            self.manager.close()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)

    # ------------------------------------------------------------------ rules
    @initialize()
    def create(self) -> None:
        # About five small records per segment; index entries every 64 bytes.
        self.manager.create_topic(TOPIC, 1, {"segment.bytes": "400",
                                             "segment.index.bytes": "4096",
                                             "index.interval.bytes": "64"})
        self.producer_id = self.manager.allocate_producer_id()

    @rule(values=st.lists(st.binary(max_size=60), min_size=1, max_size=4),
          spread=st.lists(st.integers(0, 5_000), min_size=4, max_size=4))
    def append(self, values: list[bytes], spread: list[int]) -> None:
        stamps = self._stamps(len(values), spread)
        result = self._append(_batch(values, stamps, base_offset=77))
        assert not result.duplicate
        self._stored(result.base_offset, values, stamps)

    @rule(values=st.lists(st.binary(max_size=60), min_size=1, max_size=3),
          spread=st.lists(st.integers(0, 5_000), min_size=3, max_size=3))
    def append_idempotent(self, values: list[bytes], spread: list[int]) -> None:
        stamps = self._stamps(len(values), spread)
        data = _batch(values, stamps, producer_id=self.producer_id, producer_epoch=0,
                      base_sequence=self.sequence)
        result = self._append(data)
        assert not result.duplicate
        self._stored(result.base_offset, values, stamps)
        self.sequence += len(values)
        self.sent = [*self.sent, Sent(data, result.base_offset, self.next_offset - 1)][-5:]

    @precondition(lambda self: bool(self.sent))
    @rule(data=st.data())
    def retry_idempotent(self, data: st.DataObject) -> None:
        """A retry of one of the producer's last five batches (Kafka's dedup window) gets the
        offset it got the first time, and nothing is appended."""
        sent = data.draw(st.sampled_from(self.sent))
        if sent.last_offset < self.log_start:
            return  # gone with its records: Kafka may have dropped the producer's state
        try:
            result = self._append(sent.batch)
        except se.OutOfOrderSequence:
            # Kafka's snapshot keeps only a producer's last batch: after a restart an older
            # retry is refused. Never appended twice, and the last batch is always known.
            assert sent is not self.sent[-1]
            return
        assert (result.duplicate, result.base_offset) == (True, sent.base_offset)

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        target = data.draw(st.integers(self.log_start, self.next_offset))
        start = trio.run(self.manager.delete_records, TOPIC, 0, target)
        assert start == target
        self._cut(target)

    @rule(keep_ms=st.integers(0, 60_000))
    def retention_by_time(self, keep_ms: int) -> None:
        """retention.ms: whole segments whose newest record is older go, never the records
        newer than the limit."""
        self.manager.alter_topic_config(TOPIC, {"retention.ms": str(keep_ms)}, incremental=True)
        limit = self.clock - keep_ms
        self.log.delete_old_segments(self.clock)
        start = self.log.log_start_offset
        assert self.log_start <= start <= self.next_offset
        assert all(r.timestamp <= limit for r in self.records if r.offset < start)
        self._cut(start)
        self.manager.alter_topic_config(TOPIC, {"retention.ms": None}, incremental=True)

    @rule(keep=st.integers(0, 2_000))
    def retention_by_size(self, keep: int) -> None:
        """retention.bytes: the oldest segments go while the rest still holds ``keep``."""
        self.manager.alter_topic_config(TOPIC, {"retention.bytes": str(keep)}, incremental=True)
        self.log.delete_old_segments(self.clock)
        start = self.log.log_start_offset
        assert self.log_start <= start <= self.next_offset
        if start > self.log_start:
            # Kafka's rule: a segment goes only while the rest still holds retention.bytes.
            assert self.log.size_bytes >= keep
        self._cut(start)
        self.manager.alter_topic_config(TOPIC, {"retention.bytes": None}, incremental=True)

    @rule()
    def restart(self) -> None:
        self.manager.close()
        self.manager = self._open()

    @rule()
    def crash(self) -> None:
        """A killed process: no clean-shutdown marker; the page cache keeps what was written."""
        for log in self.manager.all_partitions():
            log.close()
        self.manager._release_lock()
        self.manager = self._open()

    @rule(junk=st.binary(min_size=1, max_size=120))
    def crash_with_a_torn_tail(self, junk: bytes) -> None:
        """A crash in the middle of a write: bytes after the last whole batch are cut at the
        next start, and every record before them stays."""
        active = self.log.active.log_path
        for log in self.manager.all_partitions():
            log.close()
        with open(active, "ab") as handle:
            handle.write(junk)
        self.manager._release_lock()
        self.manager = self._open()

    # ------------------------------------------------------------------ what must hold
    @invariant()
    def offsets_match(self) -> None:
        log = self.log
        assert (log.log_start_offset, log.log_end_offset) == (self.log_start, self.next_offset)

    @invariant()
    def every_record_reads_back(self) -> None:
        found: list[Stored] = []
        offset = self.log_start
        while offset < self.next_offset:
            data = self.manager.read(TOPIC, 0, offset, 1000).records
            assert data, f"no batch at {offset}"
            got = [Stored(r.offset, r.value or b"", r.timestamp)
                   for position, size in rb.iter_batches(data)
                   for r in rb.decode_records(data[position:position + size])]
            found += [r for r in got if r.offset >= offset]
            offset = got[-1].offset + 1
        assert found == self.records
        assert self.manager.read(TOPIC, 0, self.next_offset, 1000).records == b""
        with pytest.raises(se.OffsetOutOfRange):
            self.manager.read(TOPIC, 0, self.next_offset + 1, 1000)
        if self.log_start > 0:
            with pytest.raises(se.OffsetOutOfRange):
                self.manager.read(TOPIC, 0, self.log_start - 1, 1000)

    @invariant()
    def list_offsets_by_timestamp(self) -> None:
        assert self.manager.list_offset(TOPIC, 0, -2)[0] == self.log_start
        assert self.manager.list_offset(TOPIC, 0, -1)[0] == self.next_offset
        # Timestamps only grow here, so the first record at or after t is the answer.
        for wanted in {EPOCH_MS, *(r.timestamp for r in self.records[::7]), self.clock + 1}:
            expected = next(((r.offset, r.timestamp) for r in self.records
                             if r.timestamp >= wanted), (-1, -1))
            assert self.manager.list_offset(TOPIC, 0, wanted) == expected, wanted


TestStorageModel = StorageModel.TestCase
TestStorageModel.settings = settings(
    max_examples=int(os.environ.get("STORAGE_MODEL_EXAMPLES", "40")), stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
