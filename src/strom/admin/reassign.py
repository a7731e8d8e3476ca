"""Partition reassignment, as kafka-reassign-partitions.sh does it.

The JSON formats are Kafka's. Topics to move (``generate``)::

    {"version": 1, "topics": [{"topic": "orders"}]}

A reassignment (what :func:`propose` proposes, :func:`start` carries out, :func:`verify`
checks)::

    {"version": 1, "partitions": [{"topic": "orders", "partition": 0, "replicas": [2, 3],
                                   "log_dirs": ["any", "any"]}]}

:func:`propose` computes a proposal client-side with Kafka's round-robin assignment
(``AdminUtils.assignReplicasToBrokers`` without racks: a random first broker, followers
shifted so replicas spread); :func:`start` sends AlterPartitionReassignments and returns the
current assignment (to roll back); :func:`verify` reads ListPartitionReassignments and the
current replicas; :func:`cancel` sends null replicas. The two reassignment APIs are not in
confluent-kafka: they go with :mod:`strom.admin.wire` to the controller (found through
Metadata). ``log_dirs`` other than ``"any"`` (a replica's log directory on its broker) are
checked, started, verified and cancelled by :mod:`strom.admin.log_dir_moves`, as Kafka's tool
does.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strom.admin import log_dir_moves, routing, wire
from strom.admin.errors import InvalidInputError, NotFoundError, RefusedError, UnreachableError
from strom.admin.offsets import Key
from strom.admin.session import Session

ALTER_REASSIGNMENTS, LIST_REASSIGNMENTS = 45, 46
Assignment = dict[Key, list[int]]
Replica = log_dir_moves.Replica


# -- pure parts: JSON formats and the assignment ---------------------------------------------


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise InvalidInputError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise InvalidInputError(f"{path}: not valid JSON ({exc})") from None


def parse_topics_to_move(doc: Any) -> list[str]:
    """The topic names of a topics-to-move document."""
    try:
        topics = [str(t["topic"]) for t in doc["topics"]]
    except (KeyError, TypeError):
        raise InvalidInputError('topics-to-move JSON must be {"version":1,"topics":[{"topic":"t"}]}'
                                ) from None  # fmt: skip
    if not topics:
        raise InvalidInputError("topics-to-move JSON names no topic")
    return topics


def parse_reassignment(doc: Any) -> Assignment:
    """(topic, partition) -> target replicas of a reassignment document, validated."""
    return parse_plan(doc)[0]


def parse_plan(doc: Any) -> tuple[Assignment, dict[Replica, str]]:
    """A reassignment document, validated: (topic, partition) -> target replicas, and
    (topic, partition, broker) -> log dir for each replica whose ``log_dirs`` entry is not
    ``"any"``."""
    dirs: dict[Replica, str] = {}
    try:
        entries = doc["partitions"]
        result: Assignment = {}
        for e in entries:
            key = (str(e["topic"]), int(e["partition"]))
            replicas = [int(r) for r in e["replicas"]]
            dirs.update(log_dir_moves.parse_log_dirs(e, replicas))
            if not replicas or len(set(replicas)) != len(replicas):
                raise InvalidInputError(f"{key[0]}-{key[1]}: replicas must be distinct broker ids")
            if key in result:
                raise InvalidInputError(f"{key[0]}-{key[1]} appears twice")
            result[key] = replicas
    except (KeyError, TypeError, ValueError):
        raise InvalidInputError('reassignment JSON must be {"version":1,"partitions":[{"topic":"t",'
                                '"partition":0,"replicas":[1,2]}]}') from None  # fmt: skip
    if not result:
        raise InvalidInputError("reassignment JSON names no partition")
    return result, dirs


def reassignment_json(assignment: Assignment) -> str:
    """Kafka's one-line reassignment document."""
    partitions = [
        {"topic": t, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)}
        for (t, p), r in sorted(assignment.items())
    ]
    return json.dumps({"version": 1, "partitions": partitions}, separators=(",", ":"))


def assign_replicas(
    partitions: int, replication_factor: int, brokers: list[int], rng: random.Random | None = None
) -> list[list[int]]:
    """Kafka's rack-unaware ``assignReplicasToBrokers``: partition p's first replica is broker
    (start + p) mod n; the followers follow at a shift that grows every n partitions."""
    n = len(brokers)
    if replication_factor > n:
        raise InvalidInputError(f"replication factor {replication_factor} is larger than the "
                                f"{n} broker(s) given")  # fmt: skip
    rng = rng or random.Random()
    start = rng.randrange(n)
    shift = rng.randrange(n)
    result = []
    for p in range(partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (start + p) % n
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            replicas.append(brokers[(first + 1 + (shift + j) % (n - 1)) % n])
        result.append(replicas)
    return result


# -- the cluster -----------------------------------------------------------------------------


def current_assignment(session: Session) -> Assignment:
    """Every partition's replicas now (Metadata)."""
    md = session.metadata()
    return {(t, p): list(part.replicas) for t, topic in md.topics.items()
            for p, part in topic.partitions.items()}  # fmt: skip


def broker_addresses(session: Session) -> dict[int, str]:
    """Every live broker's ``host:port`` by id."""
    return routing.addresses(session.metadata())


def controller_address(session: Session) -> str:
    md = session.metadata()
    broker = md.brokers.get(md.controller_id)
    if broker is None:
        raise UnreachableError("the cluster has no controller now; try again")
    return routing.address(broker)


def propose(session: Session, topics: list[str], brokers: list[int]
            ) -> tuple[Assignment, Assignment]:  # fmt: skip
    """(the topics' current assignment, a proposal spreading them over ``brokers``)."""
    live = set(session.metadata().brokers)
    unknown = sorted(set(brokers) - live)
    if unknown:
        raise NotFoundError(f"unknown broker id(s) {','.join(map(str, unknown))} "
                            f"(live: {','.join(map(str, sorted(live)))})")  # fmt: skip
    moving = {k: v for k, v in current_assignment(session).items() if k[0] in topics}
    missing = sorted(set(topics) - {t for t, _p in moving})
    if missing:
        raise NotFoundError(f"topic(s) {', '.join(missing)} do not exist")
    proposed: Assignment = {}
    for topic in topics:
        count = len([k for k in moving if k[0] == topic])
        rf = len(moving[(topic, 0)])
        for p, replicas in enumerate(assign_replicas(count, rf, brokers)):
            proposed[(topic, p)] = replicas
    return moving, proposed


def _message(text: str | None) -> str:
    return f" ({text})" if text else ""


def _send_alter(session: Session, target: dict[Key, list[int] | None]) -> None:
    by_topic: dict[str, list[Any]] = {}
    for (t, p), replicas in sorted(target.items()):
        by_topic.setdefault(t, []).append(
            wire.part(ALTER_REASSIGNMENTS, 0, "ReassignablePartition", partition_index=p,
                      replicas=None if replicas is None else tuple(replicas))  # fmt: skip
        )
    topics = tuple(wire.part(ALTER_REASSIGNMENTS, 0, "ReassignableTopic", name=t,
                             partitions=tuple(ps)) for t, ps in by_topic.items())  # fmt: skip
    resp = wire.request(controller_address(session), ALTER_REASSIGNMENTS, 0,
                        wait_s=session.timeout, timeout=int(session.timeout * 1000),
                        topics=topics)  # fmt: skip
    wire.check(resp.error_code, f"reassignment refused{_message(resp.error_message)}")
    errors = [f"{t.name}-{p.partition_index}: {wire.error_name(p.error_code)}"
              f"{_message(p.error_message)}"
              for t in resp.responses for p in t.partitions if int(p.error_code) != 0]  # fmt: skip
    if errors:
        raise RefusedError("reassignment refused for " + "; ".join(errors))


def ongoing(session: Session, keys: list[Key]) -> set[Key]:
    """Which of ``keys`` are being reassigned now (ListPartitionReassignments)."""
    by_topic: dict[str, list[int]] = {}
    for t, p in keys:
        by_topic.setdefault(t, []).append(p)
    topics = tuple(wire.part(LIST_REASSIGNMENTS, 0, "ListPartitionReassignmentsTopics", name=t,
                             partition_indexes=tuple(ps)) for t, ps in by_topic.items())  # fmt: skip
    resp = wire.request(controller_address(session), LIST_REASSIGNMENTS, 0,
                        wait_s=session.timeout, timeout=int(session.timeout * 1000),
                        topics=topics)  # fmt: skip
    wire.check(resp.error_code, f"cannot list reassignments{_message(resp.error_message)}")
    return {(t.name, int(p.partition_index)) for t in resp.topics for p in t.partitions}


def start(session: Session, target: Assignment, dirs: dict[Replica, str]) -> Assignment:
    """Start reassigning ``target`` (its named log dirs checked first: a bad one changes
    nothing); the assignment it replaces (to roll back). The log dir moves are
    :func:`start_log_dir_moves`'s."""
    current = current_assignment(session)
    missing = sorted(f"{t}-{p}" for t, p in target if (t, p) not in current)
    if missing:
        raise NotFoundError(f"partition(s) {', '.join(missing)} do not exist")
    addresses = broker_addresses(session) if dirs else {}
    log_dir_moves.check_dirs(dirs, addresses, session.timeout)
    rollback = {k: current[k] for k in target}
    _send_alter(session, dict(target))
    return rollback


def start_log_dir_moves(session: Session, dirs: dict[Replica, str]) -> list[str]:
    """Start the named log dir moves (asked again until each replica exists, up to the
    timeout); Kafka's line for each."""
    if not dirs:
        return []
    return log_dir_moves.execute_moves(dirs, broker_addresses(session), session.timeout)


@dataclass(frozen=True)
class ReassignmentState:
    """One partition of a reassignment: ``status`` completed, in_progress or not_active;
    ``replicas`` now (None: no such partition) and the ``target``; ``line`` Kafka's
    sentence."""

    topic: str
    partition: int
    status: str
    replicas: list[int] | None
    target: list[int]
    line: str


def verify(session: Session, target: Assignment, dirs: dict[Replica, str]
           ) -> tuple[list[ReassignmentState], list[log_dir_moves.MoveState]]:  # fmt: skip
    """Each partition's state, and each named log dir move's."""
    current = current_assignment(session)
    active = ongoing(session, sorted(target))
    rows = []
    for (t, p), replicas in sorted(target.items()):
        now = current.get((t, p))
        if (t, p) in active:
            status, line = "in_progress", f"Reassignment of partition {t}-{p} is still in progress."
        elif now == replicas:
            status, line = "completed", f"Reassignment of partition {t}-{p} is completed."
        else:
            shown = "none" if now is None else ",".join(map(str, now))
            status = "not_active"
            line = (f"There is no active reassignment of partition {t}-{p}, but replica set is "
                    f"{shown} rather than {','.join(map(str, replicas))}.")  # fmt: skip
        rows.append(ReassignmentState(t, p, status, now, replicas, line))
    moves = (log_dir_moves.move_states(dirs, broker_addresses(session), session.timeout)
             if dirs else [])  # fmt: skip
    return rows, moves


@dataclass(frozen=True)
class Cancellation:
    """What :func:`cancel` stopped: partitions being reassigned, replicas being moved between
    log dirs (sent back to their current dir), with Kafka's line for each move."""

    partitions: list[Key]
    log_dir_moves: list[Replica]
    lines: list[str]


def cancel(session: Session, target: Assignment, dirs: dict[Replica, str]) -> Cancellation:
    """Kafka's ``cancelAssignment``: cancel the partitions of ``target`` being reassigned,
    then send the replicas whose log dir move is active back to their current directory."""
    active = sorted(ongoing(session, sorted(target)))
    if active:
        _send_alter(session, dict.fromkeys(active))
    addresses = broker_addresses(session) if dirs else {}
    back = log_dir_moves.active_moves(dirs, addresses, session.timeout) if dirs else {}
    lines = log_dir_moves.execute_moves(back, addresses, session.timeout) if back else []
    return Cancellation(active, sorted(back), lines)
