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

from strom import __version__
from strom.admin.errors import AdminError, describe_kafka_error
from strom.admin.session import LIBRDKAFKA_LOG
from strom.cli import (
    acl,
    cluster,
    completion,
    connect,
    connector,
    consume,
    group,
    produce,
    profile,
    quota,
    share_group,
    topic,
    txn,
    user,
)
from strom.cli.connection import ENV_BROKERS, resolve_bootstrap, resolve_timeout
from strom.cli.errors import CliError, exit_code
from strom.cli.options import add_connection_options

PROG = "strom"
_SUBCOMMANDS = (topic, produce, consume, group, share_group, cluster, profile, txn, acl, quota, user,
                connect, connector)  # fmt: skip
#: Commands other packages define (their own ``add_arguments(parser)`` and ``run(args)``),
#: found by module name so the CLI imports none of them: the web console.
PACKAGE_COMMANDS = {"console": "strom.console.command"}


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr (exit code 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (try '{self.prog} --help')\n")


def _verbosity_parent(
    help_text: str = "more output (-vv: client logs, -vvv: protocol debug)",
) -> Parser:
    """``-v`` accepted after any subcommand too (not only before it)."""
    parent = Parser(add_help=False)
    parent.add_argument(
        "-v", "--verbose", action="count", default=argparse.SUPPRESS, help=help_text
    )
    return parent


def _common_parent() -> Parser:
    """``-v``, ``-b``, ``--timeout``, ``--profile``: valid before or after any subcommand."""
    parent = Parser(add_help=False, parents=[_verbosity_parent()])
    add_connection_options(parent)
    return parent


def version_text() -> str:
    """``strom --version``: strom's version and the client library's."""
    import confluent_kafka

    return (
        f"{PROG} {__version__} (confluent-kafka {confluent_kafka.version()}, "
        f"librdkafka {confluent_kafka.libversion()[0]})"
    )


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
    parser = Parser(
        prog=PROG,
        description="strom: a Kafka-compatible event streaming platform",
        epilog=f"Broker address: -b, ${ENV_BROKERS}, the current profile, or localhost:9092.",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="more output (-vv: client logs, -vvv: protocol debug)",
    )
    parser.add_argument(
        "--version", action="version", version=version_text(), help="print the version and exit"
    )
    add_connection_options(parser)
    parents = [_common_parent()]
    sub = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=Parser
    )
    if _wants_serve(argv):
        _add_serve(sub, [_verbosity_parent("DEBUG logs (as --log-level DEBUG)")])
    else:
        sub.add_parser("serve", help="run a strom broker", add_help=False)
    no_broker = [_verbosity_parent()]  # a Connect worker's commands take no broker options
    for module in _SUBCOMMANDS:
        module.add_parser(sub, no_broker if module in (connect, connector) else parents)
    for name, path in PACKAGE_COMMANDS.items():
        command = importlib.import_module(path)
        p = sub.add_parser(name, help=command.HELP, parents=parents)
        command.add_arguments(p)
        p.set_defaults(func=command.run)
    completion.add_parser(sub, [_verbosity_parent()], build_parser)
    return parser


def _wants_serve(argv: Sequence[str] | None = None) -> bool:
    """Import the broker only when ``serve`` is the command (keeps client commands light)."""
    args = sys.argv[1:] if argv is None else argv
    return any(a in ("serve", "completion") for a in args if not a.startswith("-"))


def _setup_logging(verbose: int) -> None:
    level = logging.DEBUG if verbose >= 3 else logging.INFO if verbose >= 2 else logging.CRITICAL
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    LIBRDKAFKA_LOG.setLevel(level)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(args_list)
    args = parser.parse_args(args_list)
    verbose = getattr(args, "verbose", 0) or 0
    args.verbose = verbose
    _setup_logging(verbose)
    try:
        if args.command not in ("serve", "profile", "completion", "connect", "connector"):
            # every client command sees args.bootstrap_server (flag, env, profile, default)
            args.bootstrap_server = resolve_bootstrap(args)
        args.given_timeout = getattr(args, "timeout", None)
        args.timeout = resolve_timeout(args)
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # here, so a reader gone (EPIPE) is handled below, not at exit
        return code
    except AdminError as exc:
        print(f"{PROG}: error: {exc.message}", file=sys.stderr)
        return exit_code(exc)
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
