"""FileStreamSource / FileStreamSink: Kafka's example connectors, with its config names.

Source: reads complete lines of ``file`` (a trailing line without newline waits for more
text), ``batch.size`` lines per poll, into ``topic``. Source partition ``{"filename": path}``,
source offset ``{"position": byte offset after the line}`` as Kafka's, so a restart resumes
after the last acknowledged line. Sink: appends each record's value and a newline to ``file``;
``flush`` flushes and fsyncs it before the runtime commits the consumer offsets.
"""

from __future__ import annotations

import os
import time
from typing import IO, Any

from strom.connect.api import (
    ExactlyOnceSupport,
    SinkConnector,
    SinkRecord,
    SinkTask,
    SourceConnector,
    SourceRecord,
    SourceTask,
    Task,
    TopicPartitionOffsets,
)
from strom.connect.config import ConfigDef, ConfigKey, at_least, non_empty_string
from strom.connect.converters import STRING_SCHEMA

_SOURCE_DEF = ConfigDef([
    ConfigKey("file", "STRING", importance="HIGH", documentation="Source filename.",
              validator=non_empty_string),
    ConfigKey("topic", "LIST", importance="HIGH", documentation="The topic to publish data to",
              validator=lambda v: None if len(v) == 1 else
              "'topic' in FileStreamSourceConnector configuration requires definition of "
              "a single topic."),
    ConfigKey("batch.size", "INT", 2000, "LOW",
              "The maximum number of records the source task can read from the file each "
              "time it is polled", validator=at_least(1)),
])

_SINK_DEF = ConfigDef([
    ConfigKey("file", "STRING", importance="HIGH",
              documentation="Destination filename.", validator=non_empty_string),
])


class FileStreamSourceConnector(SourceConnector):
    def __init__(self) -> None:
        super().__init__()
        self.config: dict[str, str] = {}

    @classmethod
    def config_def(cls) -> ConfigDef:
        return _SOURCE_DEF

    def start(self, config: dict[str, str]) -> None:
        _SOURCE_DEF.parse(config)
        self.config = dict(config)

    def task_class(self) -> type[Task]:
        return FileStreamSourceTask

    def exactly_once_support(self, config: dict[str, str]) -> str | None:
        # Positions are exact byte offsets of one file: replaying from a committed one is exact.
        return (ExactlyOnceSupport.SUPPORTED if config.get("file", "").strip()
                else ExactlyOnceSupport.UNSUPPORTED)

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.config)]  # one file, one task (as Kafka's)


class FileStreamSourceTask(SourceTask):
    """Tails one file; reads bytes so the stored position is exact."""

    def __init__(self) -> None:
        super().__init__()
        self.path = ""
        self.topic = ""
        self.batch_size = 2000
        self.position = 0
        self.stream: IO[bytes] | None = None
        self.buffer = b""

    def start(self, config: dict[str, str]) -> None:
        parsed = _SOURCE_DEF.parse(config)
        self.path = parsed["file"]
        self.topic = parsed["topic"][0]
        self.batch_size = parsed["batch.size"]
        stored = self.context.offset(self._partition()) if self.context else None
        if stored and isinstance(stored.get("position"), int):
            self.position = stored["position"]

    def _partition(self) -> dict[str, Any]:
        return {"filename": self.path}

    def poll(self) -> list[SourceRecord] | None:
        if self.stream is None:
            try:
                self.stream = open(self.path, "rb")  # noqa: SIM115 - kept open while polling
            except FileNotFoundError:
                time.sleep(0.2)  # Kafka's task waits for the file to appear
                return None
            self.stream.seek(self.position)
        if self.buffer.count(b"\n") < self.batch_size:
            self.buffer += self.stream.read(1 << 16)
        if b"\n" not in self.buffer:
            time.sleep(0.05)  # no complete line yet: the rest may still be written
            return None
        # Complete lines only; the buffer is cut once per poll (not once per line).
        lines = self.buffer.split(b"\n", self.batch_size)
        rest = lines.pop()  # text after the last newline taken (or the lines beyond a batch)
        partition = self._partition()  # one dict for the batch: records never change it
        records: list[SourceRecord] = []
        position = self.position
        for raw in lines:
            position += len(raw) + 1
            records.append(SourceRecord(
                topic=self.topic, value=raw.rstrip(b"\r").decode("utf-8", errors="replace"),
                value_schema=STRING_SCHEMA, source_partition=partition,
                source_offset={"position": position},
            ))
        self.position = position
        self.buffer = rest
        return records

    def stop(self) -> None:
        if self.stream is not None:
            self.stream.close()
            self.stream = None


class FileStreamSinkConnector(SinkConnector):
    def __init__(self) -> None:
        super().__init__()
        self.config: dict[str, str] = {}

    @classmethod
    def config_def(cls) -> ConfigDef:
        return _SINK_DEF

    def start(self, config: dict[str, str]) -> None:
        _SINK_DEF.parse(config)
        self.config = dict(config)

    def task_class(self) -> type[Task]:
        return FileStreamSinkTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.config) for _ in range(max_tasks)]


class FileStreamSinkTask(SinkTask):
    def __init__(self) -> None:
        self.stream: IO[str] | None = None

    def start(self, config: dict[str, str]) -> None:
        path = _SINK_DEF.parse(config)["file"]
        # Fails here (task FAILED, reason in the trace) when the directory is not there.
        self.stream = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in stop()

    def put(self, records: list[SinkRecord]) -> None:
        assert self.stream is not None
        # Whole lines in one write: a crash never leaves half a line for the next run to extend.
        self.stream.write("".join(f"{_text(r.value)}\n" for r in records))
        self.stream.flush()

    def flush(self, offsets: TopicPartitionOffsets) -> None:
        if self.stream is not None:
            self.stream.flush()
            os.fsync(self.stream.fileno())

    def stop(self) -> None:
        if self.stream is not None:
            self.stream.close()
            self.stream = None


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return "null" if value is None else str(value)
