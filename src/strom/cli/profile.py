"""``strom profile create|use|list|delete``: broker addresses typed once, as ``rpk profile``.

Profiles live in ``$XDG_CONFIG_HOME/strom/profiles.toml`` (``~/.config/strom/profiles.toml``
when XDG_CONFIG_HOME is unset)::

    current = "prod"

    [profiles.prod]
    brokers = "kafka1:9092,kafka2:9092"
    timeout = 5.0                          # optional, seconds

The file is rewritten whole (temp file + rename) on every change, so a crash leaves either the
old or the new file. ``-b`` and ``STROM_BROKERS`` still win over the current profile.
"""

from __future__ import annotations

import argparse
import json
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strom.cli.connection import parse_addresses
from strom.cli.errors import CliError
from strom.cli.output import print_json, print_table


@dataclass(frozen=True)
class Profile:
    name: str
    brokers: str
    timeout: float | None = None


def config_dir() -> Path:
    """The user's strom config directory (XDG base directory rules)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "strom"


def profiles_file() -> Path:
    return config_dir() / "profiles.toml"


def load() -> tuple[str | None, dict[str, Profile]]:
    """(current profile name, profiles by name); empty when there is no file yet."""
    path = profiles_file()
    try:
        doc = tomllib.loads(path.read_text())
    except FileNotFoundError:
        return None, {}
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read profiles from {path}: {exc}") from None
    profiles: dict[str, Profile] = {}
    for name, body in (doc.get("profiles") or {}).items():
        if not isinstance(body, dict):
            raise CliError(f"{path}: [profiles.{name}] must be a table")
        raw_timeout = body.get("timeout")
        profiles[name] = Profile(
            name, str(body.get("brokers", "")), float(raw_timeout) if raw_timeout else None
        )
    current = doc.get("current")
    return (str(current) if current else None), profiles


def save(current: str | None, profiles: dict[str, Profile]) -> None:
    """Write the whole file atomically."""
    lines = []
    if current:
        lines += [f"current = {json.dumps(current)}", ""]
    for p in profiles.values():
        lines.append(f"[profiles.{json.dumps(p.name)}]")
        lines.append(f"brokers = {json.dumps(p.brokers)}")
        if p.timeout is not None:
            lines.append(f"timeout = {float(p.timeout)!r}")
        lines.append("")
    path = profiles_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".toml.tmp")
        tmp.write_text("\n".join(lines))
        os.replace(tmp, path)
    except OSError as exc:
        raise CliError(f"cannot write {path}: {exc.strerror or exc}") from None


def current_profile(name: str | None = None) -> Profile | None:
    """The profile named ``name`` (``--profile``; must exist) or the current one, if any."""
    current, profiles = load()
    if name:
        if name not in profiles:
            raise CliError(f"no profile named {name!r} (see 'strom profile list')")
        return profiles[name]
    return profiles.get(current) if current else None


def add_parser(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register ``profile`` and its subcommands."""
    prof = subparsers.add_parser(
        "profile", help="saved broker addresses (create, use, list, delete)", parents=parents
    )
    sub = prof.add_subparsers(dest="profile_command", metavar="COMMAND", required=True)
    p = sub.add_parser("create", help="save a profile and make it current", parents=parents)
    p.add_argument("name", metavar="NAME", help="profile name")
    _format(p)
    p.set_defaults(func=create)
    p = sub.add_parser("use", help="make a profile the current one", parents=parents)
    p.add_argument("name", metavar="NAME", help="profile name")
    _format(p)
    p.set_defaults(func=use)
    p = sub.add_parser("list", help="list profiles (* marks the current one)", parents=parents)
    _format(p)
    p.set_defaults(func=list_)
    p = sub.add_parser("delete", help="delete a profile", parents=parents)
    p.add_argument("name", metavar="NAME", help="profile name")
    _format(p)
    p.set_defaults(func=delete)


def _format(p: argparse.ArgumentParser) -> None:
    from strom.cli.clients import add_format_option

    add_format_option(p)


def create(args: argparse.Namespace) -> int:
    """Save NAME with ``-b`` (required) and ``--timeout``; it becomes the current profile."""
    brokers = getattr(args, "bootstrap_server", None)
    if not brokers:
        raise CliError("profile create needs the broker address: -b HOST:PORT[,HOST:PORT]")
    parse_addresses(brokers)  # malformed addresses are refused now, not at first use
    if not args.name.strip() or args.name.startswith("-"):
        raise CliError(f"invalid profile name {args.name!r}")
    _, profiles = load()
    profiles[args.name] = Profile(args.name, brokers, getattr(args, "timeout", None))
    save(args.name, profiles)
    return _done(args, {"name": args.name, "brokers": brokers, "current": True},
                 f"Created profile {args.name} (brokers {brokers}) and switched to it.")


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
    current, profiles = load()
    rows = [
        {"name": p.name, "brokers": p.brokers, "timeout": p.timeout, "current": p.name == current}
        for p in sorted(profiles.values(), key=lambda p: p.name)
    ]
    if args.format == "json":
        print_json(rows)
    else:
        print_table(
            ("NAME", "BROKERS", "TIMEOUT"),
            [(f"{r['name']}*" if r["current"] else r["name"], r["brokers"], r["timeout"])
             for r in rows],
        )
    return 0


def delete(args: argparse.Namespace) -> int:
    current, profiles = load()
    if profiles.pop(args.name, None) is None:
        raise CliError(f"no profile named {args.name!r} (see 'strom profile list')")
    save(None if current == args.name else current, profiles)
    return _done(args, {"name": args.name, "deleted": True}, f"Deleted profile {args.name}.")
