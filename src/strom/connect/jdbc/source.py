"""The JDBC source task: polls tables (or one ``query``) for new rows, Confluent's way.

Modes and their query (``inc`` the incrementing column, ``ts`` the first non-null timestamp
column, ``end`` the database's current time minus ``timestamp.delay.interval.ms``):

- ``bulk``: every row, every ``poll.interval.ms``;
- ``incrementing``: ``inc > last`` ordered by ``inc`` (new rows only);
- ``timestamp``: ``last < ts < end`` ordered by ``ts`` (new and updated rows);
- ``timestamp+incrementing``: ``ts < end AND (ts > last_ts OR (ts = last_ts AND inc >
  last_inc))`` ordered by ``ts, inc``.

At most ``batch.max.rows`` rows per query where the order is total (``incrementing`` and
``timestamp+incrementing``, so the next query resumes exactly); ``timestamp`` reads all rows up
to ``end`` at once, since rows sharing the last timestamp cannot be resumed between.

Source partition ``{"table": name}`` or ``{"query": text}``; source offset ``{"incrementing":
n}`` and/or ``{"timestamp": epoch ms, "timestamp_nanos": ns of the second}``, the shape of
Confluent's, stored by the runtime only after the rows were acknowledged by the broker.
Topic: ``topic.prefix`` + table name (just ``topic.prefix`` with ``query``). Values are
structs named after the table, one field per column.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from strom.connect.api import ConnectError, SourceRecord, SourceTask
from strom.connect.converters import Schema
from strom.connect.jdbc.config_defs import SOURCE_DEF
from strom.connect.jdbc.db import column_schema, connect, connect_value, from_ms, to_ms
from strom.connect.transforms.base import TIMESTAMP

LOG = logging.getLogger("strom.connect.jdbc")


@dataclass
class Querier:
    """One table or query with its offset and next poll time."""

    partition: dict[str, Any]
    topic: str
    selectable: Any  # a Table or a subquery
    schema: Schema
    offset: dict[str, Any] = field(default_factory=dict)
    next_poll: float = 0.0


class JdbcSourceTask(SourceTask):
    def __init__(self) -> None:
        super().__init__()
        self.engine: Engine | None = None
        self.queriers: list[Querier] = []
        self.config: dict[str, Any] = {}

    def start(self, config: dict[str, str]) -> None:
        self.config = SOURCE_DEF.parse(config)
        self.engine = connect(self.config)
        dialect = self.engine.dialect.name
        prefix = self.config["topic.prefix"]
        if self.config["query"]:
            sub = sa.text(self.config["query"])
            with self.engine.connect() as conn:
                result: Any = conn.execute(sa.select(sa.literal_column("*")).select_from(
                    sub.columns().subquery("strom_probe")).limit(0))
                names = list(result.keys())
            selectable = sa.select(*[sa.column(n) for n in names]).select_from(
                sa.text(f"({self.config['query']}) AS strom_query")).subquery("q")
            schema = Schema("struct", name="query")  # per row from its values (see _schema_of)
            self._add({"query": self.config["query"]}, prefix, selectable, schema)
            return
        metadata = sa.MetaData()
        for name in [t for t in config.get("tables", "").split(",") if t]:
            table = sa.Table(name, metadata, autoload_with=self.engine)
            schema = Schema("struct", name=name, fields=tuple(
                (c.name, column_schema(c.type, bool(c.nullable), dialect))
                for c in table.columns))
            self._add({"table": name}, prefix + name, table, schema)

    def _add(self, partition: dict[str, Any], topic: str, selectable: Any,
             schema: Schema) -> None:
        stored = self.context.offset(partition) if self.context else None
        offset = dict(stored or {})
        initial = self.config["timestamp.initial"]
        if not offset and initial is not None:
            offset = {"timestamp": initial, "timestamp_nanos": 0}
        self.queriers.append(Querier(partition, topic, selectable, schema, offset))

    def poll(self) -> list[SourceRecord] | None:
        now = time.monotonic()
        due = [q for q in self.queriers if q.next_poll <= now]
        if not due:
            wait = min((q.next_poll for q in self.queriers), default=now + 0.2) - now
            time.sleep(min(max(wait, 0.0), 0.2))  # short: the worker checks for stop
            return None
        records: list[SourceRecord] = []
        for q in due:
            rows, more = self._query(q)
            records += rows
            # A full batch means more rows are waiting: poll again at once.
            interval = self.config["poll.interval.ms"] / 1000.0
            q.next_poll = now if more else now + interval
        return records

    def _query(self, q: Querier) -> tuple[list[SourceRecord], bool]:
        assert self.engine is not None
        mode = self.config["mode"]
        cols = q.selectable.c
        inc_name = self.config["incrementing.column.name"]
        ts_names = self.config["timestamp.column.name"]
        inc = cols[inc_name] if "incrementing" in mode else None
        ts = None
        if "timestamp" in mode:
            ts = cols[ts_names[0]] if len(ts_names) == 1 else \
                sa.func.coalesce(*[cols[n] for n in ts_names])
        stmt = sa.select(q.selectable)
        limit = self.config["batch.max.rows"]
        try:
            with self.engine.connect() as conn:
                if ts is not None:
                    end = self._db_now(conn) - dt.timedelta(
                        milliseconds=self.config["timestamp.delay.interval.ms"])
                    last_ts = self._bind_time(ts, from_ms(int(q.offset.get("timestamp", 0))))
                    end_b = self._bind_time(ts, end)
                    if inc is not None:
                        last_inc = q.offset.get("incrementing", -1)
                        stmt = stmt.where(ts < end_b, sa.or_(
                            ts > last_ts, sa.and_(ts == last_ts, inc > last_inc)))
                        stmt = stmt.order_by(ts, inc).limit(limit)
                    else:
                        stmt = stmt.where(ts > last_ts, ts < end_b).order_by(ts)
                elif inc is not None:
                    stmt = stmt.where(inc > q.offset.get("incrementing", -1))
                    stmt = stmt.order_by(inc).limit(limit)
                rows = conn.execute(stmt).mappings().all()
        except sa.exc.SQLAlchemyError as exc:
            cause = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
            raise ConnectError(f"Failed to poll {q.partition}: {cause}") from exc
        out = []
        for row in rows:
            value = {k: connect_value(v) for k, v in row.items()}
            if inc is not None:
                q.offset["incrementing"] = int(row[inc_name])
            if ts is not None:
                moment = next((row[n] for n in ts_names if row[n] is not None), None)
                if isinstance(moment, dt.datetime):
                    q.offset["timestamp"] = to_ms(moment)
                    q.offset["timestamp_nanos"] = moment.microsecond * 1000
            schema = q.schema if q.schema.fields else _schema_of(value, row)
            out.append(SourceRecord(topic=q.topic, value=value, value_schema=schema,
                                    source_partition=dict(q.partition),
                                    source_offset=dict(q.offset)))
        return out, inc is not None and len(rows) >= limit

    def _db_now(self, conn: Any) -> dt.datetime:
        if conn.dialect.name == "postgresql":
            now = conn.execute(sa.text("SELECT CURRENT_TIMESTAMP")).scalar_one()
            return now.astimezone(dt.UTC).replace(tzinfo=None)
        return dt.datetime.now(dt.UTC).replace(tzinfo=None)

    @staticmethod
    def _bind_time(column: Any, moment: dt.datetime) -> Any:
        """A naive UTC time, or an aware one for a column WITH TIME ZONE."""
        if getattr(column.type, "timezone", False):
            return moment.replace(tzinfo=dt.UTC)
        return moment

    def stop(self) -> None:
        if self.engine is not None:
            self.engine.dispose()
            self.engine = None


def _schema_of(value: dict[str, Any], row: Any) -> Schema:
    """A query row's schema from its values (a query's column types are not reflected)."""
    fields = []
    for name, v in value.items():
        raw = row[name]
        if isinstance(raw, dt.datetime):
            sub = Schema("int64", optional=True, name=TIMESTAMP)
        elif isinstance(v, bool):
            sub = Schema("boolean", optional=True)
        elif isinstance(v, int):
            sub = Schema("int64", optional=True)
        elif isinstance(v, float):
            sub = Schema("double", optional=True)
        elif isinstance(v, bytes):
            sub = Schema("bytes", optional=True)
        else:
            sub = Schema("string", optional=True)
        fields.append((name, sub))
    return Schema("struct", name="query", fields=tuple(fields))
