"""Log compaction, step 1: what to clean (on the thread that owns the ``Log``).

A log is split at two offsets. Below ``first_dirty`` (from the cleaner checkpoint) lies the
*clean* section, already compacted; from it to ``first_uncleanable`` the *dirty* section; after
that what may not be cleaned yet: the active segment, segments newer than
``min.compaction.lag.ms``, anything above the high watermark and anything from the first
transaction whose outcome (commit/abort marker) is not in the log yet. Only whole inactive
segments are ever read or rewritten.

:func:`plan` is cheap (segment summaries only, no file reads): it picks the segments and the
dirty ratio ``dirty bytes / (clean + dirty bytes)``; a log is cleaned when the ratio reaches
``min.cleanable.dirty.ratio`` or its oldest dirty data is older than ``max.compaction.lag.ms``
(:meth:`CleanPlan.should_clean`). :func:`open_plan` duplicates the segments' descriptors so the
rewrite (:mod:`strom.storage.cleaner_rewrite`) can run in a worker thread.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from strom.storage.log import Log
from strom.storage.segment import LogSegment


@dataclass
class CleanPlan:
    """What one cleaning of a log will read (made by :func:`plan` on the log's thread)."""

    log: Log
    segments: list[LogSegment]  # every segment below first_uncleanable, oldest first
    ends: list[int]  # each segment's offset-range end (the next segment's base offset)
    dirty_start: int  # index into segments of the first dirty one
    first_dirty: int
    clean_bytes: int
    dirty_bytes: int
    forced: bool  # max.compaction.lag.ms passed
    producer_last: dict[int, int] = field(default_factory=dict)  # pid -> its last offset
    fds: list[int] = field(default_factory=list)  # duplicated descriptors, closed by clean()
    sizes: list[int] = field(default_factory=list)

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0

    @property
    def first_uncleanable(self) -> int:
        return self.ends[-1] if self.ends else self.first_dirty

    def should_clean(self) -> bool:
        if self.dirty_bytes <= 0:
            return False
        return self.forced or self.dirty_ratio > self.log.config.min_cleanable_dirty_ratio

    def release(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []


def plan(log: Log, first_dirty: int | None, now: int) -> CleanPlan | None:
    """The cleanable range of ``log`` from its segment summaries (no file reads).

    Returns None when the log is not compacted or nothing can be cleaned. Call
    :meth:`CleanPlan.should_clean` for the ratio / max-lag decision.
    """
    cfg = log.config
    if not cfg.compact:
        return None
    segs = log.segments
    start = log.log_start_offset
    if first_dirty is None or first_dirty < start or first_dirty > log.log_end_offset:
        first_dirty = start
    lag_limit = now - cfg.min_compaction_lag_ms
    chosen: list[LogSegment] = []
    ends: list[int] = []
    for seg, nxt in zip(segs[:-1], segs[1:], strict=False):  # never the active segment
        if nxt.base_offset > log.high_watermark:
            break
        if nxt.base_offset > first_dirty and seg.max_timestamp > lag_limit:
            break  # dirty and too young: it and everything after stay uncleaned
        chosen.append(seg)
        ends.append(nxt.base_offset)
    dirty_start = next((i for i, e in enumerate(ends) if e > first_dirty), len(chosen))
    if dirty_start >= len(chosen):
        return None
    clean_bytes = sum(s.size for s in chosen[:dirty_start])
    dirty_bytes = sum(s.size for s in chosen[dirty_start:])
    oldest = chosen[dirty_start].created_ms
    forced = cfg.max_compaction_lag_ms < 2**62 and now - oldest > cfg.max_compaction_lag_ms
    producer_last = {
        pid: e.batches[-1].last_offset for pid, e in log.producer_state.producers.items()
        if e.batches
    }  # fmt: skip
    return CleanPlan(log, chosen, ends, dirty_start, first_dirty, clean_bytes, dirty_bytes,
                     forced, producer_last)  # fmt: skip


def open_plan(p: CleanPlan) -> None:
    """Duplicate the segments' descriptors (on the log's thread) so that :func:`clean` can read
    them even if the log deletes those segments meanwhile."""
    p.fds = [s.dup_fd() for s in p.segments]
    p.sizes = [s.size for s in p.segments]
