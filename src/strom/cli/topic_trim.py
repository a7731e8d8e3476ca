"""``strom topic trim``: delete a topic's oldest records (DeleteRecords), like
``kafka-delete-records.sh`` and ``rpk topic trim-prefix``.

``--offset`` says where each partition's log will start: ``N`` (records before offset N are
deleted), ``end`` (everything), ``-N`` (keep the last N records) or ``@TIME`` (keep records
from TIME on). An offset past a partition's end is clamped to the end. Without ``--yes`` the
command prints the plan and changes nothing (as ``group reset-offsets`` without
``--execute``).
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import Any

from strom.admin import topics
from strom.cli.clients import checked_session
from strom.cli.consume import parse_offset
from strom.cli.options import add_client_options
from strom.cli.output import note, print_json, print_table

HEADERS = ("TOPIC", "PARTITION", "LOG-START-OFFSET", "NEW-LOG-START-OFFSET")


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register ``topic trim``."""
    p = sub.add_parser(
        "trim", help="delete the oldest records of a topic (dry run unless --yes)",
        parents=parents,
    )
    p.add_argument("name", metavar="NAME", help="topic name")
    p.add_argument(
        "--offset", "-o", required=True, metavar="WHERE",
        help="new log start: N, end (delete all), -N (keep the last N), @TIME",
    )
    p.add_argument(
        "--partition", "-p", type=int, action="append", metavar="N",
        help="only this partition, repeatable (default: all)",
    )
    p.add_argument("--yes", "-y", action="store_true", help="delete (default: show the plan)")
    add_client_options(p, listing=True)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    s = checked_session(args)
    position = parse_offset(args.offset)
    plan = topics.trim_plan(s, args.name, position, args.partition)
    if args.yes:
        plan = topics.trim(s, plan)
    if args.format == "json":
        print_json([asdict(r) for r in plan])
    else:
        print_table(HEADERS, [(r.topic, r.partition, r.log_start_offset, r.new_log_start_offset)
                              for r in plan])  # fmt: skip
        if not args.yes:
            note("Dry run: nothing deleted. Add --yes to delete these records.")
    return 0
