"""Crash-safe file replacement and the fsyncs of a file or a directory by path.

Every small metadata file of the storage layer (the checkpoints, the leader-epoch cache, the
producer snapshots, the transaction index, the data directory's multi-partition checkpoints)
is rewritten whole the same way: the new contents go to ``<name>.tmp`` in the same directory,
which is fsynced (unless the caller syncs the file system later) and renamed over ``<name>``.
A crash leaves the old file or the new one, never a mix; a ``.tmp`` left behind is rewritten
by the next replace. A write that fails (a full disk, an I/O error) leaves the old file as it
was and removes the temp file before the error reaches the caller. The rename itself is durable once the directory is fsynced
(:func:`fsync_dir`), which a caller asks for when the file must survive a power loss at once
(:func:`fsync_path` is also how a directory's creations and removals are made durable).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from strom.storage import fileio


def replace(path: Path, data: bytes, *, fsync: bool = True, fsync_parent: bool = False) -> None:
    """Atomically make ``data`` the contents of ``path`` (temp file, fsync unless
    ``fsync=False``, rename; then the directory fsynced when ``fsync_parent``)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        fd = fileio.open_fd(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:  # a short write (the disk filling up) is written on, or raises
                view = view[fileio.write(fd, view) :]
            if fsync:
                fileio.fsync(fd)
        finally:
            fileio.close(fd)
        fileio.replace(tmp, path)
    except OSError:
        # the old file is intact; the partial temp file goes (on a full disk it holds space)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if fsync_parent:
        fsync_path(path.parent)


def fsync_path(path: Path) -> None:
    """fsync the file or directory ``path`` (making a directory's renames and unlinks
    durable)."""
    fd = fileio.open_fd(path, os.O_RDONLY)
    try:
        fileio.fsync(fd)
    finally:
        fileio.close(fd)

