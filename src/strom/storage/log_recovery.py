"""Opening a partition directory: finish interrupted segment swaps, load segments, recover.

Crash-safe segment replacement (used by :meth:`Log.replace_segments`, the compactor's path):

1. the cleaned segment is written as ``<base>.log.cleaned`` (+ ``.index.cleaned``,
   ``.timeindex.cleaned``) and fsynced;
2. its files are renamed to ``.swap``, the ``.log`` last: ``<base>.log.swap`` existing is the
   commit point;
3. the replaced segments are deleted;
4. the ``.swap`` files are renamed to their final names.

At open, ``.cleaned`` (and stray ``.tmp`` / ``.deleted``) files are removed: the swap had not
been committed, the old segments are intact. A ``.log.swap`` means it had: every old segment
whose base offset falls inside the swapped segment's offset range is deleted and the swap is
completed. Nothing acknowledged is lost at any crash point.
"""

from __future__ import annotations

import logging
from pathlib import Path

from strom.storage.log_config import LogConfig
from strom.storage.segment import LogSegment, segment_path

logger = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
_STRAY_SUFFIXES = (CLEANED_SUFFIX, ".tmp", ".deleted")
_EXTS = (".log", ".index", ".timeindex")


def _base_of(name: str) -> int | None:
    head = name.split(".", 1)[0]
    return int(head) if head.isdigit() and len(head) == 20 else None


def complete_swaps(dir: Path, config: LogConfig, now_ms: int) -> None:
    """Remove uncommitted cleaner output and finish committed swaps (see module doc)."""
    for path in dir.iterdir():
        if path.name.endswith(_STRAY_SUFFIXES):
            path.unlink(missing_ok=True)
    swaps = sorted(
        b for p in dir.glob(f"*.log{SWAP_SUFFIX}") if (b := _base_of(p.name)) is not None
    )
    for base in swaps:
        seg = LogSegment(dir, base, config, now_ms, SWAP_SUFFIX)
        seg.recover()
        for old in segment_bases(dir):
            if base <= old < max(seg.next_offset, base + 1):
                for ext in _EXTS:
                    segment_path(dir, old, ext).unlink(missing_ok=True)
        seg.rename_suffix("")
        seg.close()
        logger.info("completed interrupted segment swap %s", seg.path)
    for path in dir.glob(f"*{SWAP_SUFFIX}"):  # index .swap files whose .log was not renamed
        path.unlink(missing_ok=True)


def segment_bases(dir: Path) -> list[int]:
    """Base offsets of the ``.log`` files in ``dir``, ascending."""
    return sorted(b for p in dir.glob("*.log") if (b := _base_of(p.name)) is not None)


def load_segments(
    dir: Path, config: LogConfig, now_ms: int, clean: bool, recovery_point: int
) -> list[LogSegment]:
    """Open every segment; when not ``clean``, recover those from the recovery point on.

    Recovery truncates a segment at its first invalid batch and then deletes every later
    segment (their offsets would no longer follow on).
    """
    segments = [LogSegment.open(dir, base, config, now_ms) for base in segment_bases(dir)]
    if clean or not segments:
        return segments
    start = 0
    for i, seg in enumerate(segments):
        if seg.base_offset <= recovery_point:
            start = i
    for i in range(start, len(segments)):
        truncated = segments[i].recover()
        if truncated:
            logger.warning(
                "truncated %d invalid bytes from %s at offset %d",
                truncated,
                segments[i].path,
                segments[i].next_offset,
            )
            for later in segments[i + 1 :]:
                logger.warning("deleting segment %s after a corrupt one", later.path)
                later.delete()
            del segments[i + 1 :]
            break
    return segments
