"""Parquet sink: records to Parquet files in a directory tree, Confluent's storage-sink way.

Files live under ``store.url`` (a directory or ``file://`` URL) as
``<topics.dir>/<topic>/<encoded partition>/<topic>+<kafka partition>+<start offset>+<end
offset>.parquet`` (offsets zero-padded to 10 digits). The encoded partition comes from
``partitioner.class``: Confluent's ``DefaultPartitioner`` gives ``partition=<n>``;
``TimeBasedPartitioner`` formats the record's time with ``path.format`` (a Joda pattern such
as ``'year'=YYYY/'month'=MM/'day'=dd/'hour'=HH``) in ``timezone``; ``DailyPartitioner`` and
``HourlyPartitioner`` are the two usual patterns. ``timestamp.extractor`` is ``Record`` (the
record timestamp), ``Wallclock`` or ``RecordField`` (``timestamp.field`` of the value).

A file is written when it holds ``flush.size`` records; with ``rotate.interval.ms`` also when
a record's time is that far past the file's first record (Confluent's rule), or when the file
has been open that long by the wall clock at an offset commit (so a quiet topic's data still
lands), and when the record schema changes. A file is written whole to a temporary file under
``<topics.dir>/+tmp``, fsynced, and renamed into place, so readers never see a partial file.
Offsets are committed only up to the first record still buffered, so a restart replays exactly
the records whose files were not written; with count-based rotation the replay rewrites the
same file names, so files are not duplicated.

Columns: a struct value's fields with their schema's types (Timestamp/Date/Time logical types
as Parquet timestamp[ms, UTC]/date32/time32[ms]); a schemaless map is inferred by pyarrow; any
other value is one column ``value``.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from zoneinfo import ZoneInfo

from strom.connect.api import (
    ConnectError,
    SinkConnector,
    SinkRecord,
    SinkTask,
    Task,
    TopicPartitionOffsets,
)
from strom.connect.config import ConfigDef, ConfigKey, at_least, non_empty_string
from strom.connect.converters import Schema
from strom.connect.datefmt import PatternError, format_ms, to_strftime
from strom.connect.transforms.base import DATE, TIME, TIMESTAMP

LOG = logging.getLogger("strom.connect.parquet")
PARTITIONERS = "io.confluent.connect.storage.partitioner."
DAILY = "'year'=YYYY/'month'=MM/'day'=dd"
HOURLY = DAILY + "/'hour'=HH"


def _pattern(value: Any) -> str | None:
    try:
        to_strftime(value)
    except PatternError as exc:
        return str(exc)
    return None


def _zone(value: Any) -> str | None:
    try:
        ZoneInfo(value)
    except (ValueError, KeyError, OSError):
        return f"Invalid timezone: {value}"
    return None


CONFIG_DEF = ConfigDef([
    ConfigKey("store.url", "STRING", importance="HIGH", group="Storage",
              documentation="Directory (or file:// URL) the files are written under.",
              validator=non_empty_string),
    ConfigKey("topics.dir", "STRING", "topics", "HIGH", "Top level directory to store the "
              "data ingested from Kafka.", group="Storage"),
    ConfigKey("flush.size", "INT", importance="HIGH", group="Connector",
              documentation="Number of records written to a file before it is committed.",
              validator=at_least(1)),
    ConfigKey("rotate.interval.ms", "LONG", -1, "HIGH", "The time interval in milliseconds "
              "to invoke file commits (-1: only by flush.size).", group="Connector"),
    ConfigKey("partitioner.class", "STRING", PARTITIONERS + "DefaultPartitioner", "HIGH",
              "DefaultPartitioner, TimeBasedPartitioner, DailyPartitioner or "
              "HourlyPartitioner.", group="Partitioner",
              validator=lambda v: None if v.rsplit(".", 1)[-1] in (
                  "DefaultPartitioner", "TimeBasedPartitioner", "DailyPartitioner",
                  "HourlyPartitioner") else f"Unsupported partitioner: {v}"),
    ConfigKey("path.format", "STRING", "", "MEDIUM", "Joda pattern of the time-based "
              "directories, e.g. 'year'=YYYY/'month'=MM/'day'=dd/'hour'=HH.",
              group="Partitioner", validator=_pattern),
    ConfigKey("partition.duration.ms", "LONG", -1, "MEDIUM", "Accepted for compatibility "
              "(the directories follow path.format).", group="Partitioner"),
    ConfigKey("locale", "STRING", "en", "LOW", "Accepted for compatibility.",
              group="Partitioner"),
    ConfigKey("timezone", "STRING", "UTC", "MEDIUM", "Time zone of the time-based "
              "directories.", group="Partitioner", validator=_zone),
    ConfigKey("timestamp.extractor", "STRING", "Wallclock", "MEDIUM",
              "Record, Wallclock or RecordField.", group="Partitioner",
              validator=lambda v: None if v in ("Record", "Wallclock", "RecordField") else
              "String must be one of: Record, Wallclock, RecordField"),
    ConfigKey("timestamp.field", "STRING", "timestamp", "MEDIUM", "The value field holding "
              "the time (RecordField).", group="Partitioner"),
    ConfigKey("parquet.codec", "STRING", "snappy", "LOW", "Compression: none, snappy, gzip, "
              "zstd, lz4.", group="Storage",
              validator=lambda v: None if v in ("none", "snappy", "gzip", "zstd", "lz4") else
              "String must be one of: none, snappy, gzip, zstd, lz4"),
    ConfigKey("format.class", "STRING", "io.confluent.connect.hdfs.parquet.ParquetFormat",
              "LOW", "Accepted for compatibility (always Parquet).", group="Storage"),
])


class ParquetSinkConnector(SinkConnector):
    def __init__(self) -> None:
        super().__init__()
        self.config: dict[str, str] = {}

    @classmethod
    def config_def(cls) -> ConfigDef:
        return CONFIG_DEF

    def validate(self, config: dict[str, str]) -> dict[str, list[str]]:
        kind = config.get("partitioner.class", "").rsplit(".", 1)[-1]
        if kind == "TimeBasedPartitioner" and not config.get("path.format", "").strip():
            return {"path.format": ["TimeBasedPartitioner needs path.format"]}
        return {}

    def start(self, config: dict[str, str]) -> None:
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise ConnectError("the Parquet sink needs the 'parquet' extra: "
                               "pip install 'strom[parquet]' (pyarrow)") from None
        CONFIG_DEF.parse(config)
        self.config = dict(config)

    def task_class(self) -> type[Task]:
        return ParquetSinkTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.config) for _ in range(max_tasks)]


@dataclass
class OpenFile:
    """Records buffered for one file (topic, kafka partition, encoded partition)."""

    topic: str
    partition: int
    directory: str
    schema: Schema | None
    start_offset: int
    first_time: int
    opened: float = field(default_factory=time.monotonic)
    rows: list[Any] = field(default_factory=list)
    end_offset: int = -1


class ParquetSinkTask(SinkTask):
    def __init__(self) -> None:
        self.config: dict[str, Any] = {}
        self.open: dict[tuple[str, int, str], OpenFile] = {}
        self.root = Path()
        self.path_format = ""
        self.zone: ZoneInfo = ZoneInfo("UTC")

    def start(self, config: dict[str, str]) -> None:
        self.config = CONFIG_DEF.parse(config)
        url = self.config["store.url"]
        base = Path(urlparse(url).path if url.startswith("file:") else url)
        self.root = base / self.config["topics.dir"]
        kind = self.config["partitioner.class"].rsplit(".", 1)[-1]
        self.path_format = {"DailyPartitioner": DAILY, "HourlyPartitioner": HOURLY,
                            "TimeBasedPartitioner": self.config["path.format"]}.get(kind, "")
        self.zone = ZoneInfo(self.config["timezone"])
        (self.root / "+tmp").mkdir(parents=True, exist_ok=True)

    def _time(self, record: SinkRecord) -> int:
        extractor = self.config["timestamp.extractor"]
        if extractor == "Wallclock":
            return int(time.time() * 1000)
        if extractor == "RecordField":
            name = self.config["timestamp.field"]
            value = record.value.get(name) if isinstance(record.value, dict) else None
            if not isinstance(value, int):
                raise ConnectError(f"Unable to extract the timestamp field {name} of the "
                                   f"record at {record.topic}/{record.kafka_offset}")
            return value
        if record.timestamp is None or record.timestamp < 0:
            raise ConnectError(f"Record at {record.topic}/{record.kafka_offset} has no "
                               "timestamp (timestamp.extractor=Record)")
        return record.timestamp

    def _directory(self, record: SinkRecord, moment: int) -> str:
        if self.path_format:
            return format_ms(self.path_format, moment, self.zone)
        return f"partition={record.partition}"

    def put(self, records: list[SinkRecord]) -> None:
        interval = self.config["rotate.interval.ms"]
        for record in records:
            moment = self._time(record)
            assert record.partition is not None
            key = (record.topic, record.partition, self._directory(record, moment))
            current = self.open.get(key)
            if current is not None and (
                    current.schema != record.value_schema or
                    (interval > 0 and moment - current.first_time >= interval)):
                self._commit(key)
                current = None
            if current is None:
                current = OpenFile(record.topic, record.partition, key[2], record.value_schema,
                                   record.kafka_offset, moment)
                self.open[key] = current
            current.rows.append(record.value)
            current.end_offset = record.kafka_offset
            if len(current.rows) >= self.config["flush.size"]:
                self._commit(key)

    def pre_commit(self, offsets: TopicPartitionOffsets) -> TopicPartitionOffsets:
        interval = self.config["rotate.interval.ms"]
        if interval > 0:
            now = time.monotonic()
            for key in [k for k, f in self.open.items() if (now - f.opened) * 1000 >= interval]:
                self._commit(key)
        safe = dict(offsets)
        for f in self.open.values():
            tp = (f.topic, f.partition)
            if tp in safe:
                safe[tp] = min(safe[tp], f.start_offset)
        return safe

    def _commit(self, key: tuple[str, int, str]) -> None:
        import pyarrow.parquet as pq

        f = self.open.pop(key)
        table = _arrow_table(f.schema, f.rows)
        directory = self.root / f.topic / f.directory
        directory.mkdir(parents=True, exist_ok=True)
        final = directory / (f"{f.topic}+{f.partition}+{f.start_offset:010d}+"
                             f"{f.end_offset:010d}.parquet")
        tmp = self.root / "+tmp" / f"{uuid.uuid4().hex}.parquet"
        codec = self.config["parquet.codec"]
        pq.write_table(table, tmp, compression=None if codec == "none" else codec)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, final)
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        LOG.info("wrote %s (%d records)", final, len(f.rows))

    def stop(self) -> None:
        # Buffered records were not committed: the next run replays them.
        self.open.clear()


def arrow_type(schema: Schema) -> Any:
    import pyarrow as pa

    if schema.name == TIMESTAMP:
        return pa.timestamp("ms", tz="UTC")
    if schema.name == DATE:
        return pa.date32()
    if schema.name == TIME:
        return pa.time32("ms")
    simple = {"int8": pa.int8(), "int16": pa.int16(), "int32": pa.int32(),
              "int64": pa.int64(), "float": pa.float32(), "double": pa.float64(),
              "boolean": pa.bool_(), "string": pa.string(), "bytes": pa.binary()}
    if schema.type in simple:
        return simple[schema.type]
    if schema.type == "array" and schema.items is not None:
        return pa.list_(arrow_type(schema.items))
    if schema.type == "map" and schema.keys is not None and schema.values is not None:
        return pa.map_(arrow_type(schema.keys), arrow_type(schema.values))
    if schema.type == "struct":
        return pa.struct([pa.field(n, arrow_type(s), nullable=s.optional)
                          for n, s in schema.fields])
    raise ConnectError(f"No Parquet type for Connect schema type {schema.type}")


def _arrow_table(schema: Schema | None, rows: list[Any]) -> Any:
    import pyarrow as pa

    if schema is not None and schema.type == "struct":
        arrow_schema = pa.schema([pa.field(n, arrow_type(s), nullable=s.optional)
                                  for n, s in schema.fields])
        return pa.Table.from_pylist(rows, schema=arrow_schema)
    if schema is None and all(isinstance(r, dict) for r in rows):
        return pa.Table.from_pylist(rows)
    column = pa.array(rows, type=arrow_type(schema) if schema is not None else None)
    return pa.table({"value": column})
