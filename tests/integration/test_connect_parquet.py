"""Parquet sink on a real worker: time-partitioned files, rotation, read back with pyarrow."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from strom.testing.connect import ConnectWorkerProcess
from tests.integration.connect_helpers import connect_broker


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """This module's broker: the shared one's, without the initial rebalance delay."""
    yield from connect_broker(tmp_path_factory)

pq = pytest.importorskip("pyarrow.parquet", reason="the parquet extra (pyarrow) is missing")

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
HOUR = 3_600_000
SCHEMA = {"type": "struct", "name": "reading", "optional": False, "fields": [
    {"field": "sensor", "type": "string", "optional": False},
    {"field": "value", "type": "double", "optional": True}]}


def test_time_partitioned_parquet_files(broker: Any, tmp_path: Path, topic_name: str) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap})
    expected = []
    for i in range(250):
        ts = T0 + i if i < 150 else T0 + HOUR + i  # 150 in hour 00, 100 in hour 01
        value = {"sensor": f"s{i % 7}", "value": i / 4}
        expected.append(value)
        p.produce(topic_name, value=json.dumps({"schema": SCHEMA, "payload": value}),
                  partition=0, timestamp=ts)
    assert p.flush(15) == 0
    lake = tmp_path / "lake"
    worker = ConnectWorkerProcess(tmp_path / "worker", broker.bootstrap)
    worker.start()
    try:
        status, body = worker.request("POST", "/connectors", {"name": "pq", "config": {
            "connector.class": "strom.connect.parquet.ParquetSinkConnector",
            "topics": topic_name, "store.url": f"file://{lake}", "flush.size": "100",
            "rotate.interval.ms": "1500", "timestamp.extractor": "Record",
            "partitioner.class": "io.confluent.connect.storage.partitioner."
                                 "TimeBasedPartitioner",
            "path.format": "'year'=YYYY/'month'=MM/'day'=dd/'hour'=HH",
            "partition.duration.ms": "3600000",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter"}})
        assert status == 201, body
        group = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "connect-pq"})
        try:
            deadline = time.monotonic() + 30
            committed = 0
            while time.monotonic() < deadline and committed < 250:
                [tp] = group.committed([TopicPartition(topic_name, 0)], timeout=10)
                committed = tp.offset
                time.sleep(0.2)
        finally:
            group.close()
        assert committed == 250
    finally:
        worker.stop()
    base = lake / "topics" / topic_name / "year=2026" / "month=01" / "day=01"
    names = sorted(str(f.relative_to(base)) for f in base.rglob("*.parquet"))
    assert names == [f"hour=00/{topic_name}+0+0000000000+0000000099.parquet",
                     f"hour=00/{topic_name}+0+0000000100+0000000149.parquet",
                     f"hour=01/{topic_name}+0+0000000150+0000000249.parquet"]
    rows = [r for n in names for r in pq.read_table(base / n).to_pylist()]
    assert rows == expected
    assert list((lake / "topics" / "+tmp").iterdir()) == []
