"""Waiting for data: long-poll Fetch requests park here until a partition grows.

A waiter registers interest in a set of keys (topic, partition) and gets a future; any append
to one of those keys resolves it. The waiter then re-reads and decides whether it has enough
(``min_bytes``) or must wait again until its deadline. One future per waiter, woken at most
once, so an append costs one dict lookup when nobody waits.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Hashable, Iterable


class DataPurgatory:
    def __init__(self) -> None:
        self._waiters: dict[Hashable, set[asyncio.Future[None]]] = defaultdict(set)

    def notify(self, key: Hashable) -> None:
        waiters = self._waiters.pop(key, None)
        if not waiters:
            return
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def wait(self, keys: Iterable[Hashable], timeout: float) -> bool:
        """True if one of ``keys`` was appended to within ``timeout`` seconds."""
        if timeout <= 0:
            return False
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        keys = list(keys)
        for key in keys:
            self._waiters[key].add(fut)
        try:
            await asyncio.wait_for(fut, timeout)
            return True
        except TimeoutError:
            return False
        finally:
            for key in keys:
                bucket = self._waiters.get(key)
                if bucket is not None:
                    bucket.discard(fut)
                    if not bucket:
                        del self._waiters[key]
