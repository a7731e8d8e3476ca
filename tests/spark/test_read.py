"""Batch reads through format("strom") against a real broker: the data, offsets and options."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from strom.testing import BrokerProcess

from .helpers import create_topic, produce


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _load(spark: Any, bootstrap: str, **options: str) -> Any:
    reader = spark.read.format("strom").option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_batch_read_equals_what_was_produced(spark: Any, spark_broker: BrokerProcess) -> None:
    topic = _name("read")
    create_topic(spark_broker.bootstrap, topic, 3)
    before = int(time.time() * 1000)
    records = []
    for i in range(300):
        record: dict[str, Any] = {"key": b"k%d" % (i % 17), "value": b"value-%d" % i}
        if i % 3 == 0:
            record["headers"] = [("trace", b"t%d" % i), ("n", None)]
        if i % 50 == 0:
            record["key"] = None
        records.append(record)
    placed = produce(spark_broker.bootstrap, topic, records, partitioner="murmur2_random")
    after = int(time.time() * 1000)

    df = _load(spark, spark_broker.bootstrap, subscribe=topic, includeHeaders="true")
    assert df.columns == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"
    ]  # fmt: skip
    rows = df.collect()
    got = {(r.partition, r.offset): r for r in rows}
    assert len(rows) == len(records) == len(got)
    for record, (partition, offset) in zip(records, placed, strict=True):
        row = got[(partition, offset)]
        assert row.topic == topic
        assert row.key == record["key"] and row.value == record["value"]
        assert row.timestampType == 0
        ms = int(row.timestamp.replace(tzinfo=__import__("datetime").timezone.utc).timestamp() * 1000)
        assert before - 5 <= ms <= after + 5
        if "headers" in record:
            assert [(h.key, h.value) for h in row.headers] == record["headers"]
        else:
            assert row.headers is None
    # without includeHeaders the column is absent, as in Spark's Kafka source
    assert "headers" not in _load(spark, spark_broker.bootstrap, subscribe=topic).columns


def test_offsets_json_ending_offsets_assign_and_pattern(
    spark: Any, spark_broker: BrokerProcess
) -> None:
    topic = _name("range")
    create_topic(spark_broker.bootstrap, topic, 2)
    for p in (0, 1):
        produce(spark_broker.bootstrap, topic, [{"value": b"%d-%d" % (p, i), "partition": p}
                                                 for i in range(40)])  # fmt: skip

    def offsets(df: Any) -> list[tuple[int, int]]:
        return sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())

    df = _load(
        spark,
        spark_broker.bootstrap,
        subscribe=topic,
        startingOffsets=json.dumps({topic: {"0": 10, "1": -2}}),
        endingOffsets=json.dumps({topic: {"0": 25, "1": -1}}),
    )
    assert offsets(df) == [(0, o) for o in range(10, 25)] + [(1, o) for o in range(40)]

    df = _load(
        spark,
        spark_broker.bootstrap,
        assign=json.dumps({topic: [1]}),
        startingOffsets=json.dumps({topic: {"1": 35}}),
    )
    assert offsets(df) == [(1, o) for o in range(35, 40)]

    prefix = topic.rsplit("-", 1)[0]
    other = f"{prefix}-other-{uuid.uuid4().hex[:4]}"
    create_topic(spark_broker.bootstrap, other, 1)
    produce(spark_broker.bootstrap, other, [{"value": b"o"}])
    df = _load(spark, spark_broker.bootstrap, subscribePattern=f"{prefix}-.*")
    names = {r.topic for r in df.select("topic").collect()}
    assert {topic, other} <= names


def test_starting_timestamp(spark: Any, spark_broker: BrokerProcess) -> None:
    topic = _name("ts")
    create_topic(spark_broker.bootstrap, topic, 1)
    base = 1_700_000_000_000
    produce(spark_broker.bootstrap, topic,
            [{"value": b"%d" % i, "timestamp": base + i * 1000} for i in range(10)])  # fmt: skip
    df = _load(spark, spark_broker.bootstrap, subscribe=topic, startingTimestamp=str(base + 6500))
    assert [r.value for r in df.orderBy("offset").collect()] == [b"7", b"8", b"9"]


def test_bad_options_fail_with_one_line(spark: Any, spark_broker: BrokerProcess) -> None:
    with pytest.raises(Exception, match="exactly one of the options 'subscribe'"):
        _load(spark, spark_broker.bootstrap).collect()
    with pytest.raises(Exception, match="cannot be 'latest' for a batch query"):
        _load(spark, spark_broker.bootstrap, subscribe="x", startingOffsets="latest").collect()


def test_data_loss_reported_or_skipped(spark: Any, spark_broker: BrokerProcess) -> None:
    from confluent_kafka import TopicPartition  # noqa: PLC0415

    topic = _name("loss")
    create_topic(spark_broker.bootstrap, topic, 1)
    produce(spark_broker.bootstrap, topic, [{"value": b"%d" % i} for i in range(20)])
    admin = AdminClient({"bootstrap.servers": spark_broker.bootstrap})
    [future] = admin.delete_records([TopicPartition(topic, 0, 8)]).values()
    future.result(30)
    start = json.dumps({topic: {"0": 0}})
    with pytest.raises(Exception, match=r"offsets \[0, 8\) of .* are gone"):
        _load(spark, spark_broker.bootstrap, subscribe=topic, startingOffsets=start).collect()
    df = _load(
        spark, spark_broker.bootstrap, subscribe=topic, startingOffsets=start, failOnDataLoss="false"
    )
    assert [r.offset for r in df.orderBy("offset").collect()] == list(range(8, 20))
