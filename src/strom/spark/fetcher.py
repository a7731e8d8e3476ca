"""Executor side: read one partition's offset range ``[start, end)`` as Arrow record batches.

A confluent-kafka consumer is assigned the partition at ``start`` (no group membership, no
offset commits) and consumes whole fetches (``consume(num_messages=...)``); each fetch becomes
one ``pyarrow.RecordBatch`` built column by column (:func:`strom.spark.schema.arrow_batch`).

The range ends when a record at ``end - 1`` or later arrives **or** the consumer reports the end
of the partition at or past ``end``. The second rule is what keeps gaps from stalling a read:
the last offsets of a range may hold no record at all (removed by compaction, or a transaction
marker, which consumers never see). A range whose start was removed by retention is reported
(``failOnDataLoss=true``, the default) or read from the log start offset instead.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from pyspark.sql.datasource import InputPartition

from strom.spark.offsets import data_loss
from strom.spark.options import ReadOptions
from strom.spark.schema import arrow_batch

log = logging.getLogger(__name__)

MAX_RECORDS_PER_BATCH = 10_000


class RangePartition(InputPartition):
    """One Spark task: records ``start`` (inclusive) to ``end`` (exclusive) of one partition."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end

    def at(self, start: int) -> RangePartition:
        """The same range from ``start`` on."""
        return RangePartition(self.topic, self.partition, start, self.end)

    def __repr__(self) -> str:
        return f"RangePartition({self.topic}-{self.partition} [{self.start}, {self.end}))"


def consumer_config(options: ReadOptions) -> dict[str, Any]:
    config: dict[str, Any] = dict(options.client)
    config.setdefault("group.id", f"spark-strom-source-{uuid.uuid4().hex[:12]}")
    config.update(
        {
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            # An out-of-range start is data loss: we decide what to do, not librdkafka.
            "auto.offset.reset": "error",
        }
    )
    return config


def read_range(
    options: ReadOptions, part: RangePartition, schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``part`` as RecordBatches of ``schema``, in offset order."""
    if part.end <= part.start:
        return
    consumer = Consumer(consumer_config(options))
    try:
        yield from _read(consumer, options, part, schema)
    finally:
        consumer.close()


def _start_offset(consumer: Consumer, options: ReadOptions, part: RangePartition) -> int:
    timeout = options.poll_timeout_ms / 1000.0
    low, _high = consumer.get_watermark_offsets(
        TopicPartition(part.topic, part.partition), timeout=timeout, cached=False
    )
    if part.start < low:
        data_loss(
            options.fail_on_data_loss,
            f"offsets [{part.start}, {min(low, part.end)}) of {part.topic}-{part.partition} "
            f"are gone: the log now starts at {low}",
        )
        return low
    return part.start


def _read(
    consumer: Consumer, options: ReadOptions, part: RangePartition, schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    start = _start_offset(consumer, options, part)
    if start >= part.end:
        return
    consumer.assign([TopicPartition(part.topic, part.partition, start)])
    last_seen = start - 1
    patience = options.poll_timeout_ms / 1000.0
    deadline = time.monotonic() + patience
    while True:
        messages = consumer.consume(num_messages=MAX_RECORDS_PER_BATCH, timeout=1.0)
        good: list[Any] = []
        done = False
        for message in messages:
            error = message.error()
            if error is None:
                good.append(message)
            elif error.code() == KafkaError._PARTITION_EOF:
                done = done or (message.offset() or 0) >= part.end
            elif error.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                # The log start moved past our position while we read (retention).
                resume = _start_offset(consumer, options, part.at(last_seen + 1))
                if resume >= part.end:
                    done = True
                    break
                consumer.assign([TopicPartition(part.topic, part.partition, resume)])
            else:
                raise KafkaException(error)
        if good and good[-1].offset() >= part.end - 1:
            done = True
            if good[-1].offset() >= part.end:
                good = [m for m in good if m.offset() < part.end]
        if good:
            last_seen = good[-1].offset()
            deadline = time.monotonic() + patience
            yield arrow_batch(good, part.topic, part.partition, schema)
        if done:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"no progress reading {part!r} for {patience:.0f}s (last offset {last_seen}); "
                "is the broker reachable? (kafkaConsumer.pollTimeoutMs sets this limit)"
            )

