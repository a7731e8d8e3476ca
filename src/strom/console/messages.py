"""The message browser: read a page of a topic's messages, render, export, produce one.

A page is read by a throwaway consumer (no group commit, ``read_uncommitted`` as the Java
consumer and the usual Kafka consoles: aborted records are shown too) assigned to the chosen
partitions at their start offsets. Reading stops at the first of: ``limit`` matching messages,
every partition at the high watermark it had when the page was asked for (partition EOF, which
also covers a transaction marker as the last offset), :data:`MAX_SCAN` messages examined, or
:data:`READ_DEADLINE_S`. The next page's cursor is each partition's next unexamined offset, so
paging forward neither skips nor repeats a message, whatever the filter.

Start positions: ``earliest``, ``offset`` (clamped to each log), ``timestamp`` (the first
offset at or after it, ListOffsets by time) and ``latest`` (the newest ``limit`` messages; with
a filter the newest :data:`LATEST_WINDOW` of each partition are searched).
"""

from __future__ import annotations

import csv
import io
import json
import time
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlencode

from confluent_kafka import KafkaError, TopicPartition

from strom.admin import offsets
from strom.admin.errors import (
    InvalidInputError,
    NotFoundError,
    RefusedError,
    TimedOutError,
    describe_kafka_error,
)
from strom.admin.timestamps import TIMESTAMP_TYPES, iso_ms, parse_datetime_ms
from strom.console.cluster import Cluster

MODES = ("latest", "earliest", "offset", "timestamp")
VIEWS = ("auto", "json", "text", "hex")
MAX_LIMIT = 500
MAX_SCAN = 20_000
LATEST_WINDOW = 1_000
READ_DEADLINE_S = 8.0


def _int(value: str | None, default: int, what: str) -> int:
    if value is None or not value.strip():
        return default
    try:
        return int(value)
    except ValueError:
        raise InvalidInputError(f"invalid {what} {value!r}: expected an integer") from None


@dataclass(frozen=True)
class Query:
    """What one page of the browser asks for (round-trips through the URL's query string)."""

    topic: str
    partitions: tuple[int, ...] = ()  # empty: all partitions
    mode: str = "latest"
    offset: int = 0
    timestamp: str = ""
    limit: int = 50
    key: str = ""
    value: str = ""
    view: str = "auto"
    cursor: tuple[tuple[int, int], ...] = ()  # (partition, next offset) of the page before

    @classmethod
    def from_params(cls, topic: str, params: Any) -> Query:
        mode = params.get("mode") or "latest"
        view = params.get("view") or "auto"
        if mode not in MODES:
            raise InvalidInputError(f"unknown start {mode!r}: one of {', '.join(MODES)}")
        if view not in VIEWS:
            raise InvalidInputError(f"unknown view {view!r}: one of {', '.join(VIEWS)}")
        parts = tuple(sorted({_int(p, 0, "partition") for p in params.getlist("partition")
                              if p.strip()}))
        cursor = []
        for item in (params.get("cursor") or "").split(","):
            if item.strip():
                p, _, off = item.partition(":")
                cursor.append((_int(p, 0, "cursor"), _int(off, 0, "cursor")))
        limit = _int(params.get("limit"), 50, "limit")
        if not 1 <= limit <= MAX_LIMIT:
            raise InvalidInputError(f"limit must be between 1 and {MAX_LIMIT}")
        return cls(topic=topic, partitions=parts, mode=mode,
                   offset=_int(params.get("offset"), 0, "offset"),
                   timestamp=params.get("timestamp") or "", limit=limit,
                   key=params.get("key") or "", value=params.get("value") or "", view=view,
                   cursor=tuple(cursor))

    def params(self, **changes: Any) -> str:
        """This query (with ``changes``) as a URL query string."""
        q = replace(self, **changes)
        items: list[tuple[str, Any]] = [("partition", p) for p in q.partitions]
        items += [("mode", q.mode), ("limit", q.limit), ("view", q.view)]
        if q.mode == "offset":
            items.append(("offset", q.offset))
        if q.mode == "timestamp":
            items.append(("timestamp", q.timestamp))
        items += [(k, v) for k, v in (("key", q.key), ("value", q.value)) if v]
        if q.cursor:
            items.append(("cursor", ",".join(f"{p}:{o}" for p, o in q.cursor)))
        return urlencode(items)


@dataclass
class Page:
    messages: list[dict[str, Any]] = field(default_factory=list)
    next_cursor: tuple[tuple[int, int], ...] = ()
    scanned: int = 0
    complete: bool = True  # False: stopped by the scan bound or the deadline
    at_end: bool = True  # every partition read up to its high watermark


def render(data: bytes | None, view: str) -> tuple[str, str | None]:
    """(kind, text) of a key or value: ``json`` (pretty), ``text``, ``hex`` or ``null``."""
    if data is None:
        return "null", None
    if view == "hex":
        return "hex", data.hex(" ")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        if view == "text":
            return "text", data.decode("utf-8", errors="replace")
        return "hex", data.hex(" ")
    if view in ("auto", "json"):
        try:
            doc = json.loads(text)
        except ValueError:
            doc = None
        else:
            if isinstance(doc, dict | list) or view == "json":
                return "json", json.dumps(doc, indent=2, ensure_ascii=False)
    printable = all(c.isprintable() or c in "\n\r\t" for c in text)
    if view == "auto" and not printable:
        return "hex", data.hex(" ")
    return "text", text


def _document(msg: Any, view: str) -> dict[str, Any]:
    ts_type, ts = msg.timestamp()
    key, value = msg.key(), msg.value()
    key_kind, key_text = render(key, view)
    value_kind, value_text = render(value, view)
    headers = [(k, render(v, "text" if view != "hex" else "hex")[1])
               for k, v in (msg.headers() or [])]
    return {
        "topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset(),
        "timestamp": ts if ts_type in TIMESTAMP_TYPES else None,
        "timestamp_iso": iso_ms(ts) if ts_type in TIMESTAMP_TYPES else None,
        "timestamp_type": TIMESTAMP_TYPES.get(ts_type),
        "key": key_text, "key_kind": key_kind, "key_size": -1 if key is None else len(key),
        "value": value_text, "value_kind": value_kind,
        "value_size": -1 if value is None else len(value),
        "headers": headers,
        "_key_raw": key.decode("utf-8", "replace") if key is not None else "",
        "_value_raw": value.decode("utf-8", "replace") if value is not None else "",
    }


def _starts(cluster: Cluster, q: Query, parts: list[int], low: dict[int, int],
            high: dict[int, int]) -> dict[int, int]:
    if q.cursor:
        given = dict(q.cursor)
        return {p: max(low[p], min(given.get(p, high[p]), high[p])) for p in parts}
    if q.mode == "earliest":
        return dict(low)
    if q.mode == "offset":
        return {p: max(low[p], min(q.offset, high[p])) for p in parts}
    if q.mode == "timestamp":
        at = offsets.at_time(cluster.session, [(q.topic, p) for p in parts],
                             parse_datetime_ms(q.timestamp, "timestamp"))
        return {p: at[(q.topic, p)] if at[(q.topic, p)] >= 0 else high[p] for p in parts}
    back = q.limit if not (q.key or q.value) else max(q.limit, LATEST_WINDOW)
    return {p: max(low[p], high[p] - back) for p in parts}


def browse(cluster: Cluster, q: Query) -> Page:
    """Read one page (see the module docstring for where it starts and stops)."""
    topic_md = cluster.metadata().topics.get(q.topic)
    if topic_md is None or topic_md.error is not None:
        raise NotFoundError(f"topic {q.topic!r} does not exist")
    parts = list(q.partitions) or sorted(topic_md.partitions)
    missing = [p for p in parts if p not in topic_md.partitions]
    if missing:
        raise NotFoundError(f"topic {q.topic!r} has no partition {missing[0]}")
    keys = [(q.topic, p) for p in parts]
    low = {p: o for (_t, p), o in cluster.end_offsets(keys, earliest=True).items()}
    high = {p: o for (_t, p), o in cluster.end_offsets(keys).items()}
    start = _starts(cluster, q, parts, low, high)
    position = dict(start)
    page = Page()
    pending = {p for p in parts if position[p] < high[p]}
    if pending:
        _read(cluster, q, pending, position, high, page)
    page.at_end = all(position[p] >= high[p] for p in parts)
    page.next_cursor = tuple(sorted(position.items()))
    if q.mode == "latest" and not q.cursor:
        page.messages.sort(key=lambda m: (m["timestamp"] or 0, m["partition"], m["offset"]))
        page.messages = page.messages[-q.limit:]
    return page


def _read(cluster: Cluster, q: Query, pending: set[int], position: dict[int, int],
          high: dict[int, int], page: Page) -> None:
    latest = q.mode == "latest" and not q.cursor
    consumer = cluster.session.consumer({
        "enable.partition.eof": True,
        "isolation.level": "read_uncommitted",
        "auto.offset.reset": "earliest",
    }, group_prefix="strom-console")
    try:
        consumer.assign([TopicPartition(q.topic, p, position[p]) for p in sorted(pending)])
        deadline = time.monotonic() + READ_DEADLINE_S
        while pending:
            if time.monotonic() > deadline or page.scanned >= MAX_SCAN:
                page.complete = False
                return
            for msg in consumer.consume(num_messages=500, timeout=0.5):
                p = msg.partition()
                if p is None or p not in pending:
                    continue
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        position[p] = max(position[p], high[p])
                        pending.discard(p)
                        continue
                    raise RefusedError(f"cannot read {q.topic}-{p}: {describe_kafka_error(err)}")
                offset = msg.offset() or 0
                if offset >= high[p]:
                    # written after the page was asked for: the next page's
                    position[p] = max(position[p], high[p])
                    pending.discard(p)
                    continue
                page.scanned += 1
                position[p] = offset + 1
                doc = _document(msg, q.view)
                if q.key in doc["_key_raw"] and q.value in doc["_value_raw"]:
                    page.messages.append(doc)
                    if not latest and len(page.messages) >= q.limit:
                        return
                if position[p] >= high[p]:
                    pending.discard(p)
    finally:
        consumer.close()


def export_json(page: Page) -> str:
    return json.dumps([_public(m) for m in page.messages], indent=2, ensure_ascii=False)


EXPORT_COLUMNS = ("topic", "partition", "offset", "timestamp", "timestamp_iso", "timestamp_type",
                  "key", "value", "headers")


def export_csv(page: Page) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(EXPORT_COLUMNS)
    for m in page.messages:
        row = _public(m)
        row["headers"] = json.dumps(row["headers"], ensure_ascii=False)
        writer.writerow([row[c] for c in EXPORT_COLUMNS])
    return out.getvalue()


def _public(m: dict[str, Any]) -> dict[str, Any]:
    doc = {k: v for k, v in m.items() if not k.startswith("_") and not k.endswith("_kind")
           and not k.endswith("_size")}
    doc["headers"] = [list(h) for h in m["headers"]]
    return doc


def parse_headers(text: str) -> list[tuple[str, bytes]]:
    """``name=value`` lines to record headers (a line without ``=`` is refused)."""
    headers = []
    for line in text.splitlines():
        if not line.strip():
            continue
        name, sep, value = line.partition("=")
        if not sep or not name.strip():
            raise InvalidInputError(f"invalid header line {line!r}: expected NAME=VALUE")
        headers.append((name.strip(), value.encode()))
    return headers


def produce(cluster: Cluster, topic: str, key: str | None, value: str | None,
            partition: int | None, headers: list[tuple[str, bytes]]) -> tuple[int, int]:
    """Produce one record (acks=all) and wait for it: its (partition, offset)."""
    result: list[Any] = []
    kwargs: dict[str, Any] = {"key": key.encode() if key is not None else None,
                              "value": value.encode() if value is not None else None,
                              "headers": headers or None,
                              "on_delivery": lambda err, msg: result.append((err, msg))}
    if partition is not None:
        kwargs["partition"] = partition
    producer = cluster.producer()
    try:
        producer.produce(topic, **kwargs)
    except (BufferError, ValueError, TypeError) as exc:
        raise InvalidInputError(f"cannot produce to {topic!r}: {exc}") from None
    except Exception as exc:  # KafkaException: unknown topic/partition, too large
        raise RefusedError(f"cannot produce to {topic!r}: {describe_kafka_error(exc)}") from None
    producer.flush(cluster.timeout)
    if not result:
        raise TimedOutError(f"cannot produce to {topic!r}: no acknowledgement within {cluster.timeout:g} s")
    err, msg = result[0]
    if err is not None:
        raise RefusedError(f"cannot produce to {topic!r}: {describe_kafka_error(err)}")
    return msg.partition(), msg.offset()
