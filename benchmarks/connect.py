"""strom Connect throughput against a hand-written loop doing the same work, in the same run.

Two pipelines, each measured twice on one strom broker:

- **file -> topic**: N lines through ``FileStreamSource`` (StringConverter, ``acks=all``) on a
  standalone worker, against a confluent-kafka loop that reads the file and produces each line
  with the same producer settings and flushes;
- **topic -> database**: N JSON records (the JsonConverter envelope of a 3-field struct)
  through ``JdbcSink`` (insert mode, ``auto.create``) into PostgreSQL (a throw-away cluster
  made with initdb; SQLite when PostgreSQL is not installed), against a confluent-kafka
  consumer + psycopg (or sqlite3) loop that decodes each batch and ``executemany``-inserts
  it, committing per batch.

Timing starts when the connector is created (the worker is already up) or the loop starts,
and stops when the topic's end offset (or the table's row count) reaches N. Prints ONE JSON
line; read ``ratios`` (Connect / hand-written loop; above 1 means Connect is faster).

    python benchmarks/connect.py [--records N] [--quick]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import env_info, log, ratio, remove, workdir  # noqa: E402
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402

from strom.testing import BrokerProcess  # noqa: E402
from strom.testing.connect import ConnectWorkerProcess  # noqa: E402
from strom.testing.postgres import PostgresProcess, postgres_binaries  # noqa: E402

PRODUCER = {"acks": "all", "linger.ms": 5, "partitioner": "murmur2_random"}
SCHEMA = {"type": "struct", "name": "sale", "optional": False, "fields": [
    {"field": "id", "type": "int64", "optional": False},
    {"field": "item", "type": "string", "optional": False},
    {"field": "amount", "type": "double", "optional": False}]}


def wait_until(check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError("pipeline did not finish in time")
        time.sleep(0.1)


class EndOffset:
    """The end offset of partition 0 of a topic, through one long-lived consumer."""

    def __init__(self, bootstrap: str) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-end"})

    def __call__(self, topic: str) -> int:
        try:
            tp = TopicPartition(topic, 0)
            return int(self.consumer.get_watermark_offsets(tp, timeout=10)[1])
        except KafkaException:  # the topic is not created yet
            return 0

    def close(self) -> None:
        self.consumer.close()


def file_to_topic_connect(end_offset: EndOffset, worker: ConnectWorkerProcess, path: Path,
                          topic: str, n: int) -> float:
    start = time.perf_counter()
    status, body = worker.request("POST", "/connectors", {"name": "bench-file", "config": {
        "connector.class": "FileStreamSource", "file": str(path), "topic": topic}})
    assert status == 201, body
    wait_until(lambda: end_offset(topic) >= n, 600)
    elapsed = time.perf_counter() - start
    worker.request("DELETE", "/connectors/bench-file")
    return n / elapsed


def file_to_topic_hand(bootstrap: str, end_offset: EndOffset, path: Path, topic: str,
                       n: int) -> float:
    start = time.perf_counter()
    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER})
    with open(path, "rb") as f:
        for line in f:
            while True:
                try:
                    producer.produce(topic, value=line.rstrip(b"\n"))
                    break
                except BufferError:
                    producer.poll(0.05)
    producer.flush(120)
    wait_until(lambda: end_offset(topic) >= n, 600)
    return n / (time.perf_counter() - start)


class Database:
    """PostgreSQL when installed, else SQLite: a SQLAlchemy URL and a DB-API connection."""

    def __init__(self, root: Path) -> None:
        self.pg: PostgresProcess | None = None
        self._counter: Any = None
        if postgres_binaries() is not None:
            self.pg = PostgresProcess().start()
            self.kind, self.url = "postgresql", self.pg.url
        else:
            self.kind, self.url = "sqlite", f"sqlite:///{root / 'bench.db'}"
            self.path = root / "bench.db"

    def connect(self) -> Any:
        if self.pg is not None:
            import psycopg

            return psycopg.connect(f"host=127.0.0.1 port={self.pg.port} user=postgres "
                                   "dbname=postgres")
        return sqlite3.connect(self.path)

    def count(self, table: str) -> int:
        if self._counter is None:
            self._counter = self.connect()
        try:
            cur = self._counter.cursor()
            cur.execute(f"SELECT count(*) FROM {table}")
            result = int(cur.fetchone()[0])
        except Exception:  # noqa: BLE001 - not created yet
            result = 0
        self._counter.rollback()  # the next count sees newer commits
        return result

    def close(self) -> None:
        if self._counter is not None:
            self._counter.close()
        if self.pg is not None:
            self.pg.cleanup()


def topic_to_db_connect(db: Database, worker: ConnectWorkerProcess, topic: str, n: int
                        ) -> float:
    start = time.perf_counter()
    status, body = worker.request("POST", "/connectors", {"name": "bench-jdbc", "config": {
        "connector.class": "JdbcSink", "connection.url": db.url, "topics": topic,
        "table.name.format": "sales_connect", "auto.create": "true",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter"}})
    assert status == 201, body
    wait_until(lambda: db.count("sales_connect") >= n, 600)
    elapsed = time.perf_counter() - start
    worker.request("DELETE", "/connectors/bench-jdbc")
    return n / elapsed


def topic_to_db_hand(db: Database, bootstrap: str, topic: str, n: int) -> float:
    start = time.perf_counter()
    conn = db.connect()
    mark = "%s" if db.kind == "postgresql" else "?"
    cur = conn.cursor()
    cur.execute("CREATE TABLE sales_hand (id BIGINT NOT NULL, item TEXT NOT NULL, "
                "amount DOUBLE PRECISION NOT NULL)")
    conn.commit()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-hand",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    done = 0
    try:
        while done < n:
            messages = [m for m in consumer.consume(500, 1.0) if m.error() is None]
            if not messages:
                continue
            rows = []
            for m in messages:
                p = json.loads(m.value())["payload"]
                rows.append((p["id"], p["item"], p["amount"]))
            cur.executemany(f"INSERT INTO sales_hand VALUES ({mark}, {mark}, {mark})", rows)
            conn.commit()
            consumer.commit(asynchronous=False)
            done += len(rows)
    finally:
        consumer.close()
        conn.close()
    return n / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true", help="10x fewer records (smoke run)")
    args = parser.parse_args()
    n = args.records // 10 if args.quick else args.records
    root = workdir()
    result: dict[str, Any] = {"bench": "connect", "records": n, "env": env_info()}
    broker = BrokerProcess(root / "broker", log_file=root / "broker.log")
    db: Database | None = None
    worker: ConnectWorkerProcess | None = None
    try:
        broker.start()
        db = Database(root)
        result["database"] = db.kind
        worker = ConnectWorkerProcess(root / "worker", broker.bootstrap,
                                      settings={"offset.flush.interval.ms": "10000"})
        worker.start()
        lines = root / "lines.txt"
        lines.write_text("".join(f"line {i:08d} {'x' * 60}\n" for i in range(n)))
        log(f"file -> topic, {n} lines")
        end_offset = EndOffset(broker.bootstrap)
        try:
            connect_file = file_to_topic_connect(end_offset, worker, lines, "file-connect", n)
            hand_file = file_to_topic_hand(broker.bootstrap, end_offset, lines, "file-hand", n)
        finally:
            end_offset.close()
        log("producing the JSON records for topic -> database")
        producer = Producer({"bootstrap.servers": broker.bootstrap, **PRODUCER})
        for i in range(n):
            payload = {"id": i, "item": f"item-{i % 97}", "amount": i / 8}
            while True:
                try:
                    producer.produce("sales", json.dumps({"schema": SCHEMA,
                                                          "payload": payload}).encode())
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.flush(120)
        log(f"topic -> {db.kind}")
        connect_db = topic_to_db_connect(db, worker, "sales", n)
        hand_db = topic_to_db_hand(db, broker.bootstrap, "sales", n)
        result["file_to_topic"] = {"connect_records_per_s": round(connect_file),
                                   "hand_records_per_s": round(hand_file)}
        result["topic_to_db"] = {"connect_records_per_s": round(connect_db),
                                 "hand_records_per_s": round(hand_db)}
        result["ratios"] = {"file_to_topic": ratio(connect_file, hand_file),
                            "topic_to_db": ratio(connect_db, hand_db)}
    except Exception as exc:  # noqa: BLE001 - reported in the JSON line, never invented
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["trace"] = traceback.format_exc(limit=5)
        if worker is not None:
            result["worker_log_tail"] = worker.log_tail(20)
    finally:
        if worker is not None:
            worker.stop()
        if db is not None:
            db.close()
        broker.stop()
        remove(root)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
