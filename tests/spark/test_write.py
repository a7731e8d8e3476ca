"""Writes through format("strom"): batch and streaming, at-least-once and exactlyOnce."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from strom.testing import BrokerProcess

from .helpers import consume_all, create_topic, produce


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_batch_write_columns_and_java_partitioning(spark: Any, spark_broker: BrokerProcess) -> None:
    bootstrap = spark_broker.bootstrap
    main, side = _name("out"), _name("side")
    create_topic(bootstrap, main, 4)
    create_topic(bootstrap, side, 2)
    rows = [
        (f"key-{i}", f"value-{i}", side if i % 10 == 0 else None, 1 if i % 10 == 0 else None,
         [("n", str(i).encode())] if i % 2 else None)
        for i in range(200)
    ]  # fmt: skip
    df = spark.createDataFrame(
        rows, "key string, value string, topic string, partition int, "
        "headers array<struct<key: string, value: binary>>",
    )
    df.write.format("strom").mode("append").option("kafka.bootstrap.servers", bootstrap).option(
        "topic", main
    ).save()

    got = consume_all(bootstrap, main, [0, 1, 2, 3])
    assert sorted(m.value() for m in got) == sorted(
        f"value-{i}".encode() for i in range(200) if i % 10
    )
    # key partitioning as the Java client does it (murmur2), same as confluent's murmur2_random
    expected = {}
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    for i in range(1, 200):
        if i % 10:
            producer.produce(main, value=b"probe", key=f"key-{i}".encode(),
                             on_delivery=lambda e, m, i=i: expected.__setitem__(i, m.partition()))  # fmt: skip
    producer.flush(30)
    for message in got:
        if message.value() == b"probe":
            continue
        i = int(message.value().split(b"-")[1])
        assert message.partition() == expected[i]
        assert message.key() == f"key-{i}".encode()
        assert message.headers() == ([("n", str(i).encode())] if i % 2 else None)
    routed = consume_all(bootstrap, side, [0, 1])
    assert sorted(m.value() for m in routed) == sorted(f"value-{i}".encode() for i in range(0, 200, 10))
    assert {m.partition() for m in routed} == {1}


def test_sink_refuses_a_frame_without_value(spark: Any, spark_broker: BrokerProcess) -> None:
    df = spark.createDataFrame([("k",)], "key string")
    with pytest.raises(Exception, match="needs a 'value' column"):
        df.write.format("strom").mode("append").option(
            "kafka.bootstrap.servers", spark_broker.bootstrap
        ).option("topic", "x").save()


def test_topic_to_topic_streaming_at_least_once(
    spark: Any, spark_broker: BrokerProcess, tmp_path: Path
) -> None:
    bootstrap = spark_broker.bootstrap
    source, sink = _name("t2t-in"), _name("t2t-out")
    create_topic(bootstrap, source, 2)
    create_topic(bootstrap, sink, 2)
    produce(bootstrap, source, [{"key": b"k%d" % (i % 7), "value": b"%d" % i} for i in range(500)])
    query = (
        spark.readStream.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("key", "CAST(CAST(value AS STRING) AS INT) * 2 AS n")
        .selectExpr("key", "CAST(n AS STRING) AS value")
        .writeStream.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(240)
    assert query.exception() is None
    out = consume_all(bootstrap, sink, [0, 1])
    assert sorted(int(m.value()) for m in out) == [2 * i for i in range(500)]
    inputs = {b"%d" % (2 * i): b"k%d" % (i % 7) for i in range(500)}
    assert all(m.key() == inputs[m.value()] for m in out)


def test_topic_to_topic_streaming_exactly_once(
    spark: Any, spark_broker: BrokerProcess, tmp_path: Path
) -> None:
    """exactlyOnce=true writes through one transaction per task (read_committed sees each row
    once), and records each task's batch id in the sink-owned group inside that transaction."""
    bootstrap = spark_broker.bootstrap
    source, sink = _name("eo-in"), _name("eo-out")
    create_topic(bootstrap, source, 2)
    create_topic(bootstrap, sink, 2)
    produce(bootstrap, source, [{"value": b"%d" % i, "partition": i % 2} for i in range(100)])
    query = (
        spark.readStream.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load()
        .select("value")
        .writeStream.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("exactlyOnce", "true")
        .option("transactionalIdPrefix", "eo-write")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(240)
    assert query.exception() is None
    out = consume_all(bootstrap, sink, [0, 1], **{"isolation.level": "read_committed"})
    assert sorted(int(m.value()) for m in out) == list(range(100))
    # the records are transactional: followed by a commit marker (a gap at the end offset)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": _name("probe")})
    ends = [consumer.get_watermark_offsets(TopicPartition(sink, p), 10)[1] for p in (0, 1)]
    assert sum(ends) > len(out)
    # each task partition recorded batch id + 1 in its own group, on partition 0 of the topic
    for task in (0, 1):
        group = Consumer({"bootstrap.servers": bootstrap, "group.id": f"eo-write-{query.id}-{task}"})
        [recorded] = group.committed([TopicPartition(sink, 0)], timeout=10)
        assert recorded.offset == 1 and recorded.metadata == "strom-spark batch 0"
        group.close()
    consumer.close()


def test_at_least_once_tasks_of_a_worker_share_a_kept_producer(spark_broker: BrokerProcess) -> None:
    """The sink's at-least-once tasks run in one Python worker one after another (Spark reuses
    its workers): the second task with the same settings writes through the producer the first
    one kept; a task whose write fails leaves no producer kept, and the next task makes a new
    one. Every acknowledged row is in the topic, in order."""
    import pyarrow as pa

    from strom.spark.options import WriteOptions
    from strom.spark.row_producer import drop_kept_producers, kept_producer, write_at_least_once

    bs = spark_broker.bootstrap
    topic = f"kept-{uuid.uuid4().hex[:8]}"
    create_topic(bs, topic, 1)
    options = WriteOptions(client={"bootstrap.servers": bs}, topic=topic)

    def batch(*values: bytes) -> pa.RecordBatch:
        return pa.RecordBatch.from_pydict({"value": pa.array(values, pa.binary())})

    assert kept_producer(options) is None
    try:
        assert write_at_least_once(options, iter([batch(b"a0", b"a1"), batch(b"a2")])) == 3
        first = kept_producer(options)
        assert first is not None
        assert write_at_least_once(options, iter([batch(b"b0", b"b1")])) == 2
        assert kept_producer(options) is first  # the second task used it and kept it again
        # a task that fails (a value above the client's message.max.bytes): it raises, and
        # its producer is not kept
        with pytest.raises(KafkaException, match="MSG_SIZE_TOO_LARGE"):
            write_at_least_once(options, iter([batch(b"x" * 2_000_000, b"never")]))
        assert kept_producer(options) is None
        assert write_at_least_once(options, iter([batch(b"c0")])) == 1
        again = kept_producer(options)
        assert again is not None and again is not first
    finally:
        drop_kept_producers()
    assert kept_producer(options) is None
    got = [m.value() for m in consume_all(bs, topic, [0])]
    assert got == [b"a0", b"a1", b"a2", b"b0", b"b1", b"c0"]
