"""KIP-848 consumer groups in the coordinator: fake clock, fake timers, an in-memory log.

Each test drives ConsumerGroupHeartbeat (and, for mixed groups, the classic APIs) the way a
client does and asserts the exact assignments, epochs, errors and records; where a state is
rebuilt from the log, the rebuilt group must equal the live one.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from strom.broker.group import consumer_records as cr
from strom.broker.group.consumer import HeartbeatRequest, HeartbeatResult
from strom.broker.group.consumer_model import ConsumerGroupState, MemberState
from strom.broker.group.coordinator import CoordinatorConfig, GroupCoordinator
from strom.broker.group.embedded_protocol import (
    encode_assignment,
    encode_subscription,
    parse_assignment,
)
from strom.broker.group.model import GroupState, JoinResult, OffsetEntry, SyncResult
from strom.broker.group.reconciliation import FencedMember, reconcile
from strom.broker.group.topics_view import StaticTopics, TopicMeta
from strom.clock import FakeClock
from strom.protocol.errors import ErrorCode as E
from tests.unit.broker.test_group_coordinator import FakeTimers

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)
SESSION = 10_000


def tp(*pairs: tuple[uuid.UUID, list[int]]) -> dict[uuid.UUID, frozenset[int]]:
    return {t: frozenset(ps) for t, ps in pairs}


class Env:
    def __init__(self, **cfg: Any) -> None:
        self.clock = FakeClock()
        self.timers = FakeTimers(self.clock)
        self.log: dict[int, list[tuple[bytes, bytes | None]]] = {}
        self.topics = StaticTopics({"a": TopicMeta("a", T1, 6), "b": TopicMeta("b", T2, 2)})
        self.config = CoordinatorConfig(**{"initial_rebalance_delay_ms": 0,
                                           "consumer_session_timeout_ms": SESSION, **cfg})  # fmt: skip
        self.coord = self.new_coordinator()

    def new_coordinator(self) -> GroupCoordinator:
        coord = GroupCoordinator(self.config, self.clock, self.timers, self._append, self.topics)
        for partition in sorted(self.log):
            for key, value in self.log[partition]:
                coord.replay(key, value)
        coord.finish_loading()
        return coord

    def _append(self, partition: int, records: list[tuple[bytes, bytes | None]],
                done: Any = None) -> None:  # fmt: skip
        self.log.setdefault(partition, []).extend(records)
        if done is not None:
            done(E.none)

    def hb(self, member: str, epoch: int, *, group: str = "g", topics: list[str] | None = None,
           regex: str | None = None, owned: dict[uuid.UUID, frozenset[int]] | None = None,
           instance: str | None = None, assignor: str | None = None, rack: str | None = None,
           rebalance_ms: int = 5000, version: int = 1) -> HeartbeatResult:  # fmt: skip
        join = epoch == 0
        req = HeartbeatRequest(
            group_id=group, member_id=member, member_epoch=epoch, instance_id=instance,
            rack_id=rack, rebalance_timeout_ms=rebalance_ms if join else -1,
            subscribed_topic_names=tuple(topics) if topics is not None else (() if join and regex is None else None),
            subscribed_topic_regex=regex, server_assignor=assignor,
            owned=owned if owned is not None else ({} if join else None),
            client_id="cid", client_host="/127.0.0.1", version=version,
        )  # fmt: skip
        out: list[HeartbeatResult] = []
        self.coord.consumer_heartbeat(req, out.append)
        assert len(out) == 1
        return out[0]

    def group(self, gid: str = "g") -> Any:
        entry = self.coord.groups[gid]
        assert entry.consumer is not None
        return entry.consumer


def assert_exclusive(group: Any) -> None:
    """No partition is assigned to (or pending revocation at) two members."""
    seen: dict[tuple[uuid.UUID, int], str] = {}
    for m in group.members.values():
        for parts in (m.assigned, m.pending_revocation):
            for t, ps in parts.items():
                for p in ps:
                    assert (t, p) not in seen, ((t, p), seen[(t, p)], m.member_id)
                    seen[(t, p)] = m.member_id


def snapshot(group: Any) -> Any:
    return (group.group_epoch, group.assignment_epoch, group.metadata_hash,
            {m: (v.metadata(), v.current()) for m, v in group.members.items()},
            dict(group.target), {r: v.topics for r, v in group.regexes.items()})  # fmt: skip


# reconciliation (pure) --------------------------------------------------------------------------
def test_a_partition_is_revoked_before_it_moves() -> None:
    from strom.broker.group.consumer_model import ConsumerMember

    m = ConsumerMember("m", member_epoch=1, assigned=tp((T1, [0, 1, 2])))
    free = lambda t, p: -1  # noqa: E731
    step = reconcile(m, 2, tp((T1, [0, 1])), free, tp((T1, [0, 1, 2])))
    assert step.state is MemberState.UNREVOKED_PARTITIONS and step.member_epoch == 1
    assert step.assigned == tp((T1, [0, 1])) and step.pending_revocation == tp((T1, [2]))
    assert reconcile(step, 2, tp((T1, [0, 1])), free, tp((T1, [0, 1, 2]))) is step  # still owns it
    done = reconcile(step, 2, tp((T1, [0, 1])), free, tp((T1, [0, 1])))
    assert done.state is MemberState.STABLE and done.member_epoch == 2 and done.previous_member_epoch == 1
    # a partition still owned elsewhere is waited for; the free ones are given at once
    busy = lambda t, p: 3 if p == 5 else -1  # noqa: E731
    waiting = reconcile(done, 3, tp((T1, [0, 1, 4, 5])), busy, tp((T1, [0, 1])))
    assert waiting.state is MemberState.UNRELEASED_PARTITIONS and waiting.assigned == tp((T1, [0, 1, 4]))
    unknown = ConsumerMember("m", state=MemberState.UNKNOWN, assigned=tp((T1, [0])))
    with pytest.raises(FencedMember):
        reconcile(unknown, 3, {}, free, tp((T1, [0])))


# heartbeats --------------------------------------------------------------------------------------
def test_two_members_split_without_a_partition_owned_twice() -> None:
    env = Env()
    r1 = env.hb("m1", 0, topics=["a"])
    assert r1.error == E.none and r1.member_epoch == 1 and r1.assignment == tp((T1, range(6)))
    assert r1.heartbeat_interval_ms == env.config.consumer_heartbeat_interval_ms
    r2 = env.hb("m2", 0, topics=["a"])
    assert r2.error == E.none and r2.member_epoch == 2 and r2.assignment == {}  # nothing free yet
    group = env.group()
    assert group.members["m2"].state is MemberState.UNRELEASED_PARTITIONS
    assert group.state is ConsumerGroupState.RECONCILING
    assert_exclusive(group)
    # m1 is asked to revoke half, keeps reading the rest
    r1 = env.hb("m1", 1, owned=tp((T1, range(6))))
    assert r1.member_epoch == 1 and r1.assignment is not None and len(r1.assignment[T1]) == 3
    kept = r1.assignment[T1]
    assert group.members["m1"].state is MemberState.UNREVOKED_PARTITIONS
    assert_exclusive(group)
    # still reporting them: nothing moves
    assert env.hb("m2", 2, owned={}).assignment is None
    r1 = env.hb("m1", 1, owned=tp((T1, kept)))
    assert r1.member_epoch == 2 and r1.assignment is None  # its partitions did not change
    r2 = env.hb("m2", 2, owned={})
    assert r2.assignment == {T1: frozenset(range(6)) - kept}
    assert group.state is ConsumerGroupState.STABLE
    assert_exclusive(group)


def test_leave_and_session_expiry_move_partitions_to_the_others() -> None:
    env = Env()
    env.hb("m1", 0, topics=["a"])
    env.hb("m2", 0, topics=["a"])
    r1 = env.hb("m1", 1, owned=tp((T1, range(6))))
    env.hb("m1", 1, owned={T1: r1.assignment[T1]})  # type: ignore[index]
    env.hb("m2", 2, owned={})
    env.hb("m3", 0, topics=["a"])
    group = env.group()
    assert set(group.members) == {"m1", "m2", "m3"}
    # m3 leaves: the group epoch moves on, m1 and m2 split everything again
    left = env.hb("m3", -1)
    assert left.error == E.none and left.member_epoch == -1 and "m3" not in group.members
    # m2 stops heartbeating: fenced once its session expires
    for _ in range(3):
        env.timers.advance(SESSION // 2)
        m1 = group.members["m1"]
        env.hb("m1", m1.member_epoch, owned=m1.assigned)
    assert set(group.members) == {"m1"}
    m1 = group.members["m1"]
    assert m1.assigned == tp((T1, range(6))) and m1.state is MemberState.STABLE
    assert env.hb("m2", 2).error == E.unknown_member_id


def test_a_member_that_does_not_revoke_in_time_is_fenced() -> None:
    env = Env()
    env.hb("m1", 0, topics=["a"], rebalance_ms=3000)
    env.hb("m2", 0, topics=["a"])
    env.hb("m1", 1, owned=tp((T1, range(6))))  # asked to revoke
    assert env.group().members["m1"].state is MemberState.UNREVOKED_PARTITIONS
    env.timers.advance(2000)
    env.hb("m2", 2, owned={})
    env.timers.advance(1500)  # past m1's rebalance timeout: fenced, its partitions free
    assert "m1" not in env.group().members
    r2 = env.hb("m2", 2, owned={})
    assert r2.member_epoch == 3 and r2.assignment == tp((T1, range(6)))


def test_epochs_are_checked() -> None:
    env = Env()
    env.hb("m1", 0, topics=["a"])
    assert env.hb("m1", 5).error == E.fenced_member_epoch
    env.hb("m2", 0, topics=["a"])
    env.hb("m1", 1, owned=tp((T1, range(6))))
    r = env.hb("m1", 1, owned=tp((T1, range(3))))
    assert r.member_epoch == 2 or r.error == E.none
    # the previous epoch with a subset of the assignment is accepted (a lost response)
    m1 = env.group().members["m1"]
    assert env.hb("m1", m1.previous_member_epoch, owned=m1.assigned).error == E.none
    assert env.hb("m1", 0 if m1.previous_member_epoch else -5).error in (E.fenced_member_epoch, E.invalid_request)


@pytest.mark.parametrize(("kw", "code", "message"), [
    ({"member": "", "epoch": 1}, E.invalid_request, "MemberId can't be empty."),
    ({"group": " "}, E.invalid_request, "GroupId can't be empty."),
    ({"instance": ""}, E.invalid_request, "InstanceId can't be empty."),
    ({"rack": " "}, E.invalid_request, "RackId can't be empty."),
    ({"epoch": -3}, E.invalid_request, "MemberEpoch is invalid."),
    ({"assignor": "sticky"}, E.unsupported_assignor,
     "ServerAssignor sticky is not supported. Supported assignors: uniform, range."),
    ({"regex": "(a)\\1"}, E.invalid_regular_expression, None),  # a backreference: Python's re, not RE2
])  # fmt: skip
def test_bad_requests_get_kafkas_errors(kw: dict[str, Any], code: E, message: str | None) -> None:
    env = Env()
    args: dict[str, Any] = {"member": "m1", "epoch": 0, "topics": ["a"]}
    args.update(kw)
    r = env.hb(args.pop("member"), args.pop("epoch"), **args)
    assert r.error == code
    if message is not None:
        assert r.message == message
    assert "g" not in env.coord.groups or not env.group().members


def test_a_static_member_keeps_its_partitions_while_it_restarts() -> None:
    env = Env()
    env.hb("s1", 0, topics=["a"], instance="i1")
    env.hb("m2", 0, topics=["a"])
    r = env.hb("s1", 1, owned=tp((T1, range(6))), instance="i1")
    env.hb("s1", 1, owned={T1: r.assignment[T1]}, instance="i1")  # type: ignore[index]
    env.hb("m2", 2, owned={})
    group = env.group()
    owned_by_s1 = group.members["s1"].assigned
    # a second instance with the same id cannot join while the first holds it
    assert env.hb("other", 0, topics=["a"], instance="i1").error == E.unreleased_instance_id
    # the static member leaves for now (-2): it keeps its partitions
    left = env.hb("s1", -2, instance="i1")
    assert left.error == E.none and left.member_epoch == -2
    assert group.members["s1"].assigned == owned_by_s1
    m2 = group.members["m2"]
    assert env.hb("m2", m2.member_epoch, owned=m2.assigned).assignment is None  # nothing moves
    # it comes back under a new member id and gets the same partitions, no rebalance
    epoch = group.group_epoch
    back = env.hb("s1-new", 0, topics=["a"], instance="i1")
    assert back.error == E.none and back.assignment == owned_by_s1
    assert group.group_epoch == epoch and "s1" not in group.members
    assert env.hb("s1", 2, instance="i1").error == E.fenced_instance_id


def test_a_static_member_that_does_not_come_back_loses_its_partitions() -> None:
    env = Env()
    env.hb("s1", 0, topics=["a"], instance="i1")
    env.hb("s1", -2, instance="i1")
    env.hb("m2", 0, topics=["a"])
    env.timers.advance(SESSION // 2)
    env.hb("m2", env.group().members["m2"].member_epoch, owned={})
    env.timers.advance(SESSION // 2 + 1)  # s1's session: fenced
    group = env.group()
    assert "s1" not in group.members and "i1" not in group.static_members
    m2 = group.members["m2"]
    assert env.hb("m2", m2.member_epoch, owned={}).assignment == tp((T1, range(6)))


def test_the_log_rebuilds_the_same_group() -> None:
    env = Env()
    env.hb("m1", 0, topics=["a", "b"], rack="r1")
    env.hb("m2", 0, regex="^b$|^a", instance="i2")
    env.hb("m1", 1, owned=tp((T1, range(6)), (T2, range(2))))
    live = env.group()
    again = env.new_coordinator().groups["g"].consumer
    assert again is not None and snapshot(again) == snapshot(live)
    assert again.owners == live.owners and again.static_members == live.static_members
    # the rebuilt coordinator carries on: the members' epochs are accepted there
    env.coord = env.new_coordinator()
    m1 = env.group().members["m1"]
    assert env.hb("m1", m1.member_epoch, owned=m1.assigned).error == E.none


def test_regex_subscriptions_are_re2_and_follow_topic_changes() -> None:
    env = Env()
    r = env.hb("m1", 0, regex=r"a|c\d+")
    assert r.assignment == tp((T1, range(6)))
    group = env.group()
    assert group.regexes[r"a|c\d+"].topics == {"a"}
    t3 = uuid.UUID(int=3)
    env.topics.put(TopicMeta("c12", t3, 1))
    env.topics.put(TopicMeta("c", uuid.UUID(int=4), 1))  # no digits: no match
    r = env.hb("m1", 1, owned=tp((T1, range(6))))
    assert r.member_epoch == 2 and r.assignment == tp((T1, range(6)), (t3, [0]))
    assert group.regexes[r"a|c\d+"].topics == {"a", "c12"}
    # a partition added to a subscribed topic: a new epoch
    env.topics.put(TopicMeta("a", T1, 7))
    r = env.hb("m1", 2, owned=tp((T1, range(6)), (t3, [0])))
    assert r.member_epoch == 3 and r.assignment == tp((T1, range(7)), (t3, [0]))


def test_range_assignor_when_asked_for() -> None:
    env = Env()
    env.hb("m2", 0, topics=["a"], assignor="range")
    env.hb("m1", 0, topics=["a"], assignor="range")
    group = env.group()
    assert group.target == {"m1": tp((T1, [0, 1, 2])), "m2": tp((T1, [3, 4, 5]))}


def test_rack_aware_uniform_assignment() -> None:
    env = Env()
    env.topics.put(TopicMeta("r", uuid.UUID(int=9), 4,
                             (frozenset({"x"}), frozenset({"y"}), frozenset({"x"}), frozenset({"y"}))))  # fmt: skip
    env.hb("m1", 0, topics=["r"], rack="y", group="racks")
    env.hb("m2", 0, topics=["r"], rack="x", group="racks")
    target = env.group("racks").target
    assert target["m1"] == tp((uuid.UUID(int=9), [1, 3])) or target["m2"] == tp((uuid.UUID(int=9), [0, 2]))


# offsets ----------------------------------------------------------------------------------------
def test_commits_are_checked_by_member_epoch() -> None:
    env = Env()
    env.hb("m1", 0, topics=["a"])
    off = {("a", 0): OffsetEntry(5)}

    def commit(member: str, epoch: int, version: int = 9) -> E:
        out: list[dict[tuple[str, int], E]] = []
        env.coord.commit_offsets("g", member, None, epoch, off, out.append, version)
        return out[0][("a", 0)]

    assert commit("m1", 1) == E.none
    assert commit("m1", 0) == E.stale_member_epoch
    assert commit("nobody", 1) == E.unknown_member_id
    assert commit("m1", 1, version=8) == E.unsupported_version
    assert env.coord.check_offset_fetch("g", "m1", 0) == E.stale_member_epoch
    assert env.coord.check_offset_fetch("g", "m1", 1) is None
    assert env.coord.check_offset_fetch("g", None, -1) is None
    assert env.coord.delete_groups(["g"]) == {"g": E.non_empty_group}
    env.hb("m1", -1)
    assert commit("", -1) == E.none  # an admin commit to an empty group
    assert env.coord.fetch_offsets("g", [("a", 0)])[("a", 0)].offset == 5  # type: ignore[union-attr]
    assert env.coord.delete_groups(["g"]) == {"g": E.none}
    assert "g" not in env.coord.groups and "g" not in env.new_coordinator().groups


# migration --------------------------------------------------------------------------------------
def classic_join(env: Env, group: str, member: str, topics: list[str], *, owned: dict[str, list[int]] | None = None,
                 instance: str | None = None) -> list[JoinResult]:  # fmt: skip
    out: list[JoinResult] = []
    sub = encode_subscription(topics, owned or {}, version=3)
    env.coord.join(group, member, instance, True, "cid", "/127.0.0.1", 5000, 6000, "consumer",
                   [("range", sub)], out.append)  # fmt: skip
    return out


def classic_sync(env: Env, group: str, member: str, generation: int,
                 assignments: dict[str, bytes] | None = None) -> SyncResult:  # fmt: skip
    out: list[SyncResult] = []
    env.coord.sync(group, generation, member, None, "consumer", "range", assignments or {}, out.append)
    assert len(out) == 1
    return out[0]


def test_a_classic_group_converts_and_back_without_losing_offsets() -> None:
    env = Env()
    first = classic_join(env, "mix", "", ["a"])
    assert first[0].error == E.member_id_required
    cid = first[0].member_id
    joined = classic_join(env, "mix", cid, ["a"])
    env.timers.advance(0)
    assert joined[0].error == E.none and joined[0].generation_id == 1
    everything = encode_assignment({"a": list(range(6))}, 3)
    assert classic_sync(env, "mix", cid, 1, {cid: everything}).error == E.none
    out: list[dict[tuple[str, int], E]] = []
    env.coord.commit_offsets("mix", cid, None, 1, {("a", 1): OffsetEntry(42)}, out.append, 8)
    assert out == [{("a", 1): E.none}]
    # a consumer-protocol member joins: the group converts, the classic member keeps its partitions
    r = env.hb("new", 0, topics=["a"], group="mix")
    assert r.error == E.none and r.member_epoch == 2
    entry = env.coord.groups["mix"]
    assert entry.consumer is not None and not entry.members and entry.group_type == "consumer"
    classic = entry.consumer.members[cid]
    assert classic.uses_classic and classic.assigned == tp((T1, range(6)))
    assert env.coord.fetch_offsets("mix", [("a", 1)])[("a", 1)].offset == 42  # type: ignore[union-attr]
    # the classic member is told to rejoin, rejoins (eager: owns nothing) and syncs its half
    assert env.coord.heartbeat("mix", cid, None, 1) == E.rebalance_in_progress
    rejoined = classic_join(env, "mix", cid, ["a"])
    assert rejoined[0].error == E.none and rejoined[0].protocol_type == "consumer"
    gen = rejoined[0].generation_id
    synced = classic_sync(env, "mix", cid, gen)
    assert synced.error == E.none and len(parse_assignment(synced.assignment)["a"]) == 3
    assert env.coord.heartbeat("mix", cid, None, gen) == E.none
    new = entry.consumer.members["new"]
    assert env.hb("new", new.member_epoch, owned={}, group="mix").assignment is not None
    assert_exclusive(entry.consumer)
    # ... and classic commits with its generation (= member epoch)
    out = []
    env.coord.commit_offsets("mix", cid, None, gen, {("a", 1): OffsetEntry(43)}, out.append, 8)
    assert out == [{("a", 1): E.none}]
    # the last consumer-protocol member leaves: the group is classic again, and rebalances
    assert env.hb("new", entry.consumer.members["new"].member_epoch, group="mix").error == E.none
    left = env.hb("new", -1, group="mix")
    assert left.error == E.none
    assert entry.consumer is None and entry.group_type == "classic"
    assert entry.state is GroupState.PREPARING_REBALANCE and cid in entry.members
    assert env.coord.fetch_offsets("mix", [("a", 1)])[("a", 1)].offset == 43  # type: ignore[union-attr]
    again = env.new_coordinator().groups["mix"]
    assert again.consumer is None and cid in again.members


def test_migration_policy_disabled_refuses_a_non_empty_classic_group() -> None:
    env = Env(migration_policy="disabled")
    first = classic_join(env, "old", "", ["a"])
    classic_join(env, "old", first[0].member_id, ["a"])
    env.timers.advance(0)
    r = env.hb("new", 0, topics=["a"], group="old")
    assert r.error == E.group_id_not_found
    assert env.coord.groups["old"].consumer is None


def test_empty_groups_change_protocol_freely() -> None:
    env = Env(migration_policy="disabled")
    env.hb("m1", 0, topics=["a"], group="e")
    env.hb("m1", -1, group="e")
    first = classic_join(env, "e", "", ["a"])  # an empty consumer group becomes classic
    assert first[0].error == E.member_id_required
    assert env.coord.groups["e"].consumer is None
    env.coord.leave("e", [(first[0].member_id, None)])
    assert env.hb("m2", 0, topics=["a"], group="e").error == E.none


def test_record_formats_are_kafkas() -> None:
    # ConsumerGroupMetadataValue v0, epoch 7, no tagged fields
    assert cr.group_epoch_value(7) == bytes.fromhex("0000" "00000007" "00")
    key = cr.member_key(cr.CURRENT_MEMBER_ASSIGNMENT, "g", "m")
    assert key == bytes.fromhex("0008" "0001" "67" "0001" "6d")
    member = cr.MemberMetadata("i", None, "c", "/h", ("t",), None, 100, "uniform",
                               cr.ClassicMetadata(6000, (("range", b"\x00\x03"),)))  # fmt: skip
    assert cr.decode_member(cr.member_value(member)) == member
