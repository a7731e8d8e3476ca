"""Periodic work of a broker's services on the running event loop.

:meth:`Periodic.every` runs a function (plain or a coroutine function) every so many seconds
until :meth:`Periodic.cancel_all`; a run that raises is logged and the next one still comes.
One :class:`Periodic` per broker (its assembly cancels everything at shutdown), handed to the
services that need timers, so none of them keeps tasks the broker does not know of.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)
Job = Callable[[], None | Awaitable[None]]


class Periodic:
    def __init__(self) -> None:
        self._tasks: list[asyncio.Task[None]] = []

    def every(self, seconds: float, fn: Job) -> None:
        """Run ``fn`` every ``seconds`` (the first run after ``seconds``)."""

        async def loop() -> None:
            while True:
                await asyncio.sleep(seconds)
                try:
                    result = fn()
                    if asyncio.iscoroutine(result):
                        await result
                except Exception:
                    log.exception("periodic task %s failed", getattr(fn, "__name__", fn))

        self._tasks.append(asyncio.get_running_loop().create_task(loop()))

    def cancel_all(self) -> None:
        for task in self._tasks:
            task.cancel()
        self._tasks.clear()
