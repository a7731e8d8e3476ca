"""JDBC connectors on a real worker: PostgreSQL (a cluster made with initdb) and SQLite."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from strom.testing.connect import ConnectWorkerProcess
from strom.testing.postgres import PostgresProcess, postgres_binaries
from strom.testing.process import free_port
from tests.integration.clients import create_topic
from tests.integration.connect_helpers import connect_broker, wait_for


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """This module's broker: the shared one's, without the initial rebalance delay."""
    yield from connect_broker(tmp_path_factory)

sa = pytest.importorskip("sqlalchemy", reason="the jdbc extra (sqlalchemy) is not installed")
pytest.importorskip("psycopg", reason="the jdbc extra (psycopg) is not installed")
needs_pg = pytest.mark.skipif(postgres_binaries() is None,
                              reason="PostgreSQL binaries absent (Debian package 'postgresql')")
JSON = {"value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "true"}


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresProcess]:
    if postgres_binaries() is None:
        pytest.skip("PostgreSQL binaries absent (Debian package 'postgresql')")
    with PostgresProcess() as proc:
        yield proc




def sql(url: str, statement: str, **params: Any) -> list[tuple[Any, ...]]:
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            result = conn.execute(sa.text(statement), params)
            return [tuple(r) for r in result] if result.returns_rows else []
    finally:
        engine.dispose()


class TopicReader:
    def __init__(self, bootstrap: str, topic: str) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{topic}",
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        self.consumer.assign([TopicPartition(topic, 0, 0)])
        self.messages: list[Any] = []

    def read(self, count: int, timeout: float = 30.0) -> list[Any]:
        deadline = time.monotonic() + timeout
        while len(self.messages) < count and time.monotonic() < deadline:
            self.messages += [m for m in self.consumer.consume(100, 0.3) if m.error() is None]
        return self.messages

    def close(self) -> None:
        self.consumer.close()


def create(worker: ConnectWorkerProcess, name: str, config: dict[str, str]) -> None:
    status, body = worker.request("POST", "/connectors", {"name": name, "config": config})
    assert status == 201, body


@needs_pg
def test_postgres_incremental_source_and_upsert_sink(
        worker: ConnectWorkerProcess, broker: Any, pg: PostgresProcess, topic_name: str) -> None:
    sql(pg.url, "CREATE TABLE orders (id SERIAL PRIMARY KEY, customer TEXT NOT NULL, "
                "amount INTEGER NOT NULL)")
    for customer, amount in [("ann", 10), ("bob", 20), ("ann", 30)]:
        sql(pg.url, "INSERT INTO orders (customer, amount) VALUES (:c, :a)", c=customer, a=amount)
    prefix = f"{topic_name}-"
    # the reader follows one partition, in order (auto-created: num.partitions, 4 on a cluster)
    create_topic(broker.bootstrap, prefix + "orders", partitions=1)
    create(worker, "pg-source", {
        "connector.class": "io.confluent.connect.jdbc.JdbcSourceConnector",
        "connection.url": pg.jdbc_url, "mode": "incrementing",
        "incrementing.column.name": "id", "table.whitelist": "orders",
        "topic.prefix": prefix, "poll.interval.ms": "200", **JSON,
        "transforms": "key,extract", "transforms.key.type": "ValueToKey",
        "transforms.key.fields": "customer", "transforms.extract.type":
        "org.apache.kafka.connect.transforms.ExtractField$Key",
        "transforms.extract.field": "customer"})
    create(worker, "pg-sink", {
        "connector.class": "JdbcSink", "connection.url": pg.url, "topics": prefix + "orders",
        "insert.mode": "upsert", "pk.mode": "record_key", "pk.fields": "customer",
        "auto.create": "true", "table.name.format": "latest_order", **JSON})
    reader = TopicReader(broker.bootstrap, prefix + "orders")
    try:
        assert len(reader.read(3)) == 3
        # Inserted while the connector runs: picked up by the next poll.
        sql(pg.url, "INSERT INTO orders (customer, amount) VALUES ('bob', 40), ('cy', 50)")
        messages = reader.read(5)
        assert [(m.key(), json.loads(m.value())["payload"]) for m in messages] == [
            (b"ann", {"id": 1, "customer": "ann", "amount": 10}),
            (b"bob", {"id": 2, "customer": "bob", "amount": 20}),
            (b"ann", {"id": 3, "customer": "ann", "amount": 30}),
            (b"bob", {"id": 4, "customer": "bob", "amount": 40}),
            (b"cy", {"id": 5, "customer": "cy", "amount": 50})]
        schema = json.loads(messages[0].value())["schema"]
        assert schema["name"] == "orders" and [f["type"] for f in schema["fields"]] == \
            ["int32", "string", "int32"]
        expected = [("ann", 3, 30), ("bob", 4, 40), ("cy", 5, 50)]

        def latest() -> list[tuple[Any, ...]]:
            try:
                return sql(pg.url, "SELECT customer, id, amount FROM latest_order "
                                   "ORDER BY customer")
            except sa.exc.ProgrammingError:  # not created by the sink yet
                return []

        assert wait_for(lambda: latest() == expected, "upserted rows", timeout=30.0)
    finally:
        reader.close()
        worker.request("DELETE", "/connectors/pg-source")
        worker.request("DELETE", "/connectors/pg-sink")


def test_sqlite_timestamp_incrementing_source(worker: ConnectWorkerProcess, broker: Any,
                                              tmp_path: Path, topic_name: str) -> None:
    url = f"sqlite:///{tmp_path / 'shop.db'}"
    sql(url, "CREATE TABLE events (id INTEGER PRIMARY KEY, kind TEXT, at DATETIME NOT NULL)")
    sql(url, "INSERT INTO events VALUES (1, 'a', '2026-01-01 00:00:00.000000'), "
             "(2, 'b', '2026-01-01 00:00:00.000000')")
    create_topic(broker.bootstrap, topic_name + "-events", partitions=1)  # one, read in order
    create(worker, "lite-source", {
        "connector.class": "JdbcSource", "connection.url": f"jdbc:sqlite:{tmp_path / 'shop.db'}",
        "mode": "timestamp+incrementing", "timestamp.column.name": "at",
        "incrementing.column.name": "id", "topic.prefix": topic_name + "-",
        "poll.interval.ms": "200", **JSON, "value.converter.schemas.enable": "false"})
    reader = TopicReader(broker.bootstrap, topic_name + "-events")
    try:
        assert len(reader.read(2)) == 2
        sql(url, "INSERT INTO events VALUES (3, 'c', '2026-01-02 00:00:00.000000')")
        values = [json.loads(m.value()) for m in reader.read(3)]
    finally:
        reader.close()
        worker.request("DELETE", "/connectors/lite-source")
    assert values == [{"id": 1, "kind": "a", "at": 1767225600000},
                      {"id": 2, "kind": "b", "at": 1767225600000},
                      {"id": 3, "kind": "c", "at": 1767312000000}]


@needs_pg
def test_unreachable_database_fails_then_restarts(worker: ConnectWorkerProcess,
                                                  topic_name: str) -> None:
    port = free_port()
    create(worker, "later", {
        "connector.class": "JdbcSourceConnector", "mode": "bulk", "topic.prefix": topic_name,
        "connection.url": f"jdbc:postgresql://127.0.0.1:{port}/postgres?user=postgres",
        "connection.attempts": "1", "poll.interval.ms": "60000"})
    try:
        status = worker.request("GET", "/connectors/later/status")[1]
        assert status["connector"]["state"] == "FAILED" and status["tasks"] == []
        assert f"Could not connect to postgresql+psycopg://postgres@127.0.0.1:{port}/postgres" \
               in status["connector"]["trace"]
        with PostgresProcess(port=port) as late_pg:
            sql(late_pg.url, "CREATE TABLE t (id INTEGER)")  # bulk: one task per table
            code, body = worker.request("POST", "/connectors/later/restart?includeTasks=true")
            assert code == 202, body
            status = worker.request("GET", "/connectors/later/status")[1]
            assert status["connector"]["state"] == "RUNNING"
            wait_for(lambda: [t["state"] for t in worker.request(
                "GET", "/connectors/later/status")[1]["tasks"]] == ["RUNNING"], "task RUNNING", timeout=30.0)
    finally:
        worker.request("DELETE", "/connectors/later")


@needs_pg
def test_postgres_query_timestamp_incrementing_and_evolving_upsert(pg: PostgresProcess) -> None:
    """On PostgreSQL itself (tasks in-process, no broker): a ``query`` in
    timestamp+incrementing mode sees new rows and updated ones, and resumes from its offset;
    the sink's upsert creates its table, then adds a column when the schema grows."""
    from strom.connect.api import SinkRecord, SourceTaskContext
    from strom.connect.converters import Schema
    from strom.connect.jdbc.sink import JdbcSinkTask
    from strom.connect.jdbc.source import JdbcSourceTask

    sql(pg.url, "CREATE TABLE stock (id SERIAL PRIMARY KEY, sku TEXT NOT NULL, "
                "qty INTEGER NOT NULL, changed TIMESTAMP NOT NULL)")
    sql(pg.url, "INSERT INTO stock (sku, qty, changed) VALUES "
                "('a', 1, '2026-01-01 10:00'), ('b', 0, '2026-01-01 10:00'), "
                "('c', 5, '2026-01-01 11:00')")
    config = {"connection.url": pg.jdbc_url, "mode": "timestamp+incrementing",
              "query": "SELECT id, sku, qty, changed FROM stock WHERE qty > 0",
              "timestamp.column.name": "changed", "incrementing.column.name": "id",
              "topic.prefix": "stock", "poll.interval.ms": "1", "batch.max.rows": "2",
              "timestamp.delay.interval.ms": "0"}

    def run(offsets: dict[str, Any]) -> list[Any]:
        task = JdbcSourceTask()
        task.initialize(SourceTaskContext(lambda p: offsets.get(json.dumps(p))))
        task.start(dict(config))
        try:
            out: list[Any] = []
            for _ in range(10):
                out += task.poll() or []
            return out
        finally:
            task.stop()

    first = run({})
    assert [(r.topic, r.value["id"], r.value["sku"]) for r in first] == [
        ("stock", 1, "a"), ("stock", 3, "c")]
    assert first[0].source_partition == {"query": config["query"]}
    offsets = {json.dumps(first[-1].source_partition): first[-1].source_offset}
    sql(pg.url, "UPDATE stock SET qty = 2, changed = '2026-01-02 09:00' WHERE sku = 'b'")
    sql(pg.url, "INSERT INTO stock (sku, qty, changed) VALUES ('d', 7, '2026-01-02 10:00')")
    assert [(r.value["id"], r.value["qty"]) for r in run(offsets)] == [(2, 2), (4, 7)]

    user = Schema("struct", name="user", fields=(("id", Schema("int64")),
                                                 ("name", Schema("string", optional=True))))
    wider = Schema("struct", name="user", fields=(*user.fields,
                                                  ("email", Schema("string", optional=True))))
    sink = JdbcSinkTask()
    sink.start({"connection.url": pg.url, "insert.mode": "upsert", "pk.mode": "record_key",
                "pk.fields": "uid", "auto.create": "true", "auto.evolve": "true",
                "table.name.format": "users_${topic}", "max.retries": "0"})
    try:
        def rec(value: dict[str, Any], key: str, offset: int, schema: Schema) -> SinkRecord:
            return SinkRecord(topic="t", partition=0, key=key, value=value,
                              value_schema=schema, kafka_offset=offset)

        sink.put([rec({"id": 1, "name": "a"}, "u1", 0, user),
                  rec({"id": 2, "name": "b"}, "u2", 1, user),
                  rec({"id": 3, "name": "a2"}, "u1", 2, user)])
        assert sql(pg.url, "SELECT * FROM users_t ORDER BY uid") == [
            ("u1", 3, "a2"), ("u2", 2, "b")]
        sink.put([rec({"id": 4, "name": "c", "email": "c@x"}, "u2", 3, wider)])
        assert sql(pg.url, "SELECT * FROM users_t ORDER BY uid") == [
            ("u1", 3, "a2", None), ("u2", 4, "c", "c@x")]
    finally:
        sink.stop()
