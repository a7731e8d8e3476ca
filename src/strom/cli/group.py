"""``strom group list|describe|delete`` (reset-offsets lives in :mod:`strom.cli.group_reset`)."""

from __future__ import annotations

import argparse
from typing import Any

from confluent_kafka.admin import AdminClient

from strom.cli import group_reset
from strom.cli.clients import add_client_options, admin_client, metadata
from strom.cli.errors import timeout, wait_for
from strom.cli.group_admin import (
    committed_offsets,
    describe_group,
    end_offsets,
    parse_state,
    state_name,
)
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
    "GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS", "TOTAL-LAG"
)


def add_parser(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register ``group`` and its subcommands."""
    group = subparsers.add_parser(
        "group", help="list, describe, reset, delete consumer groups", parents=parents
    )
    sub = group.add_subparsers(dest="group_command", metavar="COMMAND", required=True)

    p = sub.add_parser("list", help="list consumer groups", parents=parents)
    p.add_argument("--state", metavar="S", help="only groups in state S (e.g. Stable, Empty)")
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
    """Group ids (text: one a line; with --state a GROUP STATE table)."""
    admin = admin_client(args)
    kwargs: dict[str, Any] = {"request_timeout": 10.0}
    if args.state:
        kwargs["states"] = {parse_state(args.state)}
    result = wait_for(
        admin.list_consumer_groups(**kwargs), "cannot list groups", args.bootstrap_server
    )
    listings = sorted(result.valid, key=lambda g: g.group_id)
    if args.format == "json":
        print_json(
            [
                {
                    "group": g.group_id,
                    "state": state_name(g.state),
                    "simple": bool(g.is_simple_consumer_group),
                }
                for g in listings
            ]
        )
    elif args.state:
        print_table(("GROUP", "STATE"), [(g.group_id, state_name(g.state)) for g in listings])
    else:
        for g in listings:
            print(g.group_id)
    return 0


def offset_rows(args: argparse.Namespace, admin: AdminClient, desc: Any) -> list[dict[str, Any]]:
    """One row per partition of every topic the group reads (committed or assigned), those
    without a commit too (CURRENT-OFFSET and LAG ``-``), then members without partitions."""
    committed = committed_offsets(admin, args.group, args.bootstrap_server)
    owner: dict[tuple[str, int], Any] = {}
    idle_members = []
    for member in desc.members:
        parts = member.assignment.topic_partitions if member.assignment else []
        for tp in parts:
            owner[(tp.topic, tp.partition)] = member
        if not parts:
            idle_members.append(member)
    known = set(committed) | set(owner)
    topics = metadata(admin, args).topics
    for name in {t for t, _p in known}:
        if name in topics and topics[name].error is None:
            known |= {(name, p) for p in topics[name].partitions}
    keys = sorted(known)
    leo = end_offsets(admin, keys, args.bootstrap_server)
    rows = []
    for key in keys:
        current = committed.get(key)
        end = leo.get(key)
        member = owner.get(key)
        rows.append(
            {
                "group": args.group,
                "topic": key[0],
                "partition": key[1],
                "current_offset": current,
                "log_end_offset": end,
                "lag": end - current if current is not None and end is not None else None,
                "consumer_id": member.member_id if member else None,
                "host": member.host if member else None,
                "client_id": member.client_id if member else None,
            }
        )
    for member in idle_members:
        rows.append(
            {
                "group": args.group,
                "topic": None,
                "partition": None,
                "current_offset": None,
                "log_end_offset": None,
                "lag": None,
                "consumer_id": member.member_id,
                "host": member.host,
                "client_id": member.client_id,
            }
        )
    return rows


def describe(args: argparse.Namespace) -> int:
    """Default: partitions with offsets and lag; --members; --state."""
    admin = admin_client(args)
    desc = describe_group(admin, args.group, args.bootstrap_server)
    if args.members:
        rows = [
            {
                "group": args.group,
                "consumer_id": m.member_id,
                "host": m.host,
                "client_id": m.client_id,
                "partitions": len(m.assignment.topic_partitions) if m.assignment else 0,
            }
            for m in desc.members
        ]
        headers: tuple[str, ...] = MEMBERS_HEADERS
    elif args.state:
        coord = desc.coordinator
        rows = [
            {
                "group": args.group,
                "coordinator": f"{coord.host}:{coord.port} ({coord.id})" if coord else None,
                "assignment_strategy": desc.partition_assignor or None,
                "state": state_name(desc.state),
                "members": len(desc.members),
                "total_lag": total_lag(offset_rows(args, admin, desc)),
            }
        ]
        headers = STATE_HEADERS
    else:
        rows = offset_rows(args, admin, desc)
        headers = OFFSETS_HEADERS
    if args.format == "json":
        print_json(rows)
        return 0
    print_table(headers, [list(r.values()) for r in rows])
    if not args.members and not args.state and is_terminal():
        print(f"TOTAL-LAG {total_lag(rows)}")  # a terminal only: piped output stays one table
    return 0


def total_lag(rows: list[dict[str, Any]]) -> int:
    """The sum of the known lags (partitions without a commit count as none, as in rpk)."""
    return sum(r["lag"] for r in rows if r.get("lag") is not None)


def delete(args: argparse.Namespace) -> int:
    """Delete groups (the broker refuses groups that still have members)."""
    admin = admin_client(args)
    futures = admin.delete_consumer_groups(args.groups, request_timeout=timeout())
    rows = []
    for group in args.groups:
        wait_for(futures[group], f"cannot delete group {group!r}", args.bootstrap_server)
        rows.append({"group": group, "deleted": True})
    if args.format == "json":
        print_json(rows)
    else:
        for row in rows:
            print(f"Deleted consumer group {row['group']}.")
    return 0
