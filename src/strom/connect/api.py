"""The connector API: what a Python connector implements (Kafka Connect's, in Python).

A *connector* validates its configuration and splits the work into task configurations; a
*task* moves the data. Source tasks return :class:`SourceRecord` s from :meth:`SourceTask.poll`,
each carrying a *source partition* and *source offset* (small JSON-able dicts) that the runtime
stores only after the broker acknowledged the record, and hands back through
:meth:`SourceTaskContext.offset` after a restart. Sink tasks receive :class:`SinkRecord` s in
:meth:`SinkTask.put`; the runtime commits the consumer offsets returned by
:meth:`SinkTask.pre_commit` only after :meth:`SinkTask.flush` returned (at-least-once).

Third-party connectors register a class under the ``strom.connectors`` entry-point group.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from strom.connect.config import ConfigDef

#: A source partition or source offset: a small dict of JSON values.
SourceMap = dict[str, Any]
#: (topic, partition) -> next offset to consume.
TopicPartitionOffsets = dict[tuple[str, int], int]


class ConnectError(Exception):
    """A connector or task failure; its message becomes the status ``trace``."""


class RetriableError(ConnectError):
    """A failure worth retrying (the runtime calls ``poll``/``put`` again)."""


@dataclass
class ConnectRecord:
    """Fields common to source and sink records. Schemas are optional (see converters)."""

    topic: str
    value: Any
    key: Any = None
    partition: int | None = None
    key_schema: Any = None
    value_schema: Any = None
    timestamp: int | None = None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


@dataclass
class SourceRecord(ConnectRecord):
    """A record produced by a source task, with where it came from in the source system."""

    source_partition: SourceMap = field(default_factory=dict)
    source_offset: SourceMap = field(default_factory=dict)


@dataclass
class SinkRecord(ConnectRecord):
    """A record consumed for a sink task, with its Kafka coordinates."""

    kafka_offset: int = -1


class ConnectorContext:
    """What a connector may ask of the runtime."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.failure: BaseException | None = None

    def raise_error(self, exc: BaseException) -> None:
        """Mark the connector FAILED with ``exc`` as the reason (as Kafka's raiseError)."""
        self.failure = exc


class SourceTaskContext:
    """Gives a source task the offsets stored for its source partitions."""

    def __init__(self, reader: Any) -> None:
        self._reader = reader

    def offset(self, partition: Mapping[str, Any]) -> SourceMap | None:
        """The last acknowledged offset of ``partition``, or None if nothing was stored."""
        result: SourceMap | None = self._reader(dict(partition))
        return result


class Connector(ABC):
    """Base of every connector; instances are made by the runtime with no arguments."""

    #: "source" or "sink" (set by the two subclasses below).
    connector_type = ""

    def __init__(self) -> None:
        self.context: ConnectorContext | None = None

    def initialize(self, context: ConnectorContext) -> None:
        self.context = context

    @classmethod
    def version(cls) -> str:
        return "0.1.0"

    @classmethod
    @abstractmethod
    def config_def(cls) -> ConfigDef:
        """The connector's own configuration keys (validated before it starts)."""

    @abstractmethod
    def start(self, config: dict[str, str]) -> None:
        """Start with the validated configuration; raise to report FAILED."""

    @abstractmethod
    def task_class(self) -> type[Task]:
        """The task class this connector runs."""

    @abstractmethod
    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        """At most ``max_tasks`` task configurations."""

    def stop(self) -> None:  # noqa: B027 - an optional hook, not abstract
        """Release what :meth:`start` acquired."""

    def validate(self, config: dict[str, str]) -> dict[str, list[str]]:
        """Extra cross-field checks: config name -> error messages (beyond the ConfigDef)."""
        return {}


class SourceConnector(Connector):
    connector_type = "source"


class SinkConnector(Connector):
    connector_type = "sink"


class Task(ABC):
    """Base of source and sink tasks; each runs in its own thread."""

    def version(self) -> str:
        return "0.1.0"

    @abstractmethod
    def start(self, config: dict[str, str]) -> None:
        """Open resources; raise to report the task FAILED."""

    @abstractmethod
    def stop(self) -> None:
        """Close resources (called from the task's own thread)."""


class SourceTask(Task):
    """Polls the source system."""

    def __init__(self) -> None:
        self.context: SourceTaskContext | None = None

    def initialize(self, context: SourceTaskContext) -> None:
        self.context = context

    @abstractmethod
    def poll(self) -> list[SourceRecord] | None:
        """The next records (None or [] when there is nothing; may block briefly)."""

    def commit(self) -> None:
        """Called after offsets were stored (hook for acknowledging the source system)."""


class SinkTask(Task):
    """Writes records to the sink system."""

    @abstractmethod
    def put(self, records: list[SinkRecord]) -> None:
        """Write (or buffer) ``records``; raise :class:`RetriableError` to get them again."""

    def flush(self, offsets: TopicPartitionOffsets) -> None:
        """Make everything given to :meth:`put` durable up to ``offsets``."""

    def pre_commit(self, offsets: TopicPartitionOffsets) -> TopicPartitionOffsets:
        """Flush and return the offsets safe to commit (default: all that were put)."""
        self.flush(offsets)
        return offsets
