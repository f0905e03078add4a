"""A consumer group's state: its members, generation, selected protocol and committed offsets.

This is Kafka's ``GroupMetadata`` / ``MemberMetadata`` (classic protocol). Everything here is plain
data without Trio: :mod:`.classic_state` decides the transitions, and the
:class:`~trio_broker.coordinator.coordinator.GroupCoordinator` owns the timers and the requests that
wait. A request that waits is known here only by its *ticket* (an int the state hands out), so the
data model holds no scopes or events.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable

import attrs


class GroupState(enum.Enum):
    """The classic group states, named as Kafka reports them in ListGroups/DescribeGroups."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


#: Legal predecessor states of each state (Kafka's ``GroupState.validPreviousStates``).
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(
        {GroupState.STABLE, GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE,
         GroupState.EMPTY, GroupState.DEAD}
    ),
}

#: The protocol type of Kafka consumers; only their subscriptions are parsed (for OffsetDelete).
CONSUMER_PROTOCOL_TYPE = "consumer"


@attrs.frozen
class JoinResult:
    """What a JoinGroup request is answered with."""

    error: int
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    #: ``(member_id, group_instance_id, metadata)`` for the leader; empty for followers.
    members: tuple[tuple[str, str | None, bytes], ...] = ()
    #: KIP-814 (JoinGroup v9+): the leader is told it leads but must not assign (a restarted
    #: static leader of a stable group).
    skip_assignment: bool = False


@attrs.frozen
class SyncResult:
    """What a SyncGroup request is answered with."""

    error: int
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@attrs.frozen
class CommittedOffset:
    """One committed offset (Kafka's ``OffsetAndMetadata``)."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int


@attrs.define(eq=False)
class Member:
    """One member of a group (Kafka's ``MemberMetadata``)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    #: ``(name, metadata)`` in the member's order of preference.
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    #: The ticket of this member's JoinGroup while it waits for the rebalance to complete.
    join_ticket: int | None = None
    #: The ticket of this member's SyncGroup while it waits for the leader's assignment.
    sync_ticket: int | None = None
    #: True from the first join until that join completes (Kafka's ``isNew``).
    is_new: bool = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def awaiting_join(self) -> bool:
        return self.join_ticket is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_ticket is not None

    # The names of the tickets from when they were Trio events (read by the server tests).
    @property
    def join_waiter(self) -> int | None:
        return self.join_ticket

    @property
    def sync_waiter(self) -> int | None:
        return self.sync_ticket

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise KeyError(protocol)

    def matches(self, protocols: Iterable[tuple[str, bytes]]) -> bool:
        """True when the member asks for exactly the protocols it already has."""
        return list(protocols) == self.protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among ``candidates``."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError("member supports none of the candidate protocols")


@attrs.define(eq=False)
class Group:
    """One group (Kafka's ``GroupMetadata``)."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    #: Wall-clock time of the last state change, in ms (used by offset expiry of empty groups).
    state_timestamp_ms: int = 0
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = attrs.field(factory=dict)
    #: Member ids handed out with MEMBER_ID_REQUIRED that have not joined yet.
    pending_members: set[str] = attrs.field(factory=set)
    #: Static members: group.instance.id -> member id.
    static_members: dict[str, str] = attrs.field(factory=dict)
    #: Members of the current generation that have not sent SyncGroup yet.
    pending_sync: set[str] = attrs.field(factory=set)
    offsets: dict[tuple[str, int], CommittedOffset] = attrs.field(factory=dict)
    #: During the initial rebalance delay: a member joined since the delay was last extended.
    new_member_added: bool = False
    #: The join timer is the initial delay (it never completes early).
    join_is_initial: bool = False
    #: With the initial delay: how much of the rebalance timeout is left to extend it by.
    join_remaining_ms: int = 0
    #: The generation the sync timer (rebalance timeout for SyncGroup) guards; None when unarmed.
    sync_generation: int | None = None
    #: Monotonic time (s) the current rebalance started, for the rebalance_completed event.
    rebalance_started_at: float = 0.0
    #: Topics the members subscribe to (consumer protocol); None when unknown.
    subscribed_topics: frozenset[str] | None = None

    # -- membership
    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def members_view(self) -> tuple[tuple[str, str | None, bytes], ...]:
        """What the leader's JoinGroup answer lists: every member with its metadata for the
        selected protocol (Kafka's ``currentMemberMetadata``)."""
        protocol = self.protocol_name or ""
        return tuple((m.member_id, m.group_instance_id, m.metadata_for(protocol))
                     for m in self.members.values())

    def add_member(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove_member(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.group_instance_id is not None and \
                self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        self.pending_sync.discard(member_id)
        if self.leader_id == member_id:
            # Kafka hands leadership to the next member (a member that has rejoined, if any).
            rejoined = [m.member_id for m in self.members.values() if m.awaiting_join]
            candidates = rejoined or list(self.members)
            self.leader_id = candidates[0] if candidates else None
        return member

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> Member:
        """Give a static member a new member id (Kafka's ``replaceStaticMember``)."""
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        self.static_members[instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        return member

    def static_member_id(self, instance_id: str | None) -> str | None:
        if instance_id is None:
            return None
        return self.static_members.get(instance_id)

    # -- protocols
    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def candidate_protocols(self) -> set[str]:
        """Protocols every member supports."""
        members = list(self.members.values())
        if not members:
            return set()
        common = set(members[0].protocol_names())
        for member in members[1:]:
            common &= set(member.protocol_names())
        return common

    def supports_protocols(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Whether a member with these protocols may join (Kafka's ``supportsProtocols``)."""
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        if protocol_type != self.protocol_type:
            return False
        counts: dict[str, int] = {}
        for member in self.members.values():
            for name in set(member.protocol_names()):
                counts[name] = counts.get(name, 0) + 1
        return any(counts.get(name, 0) == len(self.members) for name, _ in protocols)

    def select_protocol(self) -> str:
        """The protocol all members support with the most first-choice votes.

        Ties go to the protocol the leader prefers, so the choice is deterministic.
        """
        candidates = self.candidate_protocols()
        if not candidates:
            raise ValueError("no protocol is supported by every member")
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        best = max(votes.values())
        leader = self.members.get(self.leader_id or "")
        order = leader.protocol_names() if leader else sorted(votes)
        for name in order:
            if votes.get(name) == best:
                return name
        return sorted(name for name, count in votes.items() if count == best)[0]

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            try:
                parsed = parse_subscription(member.metadata_for(self.protocol_name))
            except (KeyError, ValueError):
                return None
            topics.update(parsed)
        return frozenset(topics)

    def is_subscribed_to(self, topic: str) -> bool:
        # Unknown subscriptions count as subscribed, as in Kafka (never delete in-use offsets).
        return self.subscribed_topics is None or topic in self.subscribed_topics

    # -- waiting members
    def all_members_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if not m.awaiting_join]


_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


def parse_subscription(data: bytes) -> list[str]:
    """Topics of a ``ConsumerProtocolSubscription`` (every version starts with them)."""
    try:
        (version,) = _INT16.unpack_from(data, 0)
        if version < 0:
            raise ValueError("negative subscription version")
        (count,) = _INT32.unpack_from(data, 2)
        position = 6
        topics = []
        for _ in range(max(count, 0)):
            (length,) = _INT16.unpack_from(data, position)
            position += 2
            if length < 0 or position + length > len(data):
                raise ValueError("bad topic name length")
            topics.append(data[position:position + length].decode("utf-8"))
            position += length
        return topics
    except (struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"unparseable subscription: {exc}") from None
