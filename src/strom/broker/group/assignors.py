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
- :func:`range_assign` (consumer groups, ``range``, Kafka's server-side ``RangeAssignor``):
  per topic, its subscribers in order (static members by instance id first, then the others
  by member id) get contiguous ranges, the first ``partitions % subscribers`` of them one
  partition more. Not sticky: the same membership always gives the same ranges, so members
  that subscribe to co-partitioned topics get the same partition numbers of each.

Rack awareness (KIP-848's uniform assignor, ``client.rack`` against the replicas' racks): with
``racks`` given, :func:`uniform` first hands a partition without a previous owner to a
subscriber in a rack holding one of its replicas, as long as that subscriber is under its
share; the balancing step moves such partitions last. Balance comes first: racks only choose
among assignments that are balanced the same.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
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


@dataclass(frozen=True, slots=True)
class Racks:
    """Where members and replicas are: member id -> its rack (None: unknown), and topic key ->
    per partition, the racks of its replicas."""

    members: Mapping[str, str | None] = field(default_factory=dict)
    partitions: Mapping[Any, Sequence[Collection[str]]] = field(default_factory=dict)

    def local(self, member: str, topic: Any, partition: int) -> bool:
        """Whether ``member``'s rack holds a replica of the partition."""
        rack = self.members.get(member)
        if rack is None:
            return False
        per_partition = self.partitions.get(topic, ())
        return partition < len(per_partition) and rack in per_partition[partition]

    @property
    def useful(self) -> bool:
        """Whether a member and a partition have racks at all (else rack awareness is moot)."""
        return any(r is not None for r in self.members.values()) and any(
            any(rs for rs in parts) for parts in self.partitions.values())  # fmt: skip


def _empty(members: Mapping[str, Collection[T]]) -> Assignment:
    return {m: {} for m in members}


def uniform(members: Mapping[str, Collection[T]], topics: Mapping[T, int],
            previous: Mapping[str, Mapping[T, Collection[int]]] | None = None, *,
            racks: Racks | None = None) -> Assignment:  # fmt: skip
    """Each partition of a subscribed topic to exactly one subscribed member, balanced and
    (with ``previous``) sticky, rack-aware with ``racks``; see the module doc."""
    if racks is not None and not racks.useful:
        racks = None
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
    # 2a. racks: a partition to a least loaded subscriber in one of its replicas' racks, while
    # that member is under its share of the partitions it may read
    if racks is not None:
        share = _shares(subs, topics)
        for topic, candidates in subs.items():
            for p in range(topics[topic]):
                if (topic, p) in owner:
                    continue
                local = [m for m in candidates if racks.local(m, topic, p) and load[m] < share[m]]
                if local:
                    chosen = min(local, key=lambda m: (load[m], m))
                    owner[(topic, p)] = chosen
                    load[chosen] += 1
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
        # with racks: a partition away from its replicas' racks moves first, and to a member
        # in one of them when several are least loaded
        for (topic, p), current in sorted(owner.items(), key=lambda kv: (
                racks is None or not racks.local(kv[1], kv[0][0], kv[0][1]),
                _sort_key(kv[0][0]), kv[0][1]), reverse=True):  # fmt: skip
            target = min(subs[topic], key=lambda m: (
                load[m], racks is not None and not racks.local(m, topic, p), m))  # fmt: skip
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


def _shares(subs: Mapping[T, list[str]], topics: Mapping[T, int]) -> dict[str, int]:
    """Each member's fair share of the partitions it may read (rounded up): the sum, over the
    topics it subscribes to, of the topic's partitions over its subscribers."""
    total: dict[str, float] = {}
    for topic, candidates in subs.items():
        for m in candidates:
            total[m] = total.get(m, 0.0) + topics[topic] / len(candidates)
    return {m: -int(-t // 1) for m, t in total.items()}


def range_assign(members: Mapping[str, Collection[T]], topics: Mapping[T, int],
                 instance_ids: Mapping[str, str | None] | None = None) -> Assignment:
    """Contiguous ranges of each topic over its subscribers; see the module doc."""
    ids = instance_ids or {}

    def order(member: str) -> tuple[int, str]:
        instance = ids.get(member)
        return (0, instance) if instance is not None else (1, member)

    out = _empty(members)
    for topic, candidates in _subscribers(members, topics).items():
        ordered = sorted(candidates, key=order)
        count = topics[topic]
        quota, extra = divmod(count, len(ordered))
        start = 0
        for i, member in enumerate(ordered):
            size = quota + (1 if i < extra else 0)
            if size:
                out[member][topic] = list(range(start, start + size))
            start += size
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
