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
live and the future copy is kept, the move resumed at start-up (Kafka keeps its future log
and goes on copying into it); between the renames the partition has no live directory, and its
complete, fsynced future copy is promoted; after rename 2 the new directory is live and the
``-delete`` one is removed. Exactly one valid replica at every point; the future copy is
fsynced before rename 1.

Invariants of a ``-future`` directory, at every point, crash or not: it is never served (no
reader opens it before rename 2); it holds files named as the source's, each either one the
source no longer has or a prefix-or-garbage copy of the source's file of that name; nothing
in it is trusted when a move resumes: :func:`resume_state` keeps only the bytes of each
``.log`` file that equal the source's (its longest common prefix) and has every other file
copied again, so what a crash left half-written (even unsynced pages after a power loss) is
overwritten, never promoted. A copy may be throttled (:class:`Throttle`, Kafka's
``replica.alter.log.dirs.io.max.bytes.per.second``).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from strom.storage import atomic_file
from strom.storage.log_manager import doomed_name

#: files never copied: unfinished swaps and deletions (a log removes them when it opens)
SKIPPED_SUFFIXES = (".deleted", ".cleaned", ".swap", ".tmp")
FileState = dict[str, tuple[int, int, int]]  # name -> (inode, size, mtime_ns) copied
CHUNK = 1 << 20
UNLIMITED = (1 << 63) - 1  # Kafka's default rate: Long.MAX_VALUE


class CopyStopped(Exception):
    """Raised on the copying thread when the owner no longer wants the copy."""


class Throttle:
    """At most ``rate()`` bytes a second over a copy (read again at every chunk, so a changed
    dynamic config takes effect during a move); sleeps on the copying thread. ``stopped()``
    true ends the copy between two chunks (:class:`CopyStopped`): a shutdown never waits for a
    long, slow copy."""

    def __init__(self, rate: Callable[[], int], stopped: Callable[[], bool]) -> None:
        self.rate = rate
        self.stopped = stopped
        self._start = time.monotonic()
        self._bytes = 0

    def chunk(self) -> int:
        """How much to copy before asking again: a tenth of a second's worth, at most 1 MiB."""
        return max(4096, min(CHUNK, self.rate() // 10))

    def wrote(self, n: int) -> None:
        if self.stopped():
            raise CopyStopped
        rate = self.rate()
        if rate >= UNLIMITED or rate <= 0:
            self._start, self._bytes = time.monotonic(), 0
            return
        self._bytes += n
        ahead = self._bytes / rate - (time.monotonic() - self._start)
        while ahead > 0 and not self.stopped():
            time.sleep(min(ahead, 0.1))
            ahead = self._bytes / rate - (time.monotonic() - self._start)
        if self._bytes > rate:  # a new window each second: a rate change is felt at once
            self._start, self._bytes = time.monotonic(), 0


def copy_pass(src: Path, dst: Path, copied: FileState, *, sync: bool = True,
              throttle: Throttle | None = None) -> int:  # fmt: skip
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
            start = 0
            if (before is not None and name.endswith(".log") and before[0] == st.st_ino
                    and st.st_size >= before[1]):  # fmt: skip
                start = before[1]  # a .log that only grew: its new tail
            written += _copy_from(src / name, dst / name, start, sync, throttle)
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
        atomic_file.fsync_path(dst)
    return written


def _copy(fin: BinaryIO, fout: BinaryIO, throttle: Throttle | None) -> None:
    if throttle is None:
        shutil.copyfileobj(fin, fout, CHUNK)
        return
    while chunk := fin.read(throttle.chunk()):
        fout.write(chunk)
        throttle.wrote(len(chunk))


def _copy_from(src: Path, dst: Path, start: int, sync: bool, throttle: Throttle | None) -> int:
    """Copy ``src`` from byte ``start`` on into ``dst`` at the same place, ``dst`` cut there
    first (a ``.log`` that only grew gets its new tail; ``start`` 0 copies the whole file,
    creating ``dst``); returns the bytes copied. A tail needs ``dst``: FileNotFoundError."""
    with open(src, "rb") as fin, open(dst, "r+b" if start else "wb") as fout:
        fin.seek(start)
        fout.truncate(start)
        fout.seek(start)
        _copy(fin, fout, throttle)
        fout.flush()
        if sync:
            os.fsync(fout.fileno())
        return fout.tell() - start


def resume_state(src: Path, dst: Path,
                 stopped: Callable[[], bool] = lambda: False) -> FileState:  # fmt: skip
    """What of an interrupted copy ``dst`` can be kept (a worker thread's job): for each
    ``.log`` file also in ``src``, the length of its longest prefix equal to the source's, as a
    state that makes :func:`copy_pass` append only the rest; every other file will be copied
    again, and files ``src`` no longer has (or never copies) are removed now. Reads both
    copies of the kept bytes once; writes nothing but removals. ``stopped()`` true ends it
    between two chunks (:class:`CopyStopped`)."""
    copied: FileState = {}
    with os.scandir(dst) as entries:
        names = sorted(e.name for e in entries if e.is_file(follow_symlinks=False))
    for name in names:
        try:
            st = os.stat(src / name)
        except FileNotFoundError:
            st = None
        if st is None or name.endswith(SKIPPED_SUFFIXES):
            (dst / name).unlink(missing_ok=True)
            continue
        if name.endswith(".log"):
            try:
                same = _common_prefix(src / name, dst / name, stopped)
            except FileNotFoundError:
                continue  # deleted meanwhile: the next pass removes the copy
            copied[name] = (st.st_ino, same, -1)  # mtime -1: never "unchanged"
    return copied


def _common_prefix(a: Path, b: Path, stopped: Callable[[], bool]) -> int:
    with open(a, "rb") as fa, open(b, "rb") as fb:
        same = 0
        while True:
            if stopped():
                raise CopyStopped
            ca, cb = fa.read(CHUNK), fb.read(CHUNK)
            if not ca or not cb:
                return same
            if ca == cb[: len(ca)] or cb == ca[: len(cb)]:
                n = min(len(ca), len(cb))
                same += n
                if len(ca) != len(cb):
                    return same
                continue
            lo = next(i for i, (x, y) in enumerate(zip(ca, cb, strict=False)) if x != y)
            return same + lo


def commit(src: Path, future: Path) -> tuple[Path, Path]:
    """The two renames (module doc); returns (the new live directory, the doomed old one)."""
    doomed = doomed_name(src)
    os.rename(src, doomed)
    atomic_file.fsync_path(src.parent)
    live = future.parent / src.name
    os.rename(future, live)
    atomic_file.fsync_path(future.parent)
    return live, doomed
