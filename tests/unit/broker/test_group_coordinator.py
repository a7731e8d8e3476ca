"""The classic group coordinator as a state machine: fake clock, fake timers, in-memory log."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any

import pytest

from strom.broker.group import records as rec
from strom.broker.group.coordinator import CoordinatorConfig, GroupCoordinator
from strom.broker.group.model import GroupState, JoinResult, OffsetEntry, SyncResult
from strom.clock import FakeClock
from strom.protocol.errors import ErrorCode as E

PROTO = [("range", b"r-meta"), ("roundrobin", b"rr-meta")]


class FakeTimers:
    """``call_later`` against a :class:`FakeClock`; :meth:`advance` fires what is due."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self._heap: list[tuple[int, int, Any]] = []
        self._seq = itertools.count()

    class Handle:
        def __init__(self, fn: Callable[[], None]) -> None:
            self.fn: Callable[[], None] | None = fn

        def cancel(self) -> None:
            self.fn = None

    def call_later(self, delay_ms: int, fn: Callable[[], None]) -> Handle:
        handle = self.Handle(fn)
        heapq.heappush(self._heap, (self.clock.time_ms() + delay_ms, next(self._seq), handle))
        return handle

    def advance(self, ms: int) -> None:
        target = self.clock.time_ms() + ms
        while self._heap and self._heap[0][0] <= target:
            due, _, handle = heapq.heappop(self._heap)
            self.clock.advance(due - self.clock.time_ms())
            if handle.fn is not None:
                handle.fn()
        self.clock.advance(target - self.clock.time_ms())


class Env:
    def __init__(self, **cfg: Any) -> None:
        self.clock = FakeClock()
        self.timers = FakeTimers(self.clock)
        self.log: dict[int, list[tuple[bytes, bytes | None]]] = {}
        self.fail_appends = False
        config = CoordinatorConfig(**{"initial_rebalance_delay_ms": 0, **cfg})
        self.coord = self.new_coordinator(config)
        self.config = config

    def new_coordinator(self, config: CoordinatorConfig) -> GroupCoordinator:
        coord = GroupCoordinator(config, self.clock, self.timers, self._append)
        for partition in sorted(self.log):
            for key, value in self.log[partition]:
                coord.replay(key, value)
        coord.finish_loading()
        return coord

    def _append(self, partition: int, records: list[tuple[bytes, bytes | None]],
                done: Callable[[E], None] | None = None) -> None:  # fmt: skip
        if self.fail_appends:
            raise OSError("disk gone")
        self.log.setdefault(partition, []).extend(records)
        if done is not None:
            done(E.none)  # replicated at once, as on a single node

    def commit(self, group: str, member_id: str, instance: str | None, generation: int,
               offsets: dict[tuple[str, int], OffsetEntry]) -> dict[tuple[str, int], E]:  # fmt: skip
        """OffsetCommit's answer, given synchronously when the append completes at once."""
        out: list[dict[tuple[str, int], E]] = []
        self.coord.commit_offsets(group, member_id, instance, generation, offsets, out.append)
        assert len(out) == 1
        return out[0]

    def join(self, group: str, member_id: str = "", *, instance: str | None = None,
             protocols: list[tuple[str, bytes]] = PROTO, session: int = 10_000,
             rebalance: int = 30_000, known: bool = True, client: str = "c") -> list[JoinResult]:  # fmt: skip
        out: list[JoinResult] = []
        self.coord.join(group, member_id, instance, known, client, "/127.0.0.1", rebalance,
                        session, "consumer", protocols, out.append)  # fmt: skip
        return out

    def join_new(self, group: str, **kw: Any) -> list[JoinResult]:
        """The two-step join of a dynamic member (MEMBER_ID_REQUIRED, then again)."""
        first = self.join(group, **kw)
        assert first[0].error == E.member_id_required
        return self.join(group, first[0].member_id, **kw)

    def sync(self, group: str, member_id: str, generation: int,
             assignments: dict[str, bytes] | None = None, instance: str | None = None) -> list[SyncResult]:  # fmt: skip
        out: list[SyncResult] = []
        self.coord.sync(group, generation, member_id, instance, "consumer", None,
                        assignments or {}, out.append)  # fmt: skip
        return out


def test_two_step_join_single_member_becomes_leader_and_stable() -> None:
    env = Env()
    first = env.join("g")
    assert first[0].error == E.member_id_required and first[0].member_id.startswith("c-")
    joined = env.join("g", first[0].member_id)
    assert joined == []  # the rebalance waits for the initial delay (0 ms here)
    env.timers.advance(0)
    (res,) = joined
    assert res.error == E.none and res.generation_id == 1 and res.leader_id == res.member_id
    assert res.protocol_name == "range" and res.members == [(res.member_id, None, b"r-meta")]
    assert env.coord.groups["g"].state is GroupState.COMPLETING_REBALANCE
    synced = env.sync("g", res.member_id, 1, {res.member_id: b"A"})
    assert synced[0].error == E.none and synced[0].assignment == b"A"
    assert env.coord.groups["g"].state is GroupState.STABLE
    assert env.coord.heartbeat("g", res.member_id, None, 1) == E.none


def stable_group(env: Env, n: int, group: str = "g") -> list[str]:
    results = [env.join_new(group, client=f"c{i}") for i in range(n)]
    env.timers.advance(0)
    ids = [r[0].member_id for r in results]
    leader = results[0][0].leader_id
    gen = results[0][0].generation_id
    assignments = {m: m.encode() for m in ids}
    others = [env.sync(group, m, gen) for m in ids if m != leader]
    env.sync(group, leader, gen, assignments)
    for out in others:
        assert out[0].error == E.none
    assert env.coord.groups[group].state is GroupState.STABLE
    return ids


def test_protocol_selection_by_votes_among_common_protocols() -> None:
    env = Env()
    env.join_new("g", protocols=[("a", b""), ("b", b"")])
    env.join_new("g", protocols=[("b", b""), ("a", b"")])
    env.join_new("g", protocols=[("b", b""), ("c", b"")])
    env.timers.advance(0)
    assert env.coord.groups["g"].protocol_name == "b"
    # A member sharing no protocol with the group is refused.
    assert env.join("g", protocols=[("z", b"")])[0].error == E.inconsistent_group_protocol


def test_rebalance_when_member_joins_stable_group_and_followers_rejoin() -> None:
    env = Env()
    a, b = stable_group(env, 2)
    new = env.join_new("g", client="n")
    assert new == [] and env.coord.groups["g"].state is GroupState.PREPARING_REBALANCE
    assert env.coord.heartbeat("g", a, None, 1) == E.rebalance_in_progress
    # Commits of the old generation are still accepted while preparing.
    assert env.commit("g", a, None, 1, {("t", 0): OffsetEntry(5)}) == {
        ("t", 0): E.none
    }
    ra = env.join("g", a)
    assert ra == []
    rb = env.join("g", b)
    assert len(ra) == len(rb) == len(new) == 1
    assert {r[0].generation_id for r in (ra, rb, new)} == {2}
    assert sum(1 for r in (ra, rb, new) if r[0].members) == 1  # only the leader sees members
    # Stale generation now
    assert env.coord.heartbeat("g", a, None, 1) == E.illegal_generation
    assert env.sync("g", a, 1)[0].error == E.illegal_generation
    assert env.commit("g", a, None, 1, {("t", 0): OffsetEntry(6)}) == {
        ("t", 0): E.illegal_generation
    }
    # Commit while awaiting sync: REBALANCE_IN_PROGRESS
    assert env.commit("g", a, None, 2, {("t", 0): OffsetEntry(6)}) == {
        ("t", 0): E.rebalance_in_progress
    }


def test_member_that_does_not_rejoin_is_dropped_after_rebalance_timeout() -> None:
    env = Env()
    a, b = stable_group(env, 2)
    ra = env.join("g", a, protocols=[("range", b"changed")])  # forces a rebalance
    assert ra == []
    for _ in range(5):  # b keeps heartbeating (told REBALANCE_IN_PROGRESS) but never rejoins
        env.timers.advance(5_000)
        assert env.coord.heartbeat("g", b, None, 1) == E.rebalance_in_progress
    env.timers.advance(4_999)
    assert ra == []
    env.timers.advance(1)
    assert ra[0].error == E.none and ra[0].generation_id == 2
    assert list(env.coord.groups["g"].members) == [a]
    assert env.coord.heartbeat("g", b, None, 2) == E.unknown_member_id


def test_session_timeout_expires_member_and_rebalances() -> None:
    env = Env()
    a, b = stable_group(env, 2)
    env.timers.advance(6_000)
    assert env.coord.heartbeat("g", a, None, 1) == E.none
    env.timers.advance(6_000)
    # b stopped heartbeating 12 s ago (session 10 s): gone, group rebalancing
    assert b not in env.coord.groups["g"].members
    assert env.coord.heartbeat("g", a, None, 1) == E.rebalance_in_progress
    ra = env.join("g", a)
    assert ra[0].error == E.none and ra[0].generation_id == 2 and ra[0].leader_id == a


def test_leave_group_batched_and_unknown_members() -> None:
    env = Env()
    a, b, c = stable_group(env, 3)
    top, errors = env.coord.leave("g", [(b, None), ("nobody", None), (c, None)])
    assert top == E.none and errors == [E.none, E.unknown_member_id, E.none]
    ra = env.join("g", a)
    assert ra[0].generation_id == 2 and ra[0].members == [(a, None, b"r-meta")]
    assert env.coord.leave("missing", [(a, None)]) == (E.none, [E.unknown_member_id])
    env.coord.leave("g", [(a, None)])
    assert env.coord.groups["g"].state is GroupState.EMPTY
    assert env.coord.groups["g"].generation == 3


def test_sync_errors_and_leader_assignment_fills_missing_members() -> None:
    env = Env()
    ra = env.join_new("g", client="a")
    rb = env.join_new("g", client="b")
    env.timers.advance(0)
    a, b = ra[0].member_id, rb[0].member_id
    leader = ra[0].leader_id
    follower = b if leader == a else a
    assert env.sync("g", "stranger", 1)[0].error == E.unknown_member_id
    assert env.sync("nogroup", a, 1)[0].error == E.unknown_member_id
    waiting = env.sync("g", follower, 1)
    assert waiting == []
    done = env.sync("g", leader, 1, {leader: b"L", "extra": b"x"})
    assert done[0].assignment == b"L"
    assert waiting[0].error == E.none and waiting[0].assignment == b""
    # A rejoin while followers wait for the leader: they get REBALANCE_IN_PROGRESS
    env.join("g", follower, protocols=[("range", b"new")])
    waiting2 = env.sync("g", leader, 1)
    assert waiting2[0].error == E.rebalance_in_progress


def test_static_member_rejoins_without_rebalance_and_old_id_is_fenced() -> None:
    env = Env()
    r1 = env.join("g", instance="i1", client="s1")  # static: no MEMBER_ID_REQUIRED
    r2 = env.join("g", instance="i2", client="s2")
    env.timers.advance(0)
    m1, m2 = r1[0].member_id, r2[0].member_id
    leader = r1[0].leader_id
    other = m2 if leader == m1 else m1
    env.sync("g", other, 1)
    env.sync("g", leader, 1, {m1: b"P1", m2: b"P2"})
    # instance i2 restarts: new join with an empty member id, same instance id
    back = env.join("g", instance="i2", client="s2")
    assert back[0].error == E.none and back[0].generation_id == 1
    new_id = back[0].member_id
    assert new_id != m2 and env.coord.groups["g"].state is GroupState.STABLE
    assert env.sync("g", new_id, 1, instance="i2")[0].assignment == b"P2"
    assert env.coord.heartbeat("g", m2, "i2", 1) == E.fenced_instance_id
    assert env.coord.heartbeat("g", new_id, "i2", 1) == E.none
    # The group metadata record carries the new member id.
    value = rec.decode_group_value(env.log[env.coord.partition_for("g")][-1][1] or b"")
    assert {m.group_instance_id: m.member_id for m in value.members}["i2"] == new_id


def test_static_leader_rejoin_gets_skip_assignment() -> None:
    env = Env()
    r1 = env.join("g", instance="i1")
    env.timers.advance(0)
    env.sync("g", r1[0].member_id, 1, {r1[0].member_id: b"X"})
    back = env.join("g", instance="i1")
    assert back[0].skip_assignment and back[0].leader_id == back[0].member_id


def test_initial_rebalance_delay_extends_while_members_arrive() -> None:
    env = Env(initial_rebalance_delay_ms=3000)
    a = env.join_new("g")
    env.timers.advance(2000)
    b = env.join_new("g")
    env.timers.advance(1500)  # first delay over, but a member arrived: wait another 3 s
    assert a == [] and b == []
    env.timers.advance(3000)
    assert a[0].generation_id == b[0].generation_id == 1


def test_pending_member_that_never_returns_does_not_block() -> None:
    env = Env()
    a, _b = stable_group(env, 2)
    first = env.join("g")  # MEMBER_ID_REQUIRED, never comes back
    assert first[0].error == E.member_id_required
    ra = env.join("g", a, protocols=[("range", b"x")])
    env.join("g", _b)
    assert ra == []  # waits for the pending member ...
    env.timers.advance(10_000)  # ... until its session timeout
    assert ra[0].error == E.none


def test_invalid_session_timeout_and_unknown_member_join() -> None:
    env = Env(min_session_timeout_ms=6000)
    assert env.join("g", session=100)[0].error == E.invalid_session_timeout
    assert env.join("g", "made-up")[0].error == E.unknown_member_id
    assert env.join("", known=False)[0].error == E.invalid_group_id


def test_offsets_commit_fetch_simple_and_member_rules() -> None:
    env = Env()
    assert env.commit("solo", "", None, -1, {("t", 0): OffsetEntry(7, 3, "m")}) == {
        ("t", 0): E.none
    }
    got = env.coord.fetch_offsets("solo", [("t", 0), ("t", 1)])
    assert got[("t", 0)] is not None and got[("t", 0)].offset == 7 and got[("t", 1)] is None
    assert got[("t", 0)].leader_epoch == 3 and got[("t", 0)].metadata == "m"
    assert env.commit("nope", "m", None, 3, {("t", 0): OffsetEntry(1)}) == {
        ("t", 0): E.illegal_generation
    }
    (a,) = stable_group(env, 1)
    assert env.commit("g", "", None, -1, {("t", 0): OffsetEntry(1)}) == {
        ("t", 0): E.unknown_member_id
    }
    assert env.commit(
        "g", a, None, 1, {("t", 0): OffsetEntry(1, metadata="x" * 5000)}
    ) == {("t", 0): E.offset_metadata_too_large}
    env.fail_appends = True
    assert env.commit("g", a, None, 1, {("t", 0): OffsetEntry(1)}) == {
        ("t", 0): E.coordinator_not_available
    }
    assert env.coord.fetch_offsets("g", [("t", 0)]) == {("t", 0): None}


def test_replay_rebuilds_groups_and_offsets() -> None:
    env = Env()
    a, b = stable_group(env, 2)
    env.commit("g", a, None, 1, {("t", 0): OffsetEntry(10, 2, "meta")})
    env.commit("g", b, None, 1, {("t", 1): OffsetEntry(20)})
    env.commit("gone", "", None, -1, {("t", 0): OffsetEntry(1)})
    env.coord.delete_groups(["gone"])
    env.commit(
        "x", "", None, -1, {("t", 0): OffsetEntry(1), ("t", 1): OffsetEntry(2)}
    )
    assert env.coord.delete_offsets("x", [("t", 1)]) == (E.none, {("t", 1): E.none})
    restarted = env.new_coordinator(env.config)
    g = restarted.groups["g"]
    assert g.state is GroupState.STABLE and g.generation == 1 and set(g.members) == {a, b}
    assert g.members[a].assignment == a.encode()
    assert restarted.fetch_offsets("g", None) == {
        ("t", 0): OffsetEntry(10, 2, "meta", env.clock.time_ms()),
        ("t", 1): OffsetEntry(20, -1, "", env.clock.time_ms()),
    }
    assert "gone" not in restarted.groups
    assert set(restarted.fetch_offsets("x", None)) == {("t", 0)}
    # Members of the loaded group keep their generation and heartbeat on ...
    assert restarted.heartbeat("g", a, None, 1) == E.none


def test_delete_groups_rules() -> None:
    env = Env()
    stable_group(env, 1)
    env.commit("empty", "", None, -1, {("t", 0): OffsetEntry(1)})
    assert env.coord.delete_groups(["g", "empty", "missing"]) == {
        "g": E.non_empty_group,
        "empty": E.none,
        "missing": E.group_id_not_found,
    }
    assert "empty" not in env.coord.groups
    assert env.coord.fetch_offsets("empty", [("t", 0)]) == {("t", 0): None}


def test_offset_delete_refuses_subscribed_topics_of_active_consumer_group() -> None:
    env = Env()
    sub = b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\xff\xff\xff\xff"
    r = env.join_new("g", protocols=[("range", sub)])
    env.timers.advance(0)
    a = r[0].member_id
    env.sync("g", a, 1, {a: b""})
    env.commit("g", a, None, 1, {("t", 0): OffsetEntry(1), ("u", 0): OffsetEntry(2)})
    assert env.coord.delete_offsets("g", [("t", 0), ("u", 0)]) == (
        E.none,
        {("t", 0): E.group_subscribed_to_topic, ("u", 0): E.none},
    )
    assert env.coord.delete_offsets("none", [("t", 0)]) == (E.group_id_not_found, {})


def test_offsets_of_empty_group_expire_after_retention() -> None:
    env = Env(offsets_retention_ms=60_000)
    env.commit("g", "", None, -1, {("t", 0): OffsetEntry(1)})
    env.timers.advance(59_000)
    assert env.coord.expire_offsets() == 0
    env.timers.advance(1_000)
    assert env.coord.expire_offsets() == 1
    assert "g" not in env.coord.groups
    assert env.new_coordinator(env.config).groups == {}


def test_records_use_kafka_formats() -> None:
    key = rec.encode_offset_key(rec.OffsetKey("grp", "top", 3))
    assert key == b"\x00\x01\x00\x03grp\x00\x03top\x00\x00\x00\x03"
    value = rec.encode_offset_value(rec.OffsetValue(42, 5, "md", 1000))
    assert value == (
        b"\x00\x03" + (42).to_bytes(8, "big") + (5).to_bytes(4, "big") + b"\x00\x02md"
        + (1000).to_bytes(8, "big")
    )  # fmt: skip
    assert rec.decode_offset_value(value) == rec.OffsetValue(42, 5, "md", 1000)
    gv = rec.GroupValue("consumer", 4, "range", "m1", 99, (
        rec.MemberValue("m1", "inst", "cid", "/h", 300, 10, b"sub", b"asg"),
    ))  # fmt: skip
    assert rec.decode_group_value(rec.encode_group_value(gv)) == gv
    assert rec.decode_key(rec.encode_group_key(rec.GroupKey("grp"))) == rec.GroupKey("grp")


@pytest.mark.parametrize(
    ("group", "expected"),
    [("", 0), ("a", 97), ("my-group", None), ("polygenelubricants", None)],
)
def test_java_hashcode_partitioning(group: str, expected: int | None) -> None:
    h = rec.java_string_hashcode(group)
    if expected is not None:
        assert h == expected
    if group == "polygenelubricants":
        assert h == -(2**31)  # Java's famous MIN_VALUE hash: Utils.abs gives 0
        assert rec.partition_for(group, 50) == 0
    assert 0 <= rec.partition_for(group, 50) < 50


def test_empty_group_without_offsets_is_removed_at_the_next_sweep() -> None:
    """Kafka's cleanupGroupMetadata: Empty and no offsets -> Dead at the next sweep, not after
    offsets.retention.minutes."""
    env = Env(offsets_retention_ms=7 * 24 * 3600 * 1000)
    (member,) = stable_group(env, 1)
    env.timers.advance(1_000)
    assert env.coord.expire_offsets() == 0
    assert "g" in env.coord.groups  # Stable: kept
    assert env.coord.leave("g", [(member, None)]) == (E.none, [E.none])
    assert env.coord.groups["g"].state is GroupState.EMPTY
    env.timers.advance(1)
    assert env.coord.expire_offsets() == 0
    assert "g" not in env.coord.groups
    assert env.new_coordinator(env.config).groups == {}  # the tombstone is in the log
    # an Empty group that still has offsets stays until they expire
    env.commit("h", "", None, -1, {("t", 0): OffsetEntry(5)})
    env.timers.advance(60_000)
    assert env.coord.expire_offsets() == 0
    assert env.coord.groups["h"].offsets[("t", 0)].offset == 5
    # a group whose only member is pending (MEMBER_ID_REQUIRED given) goes too, as in Kafka;
    # that member's second JoinGroup is UNKNOWN_MEMBER_ID and it starts again
    first = env.join("p")
    assert first[0].error == E.member_id_required
    env.coord.expire_offsets()
    assert "p" not in env.coord.groups
    assert env.join("p", first[0].member_id)[0].error == E.unknown_member_id
    env.timers.advance(60_000)  # the pending member's timer was cancelled with the group
    assert env.join_new("p") == [] and env.coord.groups["p"].state is GroupState.PREPARING_REBALANCE


def test_partitions_owned_loaded_and_unloaded_as_leadership_moves() -> None:
    """A cluster coordinator serves only the partitions it leads: others are NOT_COORDINATOR;
    losing a partition drops its groups (a waiting JoinGroup answered NOT_COORDINATOR), and
    leading it again rebuilds them, offsets included, from that partition's log alone."""
    env = Env(offsets_partitions=50)
    ids = stable_group(env, 2, "g")
    env.commit("g", ids[0], None, 1, {("t", 0): OffsetEntry(42, -1, "")})
    p = env.coord.partition_for("g")
    other = next(g for g in (f"o{i}" for i in range(100)) if env.coord.partition_for(g) != p)
    env.coord.owned = {p}
    assert env.coord.heartbeat(other, "m", None, 1) == E.not_coordinator
    assert env.commit(other, "", None, -1, {("t", 0): OffsetEntry(1, -1, "")}) == {
        ("t", 0): E.not_coordinator}
    with pytest.raises(Exception) as raised:
        env.coord.fetch_offsets(other, None)
    assert getattr(raised.value, "error_code", None) == E.not_coordinator

    waiting = env.join("g", ids[0])  # a rebalance: the JoinGroup waits for the other member
    assert waiting == []
    env.coord.unload_partition(p)
    assert waiting[0].error == E.not_coordinator
    assert "g" not in env.coord.groups and env.coord.owned == set()
    assert env.coord.heartbeat("g", ids[0], None, 1) == E.not_coordinator

    env.coord.loading = True  # leading p again: replay its log only
    for key, value in env.log[p]:
        env.coord.replay(key, value)
    env.coord.finish_loading(p)
    assert env.coord.owned == {p}
    assert env.coord.fetch_offsets("g", [("t", 0)])[("t", 0)].offset == 42  # type: ignore[union-attr]
