"""``strom quota describe|alter``: client quotas, as ``kafka-configs.sh --entity-type
users|clients``.

The entity options are kafka-configs': ``--user NAME`` / ``--user-defaults`` and ``--client
NAME`` / ``--client-defaults`` (one of each at most; both for a user's client id).
``describe`` without an entity lists every entity with quotas; with one, only that entity
(kafka-configs' strict filter). ``alter --add-config 'producer_byte_rate=1048576,
consumer_byte_rate=2097152' --delete-config request_percentage`` changes an entity; every
broker applies it at once, without a restart. Output lines are kafka-configs'
(``Quota configs for user-principal 'alice' are producer_byte_rate=1048576.0``); a refused
change (an unknown key, a fractional byte rate) is one line on stderr.

The requests are :mod:`strom.admin.quotas`'s.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import Any

from strom.admin import quotas
from strom.cli.clients import session
from strom.cli.options import add_client_options
from strom.cli.output import print_json


def add_parser(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register ``quota`` and its subcommands."""
    parser = subparsers.add_parser("quota", parents=parents,
                                   help="client quotas (describe, alter)")  # fmt: skip
    sub = parser.add_subparsers(dest="quota_command", metavar="COMMAND", required=True)
    p = sub.add_parser("describe", help="the quotas of client entities", parents=parents)
    add_client_options(p, listing=True)
    _add_entity(p)
    p.set_defaults(func=describe)
    p = sub.add_parser("alter", help="set or remove quotas of a user and/or client id",
                       parents=parents)  # fmt: skip
    add_client_options(p)
    _add_entity(p)
    p.add_argument("--add-config", default="", metavar="K=V,K=V",
                   help="quotas to set: " + ", ".join(quotas.KEYS))  # fmt: skip
    p.add_argument("--delete-config", default="", metavar="K,K", help="quotas to remove")
    p.add_argument("--dry-run", action="store_true",
                   help="have the broker validate the change, write nothing")  # fmt: skip
    p.set_defaults(func=alter)


def _add_entity(parser: argparse.ArgumentParser) -> None:
    user = parser.add_mutually_exclusive_group()
    user.add_argument("--user", metavar="NAME", help="a user principal's name")
    user.add_argument("--user-defaults", action="store_true", help="the default user")
    client = parser.add_mutually_exclusive_group()
    client.add_argument("--client", metavar="ID", help="a client id")
    client.add_argument("--client-defaults", action="store_true", help="the default client id")


def _target(args: argparse.Namespace) -> quotas.Target:
    return quotas.Target(args.user, args.user_defaults, args.client, args.client_defaults)


def _values(values: dict[str, float]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(values.items()))


def describe(args: argparse.Namespace) -> int:
    entries = quotas.describe(session(args), _target(args))
    if args.format == "json":
        print_json([asdict(e) for e in entries])
        return 0
    for entry in entries:
        print(f"Quota configs for {entry.title()} are {_values(entry.values)}")
    return 0


def alter(args: argparse.Namespace) -> int:
    sets = quotas.parse_values(args.add_config)
    deletes = [k.strip() for k in args.delete_config.split(",") if k.strip()]
    title = quotas.alter(session(args), _target(args), sets, deletes, args.dry_run)
    verb = "Validated" if args.dry_run else "Completed"
    print(f"{verb} updating config for {title}.")  # kafka-configs' line
    return 0
