"""``strom console``: the web console (:mod:`strom.console`), imported only when run.

Needs the ``console`` extra (Starlette, uvicorn, Jinja2); without it the command says so in
one line instead of failing half-way through start-up.
"""

from __future__ import annotations

import argparse
import importlib.util
from typing import Any

from strom.cli.clients import add_client_options
from strom.cli.errors import CliError

REQUIRED = ("starlette", "uvicorn", "jinja2")


def add_parser(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("console", help="serve the web console", parents=parents)
    p.add_argument("--listen", default="127.0.0.1:8080", metavar="HOST:PORT",
                   help="address of the console's web server (default 127.0.0.1:8080)")
    p.add_argument("--read-only", action="store_true",
                   help="no changes: write actions hidden and refused (HTTP 403)")
    p.add_argument("--open", action="store_true", help="open the console in a web browser")
    p.add_argument("--connect-url", metavar="URL",
                   help="a Kafka Connect REST API to show connectors from "
                        "(e.g. http://127.0.0.1:8083)")
    p.add_argument("--sample-interval", type=float, default=5.0, metavar="SECONDS",
                   help="how often the throughput sparkline samples log end offsets (default 5)")
    add_client_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    missing = [name for name in REQUIRED if importlib.util.find_spec(name) is None]
    if missing:
        raise CliError(f"strom console needs the 'console' extra (pip install "
                       f"'strom[console]'): {', '.join(missing)} not installed")
    if not args.sample_interval > 0:
        raise CliError("--sample-interval must be a positive number of seconds")
    from strom.console.server import serve

    return serve(args)
