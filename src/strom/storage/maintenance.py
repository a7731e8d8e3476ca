"""Which logs periodic maintenance must visit: only those with work due, not all of them.

Log maintenance (``segment.ms`` rolls, retention, ``file.delete.delay.ms`` deletions,
``flush.ms``) used to walk every log on every tick (each second by default): 10,000 idle
partitions cost a full walk per second on the event loop. Instead each log is visited when

- it *changed* since its last visit (an append, a roll, DeleteRecords, a config change, a
  compaction swap: :meth:`MaintenanceSchedule.touch`, called by the log itself), because
  ``retention.bytes`` and new deadlines follow from changes; or
- its own next *deadline* has passed: :meth:`strom.storage.log.Log.next_maintenance` says
  when its next time-based work falls due (the active segment's ``segment.ms``, the oldest
  segment's ``retention.ms``, a pending deletion, a ``flush.ms`` flush), as monotonic seconds.

After a visit the log is rescheduled at its new deadline (or not at all). The heap keeps
stale entries (a log rescheduled or removed) and skips them when they come up. Producer-id
expiry stays a sweep of every log, every ``producer.id.expiration.check.interval.ms``
(10 minutes by default), as in Kafka.

Many logs can fall due at once (a producer writing its first batch to each of 10,000 new
partitions touches all of them; so does a broker-wide config change): :meth:`take_due` takes
at most ``limit`` keys and leaves the rest touched, so the caller can work in slices and let
the event loop serve requests in between (a visit costs some microseconds: 10,000 in one go
stalled every client for 40-90 ms).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class MaintenanceSchedule(Generic[K]):
    """Deadlines (monotonic seconds) and a changed-set over keys (topic, partition)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, K]] = []
        self._deadline: dict[K, float] = {}
        self._touched: set[K] = set()
        self._seq = itertools.count()

    def touch(self, key: K) -> None:
        """``key`` changed: visit it on the next tick."""
        self._touched.add(key)

    def schedule(self, key: K, due: float | None) -> None:
        """Visit ``key`` once ``due`` has passed (None: only when it changes again)."""
        if due is None:
            self._deadline.pop(key, None)
            return
        if self._deadline.get(key) == due:
            return
        self._deadline[key] = due
        heapq.heappush(self._heap, (due, next(self._seq), key))
        if len(self._heap) > 2 * len(self._deadline) + 64:  # mostly stale entries: rebuild
            self._heap = [(d, next(self._seq), k) for k, d in self._deadline.items()]
            heapq.heapify(self._heap)

    def remove(self, key: K) -> None:
        self._deadline.pop(key, None)
        self._touched.discard(key)

    def take_due(self, now: float, limit: int | None = None) -> list[K]:
        """The keys to visit now (each once): changed ones and those whose deadline passed,
        at most ``limit`` of them (the others stay touched: due at the next call). The caller
        reschedules each after its visit (an unchanged deadline costs nothing)."""
        keys = self._touched
        self._touched = set()
        heap = self._heap
        while heap and heap[0][0] <= now:
            due, _seq, key = heapq.heappop(heap)
            if self._deadline.get(key) == due:
                del self._deadline[key]
                keys.add(key)
        if limit is None or len(keys) <= limit:
            return list(keys)
        taken = list(itertools.islice(keys, limit))
        keys.difference_update(taken)
        self._touched = keys
        return taken

    def backlog(self) -> bool:
        """Whether keys are waiting to be taken at once (changed, or left by a ``limit``)."""
        return bool(self._touched)

    def __len__(self) -> int:
        """Keys waiting (changed or with a deadline)."""
        return len(self._touched | self._deadline.keys())
