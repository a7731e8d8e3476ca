"""Waiting for data: long-poll Fetch requests park here until a partition grows.

A waiter registers interest in a set of keys (topic, partition) and gets a future; any append
to one of those keys resolves it and records *which* keys changed, so the waiter re-reads only
those partitions (:mod:`strom.broker.handlers.fetch`) and decides whether it has enough
(``min_bytes``) or must wait again until its deadline. One future per waiter, woken at most
once per wait; an append costs one dict lookup when nobody waits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Iterable, Mapping


class _Waiter:
    __slots__ = ("changed", "future")

    def __init__(self, future: asyncio.Future[None]) -> None:
        self.future = future
        self.changed: set[Hashable] = set()


class DataPurgatory:
    def __init__(self) -> None:
        self._waiters: dict[Hashable, set[_Waiter]] = {}
        #: the keys somebody waits for (read-only: lets an append skip :meth:`notify`, per
        #: request, when nobody does)
        self.watched: Mapping[Hashable, object] = self._waiters

    def notify(self, key: Hashable) -> None:
        """``key`` changed (an append, a deletion): wake every waiter interested in it."""
        waiters = self._waiters.pop(key, None)
        if not waiters:
            return
        for waiter in waiters:
            waiter.changed.add(key)
            if not waiter.future.done():
                waiter.future.set_result(None)

    async def wait(self, keys: Iterable[Hashable], timeout: float) -> set[Hashable]:
        """The keys among ``keys`` that changed within ``timeout`` seconds (empty: none did).

        Returns as soon as one changed; others changing in the same loop iteration are
        included."""
        if timeout <= 0:
            return set()
        waiter = _Waiter(asyncio.get_running_loop().create_future())
        keys = list(keys)
        for key in keys:
            self._waiters.setdefault(key, set()).add(waiter)
        try:
            await asyncio.wait_for(waiter.future, timeout)
        except TimeoutError:
            pass
        finally:
            for key in keys:
                bucket = self._waiters.get(key)
                if bucket is not None:
                    bucket.discard(waiter)
                    if not bucket:
                        del self._waiters[key]
        return waiter.changed
