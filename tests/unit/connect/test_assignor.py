"""The leader's assignors: eager round robin and KIP-415 incremental cooperative rules."""

from __future__ import annotations

from collections import Counter

from strom.connect.assignor import (
    ConfigSnapshot,
    EagerAssignor,
    IncrementalCooperativeAssignor,
    config_mismatch,
)
from strom.connect.group_protocol import (
    CONFIG_MISMATCH,
    Assignment,
    ConnectorsAndTasks,
    TaskId,
    WorkerState,
)


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000.0

    def __call__(self) -> float:
        return self.ms


class Cluster:
    """Members that apply what the leader hands them, as workers do."""

    def __init__(self, max_delay: int = 300_000) -> None:
        self.clock = Clock()
        self.assignor = IncrementalCooperativeAssignor(max_delay, self.clock)
        self.running: dict[str, ConnectorsAndTasks] = {}
        self.generation = 0
        self.last_completed = -1
        self.last: dict[str, Assignment] = {}

    def round(self, config: ConfigSnapshot) -> dict[str, Assignment]:
        self.generation += 1
        members = {
            m: WorkerState(f"http://{m}/", config.offset,
                           Assignment(1, assigned=ConnectorsAndTasks(list(ct.connectors),
                                                                     list(ct.tasks)),
                                      leader="m0") if not ct.is_empty() else None)
            for m, ct in self.running.items()}
        leader = sorted(members)[0]
        out = self.assignor.assign(leader, members, config, 1, self.last_completed,
                                   self.generation)
        self.last_completed = self.generation
        for m, a in out.items():
            ct = self.running[m]
            ct.connectors = [c for c in ct.connectors if c not in a.revoked.connectors]
            ct.tasks = [t for t in ct.tasks if t not in a.revoked.tasks]
            ct.connectors += a.assigned.connectors
            ct.tasks += a.assigned.tasks
        self.last = out
        return out

    def owners(self) -> dict[object, str]:
        out: dict[object, str] = {}
        for m, ct in self.running.items():
            for item in [*ct.connectors, *ct.tasks]:
                assert item not in out, f"{item} runs twice"
                out[item] = m
        return out


def config(**tasks: int) -> ConfigSnapshot:
    return ConfigSnapshot(10, dict(tasks))


def test_eager_deals_connectors_then_tasks_round_robin() -> None:
    members = {"b": WorkerState("http://b/", 10), "a": WorkerState("http://a/", 10)}
    out = EagerAssignor().assign("a", members, config(c1=2, c0=2))
    assert out["a"].assigned == ConnectorsAndTasks(["c0"], [("c0", 0), ("c1", 0)])
    assert out["b"].assigned == ConnectorsAndTasks(["c1"], [("c0", 1), ("c1", 1)])
    assert {a.leader_url for a in out.values()} == {"http://a/"}
    assert {a.version for a in out.values()} == {0}


def test_cooperative_first_round_balances_without_revoking() -> None:
    cl = Cluster()
    cl.running = {"m0": ConnectorsAndTasks(), "m1": ConnectorsAndTasks()}
    out = cl.round(config(c0=2, c1=2))
    assert all(a.revoked.is_empty() for a in out.values())
    assert Counter(cl.owners().values()) == {"m0": 3, "m1": 3}


def test_joining_member_takes_only_what_moves() -> None:
    cl = Cluster()
    cl.running = {"m0": ConnectorsAndTasks(), "m1": ConnectorsAndTasks()}
    cfg = config(c0=3, c1=3)
    cl.round(cfg)
    before = cl.owners()
    cl.running["m2"] = ConnectorsAndTasks()
    first = cl.round(cfg)
    revoked = {i for a in first.values() for i in [*a.revoked.connectors, *a.revoked.tasks]}
    assert revoked and first["m2"].assigned.is_empty()  # revocation round first
    cl.round(cfg)  # the members rejoin after revoking
    after = cl.owners()
    assert Counter(after.values()) == {"m0": 3, "m1": 3, "m2": 2}
    moved = {item for item, owner in after.items() if before[item] != owner}
    assert moved == revoked  # nothing else was stopped
    assert {after[i] for i in moved} == {"m2"}


def test_departed_members_work_waits_for_the_delay_then_moves() -> None:
    cl = Cluster(max_delay=5000)
    cl.running = {"m0": ConnectorsAndTasks(), "m1": ConnectorsAndTasks()}
    cfg = config(c0=2, c1=2)
    cl.round(cfg)
    gone = {item for item, m in cl.owners().items() if m == "m1"}
    del cl.running["m1"]
    out = cl.round(cfg)
    assert out["m0"].delay_ms == 5000 and out["m0"].assigned.is_empty()
    cl.clock.ms += 2000
    out = cl.round(cfg)  # a rejoin before the deadline: still held back
    assert out["m0"].assigned.is_empty() and out["m0"].delay_ms == 3000
    cl.clock.ms += 3000
    out = cl.round(cfg)
    assert out["m0"].delay_ms == 0
    assert set(out["m0"].assigned.connectors) | set(out["m0"].assigned.tasks) >= gone
    owners = cl.owners()
    assert set(owners.values()) == {"m0"}
    assert len(owners) == 2 + 4


def test_departed_work_goes_to_a_member_that_came_back_empty() -> None:
    cl = Cluster(max_delay=5000)
    cl.running = {"m0": ConnectorsAndTasks(), "m1": ConnectorsAndTasks()}
    cfg = config(c0=2, c1=2)
    cl.round(cfg)
    m1_items = {t for t, m in cl.owners().items() if m == "m1"}
    del cl.running["m1"]
    cl.round(cfg)
    cl.running["m1b"] = ConnectorsAndTasks()  # restarted under a new member id
    out = cl.round(cfg)
    assert out["m1b"].assigned.is_empty() and out["m1b"].delay_ms > 0
    cl.clock.ms += 6000
    out = cl.round(cfg)
    got = set(out["m1b"].assigned.connectors) | set(out["m1b"].assigned.tasks)
    assert got == m1_items
    assert out["m0"].assigned.is_empty() and out["m0"].revoked.is_empty()


def test_deleted_connector_is_revoked_and_duplicates_are_dropped() -> None:
    cl = Cluster()
    cl.running = {"m0": ConnectorsAndTasks(), "m1": ConnectorsAndTasks()}
    cl.round(config(c0=1, c1=1))
    owner_c1 = cl.owners()["c1"]
    out = cl.round(config(c0=1))
    assert "c1" in out[owner_c1].revoked.connectors
    assert ("c1", 0) in {t for a in out.values() for t in a.revoked.tasks}
    task: TaskId = ("c0", 0)
    holder = cl.owners()[task]
    other = "m1" if holder == "m0" else "m0"
    cl.running[other].tasks.append(task)  # both run it (a stale member)
    out = cl.round(config(c0=1))
    assert task in out["m0"].revoked.tasks and task in out["m1"].revoked.tasks
    cl.round(config(c0=1))
    assert cl.owners()[task] in {"m0", "m1"}


def test_leader_behind_answers_config_mismatch() -> None:
    members = {"a": WorkerState("http://a/", 4), "b": WorkerState("http://b/", 9)}
    out = config_mismatch(members, "a", 1, 9)
    assert {m: (a.error, a.config_offset, a.leader_url) for m, a in out.items()} == {
        "a": (CONFIG_MISMATCH, 9, "http://a/"), "b": (CONFIG_MISMATCH, 9, "http://a/")}
