"""Server-side assignors of the consumer group protocol (KIP-848): ``uniform`` and ``range``.

An assignor is a pure function: the members' subscriptions (topic names already resolved, regexes
included), the partition counts of the subscribed topics and the previous target assignment in,
the new target assignment out. Partitions are ``(topic, partition)`` pairs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

TopicPartition = tuple[str, int]
Assignment = dict[str, frozenset[TopicPartition]]
Assignor = Callable[[Mapping[str, frozenset[str]], Mapping[str, int],
                     Mapping[str, frozenset[TopicPartition]]], Assignment]


def range_assignor(subscriptions: Mapping[str, frozenset[str]], topics: Mapping[str, int],
                   previous: Mapping[str, frozenset[TopicPartition]]) -> Assignment:
    """Kafka's range assignment, topic by topic: the members subscribed to a topic, sorted by
    member id, each take a contiguous range; the first ``partitions % members`` one more.
    Not sticky (``previous`` is unused): the same members always get the same ranges."""
    out: dict[str, set[TopicPartition]] = {m: set() for m in subscriptions}
    for topic in sorted(topics):
        members = sorted(m for m, subs in subscriptions.items() if topic in subs)
        if not members:
            continue
        count = topics[topic]
        quota, extra = divmod(count, len(members))
        start = 0
        for index, member in enumerate(members):
            size = quota + (1 if index < extra else 0)
            out[member].update((topic, p) for p in range(start, start + size))
            start += size
    return {m: frozenset(tps) for m, tps in out.items()}


def uniform_assignor(subscriptions: Mapping[str, frozenset[str]], topics: Mapping[str, int],
                     previous: Mapping[str, frozenset[TopicPartition]]) -> Assignment:
    """Kafka's ``uniform`` assignor: balanced and sticky.

    Homogeneous subscriptions (everyone subscribes to the same topics): every member gets
    ``total // members`` or one more partition, and keeps as many of its previous partitions as
    that allows. Heterogeneous subscriptions: partitions go one by one (sorted) to the least
    loaded subscribed member, preferring the previous owner on ties.
    """
    members = sorted(subscriptions)
    if not members:
        return {}
    # Members share their subscription objects: each distinct one is cut to the topics once.
    subs = {frozenset(s & topics.keys()) for s in set(subscriptions.values())}
    if len(subs) == 1:
        return _uniform_homogeneous(members, next(iter(subs)), topics, previous)
    return _uniform_heterogeneous(members, subscriptions, topics, previous)


def _uniform_homogeneous(members: list[str], subscribed: frozenset[str], topics: Mapping[str, int],
                         previous: Mapping[str, frozenset[TopicPartition]]) -> Assignment:
    """``members`` sorted. A large group has many more members than partitions, so the work
    per member that holds nothing is kept to a few dictionary operations."""
    all_partitions = [(t, p) for t in sorted(subscribed) for p in range(topics[t])]
    valid = set(all_partitions)
    kept: dict[str, list[TopicPartition]] = {}
    for m in members:
        held = previous.get(m)
        if held and (mine := sorted(tp for tp in held if tp in valid)):
            kept[m] = mine
    quota, extra = divmod(len(all_partitions), len(members))
    # Members that keep the most get the extra partitions: fewer partitions move (ties by
    # member id: the sort is stable and ``members`` sorted).
    holders = sorted(kept, key=lambda m: -len(kept[m]))
    order = holders + [m for m in members if m not in kept]
    rank = {m: index for index, m in enumerate(holders)}
    taken: set[TopicPartition] = set()
    out: dict[str, list[TopicPartition]] = {}
    for m, mine in kept.items():  # by member id: the first keeps a partition two claim
        mine = [tp for tp in mine if tp not in taken][:quota + (1 if rank[m] < extra else 0)]
        out[m] = mine
        taken.update(mine)
    free = [tp for tp in all_partitions if tp not in taken]
    result: Assignment = {}
    for index, m in enumerate(order):
        mine = out.get(m, [])
        need = quota + (1 if index < extra else 0) - len(mine)
        if need > 0 and free:
            mine = mine + free[:need]
            del free[:need]
        result[m] = frozenset(mine) if mine else _EMPTY
    return {m: result[m] for m in members}


_EMPTY: frozenset[TopicPartition] = frozenset()


def _uniform_heterogeneous(members: list[str], subscriptions: Mapping[str, frozenset[str]],
                           topics: Mapping[str, int],
                           previous: Mapping[str, frozenset[TopicPartition]]) -> Assignment:
    owner = {tp: m for m in members for tp in previous.get(m, ())}
    out: dict[str, set[TopicPartition]] = {m: set() for m in members}
    for topic in sorted(topics):
        candidates = [m for m in members if topic in subscriptions[m]]
        if not candidates:
            continue
        for p in range(topics[topic]):
            prev = owner.get((topic, p))
            best = min(candidates, key=lambda m: (len(out[m]), m != prev, m))
            out[best].add((topic, p))
    return {m: frozenset(tps) for m, tps in out.items()}


#: The assignors by the names clients and ``group.consumer.assignors`` use.
ASSIGNORS: dict[str, Assignor] = {"uniform": uniform_assignor, "range": range_assignor}
