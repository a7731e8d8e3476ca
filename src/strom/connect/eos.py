"""Exactly-once source tasks (KIP-618): records and source offsets in one Kafka transaction.

Worker: ``exactly.once.source.support`` = ``disabled`` (default) | ``preparing`` | ``enabled``.
With ``enabled`` every source task of a distributed worker runs as
:class:`ExactlyOnceWorkerSourceTask`, as in Kafka Connect:

- its producer is transactional, ``transactional.id`` = ``<group.id>-<connector>-<task>``;
  ``init_transactions`` (InitProducerId) before the task starts bumps the id's epoch, which
  fences a zombie of the same task and aborts its open transaction;
- then the offsets topic is read to its end (read_committed: only committed offsets count)
  and only then does the task start and ask for its offsets;
- each transaction holds the records of one or more polled batches *and* the offset records
  (Kafka Connect's key ``["<connector>",{partition}]``, the offset as value) in the offsets
  topic: the connector's ``offsets.storage.topic`` if set (the worker's global one
  otherwise; offsets committed there are mirrored to the global topic afterwards, as Kafka).
  A crash at any point leaves either both or neither visible to ``read_committed`` readers.

Transactions end (``transaction.boundary``) after every non-empty ``poll`` (``poll``, the
default), every ``transaction.boundary.interval.ms`` (``interval``; default
``offset.flush.interval.ms``), or where the task asks through its
:class:`~strom.connect.api.TransactionContext` (``connector``). A failed commit fails the task
(its restart resumes from the committed offsets); a graceful stop commits the open transaction.

Zombie fencing across task generations (a task count that shrank leaves ids nobody re-inits)
is the leader's job, see :mod:`strom.connect.dist_runtime`: tasks of a connector whose task
configs were committed after its last ``task-count-record-<connector>`` wait until the leader
fenced every transactional id of the previous generation (:func:`fence_producers`) and wrote
the new count. ``preparing`` accepts the settings but runs tasks at-least-once (strom needs no
ACL preparation step).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from confluent_kafka import KafkaException, Producer

from strom.admin.errors import forget_frames, fresh
from strom.connect.api import (
    ConnectorTransactionBoundaries,
    ExactlyOnceSupport,
    SourceConnector,
    SourceRecord,
    SourceTask,
    SourceTaskContext,
    TransactionContext,
)
from strom.connect.backing import _key
from strom.connect.config import ConfigDef, ConfigKey, at_least
from strom.connect.tasks import WorkerSourceTask
from strom.connect.topic_stores import OffsetTopicStore, dumps

LOG = logging.getLogger("strom.connect.eos")

WORKER_MODES = ("disabled", "preparing", "enabled")
BOUNDARIES = ("poll", "interval", "connector")
NOT_ENABLED = "This worker does not have exactly-once source support enabled."
NO_PREFLIGHT = (
    "The connector does not implement the API required for preflight validation of "
    "exactly-once source support. Please consult the documentation for the connector to "
    "determine whether it supports exactly-once guarantees, and then consider reconfiguring "
    "the connector to use the value \"requested\" for this property (which will disable this "
    "preflight check and allow the connector to be created).")
UNSUPPORTED = "The connector does not support exactly-once semantics with the provided " \
              "configuration."
NO_BOUNDARIES = ("The connector does not support connector-defined transaction boundaries "
                 "with the given configuration. Please reconfigure it to use a different "
                 "transaction boundary definition.")


def _one_of(*allowed: str) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        if value is not None and str(value).strip().lower() not in allowed:
            return "String must be one of (case insensitive): " + ", ".join(allowed)
        return None

    return check


SOURCE_DEF = ConfigDef([
    ConfigKey("exactly.once.support", "STRING", "requested", "MEDIUM",
              "requested: exactly-once if the worker supports it; required: refuse a "
              "connector that cannot give it.", group="Exactly Once Support",
              validator=_one_of("requested", "required")),
    ConfigKey("transaction.boundary", "STRING", "poll", "MEDIUM",
              "Where transactions end: poll, interval or connector.",
              group="Exactly Once Support", validator=_one_of(*BOUNDARIES)),
    ConfigKey("transaction.boundary.interval.ms", "LONG", None, "LOW",
              "With transaction.boundary=interval, how often transactions are committed "
              "(offset.flush.interval.ms by default).", group="Exactly Once Support",
              validator=at_least(0)),
    ConfigKey("offsets.storage.topic", "STRING", None, "LOW",
              "This connector's own offsets topic (the worker's global one by default).",
              group="Offsets Topic"),
])


def validate_source(connector: SourceConnector, config: dict[str, str],
                    worker_mode: str) -> dict[str, list[str]]:
    """Kafka's preflight checks of the exactly-once keys: config name -> errors."""
    errors: dict[str, list[str]] = {}
    support = config.get("exactly.once.support", "requested").strip().lower()
    if support == "required":
        if worker_mode != "enabled":
            errors.setdefault("exactly.once.support", []).append(NOT_ENABLED)
        else:
            answer = connector.exactly_once_support(dict(config))
            if answer is None:
                errors.setdefault("exactly.once.support", []).append(NO_PREFLIGHT)
            elif answer != ExactlyOnceSupport.SUPPORTED:
                errors.setdefault("exactly.once.support", []).append(UNSUPPORTED)
    boundary = config.get("transaction.boundary", "poll").strip().lower()
    if boundary == "connector" and connector.can_define_transaction_boundaries(
            dict(config)) != ConnectorTransactionBoundaries.SUPPORTED:
        errors.setdefault("transaction.boundary", []).append(NO_BOUNDARIES)
    if config.get("transaction.boundary.interval.ms") and boundary != "interval":
        errors.setdefault("transaction.boundary.interval.ms", []).append(
            "This property may only be specified when transaction.boundary is set to "
            "'interval'")
    return errors


def transactional_id(group: str, connector: str, task: int) -> str:
    """Kafka Connect's transactional id of a source task."""
    return f"{group}-{connector}-{task}"


def fence_producers(client_config: dict[str, Any], ids: list[str],
                    timeout: float = 30.0) -> None:
    """Fence every producer of ``ids``: InitProducerId bumps each id's epoch and aborts its
    open transaction (what Kafka's ``Admin.fenceProducers`` does). Raises KafkaException."""

    def fence(tid: str) -> None:
        producer = Producer({**client_config, "transactional.id": tid})
        producer.init_transactions(timeout)
        producer.flush(1)

    if not ids:
        return
    with ThreadPoolExecutor(max_workers=min(8, len(ids))) as pool:
        for result in [pool.submit(fence, tid) for tid in ids]:
            result.result()
    LOG.info("fenced transactional ids %s", ", ".join(ids))


class ExactlyOnceWorkerSourceTask(WorkerSourceTask):
    """A source task whose records and source offsets commit in one transaction."""

    def __init__(self, *args: Any, transactional_id: str, boundary: str, interval_s: float,
                 offsets_topic: str, connector_offsets: OffsetTopicStore | None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.transactional_id = transactional_id
        self.boundary = boundary
        self.interval_s = interval_s
        self.offsets_topic = offsets_topic
        self.connector_offsets = connector_offsets  # the connector's own topic, if any
        self.producer: Producer | None = None
        self.in_txn = False
        self.txn_offsets: dict[str, dict[str, Any]] = {}
        self.txn_context = TransactionContext() if boundary == "connector" else None
        assert isinstance(self.task, SourceTask)
        self.task.initialize(SourceTaskContext(self._offset, self.txn_context))

    def _offset(self, partition: dict[str, Any]) -> dict[str, Any] | None:
        if self.connector_offsets is not None:
            found = self.connector_offsets.get(self.connector, partition)
            if found is not None:
                return found
        return self.offsets.get(self.connector, partition)

    def prepare(self) -> None:
        conf = {"acks": "all", "partitioner": "murmur2_random", "linger.ms": 5,
                **self.client_config, "transactional.id": self.transactional_id,
                "enable.idempotence": True}
        self.producer = Producer(conf)
        # Fences the previous incarnation of this task (its open transaction is aborted),
        # so the offsets read next are final for everything it ever wrote.
        self.producer.init_transactions(60)
        if self.connector_offsets is not None:
            self.connector_offsets.log.start()
        store = self.offsets
        assert isinstance(store, OffsetTopicStore)
        if not store.log.read_to_end(60):
            raise RuntimeError(f"could not read the offsets topic {store.log.topic} to its end")
        LOG.info("task %s-%d: transactional id %s initialised", self.connector, self.task_id,
                 self.transactional_id)

    def execute(self) -> None:
        task = self.task
        assert isinstance(task, SourceTask) and self.producer is not None
        producer = self.producer
        last_commit = time.monotonic()
        committed = False
        try:
            while not self.stopping.is_set():
                if self.paused.is_set():
                    self._commit()  # nothing stays open while paused
                    self.stopping.wait(0.1)
                    continue
                records = task.poll() or []
                if records:
                    self._process(producer, records)
                producer.poll(0)
                if self.boundary == "interval" and (
                        time.monotonic() - last_commit >= self.interval_s):
                    self._commit()
                    last_commit = time.monotonic()
            self._commit()  # a graceful stop commits what was sent (Kafka's final commit)
            committed = True
        except BaseException as exc:
            self.fail(exc)  # FAILED now: the abort and flush below may wait for the broker
            raise
        finally:
            if not committed and self.in_txn:
                try:
                    producer.abort_transaction(10)
                except KafkaException as exc:
                    forget_frames(exc)
                    LOG.warning("task %s-%d: abort failed: %s", self.connector, self.task_id,
                                exc)
            producer.flush(10)
            if self.connector_offsets is not None:
                self.connector_offsets.log.stop()

    def _process(self, producer: Producer, records: list[SourceRecord]) -> None:
        """Send a polled batch inside transactions, ending them where the boundary says."""
        context = self.txn_context
        start = 0
        if context is not None and context.record_requests:
            for i, record in enumerate(records):
                request = context.record_requests.pop(id(record), None)
                if request is not None:
                    self._send_in_txn(producer, records[start:i + 1])
                    self._end(request)
                    start = i + 1
            context.record_requests.clear()
        if start < len(records):
            self._send_in_txn(producer, records[start:])
        if self.boundary == "poll":
            self._commit()
        elif context is not None and context.batch_request is not None:
            request, context.batch_request = context.batch_request, None
            self._end(request)

    def _send_in_txn(self, producer: Producer, records: list[SourceRecord]) -> None:
        if not records:
            return
        if not self.in_txn:
            producer.begin_transaction()
            self.in_txn = True
        self._send(producer, records)  # the at-least-once path's conversion and produce
        # Their offsets go into this transaction instead of the acknowledged-offsets queue.
        self.pending.clear()
        in_flight = getattr(self, "in_flight", None)
        if in_flight is not None:
            in_flight.clear()
        for r in records:
            self.txn_offsets[json.dumps(r.source_partition, sort_keys=True)] = r.source_offset

    def _end(self, request: str) -> None:
        if request == "commit":
            self._commit()
        else:
            self._abort()

    def _abort(self) -> None:
        if not self.in_txn:
            return
        assert self.producer is not None
        self.producer.abort_transaction(60)
        self.in_txn = False
        LOG.info("task %s-%d: transaction aborted (%d source partitions' offsets dropped)",
                 self.connector, self.task_id, len(self.txn_offsets))
        self.txn_offsets = {}

    def _commit(self) -> None:
        if not self.in_txn:
            return
        producer = self.producer
        assert producer is not None
        for partition_json, offset in self.txn_offsets.items():
            key = _key(self.connector, json.loads(partition_json)).encode()
            while True:
                try:
                    producer.produce(self.offsets_topic, key=key, value=dumps(offset))
                    break
                except BufferError:
                    producer.poll(0.1)
        try:  # raises on any failed record: the task fails and restarts from committed offsets
            producer.commit_transaction(60)
        except KafkaException as exc:  # not the caught one: it would pin this task's frames
            raise fresh(exc) from None
        self.in_txn = False
        offsets, self.txn_offsets = self.txn_offsets, {}
        if self.connector_offsets is not None:
            self.connector_offsets.remember(self.connector, offsets)
            self.offsets.put_all(self.connector, offsets)  # mirrored to the global topic
        else:
            store = self.offsets
            assert isinstance(store, OffsetTopicStore)
            store.remember(self.connector, offsets)
        assert isinstance(self.task, SourceTask)
        self.task.commit()
