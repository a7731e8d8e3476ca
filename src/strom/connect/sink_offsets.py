"""The consumer offsets of a sink task: which may be committed, and when (sans-IO).

Kafka's ``WorkerSinkTask`` bookkeeping, kept apart from the consumer so that every rule can be
tested without a broker. Offsets are "next offset to read" per ``(topic, partition)``.

- :meth:`SinkOffsets.consumed` records a message taken into the batch being built (converted
  and transformed, or skipped by ``errors.tolerance=all`` after its DLQ report): the batch's
  offsets (Kafka's ``origOffsets``).
- :meth:`SinkOffsets.delivered` once ``put`` of that batch returned: the batch's offsets become
  the *delivered* ones (``currentOffsets``). Nothing else advances them: a record that failed
  in a converter, a transform or ``put``, or a batch still waiting to be retried after a
  :class:`~strom.connect.api.RetriableError`, never counts, so a failed or stopped task
  commits nothing past the last record it delivered.
- A commit asks the task's ``pre_commit`` (which flushes) with the delivered offsets of the
  partitions concerned (:meth:`requested`), and commits only what it answered, and only where
  that is not beyond what was delivered to it (:meth:`committable`; Kafka ignores the rest
  with a warning). A ``pre_commit`` that fails outside a close rewinds the partitions to the
  last committed offsets (:meth:`rewind`): what was put since is delivered again.
- Partitions revoked or lost are forgotten (:meth:`forget`): their new owner starts from the
  committed offsets.

Invariant: for every partition, ``committed <= delivered`` as far as this task's commits go,
and ``delivered`` only ever holds offsets of records whose batch ``put`` returned.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

TopicPartition = tuple[str, int]


class SinkOffsets:
    def __init__(self) -> None:
        self.batch: dict[TopicPartition, int] = {}  # in the batch being built or retried
        self.current: dict[TopicPartition, int] = {}  # delivered: ``put`` returned
        self.committed: dict[TopicPartition, int] = {}  # last committed (or first position)

    def consumed(self, tp: TopicPartition, offset: int) -> None:
        """The message at ``offset`` went into the batch (or was skipped, tolerated)."""
        # The first offset read after an assignment is where the partition started: the
        # committed offset (or the reset position), what a rewind goes back to.
        self.committed.setdefault(tp, offset)
        self.batch[tp] = offset + 1

    def delivered(self) -> None:
        """``put`` of the batch returned: its offsets may now be committed."""
        self.current.update(self.batch)
        self.batch.clear()

    def drop_batch(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """The batch (or its part in ``partitions``) will not be delivered by this task."""
        if partitions is None:
            self.batch.clear()
            return
        for tp in partitions:
            self.batch.pop(tp, None)

    def requested(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The delivered offsets of ``partitions``: what ``pre_commit`` is asked about."""
        return {tp: self.current[tp] for tp in partitions if tp in self.current}

    def committable(self, requested: Mapping[TopicPartition, int],
                    provided: Mapping[TopicPartition, int]
                    ) -> tuple[dict[TopicPartition, int], list[str]]:
        """What to commit of the offsets ``pre_commit`` answered (``provided``) for
        ``requested``, and a warning per offset ignored. Empty when nothing changed since the
        last commit."""
        ignored: list[str] = []
        result: dict[TopicPartition, int] = {}
        for tp, offset in provided.items():
            if tp not in requested:
                ignored.append(f"{tp[0]}-{tp[1]}: {offset} (partition not requested)")
            elif offset > requested[tp]:
                ignored.append(f"{tp[0]}-{tp[1]}: {offset} (not yet delivered, "
                               f"delivered up to {requested[tp]})")
            elif self.committed.get(tp) != offset:
                result[tp] = offset
        return result, ignored

    def commit_done(self, offsets: Mapping[TopicPartition, int]) -> None:
        self.committed.update(offsets)

    def rewind(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """``pre_commit`` failed: go back to the last committed offsets of ``partitions``;
        where to seek the consumer to."""
        seek: dict[TopicPartition, int] = {}
        for tp in partitions:
            if tp in self.committed:
                seek[tp] = self.committed[tp]
                self.current[tp] = self.committed[tp]
                self.batch.pop(tp, None)
        return seek

    def forget(self, partitions: Iterable[TopicPartition]) -> None:
        """The partitions were revoked or lost: another consumer takes them on."""
        for tp in partitions:
            self.batch.pop(tp, None)
            self.current.pop(tp, None)
            self.committed.pop(tp, None)
