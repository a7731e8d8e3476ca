"""An in-memory Python data source (``format("strom_memory")``) yielding the strom source's rows,
and a Python sink that discards what it gets (``format("strom_discard")``).

Only for ``spark_source.py``: the ceiling of Spark's Python Data Source path, against which the
strom source is measured (issue 20: the source should reach at least half of it). It has the
strom source's schema and plans the same partitions with the same row counts; each task yields
Arrow RecordBatches of ``rowsPerBatch`` rows (keys, values of ``valueBytes`` bytes, topic,
partition, offsets, timestamps) built once per Python worker and reused: no I/O and no
decoding, only what Spark does with the batches. The discarding sink is the same for a
pipeline: what a Python data source sink costs in Spark before it writes anything (the rows
are handed to the Python worker as Arrow batches and dropped). A module of its own so that
executors import it by name.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import cache
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from strom.spark.schema import arrow_schema, source_schema


class Slice(InputPartition):
    def __init__(self, partition: int, rows: int) -> None:
        super().__init__((partition, rows))
        self.partition = partition
        self.rows = rows


@cache
def template(rows: int, value_bytes: int, topic: str, partition: int) -> pa.RecordBatch:
    """One RecordBatch of ``rows`` rows of the source's schema (keys ``b"0"``..``b"999"``)."""
    keys = pa.array([b"%d" % (i % 1000) for i in range(rows)], type=pa.binary())
    values = pa.array([b"x" * value_bytes] * rows, type=pa.binary())
    columns = [
        keys,
        values,
        pa.repeat(pa.scalar(topic, pa.string()), rows),
        pa.repeat(pa.scalar(partition, pa.int32()), rows),
        pa.array(range(rows), type=pa.int64()),
        pa.array([1_700_000_000_000_000 + i for i in range(rows)],
                 type=pa.timestamp("us", tz="UTC")),  # fmt: skip
        pa.repeat(pa.scalar(0, pa.int32()), rows),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(False))


class MemoryReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.rows = int(options["rows"])
        self.partitions_ = int(options.get("partitions", "1"))
        self.per_batch = int(options.get("rowsPerBatch", "10000"))
        self.value_bytes = int(options.get("valueBytes", "100"))
        self.topic = options.get("topic", "memory")

    def partitions(self) -> Sequence[InputPartition]:
        share, extra = divmod(self.rows, self.partitions_)
        return [Slice(p, share + (1 if p < extra else 0)) for p in range(self.partitions_)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        assert isinstance(partition, Slice)
        left = partition.rows
        batch = template(self.per_batch, self.value_bytes, self.topic, partition.partition)
        while left > 0:
            yield batch if left >= self.per_batch else batch.slice(0, left)
            left -= self.per_batch


class MemorySource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "strom_memory"

    def schema(self) -> StructType:
        return source_schema(False)

    def reader(self, schema: Any) -> DataSourceReader:
        return MemoryReader(dict(self.options))


class DiscardWriter(DataSourceStreamArrowWriter):
    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        for _batch in iterator:
            pass
        return WriterCommitMessage()

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass


class DiscardSink(DataSource):
    @classmethod
    def name(cls) -> str:
        return "strom_discard"

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return DiscardWriter()  # type: ignore[return-value]
