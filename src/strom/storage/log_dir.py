"""Files of a whole data directory (Kafka's log-dir level), as opposed to one partition's.

* ``recovery-point-offset-checkpoint``: Kafka's multi-partition checkpoint format, text::

      0                      (version)
      2                      (number of entries)
      my-topic 0 1234        (topic, partition, recovery point)
      my-topic 1 98

  Written (temp file, fsync, rename) at a clean shutdown and every
  ``log.flush.offset.checkpoint.interval.ms``; every offset below an entry is fsynced. A
  partition's own ``recovery-point-offset-checkpoint`` (:mod:`strom.storage.checkpoint`)
  may be newer; the larger of the two is used.
* ``.kafka_cleanshutdown``: an empty marker, written after every log of the directory was
  closed and the file system synced (one ``syncfs`` instead of several fsyncs per
  partition: per-file fsyncs and renames cost about a millisecond each, which is minutes for
  10,000 partitions). At start-up its presence means no log needs recovery; it is removed
  (and the removal made durable) before the broker accepts a write.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
from collections.abc import Mapping
from pathlib import Path

from strom.storage.atomic_file import fsync_path, replace

RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
TopicPartition = tuple[str, int]
logger = logging.getLogger(__name__)


def sync_filesystem(path: Path) -> None:
    """``syncfs(2)`` on the file system holding ``path`` (``sync()`` where it is missing)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(path, os.O_RDONLY)
        try:
            if libc.syncfs(fd) == 0:
                return
        finally:
            os.close(fd)
    except (OSError, AttributeError):
        pass
    os.sync()


def write_offsets(path: Path, offsets: Mapping[TopicPartition, int]) -> None:
    """Atomically write a multi-partition checkpoint (format in the module doc)."""
    lines = [f"{t} {p} {o}\n" for (t, p), o in sorted(offsets.items())]
    replace(path, f"0\n{len(lines)}\n{''.join(lines)}".encode())


def read_offsets(path: Path) -> dict[TopicPartition, int]:
    """The entries of a multi-partition checkpoint; empty when missing or unreadable."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    if len(lines) < 2 or lines[0].strip() != "0":
        logger.warning("ignoring %s: not a version 0 checkpoint", path)
        return {}
    out: dict[TopicPartition, int] = {}
    for line in lines[2:]:
        parts = line.split()
        if len(parts) != 3:
            continue
        with contextlib.suppress(ValueError):
            out[(parts[0], int(parts[1]))] = int(parts[2])
    return out


def take_clean_marker(data_dir: Path) -> bool:
    """True if the last shutdown was clean; the marker is removed durably either way."""
    marker = data_dir / CLEAN_SHUTDOWN_FILE
    if not marker.exists():
        return False
    marker.unlink()
    fsync_path(data_dir)
    return True


def write_clean_marker(data_dir: Path) -> None:
    (data_dir / CLEAN_SHUTDOWN_FILE).touch()
    fsync_path(data_dir)
