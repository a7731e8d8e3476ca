"""Batch and streaming writers of the ``strom`` data source (Spark's Kafka sink columns).

Columns: ``value`` (required, binary or string), ``key`` (binary or string), ``topic`` (string;
else the ``topic`` option), ``partition`` (int; else the partitioner decides), ``headers``
(array<struct<key string, value binary>>). Other columns are ignored, as Spark's sink does.

Each task receives Arrow batches (``DataSourceArrowWriter``). Keys are partitioned as the Java
client partitions them (murmur2; ``murmur2_random`` in librdkafka's names) unless the user sets
``kafka.partitioner``. At-least-once rows of key and value only, to the ``topic`` option, go as
natively encoded record batches over strom's codec (:mod:`strom.spark.batch_sender`: its module
doc says which settings it honours); every other write produces with confluent-kafka
(:mod:`strom.spark.row_producer`).

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

from strom.spark.exactly_once import write_exactly_once
from strom.spark.options import OptionError, WriteOptions
from strom.spark.row_producer import write_at_least_once

log = logging.getLogger(__name__)

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


@dataclass
class StromCommitMessage(WriterCommitMessage):
    partition_id: int
    records: int
    skipped: bool = False


def _task_partition() -> int:
    context = TaskContext.get()
    return context.partitionId() if context is not None else 0


class _WriterBase:
    def __init__(self, options: WriteOptions, job_id: str) -> None:
        self.options = options
        self.job_id = job_id

    def _write(self, batches: Iterator[pa.RecordBatch], query_id: str | None, batch_id: int) -> Any:
        partition = _task_partition()
        if not self.options.exactly_once:
            return StromCommitMessage(partition, write_at_least_once(self.options, batches))
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
