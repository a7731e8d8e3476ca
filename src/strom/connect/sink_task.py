"""The worker side of a sink task: consume, convert, transform, ``put``, commit what was flushed.

One thread per task, Kafka's ``WorkerSinkTask``: the consumer (group ``connect-<name>``, no
auto commit, ``earliest``) feeds batches through the converters and the transformation chain
(each step through the error handler) to the task's ``put``. The offsets are kept by
:class:`~strom.connect.sink_offsets.SinkOffsets`; they are committed

- every ``offset.flush.interval.ms``, and when the task is paused (for the assigned
  partitions),
- when partitions are revoked by a consumer-group rebalance (for those partitions),
- when the task stops or fails (for every partition it delivered records of),

each time only after ``pre_commit`` (``flush``) answered, and never past the last record
delivered: a record that failed in a converter, a transform or ``put`` is not committed, and
neither is anything after it. Lost partitions (the member was fenced) are forgotten without a
commit. A :class:`~strom.connect.api.RetriableError` from ``put`` pauses the partitions and
delivers the same batch again (the consumer keeps polling, so the group and the commits go
on). A paused task stays in its group but moves no data.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from strom.connect.api import ConnectError, RetriableError, SinkRecord, SinkTask
from strom.connect.errors import Original, Tolerated
from strom.connect.sink_offsets import SinkOffsets
from strom.connect.subscription import TopicSubscription
from strom.connect.tasks import WorkerTask

LOG = logging.getLogger("strom.connect.task")
#: How long a batch whose ``put`` raised RetriableError waits before it is delivered again.
REDELIVERY_BACKOFF_S = 0.5


class WorkerSinkTask(WorkerTask):
    def __init__(self, *args: Any, topics: list[str], topics_regex: str | None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.topics = topics
        self.topics_regex = topics_regex
        self.offsets = SinkOffsets()
        self.batch: list[SinkRecord] = []  # converted, not yet delivered (or to redeliver)
        self.redeliver_at: float | None = None  # set while a batch waits to be put again
        self.closed = False  # the final commit is done: revocations now commit nothing
        self.rebalance_error: BaseException | None = None
        self.commit_requested = False
        self.reassigned = False  # partitions were assigned: set their pause state again

    @property
    def sink(self) -> SinkTask:
        assert isinstance(self.task, SinkTask)
        return self.task

    # -- the loop ---------------------------------------------------------------------------
    def execute(self) -> None:
        conf = {"group.id": f"connect-{self.connector}", "enable.auto.commit": False,
                "auto.offset.reset": "earliest", **self.client_config}
        consumer = Consumer(conf)
        subscription = TopicSubscription(
            consumer, self.topics, self.topics_regex, self.client_config,
            lambda c, topics: c.subscribe(topics, on_assign=self._on_assign,
                                          on_revoke=self._on_revoke, on_lost=self._on_lost))
        try:
            subscription.refresh(first=True)
            self._loop(consumer, subscription)
        except BaseException as exc:
            self.fail(exc)  # FAILED now: the closing commit below may take a while
            raise
        finally:
            try:
                # Every partition this task delivered records of (Kafka's closeAllPartitions).
                self._commit(consumer, closing=True, partitions=list(self.offsets.current))
            finally:
                self.closed = True
                consumer.close()

    def _loop(self, consumer: Consumer, subscription: TopicSubscription) -> None:
        last_commit = time.monotonic()
        paused = False
        while not self.stopping.is_set():
            if not subscription.refresh():
                self.stopping.wait(0.2)  # topics.regex matches no topic (yet)
                continue
            if self.paused.is_set() != paused or self.reassigned:
                self.reassigned = False
                self.commit_requested |= self.paused.is_set() and not paused  # as Kafka's
                paused = self.paused.is_set()
                self._pause_or_resume(consumer)
            if self.commit_requested or time.monotonic() - last_commit >= self.flush_interval_s:
                self._commit(consumer, closing=False)
                self.commit_requested = False
                last_commit = time.monotonic()
            messages = consumer.consume(500, 0.2)
            if self.rebalance_error is not None:
                error, self.rebalance_error = self.rebalance_error, None
                raise error
            if self.paused.is_set() or self.redeliver_at is not None:
                # Paused, or a batch waits to be delivered again: these records come back later.
                self._rewind(consumer, messages)
                if self.redeliver_at is not None and not self.paused.is_set() and \
                        time.monotonic() >= self.redeliver_at:
                    self._deliver(consumer)
                continue
            for m in messages:
                if m.error() is None:
                    record = self._record(m)
                    if record is not None:
                        self.batch.append(record)
            if self.batch:
                self._deliver(consumer)
            else:
                self.offsets.delivered()  # every record of it was skipped (tolerated)

    def _deliver(self, consumer: Consumer) -> None:
        """``put`` the batch; only then do its offsets count as delivered."""
        try:
            self.sink.put(list(self.batch))
        except RetriableError as exc:
            LOG.warning("task %s-%d put will be retried: %s", self.connector, self.task_id, exc)
            if self.redeliver_at is None:
                self.redeliver_at = 0.0  # pause before the next consume hands out more
                self._pause_or_resume(consumer)
            self.redeliver_at = time.monotonic() + REDELIVERY_BACKOFF_S
            return
        self.offsets.delivered()
        self.batch = []
        if self.redeliver_at is not None:
            self.redeliver_at = None
            self._pause_or_resume(consumer)

    def _pause_or_resume(self, consumer: Consumer) -> None:
        """The assignment is paused while the task is paused or a batch waits for
        redelivery, else resumed."""
        assigned = consumer.assignment()
        if assigned:
            hold = self.paused.is_set() or self.redeliver_at is not None
            (consumer.pause if hold else consumer.resume)(assigned)

    @staticmethod
    def _rewind(consumer: Consumer, messages: list[Any]) -> None:
        """Seek back to the first of ``messages`` per partition: they were not taken."""
        first: dict[tuple[str, int], int] = {}
        for m in messages:
            if m.error() is None:
                first.setdefault((m.topic(), m.partition()), m.offset())
        for (topic, partition), offset in first.items():
            consumer.seek(TopicPartition(topic, partition, offset))

    # -- one record -------------------------------------------------------------------------
    def _record(self, msg: Any) -> SinkRecord | None:
        """Convert then transform (each step through the error handler); None: skipped."""
        topic = msg.topic()
        errors = self.errors
        timestamp = msg.timestamp()[1]
        headers = list(msg.headers() or [])
        errors.begin(lambda: Original(topic, msg.partition(), msg.offset(), msg.key(),
                                      msg.value(), headers, timestamp))
        try:
            try:  # converters are pure: on any failure, again through the error handler
                key_schema, key = self.key_converter.to_connect_data(topic, msg.key())
                value_schema, value = self.value_converter.to_connect_data(topic, msg.value())
            except Exception:  # noqa: BLE001 - retried, tolerated, reported or failed below
                key_schema, key = errors.run(
                    "KEY_CONVERTER", self.key_converter_class,
                    lambda: self.key_converter.to_connect_data(topic, msg.key()))
                value_schema, value = errors.run(
                    "VALUE_CONVERTER", self.value_converter_class,
                    lambda: self.value_converter.to_connect_data(topic, msg.value()))
            converted = SinkRecord(
                topic=topic, partition=msg.partition(), key=key, value=value,
                key_schema=key_schema, value_schema=value_schema, timestamp=timestamp,
                headers=headers, kafka_offset=msg.offset())
            record = self.transforms.apply(converted, errors.run) if self.transforms.stages \
                else converted
        except Tolerated:
            record = None  # reported (log, DLQ): skipped, its offset counts once delivered
        # Only now: a record that failed above (errors.tolerance=none) is not consumed.
        self.offsets.consumed((topic, msg.partition()), msg.offset())
        return record

    # -- commits ----------------------------------------------------------------------------
    def _commit(self, consumer: Consumer, *, closing: bool,
                partitions: list[tuple[str, int]] | None = None) -> None:
        """``pre_commit`` with the delivered offsets of ``partitions`` (the assigned ones by
        default), then commit what it answered. A failing ``pre_commit`` commits nothing; when
        not closing it also rewinds those partitions to their last committed offsets."""
        if partitions is None:
            partitions = [(tp.topic, tp.partition) for tp in consumer.assignment()]
        requested = self.offsets.requested(partitions)
        if not requested:
            return
        try:
            provided = self.sink.pre_commit(dict(requested)) or {}
        except Exception as exc:  # noqa: BLE001 - the task's flush failed: nothing committed
            if closing:
                LOG.warning("task %s-%d offset commit failed during close: %s", self.connector,
                            self.task_id, exc)
                return
            LOG.error("task %s-%d offset commit failed, rewinding to the last committed "
                      "offsets: %s", self.connector, self.task_id, exc)
            seek = self.offsets.rewind(requested)
            self.batch = [r for r in self.batch if (r.topic, r.partition) not in seek]
            try:
                for (topic, partition), offset in seek.items():
                    consumer.seek(TopicPartition(topic, partition, offset))
            except KafkaException as seek_error:
                raise ConnectError(f"Could not rewind to the last committed offsets after a "
                                   f"failed flush: {seek_error}") from exc
            return
        commit, ignored = self.offsets.committable(requested, provided)
        for what in ignored:
            LOG.warning("task %s-%d: ignoring the offset pre_commit returned for %s",
                        self.connector, self.task_id, what)
        if not commit:
            return
        try:
            consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in commit.items()],
                            asynchronous=False)
        except KafkaException as exc:
            # As Kafka's WorkerSinkTask: log and go on; the records are replayed, not lost.
            LOG.warning("task %s-%d offset commit failed: %s", self.connector, self.task_id,
                        exc)
            return
        self.offsets.commit_done(commit)

    # -- consumer-group rebalances (called from inside consume/close) -------------------------
    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Before the first fetch: a paused task (or one waiting to redeliver) takes nothing.
        # The loop sets the whole assignment's state again once it is in place, and gives back
        # whatever was fetched meanwhile.
        if self.paused.is_set() or self.redeliver_at is not None:
            consumer.pause(partitions)
        self.reassigned = True

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self.closed:
            return  # the closing commit is done: the task is stopped
        tps = [(tp.topic, tp.partition) for tp in partitions]
        try:
            # Flush and commit what was delivered before the partitions move on.
            self._commit(consumer, closing=True, partitions=tps)
        except BaseException as exc:  # noqa: BLE001 - the consumer would swallow it
            self.rebalance_error = exc
        self._forget(tps)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # The member was fenced: a commit would be refused, the new owner starts over.
        self._forget([(tp.topic, tp.partition) for tp in partitions])

    def _forget(self, tps: list[tuple[str, int]]) -> None:
        gone = set(tps)
        self.offsets.forget(gone)
        self.batch = [r for r in self.batch if (r.topic, r.partition) not in gone]
        if self.redeliver_at is not None and not self.batch:
            self.redeliver_at = None  # its records went with the partitions
            self.reassigned = True  # resume the partitions still assigned
