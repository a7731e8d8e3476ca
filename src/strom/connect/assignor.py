"""The group leader's assignment of connectors and tasks to workers (Kafka's two assignors).

:class:`EagerAssignor` (protocol ``default``, v0): every rebalance revokes everything; the
leader deals sorted connectors, then each connector's sorted tasks, round robin over the sorted
member ids, and each member gets its full set.

:class:`IncrementalCooperativeAssignor` (KIP-415, ``compatible``/``sessioned``): members report
what they run; the leader answers each with only the increment to start and what to revoke.
It follows Kafka's rules: revoke deleted and duplicated work at once; work that disappeared
(*lost*) because a member left is held back for ``scheduled.rebalance.max.delay.ms`` (the
members get the remaining ``delay`` and rejoin then) and afterwards goes to the members that
came back empty, or to the least loaded; load-balancing revocations only when the previous
round revoked nothing (successive ones back off exponentially up to the maximum delay); new
and reassigned work goes to the least loaded members. The leader keeps its view of the previous
assignment between rounds; a new leader starts without one (lost work then counts as new).
Sans-IO: the clock is passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from strom.connect.group_protocol import (
    CONFIG_MISMATCH,
    NO_ERROR,
    Assignment,
    ConnectorsAndTasks,
    TaskId,
    WorkerState,
)


@dataclass
class ConfigSnapshot:
    """What the assignor needs of the config topic: its offset and each connector's tasks."""

    offset: int
    task_counts: dict[str, int]  # configured connector -> committed task count

    def tasks(self) -> list[TaskId]:
        return sorted((c, i) for c, n in self.task_counts.items() for i in range(n))


@dataclass
class _Load:
    worker: str
    connectors: list[str] = field(default_factory=list)
    tasks: list[TaskId] = field(default_factory=list)

    def is_empty(self) -> bool:
        return not self.connectors and not self.tasks


def config_mismatch(members: dict[str, WorkerState], leader: str, version: int,
                    max_offset: int) -> dict[str, Assignment]:
    """The answer of a leader whose config is behind a member's: everyone reads and rejoins."""
    url = members[leader].url
    return {m: Assignment(version, CONFIG_MISMATCH, leader, url, max_offset) for m in members}


class EagerAssignor:
    def assign(self, leader: str, members: dict[str, WorkerState], config: ConfigSnapshot,
               version: int = 0) -> dict[str, Assignment]:
        order = sorted(members)
        out = {m: Assignment(version, NO_ERROR, leader, members[leader].url, config.offset)
               for m in order}
        i = 0
        for connector in sorted(config.task_counts):
            out[order[i % len(order)]].assigned.connectors.append(connector)
            i += 1
        for task in config.tasks():
            out[order[i % len(order)]].assigned.tasks.append(task)
            i += 1
        return out


def _backoff(attempts: int, max_delay: int) -> int:
    """Kafka's ExponentialBackoff(1, 40, max, jitter 0)."""
    if max_delay == 0:
        return 0
    return int(min(40 ** min(attempts, 20), max_delay))


class IncrementalCooperativeAssignor:
    def __init__(self, max_delay_ms: int, clock: Callable[[], float]) -> None:
        self.max_delay = max_delay_ms
        self.clock = clock  # milliseconds
        self.previous: tuple[set[str], set[TaskId]] = (set(), set())
        self.previous_revocation: tuple[set[str], set[TaskId]] = (set(), set())
        self.revoked_in_previous = False
        self.candidates: list[str] = []
        self.scheduled_rebalance = 0.0
        self.delay = 0
        self.previous_generation = -1
        self.previous_members: set[str] = set()
        self.successive_revoking = 0

    def assign(self, leader: str, members: dict[str, WorkerState], config: ConfigSnapshot,
               version: int, last_completed_generation: int, generation: int
               ) -> dict[str, Assignment]:
        current = {m: (s.assignment.assigned if s.assignment else ConnectorsAndTasks())
                   for m, s in members.items()}
        assigned, revoked = self.perform(config, last_completed_generation, generation, current)
        url = members[leader].url
        return {m: Assignment(version, NO_ERROR, leader, url, config.offset,
                              assigned.get(m, ConnectorsAndTasks()),
                              revoked.get(m, ConnectorsAndTasks()), self.delay)
                for m in members}

    def perform(self, config: ConfigSnapshot, last_completed_generation: int, generation: int,
                members: dict[str, ConnectorsAndTasks]
                ) -> tuple[dict[str, ConnectorsAndTasks], dict[str, ConnectorsAndTasks]]:
        """(newly assigned, revoked) per member; ``self.delay`` is the delay to announce."""
        if self.previous_generation != last_completed_generation:
            self.previous = (set(), set())  # the leader missed a round: its view is stale
        conf_c, conf_t = set(config.task_counts), set(config.tasks())
        act_c = {c for ct in members.values() for c in ct.connectors}
        act_t = {t for ct in members.values() for t in ct.tasks}
        rev_c, rev_t = self.previous_revocation
        if rev_c or rev_t:
            if rev_c & act_c or rev_t & act_t:  # the revocation did not take effect
                self.previous = (set(act_c), set(act_t))
            rev_c.clear()
            rev_t.clear()
        prev_c, prev_t = self.previous
        deleted = (prev_c - conf_c, prev_t - conf_t)
        duplicated = (_duplicates(ct.connectors for ct in members.values()),
                      _duplicates(ct.tasks for ct in members.values()))
        lost = (prev_c - act_c - deleted[0], prev_t - act_t - deleted[1])
        created = (sorted(conf_c - prev_c - act_c), sorted(conf_t - prev_t - act_t))

        order = sorted(members)
        current = {m: _Load(m, [c for c in members[m].connectors if c not in deleted[0]],
                            [t for t in members[m].tasks if t not in deleted[1]])
                   for m in order}
        to_revoke: dict[str, _Load] = {}
        nxt = [_Load(m, list(members[m].connectors), list(members[m].tasks)) for m in order]
        for drop in (deleted, duplicated):
            for load in nxt:
                cs = [c for c in load.connectors if c in drop[0]]
                ts = [t for t in load.tasks if t in drop[1]]
                if cs or ts:
                    _add(to_revoke, load.worker, cs, ts)
            for load in nxt:
                load.connectors = [c for c in load.connectors if c not in drop[0]]
                load.tasks = [t for t in load.tasks if t not in drop[1]]
        reassign = self._handle_lost(lost, nxt)

        if self.delay == 0:
            balancing = self._balancing_revocations(len(conf_c), len(conf_t), nxt)
            if self.revoked_in_previous and balancing:
                self.successive_revoking += 1
                self.delay = _backoff(self.successive_revoking, self.max_delay)
                if self.delay:
                    self.scheduled_rebalance = self.clock() + self.delay
                else:
                    self._apply_revocations(balancing, to_revoke, nxt)
            elif balancing:
                self._apply_revocations(balancing, to_revoke, nxt)
                self.revoked_in_previous = True
            elif self.revoked_in_previous:
                self.revoked_in_previous = False
                self.successive_revoking = 0
        else:
            self.revoked_in_previous = False

        _assign(nxt, created[0] + sorted(reassign[0]), "connectors")
        _assign(nxt, created[1] + sorted(reassign[1]), "tasks")

        assigned = {}
        for load in nxt:
            cur = current[load.worker]
            assigned[load.worker] = ConnectorsAndTasks(
                [c for c in load.connectors if c not in cur.connectors],
                [t for t in load.tasks if t not in cur.tasks])
        revoked = {w: ConnectorsAndTasks(ld.connectors, ld.tasks) for w, ld in to_revoke.items()}
        new_c = {c for ld in nxt for c in ld.connectors}
        new_t = {t for ld in nxt for t in ld.tasks}
        for ld in to_revoke.values():
            new_c -= set(ld.connectors)
            new_t -= set(ld.tasks)
            self.previous_revocation[0].update(ld.connectors)
            self.previous_revocation[1].update(ld.tasks)
        self.previous = (new_c | lost[0], new_t | lost[1])
        self.previous_generation = generation
        self.previous_members = set(members)
        return assigned, revoked

    @staticmethod
    def _apply_revocations(balancing: dict[str, _Load], to_revoke: dict[str, _Load],
                           nxt: list[_Load]) -> None:
        for worker, load in balancing.items():
            _add(to_revoke, worker, load.connectors, load.tasks)
        for load in nxt:
            if load.worker in balancing:
                drop = balancing[load.worker]
                load.connectors = [c for c in load.connectors if c not in drop.connectors]
                load.tasks = [t for t in load.tasks if t not in drop.tasks]

    def _handle_lost(self, lost: tuple[set[str], set[TaskId]], nxt: list[_Load]
                     ) -> tuple[set[str], set[TaskId]]:
        """Lost work to hand out now as if new; may instead place it on candidate workers."""
        none: tuple[set[str], set[TaskId]] = (set(), set())
        if not lost[0] and not lost[1] and not self.revoked_in_previous:
            self._reset_delay()
            return none
        now = self.clock()
        active = {ld.worker for ld in nxt}
        if self.scheduled_rebalance <= 0 and self.previous_members <= active:
            return lost  # nobody left: the members just missed their assignment
        if self.max_delay == 0:
            return lost
        if 0 < self.scheduled_rebalance <= now:
            by_worker = {ld.worker: ld for ld in nxt}
            picked = [by_worker[w] for w in self.candidates if w in by_worker]
            result = none
            if picked:
                for i, c in enumerate(sorted(lost[0])):
                    picked[i % len(picked)].connectors.append(c)
                for i, t in enumerate(sorted(lost[1])):
                    picked[i % len(picked)].tasks.append(t)
            else:
                result = lost
            self._reset_delay()
            self.revoked_in_previous = False
            return result
        for ld in nxt:
            if ld.is_empty() and ld.worker not in self.candidates:
                self.candidates.append(ld.worker)
        if now < self.scheduled_rebalance:
            self.delay = int(min(self.scheduled_rebalance - now, self.max_delay))
        else:
            self.delay = self.max_delay
        self.scheduled_rebalance = now + self.delay
        return none

    def _reset_delay(self) -> None:
        self.candidates.clear()
        self.scheduled_rebalance = 0
        self.delay = 0

    @staticmethod
    def _balancing_revocations(total_c: int, total_t: int, workers: list[_Load]
                               ) -> dict[str, _Load]:
        if all(w.is_empty() for w in workers) or total_c + total_t == 0:
            return {}
        out: dict[str, _Load] = {}
        for attr, total in (("connectors", total_c), ("tasks", total_t)):
            for worker, items in _revocations(total, workers, attr).items():
                getattr(out.setdefault(worker, _Load(worker)), attr).extend(items)
        return out


def _revocations(total: int, workers: list[_Load], attr: str) -> dict[str, list]:  # type: ignore[type-arg]
    n = len(workers)
    minimum, extra = divmod(total, n)
    sizes = [len(getattr(w, attr)) for w in workers]
    if sizes.count(minimum + 1) == extra and sizes.count(minimum) + extra == n:
        return {}
    out: dict[str, list] = {}  # type: ignore[type-arg]
    extras = 0
    for w, size in zip(workers, sizes, strict=True):
        if size <= minimum:
            continue
        if extras < extra:
            extras += 1
            if size == minimum + 1:
                continue
            keep = minimum + 1
        else:
            keep = minimum
        out[w.worker] = list(getattr(w, attr)[:size - keep])
    return out


def _assign(loads: list[_Load], items: list, attr: str) -> None:  # type: ignore[type-arg]
    """Kafka's water-filling round robin: the least loaded first, ties by worker id."""
    if not items or not loads:
        return
    loads.sort(key=lambda w: (len(getattr(w, attr)), w.worker))
    first = loads[0]
    i = 0
    while i < len(items):
        first_load = len(getattr(first, attr))
        up_to = next((k for k, w in enumerate(loads) if len(getattr(w, attr)) > first_load),
                     len(loads))
        for w in loads[:up_to]:
            getattr(w, attr).append(items[i])
            i += 1
            if i == len(items):
                break


def _duplicates(groups: Iterable[Iterable]) -> set:  # type: ignore[type-arg]
    seen: set = set()  # type: ignore[type-arg]
    dup: set = set()  # type: ignore[type-arg]
    for group in groups:
        for item in group:
            (dup if item in seen else seen).add(item)
    return dup


def _add(target: dict[str, _Load], worker: str, connectors: list[str],
         tasks: list[TaskId]) -> None:
    load = target.setdefault(worker, _Load(worker))
    load.connectors += [c for c in connectors if c not in load.connectors]
    load.tasks += [t for t in tasks if t not in load.tasks]
