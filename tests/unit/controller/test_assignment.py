"""Replica assignment: Kafka's assignReplicasToBrokers, rack-unaware and rack-aware."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from strom.controller.assignment import _rack_alternated, assign_replicas, validate_assignment
from strom.protocol.errors import ErrorCode, KafkaError


def test_rack_unaware_matches_kafka() -> None:
    # Kafka's AdminZkClientTest.testManualReplicaAssignment / AdminUtils example
    got = assign_replicas({b: None for b in range(5)}, 10, 3, fixed_start=0)
    assert got == {0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
                   5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2]}  # fmt: skip


def test_leaders_and_replicas_spread_evenly() -> None:
    brokers = {b: None for b in (1, 2, 3)}
    got = assign_replicas(brokers, 30, 3, rng=random.Random(7))
    assert Counter(r[0] for r in got.values()) == {1: 10, 2: 10, 3: 10}
    assert all(sorted(r) == [1, 2, 3] for r in got.values())
    grown = assign_replicas(brokers, 2, 2, start_partition=30, rng=random.Random(1))
    assert list(grown) == [30, 31] and all(len(set(r)) == 2 for r in grown.values())


def test_rack_alternated_list_is_kafkas() -> None:
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert _rack_alternated(racks) == [0, 3, 1, 5, 4, 2]


def test_rack_aware_every_partition_spans_racks() -> None:
    racks = {0: "a", 1: "a", 2: "b", 3: "b", 4: "c", 5: "c"}
    for seed in range(5):
        got = assign_replicas(racks, 12, 3, rng=random.Random(seed))
        for replicas in got.values():
            assert len({racks[b] for b in replicas}) == 3, replicas
            assert len(set(replicas)) == 3
        assert Counter(r[0] for r in got.values()) == {b: 2 for b in racks}
    two_racks = {0: "a", 1: "a", 2: "b", 3: "b"}
    for replicas in assign_replicas(two_racks, 8, 3, rng=random.Random(3)).values():
        assert {two_racks[b] for b in replicas} == {"a", "b"} and len(set(replicas)) == 3


def test_errors() -> None:
    with pytest.raises(KafkaError) as err:
        assign_replicas({1: None, 2: None}, 1, 3)
    assert err.value.error_code == ErrorCode.invalid_replication_factor
    with pytest.raises(KafkaError) as err:
        assign_replicas({1: "a", 2: None}, 1, 1)
    assert err.value.error_code == ErrorCode.invalid_replication_factor
    with pytest.raises(KafkaError) as err:
        assign_replicas({1: None}, 0, 1)
    assert err.value.error_code == ErrorCode.invalid_partitions


@pytest.mark.parametrize(("assignment", "rf"), [
    ({0: [1, 1]}, None), ({0: []}, None), ({0: [1, 9]}, None), ({0: [1], 1: [1, 2]}, None),
    ({0: [1, 2]}, 3),
])  # fmt: skip
def test_validate_assignment_refuses(assignment: dict[int, list[int]], rf: int | None) -> None:
    with pytest.raises(KafkaError) as err:
        validate_assignment(assignment, {1, 2, 3}, replication_factor=rf)
    assert err.value.error_code == ErrorCode.invalid_replica_assignment


def test_validate_assignment_accepts() -> None:
    validate_assignment({0: [1, 2], 1: [3, 1]}, {1, 2, 3}, replication_factor=2)
