"""``strom topic reassign generate|execute|verify|cancel``, as kafka-reassign-partitions.sh.

The JSON formats, the assignment and the requests are :mod:`strom.admin.reassign`'s (log dir
moves: :mod:`strom.admin.log_dir_moves`); this module prints what Kafka's tool prints.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from strom.admin import log_dir_moves, reassign
from strom.admin.errors import InvalidInputError
from strom.admin.reassign import parse_plan, read_json, reassignment_json
from strom.cli.clients import checked_session
from strom.cli.options import add_client_options
from strom.cli.output import print_json


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


def generate(args: argparse.Namespace) -> int:
    topics = reassign.parse_topics_to_move(read_json(args.topics_to_move_json_file))
    try:
        brokers = [int(b) for b in args.broker_list.split(",") if b.strip()]
    except ValueError:
        raise InvalidInputError(
            f"--broker-list {args.broker_list!r}: expected ids like 1,2,3"
        ) from None
    moving, proposed = reassign.propose(checked_session(args), topics, brokers)
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


def execute(args: argparse.Namespace) -> int:
    target, dirs = parse_plan(read_json(args.reassignment_json_file))
    s = checked_session(args)
    rollback = reassign.start(s, target, dirs)
    names = ",".join(f"{t}-{p}" for t, p in sorted(target))
    text = args.format != "json"
    if text:
        print("Current partition replica assignment")
        print()
        print(reassignment_json(rollback))
        print()
        print("Save this to use as the --reassignment-json-file option during rollback")
        print(f"Successfully started partition reassignments for {names}", flush=True)
    moved = reassign.start_log_dir_moves(s, dirs)
    if text:
        for line in moved:
            print(line)
        return 0
    print_json([{"rollback": json.loads(reassignment_json(rollback)), "started": names,
                 "log_dir_moves": [{"topic": t, "partition": p, "broker": b, "log_dir": d}
                                   for (t, p, b), d in sorted(dirs.items())]}])  # fmt: skip
    return 0


def verify(args: argparse.Namespace) -> int:
    target, dirs = parse_plan(read_json(args.reassignment_json_file))
    rows, moves = reassign.verify(checked_session(args), target, dirs)
    if args.format == "json":
        docs = [asdict(r) for r in rows] + [asdict(m) for m in moves]
        print_json([{k: v for k, v in d.items() if k != "line"} for d in docs])
        return 0
    print("Status of partition reassignment:")
    for r in rows:
        print(r.line)
    if moves:
        print()
        print("Reassignment of replica log directories:")
        for m in moves:
            print(m.line)
    return 0


def cancel(args: argparse.Namespace) -> int:
    """Kafka's ``cancelAssignment``: cancel the file's partitions that are being reassigned,
    then send the replicas whose log dir move is active back to their current directory."""
    target, dirs = parse_plan(read_json(args.reassignment_json_file))
    done = reassign.cancel(checked_session(args), target, dirs)
    names = ",".join(f"{t}-{p}" for t, p in done.partitions)
    if args.format == "json":
        print_json([{"cancelled": names,
                     "cancelled_log_dir_moves": ",".join(map(log_dir_moves.replica_name,
                                                             done.log_dir_moves))}])  # fmt: skip
        return 0
    if done.partitions:
        s = "s" if len(done.partitions) > 1 else ""
        print(f"Successfully cancelled partition reassignment{s} for: {names}")
    else:
        print("None of the specified partition reassignments are active.")
    if not done.log_dir_moves:
        print("None of the specified partition moves are active.")
    for line in done.lines:
        print(line)
    return 0
