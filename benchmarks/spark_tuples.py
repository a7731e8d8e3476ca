"""The strom source with a reader that yields one tuple per record (``format("strom_tuples")``).

Only for ``spark_source.py``: the reference the Arrow path is measured against. A module of its
own so that executors import it by name.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from strom.spark.options import ReadOptions, parse_read_options
from strom.spark.reader import StromBatchReader
from strom.spark.source import StromDataSource


def consumer_config(options: ReadOptions) -> dict[str, Any]:
    """The consumer of one range: assigned, no group membership, no commits."""
    return {**options.client, "group.id": f"spark-strom-tuples-{uuid.uuid4().hex[:12]}",
            "enable.auto.commit": False, "enable.auto.offset.store": False}  # fmt: skip


class TupleReader(StromBatchReader):
    def read(self, partition: Any) -> Iterator[tuple[Any, ...]]:  # type: ignore[override]
        if partition.end <= partition.start:
            return
        consumer = Consumer(consumer_config(self.options))
        consumer.assign([TopicPartition(partition.topic, partition.partition, partition.start)])
        seen = partition.start - 1
        utc = dt.UTC
        try:
            while seen < partition.end - 1:
                for m in consumer.consume(10_000, 1.0):
                    if m.error() or m.offset() >= partition.end:
                        continue
                    seen = m.offset()
                    kind, ms = m.timestamp()
                    yield (m.key(), m.value(), partition.topic, partition.partition, seen,
                           dt.datetime.fromtimestamp(ms / 1000, utc), kind - 1)  # fmt: skip
        finally:
            consumer.close()


class TupleSource(StromDataSource):
    @classmethod
    def name(cls) -> str:
        return "strom_tuples"

    def reader(self, schema: Any) -> Any:
        return TupleReader(parse_read_options(self.options, streaming=False))
