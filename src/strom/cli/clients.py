"""Common options and confluent-kafka client construction for every client command.

Every client first passes :func:`strom.cli.connection.preflight` (a refused port, an unknown
host or a malformed address is one specific line at once), then gets socket and metadata
timeouts of ``--timeout`` seconds, and routes librdkafka's own log lines to Python
``logging`` (shown only with ``-vv``) so stderr stays one readable line on error.

Producers hash keys with ``murmur2_random``, the Java client's partitioner (also kafka-python's,
the console producer's and rpk's), so a key lands on the same partition whichever of these
tools wrote it. ``-X partitioner=...`` (any librdkafka property) overrides it.
"""

from __future__ import annotations

import argparse
import logging
import uuid
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from strom.cli.connection import preflight, resolve_bootstrap
from strom.cli.errors import CliError, describe_kafka_error, timeout
from strom.cli.output import FORMATS

LOG = logging.getLogger("strom.cli.librdkafka")
#: The Java client's key hash: the same partition for a key as every Java-based tool.
DEFAULT_PARTITIONER = "murmur2_random"


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


def client_properties(args: argparse.Namespace) -> dict[str, str]:
    """The ``-X K=V`` properties as a dict."""
    result: dict[str, str] = {}
    for item in getattr(args, "client_config", []) or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CliError(f"invalid -X {item!r}: expected KEY=VALUE")
        result[key.strip()] = value
    return result


def base_config(args: argparse.Namespace) -> dict[str, Any]:
    """Client settings shared by producer, consumer and admin client (after a preflight)."""
    args.bootstrap_server = resolve_bootstrap(args)
    if not getattr(args, "preflight_done", False):
        preflight(args.bootstrap_server)
        args.preflight_done = True
    timeout_ms = int(timeout() * 1000)
    conf: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap_server,
        "client.id": "strom-cli",
        "socket.connection.setup.timeout.ms": max(timeout_ms, 1000),
        "socket.timeout.ms": max(timeout_ms, 10),
    }
    verbose = getattr(args, "verbose", 0) or 0
    if verbose < 2:
        conf["logger"] = LOG  # queued, shown only if served: keeps stderr to one line
    if verbose >= 3:
        conf["debug"] = "broker,protocol"
    return conf


def admin_client(args: argparse.Namespace, *, check: bool = True) -> AdminClient:
    """An AdminClient; with ``check`` it first proves the broker answers (metadata request)."""
    conf = base_config(args)
    conf.update(client_properties(args))
    try:
        admin = AdminClient(conf)
    except KafkaException as exc:
        raise CliError(f"invalid client settings: {describe_kafka_error(exc)}") from None
    if check:
        metadata(admin, args)
    return admin


def metadata(client: Any, args: argparse.Namespace, topic: str | None = None) -> Any:
    """Cluster metadata (optionally for one topic), failing clearly if the broker is away."""
    try:
        if topic is None:
            return client.list_topics(timeout=timeout())
        return client.list_topics(topic, timeout=timeout())
    except KafkaException as exc:
        err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
        if err is not None and err.code() in (KafkaError._TRANSPORT, KafkaError._TIMED_OUT):
            raise CliError(
                f"cannot reach the broker at {args.bootstrap_server}: it accepts connections "
                f"but gave no Kafka answer within {timeout():g} s ({describe_kafka_error(exc)})"
            ) from None
        raise CliError(
            f"cannot reach the broker at {args.bootstrap_server}: {describe_kafka_error(exc)}"
        ) from None


def producer(args: argparse.Namespace, extra: dict[str, Any]) -> Producer:
    """A Producer with the common settings, ``extra``, then the user's ``-X`` properties."""
    conf = base_config(args)
    conf["partitioner"] = DEFAULT_PARTITIONER
    conf.update(extra)
    conf.update(client_properties(args))
    try:
        return Producer(conf)
    except KafkaException as exc:
        raise CliError(f"invalid producer settings: {describe_kafka_error(exc)}") from None


def consumer(args: argparse.Namespace, extra: dict[str, Any]) -> Consumer:
    """A Consumer with the common settings plus ``extra`` (a throwaway group by default)."""
    conf = base_config(args)
    conf.update(
        {
            "group.id": f"strom-cli-{uuid.uuid4().hex[:12]}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    conf.update(extra)
    conf.update(client_properties(args))
    try:
        return Consumer(conf)
    except KafkaException as exc:
        raise CliError(f"invalid consumer settings: {describe_kafka_error(exc)}") from None
