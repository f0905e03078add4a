"""The offsets and admin side of the classic group coordinator, as a mixin of
:class:`~trio_broker.coordinator.coordinator.GroupCoordinator`: OffsetCommit, OffsetFetch,
OffsetDelete, ListGroups, DescribeGroups, DeleteGroups and offset expiry.

It holds no state of its own; the attributes and methods it uses are declared below for the type
checker and provided by ``GroupCoordinator``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ..observability.log import emit
from .group import CommittedOffset, Group, GroupState, Member, Pending
from .internal_topic import every
from .records import (
    GroupKey,
    OffsetKey,
    OffsetValue,
    encode_group_key,
    encode_offset_key,
    encode_offset_value,
)
from .summaries import GroupListing, GroupSummary, MemberSummary, OffsetCommitEntry, TopicPartition

if TYPE_CHECKING:
    import trio

    from ..config import BrokerConfig
    from .consumer_coordinator import ConsumerGroups

E = ErrorCode


class GroupOffsets:
    """Committed offsets and the admin requests of :class:`GroupCoordinator` (a mixin)."""

    if TYPE_CHECKING:
        config: BrokerConfig
        log_manager: Any
        consumer_groups: ConsumerGroups
        _groups: dict[str, Group]
        _loaded: bool
        _nursery: trio.Nursery | None

        def partition_for(self, group_id: str) -> int: ...
        def _now_ms(self) -> int: ...
        def _touch(self, member: Member, timeout_ms: int | None = None) -> None: ...
        def _enqueue(self, partition: int, records: list[tuple[bytes, bytes | None]]
                     ) -> Pending[int]: ...
        def _validate_member(self, group: Group, member_id: str, instance_id: str | None
                             ) -> int: ...
        def _transition(self, group: Group, new_state: GroupState) -> None: ...

    # ---------------------------------------------------------------- OffsetCommit
    async def commit_offsets(self, *, group_id: str, generation_id: int, member_id: str,
                             group_instance_id: str | None,
                             offsets: Mapping[TopicPartition, OffsetCommitEntry]
                             ) -> dict[TopicPartition, int]:
        """Commit offsets (members, or simple consumers with generation -1); per-partition errors."""

        def everywhere(error: int) -> dict[TopicPartition, int]:
            return dict.fromkeys(offsets, error)

        if not self._loaded:
            return everywhere(E.coordinator_load_in_progress)
        if self._nursery is None:
            return everywhere(E.coordinator_not_available)
        consumer_check = self.consumer_groups.check_commit(group_id, generation_id, member_id)
        if consumer_check is not None:
            if consumer_check:
                return everywhere(consumer_check)
            # A consumer group's member checked out: its offsets are stored as a simple
            # commit in the group's offsets-only entry.
            generation_id, member_id, group_instance_id = -1, "", None
        group = self._groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                # The group is unknown, so this member's generation cannot be current.
                return everywhere(E.illegal_generation)
            group = self._groups[group_id] = Group(group_id, state_timestamp_ms=self._now_ms())
        error = self._validate_offset_commit(group, generation_id, member_id, group_instance_id)
        if error:
            return everywhere(error)
        if group.state is GroupState.COMPLETING_REBALANCE:
            return everywhere(E.rebalance_in_progress)
        member = group.members.get(member_id)
        if member is not None:
            self._touch(member)
        now = self._now_ms()
        results: dict[TopicPartition, int] = {}
        accepted: dict[TopicPartition, CommittedOffset] = {}
        topics = self.log_manager.topics
        for tp, entry in offsets.items():
            metadata = entry.metadata or ""
            info = topics.get(tp[0])
            if info is None or not 0 <= tp[1] < info.num_partitions:
                results[tp] = E.unknown_topic_or_partition
            elif len(metadata.encode("utf-8")) > self.config.offset_metadata_max_bytes:
                results[tp] = E.offset_metadata_too_large
            else:
                accepted[tp] = CommittedOffset(entry.offset, entry.leader_epoch, metadata, now)
        if accepted:
            records: list[tuple[bytes, bytes | None]] = [
                (encode_offset_key(OffsetKey(group_id, tp[0], tp[1])),
                 encode_offset_value(OffsetValue(c.offset, c.leader_epoch, c.metadata,
                                                 c.commit_timestamp_ms)))
                for tp, c in accepted.items()]
            write_error = await self._enqueue(self.partition_for(group_id), records).wait()
            if not write_error and self._groups.get(group_id) is group:
                group.offsets.update(accepted)
            for tp in accepted:
                results[tp] = write_error
        emit("offsets_committed", group_id=group_id, member_id=member_id,
             generation=generation_id, partitions=len(offsets),
             errors=sum(1 for e in results.values() if e))
        return results

    def _validate_offset_commit(self, group: Group, generation_id: int, member_id: str,
                                instance_id: str | None) -> int:
        if group.state is GroupState.DEAD:
            return E.coordinator_not_available
        if generation_id >= 0 or member_id or instance_id is not None:
            error = self._validate_member(group, member_id, instance_id)
            if error:
                return error
            if generation_id != group.generation_id:
                return E.illegal_generation
            return E.none
        if group.state is not GroupState.EMPTY:
            # Only members may commit while the group has members.
            return E.unknown_member_id
        return E.none

    # ----------------------------------------------------------------- OffsetFetch
    def fetch_offsets(self, group_id: str, partitions: Sequence[TopicPartition] | None
                      ) -> tuple[int, dict[TopicPartition, CommittedOffset | None]]:
        """Committed offsets of ``partitions`` (all the group has when None)."""
        if not self._loaded:
            return E.coordinator_load_in_progress, {}
        group = self._groups.get(group_id)
        stored = group.offsets if group is not None and group.state is not GroupState.DEAD else {}
        if partitions is None:
            return E.none, dict(sorted(stored.items()))
        return E.none, {tp: stored.get(tp) for tp in partitions}

    # ---------------------------------------------------------------- OffsetDelete
    async def delete_offsets(self, group_id: str, partitions: Sequence[TopicPartition]
                             ) -> tuple[int, dict[TopicPartition, int]]:
        """Delete committed offsets of partitions the group does not consume (KIP-496)."""
        if not self._loaded:
            return E.coordinator_load_in_progress, {}
        if self._nursery is None:
            return E.coordinator_not_available, {}
        group = self._groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return E.group_id_not_found, {}
        if group.state is not GroupState.EMPTY and group.protocol_type != "consumer":
            return E.non_empty_group, {}
        results: dict[TopicPartition, int] = {}
        deletable = []
        topics = self.log_manager.topics
        for tp in partitions:
            info = topics.get(tp[0])
            if info is None or not 0 <= tp[1] < info.num_partitions:
                results[tp] = E.unknown_topic_or_partition
            elif group.state is not GroupState.EMPTY and group.is_subscribed_to(tp[0]):
                results[tp] = E.group_subscribed_to_topic
            else:
                results[tp] = E.none
                deletable.append(tp)
        present = [tp for tp in deletable if tp in group.offsets]
        if present:
            error = await self._write_offset_tombstones(group, present)
            if error:
                return error, {}
            for tp in present:
                group.offsets.pop(tp, None)
        return E.none, results

    @staticmethod
    def _offset_tombstones(group_id: str, partitions: Iterable[TopicPartition]
                           ) -> list[tuple[bytes, bytes | None]]:
        return [(encode_offset_key(OffsetKey(group_id, t, p)), None) for t, p in partitions]

    async def _write_offset_tombstones(self, group: Group, partitions: Iterable[TopicPartition]
                                       ) -> int:
        records = self._offset_tombstones(group.group_id, partitions)
        if not records:
            return E.none
        return await self._enqueue(self.partition_for(group.group_id), records).wait()

    # -------------------------------------------------------- ListGroups / Describe
    def list_groups(self, states: Iterable[str] = ()) -> tuple[int, list[GroupListing]]:
        if not self._loaded:
            return E.coordinator_load_in_progress, []
        wanted = {s.lower() for s in states}
        listings = []
        for group in self._groups.values():
            if group.state is GroupState.DEAD:
                continue
            if wanted and group.state.value.lower() not in wanted:
                continue
            listings.append(GroupListing(group.group_id, group.protocol_type or "",
                                         group.state.value))
        return E.none, listings

    def describe_group(self, group_id: str) -> GroupSummary:
        if not self._loaded:
            return GroupSummary(E.coordinator_load_in_progress, group_id, "", "", "", ())
        group = self._groups.get(group_id)
        if group is None:
            return GroupSummary(E.none, group_id, GroupState.DEAD.value, "", "", ())
        stable = group.state is GroupState.STABLE
        protocol = group.protocol_name or ""
        members = []
        for m in group.members.values():
            metadata = b""
            if stable:
                try:
                    metadata = m.metadata_for(protocol)
                except KeyError:
                    metadata = b""
            members.append(MemberSummary(m.member_id, m.group_instance_id, m.client_id,
                                         m.client_host, metadata,
                                         m.assignment if stable else b""))
        return GroupSummary(E.none, group_id, group.state.value, group.protocol_type or "",
                            protocol if stable else "", tuple(members))

    # ---------------------------------------------------------------- DeleteGroups
    async def delete_groups(self, group_ids: Sequence[str]) -> dict[str, int]:
        results: dict[str, int] = {}
        for group_id in group_ids:
            results[group_id] = await self._delete_group(group_id)
        return results

    async def _delete_group(self, group_id: str) -> int:
        if not self._loaded:
            return E.coordinator_load_in_progress
        if self._nursery is None:
            return E.coordinator_not_available
        group = self._groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return E.group_id_not_found
        if group.state is not GroupState.EMPTY:
            return E.non_empty_group
        error = self._remove_group(group, "DeleteGroups")
        return await error.wait() if error is not None else E.none

    def _remove_group(self, group: Group, reason: str, removed: Iterable[TopicPartition] = ()
                      ) -> Pending[int] | None:
        """Mark an empty group Dead, forget it and write its tombstones: one per offset it
        still has and per offset just ``removed`` from it (an offset record without one would
        bring the group back at the next load, and compaction would keep it for good)."""
        self._transition(group, GroupState.DEAD)
        del self._groups[group.group_id]
        records = self._offset_tombstones(group.group_id,
                                          sorted(set(group.offsets).union(removed)))
        records.append((encode_group_key(GroupKey(group.group_id)), None))
        group.offsets.clear()
        emit("group_deleted", group_id=group.group_id, reason=reason)
        return self._enqueue(self.partition_for(group.group_id), records)

    def forget_topic(self, topic: str) -> int:
        """Kafka's ``onPartitionsDeleted``: a deleted topic's committed offsets leave every
        group (with tombstones), and an empty group left without offsets goes with them.

        Otherwise topics created and deleted under churn pile up in the groups that committed
        to them until the retention expires them, and a topic created again under the name
        would resume from the old topic's offsets. Returns how many offsets were removed.
        """
        if not self._loaded or self._nursery is None:
            return 0
        total = 0
        for group in list(self._groups.values()):
            gone = [tp for tp in group.offsets if tp[0] == topic]
            if not gone:
                continue
            total += len(gone)
            for tp in gone:
                del group.offsets[tp]
            self._offsets_removed(group, sorted(gone), "topic deleted")
        return total

    def _offsets_removed(self, group: Group, removed: list[TopicPartition], reason: str
                         ) -> None:
        """After ``removed`` left ``group``'s offsets: an empty group left without offsets
        goes (Kafka's ``maybeDeleteGroup``), a consumer group of the id too; otherwise the
        removed offsets get their tombstones."""
        if group.state is GroupState.EMPTY and not group.offsets and not group.pending_members:
            self._remove_group(group, reason, removed)
            self.consumer_groups.remove_if_empty(group.group_id)
        elif removed:
            self._enqueue(self.partition_for(group.group_id),
                          self._offset_tombstones(group.group_id, removed))

    # -------------------------------------------------------------- offset expiry
    async def _expire_offsets_periodically(self) -> None:
        await every(self.config.offsets_retention_check_interval_ms, self.expire_offsets)

    def expire_offsets(self) -> int:
        """Kafka's ``cleanupGroupMetadata``: expire old offsets, drop empty groups without any.

        Returns how many offsets expired.
        """
        now = self._now_ms()
        retention = self.config.offsets_retention_minutes * 60 * 1000
        total = 0
        for group in list(self._groups.values()):
            expired = self.consumer_groups.expired_offsets(group.group_id, group.offsets, now,
                                                           retention)
            if expired is None:
                expired = self._expired_offsets(group, now, retention)
            if expired:
                total += len(expired)
                for tp in expired:
                    del group.offsets[tp]
                emit("offsets_expired", group_id=group.group_id, partitions=len(expired),
                     state=group.state.value)
            self._offsets_removed(group, expired,
                                  "offsets expired" if expired else "empty group")
        # Consumer groups (KIP-848) without offsets have no entry above: an empty one goes
        # too, or every group id a consumer ever joined with stays for good.
        for group_id in [g for g in self.consumer_groups.groups if g not in self._groups]:
            if self.consumer_groups.remove_if_empty(group_id):
                emit("group_deleted", group_id=group_id, reason="empty group")
        return total

    @staticmethod
    def _expired_offsets(group: Group, now: int, retention: int) -> list[TopicPartition]:
        if group.protocol_type is not None and group.state is GroupState.EMPTY:
            # A consumer group that is now empty: everything expires together, counted from
            # the moment it became empty.
            return [tp for tp in group.offsets if now - group.state_timestamp_ms >= retention]
        if group.protocol_type is None:
            # Simple consumers: each offset counts from its own commit.
            return [tp for tp, c in group.offsets.items()
                    if now - c.commit_timestamp_ms >= retention]
        if group.protocol_type == "consumer" and group.subscribed_topics is not None \
                and group.state is GroupState.STABLE:
            # Offsets of topics nobody subscribes to any more.
            return [tp for tp, c in group.offsets.items()
                    if tp[0] not in group.subscribed_topics
                    and now - c.commit_timestamp_ms >= retention]
        return []
