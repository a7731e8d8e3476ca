"""The group coordinator's acks=-1 appends (Kafka's appendForGroup): an offset commit or a group
record changes the coordinator's memory, and is answered, only once its append completes (the
records replicated); a failed append changes nothing and answers the mapped error. The append
port here holds the completions (a slow ISR) or fails them, in memory."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from strom.broker.group.model import GroupState, OffsetEntry, SyncResult
from strom.protocol.errors import ErrorCode as E
from strom.protocol.errors import KafkaError
from tests.unit.broker.test_group_coordinator import Env, stable_group

TP = ("t", 0)
Records = list[tuple[bytes, bytes | None]]


class SlowEnv(Env):
    """Appends that complete only when the test says so (``release``/``fail``), or at once
    while ``hold`` is off; ``raise_code`` makes the port raise before writing anything."""

    def __init__(self, **cfg: Any) -> None:
        self.hold = False
        self.raise_code: E | None = None
        self.held: list[tuple[Records, Callable[[E], None]]] = []
        super().__init__(**cfg)

    def _append(self, partition: int, records: Records,
                done: Callable[[E], None] | None = None) -> None:  # fmt: skip
        if done is not None and self.raise_code is not None:
            raise KafkaError(self.raise_code)  # e.g. NOT_ENOUGH_REPLICAS: nothing written
        self.log.setdefault(partition, []).extend(records)
        if done is None:
            return
        if self.hold:
            self.held.append((records, done))
        else:
            done(E.none)

    def complete(self, index: int = 0, code: E = E.none) -> None:
        _records, done = self.held.pop(index)
        done(code)

    def commit_later(self, group: str, member: str, generation: int,
                     offsets: dict[tuple[str, int], OffsetEntry]) -> list[dict[tuple[str, int], E]]:  # fmt: skip
        out: list[dict[tuple[str, int], E]] = []
        self.coord.commit_offsets(group, member, None, generation, offsets, out.append)
        return out

    def committed(self, group: str, tp: tuple[str, int] = TP) -> int | None:
        entry = self.coord.fetch_offsets(group, [tp])[tp]
        return None if entry is None else entry.offset


def test_commit_is_answered_and_visible_only_once_replicated() -> None:
    env = SlowEnv()
    (a,) = stable_group(env, 1)
    assert env.commit("g", a, None, 1, {TP: OffsetEntry(5)}) == {TP: E.none}
    env.hold = True
    answer = env.commit_later("g", a, 1, {TP: OffsetEntry(9)})
    assert answer == [] and len(env.held) == 1  # written, not yet replicated
    assert env.committed("g") == 5  # OffsetFetch still shows the replicated offset
    env.complete()
    assert answer == [{TP: E.none}]
    assert env.committed("g") == 9
    assert env.coord.groups["g"].pending_offsets == {}


@pytest.mark.parametrize(
    ("append_error", "answer"),
    [
        (E.not_enough_replicas_after_append, E.coordinator_not_available),
        (E.request_timed_out, E.coordinator_not_available),
        (E.not_leader_or_follower, E.not_coordinator),
        (E.kafka_storage_error, E.not_coordinator),
        (E.message_too_large, E.invalid_commit_offset_size),
    ],
)
def test_failed_commit_changes_nothing_and_answers_the_mapped_error(
    append_error: E, answer: E
) -> None:
    env = SlowEnv()
    (a,) = stable_group(env, 1)
    env.commit("g", a, None, 1, {TP: OffsetEntry(5)})
    env.hold = True
    out = env.commit_later("g", a, 1, {TP: OffsetEntry(9), ("t", 1): OffsetEntry(3)})
    env.complete(code=append_error)
    assert out == [{TP: answer, ("t", 1): answer}]
    assert env.committed("g") == 5 and env.committed("g", ("t", 1)) is None
    assert env.coord.groups["g"].pending_offsets == {}


def test_commit_refused_before_the_append_changes_nothing() -> None:
    env = SlowEnv()
    assert env.commit("solo", "", None, -1, {TP: OffsetEntry(5)}) == {TP: E.none}
    env.raise_code = E.not_enough_replicas  # the ISR is below min.insync.replicas
    assert env.commit("solo", "", None, -1, {TP: OffsetEntry(9)}) == {
        TP: E.coordinator_not_available
    }
    assert env.committed("solo") == 5


def test_a_late_completion_never_overwrites_a_later_commit() -> None:
    env = SlowEnv()
    (a,) = stable_group(env, 1)
    env.hold = True
    first = env.commit_later("g", a, 1, {TP: OffsetEntry(6)})
    second = env.commit_later("g", a, 1, {TP: OffsetEntry(7)})
    env.complete(1)  # the second commit's completion arrives first
    assert second == [{TP: E.none}] and env.committed("g") == 7
    env.complete(0)
    assert first == [{TP: E.none}] and env.committed("g") == 7
    # and a failed earlier commit leaves the later one applied
    third = env.commit_later("g", a, 1, {TP: OffsetEntry(8)})
    fourth = env.commit_later("g", a, 1, {TP: OffsetEntry(9)})
    env.complete(1)
    env.complete(0, E.not_enough_replicas_after_append)
    assert fourth == [{TP: E.none}] and third == [{TP: E.coordinator_not_available}]
    assert env.committed("g") == 9


def test_offsets_deleted_while_a_commit_replicates_stay_deleted() -> None:
    env = SlowEnv()
    env.commit("solo", "", None, -1, {TP: OffsetEntry(5)})
    env.hold = True
    out = env.commit_later("solo", "", -1, {TP: OffsetEntry(9)})
    assert env.coord.delete_offsets("solo", [TP]) == (E.none, {TP: E.none})
    env.complete()
    assert out == [{TP: E.none}]
    assert env.committed("solo") is None  # as Kafka: the deletion dropped the pending commit


def _completing_group(env: SlowEnv) -> tuple[str, str, int]:
    results = [env.join_new("g", client=f"c{i}") for i in range(2)]
    env.timers.advance(0)
    leader = results[0][0].leader_id
    ids = [r[0].member_id for r in results]
    follower = next(m for m in ids if m != leader)
    assert env.coord.groups["g"].state is GroupState.COMPLETING_REBALANCE
    return leader, follower, results[0][0].generation_id


def test_sync_group_answers_and_becomes_stable_only_once_the_group_record_is_replicated() -> None:
    env = SlowEnv()
    leader, follower, gen = _completing_group(env)
    env.hold = True
    follower_out = env.sync("g", follower, gen)
    leader_out = env.sync("g", leader, gen, {leader: b"L", follower: b"F"})
    assert follower_out == leader_out == [] and len(env.held) == 1
    group = env.coord.groups["g"]
    assert group.state is GroupState.COMPLETING_REBALANCE
    assert group.members[follower].assignment == b""  # not applied before the write
    env.complete()
    assert leader_out == [SyncResult(E.none, "consumer", "range", b"L")]
    assert follower_out == [SyncResult(E.none, "consumer", "range", b"F")]
    assert group.state is GroupState.STABLE and group.members[follower].assignment == b"F"


@pytest.mark.parametrize(
    ("append_error", "answer"),
    [
        (E.not_enough_replicas_after_append, E.coordinator_not_available),
        (E.request_timed_out, E.rebalance_in_progress),
        (E.not_leader_or_follower, E.not_coordinator),
    ],
)
def test_failed_group_record_answers_the_members_and_the_group_rebalances(
    append_error: E, answer: E
) -> None:
    env = SlowEnv()
    leader, follower, gen = _completing_group(env)
    env.hold = True
    follower_out = env.sync("g", follower, gen)
    leader_out = env.sync("g", leader, gen, {leader: b"L", follower: b"F"})
    env.complete(code=append_error)
    assert leader_out == [SyncResult(answer)] and follower_out == [SyncResult(answer)]
    group = env.coord.groups["g"]
    assert group.state is GroupState.PREPARING_REBALANCE
    assert all(m.assignment == b"" for m in group.members.values())
    # the members rejoin and the next generation's assignment goes through
    env.hold = False
    joins = [env.join("g", leader), env.join("g", follower)]
    assert [j[0].error for j in joins] == [E.none, E.none]
    new_gen = joins[0][0].generation_id
    assert new_gen == gen + 1
    assert env.sync("g", follower, new_gen) == []
    assert env.sync("g", leader, new_gen, {leader: b"L2", follower: b"F2"})[0].assignment == b"L2"
    assert group.state is GroupState.STABLE and group.members[follower].assignment == b"F2"


def test_group_record_completing_after_the_group_moved_on_is_ignored() -> None:
    env = SlowEnv()
    leader, follower, gen = _completing_group(env)
    env.hold = True
    leader_out = env.sync("g", leader, gen, {leader: b"L", follower: b"F"})
    assert env.coord.leave("g", [(follower, None)]) == (E.none, [E.none])
    # the leader's SyncGroup was answered by the new rebalance, not by the write
    assert leader_out == [SyncResult(E.rebalance_in_progress)]
    env.complete()
    group = env.coord.groups["g"]
    assert group.state is GroupState.PREPARING_REBALANCE and leader_out == [
        SyncResult(E.rebalance_in_progress)
    ]
    assert group.members[leader].assignment == b""


def test_failed_transactional_offsets_are_not_left_pending() -> None:
    env = SlowEnv()
    held: list[Callable[[E], None]] = []

    def append_txn(partition: int, records: Records, pid: int, epoch: int,
                   done: Callable[[E], None]) -> None:  # fmt: skip
        held.append(done)

    env.coord.append_txn = append_txn
    out: list[dict[tuple[str, int], E]] = []
    env.coord.commit_txn_offsets("g", 7, 0, "", None, -1, {TP: OffsetEntry(4)}, out.append)
    assert out == [] and env.coord.has_pending_txn_offset("g", TP)  # as Kafka: prepared
    held.pop()(E.not_enough_replicas_after_append)
    assert out == [{TP: E.coordinator_not_available}]
    assert not env.coord.has_pending_txn_offset("g", TP) and env.coord.pending_txn_offsets == {}
    env.coord.complete_txn(7, commit=True)  # a COMMIT marker finds nothing to publish
    assert env.committed("g") is None
    # a replicated one waits for its marker as before
    env.coord.commit_txn_offsets("g", 8, 0, "", None, -1, {TP: OffsetEntry(6)}, out.append)
    held.pop()(E.none)
    assert out[-1] == {TP: E.none} and env.committed("g") is None
    env.coord.complete_txn(8, commit=True)
    assert env.committed("g") == 6
