"""Copying a partition's directory into another log directory (AlterReplicaLogDirs, KIP-113).

A move copies ``<src>/<topic>-<partition>`` into ``<dst>/<topic>-<partition>.<hex>-future``
in passes (:func:`copy_pass`, on a worker thread) while the log keeps serving: each pass copies
only what changed since the previous one (a ``.log`` file that only grew gets its new tail, any
other changed file is copied whole, files gone from the source are removed). When a pass
copied little, the owner closes the log (no appends from then on), runs a last pass, and
:func:`commit` swaps the directories with two renames:

1. ``<src>/<tp>`` → ``<src>/<tp>.<hex>-delete``, then fsync ``<src>``;
2. ``<dst>/<tp>.<hex>-future`` → ``<dst>/<tp>``, then fsync ``<dst>``.

Crash safety (:meth:`strom.storage.log_manager.LogManager.load`): before rename 1 the source is
live and the future copy is removed at start-up (the move did not happen); between the renames
the partition has no live directory, and its complete, fsynced future copy is promoted; after
rename 2 the new directory is live and the ``-delete`` one is removed. Exactly one valid replica
at every point; the future copy is fsynced before rename 1.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from strom.storage import log_dir
from strom.storage.log_manager import doomed_name

#: files never copied: unfinished swaps and deletions (a log removes them when it opens)
SKIPPED_SUFFIXES = (".deleted", ".cleaned", ".swap", ".tmp")
FileState = dict[str, tuple[int, int, int]]  # name -> (inode, size, mtime_ns) copied


def copy_pass(src: Path, dst: Path, copied: FileState, *, sync: bool = True) -> int:
    """Bring ``dst`` up to ``src`` (thread-safe against appends to ``src``: a file read while
    it grows is caught up by the next pass). ``copied`` records what was copied and is
    updated. Returns the bytes written. ``sync``: fsync every file written and ``dst``."""
    written = 0
    present: set[str] = set()
    with os.scandir(src) as entries:
        names = sorted(e.name for e in entries if e.is_file(follow_symlinks=False))
    for name in names:
        if name.endswith(SKIPPED_SUFFIXES):
            continue
        try:
            st = os.stat(src / name)
        except FileNotFoundError:
            continue  # deleted meanwhile (retention): the next pass sees it gone
        present.add(name)
        state = (st.st_ino, st.st_size, st.st_mtime_ns)
        before = copied.get(name)
        if before == state:
            continue
        try:
            if (before is not None and name.endswith(".log") and before[0] == st.st_ino
                    and st.st_size >= before[1]):  # fmt: skip
                written += _append_tail(src / name, dst / name, before[1], sync)
            else:
                written += _copy_whole(src / name, dst / name, sync)
        except FileNotFoundError:
            present.discard(name)
            copied.pop(name, None)
            continue
        copied[name] = state
    for name in list(copied):
        if name not in present:
            (dst / name).unlink(missing_ok=True)
            del copied[name]
    if sync:
        log_dir.fsync_dir(dst)
    return written


def _copy_whole(src: Path, dst: Path, sync: bool) -> int:
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        shutil.copyfileobj(fin, fout, 1 << 20)
        fout.flush()
        if sync:
            os.fsync(fout.fileno())
        return fout.tell()


def _append_tail(src: Path, dst: Path, start: int, sync: bool) -> int:
    with open(src, "rb") as fin, open(dst, "r+b") as fout:
        fin.seek(start)
        fout.truncate(start)
        fout.seek(start)
        shutil.copyfileobj(fin, fout, 1 << 20)
        fout.flush()
        if sync:
            os.fsync(fout.fileno())
        return fout.tell() - start


def commit(src: Path, future: Path) -> tuple[Path, Path]:
    """The two renames (module doc); returns (the new live directory, the doomed old one)."""
    doomed = doomed_name(src)
    os.rename(src, doomed)
    log_dir.fsync_dir(src.parent)
    live = future.parent / src.name
    os.rename(future, live)
    log_dir.fsync_dir(future.parent)
    return live, doomed
