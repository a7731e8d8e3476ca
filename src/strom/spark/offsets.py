"""Driver-side offset work: which partitions a subscription covers and where they begin/end.

An offset of the stream is Spark's Kafka source JSON, ``{"topic": {"0": 23, "1": 7}}``: for
each partition the next offset to read. :class:`PartitionOffsets` is its in-memory form.
:class:`OffsetResolver` asks the broker (one ListOffsets per question, through confluent-kafka's
AdminClient) for earliest / latest (the last stable offset under read_committed) / by-timestamp.
:func:`cap_offsets` is the admission control of ``maxOffsetsPerTrigger``: like Spark, it splits
the allowed count over the partitions in proportion to what each has waiting.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from strom.spark.options import EARLIEST, LATEST, OptionError, ReadOptions, Subscription

log = logging.getLogger(__name__)

TP = tuple[str, int]
PartitionOffsets = dict[TP, int]

# A key of the offset JSON that cannot be a topic name (topics are [a-zA-Z0-9._-]): the
# resolved starting offsets, carried in the end offset of a query's first batch.
INITIAL_KEY = "$initial"


def to_json(offsets: Mapping[TP, int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def from_json(value: Mapping[str, Any]) -> PartitionOffsets:
    return {
        (topic, int(p)): int(o)
        for topic, parts in value.items()
        if topic != INITIAL_KEY
        for p, o in parts.items()
    }


class DataLossError(RuntimeError):
    """Offsets the query needs are gone (retention, deleted topic) and failOnDataLoss=true."""


def data_loss(fail: bool, message: str) -> None:
    """Spark's reportDataLoss: raise when failOnDataLoss, else log and carry on."""
    text = (
        f"{message}. Some data may have been lost because it is no longer available in the "
        "topic (retention, or the topic was deleted). Set failOnDataLoss=false to skip it."
    )
    if fail:
        raise DataLossError(text)
    log.warning("%s", text)


class OffsetResolver:
    """Answers partition and offset questions for one reader (driver side)."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        # isolation.level is a consumer setting: the admin client takes it per request instead
        admin: dict[str, Any] = {k: v for k, v in options.client.items() if k != "isolation.level"}
        self._admin = AdminClient(admin)
        committed = options.client.get("isolation.level") == "read_committed"
        self._isolation = (
            IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
        )
        self._timeout = max(options.poll_timeout_ms / 1000.0, 10.0)

    def partitions(self) -> list[TP]:
        """The partitions the subscription covers now (sorted), from fresh metadata."""
        sub: Subscription = self.options.subscription
        try:
            metadata = self._admin.list_topics(timeout=self._timeout)
        except KafkaException as exc:
            raise RuntimeError(f"cannot read metadata from {self.options.bootstrap}: {exc}") from exc
        found: list[TP] = []
        for name, topic in metadata.topics.items():
            if topic.error is not None or not sub.matches(name):
                continue
            if sub.pattern is not None and name.startswith("__"):
                continue  # internal topics only when named
            wanted = sub.assign.get(name) if sub.assign is not None else None
            for partition in topic.partitions:
                if wanted is None or partition in wanted:
                    found.append((name, partition))
        return sorted(found)

    def _list(self, tps: Iterable[TP], spec: OffsetSpec) -> PartitionOffsets:
        request = {TopicPartition(t, p): spec for t, p in tps}
        if not request:
            return {}
        futures = self._admin.list_offsets(
            request, isolation_level=self._isolation, request_timeout=self._timeout
        )
        result: PartitionOffsets = {}
        for tp, future in futures.items():
            try:
                info = future.result()
            except KafkaException as exc:
                raise RuntimeError(
                    f"cannot list offsets of {tp.topic}-{tp.partition}: {exc.args[0]}"
                ) from exc
            result[(tp.topic, tp.partition)] = int(info.offset)
        return result

    def earliest(self, tps: Iterable[TP]) -> PartitionOffsets:
        return self._list(tps, OffsetSpec.earliest())

    def latest(self, tps: Iterable[TP]) -> PartitionOffsets:
        return self._list(tps, OffsetSpec.latest())

    def for_timestamp(self, tps: Iterable[TP], timestamp_ms: int) -> PartitionOffsets:
        """First offset at or after the timestamp; where there is none, an error or the latest
        offset per startingOffsetsByTimestampStrategy (Spark's rule)."""
        tps = list(tps)
        found = self._list(tps, OffsetSpec.for_timestamp(timestamp_ms))
        missing = sorted(tp for tp, offset in found.items() if offset < 0)
        if missing and self.options.timestamp_strategy == "error":
            raise RuntimeError(
                f"no offset at or after timestamp {timestamp_ms} in {missing}; set "
                "startingOffsetsByTimestampStrategy=latest to start those at the latest offset"
            )
        if missing:
            found.update(self.latest(missing))
        return found

    def resolve_start(self, tps: list[TP]) -> PartitionOffsets:
        """Concrete starting offsets for ``tps`` per startingOffsets/startingTimestamp."""
        spec = self.options.starting
        if spec.kind == "earliest":
            return self.earliest(tps)
        if spec.kind == "latest":
            return self.latest(tps)
        if spec.kind == "timestamp":
            assert spec.timestamp_ms is not None
            return self.for_timestamp(tps, spec.timestamp_ms)
        return self._resolve_json(tps, spec.per_partition, default=EARLIEST)

    def resolve_end(self, tps: list[TP]) -> PartitionOffsets:
        spec = self.options.ending
        if spec.kind == "latest":
            return self.latest(tps)
        return self._resolve_json(tps, spec.per_partition, default=LATEST)

    def _resolve_json(
        self, tps: list[TP], table: Mapping[str, Mapping[int, int]], default: int
    ) -> PartitionOffsets:
        wanted = {tp: table.get(tp[0], {}).get(tp[1], default) for tp in tps}
        unknown = {(t, p) for t, parts in table.items() for p in parts} - set(tps)
        if unknown:
            raise OptionError(f"offsets given for partitions that do not exist: {sorted(unknown)}")
        earliest = self.earliest(tp for tp, o in wanted.items() if o == EARLIEST)
        latest = self.latest(tp for tp, o in wanted.items() if o == LATEST)
        return {tp: earliest.get(tp, latest.get(tp, o)) for tp, o in wanted.items()}


def cap_offsets(start: Mapping[TP, int], latest: Mapping[TP, int], limit: int) -> PartitionOffsets:
    """End offsets reading at most ``limit`` records past ``start``, shared out in proportion.

    Each partition gets ``limit * waiting / total_waiting`` (rounded down, at least one record
    while it has any and the limit allows), never past its latest offset.
    """
    waiting = {tp: max(latest[tp] - start.get(tp, latest[tp]), 0) for tp in latest}
    total = sum(waiting.values())
    if total <= limit:
        return dict(latest)
    end: PartitionOffsets = {}
    budget = limit
    for tp in sorted(latest):
        share = (limit * waiting[tp]) // total
        if share == 0 and waiting[tp] and budget > 0:
            share = 1
        share = min(share, budget, waiting[tp])
        budget -= share
        end[tp] = start.get(tp, latest[tp]) + share
    return end
