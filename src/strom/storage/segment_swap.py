"""Crash-safe replacement of segments by a compacted one (the log cleaner's commit path).

Protocol, driven by :meth:`strom.storage.log.Log.replace_segments`:

1. the cleaned segment is written as ``<base>.log.cleaned`` (+ ``.index.cleaned``,
   ``.timeindex.cleaned``; :func:`create_cleaned_segment`) and fsynced (by the cleaner's
   worker thread, so the swap on the log's thread does not wait on the disk);
2. its files are renamed to ``.swap``, the ``.log`` last: ``<base>.log.swap`` existing is the
   commit point;
3. the replaced segments are deleted (or renamed ``.deleted`` for a delayed delete);
4. the ``.swap`` files are renamed to their final names.

At open (:func:`complete_swaps`), ``.cleaned`` (and stray ``.tmp`` / ``.deleted``) files are
removed: the swap had not been committed, the old segments are intact. A ``.log.swap`` means
it had: every old segment whose base offset falls inside the swapped segment's offset range is
deleted and the swap is completed. Nothing acknowledged is lost at any crash point.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from strom.storage.errors import StorageError
from strom.storage.log_config import LogConfig
from strom.storage.segment import LogSegment, segment_path

logger = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
_STRAY_SUFFIXES = (CLEANED_SUFFIX, ".tmp", DELETED_SUFFIX)
_EXTS = (".log", ".index", ".timeindex", ".txnindex")


def base_of(name: str) -> int | None:
    """The base offset in a segment file name (``<base:020d>.<ext>[suffix]``), or None."""
    head = name.split(".", 1)[0]
    return int(head) if head.isdigit() and len(head) == 20 else None


def segment_bases(dir: Path) -> list[int]:
    """Base offsets of the ``.log`` files in ``dir``, ascending."""
    return sorted(b for p in dir.glob("*.log") if (b := base_of(p.name)) is not None)


def create_cleaned_segment(dir: Path, base_offset: int, config: LogConfig,
                           now_ms: int) -> LogSegment:  # fmt: skip
    """An empty ``.cleaned`` segment for the compactor to fill with ``LogSegment.append``."""
    return LogSegment.create(dir, base_offset, config, now_ms, CLEANED_SUFFIX)


def replace_segments(
    segments: Sequence[LogSegment],
    old: Sequence[LogSegment],
    new: LogSegment,
    delete: Callable[[LogSegment], None],
) -> list[LogSegment]:
    """Swap contiguous inactive ``old`` (members of ``segments``) for the cleaned ``new``,
    following the module's protocol; ``delete`` disposes of each old segment. Returns the new
    segment list. Raises :class:`StorageError` (before touching a file) on a bad request."""
    idx = [segments.index(s) for s in old]
    if not idx or idx != list(range(idx[0], idx[0] + len(idx))):
        raise StorageError("segments to replace must be contiguous segments of this log")
    if idx[-1] == len(segments) - 1:
        raise StorageError("the active segment cannot be replaced")
    if new.suffix != CLEANED_SUFFIX or new.base_offset != old[0].base_offset:
        raise StorageError("replacement must be a cleaned segment with the first base")
    for seg in old:  # the aborted transactions of the replaced range stay known
        for txn in seg.txn_index.entries:
            new.txn_index.append(txn)
    new.on_inactive()
    if new.unflushed:  # the cleaner's worker normally fsynced it already
        new.flush()
    new.rename_suffix(SWAP_SUFFIX)
    for seg in old:
        delete(seg)
    new.rename_suffix("")
    return [*segments[: idx[0]], new, *segments[idx[-1] + 1 :]]


def complete_swaps(dir: Path, config: LogConfig, now_ms: int) -> None:
    """Remove uncommitted cleaner output and stray files; finish committed swaps."""
    for path in dir.iterdir():
        if path.name.endswith(_STRAY_SUFFIXES):
            path.unlink(missing_ok=True)
    swaps = sorted(b for p in dir.glob(f"*.log{SWAP_SUFFIX}") if (b := base_of(p.name)) is not None)
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
