"""Timestamp lookups over a log's segments (ListOffsets by timestamp, and ``-3`` max timestamp).

Each segment keeps its largest timestamp and a sparse ``.timeindex`` (timestamp → offset,
see :mod:`strom.storage.time_index`). A lookup skips whole segments by their maximum, seeks
with the time index, then decodes the records of the candidate batches, because a batch
header only holds the batch's first and largest timestamps, not every record's.

Pure functions of the segments: :class:`strom.storage.log.Log` delegates to them.
"""

from __future__ import annotations

from collections.abc import Sequence

from strom.protocol import record_batch as rb
from strom.storage.segment import LogSegment


def offset_for_timestamp(
    segments: Sequence[LogSegment], log_start_offset: int, ts: int
) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record at or after ``log_start_offset`` whose
    timestamp is ``>= ts``, or None when there is none (Kafka's ListOffsets semantics)."""
    for seg in segments:
        if seg.max_timestamp < ts:
            continue
        start = seg.time_index.lookup(ts)
        found = seg.find_batch(max(log_start_offset, -1 if start is None else start + 1))
        if found is None:
            continue
        for pos, header in seg.iter_headers(found[0]):
            if header.max_timestamp < ts:
                continue
            for rec in rb.decode_records(seg.read_at(pos, header.size)):
                if rec.timestamp >= ts and rec.offset >= log_start_offset:
                    return rec.offset, rec.timestamp
    return None


def max_timestamp_offset(segments: Sequence[LogSegment]) -> tuple[int, int] | None:
    """(offset, timestamp) of the record with the largest timestamp, or None if the log holds
    no timestamped record. Ties go to the first such record of the batch holding it."""
    best = max(segments, key=lambda s: s.max_timestamp)
    if best.max_timestamp < 0:
        return None
    found = best.find_batch(best.offset_of_max_timestamp)
    if found is None:
        return None
    pos, header = found
    for rec in rb.decode_records(best.read_at(pos, header.size)):
        if rec.timestamp == best.max_timestamp:
            return rec.offset, rec.timestamp
    return header.last_offset, best.max_timestamp
