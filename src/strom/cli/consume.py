"""``strom consume TOPIC``: print messages, one a line (text or JSON)."""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import time
from typing import Any, BinaryIO

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    Message,
    TopicPartition,
)

from strom.cli.clients import add_client_options, add_format_option, consumer, metadata
from strom.cli.errors import CliError, describe_kafka_error
from strom.cli.output import text

#: Errors that end ``consume``; others (broker down, rebalances) are retried by the client.
_FATAL_CODES = {
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_PARTITION,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.INVALID_GROUP_ID,
}


def add_parser(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register ``consume``."""
    p = subparsers.add_parser("consume", help="print messages of a topic", parents=parents)
    p.add_argument("topic", metavar="TOPIC")
    start = p.add_mutually_exclusive_group()
    start.add_argument(
        "--from-beginning",
        action="store_true",
        help="start at the earliest offset (new group: auto.offset.reset=earliest)",
    )
    start.add_argument("--offset", type=int, metavar="N", help="start at offset N")
    p.add_argument("--partition", type=int, metavar="N", help="read only partition N")
    p.add_argument("--max-messages", type=int, metavar="N", help="exit after N messages")
    p.add_argument(
        "--group", "-g", metavar="G", help="consume as a member of group G, committing offsets"
    )
    p.add_argument("--print-key", action="store_true", help="text: print KEY SEP VALUE")
    p.add_argument(
        "--key-separator",
        default="\t",
        metavar="SEP",
        help="separator for --print-key (default: tab)",
    )
    p.add_argument("--timeout-ms", type=int, metavar="MS", help="exit after MS without a message")
    p.add_argument(
        "--isolation-level",
        choices=("read_uncommitted", "read_committed"),
        default="read_uncommitted",
        help="read_committed: only committed transactional messages, up to the last stable "
        "offset (default read_uncommitted: everything)",
    )
    add_client_options(p)
    add_format_option(p)
    p.set_defaults(func=run)


def message_json(msg: Message) -> str:
    """One message as a JSON object (bytes decoded as UTF-8 with replacement)."""
    ts_type, ts = msg.timestamp()
    raw_headers: list[tuple[str, Any]] = list(msg.headers() or [])  # type: ignore[arg-type]
    headers = [[k, text(v)] for k, v in raw_headers]
    return json.dumps(
        {
            "topic": msg.topic(),
            "partition": msg.partition(),
            "offset": msg.offset(),
            "timestamp": None if ts_type == TIMESTAMP_NOT_AVAILABLE else ts,
            "key": text(msg.key()),
            "value": text(msg.value()),
            "headers": headers,
        },
        ensure_ascii=False,
    )


def message_text(msg: Message, print_key: bool, separator: bytes) -> bytes:
    """One message as a text line: value, or key SEP value; a null prints as ``null``."""
    value = msg.value()
    line = b"null" if value is None else value
    if print_key:
        key = msg.key()
        line = (b"null" if key is None else key) + separator + line
    return line + b"\n"


def _validate(args: argparse.Namespace) -> None:
    if args.max_messages is not None and args.max_messages < 1:
        raise CliError("--max-messages must be at least 1")
    if args.group and args.offset is not None:
        raise CliError("--offset cannot be used with --group (use 'strom group reset-offsets')")
    if args.group and args.partition is not None:
        raise CliError("--partition cannot be used with --group")
    if args.offset is not None and args.offset < 0:
        raise CliError("--offset must be >= 0")


def _setup(args: argparse.Namespace, state: dict[str, float]) -> Consumer:
    """A consumer either assigned to the partitions directly or subscribed as a group member."""
    if args.group:
        cons = consumer(
            args,
            {
                "group.id": args.group,
                "enable.auto.commit": True,
                "auto.offset.reset": "earliest" if args.from_beginning else "latest",
                "isolation.level": args.isolation_level,
            },
        )
    else:
        cons = consumer(
            args, {"auto.offset.reset": "earliest" if args.from_beginning else "latest",
                   "isolation.level": args.isolation_level}  # fmt: skip
        )
    md = metadata(cons, args, args.topic)
    topic_md = md.topics.get(args.topic)
    if topic_md is None or topic_md.error is not None:
        reason = describe_kafka_error(topic_md.error) if topic_md is not None else "not found"
        cons.close()
        raise CliError(f"cannot consume from {args.topic!r}: {reason}")
    partitions = sorted(topic_md.partitions)
    if args.partition is not None:
        if args.partition not in topic_md.partitions:
            cons.close()
            raise CliError(f"topic {args.topic!r} has no partition {args.partition}")
        partitions = [args.partition]
    if args.group:

        def on_assign(_c: Consumer, _parts: list[TopicPartition]) -> None:
            state["last"] = time.monotonic()

        cons.subscribe([args.topic], on_assign=on_assign)
    else:
        if args.offset is not None:
            start = args.offset
        else:
            start = OFFSET_BEGINNING if args.from_beginning else OFFSET_END
        cons.assign([TopicPartition(args.topic, p, start) for p in partitions])
    return cons


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace, out: BinaryIO | None = None) -> int:
    """Poll and print until --max-messages, --timeout-ms idle, or Ctrl-C."""
    _validate(args)
    state = {"last": time.monotonic()}
    cons = _setup(args, state)
    sink = out if out is not None else sys.stdout.buffer
    previous = signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM: same clean exit as Ctrl-C
    separator = args.key_separator.encode()
    count = 0
    try:
        while args.max_messages is None or count < args.max_messages:
            msg = cons.poll(0.2)
            now = time.monotonic()
            if msg is None:
                if args.timeout_ms is not None and (now - state["last"]) * 1000 >= args.timeout_ms:
                    break
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                if err.fatal() or err.code() in _FATAL_CODES:
                    raise CliError(
                        f"cannot consume from {args.topic!r}: {describe_kafka_error(err)}"
                    )
                if args.verbose:
                    print(f"warning: {describe_kafka_error(err)}", file=sys.stderr)
                continue
            state["last"] = now
            if args.format == "json":
                sink.write(message_json(msg).encode() + b"\n")
            else:
                sink.write(message_text(msg, args.print_key, separator))
            sink.flush()
            count += 1
    except KeyboardInterrupt:
        pass
    finally:
        with contextlib.suppress(KeyboardInterrupt):
            cons.close()
        signal.signal(signal.SIGTERM, previous)
    if args.verbose:
        print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0
