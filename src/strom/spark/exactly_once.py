"""Exactly-once writes (``exactlyOnce=true``) through the broker's transactions.

Spark may run a batch's task more than once (retries, a batch re-run after a driver restart),
may call the writer's ``commit(messages, batchId)`` more than once, may call ``abort`` after some
tasks committed, and never tells the sink about a failed task attempt. So the unit of
idempotence is the task: (query id, task partition, batch id).

For each task:

1. A producer with the stable transactional id ``<prefix>-<query id>-<task partition>`` calls
   ``init_transactions``: the broker fences every earlier producer with that id (a zombie
   attempt) and aborts its open transaction, so what follows sees only finished work.
2. The sink-owned group ``<prefix>-<query id>-<task partition>`` holds, as its committed offset
   of partition 0 of the ``topic`` option, ``batch id + 1`` of the last batch this task
   partition committed (metadata ``strom-spark batch N``). Read with read_committed semantics.
   If it is at least ``batch id + 1``, this task already wrote this batch: its rows are drained
   and nothing is produced.
3. Otherwise: begin a transaction, produce every row, record ``batch id + 1`` for the group
   *inside the same transaction* (a transactional offset commit), commit the transaction.
   Rows and the record become visible together, or not at all.

The guarantee (read_committed consumers see each result row exactly once) holds when the query
is deterministic: a re-run of batch N gives each task partition the same rows. It needs broker
transactions; a broker without them makes ``init_transactions`` fail, reported as
:class:`TransactionsUnavailable` with the broker's error.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaException, TopicPartition

from strom.admin.errors import forget_frames, fresh
from strom.spark.options import WriteOptions
from strom.spark.row_producer import QUEUE_MESSAGES, RowProducer

log = logging.getLogger(__name__)

METADATA_PREFIX = "strom-spark batch "


class TransactionsUnavailable(RuntimeError):
    """The broker refused or did not answer the transactional producer's initialisation."""


def transactional_id(options: WriteOptions, query_id: str, task_partition: int) -> str:
    return f"{options.transactional_id_prefix}-{query_id}-{task_partition}"


def _init(options: WriteOptions, txn_id: str) -> RowProducer:
    config: dict[str, Any] = dict(options.client)
    config.update({"transactional.id": txn_id, "enable.idempotence": True})
    config.setdefault("linger.ms", 5)
    config.setdefault("queue.buffering.max.messages", QUEUE_MESSAGES)
    rows = RowProducer(config, options.topic)
    try:
        rows.producer.init_transactions(options.init_timeout_ms / 1000.0)
    except KafkaException as exc:
        error = exc.args[0]
        raise TransactionsUnavailable(
            f"exactlyOnce=true needs transactions, and the broker at "
            f"{options.client['bootstrap.servers']} could not start transactional producer "
            f"{txn_id!r}: {getattr(error, 'name', lambda: error)()}: "
            f"{getattr(error, 'str', lambda: error)()}. Until the broker supports "
            "transactions, write without exactlyOnce (at-least-once)."
        ) from exc
    return rows


def committed_batches(consumer: Consumer, anchor: TopicPartition, timeout: float) -> int:
    """The ``batch id + 1`` recorded for this task partition (0 when none)."""
    [found] = consumer.committed([anchor], timeout=timeout)
    if found.error is not None:
        raise KafkaException(found.error)
    return max(found.offset, 0)


def write_exactly_once(
    options: WriteOptions,
    batches: Iterator[pa.RecordBatch],
    query_id: str,
    task_partition: int,
    batch_id: int,
) -> tuple[int, bool]:
    """Write one task's rows once per (query, task partition, batch); (rows, skipped)."""
    assert options.topic is not None  # parse_write_options requires it in this mode
    txn_id = transactional_id(options, query_id, task_partition)
    timeout = options.init_timeout_ms / 1000.0
    rows = _init(options, txn_id)
    producer = rows.producer
    consumer = Consumer(
        {
            **dict(options.client),
            "group.id": txn_id,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    anchor = TopicPartition(options.topic, 0)
    try:
        done = committed_batches(consumer, anchor, timeout)
        if done >= batch_id + 1:
            drained = sum(batch.num_rows for batch in batches)
            log.info("%s: batch %d already committed (%d rows skipped)", txn_id, batch_id, drained)
            return 0, True
        producer.begin_transaction()
        try:
            for batch in batches:
                rows.produce_batch(batch)
            rows.flush(timeout)
            record = TopicPartition(
                options.topic, 0, batch_id + 1, metadata=f"{METADATA_PREFIX}{batch_id}"
            )
            producer.send_offsets_to_transaction(
                [record], consumer.consumer_group_metadata(), timeout
            )
            producer.commit_transaction(timeout)
        except BaseException as exc:
            try:
                producer.abort_transaction(timeout)
            except KafkaException as abort_exc:  # fenced or broken: the next init aborts it
                forget_frames(abort_exc)
                log.warning("%s: abort failed: %s", txn_id, abort_exc)
            if isinstance(exc, KafkaException):  # a reused Python worker would keep the batches
                raise fresh(exc) from None
            raise
        return rows.count, False
    finally:
        consumer.close()
