"""The source's schema (Spark's Kafka source schema) and consumed records as Arrow batches.

Columns, in Spark's order: ``key`` binary, ``value`` binary, ``topic`` string, ``partition`` int,
``offset`` long, ``timestamp`` timestamp, ``timestampType`` int (0 CreateTime, 1 LogAppendTime),
and with ``includeHeaders=true`` ``headers`` array<struct<key string, value binary>>.

:func:`arrow_batch` turns one list of confluent-kafka messages into one ``pyarrow.RecordBatch``
whose schema is exactly what Spark's Python worker expects for that StructType
(``to_arrow_schema(schema, timezone="UTC")``): column per column, no Row or tuple per record.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

HEADER_TYPE = StructType(
    [StructField("key", StringType(), True), StructField("value", BinaryType(), True)]
)


def source_schema(include_headers: bool) -> StructType:
    fields = [
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField("topic", StringType(), True),
        StructField("partition", IntegerType(), True),
        StructField("offset", LongType(), True),
        StructField("timestamp", TimestampType(), True),
        StructField("timestampType", IntegerType(), True),
    ]
    if include_headers:
        fields.append(StructField("headers", ArrayType(HEADER_TYPE, True), True))
    return StructType(fields)


_ARROW_HEADER = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", pa.list_(pa.field("element", _ARROW_HEADER))))
    return pa.schema(fields)


def _headers_array(messages: Sequence[Any]) -> pa.Array:
    rows: list[list[dict[str, Any]] | None] = []
    for message in messages:
        headers = message.headers()
        # Spark's Kafka source gives null, not [], for a record without headers.
        rows.append([{"key": k, "value": v} for k, v in headers] if headers else None)
    return pa.array(rows, type=pa.list_(pa.field("element", _ARROW_HEADER)))


def arrow_batch(
    messages: Sequence[Any], topic: str, partition: int, schema: pa.Schema
) -> pa.RecordBatch:
    """One RecordBatch from confluent-kafka messages of one partition (errors removed)."""
    count = len(messages)
    stamps = [m.timestamp() for m in messages]
    # confluent-kafka: 1 CreateTime, 2 LogAppendTime (0 none); Spark: 0 CreateTime, 1 LogAppend.
    types = pa.array([max(kind - 1, 0) for kind, _ in stamps], type=pa.int32())
    millis = pa.array([ms for _, ms in stamps], type=pa.int64())
    columns = [
        pa.array([m.key() for m in messages], type=pa.binary()),
        pa.array([m.value() for m in messages], type=pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), count),
        pa.repeat(pa.scalar(partition, pa.int32()), count),
        pa.array([m.offset() for m in messages], type=pa.int64()),
        pc.multiply(millis, 1000).cast(pa.timestamp("us", tz="UTC")),
        types,
    ]
    if len(schema) > 7:
        columns.append(_headers_array(messages))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def empty_batch(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in schema], schema=schema)
