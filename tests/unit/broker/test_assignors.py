"""Server-side assignors: uniform (exclusive, sticky) and the share-group one."""

from __future__ import annotations

import random

import pytest

from strom.broker.group.assignors import share_uniform, uniform


def owners(assignment: dict[str, dict[str, list[int]]]) -> dict[tuple[str, int], list[str]]:
    out: dict[tuple[str, int], list[str]] = {}
    for member, topics in assignment.items():
        for topic, parts in topics.items():
            for p in parts:
                out.setdefault((topic, p), []).append(member)
    return out


def counts(assignment: dict[str, dict[str, list[int]]]) -> dict[str, int]:
    return {m: sum(len(ps) for ps in t.values()) for m, t in assignment.items()}


def test_uniform_is_exclusive_complete_and_balanced() -> None:
    members = {f"m{i}": ["a", "b"] for i in range(3)}
    result = uniform(members, {"a": 4, "b": 3})
    own = owners(result)
    assert sorted(own) == [("a", p) for p in range(4)] + [("b", p) for p in range(3)]
    assert all(len(v) == 1 for v in own.values())
    assert sorted(counts(result).values()) == [2, 2, 3]


def test_uniform_respects_subscriptions() -> None:
    result = uniform({"m1": ["a"], "m2": ["a", "b"], "m3": ["c"]}, {"a": 2, "b": 2})
    assert result["m3"] == {}
    own = owners(result)
    assert own[("b", 0)] == ["m2"] and own[("b", 1)] == ["m2"]
    assert set(result["m1"]) <= {"a"}


def test_uniform_is_sticky() -> None:
    first = uniform({"m1": ["t"], "m2": ["t"]}, {"t": 6})
    second = uniform({"m1": ["t"], "m2": ["t"], "m3": ["t"]}, {"t": 6}, previous=first)
    moved = sum(1 for k, v in owners(second).items() if owners(first)[k] != v)
    assert moved == 2  # only what the new member needs
    assert counts(second) == {"m1": 2, "m2": 2, "m3": 2}


def test_uniform_is_deterministic() -> None:
    members = {f"m{i}": ["x", "y", "z"] for i in range(5)}
    topics = {"x": 7, "y": 3, "z": 1}
    assert uniform(members, topics) == uniform(dict(reversed(list(members.items()))), topics)


def test_share_uniform_more_members_than_partitions_shares_them() -> None:
    result = share_uniform({f"m{i}": ["q"] for i in range(3)}, {"q": 1})
    assert result == {"m0": {"q": [0]}, "m1": {"q": [0]}, "m2": {"q": [0]}}
    result = share_uniform({f"m{i}": ["q"] for i in range(5)}, {"q": 2})
    assert sorted(len(v) for v in owners(result).values()) == [2, 3]
    assert all(counts(result)[m] == 1 for m in result)


def test_share_uniform_fewer_members_splits_like_uniform() -> None:
    result = share_uniform({"a": ["t"], "b": ["t"]}, {"t": 5})
    own = owners(result)
    assert len(own) == 5 and all(len(v) == 1 for v in own.values())
    assert sorted(counts(result).values()) == [2, 3]


@pytest.mark.parametrize("seed", range(20))
def test_share_uniform_every_partition_read_every_member_busy(seed: int) -> None:
    rng = random.Random(seed)
    topics = {f"t{i}": rng.randint(1, 6) for i in range(rng.randint(1, 4))}
    members = {f"m{i}": rng.sample(sorted(topics), rng.randint(1, len(topics)))
               for i in range(rng.randint(1, 8))}
    result = share_uniform(members, topics)
    subscribed = {t for ts in members.values() for t in ts}
    assert set(owners(result)) == {(t, p) for t in subscribed for p in range(topics[t])}
    for member, ts in members.items():
        assert set(result[member]) <= set(ts)
        assert result[member], member  # every member has something to read


def test_range_gives_contiguous_ranges_static_members_first() -> None:
    from strom.broker.group.assignors import range_assign

    members = {"b": ["t", "u"], "a": ["t", "u"], "z": ["t"]}
    result = range_assign(members, {"t": 7, "u": 2}, {"z": "instance-0"})
    # order: z (static), a, b; 7 = 3 + 2 + 2, u only among a and b: 1 + 1
    assert result == {"z": {"t": [0, 1, 2]}, "a": {"t": [3, 4], "u": [0]},
                      "b": {"t": [5, 6], "u": [1]}}  # fmt: skip
    assert range_assign(members, {"t": 7, "u": 2}, {"z": "instance-0"}) == result


@pytest.mark.parametrize("seed", range(10))
def test_uniform_with_racks_stays_balanced_and_prefers_local_replicas(seed: int) -> None:
    from strom.broker.group.assignors import Racks

    rng = random.Random(seed)
    members = {f"m{i}": ["t"] for i in range(rng.randint(2, 5))}
    count = rng.randint(len(members), 12)
    racks = ["r0", "r1", "r2"]
    member_racks = {m: racks[i % 3] for i, m in enumerate(sorted(members))}
    partition_racks = {"t": [frozenset({racks[p % 3]}) for p in range(count)]}
    info = Racks(member_racks, partition_racks)
    result = uniform(members, {"t": count}, racks=info)
    loads = sorted(counts(result).values())
    assert loads[-1] - loads[0] <= 1 and sum(loads) == count
    local = sum(1 for m, ts in result.items() for p in ts.get("t", []) if info.local(m, "t", p))
    blind = uniform(members, {"t": count})
    local_blind = sum(1 for m, ts in blind.items() for p in ts.get("t", []) if info.local(m, "t", p))
    assert local >= local_blind
