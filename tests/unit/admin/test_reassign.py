"""Pure parts of the admin layer's cluster tools: Kafka's replica assignment, the reassignment
JSON formats and their log dirs, partition problems, the retries of log dir moves."""

from __future__ import annotations

import json
import random
from collections import Counter
from typing import Any

import pytest

from strom.admin.errors import AdminError
from strom.admin.log_dir_moves import replica_name, same_dir
from strom.admin.reassign import (
    assign_replicas,
    parse_plan,
    parse_reassignment,
    parse_topics_to_move,
    reassignment_json,
)
from strom.admin.topics import PartitionState, partition_problems


class Zero(random.Random):
    def randrange(self, *_args: object, **_kwargs: object) -> int:  # type: ignore[override]
        return 0


def test_assignment_matches_kafkas_documented_example() -> None:
    """AdminUtils' doc: 5 brokers, 10 partitions, RF 3, start index 0, replica shift 0."""
    got = assign_replicas(10, 3, [0, 1, 2, 3, 4], Zero())
    assert got[0] == [0, 1, 2]
    assert got[4] == [4, 0, 1]
    assert got[5] == [0, 2, 3]  # the shift grows once every broker led one partition
    assert got[9] == [4, 1, 2]


@pytest.mark.parametrize("seed", range(20))
def test_assignment_spreads_leaders_and_never_repeats_a_broker(seed: int) -> None:
    brokers = [1, 2, 3, 4]
    got = assign_replicas(8, 3, brokers, random.Random(seed))
    assert all(len(set(r)) == 3 and set(r) <= set(brokers) for r in got)
    assert Counter(r[0] for r in got) == dict.fromkeys(brokers, 2)
    assert Counter(b for r in got for b in r) == dict.fromkeys(brokers, 6)


def test_assignment_refuses_more_replicas_than_brokers() -> None:
    with pytest.raises(AdminError, match="larger than the 2 broker"):
        assign_replicas(1, 3, [1, 2])


def test_reassignment_json_round_trip() -> None:
    plan = {("b", 1): [3, 1], ("a", 0): [1, 2]}
    text = reassignment_json(plan)
    assert json.loads(text) == {"version": 1, "partitions": [
        {"topic": "a", "partition": 0, "replicas": [1, 2], "log_dirs": ["any", "any"]},
        {"topic": "b", "partition": 1, "replicas": [3, 1], "log_dirs": ["any", "any"]},
    ]}
    assert parse_reassignment(json.loads(text)) == plan


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"version": 1}, "must be"),
        ({"version": 1, "partitions": []}, "no partition"),
        ({"partitions": [{"topic": "a", "partition": 0, "replicas": [1, 1]}]}, "distinct"),
        ({"partitions": [{"topic": "a", "partition": 0, "replicas": [1],
                          "log_dirs": ["d"]}]}, "not an absolute path"),
        ({"partitions": [{"topic": "a", "partition": 0, "replicas": [1],
                          "log_dirs": ["any", "/d"]}]}, "differ in length"),
        ({"partitions": [{"topic": "a", "partition": 0, "replicas": [1],
                          "log_dirs": [7]}]}, "any"),
        ({"partitions": [{"topic": "a", "partition": 0, "replicas": [1]}] * 2}, "twice"),
        ({"partitions": [{"topic": "a", "partition": "x", "replicas": [1]}]}, "must be"),
    ],
)
def test_bad_reassignments(doc: object, message: str) -> None:
    with pytest.raises(AdminError, match=message):
        parse_reassignment(doc)


def test_a_plan_with_log_dirs() -> None:
    doc = {"version": 1, "partitions": [
        {"topic": "a", "partition": 0, "replicas": [1, 2], "log_dirs": ["/d1", "any"]},
        {"topic": "b", "partition": 3, "replicas": [2], "log_dirs": ["/d2/"]},
        {"topic": "c", "partition": 0, "replicas": [1]},
    ]}  # fmt: skip
    assignment, dirs = parse_plan(doc)
    assert assignment == {("a", 0): [1, 2], ("b", 3): [2], ("c", 0): [1]}
    assert dirs == {("a", 0, 1): "/d1", ("b", 3, 2): "/d2/"}
    assert same_dir("/d2/", "/d2") and not same_dir("/d2", "/d1")
    assert replica_name(("b", 3, 2)) == "b-3-2"


def test_topics_to_move() -> None:
    assert parse_topics_to_move({"version": 1, "topics": [{"topic": "a"}, {"topic": "b"}]}) == [
        "a", "b",
    ]
    with pytest.raises(AdminError):
        parse_topics_to_move({"topics": [{"name": "a"}]})


@pytest.mark.parametrize(
    ("leader", "replicas", "isr", "minimum", "expected"),
    [
        (1, [1, 2, 3], [1, 2, 3], 2, []),
        (1, [1, 2, 3], [1, 2], 2, ["under-replicated-partitions"]),
        (1, [1, 2, 3], [1], 2, ["under-replicated-partitions", "under-min-isr-partitions"]),
        (-1, [1, 2, 3], [], 2, ["unavailable-partitions", "under-replicated-partitions",
                                "under-min-isr-partitions"]),
        (1, [1], [1], 2, ["under-min-isr-partitions"]),
    ],
)
def test_partition_problems(
    leader: int, replicas: list[int], isr: list[int], minimum: int, expected: list[str]
) -> None:
    p = PartitionState(partition=0, leader=leader, replicas=replicas, isr=isr)
    assert partition_problems(p, minimum) == expected


def test_log_dir_moves_are_retried_until_the_replica_exists(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kafka's executeMoves: REPLICA_NOT_AVAILABLE (the replica is not on the broker yet) is
    asked again until the move starts; another error stops at once; --timeout bounds it."""
    from strom.admin import log_dir_moves as rld
    from strom.protocol.errors import ErrorCode

    answers = [ErrorCode.replica_not_available, ErrorCode.kafka_storage_error, ErrorCode.none]
    sent: list[tuple[str, dict[tuple[str, int, int], str]]] = []

    def alter(address: str, moves: dict[tuple[str, int, int], str], _timeout: float
              ) -> dict[Any, ErrorCode]:  # fmt: skip
        sent.append((address, dict(moves)))
        return dict.fromkeys(moves, answers.pop(0) if answers else ErrorCode.none)

    monkeypatch.setattr(rld, "_alter", alter)
    monkeypatch.setattr(rld, "RETRY_BACKOFF_S", 0.001)
    wanted = {("t", 0, 2): "/d2"}
    lines = rld.execute_moves(wanted, {2: "h:2"}, 10.0)
    assert lines == ["Successfully started moving log directory to /d2 for replica t-0 with broker 2"]
    assert sent == [("h:2", wanted)] * 3

    monkeypatch.setattr(rld, "_alter",
                        lambda _a, m, _t: dict.fromkeys(m, ErrorCode.log_dir_not_found))
    with pytest.raises(AdminError, match="Failed to alter dir for t-0-2: LOG_DIR_NOT_FOUND"):
        rld.execute_moves(wanted, {2: "h:2"}, 10.0)

    monkeypatch.setattr(rld, "_alter",
                        lambda _a, m, _t: dict.fromkeys(m, ErrorCode.replica_not_available))
    with pytest.raises(AdminError, match=r"Timed out .* t-0-2 \(REPLICA_NOT_AVAILABLE\)"):
        rld.execute_moves(wanted, {2: "h:2"}, 0.05)
    with pytest.raises(AdminError, match="broker 3 is not live"):
        rld.execute_moves({("t", 0, 3): "/d"}, {2: "h:2"}, 10.0)
