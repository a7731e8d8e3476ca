"""Crash-safe file replacement and the fsyncs of a file or a directory by path.

Every small metadata file of the storage layer (the checkpoints, the leader-epoch cache, the
producer snapshots, the transaction index, the data directory's multi-partition checkpoints)
is rewritten whole the same way: the new contents go to ``<name>.tmp`` in the same directory,
which is fsynced (unless the caller syncs the file system later) and renamed over ``<name>``.
A crash leaves the old file or the new one, never a mix; a ``.tmp`` left behind is rewritten
by the next replace. The rename itself is durable once the directory is fsynced
(:func:`fsync_dir`), which a caller asks for when the file must survive a power loss at once
(:func:`fsync_path` is also how a directory's creations and removals are made durable).
"""

from __future__ import annotations

import os
from pathlib import Path


def replace(path: Path, data: bytes, *, fsync: bool = True, fsync_parent: bool = False) -> None:
    """Atomically make ``data`` the contents of ``path`` (temp file, fsync unless
    ``fsync=False``, rename; then the directory fsynced when ``fsync_parent``)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        if fsync:
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if fsync_parent:
        fsync_path(path.parent)


def fsync_path(path: Path) -> None:
    """fsync the file or directory ``path`` (making a directory's renames and unlinks
    durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

