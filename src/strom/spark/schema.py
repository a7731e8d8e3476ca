"""The source's schema (Spark's Kafka source schema) and fetched records as Arrow batches.

Columns, in Spark's order: ``key`` binary, ``value`` binary, ``topic`` string, ``partition`` int,
``offset`` long, ``timestamp`` timestamp, ``timestampType`` int (0 CreateTime, 1 LogAppendTime),
and with ``includeHeaders=true`` ``headers`` array<struct<key string, value binary>>.

:func:`arrow_from_columns` turns the native record codec's column buffers
(:class:`strom.protocol.records.Columns`) into one ``pyarrow.RecordBatch`` whose schema is
exactly what Spark's Python worker expects for that StructType (``to_arrow_schema(schema,
timezone="UTC")``): the buffers are wrapped without a copy, no Row or tuple per record.
"""

from __future__ import annotations

import pyarrow as pa
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

from strom.protocol.records import Columns

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
_TIMESTAMP = pa.timestamp("us", tz="UTC")


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", _TIMESTAMP),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", pa.list_(pa.field("element", _ARROW_HEADER))))
    return pa.schema(fields)


def _binary(kind: pa.DataType, rows: int, validity: bytes | None, offsets: bytes,
            data: bytes) -> pa.Array:  # fmt: skip
    return pa.Array.from_buffers(kind, rows, [
        None if validity is None else pa.py_buffer(validity), pa.py_buffer(offsets),
        pa.py_buffer(data)])  # fmt: skip


def arrow_from_columns(cols: Columns, topic: str, partition: int,
                       schema: pa.Schema) -> pa.RecordBatch:  # fmt: skip
    """One RecordBatch of ``schema`` from the native record codec's column buffers (one
    partition's records): the buffers are wrapped, not copied; only the topic and partition
    columns are filled here."""
    n = cols.rows
    columns = [
        _binary(pa.binary(), n, cols.key_validity, cols.key_offsets, cols.key_data),
        _binary(pa.binary(), n, cols.value_validity, cols.value_offsets, cols.value_data),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(cols.offsets)]),
        pa.Array.from_buffers(_TIMESTAMP, n, [None, pa.py_buffer(cols.timestamps)]),
        pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(cols.timestamp_types)]),
    ]
    if len(schema) > 7:
        assert cols.header_key_offsets is not None and cols.header_offsets is not None
        entries = len(cols.header_key_offsets) // 4 - 1
        keys = _binary(pa.string(), entries, None, cols.header_key_offsets,
                       cols.header_key_data or b"")  # fmt: skip
        values = _binary(pa.binary(), entries, cols.header_value_validity,
                         cols.header_value_offsets or b"", cols.header_value_data or b"")
        structs = pa.StructArray.from_arrays([keys, values], fields=list(_ARROW_HEADER))
        validity = cols.header_validity
        columns.append(pa.Array.from_buffers(
            schema.field("headers").type, n,
            [None if validity is None else pa.py_buffer(validity),
             pa.py_buffer(cols.header_offsets)], children=[structs]))  # fmt: skip
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def empty_batch(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in schema], schema=schema)
