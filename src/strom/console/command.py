"""``strom console``: the console's own command line (as ``strom serve``'s is the broker's).

The ``strom`` command finds this module by name (:data:`strom.cli.main.PACKAGE_COMMANDS`)
and calls :func:`add_arguments` and :func:`run`; the CLI and the console import nothing of
each other. This module imports no web framework: :func:`run` first checks for the
``console`` extra (Starlette, uvicorn, Jinja2) and says in one line what is missing instead of
failing half-way through start-up.
"""

from __future__ import annotations

import argparse
import importlib.util

from strom.admin.errors import InvalidInputError

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


def run(args: argparse.Namespace) -> int:
    missing = [name for name in REQUIRED if importlib.util.find_spec(name) is None]
    if missing:
        raise InvalidInputError(f"strom console needs the 'console' extra (pip install "
                                f"'strom[console]'): {', '.join(missing)} not installed")
    if not args.sample_interval > 0:
        raise InvalidInputError("--sample-interval must be a positive number of seconds")
    from strom.console.server import serve  # the web stack, only now

    return serve(args)
