"""acks=all Produce requests that wait for replication while their connection goes on.

Kafka takes up one request per connection at a time: its network layer mutes a connection
until the answer to its request is sent. An acks=all Produce request therefore holds its
connection for a whole replication round trip (leader append, followers' Fetch, their next
Fetch moving the high watermark), and a producer's pipelined requests (librdkafka and the Java
client keep up to 5 in flight) each pay one round trip after the other. On a machine whose
cores are shared by the brokers and the client, every hop of that round trip waits for a
process to be scheduled, so the producer's throughput is a batch per round trip.

strom lets a Produce handler that has appended its records and has only the wait for the high
watermark left hand that wait back (:class:`DeferredResponse`); the connection then takes up
the next request while it waits (:class:`DeferredAnswers`). The followers fetch what several
requests appended in one Fetch, and one high-watermark move answers them all.

Invariants (what clients rely on stays Kafka's):

- answers leave in request order: an answer waits for every earlier one;
- appends happen in request order: a request's appends are done before the next request is
  taken up (the handler defers only after them), so the producer's sequence numbers, the
  offsets and the ISR / ``min.insync.replicas`` checks see what Kafka's would;
- only a Produce request overlaps an earlier deferred one: any other request is taken up once
  every earlier answer is out, exactly as in Kafka;
- at most :data:`MAX_DEFERRED` deferred answers per connection (clients' max in flight);
- a deferred wait ends as the handler's own would (replicated, an error code, or the request's
  timeout); closing the connection cancels the waits (the records stay appended, as a
  client that hangs up in Kafka finds them).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from time import perf_counter
from typing import Any

log = logging.getLogger(__name__)
MAX_DEFERRED = 5


@dataclass(slots=True)
class DeferredResponse:
    """What a handler returns instead of its response when only a wait is left: ``wait``
    returns the response (a coroutine not started yet)."""

    wait: Coroutine[Any, Any, Any]


@dataclass(slots=True)
class _Pending:
    task: asyncio.Task[bytes]
    api_key: int
    arrived: float  # perf_counter times, for the request metrics
    started: float
    deferred: float


class DeferredAnswers:
    """A connection's deferred answers, written in request order as they complete.

    ``write`` queues an encoded answer on the connection, ``done`` records a request's
    metrics (api key, arrived, started, ended, seconds waited), ``fail`` closes the
    connection after an answer that could not be made (a bug: handlers answer errors)."""

    def __init__(self, write: Callable[[bytes], None],
                 done: Callable[[int, float, float, float, float], None],
                 fail: Callable[[BaseException], None]) -> None:  # fmt: skip
        self._write = write
        self._done = done
        self._fail = fail
        self._pending: deque[_Pending] = deque()

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, task: asyncio.Task[bytes], api_key: int, arrived: float, started: float
            ) -> None:  # fmt: skip
        self._pending.append(_Pending(task, api_key, arrived, started, perf_counter()))
        task.add_done_callback(self._completed)

    def _completed(self, _task: object = None) -> None:
        """Write every answer at the head that is ready (a later one waits for its elders)."""
        pending = self._pending
        while pending and pending[0].task.done():
            item = pending.popleft()
            if item.task.cancelled():
                continue
            exc = item.task.exception()
            if exc is not None:
                self.cancel()
                self._fail(exc)
                return
            ended = perf_counter()
            self._done(item.api_key, item.arrived, item.started, ended, ended - item.deferred)
            self._write(item.task.result())

    async def drain(self) -> None:
        """Return once every deferred answer is written (or the waits are cancelled)."""
        while self._pending:
            await asyncio.wait([p.task for p in self._pending])
            self._completed()  # done callbacks may not have run yet

    def cancel(self) -> None:
        """The connection is closing: its waits end, their answers are not written."""
        pending, self._pending = self._pending, deque()
        for item in pending:
            item.task.cancel()
