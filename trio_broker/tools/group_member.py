"""A consumer-group member for ``trio_broker consume --group``: the consumer protocol of
KIP-848 (ConsumerGroupHeartbeat), in which the broker computes the assignment and the client
only reconciles it.

The member joins with epoch 0 and its subscription (``--topic`` names, or ``--include`` as the
subscribed regex); each heartbeat answer may carry a new assignment (topic ids and
partitions). The console consumer then commits the positions of the partitions it gives up,
starts the new ones at their committed offsets, and acknowledges by sending the partitions it
now owns in the next heartbeat, which it sends at once. A fenced or unknown member rejoins.
On exit it commits and leaves (epoch -1), so the group rebalances at once rather than after
the session timeout.
"""

from __future__ import annotations

import base64
import time
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from .admin_client import AdminConnection
from .common import Request, ToolError, check, ms
from .topics import metadata

CONSUMER_GROUP_HEARTBEAT = 68
#: Kafka's consumer default max.poll.interval.ms, sent as the member's rebalance timeout.
REBALANCE_TIMEOUT_MS = 300_000
#: How long joining may take before the consumer gives up.
JOIN_TIMEOUT_S = 30.0
#: Errors after which a member rejoins with epoch 0 (its partitions are lost, not revoked).
_REJOIN = (ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id)

Partitions = frozenset[tuple[str, int]]


def new_member_id() -> str:
    """A client-generated member id, as Kafka's ``Uuid.randomUuid().toString()``: 22
    URL-safe base64 characters (ConsumerGroupHeartbeat v1 wants one from the client)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


class GroupMember:
    """One consumer-protocol member of ``group`` on the coordinator connection ``coord``;
    ``meta`` is the connection used to map topic ids to names (Metadata)."""

    def __init__(self, coord: AdminConnection, meta: AdminConnection, group: str, *,
                 topics: list[str] | None = None, regex: str | None = None) -> None:
        if CONSUMER_GROUP_HEARTBEAT not in coord.broker_versions:
            raise ToolError("The broker does not support CONSUMER_GROUP_HEARTBEAT (KIP-848): "
                            "--group cannot join the group")
        self.coord, self.meta, self.group = coord, meta, group
        self.topics, self.regex = topics, regex
        self.member_id = new_member_id()
        self.epoch = 0
        self.owned: Partitions = frozenset()
        #: The broker has been told what this member owns (the last assignment reconciled).
        self.acknowledged = True
        self.interval_s = 5.0
        self.next_heartbeat = 0.0
        self._names: dict[Any, str] = {}

    def _name(self, topic_id: Any) -> str | None:
        if topic_id not in self._names:
            self._names = {t.topic_id: str(t.name) for t in metadata(self.meta).topics
                           if getattr(t, "topic_id", None) is not None}
        return self._names.get(topic_id)

    def _ids(self, partitions: Partitions) -> dict[Any, list[int]]:
        by_name = {name: topic_id for topic_id, name in self._names.items()}
        found: dict[Any, list[int]] = {}
        for topic, partition in sorted(partitions):
            if topic in by_name:
                found.setdefault(by_name[topic], []).append(partition)
        return found

    def due(self) -> bool:
        return time.monotonic() >= self.next_heartbeat

    def heartbeat(self, *, leaving: bool = False) -> Partitions | None:
        """One ConsumerGroupHeartbeat; the new assignment when the answer carries one (after
        a fencing: the empty set, everything lost), else None."""
        request = Request(self.coord, CONSUMER_GROUP_HEARTBEAT)
        joining = self.epoch == 0 and not leaving
        owned: Any = None
        if joining:
            owned = ()
        elif not self.acknowledged and not leaving:
            owned = tuple(request.nested("TopicPartitions", topic_id=topic_id,
                                         partitions=tuple(parts))
                          for topic_id, parts in self._ids(self.owned).items())
        response = request.send(
            group_id=self.group, member_id=self.member_id,
            member_epoch=-1 if leaving else self.epoch, instance_id=None, rack_id=None,
            rebalance_timeout=ms(REBALANCE_TIMEOUT_MS if joining else -1),
            subscribed_topic_names=(tuple(self.topics) if joining and self.topics is not None
                                    else None),
            subscribed_topic_regex=self.regex if joining else None,
            server_assignor=None, topic_partitions=owned)
        self.next_heartbeat = time.monotonic() + self.interval_s
        if leaving:
            return None
        if response.error_code in _REJOIN:
            self.epoch, self.owned, self.acknowledged = 0, frozenset(), True
            self.next_heartbeat = 0.0
            return frozenset()
        check(response.error_code, response.error_message, f"group {self.group}")
        if owned is not None:
            self.acknowledged = True
        self.epoch = int(response.member_epoch)
        interval = response.heartbeat_interval.total_seconds()
        if interval > 0:
            self.interval_s = interval
            self.next_heartbeat = time.monotonic() + interval
        if response.assignment is None:
            return None
        assigned = frozenset(
            (name, int(p)) for t in response.assignment.topic_partitions
            if (name := self._name(t.topic_id)) is not None for p in t.partitions)
        return assigned

    def reconciled(self, partitions: Partitions) -> None:
        """The consumer now reads ``partitions``: tell the broker at once."""
        self.owned = partitions
        self.acknowledged = False
        self.next_heartbeat = 0.0

    def join(self) -> Partitions:
        """Heartbeat until the broker answers with this member's first assignment."""
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        while True:
            assigned = self.heartbeat()
            if assigned is not None and self.epoch > 0:
                return assigned
            if time.monotonic() > deadline:
                raise ToolError(f"Timed out joining group {self.group}")
            time.sleep(min(0.1, self.interval_s))

    def leave(self) -> None:
        """LeaveGroup of the consumer protocol: a heartbeat with epoch -1."""
        if self.epoch > 0:
            try:
                self.heartbeat(leaving=True)
            finally:
                self.epoch = 0
