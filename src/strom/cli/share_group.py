"""``strom share-group list|describe|reset-offsets|delete-offsets|delete`` (kafka-share-groups.sh).

``describe`` prints Kafka's columns: ``GROUP TOPIC PARTITION START-OFFSET LAG`` (default),
``GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS ASSIGNMENT`` (``--members``) and
``GROUP COORDINATOR (ID) STATE #MEMBERS`` (``--state``). Offsets move only while the group
has no members; ``reset-offsets`` is a dry run unless ``--execute``.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import Any

from strom.admin import share_groups
from strom.admin.timestamps import parse_datetime_ms
from strom.cli.clients import checked_session
from strom.cli.options import add_client_options
from strom.cli.output import note, print_json, print_table

OFFSETS_HEADERS = ("GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG")
MEMBERS_HEADERS = ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT")
STATE_HEADERS = ("GROUP", "COORDINATOR (ID)", "STATE", "#MEMBERS")
PLAN_HEADERS = ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")
FLEXIBLE = ("CONSUMER-ID", "HOST", "CLIENT-ID", "ASSIGNMENT", "COORDINATOR (ID)")


def add_parser(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "share-group", help="list, describe, reset, delete share groups (queues, KIP-932)",
        parents=parents)  # fmt: skip
    sub = parser.add_subparsers(dest="share_group_command", metavar="COMMAND", required=True)

    p = sub.add_parser("list", help="list share groups", parents=parents)
    p.add_argument("--state", metavar="S", help="only groups in state S (Empty, Stable)")
    add_client_options(p, listing=True)
    p.set_defaults(func=list_)

    p = sub.add_parser("describe", help="start offsets and lag, members or state of a share group",
                       parents=parents)  # fmt: skip
    p.add_argument("group", metavar="G")
    view = p.add_mutually_exclusive_group()
    view.add_argument("--members", action="store_true", help="one line per member")
    view.add_argument("--state", action="store_true", help="coordinator, state, members")
    add_client_options(p, listing=True)
    p.set_defaults(func=describe)

    p = sub.add_parser("reset-offsets", help="move a share group's start offsets (dry run "
                       "unless --execute)", parents=parents)  # fmt: skip
    p.add_argument("group", metavar="G")
    scope = p.add_mutually_exclusive_group(required=True)
    scope.add_argument("--topic", action="append", metavar="T", help="a topic; repeatable")
    scope.add_argument("--all-topics", action="store_true",
                       help="every topic the group has offsets for")  # fmt: skip
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the log start of each partition")
    to.add_argument("--to-latest", action="store_true", help="the log end of each partition")
    to.add_argument("--to-offset", type=int, metavar="N", help="offset N (clamped to the log)")
    to.add_argument("--to-datetime", metavar="ISO8601",
                    help="first offset at or after this time (e.g. 2024-05-01T12:00:00Z)")  # fmt: skip
    p.add_argument("--execute", action="store_true", help="apply the plan (default: dry run)")
    add_client_options(p, listing=True)
    p.set_defaults(func=reset)

    p = sub.add_parser("delete-offsets", help="forget a share group's state for topics",
                       parents=parents)  # fmt: skip
    p.add_argument("group", metavar="G")
    p.add_argument("--topic", action="append", required=True, metavar="T", help="repeatable")
    add_client_options(p, listing=True)
    p.set_defaults(func=delete_offsets)

    p = sub.add_parser("delete", help="delete share groups (must have no members)",
                       parents=parents)  # fmt: skip
    p.add_argument("groups", nargs="+", metavar="G")
    add_client_options(p, listing=True)
    p.set_defaults(func=delete)


def list_(args: argparse.Namespace) -> int:
    listings = share_groups.list_share_groups(checked_session(args), args.state)
    if args.format == "json":
        print_json([asdict(g) for g in listings])
    elif args.state:
        print_table(("GROUP", "STATE"), [(g.group, g.state) for g in listings])
    else:
        for g in listings:
            print(g.group)
    return 0


def describe(args: argparse.Namespace) -> int:
    s = checked_session(args)
    rows: list[dict[str, Any]]
    if args.members or args.state:
        desc = share_groups.describe_share_group(s, args.group)
        if args.members:
            rows = [{"group": args.group, "consumer_id": m.member_id, "host": m.host,
                     "client_id": m.client_id, "partitions": len(m.assignment),
                     "assignment": ",".join(f"{t}:{p}" for t, p in m.assignment)}
                    for m in desc.members]  # fmt: skip
            headers: tuple[str, ...] = MEMBERS_HEADERS
        else:
            rows = [{"group": args.group, "coordinator": desc.coordinator, "state": desc.state,
                     "members": len(desc.members)}]  # fmt: skip
            headers = STATE_HEADERS
    else:
        rows = [asdict(r) for r in share_groups.offsets(s, args.group)]
        headers = OFFSETS_HEADERS
    if args.format == "json":
        print_json(rows)
    else:
        print_table(headers, [list(r.values()) for r in rows], flexible=FLEXIBLE)
    return 0


def reset(args: argparse.Namespace) -> int:
    s = checked_session(args)
    share_groups.check_inactive(share_groups.describe_share_group(s, args.group))
    keys = share_groups.topic_keys(s, None if args.all_topics else args.topic, args.group)
    if args.to_earliest:
        targets = share_groups.reset_plan(s, keys, "earliest")
    elif args.to_latest:
        targets = share_groups.reset_plan(s, keys, "latest")
    elif args.to_offset is not None:
        targets = share_groups.reset_plan(s, keys, "offset", args.to_offset)
    else:
        targets = share_groups.reset_plan(s, keys, "datetime", parse_datetime_ms(args.to_datetime))
    if args.execute:
        share_groups.apply_offsets(s, args.group, targets)
    rows = [{"group": args.group, "topic": t, "partition": p, "new_offset": o}
            for (t, p), o in sorted(targets.items())]  # fmt: skip
    if args.format == "json":
        print_json(rows)
    else:
        print_table(PLAN_HEADERS, [list(r.values()) for r in rows])
        if not args.execute:
            note("Dry run: nothing changed. Add --execute to apply these offsets.")
    return 0


def delete_offsets(args: argparse.Namespace) -> int:
    share_groups.delete_offsets(checked_session(args), args.group, args.topic)
    if args.format == "json":
        print_json([{"group": args.group, "topic": t, "deleted": True} for t in args.topic])
    else:
        for t in args.topic:
            print(f"Deleted the offsets of share group {args.group} for topic {t}.")
    return 0


def delete(args: argparse.Namespace) -> int:
    share_groups.delete_share_groups(checked_session(args), args.groups)
    if args.format == "json":
        print_json([{"group": g, "deleted": True} for g in args.groups])
    else:
        for g in args.groups:
            print(f"Deleted share group {g}.")
    return 0
