"""``strom consume TOPIC...``: print messages, one a line (text, JSON lines or a template).

Without ``--group`` the consumer assigns itself the partitions (no group, nothing committed)
and starts where ``--offset`` says: ``start``, ``end`` (default), ``N`` (absolute), ``-N``
(N before the end of each partition) or ``@TIME`` (ISO 8601 or epoch ms). With ``--group`` it
subscribes as a group member and commits what it has *written*: a message's offset is stored
only after its line was written and flushed to stdout, so Ctrl-C while stdout is slow never
commits a message that was not printed (it is printed again by the next run instead).

Exit status: 0 when done (``--max-messages`` reached, ``-e`` caught up with the end of every
partition — with ``--group``, of every partition assigned to this member —, or
``--timeout-ms`` without a message), 130 when stopped by Ctrl-C, 143 by SIGTERM,
1 on an error.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import signal
import sys
import time
from typing import Any, BinaryIO

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    Message,
    TopicPartition,
)

from strom.admin.errors import describe_kafka_error
from strom.admin.offsets import Position
from strom.admin.timestamps import parse_datetime_ms
from strom.cli.clients import consumer, session
from strom.cli.consume_format import ENCODINGS, compile_template, message_json, text_line
from strom.cli.errors import CliError
from strom.cli.options import add_client_options

#: Errors that end ``consume``; others (broker down, rebalances) are retried by the client.
_FATAL_CODES = {
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_PARTITION,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.INVALID_GROUP_ID,
}
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


def add_parser(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register ``consume``."""
    p = subparsers.add_parser(
        "consume",
        help="print messages of topics",
        parents=parents,
        description="Print messages of one or more topics.",
        epilog="Exit status: 0 done or caught up, 130 stopped by Ctrl-C, 143 by SIGTERM, "
        "1 error.",
    )
    p.add_argument("topics", nargs="+", metavar="TOPIC", help="topic(s) to read")
    p.add_argument("--regex", "-r", action="store_true", help="TOPICs are regular expressions")
    p.add_argument(
        "--offset",
        "-o",
        metavar="WHERE",
        help="start at: start, end (default), N, -N (N before the end), @TIME (ISO 8601 or "
        "epoch ms)",
    )
    p.add_argument(
        "--from-beginning", action="store_true", help="same as --offset start"
    )
    p.add_argument("--partition", "-p", type=int, metavar="N", help="read only partition N")
    p.add_argument(
        "--max-messages", "-n", type=int, metavar="N", help="exit after N messages"
    )
    p.add_argument(
        "--exit-on-end", "-e", action="store_true",
        help="exit once every partition is read to its end (caught up; with --group: every "
        "partition assigned to this member)",
    )
    p.add_argument(
        "--group", "-g", metavar="G",
        help="consume as a member of group G, committing what was printed",
    )
    p.add_argument(
        "--format",
        "-f",
        default="text",
        metavar="FORMAT",
        help="text (default), json (one object a line) or a template like '%%k %%p %%o %%T "
        "%%v\\n' (%%t topic %%p partition %%o offset %%T ms %%d ISO time %%k key %%v value "
        "%%h headers %%K %%V lengths, %%S as %%V)",
    )
    p.add_argument(
        "--value-encoding",
        choices=ENCODINGS,
        help="how keys, values and header values are written (json default: utf8; "
        "templates: raw bytes)",
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
    p.set_defaults(func=run)


def parse_offset(text: str) -> Position:
    """``start|end|N|-N|@TIME`` to a :class:`~strom.admin.offsets.Position`."""
    value = text.strip()
    if value in ("start", "beginning", "oldest", "earliest"):
        return Position("start")
    if value in ("end", "newest", "latest"):
        return Position("end")
    if value.startswith("@"):
        moment = value[1:]
        if moment.isdigit():
            return Position("time", int(moment))
        return Position("time", parse_datetime_ms(moment, "--offset"))
    try:
        number = int(value)
    except ValueError:
        raise CliError(
            f"invalid --offset {text!r}: expected start, end, N, -N or @TIME"
        ) from None
    return Position("tail", -number) if number < 0 else Position("absolute", number)


def _validate(args: argparse.Namespace) -> None:
    if args.max_messages is not None and args.max_messages < 1:
        raise CliError("--max-messages must be at least 1")
    if args.from_beginning and args.offset is not None:
        raise CliError("--from-beginning and --offset cannot be used together")
    args.start = parse_offset(args.offset) if args.offset is not None else (
        Position("start") if args.from_beginning else Position("end")
    )
    if args.group and args.start[0] not in ("start", "end"):
        raise CliError(
            "--offset with --group takes start or end only (use 'strom group seek' to move "
            "a group's offsets)"
        )
    if args.group and args.partition is not None:
        raise CliError("--partition cannot be used with --group")


def _renderer(args: argparse.Namespace) -> Any:
    if args.format == "json":
        return lambda msg: message_json(msg, args.value_encoding)
    if args.format == "text":
        if args.value_encoding not in (None, "utf8"):
            return compile_template("%k" + args.key_separator + "%v\\n", args.value_encoding) \
                if args.print_key else compile_template("%v\\n", args.value_encoding)
        return text_line(args.print_key, args.key_separator.encode())
    if "%" not in args.format:
        raise CliError(f"invalid --format {args.format!r}: text, json, or a template with %v")
    return compile_template(args.format, args.value_encoding)


def _topics(args: argparse.Namespace, md: Any) -> list[str]:
    """The topic names to read: the arguments, or the topics their regexes match."""
    if not args.regex:
        for name in args.topics:
            topic_md = md.topics.get(name)
            if topic_md is None or topic_md.error is not None:
                reason = (describe_kafka_error(topic_md.error) if topic_md is not None
                          else "topic does not exist")
                raise CliError(f"cannot consume from {name!r}: {reason}")
        return list(dict.fromkeys(args.topics))
    try:
        patterns = [re.compile(p) for p in args.topics]
    except re.error as exc:
        raise CliError(f"invalid --regex pattern: {exc}") from None
    names = sorted(
        n for n in md.topics
        if not n.startswith("__") and any(p.fullmatch(n) for p in patterns)
    )
    if not names:
        raise CliError(f"no topic matches {' '.join(args.topics)!r}")
    return names


def _start_offsets(cons: Consumer, args: argparse.Namespace, parts: list[TopicPartition]) -> None:
    """Set each partition's start offset from ``args.start`` (assign mode)."""
    kind, number = args.start
    if kind == "start":
        for tp in parts:
            tp.offset = OFFSET_BEGINNING
    elif kind == "end":
        for tp in parts:
            tp.offset = OFFSET_END
    elif kind == "absolute":
        for tp in parts:
            tp.offset = number
    elif kind == "tail":
        for tp in parts:
            low, high = cons.get_watermark_offsets(tp, timeout=session(args).timeout)
            tp.offset = max(low, high - number)
    else:
        query = [TopicPartition(tp.topic, tp.partition, number) for tp in parts]
        found = cons.offsets_for_times(query, timeout=session(args).timeout)
        for tp, hit in zip(parts, found, strict=True):
            tp.offset = hit.offset if hit.offset >= 0 else OFFSET_END


def _setup(args: argparse.Namespace, state: dict[str, Any]) -> Consumer:
    """A consumer assigned to the partitions directly, or subscribed as a group member."""
    reset = "earliest" if args.start[0] == "start" else "latest"
    extra: dict[str, Any] = {"auto.offset.reset": reset, "isolation.level": args.isolation_level}
    if args.group:
        # commit only what was written: offsets are stored by hand after each write
        extra.update(
            {"group.id": args.group, "enable.auto.commit": True, "enable.auto.offset.store": False}
        )
    if args.exit_on_end:
        extra["enable.partition.eof"] = True
    cons = consumer(args, extra)
    try:
        md = session(args).metadata(client=cons)
        topics = _topics(args, md)
        if args.group:

            state["pending_eof"] = set()

            def on_assign(_c: Consumer, parts: list[TopicPartition]) -> None:
                state["last"] = time.monotonic()
                state["pending_eof"] |= {(tp.topic, tp.partition) for tp in parts}
                state["assigned"] = True

            def on_revoke(_c: Consumer, parts: list[TopicPartition]) -> None:
                state["pending_eof"] -= {(tp.topic, tp.partition) for tp in parts}

            cons.subscribe(topics, on_assign=on_assign, on_revoke=on_revoke)
            return cons
        parts = []
        for name in topics:
            available = sorted(md.topics[name].partitions)
            if args.partition is not None:
                if args.partition not in available:
                    raise CliError(f"topic {name!r} has no partition {args.partition}")
                available = [args.partition]
            parts += [TopicPartition(name, p) for p in available]
        _start_offsets(cons, args, parts)
        state["pending_eof"] = {(tp.topic, tp.partition) for tp in parts}
        state["assigned"] = True
        cons.assign(parts)
    except BaseException:
        cons.close()
        raise
    return cons


_stopped_by: list[int] = []


def _interrupt(signum: int, _frame: object) -> None:
    _stopped_by.append(signum)
    raise KeyboardInterrupt


def run(args: argparse.Namespace, out: BinaryIO | None = None) -> int:
    """Poll and write until done (exit 0) or stopped (130 Ctrl-C, 143 SIGTERM)."""
    _validate(args)
    render = _renderer(args)
    state: dict[str, Any] = {"last": time.monotonic()}
    cons = _setup(args, state)
    sink = out if out is not None else sys.stdout.buffer
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    count = 0
    code = 0
    try:
        while args.max_messages is None or count < args.max_messages:
            msg = cons.poll(0.2)
            now = time.monotonic()
            if msg is None:
                if args.timeout_ms is not None and (now - state["last"]) * 1000 >= args.timeout_ms:
                    break
                continue
            if not _usable(msg, args, state):
                if args.exit_on_end and not state["pending_eof"] and state.get("assigned"):
                    break  # caught up with every partition assigned (as a member: to us)
                continue
            state["last"] = now
            sink.write(render(msg))
            sink.flush()
            if args.group:
                cons.store_offsets(msg)  # only now: the line is out
            count += 1
    except KeyboardInterrupt:
        code = EXIT_TERMINATED if _stopped_by[-1:] == [signal.SIGTERM] else EXIT_INTERRUPTED
    finally:
        with contextlib.suppress(KeyboardInterrupt):
            cons.close()  # commits the stored offsets of a group member
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if args.verbose:
        print(f"Processed a total of {count} messages", file=sys.stderr)
    return code


def _usable(msg: Message, args: argparse.Namespace, state: dict[str, Any]) -> bool:
    """True for a message to write; handles end-of-partition events and errors."""
    err = msg.error()
    if err is None:
        return True
    if err.code() == KafkaError._PARTITION_EOF:
        state.get("pending_eof", set()).discard((msg.topic(), msg.partition()))
        return False
    if err.fatal() or err.code() in _FATAL_CODES:
        raise CliError(f"cannot consume from {msg.topic()!r}: {describe_kafka_error(err)}")
    if args.verbose:
        print(f"warning: {describe_kafka_error(err)}", file=sys.stderr)
    return False
