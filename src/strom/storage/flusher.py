"""The flusher: a log's disk waits (fsyncs, checkpoints, producer snapshots) off the caller's
thread, in submission order (Kafka's asynchronous flush on roll, ``kafka-scheduler``).

The broker's event loop never waits on the disk: when a segment rolls, :class:`Log` opens the
new segment and hands "fsync the old segment and its indexes, write the producer snapshot,
then move the recovery point and write its checkpoint" to the flusher, and the append goes on.
The same for ``flush.ms`` / ``flush.messages`` flushes and the log-start checkpoint.

Ordering (the invariants callers rely on):

- jobs run one at a time, in the order they were submitted, on one thread, so a log's
  checkpoint writes land in order and a checkpoint never claims a recovery point whose
  segments were not fsynced before it (the job fsyncs first, then moves the point);
- :meth:`Flusher.barrier` returns a future done once everything submitted before it has run:
  a handler whose response must wait for durability (``flush.messages``, DeleteRecords)
  awaits it (``asyncio.wrap_future``) instead of blocking the loop;
- a job that fails sets its future's exception and is logged; later jobs still run.

:class:`InlineFlusher` runs each job at once on the calling thread: the default for a ``Log``
opened on its own (tools, unit tests), so their behaviour stays synchronous. Storage may use
threads but never asyncio: futures are ``concurrent.futures.Future``.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future

from strom.storage.errors import KafkaStorageError

logger = logging.getLogger(__name__)

Job = Callable[[], None]


class Flusher:
    """One background thread running submitted jobs in order."""

    def __init__(self, name: str = "strom-flusher") -> None:
        self._queue: queue.SimpleQueue[tuple[Job, Future[None]] | None] = queue.SimpleQueue()
        self._closed = False
        self._lock = threading.Lock()
        self._submitted = 0
        self._done = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, job: Job) -> Future[None]:
        """Queue ``job``; the future completes (or fails) when it has run."""
        fut: Future[None] = Future()
        if self._closed:
            self._execute(job, fut)  # after close: nothing may be lost, run it here
            return fut
        with self._lock:
            self._submitted += 1
        self._queue.put((job, fut))
        return fut

    def barrier(self) -> Future[None]:
        """A future done once every job submitted before it has run."""
        return self.submit(_noop)

    def drain(self, timeout: float | None = None) -> None:
        """Block until every job submitted so far has run (at once when none is pending)."""
        if self.idle:
            return
        self.barrier().result(timeout)

    @property
    def idle(self) -> bool:
        """True when every submitted job has run."""
        with self._lock:
            return self._closed or self._done == self._submitted

    def close(self) -> None:
        """Run what is queued, then stop the thread (later submissions run inline)."""
        if self._closed:
            return
        self._queue.put(None)
        self._thread.join()
        self._closed = True

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            job, fut = item
            self._execute(job, fut)
            with self._lock:
                self._done += 1

    @staticmethod
    def _execute(job: Job, fut: Future[None]) -> None:
        if not fut.set_running_or_notify_cancel():
            return
        try:
            job()
        except (OSError, KafkaStorageError) as exc:  # a disk's error: reported where it met
            logger.warning("flush job %s failed: %s", getattr(job, "__qualname__", job), exc)
            fut.set_exception(exc)
        except BaseException as exc:
            logger.exception("flush job %s failed", getattr(job, "__qualname__", job))
            fut.set_exception(exc)
        else:
            fut.set_result(None)


class InlineFlusher(Flusher):
    """Runs every job immediately on the calling thread (synchronous storage)."""

    def __init__(self) -> None:  # no thread, no queue
        self._closed = True
        self._lock = threading.Lock()
        self._submitted = self._done = 0

    def close(self) -> None:
        pass


def _noop() -> None:
    pass


INLINE = InlineFlusher()
