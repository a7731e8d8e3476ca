"""Common options and confluent-kafka client construction for every client command.

All clients get short socket/metadata timeouts so an unreachable broker fails within about
:data:`~strom.cli.errors.DEFAULT_TIMEOUT_S` seconds, and route librdkafka's own log lines to
Python ``logging`` (shown only with ``-vv``) so stderr stays one readable line on error.
"""

from __future__ import annotations

import argparse
import logging
import uuid
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from strom.cli.errors import DEFAULT_TIMEOUT_S, CliError, describe_kafka_error
from strom.cli.output import FORMATS

DEFAULT_BOOTSTRAP = "localhost:9092"
LOG = logging.getLogger("strom.cli.librdkafka")


def add_client_options(parser: argparse.ArgumentParser, *, listing: bool = False) -> None:
    """``--bootstrap-server`` (and ``--format`` for listing commands)."""
    parser.add_argument(
        "--bootstrap-server",
        "-b",
        default=DEFAULT_BOOTSTRAP,
        metavar="HOST:PORT",
        help=f"broker(s) to connect to, comma-separated (default {DEFAULT_BOOTSTRAP})",
    )
    if listing:
        add_format_option(parser)


def add_format_option(parser: argparse.ArgumentParser) -> None:
    """``--format text|json``."""
    parser.add_argument("--format", choices=FORMATS, default="text", help="output format")


def base_config(args: argparse.Namespace) -> dict[str, Any]:
    """Client settings shared by producer, consumer and admin client."""
    timeout_ms = int(DEFAULT_TIMEOUT_S * 1000)
    conf: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap_server,
        "client.id": "strom-cli",
        "socket.connection.setup.timeout.ms": timeout_ms,
        "socket.timeout.ms": timeout_ms,
    }
    verbose = getattr(args, "verbose", 0) or 0
    if verbose < 2:
        conf["logger"] = LOG  # queued, shown only if served: keeps stderr to one line
    if verbose >= 3:
        conf["debug"] = "broker,protocol"
    return conf


def admin_client(args: argparse.Namespace, *, check: bool = True) -> AdminClient:
    """An AdminClient; with ``check`` it first proves the broker answers (metadata request)."""
    admin = AdminClient(base_config(args))
    if check:
        metadata(admin, args)
    return admin


def metadata(client: Any, args: argparse.Namespace, topic: str | None = None) -> Any:
    """Cluster metadata (optionally for one topic), failing clearly if the broker is away."""
    try:
        if topic is None:
            return client.list_topics(timeout=DEFAULT_TIMEOUT_S)
        return client.list_topics(topic, timeout=DEFAULT_TIMEOUT_S)
    except KafkaException as exc:
        raise CliError(
            f"cannot reach the broker at {args.bootstrap_server}: {describe_kafka_error(exc)}"
        ) from None


def producer(args: argparse.Namespace, extra: dict[str, Any]) -> Producer:
    """A Producer with the common settings plus ``extra``."""
    conf = base_config(args)
    conf.update(extra)
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
    try:
        return Consumer(conf)
    except KafkaException as exc:
        raise CliError(f"invalid consumer settings: {describe_kafka_error(exc)}") from None
