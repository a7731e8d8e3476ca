"""acks=all: produce requests wait here until their records are replicated to the ISR.

After the leader's append, a request with acks=-1 waits for each of its partitions until the
high watermark passes the partition's last appended offset (Kafka's ``DelayedProduce``). A
waiter completes with:

- NONE when the HW reached its offset and the ISR still satisfies ``min.insync.replicas``;
- NOT_ENOUGH_REPLICAS_AFTER_APPEND when the HW reached it but the ISR shrank below the
  minimum meanwhile (the records are stored, but on fewer replicas than asked);
- NONE as well when this broker, now a follower, learns from its leader that the HW passed
  the records while its log still holds them (they were replicated before leadership moved);
- NOT_LEADER_OR_FOLLOWER when the records left this broker's log: a follower truncating to its
  new leader's log removed them (they are not in the partition: the client may send them
  again), or the partition stopped here (StopReplica, topic deletion);
- REQUEST_TIMED_OUT when the request's timeout passes first (the handler's wait): their fate
  is still unknown ("possibly persisted" to a client).

For a client's Produce (``watch(..., outlive_leadership=True)``) losing leadership alone
answers nothing (Kafka's DelayedProduce answers NOT_LEADER_OR_FOLLOWER at once). Between the loss and the truncation the records' fate is undecided: the new leader
may have them, or this broker may lead again with them still in its log and commit them.
librdkafka takes NOT_LEADER_OR_FOLLOWER to mean "not persisted"; if it then bumps its
idempotent epoch (an OUT_OF_ORDER_SEQUENCE_NUMBER on a later in-flight batch: its "skipped
sequence numbers" recovery) it sends those records again under new sequence numbers, and a
record this broker did keep is written twice (librdkafka issue #4953, seen against Kafka too;
found here by the nemesis). So a waiter is answered only once its fate is known, or at its
timeout, whose REQUEST_TIMED_OUT a client treats as "possibly persisted" — when the new leader
is a broker this one knows of (its metadata); a leader it does not know can never tell it, so
then the answer is Kafka's, at once (the replica manager decides). The broker's own
writers (group, transaction and share-state coordinators, transaction markers) keep Kafka's
rule: their waiters are answered NOT_LEADER_OR_FOLLOWER when leadership is lost
(:meth:`DelayedProducePurgatory.leadership_lost`), as their coordinators unload then.

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
        #: key -> heap of (last offset, arrival, future, outlives leadership)
        self._waiting: dict[Hashable, list[tuple[int, int, asyncio.Future[ErrorCode], bool]]] = {}
        self._seq = itertools.count()
        #: the keys with waiters (read-only: lets a HW move skip :meth:`complete`, per
        #: request, when nobody waits)
        self.pending: Mapping[Hashable, object] = self._waiting

    def watch(self, key: Hashable, required_offset: int,
              outlive_leadership: bool = False) -> asyncio.Future[ErrorCode]:  # fmt: skip
        """A future resolved with the partition's outcome once the HW is past
        ``required_offset`` (the last offset appended, so HW > required_offset);
        ``outlive_leadership``: not answered when leadership is lost (module doc)."""
        future: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting.setdefault(key, []),
                       (required_offset, next(self._seq), future, outlive_leadership))  # fmt: skip
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
            future = heapq.heappop(heap)[2]
            if not future.done():
                future.set_result(code)
            done += 1
        if not heap:
            del self._waiting[key]
        return done

    def truncated(self, key: Hashable, log_end_offset: int, code: ErrorCode) -> int:
        """The log of ``key`` was cut to end at ``log_end_offset``: resolve with ``code`` the
        waiters whose records it removed (offset at or past the new end); returns how many."""
        heap = self._waiting.get(key)
        if not heap:
            return 0
        return self._resolve_where(key, heap, lambda w: w[0] >= log_end_offset, code)

    def leadership_lost(self, key: Hashable, code: ErrorCode) -> int:
        """This broker stopped leading ``key``: resolve with ``code`` the waiters that do not
        outlive leadership (the broker's own writers); returns how many."""
        heap = self._waiting.get(key)
        if not heap:
            return 0
        return self._resolve_where(key, heap, lambda w: not w[3], code)

    def _resolve_where(self, key: Hashable, heap: list[tuple[int, int, asyncio.Future[ErrorCode], bool]],
                       chosen: Callable[[tuple[int, int, asyncio.Future[ErrorCode], bool]], bool],
                       code: ErrorCode) -> int:  # fmt: skip
        kept = []
        for waiter in heap:
            if not chosen(waiter):
                kept.append(waiter)
            elif not waiter[2].done():
                waiter[2].set_result(code)
        if kept:
            heapq.heapify(kept)
            self._waiting[key] = kept
        else:
            del self._waiting[key]
        return len(heap) - len(kept)

    def fail_all(self, key: Hashable, code: ErrorCode) -> None:
        """Resolve every waiter of ``key`` with ``code`` (leadership lost, partition gone)."""
        for _offset, _seq, future, _outlives in self._waiting.pop(key, ()):
            if not future.done():
                future.set_result(code)

    def cancel_all(self) -> None:
        for key in list(self._waiting):
            self.fail_all(key, ErrorCode.not_leader_or_follower)
