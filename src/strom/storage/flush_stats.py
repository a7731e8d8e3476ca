"""How long log flushes take: Kafka's ``LogFlushStats.LogFlushRateAndTimeMs``, as plain counters.

Storage knows nothing of Prometheus (layers point one way): each segment fsync
(:meth:`strom.storage.segment.LogSegment.flush`, on the flusher thread or at shutdown) adds its
duration here, and the broker's metrics collector reads the counters when scraped. A flush
costs milliseconds, so a lock per record is nothing; readers take a consistent copy.
"""

from __future__ import annotations

import bisect
import threading

#: Upper bounds of the histogram buckets, in milliseconds (the last bucket is +Inf).
BUCKETS_MS: tuple[float, ...] = (0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000)


class FlushStats:
    """Count, total and a cumulative-ready histogram (per-bucket counts) of flush times."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0
        self.total_ms = 0.0
        self.buckets = [0] * (len(BUCKETS_MS) + 1)

    def record(self, seconds: float) -> None:
        ms = seconds * 1000.0
        with self._lock:
            self.count += 1
            self.total_ms += ms
            self.buckets[bisect.bisect_left(BUCKETS_MS, ms)] += 1

    def snapshot(self) -> tuple[int, float, list[int]]:
        """(count, total milliseconds, per-bucket counts), taken together."""
        with self._lock:
            return self.count, self.total_ms, list(self.buckets)


#: The process's log flush statistics (one data directory per broker process).
FLUSH_STATS = FlushStats()
