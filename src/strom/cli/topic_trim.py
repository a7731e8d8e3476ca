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
from typing import Any

from confluent_kafka import TopicPartition
from confluent_kafka.admin import OffsetSpec

from strom.cli.clients import add_client_options, admin_client, metadata
from strom.cli.consume import parse_offset
from strom.cli.errors import CliError, timeout, wait_for
from strom.cli.group_admin import end_offsets
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


def _targets(args: argparse.Namespace, admin: Any, keys: list[tuple[str, int]]) -> dict[
    tuple[str, int], tuple[int, int]
]:
    """(topic, partition) -> (current log start, new log start)."""
    boot = args.bootstrap_server
    start = end_offsets(admin, keys, boot, OffsetSpec.earliest())
    end = end_offsets(admin, keys, boot, OffsetSpec.latest())
    kind, number = parse_offset(args.offset)
    if kind == "start":
        raise CliError("--offset start deletes nothing: give N, end, -N or @TIME")
    at = end_offsets(admin, keys, boot, OffsetSpec.for_timestamp(number)) if kind == "time" else {}
    result = {}
    for key in keys:
        if kind == "end":
            target = end[key]
        elif kind == "absolute":
            target = number
        elif kind == "tail":
            target = end[key] - number
        else:
            target = at[key] if at[key] >= 0 else end[key]
        result[key] = (start[key], max(start[key], min(target, end[key])))
    return result


def run(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    topic_md = metadata(admin, args, args.name).topics.get(args.name)
    if topic_md is None or topic_md.error is not None:
        raise CliError(f"cannot trim: topic {args.name!r} does not exist")
    parts = sorted(topic_md.partitions)
    for p in args.partition or []:
        if p not in topic_md.partitions:
            raise CliError(f"topic {args.name!r} has no partition {p}")
    keys = [(args.name, p) for p in (sorted(set(args.partition)) if args.partition else parts)]
    plan = _targets(args, admin, keys)
    rows = []
    if args.yes:
        request = [TopicPartition(t, p, new) for (t, p), (old, new) in plan.items() if new > old]
        futures = admin.delete_records(request, request_timeout=timeout()) if request else {}
        for tp, future in futures.items():
            done = wait_for(future, f"cannot trim {tp.topic}-{tp.partition}", args.bootstrap_server)
            plan[(tp.topic, tp.partition)] = (plan[(tp.topic, tp.partition)][0], done.low_watermark)
    for (t, p), (old, new) in plan.items():
        rows.append({"topic": t, "partition": p, "log_start_offset": old,
                     "new_log_start_offset": new})
    if args.format == "json":
        print_json(rows)
    else:
        print_table(HEADERS, [list(r.values()) for r in rows])
        if not args.yes:
            note("Dry run: nothing deleted. Add --yes to delete these records.")
    return 0
