"""The ``strom`` data source: Spark's Kafka source and sink, in pure Python, on any Spark.

``spark.read/readStream.format("strom")`` and ``df.write/writeStream.format("strom")`` with
the options of Spark's Kafka connector (see :mod:`strom.spark.options`). Options are parsed
when Spark creates a reader or writer (on the driver), so a bad option fails the query at once
with one line naming it.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from strom.spark.options import parse_read_options, parse_write_options
from strom.spark.reader import StromBatchReader, StromStreamReader
from strom.spark.schema import source_schema
from strom.spark.writer import StromBatchWriter, StromStreamWriter, check_sink_schema, new_job_id


class StromDataSource(DataSource):
    """Format name ``strom``."""

    @classmethod
    def name(cls) -> str:
        return "strom"

    def schema(self) -> StructType:
        value = str(self.options.get("includeHeaders", "false")).strip().lower()
        return source_schema(value in ("true", "1", "yes"))

    def reader(self, schema: StructType) -> DataSourceReader:
        return StromBatchReader(parse_read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StromStreamReader(parse_read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        options = parse_write_options(self.options)
        check_sink_schema(schema, options)
        return StromBatchWriter(options, new_job_id())

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        options = parse_write_options(self.options)
        check_sink_schema(schema, options)
        return StromStreamWriter(options, new_job_id())
