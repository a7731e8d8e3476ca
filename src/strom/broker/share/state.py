"""A share-partition's persisted state, and how a delta combines into it.

What the share coordinator keeps for one (group, topic id, partition) — Kafka's
``ShareGroupOffset`` — and what WriteShareGroupState / ReadShareGroupState carry:

- ``start_offset``: the share-partition start offset (SPSO). Every offset below it is done
  (acknowledged or archived); -1 means "initialized, no offset chosen yet" (the partition's
  leader applies ``share.auto.offset.reset`` when it first loads the state);
- ``batches``: the delivery state of offsets at or above it, as sorted, non-overlapping
  ranges ``(first, last, state, deliveries)`` with state 0 Available, 2 Acknowledged, 4 Archived
  (an acquired record is persisted as Available with the deliveries it has had). An offset
  above the start that no batch covers was never delivered;
- ``state_epoch``: bumped when the state is reset (AlterShareGroupOffsets); a write at an
  older state epoch is refused;
- ``leader_epoch``: of the partition leader that last read or wrote the state; a write or read
  from an older leader epoch is refused (a deposed leader's late write);
- ``delivery_complete_count``: how many offsets in the in-flight window are done (KIP-1226's
  lag), -1 when unknown.

:func:`combine` is Kafka's ``PersisterStateBatchCombiner``: the newer batches win where they
overlap the older ones, the result is cut below the start offset and adjacent ranges with the
same state and count are merged. Pure functions, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

AVAILABLE = 0
ACKNOWLEDGED = 2
ARCHIVED = 4
PERSISTED_STATES = (AVAILABLE, ACKNOWLEDGED, ARCHIVED)


class Batch(NamedTuple):
    first: int
    last: int
    state: int
    deliveries: int


@dataclass(slots=True)
class PartitionState:
    state_epoch: int
    leader_epoch: int
    start_offset: int
    batches: tuple[Batch, ...] = ()
    delivery_complete_count: int = -1
    snapshot_epoch: int = 0
    create_timestamp: int = -1
    write_timestamp: int = -1
    #: updates replayed or written since the last snapshot (when to write the next snapshot)
    updates_since_snapshot: int = field(default=0, compare=False)
    #: the log offset of this key's latest snapshot (what pruning must keep)
    snapshot_offset: int = field(default=-1, compare=False)


def normalize(batches: Iterable[Batch]) -> list[Batch]:
    """Sorted, with adjacent ranges of the same state and count merged (input must not
    overlap)."""
    out: list[Batch] = []
    for b in sorted(batches):
        if b.last < b.first:
            continue
        if out:
            prev = out[-1]
            if prev.last + 1 == b.first and (prev.state, prev.deliveries) == (b.state, b.deliveries):
                out[-1] = Batch(prev.first, b.last, prev.state, prev.deliveries)
                continue
        out.append(b)
    return out


def _subtract(b: Batch, cuts: Sequence[Batch]) -> list[Batch]:
    """The parts of ``b`` that no range of ``cuts`` (sorted, non-overlapping) covers."""
    pieces = []
    start = b.first
    for c in cuts:
        if c.last < start:
            continue
        if c.first > b.last:
            break
        if c.first > start:
            pieces.append(Batch(start, c.first - 1, b.state, b.deliveries))
        start = max(start, c.last + 1)
        if start > b.last:
            return pieces
    if start <= b.last:
        pieces.append(Batch(start, b.last, b.state, b.deliveries))
    return pieces


def combine(current: Sequence[Batch], update: Sequence[Batch], start_offset: int) -> list[Batch]:
    """``update`` laid over ``current`` (update wins where they overlap), cut below
    ``start_offset`` (-1: no cut), merged."""
    newer = normalize(update)
    kept: list[Batch] = []
    for b in current:
        kept.extend(_subtract(b, newer))
    merged = normalize([*kept, *newer])
    if start_offset < 0:
        return merged
    out = []
    for b in merged:
        if b.last < start_offset:
            continue
        if b.first < start_offset:
            b = Batch(start_offset, b.last, b.state, b.deliveries)
        out.append(b)
    return out
