"""Values the group coordinator takes and returns: OffsetCommit entries, DescribeGroups and
ListGroups views. Re-exported from :mod:`trio_broker.coordinator.coordinator`."""

from __future__ import annotations

import attrs

TopicPartition = tuple[str, int]


@attrs.frozen
class OffsetCommitEntry:
    """One partition of an OffsetCommit request."""

    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""
    #: OffsetCommit v1's client timestamp; -1 (every other version): the coordinator's clock.
    commit_timestamp_ms: int = -1


@attrs.frozen
class MemberSummary:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@attrs.frozen
class GroupSummary:
    """DescribeGroups' view of one group."""

    error: int
    group_id: str
    state: str
    protocol_type: str
    protocol_name: str
    members: tuple[MemberSummary, ...]


@attrs.frozen
class GroupListing:
    group_id: str
    protocol_type: str
    state: str

