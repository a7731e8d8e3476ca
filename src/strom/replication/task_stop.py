"""Stopping a broker's long-running asyncio task for sure, and never waiting for it for ever.

Why a single ``task.cancel(); await task`` is not enough on Python 3.11: ``asyncio.wait_for``
returns the inner awaitable's result when that completed in the same loop iteration as the
cancellation of the waiting task, and the ``CancelledError`` is lost (CPython gh-86296, fixed
in 3.12 where ``wait_for`` is built on ``asyncio.timeout``). A loop that waits with
``wait_for`` (an ``Event`` with a timeout, a request with a deadline) and is cancelled just as
its event is set or its answer arrives goes on looping, and whoever awaits it waits for ever.
That is how a broker SIGTERMed right after its controlled shutdown hung in CI: the
LeaderAndIsr that made it a follower had just woken its replica fetcher (or its
OffsetForLeaderEpoch answer had just come) when the shutdown cancelled the fetcher.

Loops that are stopped this way also check a ``closed`` flag of their own (set before the
cancellation), so a lost cancellation ends them at their next turn; :func:`cancel_and_wait`
cancels again while the task runs and gives up, with a WARNING naming it, after ``timeout``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger(__name__)
#: how often a task that is still running after its cancellation is cancelled again
RECANCEL_S = 0.1


async def cancel_and_wait(task: asyncio.Task[Any] | None, what: str, timeout: float = 5.0) -> bool:
    """Cancel ``task`` until it is done, at most ``timeout`` seconds; True if it ended.

    The task's own exception (or cancellation) is not raised here: a loop that failed has
    logged why. Invariant: when this returns True the task runs no more code."""
    if task is None:
        return True
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not task.done():
        remaining = deadline - loop.time()
        if remaining <= 0:
            log.warning("%s did not stop within %.1f s of its cancellation", what, timeout)
            return False
        task.cancel()
        await asyncio.wait({task}, timeout=min(RECANCEL_S, remaining))
    if not task.cancelled() and task.exception() is not None:
        log.debug("%s ended with %r", what, task.exception())
    return True
