"""The offset and admin rules of classic groups, sans-IO: OffsetCommit, OffsetFetch, OffsetDelete,
ListGroups, DescribeGroups, DeleteGroups, offsets of deleted topics and offset expiry.

No Trio here. Each call answers a :class:`~.classic_state.Decision` over the groups of a
:class:`~.classic_state.ClassicGroups`; what must wait for a write (a commit, a deletion) gets a
ticket that the write's follow-up answers.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

import attrs
from kio.schema.errors import ErrorCode

from .classic_state import (
    AnswerError,
    ClassicGroups,
    Decision,
    Effects,
    Write,
    validate_member,
)
from .group import CommittedOffset, Group, GroupState
from .records import (
    GroupKey,
    OffsetKey,
    OffsetValue,
    encode_group_key,
    encode_offset_key,
    encode_offset_value,
)
from .summaries import GroupListing, GroupSummary, MemberSummary, OffsetCommitEntry, TopicPartition

E = ErrorCode

#: The partition count of a topic, None when it does not exist.
PartitionCount = Callable[[str], "int | None"]
#: A consumer-protocol group's expired offsets (None: ``group_id`` is not one).
ConsumerExpiry = Callable[[str, Mapping[TopicPartition, CommittedOffset], int, int],
                          "list[TopicPartition] | None"]

Commit = dict[TopicPartition, int]


@attrs.frozen(eq=False)
class OffsetRecords:
    """A group's offset records, encoded by the writer (:class:`~.classic_state.EncodedLater`):
    the ``committed`` offsets in their order, then tombstones for the ``removed`` partitions
    (sorted) and, with ``group_tombstone``, for the group itself."""

    group_id: str
    committed: Mapping[TopicPartition, CommittedOffset] = attrs.field(factory=dict)
    removed: Collection[TopicPartition] = ()
    group_tombstone: bool = False

    def __len__(self) -> int:
        return len(self.committed) + len(self.removed) + int(self.group_tombstone)

    def encode(self) -> tuple[tuple[bytes, bytes | None], ...]:
        group_id = self.group_id
        records: list[tuple[bytes, bytes | None]] = [
            (encode_offset_key(OffsetKey(group_id, tp[0], tp[1])),
             encode_offset_value(OffsetValue(c.offset, c.leader_epoch, c.metadata,
                                             c.commit_timestamp_ms)))
            for tp, c in self.committed.items()]
        records.extend((encode_offset_key(OffsetKey(group_id, t, p)), None)
                       for t, p in sorted(self.removed))
        if self.group_tombstone:
            records.append((encode_group_key(GroupKey(group_id)), None))
        return tuple(records)


@attrs.define
class CheckedEntries:
    """An OffsetCommit's partitions checked against the topics (Kafka's per-partition checks:
    the partition exists, the metadata fits), before the group's checks. The shell fills it a
    slice at a time for a commit of thousands of partitions (:func:`check_entries`), yielding
    between slices; the rules use it if no topic it looked at has changed since."""

    now_ms: int
    results: Commit = attrs.field(factory=dict)
    accepted: dict[TopicPartition, CommittedOffset] = attrs.field(factory=dict)
    #: The partition count of each topic seen, as the check saw it.
    counts: dict[str, int | None] = attrs.field(factory=dict)

    def still_valid(self, partitions: PartitionCount) -> bool:
        return all(partitions(topic) == count for topic, count in self.counts.items())


def check_entries(entries: Iterable[tuple[TopicPartition, OffsetCommitEntry]],
                  partitions: PartitionCount, max_metadata_bytes: int,
                  into: CheckedEntries) -> None:
    """Check ``entries`` into ``into`` (see :class:`CheckedEntries`)."""
    results, accepted, counts, now = into.results, into.accepted, into.counts, into.now_ms
    for tp, entry in entries:
        topic, index = tp
        if topic in counts:
            count = counts[topic]
        else:
            count = counts[topic] = partitions(topic)
        metadata = entry.metadata or ""
        if count is None or not 0 <= index < count:
            results[tp] = E.unknown_topic_or_partition
        # A string's UTF-8 form is at most 4 bytes a character: most need no encoding.
        elif (len(metadata) * 4 > max_metadata_bytes
              and len(metadata.encode("utf-8")) > max_metadata_bytes):
            results[tp] = E.offset_metadata_too_large
        else:
            # OffsetAndMetadata.fromRequest: a v1 client's timestamp is the commit's time,
            # from which offsets.retention.minutes counts.
            stamp = entry.commit_timestamp_ms if entry.commit_timestamp_ms >= 0 else now
            accepted[tp] = CommittedOffset(entry.offset, entry.leader_epoch, metadata, stamp)


def _exists(partitions: PartitionCount, tp: TopicPartition) -> bool:
    count = partitions(tp[0])
    return count is not None and 0 <= tp[1] < count


@attrs.frozen(eq=False)
class OffsetsCommitted:
    """After the commit's records are stored: the offsets become current, the ticket answered."""

    group: Group
    ticket: int
    accepted: Mapping[TopicPartition, CommittedOffset]
    results: Commit
    member_id: str
    generation: int
    requested: int
    groups: Mapping[str, Group]

    def finish(self, fx: Effects, error: int) -> None:
        if not error and self.groups.get(self.group.group_id) is self.group:
            self.group.offsets.update(self.accepted)
        results = dict(self.results)
        for tp in self.accepted:
            results[tp] = error
        _emit_committed(fx, self.group.group_id, self.member_id, self.generation,
                        self.requested, results)
        fx.answer(self.ticket, results)


@attrs.frozen(eq=False)
class OffsetsDeleted:
    """After the tombstones are stored: the offsets go, the ticket is answered."""

    group: Group
    ticket: int
    present: tuple[TopicPartition, ...]
    results: Commit

    def finish(self, fx: Effects, error: int) -> None:
        if error:
            fx.answer(self.ticket, (error, {}))
            return
        for tp in self.present:
            self.group.offsets.pop(tp, None)
        fx.answer(self.ticket, (E.none, self.results))


def _emit_committed(fx: Effects, group_id: str, member_id: str, generation: int,
                    requested: int, results: Commit) -> None:
    fx.emit("offsets_committed", group_id=group_id, member_id=member_id,
            generation=generation, partitions=requested,
            errors=sum(1 for e in results.values() if e))


class ClassicOffsets:
    """The offset and admin rules over the groups of ``core``."""

    def __init__(self, core: ClassicGroups) -> None:
        self.core = core

    @property
    def groups(self) -> dict[str, Group]:
        return self.core.groups

    # ---------------------------------------------------------------- OffsetCommit
    def commit_offsets(self, *, group_id: str, generation_id: int, member_id: str,
                       group_instance_id: str | None,
                       offsets: Mapping[TopicPartition, OffsetCommitEntry],
                       partitions: PartitionCount,
                       checked: CheckedEntries | None = None) -> Decision[Commit]:
        """Commit offsets (members, or simple consumers with generation -1). The shell checked
        availability and the consumer-protocol groups first, and may have ``checked`` the
        entries already (a huge commit). A commit to write is answered through a ticket once
        written."""
        fx = Effects()
        core = self.core

        def everywhere(error: int) -> Decision[Commit]:
            return fx.decide(dict.fromkeys(offsets, error))

        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                # The group is unknown, so this member's generation cannot be current.
                return everywhere(E.illegal_generation)
            group = self.groups[group_id] = Group(group_id, state_timestamp_ms=core.wall_ms())
        error = self._validate_offset_commit(group, generation_id, member_id, group_instance_id)
        if error:
            return everywhere(error)
        if group.state is GroupState.COMPLETING_REBALANCE:
            return everywhere(E.rebalance_in_progress)
        member = group.members.get(member_id)
        if member is not None:
            core.touch(fx, group, member)
        if checked is None or not checked.still_valid(partitions):
            checked = CheckedEntries(core.wall_ms())
            check_entries(offsets.items(), partitions, core.rules.offset_metadata_max_bytes,
                          checked)
        results, accepted = checked.results, checked.accepted
        if not accepted:
            _emit_committed(fx, group_id, member_id, generation_id, len(offsets), results)
            return fx.decide(results)
        ticket = core.new_ticket()
        fx.write(Write(core.partition_for(group_id), OffsetRecords(group_id, accepted),
                       then=OffsetsCommitted(
            group, ticket, accepted, results, member_id, generation_id, len(offsets),
            self.groups)))
        return fx.decide(ticket=ticket)

    @staticmethod
    def _validate_offset_commit(group: Group, generation_id: int, member_id: str,
                                instance_id: str | None) -> int:
        if group.state is GroupState.DEAD:
            return E.coordinator_not_available
        if generation_id >= 0 or member_id or instance_id is not None:
            error = validate_member(group, member_id, instance_id)
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
        if not self.core.loaded:
            return E.coordinator_load_in_progress, {}
        group = self.groups.get(group_id)
        stored = group.offsets if group is not None and group.state is not GroupState.DEAD else {}
        if partitions is None:
            return E.none, dict(sorted(stored.items()))
        return E.none, {tp: stored.get(tp) for tp in partitions}

    # ---------------------------------------------------------------- OffsetDelete
    def delete_offsets(self, group_id: str, partitions: Sequence[TopicPartition],
                       exists: PartitionCount) -> Decision[tuple[int, Commit]]:
        """Delete committed offsets of partitions the group does not consume (KIP-496)."""
        fx = Effects()
        error = self.core.unavailable()
        if error:
            return fx.decide((error, {}))
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return fx.decide((E.group_id_not_found, {}))
        if group.state is not GroupState.EMPTY and group.protocol_type != "consumer":
            return fx.decide((E.non_empty_group, {}))
        results: Commit = {}
        deletable = []
        for tp in partitions:
            if not _exists(exists, tp):
                results[tp] = E.unknown_topic_or_partition
            elif group.state is not GroupState.EMPTY and group.is_subscribed_to(tp[0]):
                results[tp] = E.group_subscribed_to_topic
            else:
                results[tp] = E.none
                deletable.append(tp)
        present = tuple(tp for tp in deletable if tp in group.offsets)
        if not present:
            return fx.decide((E.none, results))
        ticket = self.core.new_ticket()
        fx.write(Write(self.core.partition_for(group_id),
                       OffsetRecords(group_id, removed=present),
                       then=OffsetsDeleted(group, ticket, present, results)))
        return fx.decide(ticket=ticket)

    # -------------------------------------------------------- ListGroups / Describe
    def list_groups(self, states: Iterable[str] = ()) -> tuple[int, list[GroupListing]]:
        if not self.core.loaded:
            return E.coordinator_load_in_progress, []
        wanted = {s.lower() for s in states}
        listings = []
        for group in self.groups.values():
            if group.state is GroupState.DEAD:
                continue
            if wanted and group.state.value.lower() not in wanted:
                continue
            listings.append(GroupListing(group.group_id, group.protocol_type or "",
                                         group.state.value))
        return E.none, listings

    def describe_group(self, group_id: str) -> GroupSummary:
        if not self.core.loaded:
            return GroupSummary(E.coordinator_load_in_progress, group_id, "", "", "", ())
        group = self.groups.get(group_id)
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
    def delete_group(self, group_id: str) -> Decision[int]:
        """One group of DeleteGroups; ``ticket`` gets the error code of the tombstones' write."""
        fx = Effects()
        error = self.core.unavailable()
        if error:
            return fx.decide(error)
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return fx.decide(E.group_id_not_found)
        if group.state is not GroupState.EMPTY:
            return fx.decide(E.non_empty_group)
        ticket = self.core.new_ticket()
        self._remove_group(fx, group, "DeleteGroups", ticket=ticket)
        return fx.decide(ticket=ticket)

    def _remove_group(self, fx: Effects, group: Group, reason: str,
                      removed: Iterable[TopicPartition] = (), ticket: int | None = None) -> None:
        """Mark an empty group Dead, forget it and write its tombstones: one per offset it
        still has and per offset just ``removed`` from it (an offset record without one would
        bring the group back at the next load, and compaction would keep it for good)."""
        self.core.transition(fx, group, GroupState.DEAD)
        del self.groups[group.group_id]
        records = OffsetRecords(group.group_id, removed=set(group.offsets).union(removed),
                                group_tombstone=True)
        group.offsets.clear()
        fx.emit("group_deleted", group_id=group.group_id, reason=reason)
        fx.write(Write(self.core.partition_for(group.group_id), records,
                       then=None if ticket is None else AnswerError(ticket)))

    def forget_topic(self, topic: str) -> Decision[int]:
        """Kafka's ``onPartitionsDeleted``: a deleted topic's committed offsets leave every
        group (with tombstones), and an empty group left without offsets goes with them.

        Otherwise topics created and deleted under churn pile up in the groups that committed
        to them until the retention expires them, and a topic created again under the name
        would resume from the old topic's offsets. Answers how many offsets were removed.
        """
        fx = Effects()
        if self.core.unavailable():
            return fx.decide(0)
        total = 0
        for group in list(self.groups.values()):
            gone = [tp for tp in group.offsets if tp[0] == topic]
            if not gone:
                continue
            total += len(gone)
            for tp in gone:
                del group.offsets[tp]
            self._offsets_removed(fx, group, gone, "topic deleted")
        return fx.decide(total)

    def _offsets_removed(self, fx: Effects, group: Group, removed: list[TopicPartition],
                         reason: str) -> None:
        """After ``removed`` left ``group``'s offsets: an empty group left without offsets
        goes (Kafka's ``maybeDeleteGroup``; the decision names it in ``removed_groups``, so
        that a consumer group of the id goes too); otherwise the removed offsets get their
        tombstones."""
        if group.state is GroupState.EMPTY and not group.offsets and not group.pending_members:
            self._remove_group(fx, group, reason, removed)
            fx.removed_groups.append(group.group_id)
        elif removed:
            fx.write(Write(self.core.partition_for(group.group_id),
                           OffsetRecords(group.group_id, removed=removed)))

    # -------------------------------------------------------------- offset expiry
    def expire_offsets(self, retention_ms: int, consumer_expiry: ConsumerExpiry
                       ) -> Decision[int]:
        """Kafka's ``cleanupGroupMetadata``: expire old offsets, drop empty groups without any.

        Answers how many offsets expired.
        """
        fx = Effects()
        now = self.core.wall_ms()
        total = 0
        for group in list(self.groups.values()):
            expired = consumer_expiry(group.group_id, group.offsets, now, retention_ms)
            if expired is None:
                expired = expired_offsets(group, now, retention_ms)
            if expired:
                total += len(expired)
                for tp in expired:
                    del group.offsets[tp]
                fx.emit("offsets_expired", group_id=group.group_id, partitions=len(expired),
                        state=group.state.value)
            self._offsets_removed(fx, group, expired,
                                  "offsets expired" if expired else "empty group")
        return fx.decide(total)


def expired_offsets(group: Group, now: int, retention: int) -> list[TopicPartition]:
    """The offsets of a classic group past ``offsets.retention.minutes`` (Kafka's rules)."""
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
