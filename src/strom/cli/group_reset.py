"""``strom group reset-offsets``: plan new committed offsets, apply them with ``--execute``."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from strom.cli.clients import add_client_options, admin_client, metadata
from strom.cli.errors import CliError, timeout, wait_for
from strom.cli.group_admin import committed_offsets, describe_group, end_offsets, state_name
from strom.cli.output import note, print_json, print_table

PLAN_HEADERS = ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")
INACTIVE = (ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD)


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


def parse_topic_spec(spec: str) -> tuple[str, list[int] | None]:
    """``T`` or ``T:0,2`` to (topic, partitions or None for all)."""
    topic, sep, parts = spec.partition(":")
    if not topic:
        raise CliError(f"invalid --topic {spec!r}: expected TOPIC or TOPIC:P,P")
    if not sep:
        return topic, None
    try:
        return topic, [int(p) for p in parts.split(",") if p.strip()]
    except ValueError:
        raise CliError(f"invalid --topic {spec!r}: partitions must be integers") from None


def parse_datetime_ms(value: str, what: str = "--to-datetime") -> int:
    """An ISO-8601 time (``Z`` accepted; no zone means UTC) to epoch milliseconds."""
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise CliError(f"invalid {what} {value!r}: expected ISO 8601") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _partitions(
    args: argparse.Namespace, admin: AdminClient, committed: dict[tuple[str, int], int]
) -> list[tuple[str, int]]:
    if args.all_topics:
        if not committed:
            raise CliError(f"group {args.group!r} has no committed offsets; name --topic")
        return sorted(committed)
    md = metadata(admin, args)
    result: set[tuple[str, int]] = set()
    for spec in args.topic:
        topic, parts = parse_topic_spec(spec)
        topic_md = md.topics.get(topic)
        if topic_md is None or topic_md.error is not None:
            raise CliError(f"topic {topic!r} does not exist")
        for p in parts if parts is not None else topic_md.partitions:
            if p not in topic_md.partitions:
                raise CliError(f"topic {topic!r} has no partition {p}")
            result.add((topic, p))
    return sorted(result)


def plan(
    args: argparse.Namespace, admin: AdminClient, committed: dict[tuple[str, int], int]
) -> dict[tuple[str, int], int]:
    """(topic, partition) -> new offset, clamped to [earliest, latest] like Kafka's tool."""
    keys = _partitions(args, admin, committed)
    boot = args.bootstrap_server
    earliest = end_offsets(admin, keys, boot, OffsetSpec.earliest())
    latest = end_offsets(admin, keys, boot, OffsetSpec.latest())
    if args.to_datetime is not None:
        at = end_offsets(
            admin, keys, boot, OffsetSpec.for_timestamp(parse_datetime_ms(args.to_datetime))
        )
    targets: dict[tuple[str, int], int] = {}
    for key in keys:
        if args.to_earliest:
            target = earliest[key]
        elif args.to_latest:
            target = latest[key]
        elif args.to_offset is not None:
            target = args.to_offset
        elif args.shift_by is not None:
            if key not in committed:
                raise CliError(
                    f"--shift-by: group {args.group!r} has no committed offset for "
                    f"{key[0]}-{key[1]}"
                )
            target = committed[key] + args.shift_by
        else:
            target = at[key] if at[key] >= 0 else latest[key]
        targets[key] = max(earliest[key], min(target, latest[key]))
    return targets


def check_inactive(desc: Any, group: str) -> None:
    """Refuse to move the offsets of a group that has members (they would overwrite them)."""
    if desc.members or desc.state not in INACTIVE:
        raise CliError(
            f"cannot reset offsets of group {group!r}: it is active (state "
            f"{state_name(desc.state)}, {len(desc.members)} member(s)); stop its consumers first"
        )


def apply_offsets(
    admin: AdminClient, group: str, targets: dict[tuple[str, int], int], bootstrap: str
) -> None:
    """Commit ``targets`` as the group's offsets (AlterConsumerGroupOffsets)."""
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(t, p, off) for (t, p), off in sorted(targets.items())]
    )
    futures = admin.alter_consumer_group_offsets([request], request_timeout=timeout())
    result = wait_for(futures[group], f"cannot reset offsets of group {group!r}", bootstrap)
    failed = [tp for tp in result.topic_partitions if tp.error is not None]
    if failed:
        tp = failed[0]
        raise CliError(f"cannot reset offset of {tp.topic}-{tp.partition}: {tp.error}")


def run(args: argparse.Namespace) -> int:
    """Print the plan; with --execute commit it first (refused while the group is active)."""
    admin = admin_client(args)
    desc = describe_group(admin, args.group, args.bootstrap_server, must_exist=False)
    check_inactive(desc, args.group)
    committed = committed_offsets(admin, args.group, args.bootstrap_server)
    targets = plan(args, admin, committed)
    if args.execute:
        apply_offsets(admin, args.group, targets, args.bootstrap_server)
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
