"""Batch and streaming writers of the ``strom`` data source (Spark's Kafka sink columns).

Columns: ``value`` (required, binary or string), ``key`` (binary or string), ``topic`` (string;
else the ``topic`` option), ``partition`` (int; else the partitioner decides), ``headers``
(array<struct<key string, value binary>>). Other columns are ignored, as Spark's sink does.

Each task receives Arrow batches (``DataSourceArrowWriter``) and produces with confluent-kafka,
partitioning keys with ``murmur2_random`` (the Java client's partitioner) unless the user sets
``kafka.partitioner``.

At-least-once (the default): a task returns only when every record is acknowledged, and fails if
any is not; a retried task or batch may write records again. ``exactlyOnce=true`` hands each
task to :mod:`strom.spark.exactly_once`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException, Producer
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from strom.spark.options import OptionError, WriteOptions

log = logging.getLogger(__name__)

# librdkafka's default delivery.timeout.ms is 300 s: past it every record is delivered or failed.
FLUSH_TIMEOUT_S = 330.0
QUEUE_FULL_WAIT_S = 0.002
# librdkafka's local queue (default 100,000 messages): a task writes a whole partition's rows,
# and a full queue makes the loop wait, so the default is raised (kafka.* options override it)
QUEUE_MESSAGES = 1_000_000
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"


def check_sink_schema(schema: StructType, options: WriteOptions) -> None:
    """Refuse, on the driver, a DataFrame the sink cannot write (one line naming the column)."""
    types = {f.name: f.dataType for f in schema.fields}
    text = (StringType(), BinaryType())

    def require(name: str, allowed: tuple[DataType, ...], what: str) -> None:
        if name in types and types[name] not in allowed:
            raise OptionError(f"column {name!r} must be {what}, not {types[name].simpleString()}")

    if "value" not in types:
        raise OptionError("the strom sink needs a 'value' column (string or binary)")
    require("value", text, "string or binary")
    require("key", text, "string or binary")
    require("topic", (StringType(),), "string")
    require("partition", (IntegerType(),), "int")
    if "headers" in types:
        header = types["headers"]
        element = header.elementType if isinstance(header, ArrayType) else None
        ok = isinstance(element, StructType)
        if isinstance(element, StructType):
            inner = {f.name: f.dataType for f in element.fields}
            ok = inner.get("key") == StringType() and inner.get("value") in text
        if not ok:
            raise OptionError("column 'headers' must be array<struct<key: string, value: binary>>")
    if "topic" not in types and not options.topic:
        raise OptionError("the strom sink needs a 'topic' column or the 'topic' option")


def _column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    index = batch.schema.get_field_index(name)
    return batch.column(index).to_pylist() if index >= 0 else None


class RowProducer:
    """Produces the rows of Arrow batches through one confluent-kafka Producer; remembers the
    first delivery error.

    The Python work per row is one ``produce()`` call: columns are converted once per batch,
    arguments are positional, and delivery reports come back for failures only
    (``delivery.report.only.error``, one callback set in the configuration), not as a Python
    callback per acknowledged row."""

    def __init__(self, config: dict[str, Any], default_topic: str | None) -> None:
        self.producer = Producer({**config, "on_delivery": self._delivered,
                                  "delivery.report.only.error": True})  # fmt: skip
        self.default_topic = default_topic
        self.error: KafkaError | None = None
        self.count = 0

    def _delivered(self, err: KafkaError | None, _msg: Any) -> None:
        if err is not None and self.error is None:
            self.error = err

    def produce_batch(self, batch: pa.RecordBatch) -> None:
        values = _column(batch, "value")
        assert values is not None
        keys = _column(batch, "key")
        topics = _column(batch, "topic")
        partitions = _column(batch, "partition")
        headers = _column(batch, "headers")
        if topics is None and partitions is None and headers is None:
            self._produce_plain(values, keys)
        else:
            self._produce_rows(values, keys, topics, partitions, headers)
        self.count += len(values)
        self.producer.poll(0)
        self.check()

    def _produce_plain(self, values: list[Any], keys: list[Any] | None) -> None:
        """The common shape: value (and key) to the ``topic`` option, partitioner's choice."""
        topic = self.default_topic
        if topic is None:
            raise ValueError("a row has no topic and the 'topic' option is not set")
        produce = self.producer.produce
        for value, key in zip(values, keys or [None] * len(values), strict=True):
            try:
                produce(topic, value, key)
            except BufferError:
                self._wait_and_produce(topic, value, key)

    def _produce_rows(self, values: list[Any], keys: list[Any] | None,
                      topics: list[Any] | None, partitions: list[Any] | None,
                      headers: list[Any] | None) -> None:  # fmt: skip
        rows = len(values)
        produce = self.producer.produce
        for value, key, topic, partition, header in zip(
            values, keys or [None] * rows, topics or [None] * rows,
            partitions or [None] * rows, headers or [None] * rows, strict=True,
        ):  # fmt: skip
            topic = topic or self.default_topic
            if topic is None:
                raise ValueError("a row has no topic and the 'topic' option is not set")
            part = -1 if partition is None else partition  # -1: the partitioner decides
            hdrs = [(h["key"], h["value"]) for h in header] if header else None
            try:
                produce(topic, value, key, part, headers=hdrs)
            except BufferError:
                self._wait_and_produce(topic, value, key, part, hdrs)

    def _wait_and_produce(self, topic: str, value: Any, key: Any, partition: int = -1,
                          headers: Any = None) -> None:  # fmt: skip
        while True:
            # The local queue is full: wait a moment for acknowledgements. Not poll(t): with
            # failures-only reports a success wakes no poll, which would sleep all of t.
            self.producer.flush(QUEUE_FULL_WAIT_S)
            try:
                self.producer.produce(topic, value, key, partition, headers=headers)
                return
            except BufferError:
                continue

    def check(self) -> None:
        if self.error is not None:
            raise KafkaException(self.error)

    def flush(self, timeout: float) -> None:
        remaining = self.producer.flush(timeout)
        self.check()
        if remaining:
            raise TimeoutError(f"{remaining} records not acknowledged within {timeout:.0f}s")


@dataclass
class StromCommitMessage(WriterCommitMessage):
    partition_id: int
    records: int
    skipped: bool = False


def _task_partition() -> int:
    context = TaskContext.get()
    return context.partitionId() if context is not None else 0


def _producer_config(options: WriteOptions) -> dict[str, Any]:
    config: dict[str, Any] = dict(options.client)
    config.setdefault("linger.ms", 5)
    config.setdefault("queue.buffering.max.messages", QUEUE_MESSAGES)
    return config


def write_at_least_once(options: WriteOptions, batches: Iterator[pa.RecordBatch]) -> int:
    rows = RowProducer(_producer_config(options), options.topic)
    for batch in batches:
        rows.produce_batch(batch)
    rows.flush(timeout=FLUSH_TIMEOUT_S)
    return rows.count


class _WriterBase:
    def __init__(self, options: WriteOptions, job_id: str) -> None:
        self.options = options
        self.job_id = job_id

    def _write(self, batches: Iterator[pa.RecordBatch], query_id: str | None, batch_id: int) -> Any:
        partition = _task_partition()
        if not self.options.exactly_once:
            return StromCommitMessage(partition, write_at_least_once(self.options, batches))
        from strom.spark.exactly_once import write_exactly_once  # noqa: PLC0415

        records, skipped = write_exactly_once(
            self.options, batches, query_id or self.job_id, partition, batch_id
        )
        return StromCommitMessage(partition, records, skipped)


class StromBatchWriter(_WriterBase, DataSourceArrowWriter):
    """``df.write.format("strom")``: one transaction per task in exactlyOnce mode."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return self._write(iterator, None, 0)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        total = sum(m.records for m in messages if isinstance(m, StromCommitMessage))
        log.info("strom sink wrote %d records", total)


class StromStreamWriter(_WriterBase, DataSourceStreamArrowWriter):
    """``df.writeStream.format("strom")``; exactly-once per (query id, task partition, batch)."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        context = TaskContext.get()
        query_id = context.getLocalProperty(QUERY_ID_PROPERTY) if context else None
        raw_batch = context.getLocalProperty(BATCH_ID_PROPERTY) if context else None
        if self.options.exactly_once and (query_id is None or raw_batch is None):
            raise RuntimeError(
                "exactlyOnce=true: the task does not know its streaming query id and batch id "
                f"(Spark local properties {QUERY_ID_PROPERTY}, {BATCH_ID_PROPERTY})"
            )
        return self._write(iterator, query_id, int(raw_batch) if raw_batch else 0)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        total = sum(m.records for m in messages if isinstance(m, StromCommitMessage))
        log.info("strom sink: batch %d wrote %d records", batchId, total)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        # Records already acknowledged stay (at-least-once); in exactlyOnce mode each task's
        # transaction is recorded and a rerun of the batch skips the tasks that committed.
        log.warning("strom sink: batch %d aborted", batchId)


def new_job_id() -> str:
    return uuid.uuid4().hex
