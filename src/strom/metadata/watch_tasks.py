"""The re-reads a watched cache of the metadata store starts from its watch callbacks.

A store's watch fires in a callback that may not wait (kazoo's thread hands it to the loop,
the embedded store calls it inline), so a cache that wants to read the node again starts a
task. :class:`WatchTasks` keeps those tasks until they end (a task nobody holds may be
collected mid-run), logs one WARNING for a re-read that failed (the cache stays as it was
until the next watch or session event re-reads it), and after :meth:`close` starts nothing
new: a watch firing during shutdown is dropped, and the tasks still running are cancelled
and awaited.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger(__name__)


class WatchTasks:
    """The background re-reads of one cache (module doc); ``what`` names it in the log."""

    __slots__ = ("what", "closed", "_tasks")

    def __init__(self, what: str) -> None:
        self.what = what
        self.closed = False
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` as a task of the running loop (closed: drop it unstarted)."""
        if self.closed:
            coro.close()
            return
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("%s: re-reading failed: %s", self.what, task.exception())

    async def close(self) -> None:
        """Start nothing more; cancel what runs and wait until it has ended."""
        self.closed = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
