"""The storage side of the classic group coordinator, as a mixin of
:class:`~trio_broker.coordinator.coordinator.GroupCoordinator`: loading groups and offsets from
``__consumer_offsets`` at start-up, and the single writer task every state change goes through
(in the order the state changed).

It holds no state of its own; the attributes and methods it uses are declared below for the type
checker and provided by ``GroupCoordinator``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs
from kio.schema.errors import ErrorCode

from ..observability.log import emit
from ..protocol.records import (
    Record,
    RecordBatchError,
    build_batch,
    compute_crc,
    decode_header,
    decode_records,
    iter_batches,
)
from .group import CommittedOffset, Group, GroupState, Member, Pending
from .internal_topic import ensure_topic
from .records import (
    OFFSETS_TOPIC,
    GroupKey,
    GroupValue,
    MemberValue,
    OffsetKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
)
from .summaries import TopicPartition

if TYPE_CHECKING:
    import trio

    from ..config import BrokerConfig
    from .consumer_coordinator import ConsumerGroups

E = ErrorCode

#: Largest read while loading ``__consumer_offsets``.
_LOAD_READ_BYTES = 4 * 1024 * 1024

#: Topic configs of ``__consumer_offsets``, as Kafka creates it: compacted (the newest record
#: per group and per committed partition survives; tombstones go after delete.retention.ms),
#: with ``offsets.topic.segment.bytes`` as its segment size.
OFFSETS_TOPIC_CONFIGS = {"cleanup.policy": "compact"}


@attrs.frozen
class _Write:
    partition: int
    batch: bytes
    done: Pending[int]
    #: The answer when the batch is over ``message.max.bytes``: Kafka's for offsets
    #: (``storeOffsets``), unless the write stores a group's metadata (``storeGroup``).
    too_large: E = E.invalid_commit_offset_size


class GroupStorage:
    """Loading and writing ``__consumer_offsets`` for :class:`GroupCoordinator` (a mixin)."""

    if TYPE_CHECKING:
        config: BrokerConfig
        log_manager: Any
        consumer_groups: ConsumerGroups
        _groups: dict[str, Group]
        _loaded: bool
        _num_partitions: int
        _write_send: trio.MemorySendChannel[_Write]
        _write_receive: trio.MemoryReceiveChannel[_Write]

        def partition_for(self, group_id: str) -> int: ...
        def _now_ms(self) -> int: ...

    # ------------------------------------------------------------------- loading
    def load(self) -> None:
        """Create ``__consumer_offsets`` if needed and rebuild groups and offsets from it."""
        if self._loaded:
            return
        started = time.perf_counter()
        lm = self.log_manager
        info = lm.topics.get(OFFSETS_TOPIC)
        # Created on the first write, as Kafka creates it on first use: a broker that never
        # sees a group does not pay for its partitions at start-up.
        self._num_partitions = (info.num_partitions if info is not None
                                else self.config.offsets_topic_num_partitions)
        if info is not None and "compact" not in info.configs.get("cleanup.policy", ""):
            # Created by a version without compaction (retention off, growing forever):
            # from now on it is compacted as Kafka's is.
            lm.alter_topic_config(OFFSETS_TOPIC, {"cleanup.policy": "compact",
                                                  "retention.ms": None, "retention.bytes": None},
                                  incremental=True)
        offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        metadata: dict[str, GroupValue | None] = {}
        records = 0
        for partition in range(self._num_partitions if info is not None else 0):
            for record in self._read_partition(partition):
                records += 1
                try:
                    if record.key is None or \
                            self.consumer_groups.load_record(record.key, record.value):
                        continue
                    key = decode_key(record.key)
                    if isinstance(key, OffsetKey):
                        group_offsets = offsets.setdefault(key.group_id, {})
                        tp = (key.topic, key.partition)
                        if record.value is None:
                            group_offsets.pop(tp, None)
                        else:
                            value = decode_offset_value(record.value)
                            group_offsets[tp] = CommittedOffset(
                                value.offset, value.leader_epoch, value.metadata,
                                value.commit_timestamp_ms)
                    else:
                        metadata[key.group_id] = (None if record.value is None
                                                  else decode_group_value(record.value))
                except ValueError:
                    continue  # a record we cannot read is skipped, as Kafka skips unknown keys
        count = 0
        for group_id in sorted(set(offsets) | set(metadata)):
            group_offsets = offsets.get(group_id, {})
            group_value = metadata.get(group_id)
            if group_value is None and not group_offsets:
                continue
            self._groups[group_id] = self._restore_group(group_id, group_value, group_offsets)
            count += 1
        self.consumer_groups.finish_load()
        self._loaded = True
        emit("groups_loaded", partitions=self._num_partitions, groups=count,
             offsets=sum(len(o) for o in offsets.values()), records=records,
             duration_ms=round((time.perf_counter() - started) * 1000, 3))

    def _read_partition(self, partition: int) -> Iterable[Any]:
        lm = self.log_manager
        log = lm.get_partition(OFFSETS_TOPIC, partition)
        if log is None:
            return
        offset = 0
        while True:
            result = lm.read(OFFSETS_TOPIC, partition, offset, _LOAD_READ_BYTES)
            offset = max(offset, result.log_start_offset)
            if not result.records:
                break
            advanced = False
            data = memoryview(result.records)
            for position, size in iter_batches(data):
                batch = data[position:position + size]
                header = decode_header(batch)
                last = header.last_offset
                if last < offset:
                    continue
                stored: list[Record] = []
                # A batch that does not check out is skipped, never fatal (Kafka skips what
                # it cannot read when loading this topic).
                # Transactional commits stay pending until they commit (transaction/offsets.py).
                if compute_crc(batch) == header.crc and not header.is_transactional:
                    try:
                        stored = decode_records(batch)
                    except RecordBatchError:
                        stored = []
                for record in stored:
                    if record.offset >= offset:
                        yield record
                offset = last + 1
                advanced = True
            if not advanced or offset >= result.high_watermark:
                break

    def _restore_group(self, group_id: str, value: GroupValue | None,
                       offsets: dict[TopicPartition, CommittedOffset]) -> Group:
        group = Group(group_id, state_timestamp_ms=self._now_ms())
        group.offsets = dict(offsets)
        if value is not None:
            group.generation_id = value.generation_id
            group.protocol_type = value.protocol_type or None
            group.protocol_name = value.protocol_name
            if value.state_timestamp_ms >= 0:
                group.state_timestamp_ms = value.state_timestamp_ms
            for m in value.members:
                member = Member(
                    member_id=m.member_id, group_instance_id=m.group_instance_id,
                    client_id=m.client_id, client_host=m.client_host,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    session_timeout_ms=m.session_timeout_ms,
                    protocol_type=value.protocol_type,
                    protocols=[(value.protocol_name or "", m.subscription)],
                    assignment=m.assignment)
                group.add_member(member)
            group.protocol_type = value.protocol_type or None
            group.leader_id = value.leader_id if value.leader_id in group.members else \
                next(iter(group.members), None)
            if group.members:
                group.state = GroupState.STABLE
                group.subscribed_topics = group.compute_subscribed_topics()
        return group

    # ---------------------------------------------------------------------- writes
    def _enqueue(self, partition: int, records: list[tuple[bytes, bytes | None]], *,
                 too_large: E = E.invalid_commit_offset_size) -> Pending[int]:
        now = self._now_ms()
        return self._enqueue_batch(
            partition, build_batch([(key, value, (), now) for key, value in records]),
            too_large=too_large)

    def _enqueue_batch(self, partition: int, batch: bytes, *,
                       too_large: E = E.invalid_commit_offset_size) -> Pending[int]:
        """Queue one encoded batch for ``__consumer_offsets``; the event gets its error code."""
        done: Pending[int] = Pending()
        self._write_send.send_nowait(_Write(partition, batch, done, too_large))
        return done

    def _ensure_offsets_topic(self) -> None:
        ensure_topic(self.log_manager, OFFSETS_TOPIC, self._num_partitions,
                     OFFSETS_TOPIC_CONFIGS, self.config.offsets_topic_segment_bytes)

    async def _writer(self) -> None:
        async for item in self._write_receive:
            try:
                self._ensure_offsets_topic()
                await self.log_manager.append(OFFSETS_TOPIC, item.partition, item.batch,
                                              producer_check=False)
            except Exception as exc:  # storage failures become retriable coordinator errors
                code = getattr(exc, "error_code", None)
                emit("coordinator_write_failed", partition=item.partition, error=repr(exc))
                item.done.set(item.too_large if code == E.message_too_large
                              else E.coordinator_not_available)
            else:
                item.done.set(E.none)

    def _group_record(self, group: Group, assignment: Mapping[str, bytes] | None = None
                      ) -> tuple[bytes, bytes | None]:
        members = []
        for member in group.members.values():
            try:
                subscription = member.metadata_for(group.protocol_name or "")
            except KeyError:
                subscription = b""
            members.append(MemberValue(
                member.member_id, member.group_instance_id, member.client_id, member.client_host,
                member.rebalance_timeout_ms, member.session_timeout_ms, subscription,
                (assignment or {}).get(member.member_id, member.assignment)))
        value = GroupValue(group.protocol_type or "", group.generation_id, group.protocol_name,
                           group.leader_id, group.state_timestamp_ms, tuple(members))
        return encode_group_key(GroupKey(group.group_id)), encode_group_value(value)

    def _store_group(self, group: Group, assignment: Mapping[str, bytes] | None = None
                     ) -> Pending[int]:
        # Kafka's storeGroup: metadata too large to store is UNKNOWN_SERVER_ERROR.
        return self._enqueue(self.partition_for(group.group_id),
                             [self._group_record(group, assignment)],
                             too_large=E.unknown_server_error)
