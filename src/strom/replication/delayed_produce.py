"""acks=all: produce requests wait here until their records are replicated to the ISR.

After the leader's append, a request with acks=-1 waits for each of its partitions until the
high watermark passes the partition's last appended offset (Kafka's ``DelayedProduce``). A
waiter completes with:

- NONE when the HW reached its offset and the ISR still satisfies ``min.insync.replicas``;
- NOT_ENOUGH_REPLICAS_AFTER_APPEND when the HW reached it but the ISR shrank below the
  minimum meanwhile (the records are stored, but on fewer replicas than asked);
- NOT_LEADER_OR_FOLLOWER when this broker stopped leading the partition first (the records
  may be lost: the client retries);
- REQUEST_TIMED_OUT when the request's timeout passes first (the handler's wait).

Waiters are kept per partition, ordered by offset: a HW move completes a prefix, at a cost
of one dict lookup when nobody waits. Invariant: a waiter's future is resolved exactly once.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable, Hashable, Mapping

from strom.protocol.errors import ErrorCode

# (topic, partition) -> (HW reached?, error code once reached); from the replica manager
Checker = Callable[[Hashable, int], "ErrorCode | None"]


class DelayedProducePurgatory:
    def __init__(self) -> None:
        self._waiting: dict[Hashable, list[tuple[int, int, asyncio.Future[ErrorCode]]]] = {}
        self._seq = itertools.count()
        #: the keys with waiters (read-only: lets a HW move skip :meth:`complete`, per
        #: request, when nobody waits)
        self.pending: Mapping[Hashable, object] = self._waiting

    def watch(self, key: Hashable, required_offset: int) -> asyncio.Future[ErrorCode]:
        """A future resolved with the partition's outcome once the HW is past
        ``required_offset`` (the last offset appended, so HW > required_offset)."""
        future: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting.setdefault(key, []), (required_offset, next(self._seq), future))
        return future

    def waiting(self, key: Hashable) -> int:
        return len(self._waiting.get(key, ()))

    def complete(self, key: Hashable, high_watermark: int, code: ErrorCode) -> int:
        """Resolve the waiters of ``key`` whose offset is below ``high_watermark`` with
        ``code``; returns how many."""
        heap = self._waiting.get(key)
        if not heap:
            return 0
        done = 0
        while heap and heap[0][0] < high_watermark:
            _offset, _seq, future = heapq.heappop(heap)
            if not future.done():
                future.set_result(code)
            done += 1
        if not heap:
            del self._waiting[key]
        return done

    def fail_all(self, key: Hashable, code: ErrorCode) -> None:
        """Resolve every waiter of ``key`` with ``code`` (leadership lost, partition gone)."""
        for _offset, _seq, future in self._waiting.pop(key, ()):
            if not future.done():
                future.set_result(code)

    def cancel_all(self) -> None:
        for key in list(self._waiting):
            self.fail_all(key, ErrorCode.not_leader_or_follower)
