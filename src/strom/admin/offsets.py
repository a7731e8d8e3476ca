"""Partition offsets: log start / end / by time (ListOffsets), and positions to move to.

A :class:`Position` names a place in every partition the same way ``strom consume -o`` and
``strom topic trim -o`` do: the log start, the log end, an absolute offset, ``number``
records before the end (``tail``) or the first record at or after a time (``time``, epoch
milliseconds). :func:`resolve` turns one into an offset of each partition, clamped to the log.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from confluent_kafka import TopicPartition
from confluent_kafka.admin import OffsetSpec

from strom.admin.session import Session

#: (topic, partition): the key of every per-partition answer of the admin layer
Key = tuple[str, int]
PositionKind = Literal["start", "end", "absolute", "tail", "time"]


class Position(NamedTuple):
    """Where in each partition (see the module docstring); ``number`` is the offset, the
    count from the end, or the epoch milliseconds."""

    kind: PositionKind
    number: int = 0


def end_offsets(session: Session, partitions: list[Key], spec: OffsetSpec | None = None
                ) -> dict[Key, int]:  # fmt: skip
    """(topic, partition) -> log-end offset (or the offset for ``spec``: earliest, a time)."""
    if not partitions:
        return {}
    spec = spec or OffsetSpec.latest()
    futures = session.admin.list_offsets(
        {TopicPartition(t, p): spec for t, p in partitions}, request_timeout=session.timeout
    )
    return {
        (tp.topic, tp.partition): session.wait(
            fut, f"cannot list offsets of {tp.topic}-{tp.partition}"
        ).offset
        for tp, fut in futures.items()
    }


def log_starts(session: Session, partitions: list[Key]) -> dict[Key, int]:
    """(topic, partition) -> log start offset."""
    return end_offsets(session, partitions, OffsetSpec.earliest())


def at_time(session: Session, partitions: list[Key], epoch_ms: int) -> dict[Key, int]:
    """(topic, partition) -> the first offset at or after ``epoch_ms`` (-1: none that late)."""
    return end_offsets(session, partitions, OffsetSpec.for_timestamp(epoch_ms))


def resolve(session: Session, partitions: list[Key], position: Position
            ) -> dict[Key, tuple[int, int, int]]:  # fmt: skip
    """(topic, partition) -> (log start, log end, the offset ``position`` names, clamped to
    [start, end]; a time after the last record is the end)."""
    start = log_starts(session, partitions)
    end = end_offsets(session, partitions)
    at = at_time(session, partitions, position.number) if position.kind == "time" else {}
    result = {}
    for key in partitions:
        if position.kind == "start":
            target = start[key]
        elif position.kind == "end":
            target = end[key]
        elif position.kind == "absolute":
            target = position.number
        elif position.kind == "tail":
            target = end[key] - position.number
        else:
            target = at[key] if at[key] >= 0 else end[key]
        result[key] = (start[key], end[key], max(start[key], min(target, end[key])))
    return result
