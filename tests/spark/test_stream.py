"""Structured Streaming through format("strom"): exact resume, admission control, new partitions."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from strom.testing import BrokerProcess

from .helpers import add_partitions, create_topic, produce, wait_for


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class Collector:
    """A foreachBatch sink that keeps (batch id, [(partition, offset, value)]) per batch."""

    def __init__(self, fail_batches: set[int] | None = None) -> None:
        self.batches: list[tuple[int, list[tuple[int, int, bytes]]]] = []
        self.fail_batches = set(fail_batches or ())
        self.lock = threading.Lock()

    def __call__(self, df: Any, batch_id: int) -> None:
        if batch_id in self.fail_batches:
            self.fail_batches.discard(batch_id)
            raise RuntimeError(f"injected failure in batch {batch_id}")
        rows = [(r.partition, r.offset, r.value) for r in df.collect()]
        with self.lock:
            self.batches.append((batch_id, rows))

    def rows(self) -> list[tuple[int, int, bytes]]:
        with self.lock:
            return [row for _, rows in self.batches for row in rows]


def _stream(spark: Any, bootstrap: str, topic: str, **options: str) -> Any:
    reader = (
        spark.readStream.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_restart_before_first_commit_replays_the_same_range(
    spark: Any, spark_broker: BrokerProcess, tmp_path: Path
) -> None:
    """Batch 0 fails before its commit; more data arrives; the query restarts (with another
    startingOffsets, which a restart ignores): Spark calls initialOffset() again for batch 0,
    and batch 0 must replay exactly the range it had, from the checkpoint."""
    topic = _name("resume")
    bootstrap = spark_broker.bootstrap
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, [{"value": b"v-%d" % i} for i in range(50)])
    checkpoint = str(tmp_path / "ck")

    first = Collector(fail_batches={0})
    query = (
        _stream(spark, bootstrap, topic, startingOffsets="earliest")
        .writeStream.foreachBatch(first)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception, match="injected failure in batch 0"):
        query.awaitTermination(180)
    assert first.batches == []
    assert (tmp_path / "ck" / "offsets" / "0").exists()
    assert not (tmp_path / "ck" / "commits" / "0").exists()

    produce(bootstrap, topic, [{"value": b"v-%d" % i} for i in range(50, 100)])
    second = Collector()
    query = (
        _stream(spark, bootstrap, topic, startingOffsets="latest")
        .writeStream.foreachBatch(second)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180)
    assert query.exception() is None
    assert [o for _, o, _ in second.rows()] == list(range(100)), "a gap or a duplicate"
    batch_id, rows = second.batches[0]
    assert batch_id == 0 and [o for _, o, _ in rows] == list(range(50))


def test_reader_call_sequence_of_a_restart_before_first_commit(spark_broker: BrokerProcess) -> None:
    """The same trap with startingOffsets=latest, driving the reader through the calls Spark
    makes (seen in Spark 4.3's logs); a first batch with data cannot be arranged through Spark
    with 'latest': it asks initialOffset() and latestOffset() back to back."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable  # noqa: PLC0415

    from strom.spark.options import parse_read_options  # noqa: PLC0415
    from strom.spark.reader import StromStreamReader  # noqa: PLC0415

    topic = _name("sequence")
    bootstrap = spark_broker.bootstrap
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, [{"value": b"old"}] * 50)
    options = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic}

    before = StromStreamReader(parse_read_options(options, streaming=True))
    initial = before.initialOffset()
    assert initial == {topic: {"0": 50}}
    produce(bootstrap, topic, [{"value": b"new"}] * 20)
    end0 = before.latestOffset(initial, ReadAllAvailable())  # written to the offset log
    before.stop()
    produce(bootstrap, topic, [{"value": b"later"}] * 30)

    after = StromStreamReader(parse_read_options(options, streaming=True))
    assert after.partitions(end0, end0) == []  # setLatestSeenOffset, on some restarts
    again = after.initialOffset()  # resolved anew: "latest" is now 100
    [part] = after.partitions(again, end0)  # Spark replays batch 0 as (initialOffset, end0)
    assert (part.topic, part.start, part.end) == (topic, 50, 70)
    assert after.initialOffset() == initial
    after.stop()


def test_restart_mid_stream_and_max_offsets_per_trigger(
    spark: Any, spark_broker: BrokerProcess, tmp_path: Path
) -> None:
    topic = _name("mid")
    bootstrap = spark_broker.bootstrap
    create_topic(bootstrap, topic, 2)
    for p in (0, 1):
        produce(bootstrap, topic, [{"value": b"%d-%d" % (p, i), "partition": p} for i in range(60)])
    checkpoint = str(tmp_path / "ck")
    options = {"startingOffsets": "earliest", "maxOffsetsPerTrigger": "25"}

    first = Collector(fail_batches={2})
    query = (
        _stream(spark, bootstrap, topic, **options)
        .writeStream.foreachBatch(first)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception, match="injected failure in batch 2"):
        query.awaitTermination(180)
    assert [b for b, _ in first.batches] == [0, 1]

    second = Collector()
    query = (
        _stream(spark, bootstrap, topic, **options)
        .writeStream.foreachBatch(second)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180)
    rows = first.rows() + second.rows()
    assert sorted((p, o) for p, o, _ in rows) == [(p, o) for p in (0, 1) for o in range(60)]
    sizes = [len(batch) for _, batch in first.batches + second.batches]
    assert all(size <= 25 for size in sizes) and sum(sizes) == 120, sizes
    assert [b for b, _ in second.batches][0] == 2


def test_partition_added_mid_stream_is_read(
    spark: Any, spark_broker: BrokerProcess, tmp_path: Path
) -> None:
    topic = _name("grow")
    bootstrap = spark_broker.bootstrap
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, [{"value": b"a-%d" % i, "partition": 0} for i in range(10)])
    sink = Collector()
    query = (
        _stream(spark, bootstrap, topic, startingOffsets="earliest")
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        wait_for(lambda: len(sink.rows()) == 10, 120, "the first 10 records")
        add_partitions(bootstrap, topic, 2)
        produce(bootstrap, topic, [{"value": b"b-%d" % i, "partition": 1} for i in range(7)])
        wait_for(lambda: len(sink.rows()) == 17, 120, "the new partition's records")
    finally:
        query.stop()
    assert sorted((p, o) for p, o, _ in sink.rows()) == (
        [(0, o) for o in range(10)] + [(1, o) for o in range(7)]
    )
