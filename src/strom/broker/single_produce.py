"""One connection's fast path for single-partition Produce requests.

Nearly every request of a producer with ``linger.ms=0`` holds one topic with one partition.
:class:`SingleProducePath` recognises such a request from its frame
(:class:`strom.protocol.produce_fast.SingleProduceReader`), appends it through the Produce
handler's own code (:func:`strom.broker.handlers.produce.produce_single`: the same checks,
error codes and metrics) and answers it from a response template. Anything else is
:data:`NOT_SINGLE`, and the connection takes the generic path (``kio``, the dispatcher).

The connection (:mod:`strom.broker.server`) uses it in two places: in its task, before the
generic path, and in ``data_received`` itself while the task is idle, which saves the task's
wake-up, its future and the deferred write per request. A request answered there whose
response must wait (a ``flush.messages`` fsync, acks=all) goes to the task's queue as
:class:`Later`, in its place among the frames.
"""

from __future__ import annotations

import logging
from collections.abc import Coroutine
from time import perf_counter
from typing import TYPE_CHECKING, Any, Final

from strom.protocol.errors import KafkaError
from strom.protocol.produce_fast import ResponseTemplate, SingleProduceReader

if TYPE_CHECKING:
    from strom.broker.server import KafkaConnection
    from strom.broker.services import BrokerServices

log = logging.getLogger(__name__)
NOT_SINGLE: Final = object()
PRODUCE_KEY = 0
COALESCE_BYTES = 256 * 1024  # as the connection's own coalescing (strom.broker.server)


class SingleProducePath:
    __slots__ = ("_services", "_reader", "_templates", "_produce")

    def __init__(self, services: BrokerServices) -> None:
        # imported here: the handler module imports the broker, which imports the server
        from strom.broker.handlers.produce import produce_single

        self._services = services
        self._reader = SingleProduceReader()  # remembers the last request's layout
        self._templates: dict[tuple[int, str], ResponseTemplate] = {}
        self._produce = produce_single

    @property
    def full_parses(self) -> int:
        """Requests read the long way (a new layout: version, client, acks, topic...); the
        partition is not part of it, so round-robin over a topic's partitions costs one."""
        return self._reader.parses

    @property
    def templates(self) -> int:
        """Response templates kept: one per (version, topic), whatever the partitions."""
        return len(self._templates)

    def answer(self, frame: bytes) -> Any:
        """:data:`NOT_SINGLE`, or the answer to the single-partition Produce in ``frame``:
        the response frame, ``None`` (acks=0) or a coroutine returning the frame. Raises
        ``KafkaError`` for a failed acks=0 request (the connection is then closed)."""
        if not frame.startswith(b"\0\0"):  # api key 0
            return NOT_SINGLE
        single = self._reader.read(frame)
        if single is None:
            return NOT_SINGLE
        # the version is 3-12 (the reader's): its low byte
        return self._produce(self._services, frame[3], single, self._templates)


class Later:
    """In a connection's queue in place of a frame: a request answered inline whose response
    is ready only once ``answer`` (a coroutine) returns."""

    __slots__ = ("answer",)

    def __init__(self, answer: Coroutine[Any, Any, bytes]) -> None:
        self.answer = answer


def answer_inline(conn: KafkaConnection, frames: list[bytes]) -> list[bytes]:
    """Answer the leading one-partition Produce requests of ``frames`` in ``conn``'s
    ``data_received``, while its task is idle (waiting for frames, nothing queued, writes not
    paused), and return the frames left for the task, in order after these. The responses
    are written with one ``write`` before returning (the task would coalesce the same way).
    A request whose answer must wait goes to the task's queue as :class:`Later`, ahead of the
    frames after it, and wakes the task."""
    now = perf_counter()
    done = 0
    out, out_bytes = conn.out, conn.out_bytes  # in request order after what is pending
    try:
        for frame in frames:
            answer = conn.single.answer(frame)
            if answer is NOT_SINGLE:
                break
            done += 1
            if answer is not None and not isinstance(answer, bytes):
                conn.queue.append(Later(answer))
                conn.arrivals.append(now)
                assert conn.waiter is not None
                conn.waiter.set_result(None)
                break
            conn.metrics.request_done(PRODUCE_KEY, now, now, perf_counter(), 0.0)
            conn.handled += 1
            if answer is not None:
                out.append(answer)
                out_bytes += len(answer)
                if out_bytes >= COALESCE_BYTES:
                    conn.flush()
                    out, out_bytes = conn.out, 0
    except KafkaError as exc:  # only a failed acks=0 request: Kafka closes the connection
        log.info("closing connection %s from %s: %s", conn.id, conn.peer[0], exc)
        conn.flush()
        conn.close()
        return []
    except Exception:
        log.exception("closing connection %s after an internal error", conn.id)
        conn.flush()
        conn.close()
        return []
    conn.out_bytes = out_bytes
    conn.flush()
    return frames[done:]
