"""Entry point of the ``strom`` command: argument parsing and top-level error handling.

Every subcommand module offers ``add_parser(subparsers, parents)`` and sets ``func`` on its
parsers; ``func(args) -> int`` is the exit code. Failures become one line on stderr.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any, NoReturn

from confluent_kafka import KafkaException

from strom.cli.errors import CliError, describe_kafka_error

PROG = "strom"
_SUBCOMMAND_MODULES = (
    "topic", "produce", "consume", "group", "cluster", "connect", "connector",
)


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr (exit code 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (try '{self.prog} --help')\n")


def _verbosity_parent() -> argparse.ArgumentParser:
    """``-v`` accepted after any subcommand too (not only before it)."""
    parent = Parser(add_help=False)
    parent.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=argparse.SUPPRESS,
        help="more output (-vv: client logs, -vvv: protocol debug)",
    )
    return parent


def _add_serve(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    """``strom serve``: the broker's own module defines its options (imported lazily)."""
    p = subparsers.add_parser("serve", help="run a strom broker", parents=parents)
    try:
        serve_cli = importlib.import_module("strom.broker.serve_cli")
    except ImportError as exc:
        reason = str(exc)

        def unavailable(_args: argparse.Namespace) -> int:
            raise CliError(f"'strom serve' is not available in this build: {reason}")

        p.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
        p.set_defaults(func=unavailable)
        return
    serve_cli.add_arguments(p)
    p.set_defaults(func=serve_cli.run)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The full ``strom`` argument parser (``argv`` decides whether to import the broker)."""
    parser = Parser(prog=PROG, description="strom: a Kafka-compatible event streaming platform")
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="more output (-vv: client logs, -vvv: protocol debug)",
    )
    parents = [_verbosity_parent()]
    sub = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=Parser
    )
    if _wants_serve(argv):
        _add_serve(sub, parents)
    else:
        sub.add_parser("serve", help="run a strom broker", add_help=False)
    for name in _SUBCOMMAND_MODULES:
        importlib.import_module(f"strom.cli.{name}").add_parser(sub, parents)
    return parser


def _wants_serve(argv: Sequence[str] | None = None) -> bool:
    """Import the broker only when ``serve`` is the command (keeps client commands light)."""
    args = sys.argv[1:] if argv is None else argv
    return any(a == "serve" for a in args if not a.startswith("-"))


def _setup_logging(verbose: int) -> None:
    level = logging.DEBUG if verbose >= 3 else logging.INFO if verbose >= 2 else logging.CRITICAL
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("strom.cli.librdkafka").setLevel(level)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(args_list)
    args = parser.parse_args(args_list)
    verbose = getattr(args, "verbose", 0) or 0
    args.verbose = verbose
    _setup_logging(verbose)
    try:
        return int(args.func(args) or 0)
    except CliError as exc:
        print(f"{PROG}: error: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except KafkaException as exc:
        print(f"{PROG}: error: {describe_kafka_error(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        _silence_stdout()
        return 0
    except Exception as exc:  # noqa: BLE001 - the user gets one line, -vv the traceback
        if verbose >= 2:
            traceback.print_exc()
        print(f"{PROG}: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def _silence_stdout() -> None:
    """After EPIPE (``strom consume ... | head``), stop Python's exit-time flush complaining."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
