"""JDBC source and sink tasks against SQLite files (no broker): modes, upsert, DDL."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

sa = pytest.importorskip("sqlalchemy")

from strom.connect.api import ConnectError, SinkRecord, SourceTaskContext  # noqa: E402
from strom.connect.converters import Schema  # noqa: E402
from strom.connect.jdbc import JdbcSinkConnector, JdbcSourceConnector  # noqa: E402
from strom.connect.jdbc.db import sqlalchemy_url  # noqa: E402
from strom.connect.jdbc.sink import JdbcSinkTask  # noqa: E402
from strom.connect.jdbc.source import JdbcSourceTask  # noqa: E402
from strom.connect.transforms.base import TIMESTAMP  # noqa: E402


def test_jdbc_urls() -> None:
    url = sqlalchemy_url("jdbc:postgresql://db.example:6543/shop?user=u&password=p&ssl=true")
    assert url.render_as_string(hide_password=False) == \
        "postgresql+psycopg://u:p@db.example:6543/shop?ssl=true"
    assert sqlalchemy_url("jdbc:sqlite:/tmp/x.db").render_as_string() == "sqlite:////tmp/x.db"
    assert sqlalchemy_url("postgresql://h/d", "me", "pw").render_as_string(
        hide_password=False) == "postgresql+psycopg://me:pw@h/d"


def source_task(db: Path, offsets: dict[str, Any] | None = None, **config: str
                ) -> JdbcSourceTask:
    props = {"connection.url": f"jdbc:sqlite:{db}", "topic.prefix": "db-",
             "poll.interval.ms": "1", "tables": "items", **config}
    task = JdbcSourceTask()
    task.initialize(SourceTaskContext(lambda p: (offsets or {}).get(str(p))))
    task.start(props)
    return task


def poll_all(task: JdbcSourceTask) -> list[Any]:
    out = []
    for _ in range(20):
        out += task.poll() or []
    return out


@pytest.fixture
def items_db(tmp_path: Path) -> Path:
    db = tmp_path / "src.db"
    engine = sa.create_engine(f"sqlite:///{db}")
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                             "updated DATETIME, price REAL)"))
        for i in range(1, 6):
            conn.execute(sa.text("INSERT INTO items VALUES (:i, :n, :u, :p)"),
                         {"i": i, "n": f"item{i}", "u": f"2026-01-0{i} 10:00:00.000000",
                          "p": i * 1.5})
    engine.dispose()
    return db


def test_source_incrementing_resumes_from_stored_offset(items_db: Path) -> None:
    task = source_task(items_db, mode="incrementing", **{"incrementing.column.name": "id",
                                                         "batch.max.rows": "2"})
    try:
        records = poll_all(task)
    finally:
        task.stop()
    assert [r.value["id"] for r in records] == [1, 2, 3, 4, 5]
    first = records[0]
    assert first.topic == "db-items" and first.source_partition == {"table": "items"}
    assert first.value == {"id": 1, "name": "item1", "updated": 1767261600000, "price": 1.5}
    assert dict(first.value_schema.fields)["updated"] == Schema("int64", True, TIMESTAMP)
    assert dict(first.value_schema.fields)["name"] == Schema("string")
    assert records[-1].source_offset == {"incrementing": 5}
    resumed = source_task(items_db, {str({"table": "items"}): {"incrementing": 3}},
                          mode="incrementing", **{"incrementing.column.name": "id"})
    try:
        assert [r.value["id"] for r in poll_all(resumed)] == [4, 5]
    finally:
        resumed.stop()


def test_source_timestamp_modes_and_query(items_db: Path) -> None:
    ts = source_task(items_db, mode="timestamp", **{"timestamp.column.name": "updated"})
    try:
        records = poll_all(ts)
        assert [r.value["id"] for r in records] == [1, 2, 3, 4, 5]
        assert records[-1].source_offset == {"timestamp": 1767607200000, "timestamp_nanos": 0}
    finally:
        ts.stop()
    both = source_task(items_db, mode="timestamp+incrementing", **{
        "timestamp.column.name": "updated", "incrementing.column.name": "id",
        "batch.max.rows": "2"})
    try:
        assert [r.value["id"] for r in poll_all(both)] == [1, 2, 3, 4, 5]
    finally:
        both.stop()
    query = source_task(items_db, mode="incrementing", tables="", **{
        "query": "SELECT id, name FROM items WHERE price > 3", "incrementing.column.name": "id",
        "topic.prefix": "expensive"})
    try:
        records = poll_all(query)
    finally:
        query.stop()
    assert [(r.topic, r.value) for r in records] == [
        ("expensive", {"id": 3, "name": "item3"}), ("expensive", {"id": 4, "name": "item4"}),
        ("expensive", {"id": 5, "name": "item5"})]  # price 4.5, 6.0, 7.5


def test_source_connector_splits_tables_and_reports_unreachable(items_db: Path) -> None:
    c = JdbcSourceConnector()
    c.start({"connection.url": f"jdbc:sqlite:{items_db}", "mode": "bulk", "topic.prefix": "p"})
    assert [t["tables"] for t in c.task_configs(4)] == ["items"]
    with pytest.raises(ConnectError, match="Could not connect to .* after 1 attempt"):
        JdbcSourceConnector().start({"connection.url": "jdbc:postgresql://127.0.0.1:1/x",
                                     "mode": "bulk", "topic.prefix": "p",
                                     "connection.attempts": "1"})
    errors = JdbcSourceConnector().validate({"mode": "incrementing", "query": "select 1",
                                             "table.whitelist": "a"})
    assert set(errors) == {"query", "incrementing.column.name"}
    assert JdbcSinkConnector().validate({"insert.mode": "upsert"}) == {
        "pk.mode": ["insert.mode upsert needs a primary key: set pk.mode to record_key, "
                    "record_value or kafka"]}


USER = Schema("struct", name="user", fields=(("id", Schema("int64")),
                                             ("name", Schema("string", optional=True))))


def sink(db: Path, **config: str) -> JdbcSinkTask:
    task = JdbcSinkTask()
    task.start({"connection.url": f"sqlite:///{db}", "max.retries": "0", **config})
    return task


def rows(db: Path, table: str) -> list[tuple[Any, ...]]:
    engine = sa.create_engine(f"sqlite:///{db}")
    with engine.connect() as conn:
        result = conn.execute(sa.text(f'SELECT * FROM "{table}" ORDER BY 1')).all()
    engine.dispose()
    return [tuple(r) for r in result]


def rec(value: Any, key: Any = None, offset: int = 0, schema: Schema | None = USER,
        key_schema: Schema | None = None) -> SinkRecord:
    return SinkRecord(topic="users", partition=0, value=value, key=key, value_schema=schema,
                      key_schema=key_schema, kafka_offset=offset)


def test_sink_upsert_on_record_key_keeps_one_row_per_key(tmp_path: Path) -> None:
    db = tmp_path / "sink.db"
    task = sink(db, **{"insert.mode": "upsert", "pk.mode": "record_key", "pk.fields": "uid",
                       "auto.create": "true", "auto.evolve": "true", "delete.enabled": "true"})
    try:
        task.put([rec({"id": 1, "name": "a"}, "u1"), rec({"id": 2, "name": "b"}, "u2"),
                  rec({"id": 3, "name": "a2"}, "u1")])
        task.put([rec({"id": 4, "name": "b2"}, "u2")])
        assert rows(db, "users") == [("u1", 3, "a2"), ("u2", 4, "b2")]
        wider = Schema("struct", fields=(*USER.fields, ("email", Schema("string", True))))
        task.put([rec({"id": 5, "name": "c", "email": "c@x"}, "u3", schema=wider),
                  rec(None, "u2")])
        assert rows(db, "users") == [("u1", 3, "a2", None), ("u3", 5, "c", "c@x")]
    finally:
        task.stop()


def test_sink_insert_record_value_and_kafka_modes(tmp_path: Path) -> None:
    db = tmp_path / "sink.db"
    task = sink(db, **{"auto.create": "true", "pk.mode": "record_value", "pk.fields": "id",
                       "insert.mode": "upsert", "table.name.format": "t_${topic}"})
    try:
        task.put([rec({"id": 1, "name": "x"}, schema=None), rec({"id": 1, "name": "y"},
                                                                schema=None)])
        assert rows(db, "t_users") == [(1, "y")]
    finally:
        task.stop()
    kafka = sink(db, **{"auto.create": "true", "pk.mode": "kafka"})
    try:
        kafka.put([rec({"id": 1, "name": "x"}, offset=7)])
        assert rows(db, "users") == [("users", 0, 7, 1, "x")]
    finally:
        kafka.stop()
    strict = sink(db, **{"table.name.format": "absent"})
    try:
        with pytest.raises(ConnectError, match="Table absent is missing and auto-creation is "
                                               "disabled"):
            strict.put([rec({"id": 1, "name": "x"})])
    finally:
        strict.stop()


def test_source_sees_rows_after_a_restart_of_its_offsets(items_db: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{items_db}")
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO items VALUES (6, 'late', :u, 1)"),
                     {"u": dt.datetime(2026, 1, 6, 10)})
    engine.dispose()
    task = source_task(items_db, {str({"table": "items"}): {"incrementing": 5}},
                       mode="incrementing", **{"incrementing.column.name": "id"})
    try:
        assert [r.value["name"] for r in poll_all(task)] == ["late"]
    finally:
        task.stop()
