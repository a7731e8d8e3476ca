"""``strom topic create|list|alter-config|add-partitions|delete`` (describe and trim in
:mod:`strom.cli.topic_describe` and :mod:`strom.cli.topic_trim`)."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import Any

from strom.admin import topics
from strom.admin.topics import parse_settings
from strom.cli import topic_describe, topic_reassign, topic_trim
from strom.cli.clients import checked_session, session
from strom.cli.errors import CliError
from strom.cli.options import add_client_options
from strom.cli.output import is_terminal, print_json, print_table


def add_parser(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register ``topic`` and its subcommands."""
    parser = subparsers.add_parser(
        "topic", help="create, list, describe, configure, grow, trim, reassign, delete topics",
        parents=parents,
    )
    sub = parser.add_subparsers(dest="topic_command", metavar="COMMAND", required=True)

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
    topics.validate_topic_name(args.name)
    if args.partitions == 0 or args.partitions < -1:
        raise CliError("--partitions must be at least 1")
    configs = parse_settings(args.config)
    topics.create_topic(checked_session(args), args.name, args.partitions,
                        args.replication_factor, configs)  # fmt: skip
    rows = [{"name": args.name, "created": True}]
    return _done(args, rows, [f"Created topic {args.name}."])


def list_(args: argparse.Namespace) -> int:
    """Topic names: one a line when piped, a table on a terminal; json with partition counts."""
    rows = topics.list_topics(session(args), internal=args.internal)
    if args.format == "json":
        print_json([asdict(r) for r in rows])
    elif is_terminal():
        print_table(("NAME", "PARTITIONS", "REPLICAS"),
                    [(r.name, r.partitions, r.replicas) for r in rows])
    else:
        for r in rows:
            print(r.name)
    return 0


def alter_config(args: argparse.Namespace) -> int:
    """Incrementally set and delete topic configs."""
    settings = parse_settings(args.settings)
    if not settings and not args.delete:
        raise CliError("nothing to change: give K=V settings and/or --delete K")
    topics.alter_topic_configs(checked_session(args), args.name, settings, args.delete)
    rows = [{"name": args.name, "set": settings, "deleted": args.delete}]
    return _done(args, rows, [f"Completed updating config for topic {args.name}."])


def add_partitions(args: argparse.Namespace) -> int:
    """Grow a topic by ``--num`` partitions or to ``--total`` (CreatePartitions)."""
    current, total = topics.add_partitions(checked_session(args), args.name, num=args.num,
                                           total=args.total)  # fmt: skip
    rows = [{"name": args.name, "previous_partitions": current, "partitions": total}]
    return _done(args, rows, [f"Topic {args.name} now has {total} partitions (was {current})."])


def delete(args: argparse.Namespace) -> int:
    """Delete topics."""
    topics.delete_topics(checked_session(args), args.names)
    rows = [{"name": name, "deleted": True} for name in args.names]
    return _done(args, rows, [f"Deleted topic {name}." for name in args.names])
