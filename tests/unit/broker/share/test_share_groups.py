"""Share-group membership (ShareGroupHeartbeat) as a state machine, with a fake clock."""

from __future__ import annotations

import uuid

from strom.broker.share import group_records as grec
from strom.broker.share.groups import MemberSettings, ShareGroups
from strom.clock import FakeClock
from strom.protocol.errors import ErrorCode as E
from tests.unit.broker.test_group_coordinator import FakeTimers

Q = uuid.UUID(int=1)
R = uuid.UUID(int=2)
SETTINGS = MemberSettings(session_timeout_ms=1000, heartbeat_interval_ms=100, max_size=3)


class Env:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.timers = FakeTimers(self.clock)
        self.appended: list[tuple[str, bytes, bytes | None]] = []
        self.topics = {"q": (Q, 1), "r": (R, 4)}
        self.not_here: E | None = None
        self.groups = ShareGroups(self.clock, self.timers, self._append, lambda _g: self.not_here)

    def _append(self, group: str, records: list[tuple[bytes, bytes | None]]) -> None:
        self.appended.extend((group, k, v) for k, v in records)

    def hb(self, member: str, epoch: int, topics: list[str] | None = None, group: str = "g"):
        return self.groups.heartbeat(group, member, epoch, None, topics, "cid", "/127.0.0.1",
                                     self.topics.get, SETTINGS)


def test_members_join_share_a_one_partition_topic_and_leave() -> None:
    env = Env()
    a = env.hb("a", 0, ["q"])
    assert (a.error, a.member_epoch, a.heartbeat_interval_ms) == (E.none, 1, 100)
    assert a.assignment == {Q: [0]}
    b = env.hb("b", 0, ["q"])
    assert b.member_epoch == 2 and b.assignment == {Q: [0]}
    # a's next heartbeat: new epoch, same assignment (not sent again)
    a2 = env.hb("a", 1)
    assert a2.member_epoch == 2 and a2.assignment is None
    assert env.hb("a", 1).error == E.fenced_member_epoch
    gone = env.hb("a", -1)
    assert gone.member_epoch == -1 and set(env.groups.get("g").members) == {"b"}
    assert [grec.decode_metadata(v) for _, _, v in env.appended if v] == [1, 2, 3]


def test_assignment_changes_are_sent_once() -> None:
    env = Env()
    env.hb("a", 0, ["r"])
    b = env.hb("b", 0, ["r"])
    assert sum(len(p) for p in b.assignment.values()) == 2
    a = env.hb("a", 1)
    assert a.member_epoch == 2 and sum(len(p) for p in a.assignment.values()) == 2
    assert env.hb("a", 2).assignment is None


def test_validation_errors() -> None:
    env = Env()
    assert env.hb("", 0, ["q"]).error == E.invalid_request
    assert env.hb("a", 0, []).error == E.invalid_request
    assert env.hb("a", -3, ["q"]).error == E.invalid_request
    assert env.hb("a", 5).error == E.unknown_member_id
    env.not_here = E.not_coordinator
    assert env.hb("a", 0, ["q"]).error == E.not_coordinator
    env.not_here = None
    env.groups.other_type = lambda gid: gid == "classic"
    assert env.hb("a", 0, ["q"], group="classic").error == E.group_id_not_found


def test_max_size_and_session_timeout() -> None:
    env = Env()
    for m in "abc":
        env.hb(m, 0, ["q"])
    assert env.hb("d", 0, ["q"]).error == E.group_max_size_reached
    env.timers.advance(500)
    env.hb("a", env.groups.get("g").members["a"].epoch)
    env.timers.advance(600)  # b and c time out, a heartbeated at 500
    assert set(env.groups.get("g").members) == {"a"}
    env.timers.advance(1000)
    assert env.groups.get("g").members == {} and env.groups.get("g").state == "Empty"


def test_topic_changes_bump_the_epoch() -> None:
    env = Env()
    env.hb("a", 0, ["q", "missing"])
    assert env.hb("a", 1).assignment is None
    env.topics["missing"] = (uuid.UUID(int=3), 2)
    again = env.hb("a", 1)
    assert again.member_epoch == 2 and again.assignment == {Q: [0], uuid.UUID(int=3): [0, 1]}


def test_initialization_bookkeeping_and_reload() -> None:
    env = Env()
    env.hb("a", 0, ["r"])
    todo = env.groups.uninitialized("g")
    assert todo == {R: [0, 1, 2, 3]}
    assert env.groups.uninitialized("g") == {}  # in progress: not asked twice
    env.groups.initialization_done("g", {R: "r"}.get, {R: [0, 1]}, {R: [2, 3]})
    assert env.groups.uninitialized("g") == {R: [2, 3]}
    assert env.groups.get("g").initialized == {R: ("r", frozenset({0, 1}))}
    # a new coordinator replays the records: the group and its initialized partitions
    again = ShareGroups(env.clock, env.timers, lambda *_: None, lambda _g: None)
    for _g, key, value in env.appended:
        again.replay(key, value)
    loaded = again.get("g")
    assert loaded.epoch == 1 and loaded.members == {} and loaded.initialized == {R: ("r", frozenset({0, 1}))}


def test_delete_only_when_empty() -> None:
    env = Env()
    env.hb("a", 0, ["q"])
    assert env.groups.delete("g") == E.non_empty_group
    env.hb("a", -1)
    assert env.groups.delete("g") == E.none and env.groups.get("g") is None
    again = ShareGroups(env.clock, env.timers, lambda *_: None, lambda _g: None)
    for _g, key, value in env.appended:
        again.replay(key, value)
    assert again.get("g") is None
    assert env.groups.delete("nope") == E.group_id_not_found
