"""Incremental fetch sessions (KIP-227): Kafka's ``FetchSession``/``FetchSessionCache`` rules, sans-IO.

A client opens a session with a *full* fetch (session id 0, epoch 0): the broker answers with
every partition and a new session id. Later *incremental* fetches (that id, epoch 1, 2, ...) name
only the partitions whose fetch parameters changed (and ``forgotten_topics_data`` for the ones to
drop); the broker reads every partition of the session and answers only those with something new:
records, a changed high watermark or log start offset, or an error. A full fetch that names a
session closes it; epoch -1 closes without opening a new one.

This module knows nothing of sockets, clocks or kio: the Fetch handler resolves names and ids,
passes ``now_ms``, reads the log, and hands back per-partition :class:`Outcome` values. Nothing
here imports trio, so the rules are unit-tested directly (tests/server/test_fetch_session.py).

The cache follows ``kafka.server.FetchSessionCache``: at most ``max.incremental.fetch.session.
cache.slots`` sessions; when full, a new session may evict the least recently used one if it was
idle longer than the eviction time (120 s, Kafka's ``MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS``),
else the least valuable evictable one (unprivileged before privileged, then fewer partitions)
when the new one is worth more. A session is evictable by unprivileged (consumer) sessions once
it is older than the eviction time; privileged (follower) sessions may evict any unprivileged
one. With no slot, the fetch is answered in full with session id 0 (sessionless).
"""

from __future__ import annotations

import enum
import random
import uuid
from collections.abc import Iterable, Sequence

import attrs

#: Session id 0 means "no session" (Kafka's ``INVALID_SESSION_ID``).
INVALID_SESSION_ID = 0
#: A full fetch that opens a session.
INITIAL_EPOCH = 0
#: A full fetch that closes its session and opens none.
FINAL_EPOCH = -1
#: Kafka's ``MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS``.
EVICTION_MS = 120_000
#: Topic id of a partition named by topic name (requests before Fetch v13).
ZERO_UUID = uuid.UUID(int=0)
_MAX_EPOCH = 2**31 - 1


def next_epoch(epoch: int) -> int:
    """Kafka's ``FetchMetadata.nextEpoch``: the final epoch stays final; wraps to 1."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _MAX_EPOCH else epoch + 1


@attrs.frozen
class PartitionKey:
    """A partition of a session: by topic id (v13+, ``topic`` is "") or by name (id zero)."""

    topic_id: uuid.UUID
    topic: str
    partition: int


@attrs.frozen
class FetchPartition:
    """One partition of a Fetch request, as the handler parsed it. ``name`` is the topic's name
    (None: a topic id this broker does not know, answered UNKNOWN_TOPIC_ID)."""

    key: PartitionKey
    name: str | None
    fetch_offset: int
    partition_max_bytes: int
    log_start_offset: int = -1
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1


@attrs.frozen
class Outcome:
    """What reading one partition gave, as far as the session rules care."""

    records_size: int
    high_watermark: int
    log_start_offset: int
    error: bool = False


@attrs.define
class CachedPartition:
    """A session's partition: the last request parameters, and what the client was last told
    (Kafka's ``CachedPartition``; -1 until told, so the first answer always includes it)."""

    request: FetchPartition
    high_watermark: int = -1
    log_start_offset: int = -1

    def must_respond(self, outcome: Outcome, update: bool) -> bool:
        """Kafka's ``maybeUpdateResponseData``: new records, a changed high watermark or log
        start offset, or an error (the cached high watermark is then reset to -1, so the
        partition is sent again once the error is gone)."""
        must = outcome.records_size > 0
        if self.high_watermark != outcome.high_watermark:
            must = True
            if update:
                self.high_watermark = outcome.high_watermark
        if self.log_start_offset != outcome.log_start_offset:
            must = True
            if update:
                self.log_start_offset = outcome.log_start_offset
        if outcome.error:
            must = True
            if update:
                self.high_watermark = -1
        return must


@attrs.define(eq=False)
class FetchSession:
    """One incremental fetch session (Kafka's ``FetchSession``). ``epoch`` is the epoch the
    next incremental request must carry."""

    id: int
    privileged: bool
    uses_topic_ids: bool
    creation_ms: int
    last_used_ms: int
    epoch: int
    #: In fetch order; a partition that returned records moves to the end (fairness).
    partitions: dict[PartitionKey, CachedPartition] = attrs.field(factory=dict)
    #: Size when last touched (-1: not yet in the cache's accounting).
    cached_size: int = -1
    evictable_by_privileged: bool = False
    evictable_by_all: bool = False

    def size(self) -> int:
        return len(self.partitions)

    def evictable_key(self) -> tuple[bool, int, int]:
        """Kafka's ``EvictableKey`` order: unprivileged first, then fewer partitions, then id."""
        return (self.privileged, self.cached_size, self.id)

    def update(self, partitions: Iterable[FetchPartition], forgotten: Iterable[PartitionKey]
               ) -> None:
        """An incremental request: add or update the named partitions, drop the forgotten."""
        for part in partitions:
            cached = self.partitions.get(part.key)
            if cached is None:
                self.partitions[part.key] = CachedPartition(part)
            else:
                cached.request = part
        for key in forgotten:
            self.partitions.pop(key, None)


class ContextKind(enum.Enum):
    """Kafka's FetchContext classes."""

    SESSIONLESS = "sessionless"
    FULL = "full"
    INCREMENTAL = "incremental"
    ERROR = "error"


@attrs.define(eq=False)
class FetchContext:
    """What one Fetch request reads and how its answer is shaped.

    ``partitions`` is what to read, in order (for an incremental fetch: the whole session).
    ``error`` (an ErrorCode name) is set for ERROR contexts, answered at once with no
    partitions and session id 0.
    """

    kind: ContextKind
    cache: FetchSessionCache
    partitions: list[FetchPartition]
    error: str | None = None
    privileged: bool = False
    uses_topic_ids: bool = False
    session: FetchSession | None = None
    #: The epoch the request carried (an incremental context checks it is still current).
    request_epoch: int = 0

    def response(self, outcomes: Sequence[Outcome], now_ms: int, *, commit: bool = True
                 ) -> tuple[int, list[bool]]:
        """``(session id to answer, which partitions to include)`` for ``outcomes`` (one per
        ``partitions`` entry). With ``commit`` the session is updated (a full context opens
        its session); without it this is a dry run (Kafka's ``getResponseSize``)."""
        if self.kind is ContextKind.SESSIONLESS:
            return INVALID_SESSION_ID, [True] * len(outcomes)
        if self.kind is ContextKind.ERROR:
            return INVALID_SESSION_ID, [False] * len(outcomes)
        if self.kind is ContextKind.FULL:
            if not commit:
                return INVALID_SESSION_ID, [True] * len(outcomes)
            session_id = self.cache.maybe_create_session(
                now_ms, self.privileged, self.uses_topic_ids, self.partitions, outcomes)
            return session_id, [True] * len(outcomes)
        session = self.session
        assert session is not None
        keep = []
        for part, outcome in zip(self.partitions, outcomes, strict=True):
            cached = session.partitions.get(part.key)
            if cached is None:  # forgotten by a request that raced this one
                keep.append(False)
                continue
            must = cached.must_respond(outcome, commit)
            if commit and must and outcome.records_size > 0:
                # Kafka moves a partition that returned data to the end of the session, so
                # the others come first in the next fetch's byte budget.
                del session.partitions[part.key]
                session.partitions[part.key] = cached
            keep.append(must)
        return session.id, keep

    def throttled(self) -> tuple[str | None, int]:
        """``(error, session id)`` of a throttled answer (no partitions, Kafka's
        ``getThrottledResponse``): a full context opens no session; an incremental one keeps
        its session, or answers INVALID_FETCH_SESSION_EPOCH if another request moved it on."""
        if self.kind is not ContextKind.INCREMENTAL:
            return None, INVALID_SESSION_ID
        assert self.session is not None
        if self.session.epoch != next_epoch(self.request_epoch):
            return "invalid_fetch_session_epoch", self.session.id
        return None, self.session.id


class FetchSessionCache:
    """Kafka's ``FetchSessionCache``: sessions by id, with LRU and value-based eviction."""

    def __init__(self, max_entries: int, eviction_ms: int = EVICTION_MS,
                 rng: random.Random | None = None) -> None:
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self.sessions: dict[int, FetchSession] = {}
        #: Partitions over all sessions (NumIncrementalFetchPartitionsCached).
        self.num_partitions = 0
        #: Sessions evicted to make room (IncrementalFetchSessionEvictionsPerSec).
        self.evictions = 0
        self._rng = rng or random.Random()  # noqa: S311 - ids need uniqueness, not secrecy

    # ------------------------------------------------------------------ contexts
    def new_context(self, version: int, session_id: int, epoch: int,
                    partitions: list[FetchPartition], forgotten: Sequence[PartitionKey],
                    now_ms: int, *, privileged: bool = False) -> FetchContext:
        """Kafka's ``FetchManager.newContext`` for one request."""
        uses_ids = version >= 13
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            # Any session named by a full fetch is closed.
            if session_id != INVALID_SESSION_ID:
                self.remove(session_id)
            kind = ContextKind.SESSIONLESS if epoch == FINAL_EPOCH else ContextKind.FULL
            return FetchContext(kind, self, partitions, privileged=privileged,
                                uses_topic_ids=uses_ids, request_epoch=epoch)
        session = self.sessions.get(session_id)
        if session is None:
            return FetchContext(ContextKind.ERROR, self, [], "fetch_session_id_not_found")
        if session.epoch != epoch:
            return FetchContext(ContextKind.ERROR, self, [], "invalid_fetch_session_epoch")
        if session.uses_topic_ids != uses_ids:
            return FetchContext(ContextKind.ERROR, self, [], "fetch_session_topic_id_error")
        session.update(partitions, forgotten)
        if not session.partitions:
            # Kafka drops a session left empty and answers without one.
            self.remove(session.id)
            return FetchContext(ContextKind.SESSIONLESS, self, [], request_epoch=epoch)
        self.touch(session, now_ms)
        session.epoch = next_epoch(session.epoch)
        return FetchContext(ContextKind.INCREMENTAL, self,
                            [c.request for c in session.partitions.values()],
                            privileged=session.privileged, uses_topic_ids=uses_ids,
                            session=session, request_epoch=epoch)

    # ------------------------------------------------------------------ the cache
    def maybe_create_session(self, now_ms: int, privileged: bool, uses_topic_ids: bool,
                             partitions: Sequence[FetchPartition], outcomes: Sequence[Outcome]
                             ) -> int:
        """A new session for a full fetch, if there is room or something may be evicted;
        its id, or 0 (answer without a session)."""
        if self.max_entries <= 0:
            return INVALID_SESSION_ID
        if len(self.sessions) >= self.max_entries and not self._try_evict(
                privileged, len(partitions), now_ms):
            return INVALID_SESSION_ID
        session = FetchSession(self._new_id(), privileged, uses_topic_ids, now_ms, now_ms,
                               next_epoch(INITIAL_EPOCH))
        for part, outcome in zip(partitions, outcomes, strict=True):
            # What the full answer told the client, so the next incremental one sends
            # only changes.
            session.partitions[part.key] = CachedPartition(
                part, high_watermark=-1 if outcome.error else outcome.high_watermark,
                log_start_offset=outcome.log_start_offset)
        self.sessions[session.id] = session
        self.touch(session, now_ms)
        return session.id

    def _new_id(self) -> int:
        while True:
            session_id = self._rng.randint(1, _MAX_EPOCH)
            if session_id not in self.sessions:
                return session_id

    def _try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        """Kafka's ``tryEvict``: the least recently used session if stale, else the least
        valuable evictable one when the new session is worth at least as much."""
        if not self.sessions:
            return False
        oldest = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now_ms - oldest.last_used_ms > self.eviction_ms:
            self.remove(oldest.id)
            self.evictions += 1
            return True
        candidates = [s for s in self.sessions.values()
                      if (s.evictable_by_privileged if privileged else s.evictable_by_all)]
        if not candidates:
            return False
        victim = min(candidates, key=FetchSession.evictable_key)
        if (privileged, size, 0) < victim.evictable_key():
            return False
        self.remove(victim.id)
        self.evictions += 1
        return True

    def touch(self, session: FetchSession, now_ms: int) -> None:
        """Kafka's ``touch``: last used now; size and evictability re-accounted."""
        session.last_used_ms = now_ms
        if session.cached_size != -1:
            self.num_partitions -= session.cached_size
        session.cached_size = session.size()
        old = now_ms - session.creation_ms > self.eviction_ms
        session.evictable_by_privileged = not session.privileged or old
        session.evictable_by_all = old
        self.num_partitions += session.cached_size

    def remove(self, session_id: int) -> FetchSession | None:
        """Drop a session (closed, emptied or evicted)."""
        session = self.sessions.pop(session_id, None)
        if session is not None and session.cached_size != -1:
            self.num_partitions -= session.cached_size
            session.cached_size = -1
        return session

    def __len__(self) -> int:
        return len(self.sessions)
