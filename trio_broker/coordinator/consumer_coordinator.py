"""The consumer group protocol (KIP-848) beside the classic coordinator: the I/O around
:class:`~trio_broker.coordinator.consumer_group.ConsumerGroup`.

It shares the classic :class:`GroupCoordinator`'s nursery, its writer to ``__consumer_offsets``
(both reached through the narrow :class:`GroupHost`, never the coordinator's insides) and its
committed offsets (a consumer group's offsets live in an offsets-only classic ``Group``
entry, so OffsetCommit/OffsetFetch/OffsetDelete work unchanged). Each member's session is a
cancel scope whose deadline a heartbeat moves; when it expires the member is fenced.

Durability: the group's whole state is one snapshot record per change, key version
:data:`SNAPSHOT_KEY_VERSION` (Kafka's key layout: int16 version, group id) with a JSON value,
in a zstd-compressed batch (:data:`SNAPSHOT_COMPRESSION`); a tombstone deletes it. Loading keeps
the last snapshot of each group (docs/groups.md).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import trio
from kio.schema.errors import ErrorCode

from ..config import BrokerConfig
from ..observability.log import emit
from ..protocol.compression import COMPRESSION_ZSTD, DEFAULT_DECOMPRESSED_LIMIT
from ..protocol.records import build_batch
from ..storage.manager import LogManager
from .consumer_group import (
    STATIC_LEAVE_EPOCH,
    UNREVOKED,
    ConsumerGroup,
    GroupSettings,
    HeartbeatError,
    HeartbeatRequest,
    HeartbeatResult,
)
from .group import Group
from .records import _Reader, _Writer
from .waiting import Pending

E = ErrorCode


class GroupHost(Protocol):
    """What the consumer-protocol groups need of the coordinator they live beside."""

    @property
    def is_loaded(self) -> bool:
        """``__consumer_offsets`` is loaded."""

    @property
    def is_active(self) -> bool:
        """Loaded and running."""

    @property
    def is_resigned(self) -> bool:
        """Resigned (broker shutdown): no longer coordinating."""

    def now_ms(self) -> int:
        """The wall clock, in ms."""

    def partition_for(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition of ``group_id``."""

    def spawn(self, fn: Callable[..., Awaitable[None]], *args: Any) -> None:
        """Run a task in the coordinator's nursery (a failure costs only that task)."""

    def enqueue_batch(self, partition: int, batch: bytes) -> Pending[int]:
        """Queue a batch for ``__consumer_offsets`` behind every earlier write."""


#: Key version of a consumer group snapshot in ``__consumer_offsets`` (Kafka uses 3..8 for its
#: per-record consumer group types; this one is ours, so no Kafka tool misreads the value).
SNAPSHOT_KEY_VERSION = 100


#: The codec of snapshot batches. A snapshot repeats every member's field names, topic names
#: and client ids: zstd (level 3, Kafka's) makes one 10-50x smaller (2,000 members: 960 KB ->
#: 8-100 KB in about 1 ms), so a group can grow far past what one uncompressed record of
#: ``message.max.bytes`` holds (about 2,000 members), and a join storm writes that much less.
SNAPSHOT_COMPRESSION = COMPRESSION_ZSTD


def encode_snapshot_key(group_id: str) -> bytes:
    return _Writer().int16(SNAPSHOT_KEY_VERSION).string(group_id).getvalue()


def encode_snapshot_batch(group_id: str, value: bytes | None, timestamp_ms: int) -> bytes:
    """The ``__consumer_offsets`` batch of one snapshot (or tombstone), compressed."""
    return build_batch([(encode_snapshot_key(group_id), value, (), timestamp_ms)],
                       attributes=SNAPSHOT_COMPRESSION)


def decode_snapshot_key(key: bytes) -> str | None:
    """The group id of a snapshot key, None for any other key."""
    if len(key) < 2 or struct.unpack_from(">h", key)[0] != SNAPSHOT_KEY_VERSION:
        return None
    reader = _Reader(key)
    reader.int16()
    return reader.string()


class ConsumerGroups:
    """Every consumer-protocol group of one coordinator."""

    def __init__(self, config: BrokerConfig, log_manager: LogManager, host: GroupHost,
                 classic: Mapping[str, Group]) -> None:
        self.host = host
        self.config = config
        self.log_manager = log_manager
        #: The classic groups (a consumer group may take over only an empty one's id).
        self.classic = classic
        self.enabled = "consumer" in _names(config.group_coordinator_rebalance_protocols)
        self.settings = GroupSettings(
            session_timeout_ms=config.group_consumer_session_timeout_ms,
            heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms,
            max_size=config.group_consumer_max_size,
            assignors=tuple(_names(config.group_consumer_assignors)))
        self.groups: dict[str, ConsumerGroup] = {}
        self._loaded: dict[str, dict[str, Any] | None] = {}
        self._timers: dict[tuple[str, str], trio.CancelScope] = {}
        #: Members told to revoke partitions: fenced when they have not within their
        #: rebalance timeout (Kafka's revocation timeout).
        self._revocations: dict[tuple[str, str], trio.CancelScope] = {}
        #: The snapshot last sent to the log per group: a heartbeat whose snapshot cannot be
        #: written is rolled back to it.
        self._written: dict[str, bytes] = {}

    # ---------------------------------------------------------------- loading
    def load_record(self, key: bytes, value: bytes | None) -> bool:
        """Take a ``__consumer_offsets`` record if it is a snapshot (True), else leave it."""
        group_id = decode_snapshot_key(key)
        if group_id is None:
            return False
        self._loaded[group_id] = None if value is None else json.loads(value)
        if value is None:
            self._written.pop(group_id, None)
        else:
            self._written[group_id] = bytes(value)
        return True

    def finish_load(self) -> None:
        for group_id, data in self._loaded.items():
            if data is None:
                continue
            try:
                self.groups[group_id] = ConsumerGroup.restore(group_id, self.settings, data)
            except (KeyError, TypeError, ValueError, AttributeError, AssertionError) as exc:
                # As Kafka skips a record it cannot load: one damaged snapshot must not stop
                # the coordinator (and with it the broker's start-up).
                self._written.pop(group_id, None)
                emit("group_load_skipped", group_id=group_id,
                     error=f"{type(exc).__name__}: {exc}")
        self._loaded.clear()

    def start(self) -> None:
        """Start a session timer for every restored member (the coordinator is running)."""
        for group in self.groups.values():
            for member_id in group.members:
                self._touch(group, member_id)

    # -------------------------------------------------------------- heartbeat
    def topics(self) -> dict[str, int]:
        return {name: info.num_partitions for name, info in self.log_manager.topics.items()
                if not name.startswith("__")}

    async def heartbeat(self, group_id: str, req: HeartbeatRequest
                        ) -> tuple[int, str | None, HeartbeatResult | None]:
        """``(error, message, result)`` of one ConsumerGroupHeartbeat."""
        if not self.enabled:
            return E.unsupported_version, "The consumer group protocol is disabled.", None
        if not self.host.is_loaded:
            return E.coordinator_load_in_progress, None, None
        if not self.host.is_active or self.host.is_resigned:
            return E.not_coordinator, None, None
        if not group_id:
            return E.invalid_group_id, "GroupId can't be empty.", None
        classic = self.classic.get(group_id)
        # An empty classic group (offsets only) becomes a consumer group, as Kafka converts it.
        if classic is not None and (classic.members or classic.pending_members):
            return E.group_id_not_found, f"Group {group_id} is not a consumer group.", None
        group = self.groups.get(group_id)
        created = group is None
        if group is None:
            if req.member_epoch != 0:
                return E.unknown_member_id, f"Group {group_id} has no member {req.member_id}.", \
                    None
            group = ConsumerGroup(group_id, self.settings)
        before = group.state_token()
        try:
            result = group.heartbeat(req, self.topics())
        except HeartbeatError as exc:
            self._emit(group)
            return getattr(E, exc.code), exc.message, None
        value = batch = None
        if group.state_token() != before:
            value = group.encoded_snapshot()
            batch = encode_snapshot_batch(group_id, value, self.host.now_ms())
            limit = self.config.message_max_bytes
            if len(batch) > limit or len(value) > DEFAULT_DECOMPRESSED_LIMIT:
                # The whole group is one record: one that cannot be written (or, beyond the
                # decompression cap, loaded) must not become the group's state, or every
                # later change of any member fails the same way.
                self._roll_back(group_id, created)
                detail = (f"snapshot of group {group_id} would be {len(batch)} bytes "
                          f"({len(value)} uncompressed), over the limit of {limit} "
                          f"(message.max.bytes): heartbeat of {req.member_id} not applied")
                emit("coordinator_write_failed", partition=self.host.partition_for(group_id),
                     error=detail)
                return E.unknown_server_error, detail, None
        if created:
            self.groups[group_id] = group
        self._emit(group)
        member = group.members.get(req.member_id)
        if member is not None and member.member_epoch != STATIC_LEAVE_EPOCH:
            self._touch(group, req.member_id)
        elif req.member_id not in group.members:
            self._cancel(group_id, req.member_id)
        self._watch_revocation(group, req.member_id)
        if value is None or batch is None:
            return E.none, None, result
        error = int(await self._write_value(group_id, value, batch).wait())
        if error:
            return error, None, None
        return E.none, None, result

    def _roll_back(self, group_id: str, created: bool) -> None:
        """Put the group back as its last written snapshot has it (timers are untouched: the
        heartbeat has not reached them)."""
        if created:
            return  # not in self.groups yet
        written = self._written.get(group_id)
        if written is not None:
            self.groups[group_id] = ConsumerGroup.restore(group_id, self.settings,
                                                          json.loads(written))

    def _write_value(self, group_id: str, value: bytes | None,
                     batch: bytes | None = None) -> Any:
        """Write ``value`` (None: the tombstone) as the group's snapshot; ``batch`` is its
        encoded batch when the caller has built it already."""
        if value is None:
            self._written.pop(group_id, None)
        else:
            self._written[group_id] = value
        if batch is None:
            batch = encode_snapshot_batch(group_id, value, self.host.now_ms())
        return self.host.enqueue_batch(self.host.partition_for(group_id), batch)

    def _emit(self, group: ConsumerGroup) -> None:
        gid = group.group_id
        for event in group.take_events():
            f: Mapping[str, Any] = event.fields
            if event.name == "group_member_joined":
                emit("group_member_joined", group_id=gid, member_id=f["member_id"],
                     group_instance_id=f["group_instance_id"] or "",
                     member_epoch=f["member_epoch"], rejoined=f["rejoined"])
            elif event.name == "group_member_left":
                emit("group_member_left", group_id=gid, member_id=f["member_id"],
                     group_instance_id=f["group_instance_id"] or "", reason=f["reason"])
            elif event.name == "group_member_fenced":
                emit("group_member_fenced", group_id=gid, member_id=f["member_id"],
                     member_epoch=f["member_epoch"], request_epoch=f["request_epoch"],
                     reason=f["reason"])
            elif event.name == "assignment_changed":
                emit("assignment_changed", group_id=gid, member_id=f["member_id"],
                     member_epoch=f["member_epoch"], state=f["state"], added=f["added"],
                     removed=f["removed"])
            elif event.name == "consumer_group_epoch_bumped":
                emit("consumer_group_epoch_bumped", group_id=gid,
                     group_epoch=f["group_epoch"], reason=f["reason"])

    # ----------------------------------------------------------------- timers
    def _touch(self, group: ConsumerGroup, member_id: str) -> None:
        deadline = trio.current_time() + self.settings.session_timeout_ms / 1000
        key = (group.group_id, member_id)
        scope = self._timers.get(key)
        if scope is not None:
            scope.deadline = deadline
            return
        scope = self._timers[key] = trio.CancelScope(deadline=deadline)
        self.host.spawn(self._session, group.group_id, member_id, scope)

    def _cancel(self, group_id: str, member_id: str) -> None:
        scope = self._timers.pop((group_id, member_id), None)
        if scope is not None:
            scope.deadline = trio.current_time() + 10**9
            scope.cancel()

    def _watch_revocation(self, group: ConsumerGroup, member_id: str) -> None:
        member = group.members.get(member_id)
        key = (group.group_id, member_id)
        revoking = member is not None and member.state == UNREVOKED
        scope = self._revocations.get(key)
        if not revoking:
            if scope is not None:
                del self._revocations[key]
                scope.cancel()
            return
        if scope is None and member is not None:
            deadline = trio.current_time() + member.rebalance_timeout_ms / 1000
            scope = self._revocations[key] = trio.CancelScope(deadline=deadline)
            self.host.spawn(self._revocation, group.group_id, member_id, scope)

    async def _revocation(self, group_id: str, member_id: str, scope: trio.CancelScope) -> None:
        with scope:
            await trio.sleep_forever()
        if self._revocations.get((group_id, member_id)) is not scope:
            return  # revoked in time: the scope was cancelled and forgotten
        del self._revocations[(group_id, member_id)]
        group = self.groups.get(group_id)
        member = None if group is None else group.members.get(member_id)
        if group is None or member is None or member.state != UNREVOKED:
            return
        group.remove(member_id, "rebalance timeout expired before revocation", fenced=True)
        self._cancel(group_id, member_id)
        self._emit(group)
        self._write_value(group_id, group.encoded_snapshot())

    async def _session(self, group_id: str, member_id: str, scope: trio.CancelScope) -> None:
        with scope:
            await trio.sleep_forever()
        if self._timers.get((group_id, member_id)) is not scope or \
                trio.current_time() < scope.deadline:
            return  # cancelled because the member left, not expired
        del self._timers[(group_id, member_id)]
        group = self.groups.get(group_id)
        if group is None:
            return
        if group.remove(member_id, "session timeout expired", fenced=True):
            self._emit(group)
            self._write_value(group_id, group.encoded_snapshot())

    # ------------------------------------------------------ shared with classic
    def refuses_classic(self, group_id: str) -> bool:
        """A classic JoinGroup for this group must get INCONSISTENT_GROUP_PROTOCOL; an empty
        consumer group is given up instead so the classic member can take the id over."""
        group = self.groups.get(group_id)
        if group is None:
            return False
        if group.members:
            return True
        del self.groups[group_id]
        self._write_value(group_id, None)
        return False

    def member_epoch(self, group_id: str, member_id: str | None) -> tuple[bool, int | None]:
        """``(is a consumer group, epoch of member_id or None)``: what OffsetFetch v9+ and the
        OffsetCommit version rule of KIP-848 look up."""
        group = self.groups.get(group_id)
        if group is None:
            return False, None
        member = group.members.get(member_id) if member_id is not None else None
        return True, None if member is None else member.member_epoch

    def check_commit(self, group_id: str, member_epoch: int, member_id: str, *,
                     transactional: bool = False) -> int | None:
        """None when ``group_id`` is not a consumer group; else the OffsetCommit error (0 ok).

        Without member id and epoch a commit is accepted only while the group is empty, except a
        transactional one (a producer that names no member is not fenced, as in Kafka 4)."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        if member_epoch < 0 and not member_id:
            return E.none if transactional or not group.members else E.unknown_member_id
        member = group.members.get(member_id)
        if member is None:
            return E.unknown_member_id
        if member_epoch != member.member_epoch:
            return E.stale_member_epoch
        return E.none

    def expired_offsets(self, group_id: str, offsets: Mapping[tuple[str, int], Any], now: int,
                        retention: int) -> list[tuple[str, int]] | None:
        """Offsets of a consumer group past ``offsets.retention.minutes`` (None: not one).

        As Kafka: while the group has members only offsets of topics nobody subscribes to
        expire; an empty group's offsets expire by their commit time.
        """
        group = self.groups.get(group_id)
        if group is None:
            return None
        old = [tp for tp, c in offsets.items() if now - c.commit_timestamp_ms >= retention]
        if not group.members:
            return old
        return [tp for tp in old
                if not any(m.subscribes_to(tp[0]) for m in group.members.values())]

    def remove_if_empty(self, group_id: str) -> bool:
        """Kafka's ``maybeDeleteGroup`` after offset expiry: forget a consumer group without
        members (its offsets are gone, or it never had any) and write its tombstone."""
        group = self.groups.get(group_id)
        if group is None or group.members:
            return False
        del self.groups[group_id]
        self._write_value(group_id, None)
        return True

    async def delete(self, group_id: str) -> int | None:
        """DeleteGroups for a consumer group: None when it is not one."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        if group.members:
            return E.non_empty_group
        del self.groups[group_id]
        return int(await self._write_value(group_id, None).wait())


def _names(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]
