"""``strom produce TOPIC``: one message per input record (a line by default).

Never loses a line silently. Every record is sent unless it is refused, and every refused
record is reported on stderr with its input line number and the real reason: a malformed line,
the client-side size check (the record batch would exceed the topic's ``max.message.bytes``),
or the broker's own answer. Records the broker refuses as too large are retried alone once,
because a refused batch takes its innocent batch-mates with it (librdkafka does not split
batches as the Java producer does); only a record refused alone is reported. Such retried
records are therefore delivered after the records that followed them.

When no broker answers (it went away), reading pauses: nothing more is queued until a record
is delivered again, and if the broker stays away for a whole ``--delivery-timeout-ms``, the
records it did not acknowledge are reported (one line for the lot, with their line ranges:
:mod:`strom.cli.produce_delivery`) and reading stops there. Nothing acknowledged is lost: an
acknowledged record is in the topic.

Exit status: 0 when everything was delivered (or with ``--skip-errors``), 1 otherwise, with a
last line counting the records not delivered (and a ``Produced N of M`` summary when reading
stopped, or with ``-v``). ``--stop-on-error`` stops reading at the first refused record (what
was already queued is still delivered).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, BinaryIO

from confluent_kafka import KafkaException
from confluent_kafka.admin import ConfigResource

from strom.admin.errors import AdminError, describe_kafka_error
from strom.cli.clients import checked_session, producer, session
from strom.cli.errors import CliError
from strom.cli.options import add_client_options
from strom.cli.produce_delivery import Delivery, line_ranges
from strom.cli.produce_input import DEFAULT_TEMPLATE, Record, parse_template, read_records
from strom.protocol.varint import varint_size

ACKS = ("0", "1", "all", "-1")
COMPRESSION = ("none", "gzip", "snappy", "lz4", "zstd")
#: Record batch v2 header size; a batch of one record is this plus the record.
BATCH_OVERHEAD = 61


def add_parser(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register ``produce``."""
    p = subparsers.add_parser(
        "produce",
        help="send input lines (or templated records) as messages",
        parents=parents,
        description="Read records from stdin (or --file) and produce them to TOPIC. "
        "Keys are hashed with murmur2 like the Java client unless -X partitioner=... is given.",
    )
    p.add_argument("topic", metavar="TOPIC", help="topic to produce to")
    p.add_argument(
        "-f",
        "--format",
        metavar="TEMPLATE",
        help="input template, e.g. '%%k:%%v\\n' (%%v value, %%k key, %%H headers k=v,..., "
        "%%p partition, %%T timestamp ms; default '%%v\\n')",
    )
    p.add_argument("-k", "--key", metavar="KEY", help="key of every message (unless %%k is read)")
    p.add_argument(
        "--key-separator",
        metavar="SEP",
        help="each line is KEY SEP VALUE, split at the first SEP (a line without SEP has no key)",
    )
    p.add_argument("--partition", "-p", type=int, metavar="N", help="send every message to N")
    p.add_argument(
        "--header",
        "-H",
        action="append",
        default=[],
        metavar="K=V",
        help="header added to every message, repeatable",
    )
    p.add_argument("--file", "-F", metavar="PATH", help="read records from PATH instead of stdin")
    p.add_argument("--acks", choices=ACKS, default="all", help="acknowledgements to wait for")
    p.add_argument("--compression", choices=COMPRESSION, default="none", help="batch codec")
    p.add_argument(
        "--delivery-timeout-ms",
        type=int,
        default=30000,
        metavar="MS",
        help="give up on a message after MS (default 30000)",
    )
    errors = p.add_mutually_exclusive_group()
    errors.add_argument(
        "--skip-errors",
        action="store_true",
        help="report refused records but exit 0 (default: carry on, exit 1 at the end)",
    )
    errors.add_argument(
        "--stop-on-error", action="store_true", help="stop reading at the first refused record"
    )
    add_client_options(p)
    p.set_defaults(func=run)


def parse_headers(items: list[str], what: str = "header") -> list[tuple[str, bytes]]:
    """``k=v`` strings to header pairs (order and repeats kept)."""
    headers = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(f"invalid {what} {item!r}: expected KEY=VALUE")
        headers.append((key, value.encode()))
    return headers


def _size_bound(kwargs: dict[str, Any]) -> int:
    """An upper bound of :func:`batch_size` (each varint at most 5 bytes), cheap to compute."""
    headers = kwargs.get("headers", ())
    raw = len(kwargs["key"] or b"") + len(kwargs["value"])
    raw += sum(len(k) * 4 + len(v) + 10 for k, v in headers)  # UTF-8: at most 4 bytes a char
    return BATCH_OVERHEAD + raw + 30


def batch_size(key: bytes | None, value: bytes, headers: list[tuple[str, bytes]]) -> int:
    """Bytes of an uncompressed record batch holding only this record (what the broker checks
    against ``max.message.bytes``)."""
    body = 1 + 1 + 1  # attributes, timestamp delta 0, offset delta 0
    body += varint_size(-1 if key is None else len(key)) + len(key or b"")
    body += varint_size(len(value)) + len(value)
    body += varint_size(len(headers))
    for hk, hv in headers:
        raw = hk.encode()
        body += varint_size(len(raw)) + len(raw) + varint_size(len(hv)) + len(hv)
    return BATCH_OVERHEAD + varint_size(body) + body


def _topic_limit(args: argparse.Namespace) -> int | None:
    """The topic's ``max.message.bytes`` (None if the broker does not say)."""
    s = checked_session(args)  # fails clearly, at once, if the broker does not answer
    resource = ConfigResource(ConfigResource.Type.TOPIC, args.topic)
    try:
        entries = s.wait(
            s.admin.describe_configs([resource], request_timeout=s.timeout)[resource],
            "describe configs",
        )
        entry = entries.get("max.message.bytes")
        return int(entry.value) if entry is not None and entry.value else None
    except (AdminError, ValueError):
        return None


def _message(
    args: argparse.Namespace, record: Record, headers: list[tuple[str, bytes]]
) -> tuple[dict[str, Any], str | None]:
    """produce() keyword arguments for a record, or the reason the record is unusable."""
    f = record.fields
    value = f["value"]
    if len(f) == 1 and not args.key_separator:  # the common case, kept cheap
        kwargs: dict[str, Any] = {"value": value, "key": args.key_bytes}
        if headers:
            kwargs["headers"] = headers
        if args.partition is not None:
            kwargs["partition"] = args.partition
        return kwargs, None
    key: bytes | None = f.get("key", args.key_bytes)
    if args.key_separator and "key" not in f:
        k, sep, v = value.partition(args.key_separator.encode())
        if sep:
            key, value = k, v
    kwargs = {"value": value, "key": key}
    all_headers = list(headers)
    if "headers" in f and f["headers"]:
        try:
            items = f["headers"].decode().split(",")
        except UnicodeDecodeError:
            return kwargs, "headers are not UTF-8"
        try:
            all_headers += parse_headers([i for i in items if i], "header in %H")
        except CliError as exc:
            return kwargs, exc.message
    if all_headers:
        kwargs["headers"] = all_headers
    if "topic" in f and f["topic"].decode(errors="replace") != args.topic:
        return kwargs, f"topic {f['topic'].decode(errors='replace')!r} is not {args.topic!r}"
    for name, arg in (("partition", "partition"), ("timestamp", "timestamp")):
        if name in f:
            try:
                kwargs[arg] = int(f[name])
            except ValueError:
                return kwargs, f"{name} {f[name].decode(errors='replace')!r} is not an integer"
    if "partition" not in kwargs and args.partition is not None:
        kwargs["partition"] = args.partition
    return kwargs, None


def _send(prod: Any, topic: str, kwargs: dict[str, Any], on_delivery: Any,
          track: Delivery) -> str | None:  # fmt: skip
    """Queue one message (waiting for room in the local queue); the client's refusal, if any
    (or, once the broker stayed away a whole delivery timeout, that)."""
    while True:
        try:
            prod.produce(topic, on_delivery=on_delivery, **kwargs)
            return None
        except BufferError:
            prod.poll(0.05)  # the local queue is full: serve delivery reports, then retry
            if track.gave_up:
                return (f"the broker at {track.bootstrap} is unreachable (no acknowledgement "
                        f"within {track.delivery_timeout_s:g} s)")
        except KafkaException as exc:
            return f"the client refused it: {describe_kafka_error(exc)}"


def _wait_for_broker(prod: Any, track: Delivery) -> None:
    """While no broker answers, read no more input: serve the producer until a record is
    delivered (it is back), the broker stayed away a whole delivery timeout (give up), or
    nothing is in flight (the next record is the probe)."""
    while track.unreachable is not None and not track.gave_up and len(prod) > 0:
        prod.poll(0.1)


def run(args: argparse.Namespace, stdin: BinaryIO | None = None) -> int:
    """Produce every record of the input; report each refused one; flush; exit status."""
    headers = parse_headers(args.header)
    tokens = parse_template(args.format or DEFAULT_TEMPLATE)
    if args.key_separator and any(t == ("field", b"key") for t in tokens):
        raise CliError("--key-separator cannot be used with %k in --format")
    source = _open_input(args, stdin)
    limit = _topic_limit(args)
    conf: dict[str, Any] = {
        "acks": args.acks,
        "compression.type": args.compression,
        "message.timeout.ms": args.delivery_timeout_ms,
        "linger.ms": 5,
    }
    if limit is not None:  # batches never exceed the topic's limit
        conf["message.max.bytes"] = min(max(limit, 1000), 1_000_000_000)
        conf["batch.size"] = min(1_000_000, conf["message.max.bytes"])
    track = Delivery(args.topic, session(args).bootstrap, args.delivery_timeout_ms / 1000,
                     args.verbose)
    prod = producer(args, conf, error_cb=track.on_error)
    topic_md = session(args).metadata(args.topic, client=prod).topics.get(args.topic)
    if topic_md is not None and topic_md.error is not None:
        raise CliError(f"cannot produce to {args.topic!r}: {describe_kafka_error(topic_md.error)}")
    partitions = set(topic_md.partitions) if topic_md is not None else set()
    if args.partition is not None and args.partition not in partitions:
        raise CliError(f"topic {args.topic!r} has no partition {args.partition}")
    args.key_bytes = args.key.encode() if args.key is not None else None
    check_size = args.compression == "none"
    fixed_headers = _size_bound({"key": None, "value": b"", "headers": headers})
    total = 0
    stopped_at: int | None = None
    for record in read_records(source, tokens):
        total += 1
        reason = record.error
        kwargs: dict[str, Any] = {}
        if reason is None:
            kwargs, reason = _message(args, record, headers)
        if reason is None and "partition" in kwargs and kwargs["partition"] not in partitions:
            reason = f"topic {args.topic!r} has no partition {kwargs['partition']}"
        if reason is None and limit is not None and check_size:
            key = kwargs["key"]
            size = len(kwargs["value"]) + (len(key) if key else 0) + BATCH_OVERHEAD + 30
            if size + fixed_headers > limit or kwargs.get("headers", headers) is not headers:
                size = _size_bound(kwargs)
            if size > limit:  # only then worth the exact (slower) computation
                size = batch_size(kwargs["key"], kwargs["value"], kwargs.get("headers", []))
            if size > limit:
                reason = (f"a batch of this one record is {size} bytes, more than the topic's "
                          f"max.message.bytes={limit} (client-side check)")
        if reason is None:
            try:  # the fast path; _send waits for room and turns refusals into a reason
                prod.produce(args.topic, on_delivery=track.callback(record.line, kwargs),
                             **kwargs)  # fmt: skip
            except (BufferError, KafkaException):
                reason = _send(prod, args.topic, kwargs, track.callback(record.line, kwargs),
                               track)  # fmt: skip
            if total % 64 == 0:
                prod.poll(0)  # serve delivery reports as we go (refusals shown early)
        if reason is not None:
            track.refuse(record.line, reason)
        if track.refused and args.stop_on_error:
            break
        if track.unreachable is not None:
            _wait_for_broker(prod, track)
            if track.gave_up:
                stopped_at = record.line
                break
    _finish(prod, args, track)
    return _report(args, track, total, stopped_at)


def _open_input(args: argparse.Namespace, stdin: BinaryIO | None) -> BinaryIO:
    if args.file and args.file != "-":
        try:
            return open(args.file, "rb")  # noqa: SIM115 - read to the end, closed at exit
        except OSError as exc:
            raise CliError(f"cannot read {args.file}: {exc.strerror}") from None
    return stdin if stdin is not None else sys.stdin.buffer


def _finish(prod: Any, args: argparse.Namespace, track: Delivery) -> None:
    """Flush; then resend records refused as too large one at a time (a batch of their own)."""
    wait = args.delivery_timeout_ms / 1000 + session(args).timeout
    remaining = prod.flush(wait)
    track.retrying = True
    for line, kwargs in track.retry:
        reason = _send(prod, args.topic, kwargs, track.callback(line, kwargs), track)
        if reason is not None:
            track.refuse(line, reason)
        remaining += prod.flush(wait)
    track.close()
    if remaining:
        raise CliError(f"{remaining} message(s) not delivered to {args.topic!r} in time")


def _report(args: argparse.Namespace, track: Delivery, total: int,
            stopped_at: int | None) -> int:  # fmt: skip
    if args.verbose or stopped_at is not None:
        parts = ", ".join(f"{p} ({n})" for p, n in sorted(track.partitions.items())) or "none"
        print(
            f"Produced {track.delivered} of {total} message(s) ({track.bytes} bytes of keys and "
            f"values) to {args.topic}; partitions: {parts}",
            file=sys.stderr,
        )
    if not track.refused or args.skip_errors:
        return 0
    lines = sorted(track.refused)
    stopped = " (stopped at the first, --stop-on-error)" if args.stop_on_error else ""
    if stopped_at is not None:
        stopped = (f" (stopped reading after line {stopped_at}: the broker at "
                   f"{track.bootstrap} is unreachable)")
    raise CliError(
        f"{len(lines)} of {total} record(s) not produced to {args.topic!r}{stopped}: "
        f"line(s) {line_ranges(lines)}"
    )
