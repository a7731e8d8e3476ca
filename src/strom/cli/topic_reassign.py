"""``strom topic reassign generate|execute|verify|cancel``, as kafka-reassign-partitions.sh.

The JSON formats are Kafka's. Topics to move (``generate``)::

    {"version": 1, "topics": [{"topic": "orders"}]}

A reassignment (what ``generate`` proposes, ``execute`` carries out, ``verify`` checks)::

    {"version": 1, "partitions": [{"topic": "orders", "partition": 0, "replicas": [2, 3],
                                   "log_dirs": ["any", "any"]}]}

``generate`` computes a proposal client-side with Kafka's round-robin assignment
(``AdminUtils.assignReplicasToBrokers`` without racks: a random first broker, followers
shifted so replicas spread) over ``--broker-list``; ``execute`` prints the current assignment
(keep it to roll back) and sends AlterPartitionReassignments; ``verify`` reads
ListPartitionReassignments and the current replicas; ``cancel`` sends null replicas. The two
reassignment APIs are not in confluent-kafka: they go with :mod:`strom.cli.wire` to the
controller (found through Metadata). ``log_dirs`` other than ``"any"`` (a replica's log
directory on its broker) are checked, started, verified and cancelled by
:mod:`strom.cli.reassign_log_dirs`, as Kafka's tool does.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

from strom.cli import reassign_log_dirs as log_dirs
from strom.cli import routing, wire
from strom.cli.clients import add_client_options, admin_client, metadata
from strom.cli.errors import CliError, timeout
from strom.cli.output import print_json

ALTER_REASSIGNMENTS, LIST_REASSIGNMENTS = 45, 46


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register ``topic reassign``."""
    reassign = sub.add_parser("reassign", help="move partition replicas between brokers",
                              parents=parents)  # fmt: skip
    rsub = reassign.add_subparsers(dest="reassign_command", metavar="COMMAND", required=True)
    p = rsub.add_parser("generate", help="propose a reassignment of whole topics",
                        parents=parents)  # fmt: skip
    p.add_argument("--topics-to-move-json-file", required=True, type=Path, metavar="FILE",
                   help='{"version":1,"topics":[{"topic":"t"}]}: the topics to move')
    p.add_argument("--broker-list", required=True, metavar="IDS",
                   help="comma-separated broker ids to place the replicas on")  # fmt: skip
    add_client_options(p, listing=True)
    p.set_defaults(func=generate)
    for name, func, text in (
        ("execute", execute, "start the reassignment in the JSON file"),
        ("verify", verify, "report whether the reassignment has completed"),
        ("cancel", cancel, "cancel the pending reassignment of the file's partitions"),
    ):
        p = rsub.add_parser(name, help=text, parents=parents)
        p.add_argument("--reassignment-json-file", required=True, type=Path, metavar="FILE",
                       help="a reassignment, as 'reassign generate' proposes it")
        add_client_options(p, listing=True)
        p.set_defaults(func=func)


# -- pure parts: JSON formats and the assignment ---------------------------------------------


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise CliError(f"{path}: not valid JSON ({exc})") from None


def parse_topics_to_move(doc: Any) -> list[str]:
    """The topic names of a topics-to-move document."""
    try:
        topics = [str(t["topic"]) for t in doc["topics"]]
    except (KeyError, TypeError):
        raise CliError('topics-to-move JSON must be {"version":1,"topics":[{"topic":"t"}]}'
                       ) from None  # fmt: skip
    if not topics:
        raise CliError("topics-to-move JSON names no topic")
    return topics


def parse_reassignment(doc: Any) -> dict[tuple[str, int], list[int]]:
    """(topic, partition) -> target replicas of a reassignment document, validated."""
    return parse_plan(doc)[0]


def parse_plan(doc: Any) -> tuple[dict[tuple[str, int], list[int]], dict[log_dirs.Replica, str]]:
    """A reassignment document, validated: (topic, partition) -> target replicas, and
    (topic, partition, broker) -> log dir for each replica whose ``log_dirs`` entry is not
    ``"any"``."""
    dirs: dict[log_dirs.Replica, str] = {}
    try:
        entries = doc["partitions"]
        result: dict[tuple[str, int], list[int]] = {}
        for e in entries:
            key = (str(e["topic"]), int(e["partition"]))
            replicas = [int(r) for r in e["replicas"]]
            dirs.update(log_dirs.parse_log_dirs(e, replicas))
            if not replicas or len(set(replicas)) != len(replicas):
                raise CliError(f"{key[0]}-{key[1]}: replicas must be distinct broker ids")
            if key in result:
                raise CliError(f"{key[0]}-{key[1]} appears twice")
            result[key] = replicas
    except (KeyError, TypeError, ValueError):
        raise CliError('reassignment JSON must be {"version":1,"partitions":[{"topic":"t",'
                       '"partition":0,"replicas":[1,2]}]}') from None  # fmt: skip
    if not result:
        raise CliError("reassignment JSON names no partition")
    return result, dirs


def reassignment_json(assignment: dict[tuple[str, int], list[int]]) -> str:
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
        raise CliError(f"replication factor {replication_factor} is larger than the "
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


# -- commands --------------------------------------------------------------------------------


def _current(admin: Any, args: argparse.Namespace) -> dict[tuple[str, int], list[int]]:
    md = metadata(admin, args)
    return {(t, p): list(part.replicas) for t, topic in md.topics.items()
            for p, part in topic.partitions.items()}  # fmt: skip


def _addresses(admin: Any, args: argparse.Namespace) -> dict[int, str]:
    return routing.addresses(metadata(admin, args))


def _controller(admin: Any, args: argparse.Namespace) -> str:
    md = metadata(admin, args)
    broker = md.brokers.get(md.controller_id)
    if broker is None:
        raise CliError("the cluster has no controller now; try again")
    return routing.address(broker)


def generate(args: argparse.Namespace) -> int:
    topics = parse_topics_to_move(_read_json(args.topics_to_move_json_file))
    try:
        brokers = [int(b) for b in args.broker_list.split(",") if b.strip()]
    except ValueError:
        raise CliError(f"--broker-list {args.broker_list!r}: expected ids like 1,2,3") from None
    admin = admin_client(args)
    live = set(metadata(admin, args).brokers)
    unknown = sorted(set(brokers) - live)
    if unknown:
        raise CliError(f"unknown broker id(s) {','.join(map(str, unknown))} "
                       f"(live: {','.join(map(str, sorted(live)))})")  # fmt: skip
    current = _current(admin, args)
    moving = {k: v for k, v in current.items() if k[0] in topics}
    missing = sorted(set(topics) - {t for t, _p in moving})
    if missing:
        raise CliError(f"topic(s) {', '.join(missing)} do not exist")
    proposed: dict[tuple[str, int], list[int]] = {}
    for topic in topics:
        count = len([k for k in moving if k[0] == topic])
        rf = len(moving[(topic, 0)])
        for p, replicas in enumerate(assign_replicas(count, rf, brokers)):
            proposed[(topic, p)] = replicas
    if args.format == "json":
        print_json([{"current": json.loads(reassignment_json(moving)),
                     "proposed": json.loads(reassignment_json(proposed))}])  # fmt: skip
        return 0
    print("Current partition replica assignment")
    print(reassignment_json(moving))
    print()
    print("Proposed partition reassignment configuration")
    print(reassignment_json(proposed))
    return 0


def _send_alter(args: argparse.Namespace, admin: Any,
                target: dict[tuple[str, int], list[int] | None]) -> None:  # fmt: skip
    by_topic: dict[str, list[Any]] = {}
    for (t, p), replicas in sorted(target.items()):
        by_topic.setdefault(t, []).append(
            wire.part(ALTER_REASSIGNMENTS, 0, "ReassignablePartition", partition_index=p,
                      replicas=None if replicas is None else tuple(replicas))  # fmt: skip
        )
    topics = tuple(wire.part(ALTER_REASSIGNMENTS, 0, "ReassignableTopic", name=t,
                             partitions=tuple(ps)) for t, ps in by_topic.items())  # fmt: skip
    resp = wire.request(_controller(admin, args), ALTER_REASSIGNMENTS, 0,
                        timeout=int(timeout() * 1000), topics=topics)  # fmt: skip
    wire.check(resp.error_code, f"reassignment refused{_message(resp.error_message)}")
    errors = [f"{t.name}-{p.partition_index}: {wire_error(p.error_code)}"
              f"{_message(p.error_message)}"
              for t in resp.responses for p in t.partitions if int(p.error_code) != 0]  # fmt: skip
    if errors:
        raise CliError("reassignment refused for " + "; ".join(errors))


def _message(text: str | None) -> str:
    return f" ({text})" if text else ""


def wire_error(code: Any) -> str:
    from strom.protocol.errors import ErrorCode

    return ErrorCode(int(code)).name.upper()


def execute(args: argparse.Namespace) -> int:
    target, dirs = parse_plan(_read_json(args.reassignment_json_file))
    admin = admin_client(args)
    current = _current(admin, args)
    missing = sorted(f"{t}-{p}" for t, p in target if (t, p) not in current)
    if missing:
        raise CliError(f"partition(s) {', '.join(missing)} do not exist")
    addresses = _addresses(admin, args) if dirs else {}
    log_dirs.check_dirs(dirs, addresses)  # a bad dir: refused before anything changes
    rollback = {k: current[k] for k in target}
    _send_alter(args, admin, dict(target))
    names = ",".join(f"{t}-{p}" for t, p in sorted(target))
    text = args.format != "json"
    if text:
        print("Current partition replica assignment")
        print()
        print(reassignment_json(rollback))
        print()
        print("Save this to use as the --reassignment-json-file option during rollback")
        print(f"Successfully started partition reassignments for {names}", flush=True)
    moved = log_dirs.execute_moves(dirs, addresses) if dirs else []
    if text:
        for line in moved:
            print(line)
        return 0
    print_json([{"rollback": json.loads(reassignment_json(rollback)), "started": names,
                 "log_dir_moves": [{"topic": t, "partition": p, "broker": b, "log_dir": d}
                                   for (t, p, b), d in sorted(dirs.items())]}])  # fmt: skip
    return 0


def _ongoing(args: argparse.Namespace, admin: Any, keys: list[tuple[str, int]]) -> set[
    tuple[str, int]
]:
    by_topic: dict[str, list[int]] = {}
    for t, p in keys:
        by_topic.setdefault(t, []).append(p)
    topics = tuple(wire.part(LIST_REASSIGNMENTS, 0, "ListPartitionReassignmentsTopics", name=t,
                             partition_indexes=tuple(ps)) for t, ps in by_topic.items())  # fmt: skip
    resp = wire.request(_controller(admin, args), LIST_REASSIGNMENTS, 0,
                        timeout=int(timeout() * 1000), topics=topics)  # fmt: skip
    wire.check(resp.error_code, f"cannot list reassignments{_message(resp.error_message)}")
    return {(t.name, int(p.partition_index)) for t in resp.topics for p in t.partitions}


def verify(args: argparse.Namespace) -> int:
    target, dirs = parse_plan(_read_json(args.reassignment_json_file))
    admin = admin_client(args)
    current = _current(admin, args)
    ongoing = _ongoing(args, admin, sorted(target))
    rows = []
    for (t, p), replicas in sorted(target.items()):
        now = current.get((t, p))
        if (t, p) in ongoing:
            status, line = "in_progress", f"Reassignment of partition {t}-{p} is still in progress."
        elif now == replicas:
            status, line = "completed", f"Reassignment of partition {t}-{p} is completed."
        else:
            shown = "none" if now is None else ",".join(map(str, now))
            status = "not_active"
            line = (f"There is no active reassignment of partition {t}-{p}, but replica set is "
                    f"{shown} rather than {','.join(map(str, replicas))}.")  # fmt: skip
        rows.append({"topic": t, "partition": p, "status": status, "replicas": now,
                     "target": replicas, "line": line})  # fmt: skip
    moves = log_dirs.move_states(dirs, _addresses(admin, args)) if dirs else []
    if args.format == "json":
        print_json([{k: v for k, v in r.items() if k != "line"} for r in rows + moves])
        return 0
    print("Status of partition reassignment:")
    for r in rows:
        print(r["line"])
    if moves:
        print()
        print("Reassignment of replica log directories:")
        for r in moves:
            print(r["line"])
    return 0


def cancel(args: argparse.Namespace) -> int:
    """Kafka's ``cancelAssignment``: cancel the file's partitions that are being reassigned,
    then send the replicas whose log dir move is active back to their current directory."""
    target, dirs = parse_plan(_read_json(args.reassignment_json_file))
    admin = admin_client(args)
    ongoing = sorted(_ongoing(args, admin, sorted(target)))
    if ongoing:
        _send_alter(args, admin, dict.fromkeys(ongoing))
    addresses = _addresses(admin, args) if dirs else {}
    back = log_dirs.active_moves(dirs, addresses) if dirs else {}
    moved = log_dirs.execute_moves(back, addresses) if back else []
    names = ",".join(f"{t}-{p}" for t, p in ongoing)
    if args.format == "json":
        print_json([{"cancelled": names,
                     "cancelled_log_dir_moves": ",".join(map(log_dirs.replica_name,
                                                             sorted(back)))}])  # fmt: skip
        return 0
    if ongoing:
        s = "s" if len(ongoing) > 1 else ""
        print(f"Successfully cancelled partition reassignment{s} for: {names}")
    else:
        print("None of the specified partition reassignments are active.")
    if not back:
        print("None of the specified partition moves are active.")
    for line in moved:
        print(line)
    return 0
