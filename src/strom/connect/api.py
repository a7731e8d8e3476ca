"""The connector API: what a Python connector implements (Kafka Connect's, in Python).

A *connector* validates its configuration and splits the work into task configurations; a
*task* moves the data. Source tasks return :class:`SourceRecord` s from :meth:`SourceTask.poll`,
each carrying a *source partition* and *source offset* (small JSON-able dicts) that the runtime
stores only after the broker acknowledged the record, and hands back through
:meth:`SourceTaskContext.offset` after a restart. With exactly-once source support (KIP-618)
the records and their source offsets are written in one Kafka transaction instead; a task may
draw the transaction boundaries itself through :class:`TransactionContext`. Sink tasks receive :class:`SinkRecord` s in
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


class ExactlyOnceSupport:
    """What :meth:`SourceConnector.exactly_once_support` answers (Kafka's enum)."""

    SUPPORTED = "SUPPORTED"
    UNSUPPORTED = "UNSUPPORTED"


class ConnectorTransactionBoundaries:
    """What :meth:`SourceConnector.can_define_transaction_boundaries` answers."""

    SUPPORTED = "SUPPORTED"
    UNSUPPORTED = "UNSUPPORTED"


class TransactionContext:
    """Lets a task define its transaction boundaries (``transaction.boundary=connector``).

    As Kafka's: :meth:`commit_transaction` / :meth:`abort_transaction` without a record apply
    after the batch the current (or next) ``poll`` returns; with a record, right after that
    record was sent. An aborted transaction's records are dropped and their source offsets not
    stored. Requests are made from the task's own thread (inside ``poll``).
    """

    def __init__(self) -> None:
        self.batch_request: str | None = None  # "commit" | "abort" after the next batch
        self.record_requests: dict[int, str] = {}  # id(record) -> "commit" | "abort"

    def commit_transaction(self, record: SourceRecord | None = None) -> None:
        self._request("commit", record)

    def abort_transaction(self, record: SourceRecord | None = None) -> None:
        self._request("abort", record)

    def _request(self, what: str, record: SourceRecord | None) -> None:
        if record is None:
            self.batch_request = what
        else:
            self.record_requests[id(record)] = what


class SourceTaskContext:
    """Gives a source task the offsets stored for its source partitions."""

    def __init__(self, reader: Any,
                 transaction_context: TransactionContext | None = None) -> None:
        self._reader = reader
        self._transaction_context = transaction_context

    def transaction_context(self) -> TransactionContext | None:
        """The task's transaction context: only with exactly-once support enabled and
        ``transaction.boundary=connector`` (None otherwise, as Kafka's)."""
        return self._transaction_context

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

    def exactly_once_support(self, config: dict[str, str]) -> str | None:
        """:attr:`ExactlyOnceSupport.SUPPORTED` if the connector can give exactly-once
        delivery with ``config`` (KIP-618); None (the default) when it does not say, which
        ``exactly.once.support=required`` refuses."""
        return None

    def can_define_transaction_boundaries(self, config: dict[str, str]) -> str:
        """Whether tasks define their own transactions through :class:`TransactionContext`
        (``transaction.boundary=connector``); UNSUPPORTED by default."""
        return ConnectorTransactionBoundaries.UNSUPPORTED


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
        """Flush and return the offsets safe to commit (default: all that were put).

        ``offsets`` holds, per partition, the offset after the last record ``put`` returned
        for; an answer beyond it, or for a partition not asked about, is ignored (logged), and
        an exception commits nothing (outside a close the task goes back to the last
        committed offsets and gets those records again)."""
        self.flush(offsets)
        return offsets
