"""The options every client command shares: where the broker is, how long to wait for it,
librdkafka properties (``-X``) and ``--format``."""

from __future__ import annotations

import argparse

from strom.cli.output import FORMATS


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    """``-b``, ``--timeout``, ``--profile``: accepted before and after any subcommand.

    Defaults are suppressed so a value given at either level survives argparse's merge of
    the subcommand's namespace; :func:`strom.cli.main.main` fills in the defaults.
    """
    parser.add_argument(
        "-b",
        "--bootstrap-server",
        "--brokers",
        dest="bootstrap_server",
        default=argparse.SUPPRESS,
        metavar="HOST:PORT",
        help="broker(s) to connect to, comma-separated (default: $STROM_BROKERS, the current "
        "profile, or localhost:9092)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=argparse.SUPPRESS,
        metavar="SECONDS",
        help="how long to wait for the broker before giving up (default 10)",
    )
    parser.add_argument(
        "--profile",
        default=argparse.SUPPRESS,
        metavar="NAME",
        help="use this profile's broker address (default: the current profile)",
    )


def add_client_options(parser: argparse.ArgumentParser, *, listing: bool = False) -> None:
    """``-X`` client properties (and ``--format`` for commands with a result to print)."""
    parser.add_argument(
        "-X",
        "--client-config",
        action="append",
        default=[],
        metavar="K=V",
        help="librdkafka client property, repeatable (e.g. -X partitioner=consistent_random)",
    )
    if listing:
        add_format_option(parser)


def add_format_option(parser: argparse.ArgumentParser) -> None:
    """``--format text|json`` (json: always a list, one object per row)."""
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default="text",
        help="output: aligned text, or json (always a list)",
    )
