"""Transactional offset commits (TxnOffsetCommit, KIP-98/KIP-447), held until the transaction
ends.

A TxnOffsetCommit is written at once to the group's ``__consumer_offsets`` partition as a
transactional batch (the producer's id and epoch, the transactional bit) and kept pending per
producer; the group does not see it. When the transaction commits, the offsets are written again
as ordinary commits and become the group's committed offsets, then the COMMIT marker goes to the
partition; on abort only the ABORT marker is written. The group coordinator skips transactional
batches when it loads, so after a restart the ordinary records are the committed state, and the
transactional batches not yet followed by a marker are the pending ones (reloaded here), which
the recovery of an interrupted PrepareCommit then commits.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from ...observability.log import emit
from ...protocol import records as rb
from ...storage.txn_index import build_marker
from ..coordinator import GroupCoordinator, OffsetCommitEntry
from ..group import CommittedOffset, Group, GroupState
from ..internal_topic import read_batches
from ..records import (
    OFFSETS_TOPIC,
    OffsetKey,
    OffsetValue,
    decode_key,
    decode_offset_value,
    encode_offset_key,
    encode_offset_value,
)

E = ErrorCode
TopicPartition = tuple[str, int]
_LOAD_READ_BYTES = 4 * 1024 * 1024


class TxnOffsets:
    """Pending transactional offsets: ``{producer_id: {group_id: {tp: offset}}}``."""

    def __init__(self, groups: GroupCoordinator, log_manager: Any) -> None:
        self.groups = groups
        self.log_manager = log_manager
        self.pending: dict[int, dict[str, dict[TopicPartition, CommittedOffset]]] = {}

    def pending_partitions(self, group_id: str) -> set[TopicPartition]:
        """Partitions of ``group_id`` with a transactional commit not yet decided (OffsetFetch
        with require_stable answers them UNSTABLE_OFFSET_COMMIT, KIP-447)."""
        found: set[TopicPartition] = set()
        for groups in self.pending.values():
            found.update(groups.get(group_id, {}))
        return found

    def forget_topic(self, topic: str) -> None:
        """A deleted topic's pending offsets are dropped (Kafka's ``onPartitionsDeleted``
        removes pending transactional commits too): a commit of the transaction then stores
        none for it, and require_stable reads no longer wait on it."""
        for groups in self.pending.values():
            for offsets in groups.values():
                for key in [tp for tp in offsets if tp[0] == topic]:
                    del offsets[key]

    def validate(self, group_id: str, generation_id: int, member_id: str,
                 instance_id: str | None) -> ErrorCode:
        """Kafka's ``validateTransactionalOffsetCommit`` checks: a known member of the current
        generation when the producer names one (KIP-447), anything when it does not or when
        the group is empty and the generation is -1."""
        # A KIP-848 consumer group checks the member epoch instead of a generation.
        consumer = self.groups.consumer_groups.check_commit(group_id, generation_id, member_id,
                                                            transactional=True)
        if consumer is not None:
            return ErrorCode(consumer)
        group = self.groups.groups.get(group_id)
        if group is None:
            # A generation of a group that does not exist cannot be current (a zombie's).
            return E.illegal_generation if generation_id >= 0 else E.none
        if group.state is GroupState.DEAD:
            return E.coordinator_not_available
        if generation_id < 0 and group.state is GroupState.EMPTY:
            return E.none
        if generation_id < 0 and not member_id and instance_id is None:
            # Older producers send neither (TxnOffsetCommit v0-v2 have no member fields).
            return E.none
        if instance_id is not None and group.static_member_id(instance_id) not in (None,
                                                                                    member_id):
            return E.fenced_instance_id
        if not group.has_member(member_id):
            return E.unknown_member_id
        if generation_id != group.generation_id:
            return E.illegal_generation
        return E.none

    async def add(self, group_id: str, producer_id: int, producer_epoch: int,
                  offsets: Mapping[TopicPartition, OffsetCommitEntry], now_ms: int
                  ) -> dict[TopicPartition, ErrorCode]:
        """Write the offsets as a transactional batch and hold them until the end."""
        results: dict[TopicPartition, ErrorCode] = {}
        accepted: dict[TopicPartition, CommittedOffset] = {}
        topics = self.log_manager.topics
        max_metadata = self.groups.config.offset_metadata_max_bytes
        for tp, entry in offsets.items():
            metadata = entry.metadata or ""
            info = topics.get(tp[0])
            if info is None or not 0 <= tp[1] < info.num_partitions:
                results[tp] = E.unknown_topic_or_partition
            elif len(metadata.encode("utf-8")) > max_metadata:
                results[tp] = E.offset_metadata_too_large
            else:
                accepted[tp] = CommittedOffset(entry.offset, entry.leader_epoch, metadata, now_ms)
        if accepted:
            batch = rb.build_batch(
                [(k, v, (), now_ms) for k, v in _records(group_id, accepted, now_ms)],
                producer_id=producer_id,
                producer_epoch=producer_epoch, base_sequence=0,
                attributes=rb.TRANSACTIONAL_BIT)
            error = await self._append(self.groups.partition_for(group_id), batch)
            if not error:
                self.pending.setdefault(producer_id, {}).setdefault(group_id, {}).update(
                    accepted)
            for tp in accepted:
                results[tp] = error
        return results

    async def complete(self, producer_id: int, producer_epoch: int, partition: int,
                       commit: bool, now_ms: int) -> ErrorCode:
        """End the transaction on one ``__consumer_offsets`` partition: on commit, the pending
        offsets of its groups become committed (ordinary records first, so a crash before the
        marker leaves them pending and the recovery commits them again); then the marker."""
        groups = self.pending.get(producer_id, {})
        mine = [g for g in groups if self.groups.partition_for(g) == partition]
        if commit:
            for group_id in mine:
                offsets = groups[group_id]
                if not offsets:
                    continue
                error = await self.groups._enqueue(  # the coordinator's ordered writer
                    partition, _records(group_id, offsets, now_ms)).wait()
                if error:
                    return ErrorCode(error)
                group = self.groups.groups.get(group_id)
                if group is None:
                    group = Group(group_id, state_timestamp_ms=now_ms)
                    self.groups._groups[group_id] = group
                group.offsets.update(offsets)
                emit("offsets_committed", group_id=group_id, member_id="",
                     generation=-1, partitions=len(offsets), errors=0)
        error = await self._append(partition, build_marker(producer_id, producer_epoch, commit,
                                                           now_ms))
        if error:
            return error
        for group_id in mine:
            groups.pop(group_id, None)
        if not groups:
            self.pending.pop(producer_id, None)
        return E.none

    async def _append(self, partition: int, batch: bytes) -> ErrorCode:
        try:
            self.groups._ensure_offsets_topic()
            await self.log_manager.append(OFFSETS_TOPIC, partition, batch, producer_check=False)
        except Exception as exc:  # storage failure: retriable for the client
            emit("coordinator_write_failed", partition=partition, error=repr(exc))
            return E.coordinator_not_available
        return E.none

    def load(self) -> None:
        """Rebuild the pending offsets: transactional batches without a marker yet."""
        lm = self.log_manager
        info = lm.topics.get(OFFSETS_TOPIC)
        if info is None:
            return
        for partition in range(info.num_partitions):
            log = lm.get_partition(OFFSETS_TOPIC, partition)
            if log is None or not log.txn_index.ongoing:
                continue
            open_pids = dict(log.txn_index.ongoing)
            start = min(open_pids.values())
            for header, batch in _batches(lm, partition, start):
                pid = header.producer_id
                if not header.is_transactional or open_pids.get(pid, 2**63) > header.base_offset:
                    continue
                if header.is_control:
                    self.pending.pop(pid, None)
                    continue
                try:
                    records = rb.decode_records(batch)
                except rb.RecordBatchError:
                    continue
                for record in records:
                    if record.key is None or record.value is None:
                        continue
                    try:
                        key = decode_key(record.key)
                        if not isinstance(key, OffsetKey):
                            continue
                        value = decode_offset_value(record.value)
                    except ValueError:
                        continue
                    self.pending.setdefault(pid, {}).setdefault(key.group_id, {})[
                        (key.topic, key.partition)] = CommittedOffset(
                            value.offset, value.leader_epoch, value.metadata,
                            value.commit_timestamp_ms)


def _records(group_id: str, offsets: Mapping[TopicPartition, CommittedOffset], now_ms: int
             ) -> list[tuple[bytes, bytes | None]]:
    return [(encode_offset_key(OffsetKey(group_id, tp[0], tp[1])),
             encode_offset_value(OffsetValue(c.offset, c.leader_epoch, c.metadata, now_ms)))
            for tp, c in offsets.items()]


def _batches(lm: Any, partition: int, start: int) -> Iterator[tuple[rb.BatchHeader, bytes]]:
    return read_batches(lm, OFFSETS_TOPIC, partition, start, _LOAD_READ_BYTES)
