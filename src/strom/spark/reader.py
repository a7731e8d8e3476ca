"""Batch and streaming readers of the ``strom`` data source.

Both plan one :class:`RangePartition` per topic-partition with records to read; executors read
them with :func:`strom.spark.fetcher.read_range`. The reader objects are pickled to executors,
so the broker connection (:class:`OffsetResolver`) is made lazily and never pickled.

Streaming offsets are Spark's Kafka JSON (``{"t": {"0": 23}}``, next offset per partition).
Resuming exactly: Spark's checkpoint holds every batch's end offset, but on a restart before the
first batch committed Spark asks ``initialOffset()`` again for that batch's start. Resolving
earliest/latest/timestamp a second time would replay a different range (data loss with
"latest"). So the end offset of the batch that starts at the initial offsets carries them too,
under the key ``$initial`` (never a topic name). Spark hands that end offset back to
``partitions(start, end)`` when it replays the batch, and the range starts at the recorded
offsets whatever ``start`` says (and ``initialOffset()`` answers with them from then on). The
checkpoint stays the only source of truth; nothing is stored elsewhere. (A query stopped before
its first batch was planned has nothing recorded: it resolves its starting offsets again.)

New partitions (in ``end`` but not ``start``) are read from offset 0, as Spark does: a log that
no longer starts at 0 is data loss, reported per failOnDataLoss by the executor.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from strom.spark.fetcher import RangePartition, read_range
from strom.spark.offsets import (
    INITIAL_KEY,
    OffsetResolver,
    PartitionOffsets,
    cap_offsets,
    data_loss,
    from_json,
    to_json,
)
from strom.spark.options import ReadOptions
from strom.spark.schema import arrow_schema

log = logging.getLogger(__name__)


def plan_ranges(start: PartitionOffsets, end: PartitionOffsets) -> list[InputPartition]:
    """One RangePartition per partition with ``end > start`` (new partitions start at 0)."""
    ranges: list[InputPartition] = []
    for (topic, partition), stop in sorted(end.items()):
        first = start.get((topic, partition), 0)
        if stop > first:
            ranges.append(RangePartition(topic, partition, first, stop))
    return ranges


class _ReaderBase:
    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._arrow = arrow_schema(options.include_headers)
        self._resolver_: OffsetResolver | None = None

    @property
    def _resolver(self) -> OffsetResolver:
        if self._resolver_ is None:
            self._resolver_ = OffsetResolver(self.options)
        return self._resolver_

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_resolver_"] = None  # a librdkafka handle: never pickled to executors
        return state

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        return read_range(self.options, partition, self._arrow)


class StromBatchReader(_ReaderBase, DataSourceReader):
    """``spark.read.format("strom")``: startingOffsets (default earliest) to endingOffsets."""

    def partitions(self) -> Sequence[InputPartition]:
        tps = self._resolver.partitions()
        start = self._resolver.resolve_start(tps)
        end = self._resolver.resolve_end(tps)
        for tp in tps:
            if end[tp] < start[tp]:
                raise ValueError(
                    f"endingOffsets {end[tp]} of {tp[0]}-{tp[1]} is before its starting "
                    f"offset {start[tp]}"
                )
        ranges = plan_ranges(start, end)
        # Spark wants at least one partition: an empty range reads nothing.
        return ranges or [RangePartition("", 0, 0, 0)]


class StromStreamReader(_ReaderBase, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("strom")`` with admission control and Trigger.AvailableNow."""

    def __init__(self, options: ReadOptions) -> None:
        super().__init__(options)
        self._initial: PartitionOffsets | None = None
        self._recovered_initial: PartitionOffsets | None = None
        self._target: PartitionOffsets | None = None
        self._latest: PartitionOffsets | None = None
        self._last_admit = time.monotonic()

    # -- offsets -------------------------------------------------------------------------
    def initialOffset(self) -> dict:
        if self._recovered_initial is not None:
            self._initial = dict(self._recovered_initial)
        elif self._initial is None:
            tps = self._resolver.partitions()
            self._initial = self._resolver.resolve_start(tps)
            log.info("strom source resolved its starting offsets to %s", to_json(self._initial))
        return to_json(self._initial)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._resolver.latest(self._resolver.partitions())
        log.info("strom source reads up to %s (Trigger.AvailableNow)", to_json(self._target))

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = from_json(start)
        tps = self._resolver.partitions()
        latest = self._resolver.latest(tps)
        for tp in sorted(set(begin) - set(latest)):
            data_loss(self.options.fail_on_data_loss, f"partition {tp[0]}-{tp[1]} is gone")
        self._latest = dict(latest)
        if self._target is not None:
            # AvailableNow: never past the target; partitions born since wait for the next run.
            latest = {tp: min(o, self._target[tp]) for tp, o in latest.items() if tp in self._target}
        for tp, offset in list(latest.items()):
            if tp in begin and offset < begin[tp]:
                data_loss(
                    self.options.fail_on_data_loss,
                    f"{tp[0]}-{tp[1]} latest offset {offset} is before {begin[tp]} already read",
                )
                latest[tp] = begin[tp]
        end = self._admit(begin, latest, limit)
        for tp in begin:  # a vanished partition keeps its offset (nothing more to read)
            end.setdefault(tp, begin[tp])
        if end == begin:
            return start  # the very same JSON: Spark sees no new data and runs no batch
        result: dict[str, Any] = to_json(end)
        if self._initial is not None and begin == self._initial and end != begin:
            result[INITIAL_KEY] = to_json(self._initial)
        return result

    def _admit(
        self, begin: PartitionOffsets, latest: PartitionOffsets, limit: ReadLimit
    ) -> PartitionOffsets:
        starts = {tp: begin.get(tp, 0) for tp in latest}
        waiting = sum(max(latest[tp] - starts[tp], 0) for tp in latest)
        if isinstance(limit, ReadAllAvailable):
            end = dict(latest)
        else:
            minimum = self.options.min_offsets_per_trigger
            if isinstance(limit, ReadMinRows):
                minimum = limit.min_rows
            if minimum is not None and 0 < waiting < minimum:
                waited_ms = (time.monotonic() - self._last_admit) * 1000
                if waited_ms < self.options.max_trigger_delay_ms:
                    return {tp: starts[tp] for tp in latest if tp in begin}
            if isinstance(limit, ReadMaxRows):
                end = cap_offsets(starts, latest, limit.max_rows)
            else:
                end = dict(latest)
        if waiting:
            self._last_admit = time.monotonic()
        # New partitions with nothing to read yet still enter the offset, at 0.
        return {tp: max(o, starts[tp]) for tp, o in end.items()}

    def reportLatestOffset(self) -> dict | None:
        return to_json(self._latest) if self._latest is not None else None

    # -- planning ------------------------------------------------------------------------
    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        if start == end:
            return []  # also Spark's setLatestSeenOffset call on a restart
        begin = from_json(start)
        recorded = end.get(INITIAL_KEY)
        if recorded is not None:
            # This is the query's first batch: its start is what the checkpoint recorded, not
            # what initialOffset() may have resolved again after a restart.
            self._recovered_initial = from_json(recorded)
            if begin != self._recovered_initial:
                log.info("strom source: first batch replays from recorded offsets %s", recorded)
            begin = self._recovered_initial
        return plan_ranges(begin, from_json(end))

    def commit(self, end: dict) -> None:
        """Nothing to do: offsets live in Spark's checkpoint, not in a consumer group."""

    def stop(self) -> None:
        self._resolver_ = None
