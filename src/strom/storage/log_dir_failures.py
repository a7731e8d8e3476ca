"""What a disk error does to its log directory (Kafka's ``LogDirFailureChannel``).

Every operation of the storage layer that fails with an ``OSError`` on a log directory's files
is reported here (:meth:`LogDirFailures.report`) with the directory and whether the operation
was *undone*: the files left exactly as before it (an append's partly written batch cut off
again, a checkpoint's temp file removed with the old file intact). The answer is one of two:

* **offline** (Kafka's rule for every I/O error): the directory is given up until the broker
  restarts. Its logs stop at once (:attr:`strom.storage.log.Log.offline`: appends refused with
  KAFKA_STORAGE_ERROR), the listener is told (once per directory) so the broker can stop
  serving them, move their leadership (in a cluster), and leave the directory out of its
  checkpoints and clean-shutdown marker, so that the restart recovers it from its files. The
  other directories keep working. Any error that was not undone, or not a full disk (EIO, a
  failed fsync, after which the page cache's contents are unknown), takes its directory
  offline.
* **full** (a full disk, ENOSPC/EDQUOT, undone) where nothing could take the directory's work
  over: the broker's last online directory on a single node (Kafka would halt the broker).
  The directory stays online: the failed append answered KAFKA_STORAGE_ERROR, reads go on,
  failed checkpoint writes are retried by the next one, and every later append tries again,
  so writes resume by themselves once there is space. Where something can take over (another
  online directory of this broker, or another broker of a cluster, ``fail_over``), a full
  disk is an I/O error like any other: the directory goes offline, as Kafka's JBOD rule says.

Thread-safe: reports come from the event loop (appends) and the flusher thread (fsyncs,
checkpoints). The listener runs on the reporting thread; the broker hands the work to its
event loop.
"""

from __future__ import annotations

import errno
import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

logger = logging.getLogger(__name__)

#: errnos of a full disk (space or quota)
FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


class LogDirFailures:
    """The offline log directories of one broker, and the rule above."""

    def __init__(self, dirs: Iterable[Path], *, fail_over: bool = False) -> None:
        self.dirs = [Path(d) for d in dirs]
        #: another broker can lead this one's partitions (a cluster): a full disk goes offline
        self.fail_over = fail_over
        self._offline: dict[Path, str] = {}
        self._lock = threading.Lock()
        #: told (on the reporting thread) of each directory that goes offline
        self.listeners: list[Callable[[Path], None]] = []
        self.full_errors = 0  # appends and writes refused by a full disk that stayed online
        self._full_logged: set[Path] = set()

    def offline(self) -> dict[Path, str]:
        """The offline directories, each with the error that took it offline."""
        with self._lock:
            return dict(self._offline)

    def is_offline(self, dir: Path) -> bool:
        return dir in self._offline

    def online(self) -> list[Path]:
        with self._lock:
            return [d for d in self.dirs if d not in self._offline]

    def report(self, dir: Path, exc: OSError, *, undone: bool) -> bool:
        """An operation on ``dir``'s files failed with ``exc``; True when ``dir`` is (now)
        offline, False when it stays online as a full disk (module doc)."""
        with self._lock:
            if dir in self._offline:
                return True
            others = [d for d in self.dirs if d != dir and d not in self._offline]
            if undone and exc.errno in FULL and not others and not self.fail_over:
                self.full_errors += 1
                first = dir not in self._full_logged
                self._full_logged.add(dir)
            else:
                first = None
                self._offline[dir] = f"{type(exc).__name__}: {exc}"
        if first is not None:
            if first:
                logger.error("log directory %s is full (%s): writes are refused until there "
                             "is space again, reads go on", dir, exc)  # fmt: skip
            return False
        logger.error("log directory %s is offline after an I/O error: %s (its partitions stop "
                     "here until a restart)", dir, exc)  # fmt: skip
        for listener in list(self.listeners):
            try:
                listener(dir)
            except Exception:
                logger.exception("log directory failure listener failed")
        return True


def is_full(exc: OSError) -> bool:
    return exc.errno in FULL
