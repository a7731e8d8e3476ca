"""Log compaction: keep the latest record per key of a ``cleanup.policy=compact`` log.

One cleaning, as in Kafka's ``LogCleaner``, in three steps:

1. :func:`plan` (:mod:`strom.storage.cleaner_plan`, on the thread that owns the ``Log``, segment
   summaries only) picks the segments below the first uncleanable offset and the dirty ratio,
   and decides whether the log needs cleaning.
2. :func:`clean` (:mod:`strom.storage.cleaner_rewrite`, a worker thread may run it) builds the
   offset map over the dirty section and writes ``.cleaned`` segments.
3. :func:`commit` (here, on the thread that owns the ``Log``) swaps each group in with
   :meth:`Log.replace_segments` (crash-safe, see :mod:`strom.storage.segment_swap`), unless the
   log changed meanwhile (segments deleted/truncated), in which case that output is dropped.
   Then the caller stores the new first-dirty offset in the checkpoint.

Checkpoint ``cleaner-offset-checkpoint`` in the data directory, Kafka's multi-partition
format (:mod:`strom.storage.log_dir`): ``0``, the number of entries, then ``topic partition
offset`` lines; offset = first dirty offset.

This module is the public face of compaction: the names of the two others are re-exported.
"""

from __future__ import annotations

from pathlib import Path

from strom.storage import log_dir
from strom.storage.cleaner_plan import CleanPlan, open_plan, plan
from strom.storage.cleaner_rewrite import (
    DEFAULT_MAX_MAP_ENTRIES,
    CleanAborted,
    CleanedGroup,
    CleanResult,
    clean,
)
from strom.storage.log import Log
from strom.storage.log_dir import TopicPartition
from strom.storage.segment import LogSegment

__all__ = [
    "CHECKPOINT_FILE", "DEFAULT_MAX_MAP_ENTRIES", "CleanAborted", "CleanPlan", "CleanResult",
    "CleanedGroup", "clean", "clean_log", "commit", "open_plan", "plan", "read_checkpoint",
    "write_checkpoint",
]  # fmt: skip

CHECKPOINT_FILE = "cleaner-offset-checkpoint"


# --- checkpoint ----------------------------------------------------------------------------


def read_checkpoint(data_dir: Path) -> dict[TopicPartition, int]:
    """The stored first-dirty offsets; empty when the file is missing or unreadable."""
    return log_dir.read_offsets(data_dir / CHECKPOINT_FILE)


def write_checkpoint(data_dir: Path, offsets: dict[TopicPartition, int]) -> None:
    """Atomic write: temp file, fsync, rename."""
    log_dir.write_offsets(data_dir / CHECKPOINT_FILE, offsets)


# --- swapping in ---------------------------------------------------------------------------


def commit(log: Log, result: CleanResult) -> bool:
    """Swap the cleaned groups in (call on the log's thread). Returns False (and deletes the
    output) when the log changed under the cleaner so that a group no longer matches."""
    ok = True
    for group in result.groups:
        current = log.segments
        if not ok or not _still_there(current, group.old):
            ok = False
            group.new.delete()
            continue
        log.replace_segments(group.old, group.new)
    return ok


def _still_there(current: list[LogSegment], old: list[LogSegment]) -> bool:
    if any(s.closed for s in old):
        return False
    try:
        idx = [next(i for i, c in enumerate(current) if c is s) for s in old]
    except StopIteration:
        return False
    return idx == list(range(idx[0], idx[0] + len(idx))) and idx[-1] < len(current) - 1


def clean_log(log: Log, first_dirty: int | None, now: int, *, force: bool = False,
              max_map_entries: int = DEFAULT_MAX_MAP_ENTRIES) -> CleanResult | None:  # fmt: skip
    """Plan, clean and commit in one go on the calling thread (tests, tools). None when the
    log did not need cleaning (``force`` ignores the dirty ratio)."""
    p = plan(log, first_dirty, now)
    if p is None or not (p.should_clean() or (force and p.dirty_bytes > 0)):
        return None
    result = clean(p, now, max_map_entries=max_map_entries)
    if not commit(log, result):
        return None
    return result
