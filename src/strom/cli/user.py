"""``strom user create|list|delete``: SCRAM users (``kafka-configs.sh --entity-type users
--alter --add-config 'SCRAM-SHA-256=[...]'`` and ``kafka-storage format --add-scram``).

Online (the default) through the broker's AlterUserScramCredentials /
DescribeUserScramCredentials (:mod:`strom.admin.users`): the client salts and hashes the
password, the broker stores Kafka's keys. Offline, with no broker running, ``--data-dir DIR``
writes straight into a single node's embedded metadata store (refused while a broker runs on
that directory) and ``--zookeeper HOST:PORT[/chroot]`` into a cluster's ZooKeeper (safe while
brokers run: they watch the nodes), so the first user of a secured cluster can exist before
any broker accepts a login. The password comes from ``--password``, else ``--password-file``,
else a prompt (or one line of standard input when it is not a terminal).
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import importlib
import sys
from pathlib import Path
from typing import Any

from strom import pidfile
from strom.admin import users
from strom.cli.clients import session
from strom.cli.errors import CliError
from strom.cli.options import add_client_options, add_format_option
from strom.cli.output import print_json, print_table
from strom.metadata.embedded import EmbeddedStore
from strom.metadata.store import MetadataStore, StoreError
from strom.security import scram_credentials as sc
from strom.security.sasl.scram import MECHANISMS as TYPES
from strom.security.sasl.scram import mechanism_of_type

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def add_parser(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("user", parents=parents,
                                   help="SCRAM users (create, list, delete)")  # fmt: skip
    sub = parser.add_subparsers(dest="user_command", metavar="COMMAND", required=True)

    def offline(p: argparse.ArgumentParser) -> None:
        where = p.add_mutually_exclusive_group()
        where.add_argument("--data-dir", type=Path, metavar="DIR",
                           help="write into this single node's data dir (no broker running)")
        where.add_argument("--zookeeper", metavar="CONNECT",
                           help="write into this ZooKeeper (a cluster's zookeeper.connect)")

    p = sub.add_parser("create", parents=parents,
                       help="create a user, or give it a new password")  # fmt: skip
    p.add_argument("name", metavar="USER")
    p.add_argument("--password", help="the password (default: --password-file, else a prompt)")
    p.add_argument("--password-file", type=Path, metavar="FILE",
                   help="read the password from the first line of FILE")
    p.add_argument("--mechanism", action="append", choices=MECHANISMS, type=str.upper,
                   help="SCRAM mechanism, repeatable (default: both)")
    p.add_argument("--iterations", type=int, default=users.DEFAULT_ITERATIONS, metavar="N",
                   help="PBKDF2 iterations, 4096-16384 (default 4096)")
    offline(p)
    add_client_options(p)
    p.set_defaults(func=create)
    p = sub.add_parser("list", parents=parents, help="users with SCRAM credentials")
    offline(p)
    add_client_options(p)
    add_format_option(p)
    p.set_defaults(func=list_)
    p = sub.add_parser("delete", parents=parents, help="delete a user's SCRAM credentials")
    p.add_argument("name", metavar="USER")
    p.add_argument("--mechanism", action="append", choices=MECHANISMS, type=str.upper,
                   help="only this mechanism, repeatable (default: every one it has)")
    offline(p)
    add_client_options(p)
    p.set_defaults(func=delete)


def _password(args: argparse.Namespace) -> str:
    if args.password is not None:
        return str(args.password)
    if args.password_file is not None:
        try:
            text = args.password_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CliError(f"cannot read {args.password_file}: {exc}") from None
        return text.splitlines()[0] if text else ""
    if sys.stdin.isatty():
        first = getpass.getpass(f"password for {args.name}: ")
        if getpass.getpass("again: ") != first:
            raise CliError("the passwords do not match")
        return first
    return sys.stdin.readline().rstrip("\n")


# offline: straight into a metadata store ------------------------------------------------------
def _store(args: argparse.Namespace) -> MetadataStore:
    if args.zookeeper:
        # by name, as main.py loads `strom serve`: kazoo only for --zookeeper, not every command
        zookeeper = importlib.import_module("strom.metadata.zookeeper")
        store: MetadataStore = zookeeper.ZooKeeperStore(
            args.zookeeper, session_timeout_ms=10_000,
            connection_timeout_ms=int(args.timeout * 1000))  # fmt: skip
        return store
    data_dir: Path = args.data_dir
    if not data_dir.is_dir():
        raise CliError(f"{data_dir} is not a directory")
    running = pidfile.read(data_dir / pidfile.FILE_NAME)
    if running and pidfile.is_running(running["pid"], running.get("start_time")):
        raise CliError(f"a broker (pid {running['pid']}) is running on {data_dir}: use "
                       "'strom user ...' against it (without --data-dir)")  # fmt: skip
    return EmbeddedStore(data_dir)


async def _offline(args: argparse.Namespace, work: Any) -> Any:
    store = _store(args)
    try:
        await store.start()
    except StoreError as exc:
        raise CliError(f"cannot open the metadata store: {exc or type(exc).__name__}") from None
    try:
        return await work(store)
    finally:
        await store.close()


def _offline_results(results: list[Any]) -> None:
    failed = [r for r in results if int(r.error) != 0]
    if failed:
        r = failed[0]
        raise CliError(f"user {r.user!r}: {r.message or r.error.name.upper()}")


def create(args: argparse.Namespace) -> int:
    password = _password(args)
    if not password:
        raise CliError("a password must not be empty")
    mechanisms = args.mechanism or list(MECHANISMS)
    if args.data_dir or args.zookeeper:
        ups = [sc.upsertion(args.name, m, password, args.iterations) for m in mechanisms]
        _offline_results(asyncio.run(_offline(args, lambda s: sc.alter_in_store(s, ups, []))))
    else:
        users.create(session(args), args.name, password, mechanisms, args.iterations)
    print(f"user {args.name}: {', '.join(mechanisms)} credentials set "
          f"({args.iterations} iterations)")  # fmt: skip
    return 0


def list_(args: argparse.Namespace) -> int:
    if args.data_dir or args.zookeeper:
        found = asyncio.run(_offline(args, lambda s: sc.describe_in_store(s, None)))
        rows = [users.UserCredentials(r.user, tuple(sorted((mechanism_of_type(m) or str(m), i)
                                                           for m, i in r.credentials)))
                for r in found]  # fmt: skip
    else:
        rows = users.describe(session(args))
    if args.format == "json":
        print_json([{"user": r.user, "credentials": [{"mechanism": m, "iterations": i}
                                                     for m, i in r.credentials]}
                    for r in rows])  # fmt: skip
    else:
        print_table(["USER", "MECHANISMS"],
                    [[r.user, ", ".join(f"{m} ({i} iterations)" for m, i in r.credentials)]
                     for r in rows])  # fmt: skip
    return 0


def delete(args: argparse.Namespace) -> int:
    if args.data_dir or args.zookeeper:
        async def work(store: Any) -> list[Any]:
            mechanisms = args.mechanism
            if not mechanisms:
                described = await sc.describe_in_store(store, [args.name])
                if not described or int(described[0].error) != 0:
                    raise CliError(f"user {args.name!r} has no SCRAM credentials")
                mechanisms = [m for m, (_h, t) in TYPES.items()
                              if t in {c for c, _ in described[0].credentials}]  # fmt: skip
            dels = [sc.Deletion(args.name, TYPES[m][1]) for m in mechanisms]
            results = await sc.alter_in_store(store, [], dels)
            _offline_results(results)
            return list(mechanisms)

        deleted = asyncio.run(_offline(args, work))
    else:
        deleted = users.delete(session(args), args.name, args.mechanism)
    print(f"user {args.name}: {', '.join(deleted)} credentials deleted")
    return 0
