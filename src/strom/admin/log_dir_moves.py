"""The ``log_dirs`` of a reassignment, as kafka-reassign-partitions.sh handles them.

A reassignment entry may name, for each replica, the log directory it should live in on its
broker (an absolute path, one of that broker's ``log.dirs``) or ``"any"``::

    {"topic": "orders", "partition": 0, "replicas": [1, 2], "log_dirs": ["/disk2/strom", "any"]}

``execute`` first checks every named directory against the broker's own list (DescribeLogDirs):
a directory the broker does not have is refused before anything is sent, so nothing changes.
After the AlterPartitionReassignments, it sends AlterReplicaLogDirs to each broker for its
replicas with a named directory; a broker that does not host the replica yet (it is being
added by the reassignment) answers REPLICA_NOT_AVAILABLE, or KAFKA_STORAGE_ERROR while it
cannot start the copy, and the request is sent again every 100 ms until every move has
started or the timeout has passed (Kafka's ``executeMoves``). ``verify`` reads DescribeLogDirs
from each broker: a replica with a future copy in the named directory is still moving, one
whose current directory is the named one is done (Kafka's ``findLogDirMoveStates``);
``cancel`` sends the replicas being moved back to their current directory, which stops the
copy (Kafka's ``cancelAssignment``).
These two APIs are not in confluent-kafka's AdminClient: they go over :mod:`strom.admin.wire`.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from strom.admin import wire
from strom.admin.errors import InvalidInputError, NotFoundError, RefusedError, TimedOutError
from strom.admin.log_dirs import describe
from strom.protocol.errors import ErrorCode

ANY = "any"
ALTER_LOG_DIRS, ALTER_VERSION = 34, 2
RETRY_BACKOFF_S = 0.1
#: answers that mean "not yet" (the replica is still to be created there), retried
RETRIABLE = {ErrorCode.replica_not_available, ErrorCode.kafka_storage_error,
             ErrorCode.not_leader_or_follower}  # fmt: skip

Replica = tuple[str, int, int]  # topic, partition, broker id


def replica_name(r: Replica) -> str:
    """Kafka's ``TopicPartitionReplica``: ``topic-partition-broker``."""
    return f"{r[0]}-{r[1]}-{r[2]}"


def parse_log_dirs(entry: Any, replicas: list[int]) -> dict[Replica, str]:
    """The named (not ``"any"``) log dirs of one reassignment entry, validated."""
    topic, partition = str(entry["topic"]), int(entry["partition"])
    dirs = entry.get("log_dirs", [ANY] * len(replicas))
    if not isinstance(dirs, list) or len(dirs) != len(replicas):
        raise InvalidInputError(f"{topic}-{partition}: log_dirs and replicas differ in length")
    out: dict[Replica, str] = {}
    for broker, d in zip(replicas, dirs, strict=True):
        if not isinstance(d, str) or not d:
            raise InvalidInputError(f"{topic}-{partition}: each log_dirs entry is \"any\" or a path")
        if d == ANY:
            continue
        if not os.path.isabs(d):
            raise InvalidInputError(f"{topic}-{partition}: log dir {d!r} for broker {broker} is "
                                    "not an absolute path (or \"any\")")  # fmt: skip
        out[(topic, partition, broker)] = d
    return out


def same_dir(wanted: str, reported: str) -> bool:
    """Whether the path a user wrote names the directory a broker reports (its resolved
    absolute path): equal once normalised, or once resolved here (same host, a symlink)."""
    norm = os.path.normpath(reported)
    return os.path.normpath(wanted) == norm or os.path.realpath(wanted) == norm


def _per_broker(wanted: dict[Replica, str]) -> dict[int, dict[Replica, str]]:
    out: dict[int, dict[Replica, str]] = {}
    for r, d in wanted.items():
        out.setdefault(r[2], {})[r] = d
    return out


def _address(addresses: dict[int, str], broker: int) -> str:
    address = addresses.get(broker)
    if address is None:
        raise NotFoundError(f"broker {broker} is not live: cannot place replicas in its log dirs "
                       f"(live: {','.join(map(str, sorted(addresses)))})")  # fmt: skip
    return address


def check_dirs(wanted: dict[Replica, str], addresses: dict[int, str], timeout: float) -> None:
    """Refuse (before anything changes) a named dir that is not one of its broker's."""
    for broker, moves in sorted(_per_broker(wanted).items()):
        known = describe(_address(addresses, broker), [], timeout).dirs
        for r, d in sorted(moves.items()):
            if not any(same_dir(d, k) for k in known):
                raise NotFoundError(f"log dir {d} for replica {replica_name(r)} is not one of broker "
                               f"{broker}'s log dirs ({', '.join(known) or 'none online'})")


def _alter(address: str, moves: dict[Replica, str], timeout: float) -> dict[Replica, ErrorCode]:
    by_dir: dict[str, dict[str, list[int]]] = {}
    for (t, p, _b), d in moves.items():
        by_dir.setdefault(d, {}).setdefault(t, []).append(p)
    dirs = tuple(
        wire.part(ALTER_LOG_DIRS, ALTER_VERSION, "AlterReplicaLogDir", path=d, topics=tuple(
            wire.part(ALTER_LOG_DIRS, ALTER_VERSION, "AlterReplicaLogDirTopic", name=t,
                      partitions=tuple(ps)) for t, ps in sorted(topics.items())))
        for d, topics in sorted(by_dir.items()))  # fmt: skip
    resp = wire.request(address, ALTER_LOG_DIRS, ALTER_VERSION, wait_s=timeout, dirs=dirs)
    broker = next(iter(moves))[2]
    return {(str(t.topic_name), int(p.partition_index), broker): ErrorCode(int(p.error_code))
            for t in resp.results for p in t.partitions}  # fmt: skip


def execute_moves(wanted: dict[Replica, str], addresses: dict[int, str], timeout: float
                  ) -> list[str]:  # fmt: skip
    """Start every move (retrying while a replica is not there yet, up to ``timeout``
    seconds); the lines to print."""
    pending = dict(wanted)
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while True:
        last: dict[Replica, ErrorCode] = {}
        for broker, moves in sorted(_per_broker(pending).items()):
            for r, code in sorted(_alter(_address(addresses, broker), moves, timeout).items()):
                if r not in pending:
                    continue
                if code == ErrorCode.none:
                    lines.append(f"Successfully started moving log directory to {pending[r]} "
                                 f"for replica {r[0]}-{r[1]} with broker {r[2]}")  # fmt: skip
                    del pending[r]
                elif code in RETRIABLE:
                    last[r] = code
                else:
                    raise RefusedError(f"Failed to alter dir for {replica_name(r)}: "
                                       f"{code.name.upper()}")  # fmt: skip
        if not pending:
            return lines
        if time.monotonic() >= deadline:
            unknown = ErrorCode.unknown_server_error
            left = ",".join(f"{replica_name(r)} ({last.get(r, unknown).name.upper()})"
                            for r in sorted(pending))  # fmt: skip
            plural = "s" if len(pending) > 1 else ""
            raise TimedOutError(f"Timed out before log directory move{plural} could be started "
                                f"for: {left}")  # fmt: skip
        time.sleep(RETRY_BACKOFF_S)


@dataclass(frozen=True)
class MoveState:
    """One named replica's log dir move: ``status`` is completed, in_progress, other_dir,
    not_moving or missing; ``line`` is Kafka's sentence for it."""

    topic: str
    partition: int
    broker: int
    status: str
    log_dir: str
    current_log_dir: str | None
    future_log_dir: str | None
    line: str


def move_states(wanted: dict[Replica, str], addresses: dict[int, str], timeout: float
                ) -> list[MoveState]:  # fmt: skip
    """Each named replica's state, as Kafka's ``findLogDirMoveStates`` (sorted by broker,
    topic, partition)."""
    rows: list[MoveState] = []
    for broker, moves in sorted(_per_broker(wanted).items()):
        address = addresses.get(broker)
        seen = describe(address, [(t, p) for t, p, _b in moves], timeout) if address else None
        for r, target in sorted(moves.items(), key=lambda kv: (kv[0][0], kv[0][1])):
            key = (r[0], r[1])
            current = seen.current.get(key) if seen else None
            future = seen.future.get(key) if seen else None
            name = f"{r[0]}-{r[1]}"
            if current is None:
                status = "missing"
                line = (f"Partition {name} cannot be found in any live log directory on broker "
                        f"{broker}.")  # fmt: skip
            elif future is not None and same_dir(target, future):
                status, line = "in_progress", f"Reassignment of replica {replica_name(r)} is still in progress."
            elif future is not None:
                status = "other_dir"
                line = (f"Partition {name} on broker {broker} is being moved to log dir {future}"
                        f" instead of {target}.")  # fmt: skip
            elif same_dir(target, current):
                status, line = "completed", f"Reassignment of replica {replica_name(r)} completed successfully."
            else:
                status = "not_moving"
                line = (f"Partition {name} on broker {broker} is not being moved from log dir "
                        f"{current} to {target}.")  # fmt: skip
            rows.append(MoveState(r[0], r[1], broker, status, target, current, future, line))
    return rows


def active_moves(wanted: dict[Replica, str], addresses: dict[int, str], timeout: float
                 ) -> dict[Replica, str]:  # fmt: skip
    """The named replicas with a move in progress, each mapped to its current directory
    (where :func:`execute_moves` sends it back: the broker then drops the copy)."""
    return {(row.topic, row.partition, row.broker): row.current_log_dir
            for row in move_states(wanted, addresses, timeout)
            if row.future_log_dir is not None and row.current_log_dir is not None}
