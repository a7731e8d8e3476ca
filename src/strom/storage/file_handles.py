"""A process-wide, bounded cache of open segment ``.log`` descriptors.

Why: a broker holding 10,000 partitions cannot keep every segment's file open under the usual
descriptor limits (Kafka asks for a limit of 100,000 and more). Each :class:`LogFile` names one
file; :meth:`FileHandles.acquire` returns an open descriptor for it, opening it on demand and
closing the least recently used unpinned ones when more than ``capacity`` are open. Indexes
hold no descriptor at all (:mod:`strom.storage.index`), so a segment costs at most one.

Invariants:

* a descriptor is closed only while its file is unpinned; :meth:`acquire` pins, and every
  acquire is matched by one :meth:`release`. So a descriptor number a caller holds between the
  two can never be closed (and reused for another file) by another thread's eviction;
* ``capacity`` is a target, not a hard cap: when every open file is pinned, one more opens;
* all bookkeeping happens under one lock; ``os.open``/``os.close`` run under it too (they do
  not block on anything but the file system), which keeps eviction and reuse race-free.

A descriptor that ``open`` refuses with EMFILE/ENFILE makes the cache shed half of its unpinned
files and try once more before the error reaches the caller.
"""

from __future__ import annotations

import errno
import os
import resource
import threading
from collections import OrderedDict
from pathlib import Path

from strom.storage import fileio

# Descriptors kept free for sockets, checkpoints, snapshots and the metadata store.
_RESERVE_MIN = 128


class LogFile:
    """One segment file, opened through :data:`HANDLES`. ``path`` may change (a rename)."""

    __slots__ = ("path", "fd", "pins", "closed", "__weakref__")

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = -1
        self.pins = 0
        self.closed = False


class FileHandles:
    """LRU of open :class:`LogFile` descriptors, at most ``capacity`` (see module doc)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(4, capacity)
        self._lock = threading.Lock()
        self._open: OrderedDict[LogFile, None] = OrderedDict()
        self.opens = 0  # descriptors opened so far (tests and metrics)

    def __len__(self) -> int:
        return len(self._open)

    def create(self, path: Path, *, truncate: bool = False) -> LogFile:
        """A :class:`LogFile` for ``path``, creating the file (emptied if ``truncate``)."""
        f = LogFile(path)
        fd = self.acquire(f, create=True)
        try:
            if truncate:
                fileio.ftruncate(fd, 0)
        finally:
            self.release(f)
        return f

    def acquire(self, f: LogFile, *, create: bool = False) -> int:
        """An open descriptor for ``f``, pinned until :meth:`release`."""
        with self._lock:
            if f.closed:
                raise ValueError(f"{f.path} is closed")
            if f.fd < 0:
                self._shrink(self.capacity - 1)
                flags = os.O_RDWR | (os.O_CREAT if create else 0)
                try:
                    f.fd = fileio.open_fd(f.path, flags, 0o644)
                except OSError as exc:
                    if exc.errno not in (errno.EMFILE, errno.ENFILE):
                        raise
                    self._shrink(len(self._open) // 2)
                    f.fd = fileio.open_fd(f.path, flags, 0o644)
                self.opens += 1
                self._open[f] = None
            else:
                self._open.move_to_end(f)
            f.pins += 1
            return f.fd

    def release(self, f: LogFile) -> None:
        with self._lock:
            f.pins -= 1

    def dup(self, f: LogFile) -> int:
        """A duplicate of ``f``'s descriptor, owned by the caller; sheds unpinned cached files
        once if the process is out of descriptors."""
        fd = self.acquire(f)
        try:
            try:
                return os.dup(fd)
            except OSError as exc:
                if exc.errno not in (errno.EMFILE, errno.ENFILE):
                    raise
                with self._lock:
                    self._shrink(len(self._open) // 2)
                return os.dup(fd)
        finally:
            self.release(f)

    def size_of(self, f: LogFile) -> int:
        fd = self.acquire(f)
        try:
            return os.fstat(fd).st_size
        finally:
            self.release(f)

    def rename(self, f: LogFile, path: Path) -> None:
        """Rename ``f``'s file (its descriptor, if open, stays valid)."""
        with self._lock:
            if f.path.exists():
                fileio.replace(f.path, path)
            f.path = path

    def close(self, f: LogFile) -> None:
        """Close ``f`` for good (a later acquire raises). Pinned files close at release time
        would be a use-after-close, so closing a pinned file is the caller's bug."""
        with self._lock:
            f.closed = True
            if f.fd >= 0:
                self._open.pop(f, None)
                fileio.close(f.fd)
                f.fd = -1

    def _shrink(self, target: int) -> None:
        """Close least recently used unpinned files until at most ``target`` are open."""
        if len(self._open) <= target:
            return
        for victim in list(self._open):
            if len(self._open) <= target:
                break
            if victim.pins:
                continue
            del self._open[victim]
            fileio.close(victim.fd)
            victim.fd = -1


def raise_nofile_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (as far as the OS lets); the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        for value in (target, 1 << 20, 65536):
            if value <= soft:
                break
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (value, hard))
                soft = value
                break
            except (ValueError, OSError):
                continue
    return soft


def default_capacity(nofile: int | None = None) -> int:
    """Segment descriptors to keep open under a soft limit of ``nofile``: the limit minus a
    reserve of a quarter (at least 128) for sockets, Fetch regions' duplicated descriptors
    (up to 64 a response) and short-lived files."""
    if nofile is None:
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if nofile == resource.RLIM_INFINITY:
        nofile = 1 << 20
    return max(16, nofile - max(_RESERVE_MIN, nofile // 4))


HANDLES = FileHandles(default_capacity())


def configure(capacity: int) -> None:
    """Set the capacity of :data:`HANDLES` (the broker calls this after raising the limit)."""
    with HANDLES._lock:
        HANDLES.capacity = max(4, capacity)
        HANDLES._shrink(HANDLES.capacity)
