"""The consumer group protocol of KIP-848 as a sans-IO state machine (no trio, no storage).

A :class:`ConsumerGroup` takes ConsumerGroupHeartbeat requests (with the current time and the
partition counts of the broker's topics) and answers them; what must happen around it (timers,
writes to ``__consumer_offsets``, log events) is returned, never done here.

The rules are Kafka's (``GroupMetadataManager`` and ``CurrentAssignmentBuilder``):

* the **group epoch** goes up whenever the membership, a subscription or the partition counts of
  subscribed topics change; the **target assignment** is recomputed by the assignor for that
  epoch (``assignment_epoch``);
* every member has a **member epoch** and converges towards its target: first it must revoke the
  partitions it holds that the target no longer gives it (state ``unrevoked_partitions``; its
  epoch stays); once its heartbeat reports that it owns none of them it moves to the target
  epoch and gets the target partitions that are **free**, i.e. that no other member still holds
  or is still revoking (state ``unreleased_partitions`` while some are not free yet);
* so a partition is never held by two members at once.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import attrs

from ..linear_regex import RegexError, compiled, regex_error_message
from .assignors import ASSIGNORS, TopicPartition

#: Member epochs with a meaning in a request.
JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2

STABLE = "stable"
UNREVOKED = "unrevoked_partitions"
UNRELEASED = "unreleased_partitions"

Partitions = frozenset[TopicPartition]
EMPTY: Partitions = frozenset()

_V = TypeVar("_V")


class HeartbeatError(Exception):
    """A heartbeat refused with a Kafka error code (``kio`` ``ErrorCode`` value)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@attrs.frozen
class GroupSettings:
    """The broker settings a consumer group obeys."""

    session_timeout_ms: int = 45000
    heartbeat_interval_ms: int = 5000
    max_size: int = 2**31 - 1
    assignors: tuple[str, ...] = ("uniform", "range")


@attrs.frozen
class HeartbeatRequest:
    """The fields of ConsumerGroupHeartbeat that matter; ``None`` means "unchanged"."""

    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Partitions | None = None
    client_id: str = ""
    client_host: str = ""
    #: Whether the member's principal may DESCRIBE a topic (None: no authorizer). Topics its
    #: regex matches are only those it may describe, as Kafka resolves regexes.
    topic_authorized: Callable[[str], bool] | None = attrs.field(default=None, eq=False)


@attrs.frozen
class Member:
    """One member as the coordinator knows it (a value: every change makes a new one)."""

    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: str = STABLE
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = 300000
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    #: The topics its regex matched that its principal may DESCRIBE, resolved at its latest
    #: heartbeat (None: no authorizer, every matching topic counts).
    regex_topics: tuple[str, ...] | None = None
    server_assignor: str | None = None
    assigned: Partitions = EMPTY
    revoking: Partitions = EMPTY

    def subscribes_to(self, topic: str) -> bool:
        if topic in self.subscribed_topic_names:
            return True
        regex = self.subscribed_topic_regex
        if regex is None:
            return False
        if self.regex_topics is not None:
            return topic in self.regex_topics
        return _matches(regex, topic)


class _Versioned(dict[str, _V]):
    """A dict that counts the changes of its values (``version``): how a group tells cheaply
    whether a heartbeat changed it (:meth:`ConsumerGroup.state_token`). Only item assignment,
    ``del`` and ``pop`` change it; the values are immutable."""

    def __init__(self, items: Mapping[str, _V] | None = None) -> None:
        super().__init__(items or {})
        self.version = 0

    def __setitem__(self, key: str, value: _V) -> None:
        old = self.get(key, _ABSENT)
        super().__setitem__(key, value)
        if old is not value and old != value:
            self.version += 1

    def __delitem__(self, key: str) -> None:
        super().__delitem__(key)
        self.version += 1

    def pop(self, key: str, default: Any = None) -> Any:
        if key not in self:
            return default
        value = self[key]
        del self[key]
        return value


#: No value (``None`` is one).
_ABSENT: Any = object()


class _Members(_Versioned[Member]):
    """A group's members by id, counting the topic names and the (unresolved) patterns they
    subscribe to as members come, change and go: every heartbeat asks which topics the group
    subscribes to, and walking every member for it made a steady heartbeat O(members)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: dict[str, int] = {}
        self.patterns: dict[str, int] = {}

    def __setitem__(self, member_id: str, member: Member) -> None:
        old = self.get(member_id)
        if old is None or _subscription(old) != _subscription(member):
            if old is not None:
                self._count(old, -1)
            self._count(member, 1)
        super().__setitem__(member_id, member)

    def __delitem__(self, member_id: str) -> None:
        self._count(self[member_id], -1)
        super().__delitem__(member_id)

    def _count(self, member: Member, step: int) -> None:
        for name in member.subscribed_topic_names:
            _add(self.names, name, step)
        if member.regex_topics is not None:  # resolved under its ACLs
            for name in member.regex_topics:
                _add(self.names, name, step)
        elif member.subscribed_topic_regex is not None:
            _add(self.patterns, member.subscribed_topic_regex, step)


def _subscription(member: Member) -> tuple[object, ...]:
    return member.subscribed_topic_names, member.subscribed_topic_regex, member.regex_topics


def _add(counts: dict[str, int], key: str, step: int) -> None:
    count = counts.get(key, 0) + step
    if count:
        counts[key] = count
    else:
        del counts[key]


@attrs.frozen
class Event:
    """A log event for the coordinator to emit (name and fields)."""

    name: str
    fields: Mapping[str, object]


@attrs.frozen
class HeartbeatResult:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    #: The member's assignment when it must be sent (None: unchanged since the last answer).
    assignment: Partitions | None


@functools.lru_cache(maxsize=65536)
def _matches(pattern: str, topic: str) -> bool:
    # Every heartbeat re-resolves regex subscriptions against all topics: remember answers.
    return compiled(pattern).fullmatch(topic) is not None


def _format(partitions: Partitions) -> str:
    return ",".join(f"{t}-{p}" for t, p in sorted(partitions))


class ConsumerGroup:
    """One consumer-protocol group: members, epochs, target assignment and reconciliation."""

    def __init__(self, group_id: str, settings: GroupSettings) -> None:
        self.group_id = group_id
        self.settings = settings
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members = _Members()
        self.target: _Versioned[Partitions] = _Versioned()
        #: Partition counts of the subscribed topics when the target was computed.
        self.subscribed_topics: dict[str, int] = {}
        #: Static members: instance id -> member id.
        self.static_members: dict[str, str] = {}
        self.events: list[Event] = []
        # encoded_snapshot's texts: per member id, the value last encoded and its text.
        self._member_text: dict[str, tuple[Member, str]] = {}
        self._target_text: dict[str, tuple[Partitions, str]] = {}

    # ------------------------------------------------------------------- views
    @property
    def state(self) -> str:
        """Kafka's consumer group states: empty, assigning, reconciling, stable."""
        if not self.members:
            return "empty"
        if self.assignment_epoch != self.group_epoch:
            return "assigning"
        if any(m.member_epoch != self.assignment_epoch or m.state != STABLE
               for m in self.members.values()):
            return "reconciling"
        return "stable"

    @property
    def assignor_name(self) -> str:
        """The assignor in use: the most requested by members, else the broker's first."""
        wanted = [m.server_assignor for m in self.members.values() if m.server_assignor]
        if wanted:
            return max(sorted(set(wanted)), key=wanted.count)
        return self.settings.assignors[0]

    def owner_of(self, tp: TopicPartition) -> str | None:
        for m in self.members.values():
            if tp in m.assigned or tp in m.revoking:
                return m.member_id
        return None

    def take_events(self) -> list[Event]:
        events, self.events = self.events, []
        return events

    # --------------------------------------------------------------- heartbeat
    def heartbeat(self, req: HeartbeatRequest, topics: Mapping[str, int]) -> HeartbeatResult:
        """Handle one ConsumerGroupHeartbeat; raises :class:`HeartbeatError` to refuse it."""
        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(req)
        if req.server_assignor and req.server_assignor not in self.settings.assignors:
            raise HeartbeatError("unsupported_assignor",
                                 f"Assignor {req.server_assignor} is not supported.")
        if req.subscribed_topic_regex is not None:
            try:
                compiled(req.subscribed_topic_regex)
            except RegexError as exc:
                raise HeartbeatError("invalid_regular_expression",
                                     regex_error_message(exc)) from None
        epoch = self.group_epoch
        member = self._member_for(req)
        before = member
        member = self._update_fields(member, req)
        member = self._resolve_regex(member, req, topics)
        self.members[member.member_id] = member
        # One bump per heartbeat, whatever changed (a join, a subscription, the metadata).
        if self.group_epoch == epoch:
            if self._subscription_changed(before, member):
                self._bump(f"subscription of {member.member_id} changed")
            elif self._metadata_changed(topics):
                self._bump("subscribed topic metadata changed")
        if self.assignment_epoch != self.group_epoch:
            self._compute_target(topics)
        updated = self._reconcile(member, req.owned)
        self.members[updated.member_id] = updated
        send = updated.assigned != before.assigned or req.owned is not None or \
            updated.member_epoch != before.member_epoch or req.member_epoch == JOIN_EPOCH
        return HeartbeatResult(updated.member_id, updated.member_epoch,
                               self.settings.heartbeat_interval_ms,
                               updated.assigned if send else None)

    def _member_for(self, req: HeartbeatRequest) -> Member:
        member_id = req.member_id
        if req.member_epoch == JOIN_EPOCH:
            if not member_id:
                raise HeartbeatError("invalid_request", "MemberId can't be empty.")
            if req.instance_id is not None and req.instance_id in self.static_members:
                old_id = self.static_members[req.instance_id]
                old = self.members.get(old_id)
                if old is not None and old_id != member_id:
                    if old.member_epoch != STATIC_LEAVE_EPOCH:
                        raise HeartbeatError(
                            "unreleased_instance_id",
                            f"Static member {req.instance_id} is still in use by {old_id}.")
                    # The static member comes back: it takes over the old member's epoch and
                    # assignment, without a rebalance (KIP-345 as KIP-848 keeps it).
                    del self.members[old_id]
                    target = self.target.pop(old_id, EMPTY)
                    self.target[member_id] = target
                    self.static_members[req.instance_id] = member_id
                    # Epoch 0: reconciliation moves it to the current epoch with what it had.
                    member = attrs.evolve(old, member_id=member_id, member_epoch=0,
                                          previous_member_epoch=-1, state=STABLE)
                    self.events.append(Event("group_member_joined", {
                        "member_id": member_id, "group_instance_id": req.instance_id,
                        "member_epoch": member.member_epoch, "rejoined": True}))
                    return member
            existing = self.members.get(member_id)
            if existing is not None:
                # A member that rejoins with epoch 0 lost its partitions: it starts afresh
                # (its target stays; what it held is released).
                return attrs.evolve(existing, member_epoch=0, previous_member_epoch=-1,
                                    assigned=EMPTY, revoking=EMPTY, state=STABLE)
            if len(self.members) >= self.settings.max_size:
                raise HeartbeatError("group_max_size_reached",
                                     f"The consumer group has reached its maximum capacity of "
                                     f"{self.settings.max_size} members.")
            if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
                raise HeartbeatError("invalid_request",
                                     "SubscribedTopicNames or SubscribedTopicRegex must be set "
                                     "in first request.")
            if req.instance_id is not None:
                self.static_members[req.instance_id] = member_id
            self.events.append(Event("group_member_joined", {
                "member_id": member_id, "group_instance_id": req.instance_id or "",
                "member_epoch": 0, "rejoined": False}))
            self._bump(f"member {member_id} joined")
            return Member(member_id, instance_id=req.instance_id)
        found = self.members.get(member_id)
        if found is None:
            raise HeartbeatError("unknown_member_id",
                                 f"Member {member_id} is not a member of group {self.group_id}.")
        # A lost response: the member may still be at its previous epoch, as long as what it
        # owns is part of what it has now (Kafka's tolerance for a retried heartbeat).
        member = found
        if req.member_epoch != member.member_epoch and not (
                req.member_epoch == member.previous_member_epoch and req.owned is not None
                and req.owned <= member.assigned):
            self.events.append(Event("group_member_fenced", {
                "member_id": member_id, "member_epoch": member.member_epoch,
                "request_epoch": req.member_epoch, "reason": "stale member epoch"}))
            raise HeartbeatError("fenced_member_epoch",
                                 f"The consumer group member has a smaller member epoch "
                                 f"({req.member_epoch}) than the one known by the group "
                                 f"coordinator ({member.member_epoch}).")
        return member

    @staticmethod
    def _update_fields(member: Member, req: HeartbeatRequest) -> Member:
        changes: dict[str, Any] = {"client_id": req.client_id or member.client_id,
                                      "client_host": req.client_host or member.client_host}
        if req.rack_id is not None:
            changes["rack_id"] = req.rack_id
        if req.rebalance_timeout_ms >= 0:
            changes["rebalance_timeout_ms"] = req.rebalance_timeout_ms
        if req.subscribed_topic_names is not None:
            changes["subscribed_topic_names"] = tuple(sorted(set(req.subscribed_topic_names)))
        if req.subscribed_topic_regex is not None:
            changes["subscribed_topic_regex"] = req.subscribed_topic_regex or None
        if req.server_assignor is not None:
            changes["server_assignor"] = req.server_assignor or None
        return attrs.evolve(member, **changes)

    @staticmethod
    def _resolve_regex(member: Member, req: HeartbeatRequest, topics: Mapping[str, int]
                       ) -> Member:
        # Kafka resolves a regex against the topics the member's principal may DESCRIBE, so
        # a regex never hands out (or reveals) a topic its ACLs hide.
        regex, authorized = member.subscribed_topic_regex, req.topic_authorized
        if regex is None or authorized is None:
            resolved = None
        else:
            resolved = tuple(sorted(t for t in topics if _matches(regex, t) and authorized(t)))
        if resolved == member.regex_topics:
            return member
        return attrs.evolve(member, regex_topics=resolved)

    @staticmethod
    def _subscription_changed(a: Member, b: Member) -> bool:
        return _subscription(a) != _subscription(b) or a.server_assignor != b.server_assignor

    def _bump(self, reason: str) -> None:
        self.group_epoch += 1
        self.events.append(Event("consumer_group_epoch_bumped",
                                 {"group_epoch": self.group_epoch, "reason": reason}))

    def subscribed_metadata(self, topics: Mapping[str, int]) -> dict[str, int]:
        """Partition counts of the topics some member subscribes to (names or regex)."""
        names, patterns = self.members.names, self.members.patterns
        if not patterns:
            return {t: topics[t] for t in sorted(names) if t in topics}
        return {t: n for t, n in topics.items()
                if t in names or any(_matches(p, t) for p in patterns)}

    def _metadata_changed(self, topics: Mapping[str, int]) -> bool:
        return self.subscribed_metadata(topics) != self.subscribed_topics

    def _compute_target(self, topics: Mapping[str, int]) -> None:
        metadata = self.subscribed_metadata(topics)
        # Members usually share a few subscriptions: each is resolved against the metadata
        # once, not once per member.
        resolved: dict[tuple[object, ...], frozenset[str]] = {}
        subscriptions = {}
        for m in self.members.values():
            key = _subscription(m)
            topics_of = resolved.get(key)
            if topics_of is None:
                topics_of = resolved[key] = frozenset(t for t in metadata if m.subscribes_to(t))
            subscriptions[m.member_id] = topics_of
        assignor = ASSIGNORS[self.assignor_name]
        target = self.target
        computed = assignor(subscriptions, metadata, target)
        # In place: a member's unchanged target stays the same object (its version and its
        # text in encoded_snapshot are kept).
        for member_id in [m for m in target if m not in computed]:
            del target[member_id]
        for member_id, partitions in computed.items():
            if target.get(member_id) != partitions:
                target[member_id] = partitions
        self.subscribed_topics = metadata
        self.assignment_epoch = self.group_epoch

    # ------------------------------------------------------------ reconciliation
    def _reconcile(self, member: Member, owned: Partitions | None) -> Member:
        """Kafka's ``CurrentAssignmentBuilder``: move ``member`` towards its target."""
        target = self.target.get(member.member_id, EMPTY)
        if member.state == UNREVOKED:
            if owned is None or owned & member.revoking:
                return member  # still revoking: wait for a heartbeat that shows it done
            member = attrs.evolve(member, revoking=EMPTY, state=STABLE)
        elif member.member_epoch == self.assignment_epoch and member.state == STABLE:
            return member
        keep = member.assigned & target
        revoke = member.assigned - target
        if revoke:
            return self._changed(member, attrs.evolve(
                member, assigned=keep, revoking=member.revoking | revoke, state=UNREVOKED))
        others = {tp for m in self.members.values() if m.member_id != member.member_id
                  for tp in m.assigned | m.revoking}
        free = frozenset(tp for tp in target - keep if tp not in others)
        assigned = keep | free
        state = UNRELEASED if assigned != target else STABLE
        return self._changed(member, attrs.evolve(
            member, assigned=assigned, state=state, member_epoch=self.assignment_epoch,
            previous_member_epoch=member.member_epoch))

    def _changed(self, before: Member, after: Member) -> Member:
        added = after.assigned - before.assigned
        removed = before.assigned - after.assigned
        if added or removed or before.member_epoch != after.member_epoch:
            self.events.append(Event("assignment_changed", {
                "member_id": after.member_id, "member_epoch": after.member_epoch,
                "state": after.state, "added": _format(added), "removed": _format(removed)}))
        return after

    # ---------------------------------------------------------------- leaving
    def _leave(self, req: HeartbeatRequest) -> HeartbeatResult:
        member = self.members.get(req.member_id)
        if member is None:
            raise HeartbeatError("unknown_member_id",
                                 f"Member {req.member_id} is not a member of group "
                                 f"{self.group_id}.")
        if req.member_epoch == STATIC_LEAVE_EPOCH and member.instance_id is not None:
            # A static member that will come back: it keeps its target assignment and its
            # partitions (nobody else gets them meanwhile) until its session expires.
            self.members[member.member_id] = attrs.evolve(member, member_epoch=STATIC_LEAVE_EPOCH)
            self.events.append(Event("group_member_left", {
                "member_id": member.member_id, "group_instance_id": member.instance_id,
                "reason": "static member leaving temporarily"}))
            return HeartbeatResult(req.member_id, STATIC_LEAVE_EPOCH,
                                   self.settings.heartbeat_interval_ms, None)
        self.remove(member.member_id, "member left")
        return HeartbeatResult(req.member_id, req.member_epoch,
                               self.settings.heartbeat_interval_ms, None)

    def remove(self, member_id: str, reason: str, *, fenced: bool = False) -> bool:
        """Remove a member (left, session expired, fenced); bumps the group epoch."""
        member = self.members.pop(member_id, None)
        if member is None:
            return False
        self.target.pop(member_id, None)
        if member.instance_id is not None and \
                self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        self.events.append(Event("group_member_fenced" if fenced else "group_member_left", {
            "member_id": member_id, "group_instance_id": member.instance_id or "",
            "reason": reason} if not fenced else {
            "member_id": member_id, "member_epoch": member.member_epoch,
            "request_epoch": -1, "reason": reason}))
        if member.assigned or member.revoking:
            self.events.append(Event("assignment_changed", {
                "member_id": member_id, "member_epoch": -1, "state": "removed", "added": "",
                "removed": _format(member.assigned | member.revoking)}))
        self._bump(reason)
        return True

    # ----------------------------------------------------------- persistence
    def state_token(self) -> tuple[object, ...]:
        """A cheap value that differs whenever :meth:`snapshot` would: the epochs, the change
        counts of the members and targets, and the subscribed topics (a few)."""
        return (self.group_epoch, self.assignment_epoch, self.members.version,
                self.target.version, dict(self.subscribed_topics))

    def snapshot(self) -> dict[str, object]:
        """The whole group as plain data (what ``__consumer_offsets`` keeps)."""
        return {
            "group_epoch": self.group_epoch, "assignment_epoch": self.assignment_epoch,
            "subscribed_topics": self.subscribed_topics,
            "target": {m: sorted(tps) for m, tps in self.target.items()},
            "members": [_member_data(m) for m in self.members.values()],
        }

    def encoded_snapshot(self) -> bytes:
        """:meth:`snapshot` as JSON, keys sorted: the bytes of ``json.dumps(snapshot(),
        sort_keys=True)``. Every change of the group writes the whole group, so each member's
        and each target's text is kept while it is unchanged (both are immutable values: an
        unchanged one is the same object); a change then costs one member's encoding and a
        join, not an encoding of every member (a join into a group of N members was O(N) of
        encoding, so N joins were quadratic)."""
        members, self._member_text = _texts(
            self._member_text, self.members,
            lambda _id, m: json.dumps(_member_data(m), sort_keys=True))
        targets, self._target_text = _texts(
            self._target_text, {m: self.target[m] for m in sorted(self.target)},
            lambda member_id, tps: f"{json.dumps(member_id)}: {json.dumps(sorted(tps))}")
        return (f'{{"assignment_epoch": {self.assignment_epoch}, '
                f'"group_epoch": {self.group_epoch}, "members": [{", ".join(members)}], '
                f'"subscribed_topics": {json.dumps(self.subscribed_topics, sort_keys=True)}, '
                f'"target": {{{", ".join(targets)}}}}}').encode()

    @classmethod
    def restore(cls, group_id: str, settings: GroupSettings, data: Mapping[str, object]
                ) -> ConsumerGroup:
        """Rebuild a group from :meth:`snapshot` data."""
        group = cls(group_id, settings)
        group.group_epoch = int(data["group_epoch"])  # type: ignore[call-overload]
        group.assignment_epoch = int(data["assignment_epoch"])  # type: ignore[call-overload]
        group.subscribed_topics = dict(data["subscribed_topics"])  # type: ignore[call-overload]
        target = data["target"]
        assert isinstance(target, Mapping)
        group.target = _Versioned(
            {m: frozenset((t, int(p)) for t, p in tps) for m, tps in target.items()})
        members = data["members"]
        assert isinstance(members, list)
        for raw in members:
            fields = dict(raw)
            fields["assigned"] = frozenset((t, int(p)) for t, p in fields["assigned"])
            fields["revoking"] = frozenset((t, int(p)) for t, p in fields["revoking"])
            fields["subscribed_topic_names"] = tuple(fields["subscribed_topic_names"])
            if fields.get("regex_topics") is not None:
                fields["regex_topics"] = tuple(fields["regex_topics"])
            member = Member(**fields)
            group.members[member.member_id] = member
            if member.instance_id is not None:
                group.static_members[member.instance_id] = member.member_id
        return group


def _member_data(m: Member) -> dict[str, object]:
    """One member of :meth:`ConsumerGroup.snapshot`."""
    return {**attrs.asdict(m, recurse=False),
            "assigned": sorted(m.assigned), "revoking": sorted(m.revoking),
            "subscribed_topic_names": list(m.subscribed_topic_names),
            "regex_topics": None if m.regex_topics is None else list(m.regex_topics)}


def _texts(cache: dict[str, tuple[_V, str]], values: Mapping[str, _V],
           encode: Callable[[str, _V], str]) -> tuple[list[str], dict[str, tuple[_V, str]]]:
    """The text of each of ``values`` (in its order), from ``cache`` where the value is the
    same object, else ``encode``d; and the cache of exactly these values."""
    kept: dict[str, tuple[_V, str]] = {}
    for key, value in values.items():
        hit = cache.get(key)
        kept[key] = hit if hit is not None and hit[0] is value else (value, encode(key, value))
    return [text for _, text in kept.values()], kept
