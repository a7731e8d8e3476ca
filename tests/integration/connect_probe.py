"""A sink connector for the Connect runtime's tests: FileStreamSink that fails on demand.

The worker process loads it by its module path (``connector.class=tests.integration.
connect_probe.ProbeSinkConnector``; the worker runs from the repository root). It writes like
FileStreamSink (one line per record value, flushed and fsynced in ``flush``), and fails while
``probe.fail.value`` is set, the way ``probe.fail.mode`` says:

- ``error``: ``put`` of a batch holding that value raises ConnectError, before writing any of
  it (the task fails);
- ``retriable``: the same with RetriableError (the runtime delivers the batch again);
- ``flush``: ``put`` writes, and every ``flush`` after that value was written raises (the
  runtime must not commit, and rewinds).

``probe.flush.delay.ms`` makes each ``flush`` after a failed ``put`` take that long (a sink
slow to close after a failure). Each
``put`` call appends one line (the number of records) to ``<file>.puts``, so a test can tell
that a task is retrying.
"""

from __future__ import annotations

import time
from pathlib import Path

from strom.connect.api import (
    ConnectError,
    RetriableError,
    SinkConnector,
    SinkRecord,
    Task,
    TopicPartitionOffsets,
)
from strom.connect.config import ConfigDef, ConfigKey
from strom.connect.file import FileStreamSinkTask

PROBE_DEF = ConfigDef([
    ConfigKey("file", "STRING", importance="HIGH", documentation="Destination filename."),
    ConfigKey("probe.fail.value", "STRING", "", documentation="The record value to fail on."),
    ConfigKey("probe.fail.mode", "STRING", "error",
              documentation="error, retriable or flush",
              validator=lambda v: None if v in ("error", "retriable", "flush") else
              "String must be one of: error, retriable, flush"),
    ConfigKey("probe.flush.delay.ms", "INT", 0,
              documentation="How long each flush takes after a put failed."),
])


class ProbeSinkConnector(SinkConnector):
    def __init__(self) -> None:
        super().__init__()
        self.config: dict[str, str] = {}

    @classmethod
    def config_def(cls) -> ConfigDef:
        return PROBE_DEF

    def start(self, config: dict[str, str]) -> None:
        self.config = dict(config)

    def task_class(self) -> type[Task]:
        return ProbeSinkTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.config) for _ in range(max_tasks)]


class ProbeSinkTask(FileStreamSinkTask):
    def __init__(self) -> None:
        super().__init__()
        self.fail_value = ""
        self.mode = "error"
        self.puts = Path()
        self.poisoned = False  # flush mode: the value was written by this task
        self.flush_delay_s = 0.0
        self.put_failed = False

    def start(self, config: dict[str, str]) -> None:
        parsed = PROBE_DEF.parse(config)
        self.fail_value, self.mode = parsed["probe.fail.value"], parsed["probe.fail.mode"]
        self.puts = Path(parsed["file"] + ".puts")
        self.flush_delay_s = parsed["probe.flush.delay.ms"] / 1000
        super().start(config)

    def put(self, records: list[SinkRecord]) -> None:
        with self.puts.open("a") as f:
            f.write(f"{len(records)}\n")
        hit = bool(self.fail_value) and any(r.value == self.fail_value for r in records)
        if hit and self.mode == "error":
            self.put_failed = True
            raise ConnectError(f"probe: put refused {self.fail_value}")
        if hit and self.mode == "retriable":
            raise RetriableError(f"probe: put of {self.fail_value} to be retried")
        super().put(records)
        self.poisoned |= hit

    def flush(self, offsets: TopicPartitionOffsets) -> None:
        if self.put_failed:
            time.sleep(self.flush_delay_s)
        if self.poisoned and self.mode == "flush":
            raise ConnectError(f"probe: flush after {self.fail_value} failed")
        super().flush(offsets)
