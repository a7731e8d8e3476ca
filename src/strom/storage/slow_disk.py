"""A slow disk: which log directories are slow now, and the threads that write for them.

An append is written (into the page cache) on the broker's event loop: a ``pwrite`` takes a
few microseconds, and handing every append to a thread would cost tens (the thread hand-off,
a future, a wake-up of the loop) against the ~13 a whole Produce request takes. But a
``write`` can take seconds on a slow disk (the kernel throttling a writer past its dirty-page
limits, a journal commit an extending write has to wait for, a device retrying), and while
it does the loop serves nobody: every client of the broker would wait for one partition's
disk. So a log directory is written on the loop while it is fast and by a pool of writer
threads (:class:`WriterPool`) while it is *slow*:

- a write that took more than :data:`SLOW_WRITE_S`, or an fsync more than
  :data:`SLOW_FSYNC_S` (an fsync is slow on a slow disk first, and an append waits for the
  journal commit a stalled fsync holds), marks its directory slow (:meth:`DiskSpeed.note`);
- while a directory is slow, clients' appends to its logs and a follower's appends of what
  it fetched go to the writers, one write in flight per partition
  (:meth:`strom.storage.log.Log.append` with ``writer``; the order and the wait for it are
  :meth:`strom.replication.replica_manager.ReplicaManager.append_later`'s and the replica
  fetcher's), so the loop goes on serving every other partition and client;
- the mark is held while a writer thread's write has been going for longer than
  :data:`SLOW_WRITE_S`, and :data:`SLOW_HOLD_S` after the last slow write or fsync ended: a
  disk that stalls now and then stays off the loop for as long, not only until its next fast
  write (that could be another partition's, and the next stall would land on the loop
  again); a false mark (a write that waited for a CPU, not for the disk) costs no more than
  that.

What this cannot do: the first stalled write of a directory that was fast is on the loop
(nothing told the broker yet that the disk is slow; timing every write off the loop is the
cost above), so the loop waits for it once; the marks after it take the rest off the loop.
The coordinators' appends (offsets, group and transaction state, markers) stay on the loop.

Thread-safe: marks come from the loop (appends), the flusher (fsyncs) and the writers.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

#: a write into the page cache takes microseconds: one this long was throttled or stalled
#: (not lower: a loaded machine's writes take 100-200 ms now and then, its thread waiting for
#: a CPU or the kernel throttling a busy disk's writers, and each mark costs every append
#: of the directory a thread hand-off, several times its CPU, for :data:`SLOW_HOLD_S`)
SLOW_WRITE_S = 0.25
#: an fsync of a busy but healthy disk can take a few hundred milliseconds
SLOW_FSYNC_S = 1.0
#: how long a directory stays slow after its last slow write or fsync ended (and a write
#: still going past :data:`SLOW_WRITE_S` keeps it slow)
SLOW_HOLD_S = 5.0
#: writer threads (Kafka's ``num.io.threads`` default): partitions stalled at the same time
#: past this many wait for a thread, the others' appends are still written
WRITER_THREADS = 8

_now = time.monotonic
logger = logging.getLogger(__name__)


class DiskSpeed:
    """Whether one log directory is slow now (see the module doc). :attr:`slow` is a plain
    attribute: the Produce path reads it on every request."""

    def __init__(self, name: str = "") -> None:
        self.name = name
        #: True while the directory's client appends go to the writer threads
        self.slow = False
        self._until = 0.0
        self._lock = threading.Lock()
        self._writing: dict[int, float] = {}  # writer threads' writes going on: id -> start
        #: how many times the directory was found slow (a write or fsync past its bound)
        self.slow_events = 0

    def note(self, seconds: float, bound: float = SLOW_WRITE_S) -> None:
        """A write (or, with ``bound`` :data:`SLOW_FSYNC_S`, an fsync) took ``seconds``:
        mark the directory slow when that is past ``bound``; clear the mark once
        :data:`SLOW_HOLD_S` passed since the last slow one."""
        if seconds > bound:
            with self._lock:
                self._until = _now() + SLOW_HOLD_S
                self.slow_events += 1
                was, self.slow = self.slow, True
            if not was:
                logger.warning("log directory %s is slow (a %s took %.2f s): its appends are "
                               "written off the event loop", self.name,
                               "write" if bound == SLOW_WRITE_S else "fsync", seconds)  # fmt: skip
        elif self.slow:
            with self._lock:
                now = _now()
                cleared = now >= self._until and self.slow and not any(
                    now - began > SLOW_WRITE_S for began in self._writing.values())
                if cleared:
                    self.slow = False
            if cleared:
                logger.info("log directory %s is fast again: its appends are written on the "
                            "event loop", self.name)  # fmt: skip

    def timed(self, write: Callable[[], None]) -> None:
        """Run ``write`` (on a writer thread) and :meth:`note` how long it took; while it
        runs, it keeps the directory slow once it has taken longer than :data:`SLOW_WRITE_S`
        (a stalled write: nothing may clear the mark before it is over)."""
        token = id(write)
        began = _now()
        with self._lock:
            self._writing[token] = began
        try:
            write()
        finally:
            with self._lock:
                del self._writing[token]
            self.note(_now() - began)

    def __repr__(self) -> str:
        return f"DiskSpeed({self.name}, slow={self.slow})"


class WriterPool:
    """The threads that write appends of slow log directories (module doc). Threads start
    when the first write is submitted: a broker whose disks are never slow has none."""

    def __init__(self, threads: int = WRITER_THREADS) -> None:
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="strom-writer")

    def submit(self, job: Callable[[], None]) -> Future[None]:
        """Run ``job`` (a write) on a writer thread; its future."""
        return self._pool.submit(job)

    def close(self) -> None:
        """Wait for the writes submitted, then stop the threads."""
        self._pool.shutdown(wait=True)
