"""``strom produce TOPIC``: one message per stdin line."""

from __future__ import annotations

import argparse
import sys
from typing import Any, BinaryIO

from confluent_kafka import KafkaError, Message

from strom.cli.clients import add_client_options, metadata, producer
from strom.cli.errors import DEFAULT_TIMEOUT_S, CliError, describe_kafka_error

ACKS = ("0", "1", "all", "-1")
COMPRESSION = ("none", "gzip", "snappy", "lz4", "zstd")


def add_parser(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register ``produce``."""
    p = subparsers.add_parser("produce", help="send stdin lines as messages", parents=parents)
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument(
        "--key-separator", metavar="SEP", help="each line is KEY SEP VALUE (split at the first SEP)"
    )
    p.add_argument("--partition", type=int, metavar="N", help="send every message to partition N")
    p.add_argument("--acks", choices=ACKS, default="all")
    p.add_argument("--compression", choices=COMPRESSION, default="none")
    p.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="K=V",
        help="header added to every message, repeatable",
    )
    p.add_argument(
        "--delivery-timeout-ms",
        type=int,
        default=30000,
        metavar="MS",
        help="give up on a message after MS (default 30000)",
    )
    add_client_options(p)
    p.set_defaults(func=run)


def parse_headers(items: list[str]) -> list[tuple[str, bytes]]:
    """``k=v`` strings to header pairs (order and repeats kept)."""
    headers = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(f"invalid header {item!r}: expected KEY=VALUE")
        headers.append((key, value.encode()))
    return headers


def split_line(line: bytes, separator: bytes | None) -> tuple[bytes | None, bytes]:
    """(key, value) of one input line; no separator in the line means no key."""
    if separator:
        key, sep, value = line.partition(separator)
        if sep:
            return key, value
    return None, line


class DeliveryTracker:
    """Counts delivery reports; prints failures (always) and successes (with ``-v``)."""

    def __init__(self, verbose: int) -> None:
        self.verbose = verbose
        self.delivered = 0
        self.failed = 0
        self.first_error: str | None = None

    def __call__(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.failed += 1
            if self.first_error is None:
                self.first_error = describe_kafka_error(err)
            if self.verbose:
                print(f"delivery failed: {describe_kafka_error(err)}", file=sys.stderr)
            return
        self.delivered += 1
        if self.verbose:
            print(f"{msg.topic()} [{msg.partition()}] @ {msg.offset()}", file=sys.stderr)


def run(args: argparse.Namespace, stdin: BinaryIO | None = None) -> int:
    """Read stdin to the end, producing each line; flush; non-zero if any delivery failed."""
    headers = parse_headers(args.header)
    separator = args.key_separator.encode() if args.key_separator else None
    conf: dict[str, Any] = {
        "acks": args.acks,
        "compression.type": args.compression,
        "message.timeout.ms": args.delivery_timeout_ms,
        "linger.ms": 5,
    }
    prod = producer(args, conf)
    md = metadata(prod, args, args.topic)
    topic_md = md.topics.get(args.topic)
    if topic_md is not None and topic_md.error is not None:
        raise CliError(f"cannot produce to {args.topic!r}: {describe_kafka_error(topic_md.error)}")
    if (
        args.partition is not None
        and topic_md is not None
        and (args.partition not in topic_md.partitions)
    ):
        raise CliError(f"topic {args.topic!r} has no partition {args.partition}")
    tracker = DeliveryTracker(args.verbose)
    source = stdin if stdin is not None else sys.stdin.buffer
    extra: dict[str, Any] = {}
    if args.partition is not None:
        extra["partition"] = args.partition
    if headers:
        extra["headers"] = headers
    for raw in source:
        line = raw[:-1] if raw.endswith(b"\n") else raw
        if line.endswith(b"\r"):
            line = line[:-1]
        key, value = split_line(line, separator)
        _produce(prod, args.topic, key, value, tracker, extra)
    remaining = prod.flush(args.delivery_timeout_ms / 1000 + DEFAULT_TIMEOUT_S)
    if remaining:
        raise CliError(f"{remaining} message(s) not delivered to {args.topic!r} in time")
    if tracker.failed:
        raise CliError(
            f"{tracker.failed} of {tracker.failed + tracker.delivered} message(s) not delivered "
            f"to {args.topic!r}: {tracker.first_error}"
        )
    return 0


def _produce(
    prod: Any,
    topic: str,
    key: bytes | None,
    value: bytes,
    tracker: DeliveryTracker,
    extra: dict[str, Any],
) -> None:
    """Queue one message, waiting for room when the local queue is full."""
    while True:
        try:
            prod.produce(topic, value=value, key=key, on_delivery=tracker, **extra)
            prod.poll(0)
            return
        except BufferError:
            prod.poll(0.1)
