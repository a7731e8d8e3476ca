"""``strom console``: the console's own command line (as ``strom serve``'s is the broker's).

The ``strom`` command finds this module by name (:data:`strom.cli.main.PACKAGE_COMMANDS`)
and calls :func:`add_arguments` and :func:`run`; the CLI and the console import nothing of
each other. This module imports no web framework: :func:`run` first checks for the
``console`` extra (Starlette, uvicorn, Jinja2) and says in one line what is missing instead of
failing half-way through start-up.
"""

from __future__ import annotations

import argparse
import getpass
import importlib.util
import sys
from pathlib import Path

from strom.admin.errors import InvalidInputError
from strom.security.passwords import PasswordFileError, set_user

HELP = "serve the web console"
REQUIRED = ("starlette", "uvicorn", "jinja2")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--listen", default="127.0.0.1:8080", metavar="HOST:PORT",
                   help="address of the console's web server (default 127.0.0.1:8080)")
    p.add_argument("--read-only", action="store_true",
                   help="no changes: write actions hidden and refused (HTTP 403)")
    p.add_argument("--open", action="store_true", help="open the console in a web browser")
    p.add_argument("--connect-url", "--url", dest="connect_url", metavar="URL",
                   help="a Kafka Connect REST API to show connectors from "
                        "(e.g. http://127.0.0.1:8083; the name 'strom connector' uses too)")
    p.add_argument("--sample-interval", type=float, default=5.0, metavar="SECONDS",
                   help="how often the throughput sparkline samples log end offsets (default 5)")
    p.add_argument("-X", "--client-config", action="append", default=[], metavar="K=V",
                   help="librdkafka client property, repeatable")
    p.add_argument("--users-file", metavar="FILE",
                   help="turn the login on: users and their scrypt password hashes "
                        "(NAME:$scrypt$...), made with --add-user")
    p.add_argument("--add-user", metavar="NAME",
                   help="add NAME to --users-file (or change its password) and exit; the "
                        "password is read from the terminal, or one line of standard input")
    p.add_argument("--ssl", action="append", default=[], metavar="K=V",
                   help="serve HTTPS: Kafka's ssl.* settings, repeatable (ssl.keystore.location="
                        "PEM key+chain or PKCS12, ssl.keystore.type, ssl.key.password, "
                        "ssl.truststore.location and ssl.client.auth=required for client "
                        "certificates)")


def add_user(path: Path, name: str) -> int:
    """``--add-user``: one user into the users file, no broker needed."""
    if sys.stdin.isatty():
        password = getpass.getpass(f"password for {name}: ")
        if getpass.getpass("again: ") != password:
            raise InvalidInputError("the two passwords differ")
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise InvalidInputError("empty password refused")
    try:
        new = set_user(path, name, password)
    except PasswordFileError as exc:
        raise InvalidInputError(str(exc)) from None
    print(f"user {name} {'added to' if new else 'changed in'} {path}")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.add_user is not None:
        if not args.users_file:
            raise InvalidInputError("--add-user needs --users-file FILE")
        return add_user(Path(args.users_file), args.add_user)
    needed = (*REQUIRED, "itsdangerous") if args.users_file else REQUIRED  # the session cookie
    missing = [name for name in needed if importlib.util.find_spec(name) is None]
    if missing:
        raise InvalidInputError(f"strom console needs the 'console' extra (pip install "
                                f"'strom[console]'): {', '.join(missing)} not installed")
    if not args.sample_interval > 0:
        raise InvalidInputError("--sample-interval must be a positive number of seconds")
    from strom.console.server import serve  # the web stack, only now

    return serve(args)
