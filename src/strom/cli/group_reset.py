"""``strom group reset-offsets``: plan new committed offsets, apply them with ``--execute``."""

from __future__ import annotations

import argparse
from typing import Any

from strom.admin import groups
from strom.admin.groups import ResetTo, parse_topic_spec
from strom.admin.timestamps import parse_datetime_ms
from strom.cli.clients import checked_session
from strom.cli.options import add_client_options
from strom.cli.output import note, print_json, print_table

PLAN_HEADERS = ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register ``group reset-offsets``."""
    p = sub.add_parser(
        "reset-offsets",
        aliases=["seek"],
        help="move a group's committed offsets (dry run unless --execute); alias: seek",
        parents=parents,
    )
    p.add_argument("group", metavar="G")
    scope = p.add_mutually_exclusive_group(required=True)
    scope.add_argument(
        "--topic",
        action="append",
        metavar="T[:P,...]",
        help="topic, optionally with partitions; repeatable",
    )
    scope.add_argument(
        "--all-topics", action="store_true", help="every topic the group has committed offsets for"
    )
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the log start of each partition")
    to.add_argument("--to-latest", action="store_true", help="the log end of each partition")
    to.add_argument("--to-offset", type=int, metavar="N", help="offset N (clamped to the log)")
    to.add_argument(
        "--shift-by", type=int, metavar="N", help="N from the committed offset (negative: back)"
    )
    to.add_argument(
        "--to-datetime",
        metavar="ISO8601",
        help="first offset at or after this time (e.g. 2024-05-01T12:00:00Z)",
    )
    p.add_argument("--execute", action="store_true", help="apply the plan (default: dry run)")
    add_client_options(p, listing=True)
    p.set_defaults(func=run)


def reset_to(args: argparse.Namespace) -> ResetTo:
    """The target the ``--to-*`` / ``--shift-by`` option names."""
    if args.to_earliest:
        return ResetTo("earliest")
    if args.to_latest:
        return ResetTo("latest")
    if args.to_offset is not None:
        return ResetTo("offset", args.to_offset)
    if args.shift_by is not None:
        return ResetTo("shift", args.shift_by)
    return ResetTo("datetime", parse_datetime_ms(args.to_datetime))


def run(args: argparse.Namespace) -> int:
    """Print the plan; with --execute commit it first (refused while the group is active)."""
    s = checked_session(args)
    groups.check_inactive(groups.describe_group(s, args.group, must_exist=False))
    committed = groups.committed_offsets(s, args.group)
    specs = None if args.all_topics else [parse_topic_spec(spec) for spec in args.topic]
    keys = groups.reset_partitions(s, args.group, committed, specs)
    targets = groups.reset_plan(s, args.group, committed, keys, reset_to(args))
    if args.execute:
        groups.apply_offsets(s, args.group, targets)
    rows = [
        {"group": args.group, "topic": t, "partition": p, "new_offset": off}
        for (t, p), off in targets.items()
    ]
    if args.format == "json":
        print_json(rows)
    else:
        print_table(PLAN_HEADERS, [list(r.values()) for r in rows])
        if not args.execute:
            note("Dry run: nothing changed. Add --execute to apply these offsets.")
    return 0
