"""Opening a partition directory: load its segments and recover those after the recovery point.

:func:`load_log_dir` (what :meth:`strom.storage.log.Log.open` calls) finishes interrupted
compactor swaps and removes stray files (:func:`strom.storage.segment_swap.complete_swaps`),
reads the checkpoints and the clean-shutdown marker, then :func:`load_segments` opens every
``<base>.log`` and, after an unclean shutdown, re-validates the segments from the one holding
the recovery point on. After a clean shutdown nothing is re-validated; after a crash only the
segments from the one holding the recovery point on are, and nothing is written back: the
rebuilt indexes stay in memory until the next flush, and the recovery point stays where it was
(as Kafka's ``LogLoader``), so a second crash re-validates the same data again.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from strom.storage import checkpoint as ckpt
from strom.storage.log_config import LogConfig
from strom.storage.segment import LogSegment
from strom.storage.segment_swap import (
    _STRAY_SUFFIXES,
    SWAP_SUFFIX,
    base_of,
    complete_swaps,
    segment_bases,
)

_REPAIR_SUFFIXES = (*_STRAY_SUFFIXES, SWAP_SUFFIX)

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LoadedLog:
    segments: list[LogSegment]  # at least one
    log_start_offset: int
    clean: bool  # the last shutdown was clean (nothing was re-validated)
    recovery_point: int  # below it everything is known to be fsynced
    recovered: int = 0  # segments re-validated
    has_snapshots: bool = True  # producer-state snapshot files are in the directory


def load_log_dir(dir: Path, config: LogConfig, now_ms: int, *, clean: bool = False,
                 recovery_point: int = 0) -> LoadedLog:  # fmt: skip
    """Finish swaps, read the checkpoints, load (and if needed recover) the segments; an empty
    directory gets one empty segment at the stored log start offset.

    ``clean`` / ``recovery_point``: what the data directory's own marker and checkpoint say
    (:mod:`strom.storage.log_dir`); the partition's own files may add to them. The directory
    is listed once: the swap repair only runs when a file name calls for it."""
    names = os.listdir(dir)
    if any(n.endswith(_REPAIR_SUFFIXES) for n in names):
        complete_swaps(dir, config, now_ms)
        names = os.listdir(dir)
    clean = clean or ckpt.CLEAN_SHUTDOWN_FILE in names
    stored_start = (
        ckpt.read_offset(dir / ckpt.LOG_START_OFFSET_FILE, 0)
        if ckpt.LOG_START_OFFSET_FILE in names else 0
    )  # fmt: skip
    if ckpt.RECOVERY_POINT_FILE in names:
        recovery_point = max(recovery_point, ckpt.read_offset(dir / ckpt.RECOVERY_POINT_FILE, 0))
    bases = sorted(b for n in names if n.endswith(".log") and (b := base_of(n)) is not None)
    segments, recovered = load_segments(dir, config, now_ms, clean, recovery_point, bases)
    if not segments:
        segments = [LogSegment.create(dir, stored_start, config, now_ms)]
    end = segments[-1].next_offset
    snapshots = any(n.endswith(".snapshot") for n in names)
    return LoadedLog(segments, max(stored_start, segments[0].base_offset), clean,
                     end if clean else min(recovery_point, end), recovered,
                     snapshots)  # fmt: skip


def load_segments(
    dir: Path, config: LogConfig, now_ms: int, clean: bool, recovery_point: int,
    bases: list[int] | None = None,
) -> tuple[list[LogSegment], int]:
    """Open every segment; when not ``clean``, recover those from the recovery point on.
    Returns the segments and how many were re-validated.

    Recovery truncates a segment at its first invalid batch and then deletes every later
    segment (their offsets would no longer follow on).
    """
    if bases is None:
        bases = segment_bases(dir)
    segments = [LogSegment.open(dir, base, config, now_ms) for base in bases]
    if clean or not segments:
        return segments, 0
    start = 0
    for i, seg in enumerate(segments):
        if seg.base_offset <= recovery_point:
            start = i
    recovered = 0
    for i in range(start, len(segments)):
        recovered += 1
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
    return segments, recovered
