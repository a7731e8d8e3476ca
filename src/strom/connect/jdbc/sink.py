"""The JDBC sink task: writes records as rows (insert, upsert or update), Confluent's way.

Each ``put`` writes its records in one transaction per destination table
(``table.name.format``, ``${topic}`` replaced), so what the runtime commits afterwards is in
the database (at-least-once; with ``upsert`` a replay rewrites the same rows). Columns come
from the value: a struct with its schema, or a schemaless map (types inferred from values).
The primary key (``pk.mode``):

- ``none``: no key; ``kafka``: ``__connect_topic``, ``__connect_partition``,
  ``__connect_offset`` (or the three names in ``pk.fields``);
- ``record_key``: a primitive key is one column (``pk.fields`` or ``__connect_key``), a struct
  or map key gives its fields (all, or those in ``pk.fields``);
- ``record_value``: the value fields in ``pk.fields`` (all fields if empty).

``upsert`` is ``INSERT ... ON CONFLICT (pk) DO UPDATE`` (PostgreSQL and SQLite); rows of one
batch with the same key keep the last. ``auto.create`` creates a missing table (key columns
NOT NULL, the others as their schema says); ``auto.evolve`` adds missing columns as nullable;
without them a missing table or column fails the task with Confluent's reason. A tombstone
deletes the row with ``delete.enabled`` and is skipped otherwise. Database errors are retried
``max.retries`` times ``retry.backoff.ms`` apart, then fail the task.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine

from strom.connect.api import ConnectError, RetriableError, SinkRecord, SinkTask
from strom.connect.converters import Schema
from strom.connect.jdbc.config_defs import SINK_DEF
from strom.connect.jdbc.db import connect, db_value, sql_type

LOG = logging.getLogger("strom.connect.jdbc")
KAFKA_PK = ["__connect_topic", "__connect_partition", "__connect_offset"]


class Row:
    """One record as columns: {name: (schema or None, Connect value)} and its key names."""

    def __init__(self, columns: dict[str, tuple[Schema | None, Any]], pk: list[str],
                 delete: bool = False) -> None:
        self.columns = columns
        self.pk = pk
        self.delete = delete


class JdbcSinkTask(SinkTask):
    def __init__(self) -> None:
        self.engine: Engine | None = None
        self.config: dict[str, Any] = {}
        self.tables: dict[str, sa.Table] = {}
        self.retries_left = 0

    def start(self, config: dict[str, str]) -> None:
        self.config = SINK_DEF.parse(config)
        self.retries_left = self.config["max.retries"]
        self.engine = connect(self.config)

    # -- records to rows ----------------------------------------------------------------
    def _row(self, record: SinkRecord) -> Row | None:
        mode = self.config["pk.mode"]
        pk_fields = self.config["pk.fields"]
        columns: dict[str, tuple[Schema | None, Any]] = {}
        pk: list[str] = []
        if mode == "kafka":
            names = pk_fields if len(pk_fields) == 3 else KAFKA_PK
            kafka_schemas = (Schema("string"), Schema("int32"), Schema("int64"))
            kafka_values = (record.topic, record.partition, record.kafka_offset)
            for i, name in enumerate(names):
                columns[name] = (kafka_schemas[i], kafka_values[i])
            pk = list(names)
        elif mode == "record_key":
            if record.key is None:
                raise ConnectError(f"pk.mode record_key needs a key (topic {record.topic}, "
                                   f"offset {record.kafka_offset})")
            for name, key_schema, key in _fields(record.key_schema, record.key,
                                                 pk_fields or None, "__connect_key"):
                columns[name] = (key_schema, key)
                pk.append(name)
        if record.value is None:
            if self.config["delete.enabled"]:
                return Row(columns, pk, delete=True)
            LOG.debug("tombstone at %s/%s skipped (delete.enabled=false)", record.topic,
                      record.kafka_offset)
            return None
        wanted = set(self.config["fields.whitelist"])
        for name, sub, value in _fields(record.value_schema, record.value, None, None):
            if wanted and name not in wanted and not (mode == "record_value" and
                                                      name in pk_fields):
                continue
            columns.setdefault(name, (sub, value))
        if mode == "record_value":
            pk = list(pk_fields) or list(columns)
            missing = [n for n in pk if n not in columns]
            if missing:
                raise ConnectError(f"pk.fields {missing} are not in the record value")
        return Row(columns, pk)

    # -- writing ------------------------------------------------------------------------
    def put(self, records: list[SinkRecord]) -> None:
        by_table: dict[str, list[Row]] = defaultdict(list)
        for record in records:
            row = self._row(record)
            if row is not None:
                table = self.config["table.name.format"].replace("${topic}", record.topic)
                by_table[table].append(row)
        if not by_table:
            return
        assert self.engine is not None
        try:
            with self.engine.begin() as conn:
                for name, rows in by_table.items():
                    table = self._table(conn, name, rows)
                    for start in range(0, len(rows), self.config["batch.size"]):
                        self._write(conn, table, rows[start:start + self.config["batch.size"]])
        except sa.exc.SQLAlchemyError as exc:
            self.tables.clear()  # the schema may have changed under us
            cause = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
            if self.retries_left > 0:
                self.retries_left -= 1
                LOG.warning("JDBC write failed (%d retries left): %s", self.retries_left, cause)
                time.sleep(self.config["retry.backoff.ms"] / 1000.0)
                raise RetriableError(cause) from exc
            raise ConnectError(f"JDBC write failed after {self.config['max.retries']} "
                               f"retries: {cause}") from exc
        self.retries_left = self.config["max.retries"]

    def _table(self, conn: Any, name: str, rows: list[Row]) -> sa.Table:
        """The destination table, created or evolved as configured to hold ``rows``."""
        table = self.tables.get(name)
        if table is None:
            if sa.inspect(conn).has_table(name):
                table = sa.Table(name, sa.MetaData(), autoload_with=conn)
            elif self.config["auto.create"]:
                table = self._create(conn, name, rows)
            else:
                raise ConnectError(f"Table {name} is missing and auto-creation is disabled")
        present = {c.name for c in table.columns}
        missing: dict[str, tuple[Schema | None, Any]] = {}
        for row in rows:
            for col, (schema, value) in row.columns.items():
                if col not in present and (col not in missing or missing[col][1] is None):
                    missing[col] = (schema, value)
        if missing:
            if not self.config["auto.evolve"]:
                raise ConnectError(f"Table {name} is missing fields {sorted(missing)} and "
                                   "auto-evolution is disabled")
            preparer = conn.dialect.identifier_preparer
            for col, (schema, value) in missing.items():
                ddl = sql_type(schema, value).compile(dialect=conn.dialect)
                conn.execute(sa.text(f"ALTER TABLE {preparer.quote(name)} ADD COLUMN "
                                     f"{preparer.quote(col)} {ddl}"))
                LOG.info("table %s: added column %s %s", name, col, ddl)
            table = sa.Table(name, sa.MetaData(), autoload_with=conn)
        self.tables[name] = table
        return table

    def _create(self, conn: Any, name: str, rows: list[Row]) -> sa.Table:
        first = rows[0]
        types: dict[str, tuple[Schema | None, Any]] = {}
        for row in rows:
            for col, (schema, value) in row.columns.items():
                if col not in types or types[col][1] is None:
                    types[col] = (schema, value)
        columns = []
        for col, (schema, value) in types.items():
            is_pk = col in first.pk
            nullable = not is_pk and (schema is None or schema.optional)
            columns.append(sa.Column(col, sql_type(schema, value), primary_key=is_pk,
                                     nullable=nullable, autoincrement=False))
        table = sa.Table(name, sa.MetaData(), *columns)
        table.create(conn)
        LOG.info("created table %s", name)
        return table

    def _write(self, conn: Any, table: sa.Table, rows: list[Row]) -> None:
        mode = self.config["insert.mode"]
        groups: dict[tuple[str, ...], list[dict[str, Any]]] = defaultdict(list)
        deletes: list[dict[str, Any]] = []
        pk = rows[0].pk
        latest: dict[Any, Row] = {}
        for row in rows:  # one row per key per batch: the last one wins (as sequential writes)
            key = tuple(row.columns[c][1] for c in row.pk) if row.pk and mode != "insert" \
                else id(row)
            latest.pop(key, None)
            latest[key] = row
        for row in latest.values():
            values = {c: db_value(s, v) for c, (s, v) in row.columns.items()}
            if row.delete:
                deletes.append(values)
            else:
                groups[tuple(values)].append(values)
        for values_list in groups.values():
            cols = list(values_list[0])
            if mode == "insert":
                conn.execute(sa.insert(table), values_list)
            elif mode == "update":
                where = [table.c[c] == sa.bindparam(f"k_{c}") for c in pk]
                stmt = sa.update(table).where(*where).values(
                    {c: sa.bindparam(f"v_{c}") for c in cols if c not in pk})
                conn.execute(stmt, [{**{f"k_{c}": v[c] for c in pk},
                                     **{f"v_{c}": v[c] for c in cols if c not in pk}}
                                    for v in values_list])
            else:
                dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
                stmt = dialect.insert(table)
                updates = {c: stmt.excluded[c] for c in cols if c not in pk}
                stmt = stmt.on_conflict_do_update(index_elements=pk, set_=updates) if updates \
                    else stmt.on_conflict_do_nothing(index_elements=pk)
                conn.execute(stmt, values_list)
        for values in deletes:
            conn.execute(sa.delete(table).where(*[table.c[c] == values[c] for c in pk]))

    def stop(self) -> None:
        if self.engine is not None:
            self.engine.dispose()
            self.engine = None


def _fields(schema: Schema | None, value: Any, only: list[str] | None, primitive_name: str | None
            ) -> list[tuple[str, Schema | None, Any]]:
    """(column, schema, value) of a struct/map, or of a primitive named ``primitive_name``."""
    if isinstance(value, dict):
        subs = dict(schema.fields) if schema is not None and schema.type == "struct" else {}
        if only is None:
            return [(n, subs.get(n), v) for n, v in value.items()]
        missing = [n for n in only if n not in value]
        if missing:
            raise ConnectError(f"fields {missing} are not in the record")
        return [(n, subs.get(n), value[n]) for n in only]
    if primitive_name is None:
        raise ConnectError(f"the JDBC sink needs a struct or map value, got "
                           f"{type(value).__name__}")
    name = only[0] if only else primitive_name
    return [(name, schema, value)]

