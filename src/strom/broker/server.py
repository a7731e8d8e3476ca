"""The asyncio transport of a client connection: the connection core on a socket.

:class:`KafkaConnection` feeds the bytes it receives to its
:class:`~strom.broker.connection.ConnectionCore` and hands each decoded request to its handler
through one entry, :meth:`KafkaConnection.begin`, one request at a time, answering in request
order (Kafka's contract; clients pipeline but rely on the order). Reading pauses when too many
requests are queued or the socket's write buffer is full, so one fast or stuck client cannot
exhaust memory. What the core refuses (a malformed or oversize frame, an API version not
served) closes only this connection. Anything escaping a handler (or the encoding of its
response) is answered with Kafka's per-API error response and one log line: the connection
stays open. Nothing but a Kafka response ever goes on the wire.

Where requests are handled: a handler answers at once or returns a coroutine. Produce requests
(the Produce handler answers at once unless something has to wait) are begun right in
``data_received`` while the connection is idle (its task waiting for frames, nothing queued,
writes not paused), which saves the task's wake-up and the deferred write per request; a
request whose answer must wait (a ``flush.messages`` fsync, acks=all) goes to the task's queue
as :class:`Pending`, ahead of the frames after it. Every other frame is begun by the task, in
order, and its coroutine awaited there.

Responses are coalesced: those produced while the connection's task runs without yielding
(pipelined requests handled back to back) are written with one ``write`` when it yields
(``call_soon``), or at :data:`COALESCE_BYTES`. A send on loopback costs as much as handling a
small Produce request, so a saturated broker halves its CPU per request this way, and a
response still leaves as soon as the loop is free: a handler that waits (a long-polling Fetch)
yields, which flushes what is pending before the wait.

A Fetch response may come back as a spliced frame (bytes and file regions,
:mod:`strom.broker.zero_copy`). It is sent with ``sendfile`` directly on the socket once the
transport's own write buffer is empty (so the two never interleave), and the transport writes
again only after the whole frame is out. Without a plain socket the regions are read into bytes.

Client quotas (:mod:`strom.broker.throttling`): while some entity has a quota, every answer
is recorded in the client's quotas before it is encoded; one that earned a throttle time
carries it (``throttle_time_ms``) and the connection is muted for that long: reading paused,
queued requests not begun (Kafka's throttled channel). With no quota set this costs the
Produce fast path one attribute test.

Request metrics (:mod:`strom.broker.observability.metrics`) cost a few float additions per
request: each frame's arrival time is kept beside it, and the time from then to the handler
(queue), in the handler (local) and parked in the purgatory (remote, ``ctx.remote_time``) is
added to its API's counters; error codes are counted where they are already known (the
handler boundary, a kio response's top-level ``error_code``, Produce/Fetch partitions).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from time import perf_counter
from types import CoroutineType
from typing import TYPE_CHECKING, Any, cast

from strom.broker import throttling, zero_copy
from strom.broker.connection import CloseConnection, ConnectionCore, Invalid, Request
from strom.broker.context import Client, RequestContext
from strom.protocol.errors import ErrorCode, KafkaError, error_code_of
from strom.protocol.framing import FrameTooLargeError
from strom.protocol.produce_fast import OnePartition

if TYPE_CHECKING:
    from collections.abc import Coroutine

    from strom.broker.services import BrokerServices
    from strom.security.listeners import ListenerSpec
    from strom.security.tls import ServerTls

log = logging.getLogger(__name__)
_connection_ids = itertools.count(1)
MAX_QUEUED_REQUESTS = 64
COALESCE_BYTES = 256 * 1024
_new = tuple.__new__  # a NamedTuple from a plain tuple (per request: no keyword handling)
#: a frame, a frame in parts (a Fetch answer's large records, not copied), a frame whose records
#: stay in the files, or no answer
Answer = bytes | list[bytes] | zero_copy.SplicedResponse | None


class Pending:
    """A request begun whose answer is ready only once ``answer`` (its handler's coroutine)
    returns; in the task's queue in its place among the frames when begun inline."""

    __slots__ = ("request", "ctx", "answer", "arrived", "started", "size")

    def __init__(self, request: Request, ctx: RequestContext, answer: Coroutine[Any, Any, Any],
                 arrived: float, started: float, size: int) -> None:  # fmt: skip
        self.request = request
        self.ctx = ctx
        self.answer = answer
        self.arrived = arrived
        self.started = started
        self.size = size  # the request frame's (the produce byte-rate quota records it)


class KafkaConnection(asyncio.Protocol):
    def __init__(self, services: BrokerServices, connections: set[KafkaConnection],
                 listener: ListenerSpec | None = None, tls: ServerTls | None = None) -> None:  # fmt: skip
        self.services = services
        #: the listener this connection came in on (None: a test's bare connection, PLAINTEXT)
        self.listener = listener
        self.tls = tls  # a TLS listener's: the client certificate names an SSL connection
        self.connections = connections  # the broker's open connections (shutdown drains them)
        self.id = next(_connection_ids)
        self.core = ConnectionCore(services.config.get_int("socket.request.max.bytes"))
        self.templates = self.core.templates
        self.queue: deque[bytes | Pending] = deque()
        self.waiter: asyncio.Future[None] | None = None  # set while the task waits for frames
        self.out: list[bytes] = []  # responses not yet written, in request order
        self.out_bytes = 0
        self.can_write = asyncio.Event()
        self.can_write.set()
        self.transport: asyncio.Transport | None = None
        self.task: asyncio.Task[None] | None = None
        self.reading_paused = False
        self.peer: tuple[str, int] = ("?", 0)
        self.client = self._client("?", 0)
        self.sender: zero_copy.SocketSender | None = None
        self.sock_fd: int | None = None
        # request metrics (strom.broker.observability.metrics): when each queued frame arrived
        self.metrics = services.metrics
        self.arrivals: deque[float] = deque()
        self.handled = 0  # requests handled (listener.drain: answered since the shutdown began)
        # client quotas (strom.broker.throttling): used only while some quota is set
        self.quotas = services.quotas.quotas
        self.quota_user = throttling.QuotaUser()
        self.muted = False  # throttled: not read, queued requests not begun (Kafka's mute)
        self.muted_until = 0.0  # loop time
        self.throttle_ms = -1  # recorded for the request being answered (-1: not yet)
        self.handler_busy_s = -1.0  # the running time of a handler that waited (-1: none)

    def _client(self, host: str, port: int) -> Client:
        spec = self.listener
        if spec is None:
            return Client(host, port, self.id)
        return Client(host, port, self.id, listener=spec.name,
                      security_protocol=spec.security_protocol)  # fmt: skip

    @property
    def listener_name(self) -> str:
        """The name of the listener this connection came in on (its metrics' label)."""
        return self.listener.name if self.listener is not None else "PLAINTEXT"

    # asyncio.Protocol callbacks -------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.peer = (str(peer[0]), int(peer[1]))
            self.client = self._client(*self.peer)
        self.sock_fd = zero_copy.socket_fd(transport)
        self.connections.add(self)
        created = self.metrics.connections_created  # connection_lost counts it closed, refused
        created[self.listener_name] = created.get(self.listener_name, 0) + 1  # or not
        log.debug("connection %s from %s:%s", self.id, *self.peer)
        if self.tls is not None and self.client.security_protocol == "SSL":
            try:  # SASL_SSL: SASL names the principal
                self.client.principal = self.tls.principal(transport.get_extra_info("ssl_object"))
            except ValueError as exc:  # no ssl.principal.mapping.rules rule applies
                log.warning("refusing connection %s from %s: %s", self.id, self.peer[0], exc)
                transport.close()  # before any request is read: no task to handle one
                return
            log.debug("connection %s from %s: TLS principal %s", self.id, self.peer[0],
                      self.client.principal)  # fmt: skip
        self.task = asyncio.get_running_loop().create_task(self.process())

    def data_received(self, data: bytes) -> None:
        try:
            frames = self.core.receive(data)
        except FrameTooLargeError as exc:
            log.warning("closing connection %s from %s: %s", self.id, self.peer[0], exc)
            self.close()
            return
        if not frames:
            return
        now = perf_counter()
        waiter = self.waiter
        if waiter is not None and not waiter.done() and not self.queue and self.can_write.is_set():
            frames = self._begin_inline(frames, now)  # the task is idle: answer here
            if not frames:
                return
        self.queue.extend(frames)
        if len(frames) == 1:
            self.arrivals.append(now)
        else:
            self.arrivals.extend([now] * len(frames))
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        if len(self.queue) >= MAX_QUEUED_REQUESTS and not self.reading_paused:
            self.reading_paused = True
            assert self.transport is not None
            if not self.muted:
                self.transport.pause_reading()

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        log.debug("connection %s from %s:%s closed", self.id, *self.peer)
        self.connections.discard(self)
        closed = self.metrics.connections_closed
        closed[self.listener_name] = closed.get(self.listener_name, 0) + 1
        self.services.shares.connection_closed(self.id)  # its share sessions end with it
        self.can_write.set()
        if self.task is not None:
            self.task.cancel()

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()

    # writing -------------------------------------------------------------------------------
    def close(self) -> None:
        """Close after writing the responses already made (the transport sends its buffer)."""
        self.flush()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    @property
    def idle(self) -> bool:
        """No request read and unanswered, no response unwritten."""
        return not self.queue and not self.out and (self.waiter is not None or self.task is None
                                                    or self.task.done())  # fmt: skip

    def queue_response(self, data: bytes) -> None:
        """Write ``data`` after the responses before it, once the task yields (see above)."""
        if not self.out:
            asyncio.get_running_loop().call_soon(self.flush)
        self.out.append(data)
        self.out_bytes += len(data)
        if self.out_bytes >= COALESCE_BYTES:
            self.flush()

    def flush(self) -> None:
        """Write every pending response now."""
        out = self.out
        if not out:
            return
        self.out = []
        self.out_bytes = 0
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))

    # handling --------------------------------------------------------------------------------
    def begin(self, frame: bytes, arrived: float) -> Answer | Pending:
        """Decode ``frame`` and hand its request to its handler: the answer frame, None (no
        answer: acks=0), or :class:`Pending` when the handler must wait. The one entry of
        every request; raises :class:`CloseConnection`."""
        event = self.core.decode(frame)
        if not isinstance(event, Request):
            return self._answer_event(event)
        header = event[0]
        ctx: RequestContext = _new(RequestContext, (header, self.services, self.client))
        started = perf_counter()
        try:
            response = event[1].fn(ctx, event[2])
        except Exception as exc:  # the handler boundary: every request gets an answer
            response = exc
        if type(response) is OnePartition:  # nearly every request: answered right here
            if self.quotas.active:  # measured here: the template still answers when unthrottled
                ms = self._record_quotas(event, response, len(frame), started)
                if ms:
                    self.throttle_ms = ms
                    return self._answer(event, ctx, response, arrived, started, len(frame))
            answer = self.templates.one(header[1], header[2], response)
            self.handled += 1
            self.metrics.request_done(0, arrived, started, perf_counter(), 0.0)
            return answer
        if type(response) is CoroutineType:
            return Pending(event, ctx, response, arrived, started, len(frame))
        return self._answer(event, ctx, response, arrived, started, len(frame))

    def _answer_event(self, event: Invalid | bytes) -> bytes:
        """The answer to an event that needs no handler (see :meth:`ConnectionCore.decode`)."""
        if type(event) is bytes:  # answered without a handler
            self.handled += 1
            return event
        if type(event) is Invalid:
            log.info("connection %s from %s: api key %s v%s: %s; answering INVALID_REQUEST",
                     self.id, self.peer[0], event.header.api_key, event.header.api_version,
                     event.message)  # fmt: skip
            self.metrics.request_error(event.header.api_key, ErrorCode.invalid_request)
            self.handled += 1
            return self.core.error_answer(event.header, event.body, ErrorCode.invalid_request,
                                          event.message)  # fmt: skip
        raise TypeError(f"not an event: {event!r}")

    async def complete(self, pending: Pending) -> Answer:
        """The answer of a request whose handler had to wait."""
        response: Any
        timed = None
        if self.quotas.request.enabled:  # request_percentage: the time it ran, not its waits
            timed = throttling.BusyTime(pending.answer)
        try:
            response = await (pending.answer if timed is None else timed)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the handler boundary
            response = exc
        if timed is None:
            return self._answer(pending.request, pending.ctx, response, pending.arrived,
                                pending.started, pending.size)  # fmt: skip
        self.handler_busy_s = timed.busy_s
        try:
            return self._answer(pending.request, pending.ctx, response, pending.arrived,
                                pending.started, pending.size)  # fmt: skip
        finally:
            self.handler_busy_s = -1.0

    def _answer(self, request: Request, ctx: RequestContext, response: Any, arrived: float,
                started: float, size: int) -> Answer:  # fmt: skip
        header = request[0]
        api_key = header[0]
        try:
            answer: Answer = None
            if isinstance(response, Exception):
                raise response
            if self.quotas.active:
                response = self._throttle(request, response, size, started)
            if response is not None:
                code = getattr(response, "error_code", 0)  # the top-level code of kio responses
                if code:
                    self.metrics.request_error(api_key, code)
                answer = self.core.encode(header, response)
        except CloseConnection:
            raise
        except Exception as exc:  # the handler boundary: every request gets an answer
            code = error_code_of(exc)
            self.metrics.request_error(api_key, code)
            if isinstance(exc, KafkaError):
                log.info("connection %s: api key %s v%s: %s: %s", self.id, api_key,
                         header.api_version, code.name.upper(), exc)  # fmt: skip
            else:
                log.error("connection %s: api key %s v%s failed (%s): %s: %s", self.id, api_key,
                          header.api_version, _where(exc), type(exc).__name__, exc)  # fmt: skip
            answer = self.core.error_answer(header, request.body, code, str(exc) or code.name)
        self.handled += 1
        client = self.client
        self.metrics.request_done(api_key, arrived, started, perf_counter(), client.remote_s)
        client.remote_s = 0.0  # for the next request (only a Pending request adds to it)
        return answer

    def _record_quotas(self, request: Request, response: Any, size: int,
                       started: float) -> int:  # fmt: skip
        """Record ``request`` in the client's quotas; the throttle time it earned."""
        header = request[0]
        handler_s = self.handler_busy_s
        if handler_s < 0:
            handler_s = perf_counter() - started
        self.handler_busy_s = -1.0
        ms = throttling.record(self.quotas, self.quota_user.of(self.client.principal),
                               header[3] or "", header[0], header[1], request[2], response,
                               size, handler_s, int(self.services.clock.monotonic() * 1000))  # fmt: skip
        return ms

    def _throttle(self, request: Request, response: Any, size: int, started: float) -> Any:
        """The response carrying the throttle time ``request`` earned (recorded now, or
        already by :meth:`begin`, which left it in ``throttle_ms``), and the connection muted
        for that long."""
        ms = self.throttle_ms
        if ms < 0:
            ms = self._record_quotas(request, response, size, started)
        self.throttle_ms = -1
        if ms <= 0:
            return response
        self.mute(ms)
        header = request[0]
        return None if response is None else throttling.with_throttle(header[0], header[1],
                                                                        response, ms)  # fmt: skip

    def mute(self, ms: int) -> None:
        """Read nothing and begin no queued request for ``ms`` (Kafka's throttled channel:
        the response already made is still written)."""
        loop = asyncio.get_running_loop()
        until = loop.time() + ms / 1000.0
        if until <= self.muted_until:
            return
        self.muted_until = until
        if not self.muted:
            self.muted = True
            if self.transport is not None and not self.reading_paused:
                self.transport.pause_reading()
        loop.call_at(until, self._unmute)

    def _unmute(self) -> None:
        # call_at may run a little early (the loop's clock resolution): 2 ms of slack
        if not self.muted or asyncio.get_running_loop().time() + 0.002 < self.muted_until:
            return  # a longer mute came after this one: its own call ends it
        self._end_mute()

    def _end_mute(self) -> None:
        self.muted = False
        transport = self.transport
        if transport is not None and not transport.is_closing() and not self.reading_paused:
            transport.resume_reading()

    def _begin_inline(self, frames: list[bytes], now: float) -> list[bytes]:
        """Answer the leading Produce requests of ``frames`` here, in ``data_received``, while
        the task is idle (module doc); the frames left for the task, in order after these.
        The responses are written with one ``write`` before returning (the task would coalesce
        the same way). A request whose answer must wait goes to the task's queue as
        :class:`Pending`, ahead of the frames after it, and wakes the task."""
        done = 0
        out, out_bytes = self.out, self.out_bytes  # in request order after what is pending
        try:
            for frame in frames:
                if not frame.startswith(b"\0\0") or self.muted:  # only Produce, unthrottled
                    break
                answer = self.begin(frame, now)
                done += 1
                if type(answer) is Pending:
                    self.queue.append(answer)
                    self.arrivals.append(now)
                    assert self.waiter is not None
                    self.waiter.set_result(None)
                    break
                if answer is not None:
                    out.append(answer)  # type: ignore[arg-type]  # Produce answers are frames
                    out_bytes += len(answer)  # type: ignore[arg-type]
                    if out_bytes >= COALESCE_BYTES:
                        self.flush()
                        out, out_bytes = self.out, 0
        except CloseConnection as exc:  # a failed acks=0 request, an unserved version
            log.info("closing connection %s from %s: %s", self.id, self.peer[0], exc)
            self.close()
            return []
        except Exception:
            log.exception("closing connection %s after an internal error", self.id)
            self.close()
            return []
        self.out_bytes = out_bytes
        self.flush()
        return frames[done:]

    async def process(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                if not self.queue:
                    # a bare future: cheaper than an asyncio.Event, and this runs per request
                    self.waiter = loop.create_future()
                    await self.waiter
                    self.waiter = None
                    continue
                if not self.can_write.is_set():
                    self.flush()
                    await self.can_write.wait()
                if self.muted:  # throttled: the next request waits (what is answered goes out)
                    delay = self.muted_until - loop.time()
                    if delay > 0:
                        await asyncio.sleep(delay)
                        continue
                    self._end_mute()
                item = self.queue.popleft()
                arrived = self.arrivals.popleft()
                if self.reading_paused and len(self.queue) < MAX_QUEUED_REQUESTS // 2:
                    self.reading_paused = False
                    assert self.transport is not None
                    if not self.muted:
                        self.transport.resume_reading()
                answer = self.begin(item, arrived) if type(item) is bytes else item
                if type(answer) is Pending:
                    answer = await self.complete(answer)
                if answer is None:
                    continue
                if self.transport is None or self.transport.is_closing():
                    if isinstance(answer, zero_copy.SplicedResponse):
                        answer.close()
                    return
                if type(answer) is list:
                    self.flush()
                    self.transport.writelines(answer)  # no join: uvloop writes them vectored
                    continue
                if isinstance(answer, zero_copy.SplicedResponse):
                    self.flush()
                    await self.send_spliced(answer)
                    continue
                self.queue_response(cast(bytes, answer))
        except asyncio.CancelledError:
            pass
        except zero_copy.RegionReadError as exc:  # mid-frame: the stream cannot be resumed
            log.warning("closing connection %s: fetch data unreadable: %s", self.id, exc)
            self.close()
        except CloseConnection as exc:
            log.info("closing connection %s from %s: %s", self.id, self.peer[0], exc)
            self.flush()  # the answers to the requests before this one
            self.close()
        except (BrokenPipeError, ConnectionResetError) as exc:  # the client hung up: no trace
            log.info("connection %s from %s: client hung up (%s)", self.id, self.peer[0],
                     exc.strerror or type(exc).__name__)
            self.close()
        except Exception:
            log.exception("closing connection %s after an internal error", self.id)
            self.flush()
            self.close()
        finally:
            if self.sender is not None:
                self.sender.close()  # our duplicate of the socket fd: the socket closes with it
                self.sender = None

    async def send_spliced(self, response: zero_copy.SplicedResponse) -> None:
        """Send a Fetch response whose records stay in the segment files."""
        assert self.transport is not None
        try:
            parts = response.parts
            if self.sock_fd is None:  # TLS: each part encrypted from its own buffer, no join
                self.transport.writelines(zero_copy.read_parts(parts))
                if not self.can_write.is_set():
                    await self.can_write.wait()
                return
            await self.drain_transport()
            if self.transport.is_closing():
                return
            if self.sender is None:
                self.sender = zero_copy.SocketSender(self.sock_fd)
            await self.sender.send(parts)
        finally:
            response.close()

    async def drain_transport(self) -> None:
        """Return once the transport's write buffer is empty (or the transport closes).

        The low-water mark is set to 0 meanwhile, so ``resume_writing`` means "empty"."""
        transport = self.transport
        assert transport is not None
        if transport.get_write_buffer_size() == 0:
            return
        high, low = transport.get_write_buffer_limits()
        transport.set_write_buffer_limits(high=0, low=0)  # pauses the protocol if not empty
        try:
            while transport.get_write_buffer_size() > 0 and not transport.is_closing():
                if self.can_write.is_set():
                    await asyncio.sleep(0.001)  # a loop that did not pause us: poll
                else:
                    await self.can_write.wait()
        finally:
            transport.set_write_buffer_limits(high=high, low=low)


def _where(exc: BaseException) -> str:
    """``file:line`` of the innermost frame of ``exc``: enough to find a bug, in one line."""
    tb = exc.__traceback__
    if tb is None:
        return "?"
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    return f"{code.co_filename.rsplit('/', 1)[-1]}:{tb.tb_lineno} in {code.co_name}"
