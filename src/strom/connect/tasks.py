"""Worker tasks: the thread that runs one source or sink task, and the source side of it.

Source: ``poll`` -> transform -> convert -> produce (confluent-kafka, ``acks=all``,
murmur2_random). Polled batches are produced without waiting; their acknowledgements arrive
through the producer's callbacks while the task keeps polling. The source offsets of a batch
become committable only once every record of it and of every earlier batch was acknowledged
(Kafka's SubmittedRecords); they are stored every ``offset.flush.interval.ms`` and when the
task stops (at-least-once: a crash replays what was produced after the last stored offsets).
The sink side is :mod:`strom.connect.sink_task`.

States are Kafka's: UNASSIGNED until the task's ``start`` returned, then RUNNING (or PAUSED);
FAILED (with ``trace``) as soon as the failure is caught, before the task's clients are closed
(closing may take a while, and the status must not show RUNNING meanwhile); UNASSIGNED again
once a task that did not fail has stopped. A task stopped while a step was being retried
(:class:`~strom.connect.errors.RetryInterrupted`) has not failed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, Producer

from strom.connect.api import SourceTask, SourceTaskContext, Task
from strom.connect.backing import OffsetBackingStore
from strom.connect.converters import Converter
from strom.connect.errors import ErrorHandler, Original, RetryInterrupted, Tolerated
from strom.connect.plugins import class_name
from strom.connect.transforms.chain import TransformationChain

LOG = logging.getLogger("strom.connect.task")


class WorkerTask(threading.Thread):
    """Common lifecycle: start the task, loop until stopped, record state and failure."""

    def __init__(self, connector: str, task_id: int, task: Task, config: dict[str, str],
                 key_converter: Converter, value_converter: Converter,
                 client_config: dict[str, Any], flush_interval_s: float,
                 transforms: TransformationChain | None = None,
                 errors: ErrorHandler | None = None) -> None:
        super().__init__(name=f"{connector}-{task_id}", daemon=True)
        self.connector = connector
        self.task_id = task_id
        self.task = task
        self.config = config
        self.key_converter = key_converter
        self.value_converter = value_converter
        self.client_config = client_config
        self.flush_interval_s = flush_interval_s
        self.state = "UNASSIGNED"
        self.trace: str | None = None
        #: Called (from whichever thread changed it) after each change of ``state``/``trace``:
        #: a distributed worker publishes the status at once, as Kafka's TaskStatus.Listener.
        self.on_state: Callable[[WorkerTask], None] | None = None
        self._state_lock = threading.Lock()
        self.stopping = threading.Event()
        self.paused = threading.Event()
        self.transforms = transforms or TransformationChain([])
        self.errors = errors or ErrorHandler(connector, task_id, {}, sink=False)
        self.errors.stopping = self.stopping  # retries end when the task stops
        self.errors.sleep = self.stopping.wait
        self.key_converter_class = class_name(type(key_converter))
        self.value_converter_class = class_name(type(value_converter))

    def run(self) -> None:
        try:
            self.prepare()
            self.task.start(self.config)
            self._transition(lambda state: "PAUSED" if self.paused.is_set() else "RUNNING")
            LOG.info("task %s-%d started", self.connector, self.task_id)
            self.execute()
        except BaseException as exc:  # noqa: BLE001 - any task failure is its FAILED status
            self.fail(exc)
        finally:
            try:
                self.task.stop()
            except Exception:  # noqa: BLE001
                LOG.exception("task %s-%d stop failed", self.connector, self.task_id)
            self.transforms.close()
            self.errors.close()
            self._transition(lambda state: None if state == "FAILED" else "UNASSIGNED")

    def fail(self, exc: BaseException) -> None:
        """Report the task FAILED with ``exc`` (the first failure wins). Not a failure: a
        retry cut short because the task is stopping."""
        if isinstance(exc, RetryInterrupted) and self.stopping.is_set():
            LOG.info("task %s-%d stopped while retrying: %s", self.connector, self.task_id, exc)
            return

        def failed(state: str) -> str | None:
            if state == "FAILED":
                return None
            self.trace = "".join(traceback.format_exception(exc))
            LOG.error("task %s-%d failed: %s", self.connector, self.task_id, exc)
            return "FAILED"

        self._transition(failed)

    def prepare(self) -> None:
        """Runs on the task's thread before the task starts (exactly-once: fence, read)."""

    def execute(self) -> None:
        raise NotImplementedError

    def set_paused(self, paused: bool) -> None:
        if paused:
            self.paused.set()
        else:
            self.paused.clear()
        self._transition(lambda state: ("PAUSED" if paused else "RUNNING")
                         if state in ("RUNNING", "PAUSED") else None)

    def _transition(self, change: Callable[[str], str | None]) -> None:
        """Move to ``change(state)`` (None: stay), atomically with respect to the other
        threads that change it (the task's own, the herder's pause/resume), then tell
        :attr:`on_state` outside the lock."""
        with self._state_lock:
            state = change(self.state)
            if state is None:
                return
            self.state = state
        if self.on_state is not None:
            try:
                self.on_state(self)
            except Exception:  # noqa: BLE001 - a status not written is retried by the herder
                LOG.exception("task %s-%d: status %s not published", self.connector,
                              self.task_id, state)

    def stop(self, timeout: float = 10.0) -> None:
        self.stopping.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout)


@dataclass
class _SubmittedBatch:
    """One polled batch in flight: its source offsets, records not yet acknowledged."""

    offsets: dict[str, dict[str, Any]] = field(default_factory=dict)
    outstanding: int = 0
    error: KafkaError | None = None

    def delivered(self, err: KafkaError | None, _msg: Any) -> None:
        self.outstanding -= 1
        if err is not None and self.error is None:
            self.error = err


class WorkerSourceTask(WorkerTask):
    def __init__(self, *args: Any, offsets: OffsetBackingStore, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.offsets = offsets
        assert isinstance(self.task, SourceTask)
        self.task.initialize(SourceTaskContext(lambda p: offsets.get(self.connector, p)))
        self.pending: dict[str, dict[str, Any]] = {}  # acknowledged, not yet stored
        self.in_flight: deque[_SubmittedBatch] = deque()  # produced, in poll order

    def execute(self) -> None:
        task = self.task
        assert isinstance(task, SourceTask)
        conf = {"acks": "all", "partitioner": "murmur2_random", "linger.ms": 5,
                **self.client_config}
        producer = Producer(conf)
        last_flush = time.monotonic()
        try:
            while not self.stopping.is_set():
                if self.paused.is_set():
                    self.stopping.wait(0.1)
                    continue
                records = task.poll() or []
                if records:
                    self._send(producer, records)
                producer.poll(0)  # serve delivery callbacks
                self._collect()
                if time.monotonic() - last_flush >= self.flush_interval_s:
                    self._commit_offsets()
                    last_flush = time.monotonic()
        except BaseException as exc:
            self.fail(exc)  # FAILED now: the flush below may wait for the broker
            raise
        finally:
            producer.flush(10)
            # Offsets up to a failed batch are collected; that batch's error fails the task.
            with contextlib.suppress(RuntimeError):
                self._collect()
            self._commit_offsets()

    def _collect(self) -> None:
        """Move the offsets of the acknowledged prefix of batches to ``pending``."""
        while self.in_flight and self.in_flight[0].outstanding == 0:
            batch = self.in_flight[0]
            if batch.error is not None:
                raise RuntimeError(f"producing to Kafka failed: {batch.error}")
            self.in_flight.popleft()
            self.pending.update(batch.offsets)

    def _send(self, producer: Producer, records: list[Any]) -> None:
        batch = _SubmittedBatch()
        self.in_flight.append(batch)
        errors = self.errors
        chained = bool(self.transforms.stages)
        key_converter, value_converter = self.key_converter, self.value_converter
        for original in records:
            # Transforms then converters, each step through the error handler (Kafka's order);
            # a record dropped or tolerated still counts for its source offset below.
            errors.begin(_source_context(original))
            try:
                r = self.transforms.apply(original, errors.run) if chained else original
                if r is None:
                    continue
                try:  # converters are pure: on any failure, again through the error handler
                    key = key_converter.from_connect_data(r.topic, r.key_schema, r.key)
                    value = value_converter.from_connect_data(r.topic, r.value_schema, r.value)
                except Exception:  # noqa: BLE001 - retried, tolerated or failed by _convert
                    key, value = self._convert(r)
            except Tolerated:
                continue
            kwargs: dict[str, Any] = {"key": key, "value": value,
                                      "on_delivery": batch.delivered}
            if r.partition is not None:
                kwargs["partition"] = r.partition
            if r.timestamp is not None:
                kwargs["timestamp"] = r.timestamp
            if r.headers:
                kwargs["headers"] = r.headers
            while True:
                try:
                    producer.produce(r.topic, **kwargs)
                    batch.outstanding += 1
                    break
                except BufferError:
                    producer.poll(0.1)
        # At-least-once: these offsets count once this batch and all before it are acknowledged.
        last: Any = None
        partition_key = ""
        for r in records:
            if r.source_partition != last:  # a dict compare is cheaper than a dumps per record
                last = r.source_partition
                partition_key = json.dumps(last, sort_keys=True)
            batch.offsets[partition_key] = r.source_offset

    def _convert(self, r: Any) -> tuple[bytes | None, bytes | None]:
        errors = self.errors
        key = errors.run("KEY_CONVERTER", self.key_converter_class,
                         lambda: self.key_converter.from_connect_data(r.topic, r.key_schema,
                                                                      r.key))
        value = errors.run("VALUE_CONVERTER", self.value_converter_class,
                           lambda: self.value_converter.from_connect_data(
                               r.topic, r.value_schema, r.value))
        return key, value

    def _commit_offsets(self) -> None:
        if not self.pending:
            return
        self.offsets.put_all(self.connector, self.pending)
        self.pending = {}
        assert isinstance(self.task, SourceTask)
        self.task.commit()


def _source_context(r: Any) -> Any:
    """What the error handler reports for a source record (built only if it fails)."""
    return lambda: Original(r.topic, r.partition, None, r.key, r.value, r.headers, r.timestamp)
