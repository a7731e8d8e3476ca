"""``strom cluster config get|set|delete [--broker N | --default]``: dynamic broker configs.

Like ``kafka-configs.sh --entity-type brokers``: ``get`` describes a broker's configs (every
one, or those named) with value, source and whether it can change without a restart; with
``--default`` only the cluster-wide dynamic defaults. ``set name=value ...`` and ``delete name
...`` change a broker's own dynamic configs (``--broker N``, default: the broker answering) or
the cluster-wide default (``--default``) through IncrementalAlterConfigs; the broker applies
them at once. A refused change (a read-only config, a bad value) is one line on stderr.

The requests are :mod:`strom.admin.broker_configs`'s.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import Any

from strom.admin import broker_configs
from strom.cli.clients import session
from strom.cli.errors import CliError
from strom.cli.options import add_client_options
from strom.cli.output import print_json, print_table


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register ``config`` under ``strom cluster``."""
    config = sub.add_parser("config", help="dynamic broker configs", parents=parents)
    csub = config.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    p = csub.add_parser("get", help="describe broker configs", parents=parents)
    add_client_options(p, listing=True)
    _add_target(p)
    p.add_argument("names", nargs="*", metavar="NAME", help="configs to show (default: all)")
    p.set_defaults(func=get)
    p = csub.add_parser("set", help="set dynamic broker configs", parents=parents)
    add_client_options(p)
    _add_target(p)
    p.add_argument("pairs", nargs="+", metavar="NAME=VALUE")
    p.set_defaults(func=set_configs)
    p = csub.add_parser("delete", help="remove dynamic broker configs", parents=parents)
    add_client_options(p)
    _add_target(p)
    p.add_argument("names", nargs="+", metavar="NAME")
    p.set_defaults(func=delete_configs)


def _add_target(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--broker", type=int, metavar="N", help="this broker's own configs")
    group.add_argument(
        "--default", action="store_true", help="the cluster-wide default for every broker"
    )


def get(args: argparse.Namespace) -> int:
    rows = broker_configs.describe(session(args), args.broker, args.default)
    known = {r.name for r in rows}
    unknown = set(args.names) - known if not args.default else set()
    if unknown:
        raise CliError(f"unknown broker config: {', '.join(sorted(unknown))}")
    rows = [r for r in rows if not args.names or r.name in args.names]
    if args.format == "json":
        print_json([asdict(r) for r in rows])
        return 0
    print_table(
        ("NAME", "VALUE", "SOURCE", "DYNAMIC"),
        [(r.name, r.value, r.source, "yes" if r.dynamic else "no") for r in rows],
        flexible=("VALUE",),
    )
    return 0


def _alter(args: argparse.Namespace, sets: dict[str, str], deletes: list[str], verb: str,
           done: str) -> int:  # fmt: skip
    target = broker_configs.alter(session(args), sets, deletes, verb, args.broker, args.default)
    print(f"{done} {', '.join([*sets, *deletes])} on {target}.")
    return 0


def set_configs(args: argparse.Namespace) -> int:
    sets: dict[str, str] = {}
    for pair in args.pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise CliError(f"expected NAME=VALUE, got {pair!r}")
        sets[name.strip()] = value.strip()
    return _alter(args, sets, [], "set", "Set")


def delete_configs(args: argparse.Namespace) -> int:
    return _alter(args, {}, list(args.names), "delete", "Deleted")
