"""``strom profile create|use|list|delete``: broker addresses typed once, as ``rpk profile``.

Where and how profiles are kept: :mod:`strom.cli.profile_store`. ``-b`` and
``STROM_BROKERS`` still win over the current profile. ``profile create -X K=V`` keeps client
properties with the profile (``security.protocol``, ``sasl.*``, ``ssl.*``, in librdkafka's or
the Java client's names): they apply whenever the profile gives the address, under any ``-X``
of the run. ``profile list`` shows their names, never a value of a ``*password*`` key.
"""

from __future__ import annotations

import argparse
from typing import Any

from strom.admin.addresses import parse_addresses
from strom.admin.session import parse_properties
from strom.cli.errors import CliError
from strom.cli.options import add_format_option
from strom.cli.output import print_json, print_table
from strom.cli.profile_store import Profile, load, save


def add_parser(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register ``profile`` and its subcommands."""
    prof = subparsers.add_parser(
        "profile", help="saved broker addresses (create, use, list, delete)", parents=parents
    )
    sub = prof.add_subparsers(dest="profile_command", metavar="COMMAND", required=True)
    p = sub.add_parser("create", help="save a profile and make it current", parents=parents)
    p.add_argument("name", metavar="NAME", help="profile name")
    p.add_argument("-X", "--client-config", action="append", default=[], metavar="K=V",
                   help="client property kept with the profile, repeatable (e.g. -X "
                        "security.protocol=SSL -X ssl.ca.location=ca.crt)")
    add_format_option(p)
    p.set_defaults(func=create)
    p = sub.add_parser("use", help="make a profile the current one", parents=parents)
    p.add_argument("name", metavar="NAME", help="profile name")
    add_format_option(p)
    p.set_defaults(func=use)
    p = sub.add_parser("list", help="list profiles (* marks the current one)", parents=parents)
    add_format_option(p)
    p.set_defaults(func=list_)
    p = sub.add_parser("delete", help="delete a profile", parents=parents)
    p.add_argument("name", metavar="NAME", help="profile name")
    add_format_option(p)
    p.set_defaults(func=delete)


def create(args: argparse.Namespace) -> int:
    """Save NAME with ``-b`` (required) and ``--timeout``; it becomes the current profile."""
    brokers = getattr(args, "bootstrap_server", None)
    if not brokers:
        raise CliError("profile create needs the broker address: -b HOST:PORT[,HOST:PORT]")
    parse_addresses(brokers)  # malformed addresses are refused now, not at first use
    if not args.name.strip() or args.name.startswith("-"):
        raise CliError(f"invalid profile name {args.name!r}")
    properties = parse_properties(list(getattr(args, "client_config", []) or []))
    _, profiles = load()
    profiles[args.name] = Profile(args.name, brokers, getattr(args, "given_timeout", None),
                                  properties)
    save(args.name, profiles)
    row: dict[str, Any] = {"name": args.name, "brokers": brokers, "current": True}
    if properties:
        row["properties"] = shown(properties)
    return _done(args, row,
                 f"Created profile {args.name} (brokers {brokers}) and switched to it.")


def shown(properties: Any) -> dict[str, str]:
    """Properties as they may be printed: a password's value hidden."""
    return {k: "******" if "password" in k.lower() else v for k, v in properties.items()}


def _done(args: argparse.Namespace, row: dict[str, Any], line: str) -> int:
    if args.format == "json":
        print_json([row])
    else:
        print(line)
    return 0


def use(args: argparse.Namespace) -> int:
    _, profiles = load()
    if args.name not in profiles:
        raise CliError(f"no profile named {args.name!r} (see 'strom profile list')")
    save(args.name, profiles)
    return _done(args, {"name": args.name, "current": True}, f"Switched to profile {args.name}.")


def list_(args: argparse.Namespace) -> int:
    """The profiles; a PROPERTIES column (``properties`` in JSON) only where some are kept, so
    the output of profiles without any stays as it was."""
    current, profiles = load()
    ordered = sorted(profiles.values(), key=lambda p: p.name)
    rows: list[dict[str, Any]] = []
    for p in ordered:
        row: dict[str, Any] = {"name": p.name, "brokers": p.brokers, "timeout": p.timeout,
                               "current": p.name == current}
        if p.properties:
            row["properties"] = shown(p.properties)
        rows.append(row)
    if args.format == "json":
        print_json(rows)
        return 0
    with_properties = any(p.properties for p in ordered)
    header: tuple[str, ...] = ("NAME", "BROKERS", "TIMEOUT")
    table: list[tuple[Any, ...]] = [
        (f"{p.name}*" if p.name == current else p.name, p.brokers, p.timeout)
        for p in ordered]
    if with_properties:
        header += ("PROPERTIES",)
        table = [(*t, ",".join(p.properties) or "-") for t, p in zip(table, ordered,
                                                                     strict=True)]
    print_table(header, table, flexible=("BROKERS",))
    return 0


def delete(args: argparse.Namespace) -> int:
    current, profiles = load()
    if profiles.pop(args.name, None) is None:
        raise CliError(f"no profile named {args.name!r} (see 'strom profile list')")
    save(None if current == args.name else current, profiles)
    return _done(args, {"name": args.name, "deleted": True}, f"Deleted profile {args.name}.")
