"""``strom topic create|list|alter-config|add-partitions|delete`` (describe and trim in
:mod:`strom.cli.topic_describe` and :mod:`strom.cli.topic_trim`)."""

from __future__ import annotations

import argparse
import re
from typing import Any

from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from strom.cli import topic_describe, topic_reassign, topic_trim
from strom.cli.clients import add_client_options, admin_client, metadata
from strom.cli.errors import CliError, timeout, wait_for
from strom.cli.output import is_terminal, print_json, print_table

_LEGAL_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_NAME_LENGTH = 249


def add_parser(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register ``topic`` and its subcommands."""
    topic = subparsers.add_parser(
        "topic", help="create, list, describe, configure, grow, trim, reassign, delete topics",
        parents=parents,
    )
    sub = topic.add_subparsers(dest="topic_command", metavar="COMMAND", required=True)

    p = sub.add_parser("create", help="create a topic", parents=parents)
    p.add_argument("name", metavar="NAME", help="topic name")
    p.add_argument(
        "--partitions", "-p", type=int, default=-1, metavar="N",
        help="number of partitions (default: the broker's num.partitions)",
    )
    p.add_argument(
        "--replication-factor",
        "-r",
        type=int,
        default=-1,
        metavar="R",
        help="replicas per partition (default: the broker's default.replication.factor)",
    )
    p.add_argument(
        "--config",
        "-c",
        action="append",
        default=[],
        metavar="K=V",
        help="topic config, repeatable",
    )
    add_client_options(p, listing=True)
    p.set_defaults(func=create)

    p = sub.add_parser("list", help="list topics (internal ones with -i)", parents=parents)
    p.add_argument(
        "--internal", "-i", action="store_true", help="include internal topics (__consumer_offsets)"
    )
    add_client_options(p, listing=True)
    p.set_defaults(func=list_)

    topic_describe.add_parser(sub, parents)

    p = sub.add_parser("alter-config", help="set or delete topic configs", parents=parents)
    p.add_argument("name", metavar="NAME", help="topic name")
    p.add_argument("settings", nargs="*", metavar="K=V", help="configs to set")
    p.add_argument(
        "--delete",
        "-d",
        action="append",
        default=[],
        metavar="K",
        help="config to remove (back to the default), repeatable",
    )
    add_client_options(p, listing=True)
    p.set_defaults(func=alter_config)

    p = sub.add_parser("add-partitions", help="add partitions to a topic", parents=parents)
    p.add_argument("name", metavar="NAME", help="topic name")
    grow = p.add_mutually_exclusive_group(required=True)
    grow.add_argument("--num", "-n", type=int, metavar="N", help="partitions to add")
    grow.add_argument("--total", type=int, metavar="T", help="partition count to grow to")
    add_client_options(p, listing=True)
    p.set_defaults(func=add_partitions)

    topic_trim.add_parser(sub, parents)
    topic_reassign.add_parser(sub, parents)

    p = sub.add_parser("delete", help="delete topics", parents=parents)
    p.add_argument("names", nargs="+", metavar="NAME", help="topic(s) to delete")
    add_client_options(p, listing=True)
    p.set_defaults(func=delete)


def validate_topic_name(name: str) -> None:
    """Kafka's rule for legal topic names, checked before asking the broker."""
    if not name or name in (".", ".."):
        raise CliError(f"invalid topic name {name!r}: must not be empty, '.' or '..'")
    if len(name) > MAX_NAME_LENGTH:
        raise CliError(f"invalid topic name: longer than {MAX_NAME_LENGTH} characters")
    if not _LEGAL_NAME.match(name):
        raise CliError(
            f"invalid topic name {name!r}: only ASCII letters, digits, '.', '_' and '-' allowed"
        )


def parse_settings(items: list[str], what: str = "config") -> dict[str, str]:
    """``k=v`` strings to a dict; a missing ``=`` is a :class:`CliError`."""
    result: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(f"invalid {what} {item!r}: expected KEY=VALUE")
        result[key] = value
    return result


def _done(args: argparse.Namespace, rows: list[dict[str, Any]], lines: list[str]) -> int:
    """Print a command's result: the lines as text, or the rows as a JSON list."""
    if getattr(args, "format", "text") == "json":
        print_json(rows)
    else:
        for line in lines:
            print(line)
    return 0


def create(args: argparse.Namespace) -> int:
    """Create one topic."""
    validate_topic_name(args.name)
    if args.partitions == 0 or args.partitions < -1:
        raise CliError("--partitions must be at least 1")
    configs = parse_settings(args.config)
    admin = admin_client(args)
    new = NewTopic(
        args.name,
        num_partitions=args.partitions,
        replication_factor=args.replication_factor,
        config=configs,
    )
    futures = admin.create_topics([new], request_timeout=timeout())
    wait_for(futures[args.name], f"cannot create topic {args.name!r}", args.bootstrap_server)
    rows = [{"name": args.name, "created": True}]
    return _done(args, rows, [f"Created topic {args.name}."])


def is_internal(name: str) -> bool:
    """Kafka's internal topics (``__consumer_offsets``, ``__transaction_state``) and the
    convention of a ``__`` prefix for other tools' internal topics."""
    return name.startswith("__")


def list_(args: argparse.Namespace) -> int:
    """Topic names: one a line when piped, a table on a terminal; json with partition counts."""
    admin = admin_client(args, check=False)
    topics = metadata(admin, args).topics
    names = sorted(n for n in topics if args.internal or not is_internal(n))
    rows = [
        {
            "name": n,
            "partitions": len(topics[n].partitions),
            "replicas": len(next(iter(topics[n].partitions.values())).replicas)
            if topics[n].partitions else 0,
            "internal": is_internal(n),
        }
        for n in names
    ]
    if args.format == "json":
        print_json(rows)
    elif is_terminal():
        print_table(("NAME", "PARTITIONS", "REPLICAS"),
                    [(r["name"], r["partitions"], r["replicas"]) for r in rows])
    else:
        for name in names:
            print(name)
    return 0


def alter_config(args: argparse.Namespace) -> int:
    """Incrementally set and delete topic configs."""
    settings = parse_settings(args.settings)
    if not settings and not args.delete:
        raise CliError("nothing to change: give K=V settings and/or --delete K")
    entries = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in settings.items()
    ] + [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in args.delete]
    resource = ConfigResource(ConfigResource.Type.TOPIC, args.name, incremental_configs=entries)
    admin = admin_client(args)
    futures = admin.incremental_alter_configs([resource], request_timeout=timeout())
    for future in futures.values():
        wait_for(future, f"cannot alter configs of {args.name!r}", args.bootstrap_server)
    rows = [{"name": args.name, "set": settings, "deleted": args.delete}]
    return _done(args, rows, [f"Completed updating config for topic {args.name}."])


def add_partitions(args: argparse.Namespace) -> int:
    """Grow a topic by ``--num`` partitions or to ``--total`` (CreatePartitions)."""
    admin = admin_client(args)
    topic_md = metadata(admin, args, args.name).topics.get(args.name)
    if topic_md is None or topic_md.error is not None:
        raise CliError(f"cannot add partitions: topic {args.name!r} does not exist")
    current = len(topic_md.partitions)
    total = current + args.num if args.num is not None else args.total
    if total <= current:
        raise CliError(
            f"topic {args.name!r} has {current} partition(s); the new count must be larger"
        )
    futures = admin.create_partitions([NewPartitions(args.name, total)], request_timeout=timeout())
    wait_for(futures[args.name], f"cannot add partitions to {args.name!r}", args.bootstrap_server)
    rows = [{"name": args.name, "previous_partitions": current, "partitions": total}]
    return _done(args, rows, [f"Topic {args.name} now has {total} partitions (was {current})."])


def delete(args: argparse.Namespace) -> int:
    """Delete topics."""
    admin = admin_client(args)
    futures = admin.delete_topics(args.names, request_timeout=timeout())
    lines, rows = [], []
    for name in args.names:
        wait_for(futures[name], f"cannot delete topic {name!r}", args.bootstrap_server)
        lines.append(f"Deleted topic {name}.")
        rows.append({"name": name, "deleted": True})
    return _done(args, rows, lines)
