"""The Parquet sink task: paths, rotation by count/record time/wall clock, safe offsets."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

pq = pytest.importorskip("pyarrow.parquet")

from strom.connect.api import SinkRecord  # noqa: E402
from strom.connect.converters import Schema  # noqa: E402
from strom.connect.datefmt import format_ms, parse_ms  # noqa: E402
from strom.connect.parquet import ParquetSinkConnector, ParquetSinkTask  # noqa: E402
from strom.connect.transforms.base import TIMESTAMP  # noqa: E402

EVENT = Schema("struct", name="event", fields=(
    ("id", Schema("int64")), ("name", Schema("string", optional=True)),
    ("at", Schema("int64", name=TIMESTAMP)), ("tags", Schema("array", items=Schema("string"))),
))
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def task(tmp_path: Path, **config: str) -> ParquetSinkTask:
    t = ParquetSinkTask()
    t.start({"store.url": str(tmp_path / "lake"), "flush.size": "3",
             "timestamp.extractor": "Record", **config})
    return t


def rec(i: int, ts: int, schema: Schema | None = EVENT, partition: int = 0) -> SinkRecord:
    value = {"id": i, "name": f"n{i}", "at": ts, "tags": ["a", str(i)]}
    return SinkRecord(topic="events", partition=partition, value=value, value_schema=schema,
                      timestamp=ts, kafka_offset=i)


def files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.parquet")
                  if "+tmp" not in p.parts)


def test_java_patterns() -> None:
    assert format_ms("'year'=YYYY/'month'=MM/'day'=dd/'hour'=HH", T0 + 3_600_000) == \
        "year=2026/month=01/day=01/hour=01"
    assert parse_ms("yyyy-MM-dd HH:mm:ss.SSS", "2026-01-01 00:00:01.250") == T0 + 1250


def test_count_rotation_time_paths_and_safe_offsets(tmp_path: Path) -> None:
    t = task(tmp_path, **{"partitioner.class":
                          "io.confluent.connect.storage.partitioner.HourlyPartitioner"})
    hour = 3_600_000
    t.put([rec(i, T0 + i) for i in range(4)] + [rec(4, T0 + hour)])
    root = tmp_path / "lake" / "topics"
    assert files(root) == ["events/year=2026/month=01/day=01/hour=00/"
                           "events+0+0000000000+0000000002.parquet"]
    # offsets 3 (hour 00) and 4 (hour 01) are buffered: commit only up to 3
    assert t.pre_commit({("events", 0): 5}) == {("events", 0): 3}
    table = pq.read_table(root / files(root)[0])
    assert table.column("id").to_pylist() == [0, 1, 2]
    assert table.column("tags").to_pylist() == [["a", "0"], ["a", "1"], ["a", "2"]]
    assert str(table.schema.field("at").type) == "timestamp[ms, tz=UTC]"
    assert not table.schema.field("id").nullable and table.schema.field("name").nullable
    assert list((root / "+tmp").iterdir()) == []
    t.stop()


def test_rotation_by_record_time_schema_change_and_wall_clock(tmp_path: Path) -> None:
    t = task(tmp_path, **{"flush.size": "100", "rotate.interval.ms": "1000"})
    root = tmp_path / "lake" / "topics"
    t.put([rec(0, T0), rec(1, T0 + 500), rec(2, T0 + 1000)])  # 2 is 1 s after the first
    assert files(root) == ["events/partition=0/events+0+0000000000+0000000001.parquet"]
    t.put([rec(3, T0 + 1001, schema=None)])  # schemaless now: another file
    assert len(files(root)) == 2
    deadline = time.monotonic() + 10
    safe: dict[Any, int] = {}
    while time.monotonic() < deadline:
        safe = t.pre_commit({("events", 0): 4})
        if safe[("events", 0)] == 4:
            break
        time.sleep(0.05)
    assert safe == {("events", 0): 4}
    assert files(root)[-1] == "events/partition=0/events+0+0000000003+0000000003.parquet"
    assert pq.read_table(root / files(root)[-1]).to_pylist() == [
        {"id": 3, "name": "n3", "at": T0 + 1001, "tags": ["a", "3"]}]
    t.stop()


def test_primitive_values_and_validation(tmp_path: Path) -> None:
    t = task(tmp_path, **{"flush.size": "2"})
    t.put([SinkRecord(topic="lines", partition=1, value=f"line {i}",
                      value_schema=Schema("string"), timestamp=T0, kafka_offset=i)
           for i in range(2)])
    [path] = files(tmp_path / "lake" / "topics")
    assert path == "lines/partition=1/lines+1+0000000000+0000000001.parquet"
    assert pq.read_table(tmp_path / "lake" / "topics" / path).to_pylist() == [
        {"value": "line 0"}, {"value": "line 1"}]
    assert ParquetSinkConnector().validate({"partitioner.class": "TimeBasedPartitioner"}) == {
        "path.format": ["TimeBasedPartitioner needs path.format"]}
