"""Retention policy: how many of a log's oldest segments ``retention.ms`` / ``retention.bytes``
allow deleting (``cleanup.policy`` must contain ``delete``; the caller checks).

As Kafka: only whole inactive segments wholly below the high watermark are candidates, oldest
first, and deletion stops at the first segment that must stay. A segment is past
``retention.ms`` when its largest timestamp is older than that; ``retention.bytes`` deletes
oldest segments while the log stays at or above the limit without them. ``-1`` disables
either rule.
"""

from __future__ import annotations

from collections.abc import Sequence

from strom.storage.log_config import LogConfig
from strom.storage.segment import LogSegment


def segments_past_retention(
    segments: Sequence[LogSegment], high_watermark: int, config: LogConfig, now_ms: int
) -> int:
    """The number of leading ``segments`` (oldest first, the last one active) to delete."""
    candidates = [s for s in segments[:-1] if s.next_offset <= high_watermark]
    doomed = 0
    if config.retention_ms >= 0:
        while doomed < len(candidates) and (
            now_ms - candidates[doomed].max_timestamp > config.retention_ms
        ):
            doomed += 1
    if config.retention_bytes >= 0:
        excess = sum(s.size for s in segments) - config.retention_bytes
        for seg in segments[:doomed]:
            excess -= seg.size
        while doomed < len(candidates) and excess - candidates[doomed].size >= 0:
            excess -= candidates[doomed].size
            doomed += 1
    return doomed
