"""Small checkpoint files of a partition directory.

Format (Kafka's checkpoint-file style, text): line 1 the version ``0``, line 2 one integer.

* ``log-start-offset-checkpoint``: the log start offset (moved by DeleteRecords/retention).
* ``recovery-point-offset-checkpoint``: every offset below it is fsynced; recovery after a
  crash scans only segments from the one holding it.

Plus the empty marker ``.clean-shutdown``, written by :meth:`Log.close` and removed at open:
its absence at open means the log was not closed cleanly and must be recovered.

Writes are atomic: temp file, fsync, rename.
"""

from __future__ import annotations

from pathlib import Path

from strom.storage import atomic_file

LOG_START_OFFSET_FILE = "log-start-offset-checkpoint"
RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".clean-shutdown"


def write_offset(path: Path, value: int, *, fsync: bool = True) -> None:
    """Atomic replace; ``fsync=False`` when the caller syncs the whole file system after."""
    atomic_file.replace(path, b"0\n%d\n" % value, fsync=fsync)


def read_offset(path: Path, default: int) -> int:
    """The stored value, or ``default`` when the file is missing or unreadable."""
    try:
        lines = path.read_text().split()
        if len(lines) >= 2 and lines[0] == "0":
            return int(lines[1])
    except (OSError, ValueError):
        pass
    return default
