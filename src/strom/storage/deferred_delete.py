"""Deferred deletion of a log's segment files (Kafka's ``file.delete.delay.ms``).

Segments removed by retention, DeleteRecords, compaction swaps or truncation are not unlinked
at once: their three files are renamed ``<base>.log.deleted`` (``.index.deleted``,
``.timeindex.deleted``; the ``.log`` first, so a crash mid-rename never brings back a segment
whose log was renamed) and their fds stay open. After ``file.delete.delay.ms`` (the topic's
value when the segment was removed) :meth:`DeferredDeleter.delete_due`, called from the log's
periodic maintenance, closes and unlinks them. Anything still reading by path or by fd in the
meantime keeps working.

Nothing is left behind: closing the log deletes every pending segment, and at open
:func:`strom.storage.segment_swap.complete_swaps` removes any ``*.deleted`` file a crash left.
A delay of 0 deletes at once.
"""

from __future__ import annotations

import logging

from strom.clock import Clock
from strom.storage.segment import LogSegment
from strom.storage.segment_swap import DELETED_SUFFIX

logger = logging.getLogger(__name__)


class DeferredDeleter:
    """The segments of one log waiting for their delete delay to pass."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._pending: list[tuple[float, LogSegment]] = []  # (due, monotonic seconds; segment)

    def __len__(self) -> int:
        return len(self._pending)

    def schedule(self, seg: LogSegment, delay_ms: int) -> None:
        """Rename ``seg``'s files to ``.deleted`` and delete them after ``delay_ms``."""
        if delay_ms <= 0:
            seg.delete()
            return
        for entry in [e for e in self._pending if e[1].base_offset == seg.base_offset]:
            self._pending.remove(entry)  # same file names: the older one goes now
            entry[1].delete()
        seg.rename_suffix(DELETED_SUFFIX, log_first=True)
        self._pending.append((self.clock.monotonic() + delay_ms / 1000, seg))

    def next_due(self) -> float | None:
        """When the next pending segment is due (monotonic seconds), or None."""
        if not self._pending:  # nearly always: maintenance asks every log it visits
            return None
        return min((e[0] for e in self._pending), default=None)

    def delete_due(self) -> int:
        """Delete the segments whose delay has passed; returns how many."""
        if not self._pending:
            return 0
        now = self.clock.monotonic()
        due = [e for e in self._pending if e[0] <= now]
        for entry in due:
            self._pending.remove(entry)
            logger.info("deleting %s", entry[1].path)
            entry[1].delete()
        return len(due)

    def delete_all(self) -> None:
        """Delete every pending segment now (the log is closing)."""
        pending, self._pending = self._pending, []
        for _due, seg in pending:
            seg.delete()
