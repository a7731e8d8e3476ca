"""``strom group list|describe|delete`` (reset-offsets lives in :mod:`strom.cli.group_reset`)."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import Any

from strom.admin import groups
from strom.cli import group_reset
from strom.cli.clients import checked_session
from strom.cli.options import add_client_options
from strom.cli.output import is_terminal, print_json, print_table

OFFSETS_HEADERS = (
    "GROUP",
    "TOPIC",
    "PARTITION",
    "CURRENT-OFFSET",
    "LOG-END-OFFSET",
    "LAG",
    "CONSUMER-ID",
    "HOST",
    "CLIENT-ID",
)
MEMBERS_HEADERS = ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS")
STATE_HEADERS = (
    "GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS", "TOTAL-LAG", "TYPE"
)
#: free text that may narrow and wrap on a narrow terminal; the rest keeps its width
FLEXIBLE = ("CONSUMER-ID", "HOST", "CLIENT-ID", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY")


def add_parser(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register ``group`` and its subcommands."""
    parser = subparsers.add_parser(
        "group", help="list, describe, reset, delete consumer groups", parents=parents
    )
    sub = parser.add_subparsers(dest="group_command", metavar="COMMAND", required=True)

    p = sub.add_parser("list", help="list consumer groups", parents=parents)
    p.add_argument("--state", metavar="S", help="only groups in state S (e.g. Stable, Empty)")
    p.add_argument("--type", nargs="?", const="", metavar="T", dest="group_type",
                   help="show each group's type; with T (classic, consumer) only those")
    add_client_options(p, listing=True)
    p.set_defaults(func=list_)

    p = sub.add_parser(
        "describe", help="offsets and lag, members or state of a group", parents=parents
    )
    p.add_argument("group", metavar="G")
    view = p.add_mutually_exclusive_group()
    view.add_argument("--members", action="store_true", help="one line per member")
    view.add_argument("--state", action="store_true", help="coordinator, strategy, state")
    add_client_options(p, listing=True)
    p.set_defaults(func=describe)

    group_reset.add_parser(sub, parents)

    p = sub.add_parser(
        "delete", help="delete consumer groups (must have no members)", parents=parents
    )
    p.add_argument("groups", nargs="+", metavar="G")
    add_client_options(p, listing=True)
    p.set_defaults(func=delete)


def list_(args: argparse.Namespace) -> int:
    """Group ids (text: one a line; with --state and/or --type a GROUP [TYPE] [STATE] table, as
    kafka-consumer-groups.sh --list prints it)."""
    kind = getattr(args, "group_type", None)
    listings = groups.list_groups(checked_session(args), args.state, kind or None)
    if args.format == "json":
        print_json([asdict(g) for g in listings])
    elif args.state or kind is not None:
        headers = ("GROUP", *(("TYPE",) if kind is not None else ()),
                   *(("STATE",) if args.state else ()))  # fmt: skip
        print_table(headers, [(g.group, *((g.type,) if kind is not None else ()),
                               *((g.state,) if args.state else ())) for g in listings])  # fmt: skip
    else:
        for g in listings:
            print(g.group)
    return 0


def describe(args: argparse.Namespace) -> int:
    """Default: partitions with offsets and lag; --members; --state."""
    s = checked_session(args)
    desc = groups.describe_group(s, args.group)
    rows: list[dict[str, Any]]
    if args.members:
        rows = [
            {"group": args.group, "consumer_id": m.member_id, "host": m.host,
             "client_id": m.client_id, "partitions": len(m.assignment)}
            for m in desc.members
        ]  # fmt: skip
        headers: tuple[str, ...] = MEMBERS_HEADERS
    elif args.state:
        rows = [{
            "group": args.group,
            "coordinator": str(desc.coordinator) if desc.coordinator else None,
            "assignment_strategy": desc.assignor,
            "state": desc.state,
            "members": len(desc.members),
            "total_lag": groups.total_lag(groups.offset_rows(s, desc)),
            "type": desc.type,
        }]  # fmt: skip
        headers = STATE_HEADERS
    else:
        offsets = groups.offset_rows(s, desc)
        rows = [asdict(r) for r in offsets]
        headers = OFFSETS_HEADERS
    if args.format == "json":
        print_json(rows)
        return 0
    print_table(headers, [list(r.values()) for r in rows], flexible=FLEXIBLE)
    if not args.members and not args.state and is_terminal():
        # a terminal only: piped output stays one table
        print(f"TOTAL-LAG {groups.total_lag(offsets)}")
    return 0


def delete(args: argparse.Namespace) -> int:
    """Delete groups (the broker refuses groups that still have members)."""
    groups.delete_groups(checked_session(args), args.groups)
    if args.format == "json":
        print_json([{"group": g, "deleted": True} for g in args.groups])
    else:
        for g in args.groups:
            print(f"Deleted consumer group {g}.")
    return 0
