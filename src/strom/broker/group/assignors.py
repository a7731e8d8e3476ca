"""Server-side partition assignors (KIP-848's ``uniform``, and KIP-932's for share groups).

Pure functions, no state: members (id -> the topics they subscribe to) and topics (key -> its
partition count) in, member id -> {topic key: sorted partitions} out. A topic key is whatever
the caller uses (a name, a topic id); keys and member ids must be sortable, and the result
depends only on the input (members and topics are walked in sorted order), so every
coordinator computes the same assignment from the same group.

- :func:`uniform` (consumer groups, ``group.consumer.assignors=uniform``): every partition of
  a subscribed topic goes to exactly one member subscribed to it; members' partition counts
  differ by at most one where their subscriptions allow (a partition only moves to a member
  subscribed to its topic); with ``previous`` given, a partition stays with its owner unless
  balance needs it elsewhere (sticky), so a rebalance moves as few partitions as it can.
- :func:`share_uniform` (share groups, Kafka's ``simple`` share assignor in spirit): partitions
  are not exclusive. A topic with at least as many partitions as subscribed members is split as
  :func:`uniform` splits it; a topic with fewer partitions than members gives every member one
  partition, each partition to ``members // partitions`` or one more members. So every member
  has work and every partition is read.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping
from typing import Any, TypeVar

T = TypeVar("T", bound=Hashable)
Assignment = dict[str, dict[Any, list[int]]]


def _subscribers(members: Mapping[str, Collection[T]], topics: Mapping[T, int]) -> dict[T, list[str]]:
    subs: dict[T, list[str]] = {}
    for member in sorted(members):
        for topic in members[member]:
            if topics.get(topic, 0) > 0:
                subs.setdefault(topic, []).append(member)
    return {t: subs[t] for t in sorted(subs, key=_sort_key)}


def _sort_key(value: Any) -> Any:
    return (str(type(value)), value)


def _empty(members: Mapping[str, Collection[T]]) -> Assignment:
    return {m: {} for m in members}


def uniform(members: Mapping[str, Collection[T]], topics: Mapping[T, int],
            previous: Mapping[str, Mapping[T, Collection[int]]] | None = None) -> Assignment:  # fmt: skip
    """Each partition of a subscribed topic to exactly one subscribed member, balanced and
    (with ``previous``) sticky; see the module doc."""
    subs = _subscribers(members, topics)
    owner: dict[tuple[T, int], str] = {}
    load = dict.fromkeys(members, 0)
    # 1. sticky: previous owners that are still subscribed keep their partitions
    for member in sorted(previous or {}):
        if member not in members:
            continue
        for topic, parts in (previous or {})[member].items():
            if member not in subs.get(topic, ()):
                continue
            for p in sorted(parts):
                if 0 <= p < topics[topic] and (topic, p) not in owner:
                    owner[(topic, p)] = member
                    load[member] += 1
    # 2. the rest to the least loaded subscriber (ties: member id order)
    for topic, candidates in subs.items():
        for p in range(topics[topic]):
            if (topic, p) in owner:
                continue
            chosen = min(candidates, key=lambda m: (load[m], m))
            owner[(topic, p)] = chosen
            load[chosen] += 1
    # 3. balance: move a partition from a member to a subscriber with at least two fewer
    moved = True
    while moved:
        moved = False
        for (topic, p), current in sorted(owner.items(), key=lambda kv: (_sort_key(kv[0][0]), kv[0][1]),
                                          reverse=True):  # fmt: skip
            target = min(subs[topic], key=lambda m: (load[m], m))
            if load[target] + 1 < load[current]:
                owner[(topic, p)] = target
                load[current] -= 1
                load[target] += 1
                moved = True
    out = _empty(members)
    for (topic, p), member in owner.items():
        out[member].setdefault(topic, []).append(p)
    for parts in out.values():
        for ps in parts.values():
            ps.sort()
    return out


def share_uniform(members: Mapping[str, Collection[T]], topics: Mapping[T, int]) -> Assignment:
    """Share groups: every partition read, every member given work; see the module doc."""
    subs = _subscribers(members, topics)
    out = _empty(members)
    load = dict.fromkeys(members, 0)
    rotation = 0  # spreads the shared partitions of successive topics over the members
    for topic, candidates in subs.items():
        count = topics[topic]
        if len(candidates) <= count:
            part = uniform({m: (topic,) for m in candidates}, {topic: count})
            # hand the larger shares to the members with less work so far
            shares = sorted(part.values(), key=lambda a: -len(a.get(topic, [])))
            for member, share in zip(sorted(candidates, key=lambda m: (load[m], m)), shares,
                                     strict=True):  # fmt: skip
                if share.get(topic):
                    out[member][topic] = share[topic]
                    load[member] += len(share[topic])
            continue
        for i, member in enumerate(candidates):
            p = (i + rotation) % count
            out[member][topic] = [p]
            load[member] += 1
        rotation += len(candidates)
    return out
