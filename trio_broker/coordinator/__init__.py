"""The classic consumer-group coordinator and committed offsets (``__consumer_offsets``)."""

from .coordinator import GroupCoordinator, OffsetCommitEntry
from .group import Group, GroupState, Member

__all__ = ["Group", "GroupCoordinator", "GroupState", "Member", "OffsetCommitEntry"]
