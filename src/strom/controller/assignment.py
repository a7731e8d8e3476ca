"""Replica assignment at topic creation and growth: Kafka's ``AdminUtils.assignReplicasToBrokers``.

Rack-unaware (no broker has ``broker.rack``): brokers sorted by id; partition ``p``'s first
replica (its preferred leader) is broker ``(p + start) % n``, so leaders are spread evenly; the
followers follow at a shift that grows by one every ``n`` partitions, so the followers of one
broker's leaderships are spread too.

Rack-aware (every broker has a rack): the brokers are listed alternating racks
(``a1 b1 c1 a2 b2 c2 …``) and the same walk is made over that list, skipping a broker whose rack
already holds a replica of the partition until every rack holds one, and a broker already
holding one until every broker does. Then each partition's replicas span
``min(racks, replication factor)`` racks.

Brokers that declare a rack beside brokers that do not are refused (Kafka's ``Enforced`` mode),
as is a replication factor above the broker count. ``start`` and the first shift are random
unless given, as in Kafka, so that topics created one after the other do not all lead on the
same broker. Explicit assignments (CreateTopics / CreatePartitions ``assignments``) are checked
by :func:`validate_assignment`.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from strom.protocol.errors import ErrorCode, KafkaError


def _replica_index(first: int, shift: int, index: int, n: int) -> int:
    return (first + 1 + (shift + index) % (n - 1)) % n


def _rack_alternated(racks: Mapping[int, str]) -> list[int]:
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(racks):
        by_rack.setdefault(racks[broker], []).append(broker)
    queues = [by_rack[r] for r in sorted(by_rack)]
    result: list[int] = []
    depth = 0
    while len(result) < len(racks):
        for queue in queues:
            if depth < len(queue):
                result.append(queue[depth])
        depth += 1
    return result


def assign_replicas(
    brokers: Mapping[int, str | None],
    partitions: int,
    replication_factor: int,
    *,
    start_partition: int = 0,
    fixed_start: int = -1,
    rng: random.Random | None = None,
) -> dict[int, list[int]]:
    """Partition -> replicas (preferred leader first) for partitions ``start_partition`` ..
    ``start_partition + partitions - 1`` over ``brokers`` (id -> rack or None)."""
    if partitions <= 0:
        raise KafkaError(ErrorCode.invalid_partitions, "Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise KafkaError(ErrorCode.invalid_replication_factor,
                         "Replication factor must be larger than 0.")  # fmt: skip
    if replication_factor > len(brokers):
        raise KafkaError(
            ErrorCode.invalid_replication_factor,
            f"Replication factor: {replication_factor} larger than available brokers: "
            f"{len(brokers)}.",
        )
    with_rack = {b: r for b, r in brokers.items() if r is not None}
    if with_rack and len(with_rack) != len(brokers):
        raise KafkaError(
            ErrorCode.invalid_replication_factor,
            "Not all brokers have rack information for replica rack aware assignment. "
            f"Brokers without a rack: {sorted(b for b in brokers if b not in with_rack)}",
        )
    rng = rng or random.Random()
    ordered = _rack_alternated(with_rack) if with_rack else sorted(brokers)
    n = len(ordered)
    start = fixed_start if fixed_start >= 0 else rng.randrange(n)
    shift = fixed_start if fixed_start >= 0 else rng.randrange(n)
    n_racks = len(set(with_rack.values()))
    result: dict[int, list[int]] = {}
    for partition in range(max(0, start_partition), max(0, start_partition) + partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start) % n
        replicas = [ordered[first]]
        if not with_rack:
            replicas += [ordered[_replica_index(first, shift, j, n)]
                         for j in range(replication_factor - 1)]  # fmt: skip
        else:
            racks_used = {with_rack[ordered[first]]}
            k = 0
            while len(replicas) < replication_factor:
                broker = ordered[_replica_index(first, shift * n_racks, k, n)]
                k += 1
                rack = with_rack[broker]
                if (rack not in racks_used or len(racks_used) == n_racks) and (
                    broker not in replicas or len(replicas) == n
                ):
                    replicas.append(broker)
                    racks_used.add(rack)
        result[partition] = replicas
    return result


def validate_assignment(
    assignment: Mapping[int, Sequence[int]],
    live_brokers: Sequence[int] | set[int],
    *,
    replication_factor: int | None = None,
) -> None:
    """Raise INVALID_REPLICA_ASSIGNMENT unless every partition has a non-empty list of distinct
    live brokers, all of one size (``replication_factor`` when given)."""
    sizes = set()
    for partition, replicas in sorted(assignment.items()):
        if not replicas:
            raise KafkaError(ErrorCode.invalid_replica_assignment,
                             f"Partition {partition} has an empty replica list")  # fmt: skip
        if len(set(replicas)) != len(replicas):
            raise KafkaError(
                ErrorCode.invalid_replica_assignment,
                f"Duplicate brokers not allowed in replica assignment: {list(replicas)} "
                f"for partition id {partition}.",
            )
        unknown = sorted(set(replicas) - set(live_brokers))
        if unknown:
            raise KafkaError(
                ErrorCode.invalid_replica_assignment,
                f"Unknown broker(s) {unknown} in the assignment of partition {partition}",
            )
        if replication_factor is not None and len(replicas) != replication_factor:
            raise KafkaError(
                ErrorCode.invalid_replica_assignment,
                f"Inconsistent replication factor between partitions, partition 0 has "
                f"{replication_factor} while partition {partition} has replicas {list(replicas)}.",
            )
        sizes.add(len(replicas))
    if len(sizes) > 1:
        raise KafkaError(ErrorCode.invalid_replica_assignment,
                         "All partitions should have the same number of replicas")  # fmt: skip
