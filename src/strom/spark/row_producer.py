"""Rows of Arrow batches produced through one confluent-kafka Producer: the part of the sink
both delivery modes share (at-least-once here, exactly-once in :mod:`strom.spark.exactly_once`).

At-least-once producers outlive their task: Spark reuses its Python workers, and a worker keeps
the producer of a task that ended well (every record acknowledged, no error) for the next task
with the same client settings, as Spark's own Kafka sink caches its producers. A new Producer
per task cost every task of every micro-batch the client's start, its bootstrap connection,
a Metadata round trip and the leader's connection before its first record left. A producer is
never kept after a failed task (its queue may still hold that task's records) nor used in
another process than the one that made it (librdkafka's threads do not survive a fork).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException, Producer

from strom.spark.batch_sender import BatchSender, eligible, sendable
from strom.spark.options import WriteOptions

# librdkafka's default delivery.timeout.ms is 300 s: past it every record is delivered or failed.
FLUSH_TIMEOUT_S = 330.0
QUEUE_FULL_WAIT_S = 0.002
# librdkafka's local queue (default 100,000 messages): a task writes a whole partition's rows,
# and a full queue makes the loop wait, so the default is raised (kafka.* options override it)
QUEUE_MESSAGES = 1_000_000


def _column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    index = batch.schema.get_field_index(name)
    return batch.column(index).to_pylist() if index >= 0 else None


class _FirstError:
    """A producer's delivery callback that keeps the first error."""

    def __init__(self) -> None:
        self.error: KafkaError | None = None

    def __call__(self, err: KafkaError | None, _msg: Any) -> None:
        if err is not None and self.error is None:
            self.error = err


class RowProducer:
    """Produces the rows of Arrow batches; remembers the first delivery error.

    Rows of the common shape (key and value only, to the ``topic`` option) go as record
    batches through :class:`~strom.spark.batch_sender.BatchSender` when the client settings
    allow it (:func:`~strom.spark.batch_sender.eligible`): no Python per row. Every other row
    goes through one confluent-kafka Producer, made when first needed: the Python work per row
    is one ``produce()`` call (columns converted once per batch, positional arguments), and
    delivery reports come back for failures only (``delivery.report.only.error``, one callback
    set in the configuration), not as a Python callback per acknowledged row."""

    def __init__(self, config: dict[str, Any], default_topic: str | None) -> None:
        self.config = config
        self.sender = (BatchSender(config, default_topic)
                       if default_topic and eligible(config, default_topic) else None)  # fmt: skip
        self._producer: Producer | None = None
        self.default_topic = default_topic
        self._failures = _FirstError()
        self.count = 0

    @property
    def error(self) -> KafkaError | None:
        """The first delivery error (None: none so far)."""
        return self._failures.error

    @property
    def producer(self) -> Producer:
        if self._producer is None:  # its callback holds the error's keeper, not this object:
            # no cycle, so a dropped RowProducer frees its producer at once
            self._producer = Producer({**self.config, "on_delivery": self._failures,
                                       "delivery.report.only.error": True})  # fmt: skip
        return self._producer

    def produce_batch(self, batch: pa.RecordBatch) -> None:
        names = batch.schema.names
        if self.sender is not None and not {"topic", "partition", "headers"} & set(names):
            keys = batch.column(names.index("key")) if "key" in names else None
            values = batch.column(names.index("value"))
            if sendable(values) and (keys is None or sendable(keys)):
                self.sender.submit(keys, values)  # acknowledged by flush()
                self.count += batch.num_rows
                return
        values = _column(batch, "value")
        assert values is not None
        keys = _column(batch, "key")
        topics = _column(batch, "topic")
        partitions = _column(batch, "partition")
        headers = _column(batch, "headers")
        if topics is None and partitions is None and headers is None:
            self._produce_plain(values, keys)
        else:
            self._produce_rows(values, keys, topics, partitions, headers)
        self.count += len(values)
        self.producer.poll(0)
        self.check()

    def _produce_plain(self, values: list[Any], keys: list[Any] | None) -> None:
        """The common shape: value (and key) to the ``topic`` option, partitioner's choice."""
        topic = self.default_topic
        if topic is None:
            raise ValueError("a row has no topic and the 'topic' option is not set")
        produce = self.producer.produce
        for value, key in zip(values, keys or [None] * len(values), strict=True):
            try:
                produce(topic, value, key)
            except BufferError:
                self._wait_and_produce(topic, value, key)

    def _produce_rows(self, values: list[Any], keys: list[Any] | None,
                      topics: list[Any] | None, partitions: list[Any] | None,
                      headers: list[Any] | None) -> None:  # fmt: skip
        rows = len(values)
        produce = self.producer.produce
        for value, key, topic, partition, header in zip(
            values, keys or [None] * rows, topics or [None] * rows,
            partitions or [None] * rows, headers or [None] * rows, strict=True,
        ):  # fmt: skip
            topic = topic or self.default_topic
            if topic is None:
                raise ValueError("a row has no topic and the 'topic' option is not set")
            part = -1 if partition is None else partition  # -1: the partitioner decides
            hdrs = [(h["key"], h["value"]) for h in header] if header else None
            try:
                produce(topic, value, key, part, headers=hdrs)
            except BufferError:
                self._wait_and_produce(topic, value, key, part, hdrs)

    def _wait_and_produce(self, topic: str, value: Any, key: Any, partition: int = -1,
                          headers: Any = None) -> None:  # fmt: skip
        while True:
            # The local queue is full: wait a moment for acknowledgements. Not poll(t): with
            # failures-only reports a success wakes no poll, which would sleep all of t.
            self.producer.flush(QUEUE_FULL_WAIT_S)
            try:
                self.producer.produce(topic, value, key, partition, headers=headers)
                return
            except BufferError:
                continue

    def close(self) -> None:
        """Close the clients now, not when the garbage collector finds them (the delivery
        callback makes a reference cycle). confluent-kafka before 2.x has no ``close``."""
        if self.sender is not None:
            self.sender.close()
        close = getattr(self._producer, "close", None)
        if close is not None:
            close()

    def check(self) -> None:
        if self.error is not None:
            raise KafkaException(self.error)

    def flush(self, timeout: float) -> None:
        """Wait for every row: the sender's (within its delivery timeout) and the Producer's."""
        if self.sender is not None:
            self.sender.flush()
        if self._producer is None:
            self.check()
            return
        remaining = self._producer.flush(timeout)
        self.check()
        if remaining:
            raise TimeoutError(f"{remaining} records not acknowledged within {timeout:.0f}s")


def _producer_config(options: WriteOptions) -> dict[str, Any]:
    config: dict[str, Any] = dict(options.client)
    config.setdefault("linger.ms", 5)
    config.setdefault("queue.buffering.max.messages", QUEUE_MESSAGES)
    return config


#: producers kept between a worker's tasks (module doc), by client settings and topic; the
#: pid is the process that made them
_idle: dict[tuple[Any, ...], tuple[int, RowProducer]] = {}
#: at most this many kept (one per distinct sink a worker writes: usually one)
IDLE_PRODUCERS = 4


def _settings_key(config: dict[str, Any], topic: str | None) -> tuple[Any, ...]:
    return (topic, *sorted((str(k), str(v)) for k, v in config.items()))


def _take_idle(key: tuple[Any, ...]) -> RowProducer | None:
    kept = _idle.pop(key, None)
    if kept is None or kept[0] != os.getpid():
        return None
    return kept[1]


def _keep_idle(key: tuple[Any, ...], rows: RowProducer) -> None:
    while len(_idle) >= IDLE_PRODUCERS:
        pid, oldest = _idle.pop(next(iter(_idle)))  # the longest idle one
        if pid == os.getpid():
            oldest.close()
    _idle[key] = (os.getpid(), rows)


def kept_producer(options: WriteOptions) -> RowProducer | None:
    """The producer this process keeps for ``options`` (module doc), if any."""
    kept = _idle.get(_settings_key(_producer_config(options), options.topic))
    return kept[1] if kept is not None and kept[0] == os.getpid() else None


def drop_kept_producers() -> None:
    """Close every producer this process keeps (their queues are empty: each was flushed)."""
    kept = list(_idle.values())
    _idle.clear()
    for pid, rows in kept:
        if pid == os.getpid():
            rows.close()


def write_at_least_once(options: WriteOptions, batches: Iterator[pa.RecordBatch]) -> int:
    """Produce every row of ``batches``; return once each is acknowledged (raise if one is
    not). The producer is a kept one when this worker has one for these settings."""
    config = _producer_config(options)
    key = _settings_key(config, options.topic)
    rows = _take_idle(key) or RowProducer(config, options.topic)
    rows.count = 0
    for batch in batches:
        rows.produce_batch(batch)
    rows.flush(timeout=FLUSH_TIMEOUT_S)
    _keep_idle(key, rows)  # only now: after an error it is dropped with what it still holds
    return rows.count
