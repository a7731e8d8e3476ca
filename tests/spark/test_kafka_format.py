"""Spark's own Kafka connector (``format("kafka")``, spark-sql-kafka-0-10 with its kafka-clients,
resolved by Maven into ``spark.jars``) against strom, beside strom's Python source.

The same options on the same topic give the same rows through either format (every column,
headers included); each format's sink writes what the other reads; a streaming query with
Spark's Kafka source and sink copies a topic, resumes from its checkpoint without a duplicate,
and strom's source feeds Spark's Kafka sink.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from strom.testing import BrokerProcess

from .helpers import consume_all, create_topic, produce

COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _read(spark: Any, fmt: str, bootstrap: str, **options: str) -> list[tuple[Any, ...]]:
    reader = spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        reader = reader.option(key, value)
    df = reader.load()
    rows = [tuple(_plain(v) for v in row) for row in df.select(*df.columns).collect()]
    return sorted(rows, key=lambda r: (r[df.columns.index("partition")],
                                       r[df.columns.index("offset")]))  # fmt: skip


def _plain(value: Any) -> Any:
    """Rows of either source as comparable values (bytearray -> bytes, header structs -> tuples)."""
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, list):
        return tuple((h["key"], None if h["value"] is None else bytes(h["value"])) for h in value)
    return value


def _records(n: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        record: dict[str, Any] = {"key": b"k%d" % (i % 13), "value": b"value %d" % i}
        if i % 4 == 0:
            record["headers"] = [("trace", b"t%d" % i), ("empty", None)]
        if i % 37 == 0:
            record["key"] = None
        out.append(record)
    return out


def test_both_formats_read_the_same_rows(kafka_format: Any, spark_broker: BrokerProcess) -> None:
    spark, bootstrap = kafka_format, spark_broker.bootstrap
    topic = _name("both-read")
    create_topic(bootstrap, topic, 3)
    placed = produce(bootstrap, topic, _records(240), partitioner="murmur2_random")
    ends = {p: 1 + max(o for q, o in placed if q == p) for p in range(3)}

    kafka_rows = _read(spark, "kafka", bootstrap, subscribe=topic, includeHeaders="true")
    assert len(kafka_rows) == 240
    assert _read(spark, "strom", bootstrap, subscribe=topic, includeHeaders="true") == kafka_rows

    # a slice by assign + starting/ending offsets (JSON), without headers
    starting = json.dumps({topic: {"0": 5, "1": -2, "2": 0}})
    ending = json.dumps({topic: {"0": ends[0] - 3, "1": -1, "2": 10}})
    options = {"assign": json.dumps({topic: [0, 1, 2]}), "startingOffsets": starting,
               "endingOffsets": ending}  # fmt: skip
    sliced = _read(spark, "kafka", bootstrap, **options)
    assert len(sliced) == (ends[0] - 3 - 5) + ends[1] + 10
    assert _read(spark, "strom", bootstrap, **options) == sliced
    assert all(len(row) == len(COLUMNS) - 1 for row in sliced)  # no headers column


def test_each_sink_writes_what_the_other_reads(kafka_format: Any,
                                               spark_broker: BrokerProcess) -> None:  # fmt: skip
    spark, bootstrap = kafka_format, spark_broker.bootstrap
    rows = [(f"k{i % 5}", f"row {i}", i % 2, [("n", str(i).encode())]) for i in range(200)]
    df = spark.createDataFrame(
        rows, "key string, value string, partition int, headers array<struct<key:string,value:binary>>"
    )  # fmt: skip
    for writer_fmt, reader_fmt in (("kafka", "strom"), ("strom", "kafka")):
        topic = _name(f"{writer_fmt}-sink")
        create_topic(bootstrap, topic, 2)
        # append: Python data sources refuse Spark's default ErrorIfExists (Kafka's ignores it)
        (df.write.format(writer_fmt).mode("append")
         .option("kafka.bootstrap.servers", bootstrap).option("topic", topic).save())  # fmt: skip
        got = (spark.read.format(reader_fmt).option("kafka.bootstrap.servers", bootstrap)
               .option("subscribe", topic).option("includeHeaders", "true").load()
               .selectExpr("CAST(key AS STRING) k", "CAST(value AS STRING) v", "partition",
                           "headers").collect())  # fmt: skip
        assert sorted((r.k, r.v, r.partition, _plain(r.headers)) for r in got) == sorted(
            (k, v, p, tuple(h)) for k, v, p, h in rows
        ), f"{writer_fmt} sink read back by {reader_fmt}"


def _copy_stream(spark: Any, source_fmt: str, bootstrap: str, source: str, target: str,
                 checkpoint: Path) -> None:  # fmt: skip
    """One Trigger.AvailableNow run: ``source`` (upper-cased values) into ``target`` through
    Spark's Kafka sink."""
    stream = (spark.readStream.format(source_fmt).option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", source).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "50").load()
              .selectExpr("key", "UPPER(CAST(value AS STRING)) AS value"))  # fmt: skip
    query = (stream.writeStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
             .option("topic", target).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())  # fmt: skip
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()


def test_streaming_with_sparks_kafka_source_and_sink(kafka_format: Any,
                                                     spark_broker: BrokerProcess,
                                                     tmp_path: Path) -> None:  # fmt: skip
    spark, bootstrap = kafka_format, spark_broker.bootstrap
    for source_fmt in ("kafka", "strom"):
        source, target = _name(f"{source_fmt}-in"), _name(f"{source_fmt}-out")
        create_topic(bootstrap, source, 1)
        create_topic(bootstrap, target, 1)
        checkpoint = tmp_path / f"{source_fmt}-checkpoint"
        produce(bootstrap, source, [{"key": b"k%d" % i, "value": b"first %d" % i}
                                    for i in range(120)])  # fmt: skip
        _copy_stream(spark, source_fmt, bootstrap, source, target, checkpoint)
        produce(bootstrap, source, [{"key": b"k%d" % i, "value": b"second %d" % i}
                                    for i in range(30)])  # fmt: skip
        _copy_stream(spark, source_fmt, bootstrap, source, target, checkpoint)  # resumes

        copied = consume_all(bootstrap, target, [0])
        assert [(m.key(), m.value()) for m in copied] == (
            [(b"k%d" % i, b"FIRST %d" % i) for i in range(120)]
            + [(b"k%d" % i, b"SECOND %d" % i) for i in range(30)]
        ), source_fmt
