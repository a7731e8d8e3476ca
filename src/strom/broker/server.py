"""The network server: one asyncio protocol per client connection.

Per connection, requests are handled strictly one after another and answered in request order
(Kafka's contract; clients pipeline but rely on the order). Incoming bytes are framed as they
arrive; reading pauses when too many requests are queued or the socket's write buffer is full,
so one fast or stuck client cannot exhaust memory. A malformed frame (a declared length beyond
the frame included: nothing reaches ``kio``'s reader unchecked), an oversize frame or an API
version not served closes only that connection; the version is checked from the 8-byte
prefix before anything is decoded. A well-formed request with a null the schema forbids is
answered INVALID_REQUEST, and anything escaping a handler (or the encoding of its response)
is answered with Kafka's per-API error response and one log line: the connection stays open.
Nothing but a Kafka response ever goes on the wire.

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
from typing import TYPE_CHECKING, Any, cast

from strom.broker import dispatch, zero_copy
from strom.broker.context import RequestContext
from strom.broker.single_produce import NOT_SINGLE, Later, SingleProducePath, answer_inline
from strom.protocol import hot_path
from strom.protocol.error_response import error_response
from strom.protocol.errors import ErrorCode, KafkaError, error_code_of
from strom.protocol.fetch_encoding import encode_spliced
from strom.protocol.framing import FrameDecoder, FrameTooLargeError
from strom.protocol.messages import (
    API_VERSIONS_KEY,
    InvalidRequestError,
    ProtocolError,
    RequestHeader,
    decode_request,
    encode_response,
    peek_header,
    response_class,
)

if TYPE_CHECKING:
    from strom.broker.services import BrokerServices

log = logging.getLogger(__name__)
_connection_ids = itertools.count(1)
MAX_QUEUED_REQUESTS = 64
PRODUCE_KEY = 0
COALESCE_BYTES = 256 * 1024


class KafkaConnection(asyncio.Protocol):
    def __init__(self, services: BrokerServices, connections: set[KafkaConnection]) -> None:
        self.services = services
        self.connections = connections  # the broker's open connections (shutdown drains them)
        self.id = next(_connection_ids)
        self.decoder = FrameDecoder(services.config.get_int("socket.request.max.bytes"))
        self.queue: deque[bytes | Later] = deque()
        self.waiter: asyncio.Future[None] | None = None  # set while the task waits for frames
        self.out: list[bytes] = []  # responses not yet written, in request order
        self.out_bytes = 0
        self.can_write = asyncio.Event()
        self.can_write.set()
        self.transport: asyncio.Transport | None = None
        self.task: asyncio.Task[None] | None = None
        self.reading_paused = False
        self.peer: tuple[str, int] = ("?", 0)
        self.sender: zero_copy.SocketSender | None = None
        self.sock_fd: int | None = None
        # request metrics (strom.broker.observability.metrics): when each queued frame
        # arrived, and the API key and purgatory time of the request being handled
        self.metrics = services.metrics
        self.arrivals: deque[float] = deque()
        self.api_key = -1
        self.remote = 0.0
        self.single = SingleProducePath(services)  # one-partition Produce requests
        self.handled = 0  # requests handled (listener.drain: answered since the shutdown began)

    # asyncio.Protocol callbacks -------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.peer = (str(peer[0]), int(peer[1]))
        self.sock_fd = zero_copy.socket_fd(transport)
        self.connections.add(self)
        self.metrics.connections_created += 1
        log.debug("connection %s from %s:%s", self.id, *self.peer)
        self.task = asyncio.get_running_loop().create_task(self.process())

    def data_received(self, data: bytes) -> None:
        try:
            frames = self.decoder.feed(data)
        except FrameTooLargeError as exc:
            log.warning("closing connection %s from %s: %s", self.id, self.peer[0], exc)
            self.close()
            return
        if frames:
            waiter = self.waiter
            if (waiter is not None and not waiter.done() and not self.queue
                    and self.can_write.is_set()):  # fmt: skip
                frames = answer_inline(self, frames)  # the task is idle: answer here
                if not frames:
                    return
            self.queue.extend(frames)
            now = perf_counter()
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
                self.transport.pause_reading()

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        log.debug("connection %s from %s:%s closed", self.id, *self.peer)
        self.connections.discard(self)
        self.metrics.connections_closed += 1
        self.services.shares.connection_closed(self.id)  # its share sessions end with it
        self.can_write.set()
        if self.task is not None:
            self.task.cancel()

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()

    # request loop ----------------------------------------------------------------------------
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
                frame = self.queue.popleft()
                arrived = self.arrivals.popleft()
                if isinstance(frame, Later):  # a Produce answered inline, waiting
                    answer = await frame.answer
                    self.metrics.request_done(PRODUCE_KEY, arrived, arrived, perf_counter(), 0.0)
                    self.handled += 1
                    self.queue_response(answer)
                    continue
                if self.reading_paused and len(self.queue) < MAX_QUEUED_REQUESTS // 2:
                    self.reading_paused = False
                    assert self.transport is not None
                    self.transport.resume_reading()
                started = perf_counter()
                try:
                    answer = self.single.answer(frame)
                except KafkaError as exc:  # only a failed acks=0 request
                    raise _CloseConnection(str(exc)) from None
                if answer is not NOT_SINGLE:  # a one-partition Produce (single_produce.py)
                    if answer is not None and not isinstance(answer, bytes):
                        answer = await answer  # it waits for an fsync or for replication
                    self.metrics.request_done(PRODUCE_KEY, arrived, started, perf_counter(), 0.0)
                    self.handled += 1
                    if answer is not None:
                        transport = self.transport
                        if transport is None or transport.is_closing():
                            return
                        self.queue_response(answer)
                    continue
                self.api_key = -1
                self.remote = 0.0
                response = await self.handle(frame)
                self.handled += 1
                if self.api_key >= 0:  # a request of a served API, answered (or not: acks=0)
                    self.metrics.request_done(self.api_key, arrived, started, perf_counter(),
                                              self.remote)  # fmt: skip
                if response is None:
                    continue
                if self.transport is None or self.transport.is_closing():
                    if isinstance(response, zero_copy.SplicedResponse):
                        response.close()
                    return
                if isinstance(response, zero_copy.SplicedResponse):
                    self.flush()
                    await self.send_spliced(response)
                    continue
                self.queue_response(response)
        except asyncio.CancelledError:
            pass
        except zero_copy.RegionReadError as exc:  # mid-frame: the stream cannot be resumed
            log.warning("closing connection %s: fetch data unreadable: %s", self.id, exc)
            self.close()
        except _CloseConnection as exc:
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
            if self.sock_fd is None:
                self.transport.write(zero_copy.materialize(parts))
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

    async def handle(self, frame: bytes) -> bytes | zero_copy.SplicedResponse | None:
        try:
            peeked = peek_header(frame)
        except ProtocolError as exc:
            raise _CloseConnection(str(exc)) from None
        api_key, api_version, correlation_id = peeked
        # Whether the version is served is decided before a byte of the body is decoded.
        spec = dispatch.lookup(api_key)
        if spec is None or not spec.serves(api_version):
            if api_key == API_VERSIONS_KEY:
                return unsupported_api_versions_response(correlation_id)
            raise _CloseConnection(f"api key {api_key} v{api_version} is not served")
        self.api_key = api_key
        try:
            header, request = decode_request(frame, peeked)
        except InvalidRequestError as exc:
            log.info(
                "connection %s from %s: api key %s v%s: %s; answering INVALID_REQUEST",
                self.id, self.peer[0], api_key, api_version, exc,
            )  # fmt: skip
            self.metrics.request_error(api_key, ErrorCode.invalid_request)
            return self.error_answer(exc.header, exc.request, ErrorCode.invalid_request, str(exc))
        except ProtocolError as exc:
            raise _CloseConnection(str(exc)) from None
        ctx = RequestContext(header, self.services, self.peer[0], self.peer[1], self.id)
        try:
            # What a response acknowledges is durable: every metadata-store write is a
            # coroutine that returns once its change is fsynced / committed by ZooKeeper.
            try:
                response = await spec.fn(ctx, request)
            finally:
                self.remote = ctx.remote_time
            if response is None:
                return None
            # Produce and Fetch answer with plain tuples that strom.protocol.hot_path encodes.
            if isinstance(response, hot_path.ProduceResponse):
                return hot_path.produce_frame(api_version, correlation_id, response)
            if isinstance(response, hot_path.EncodedBody):
                return hot_path.body_frame(correlation_id, response)
            if isinstance(response, hot_path.FetchResponse):
                return b"".join(hot_path.fetch_frame(api_version, correlation_id, response))
            if isinstance(response, zero_copy.SplicedResponse):
                try:
                    if isinstance(response.response, hot_path.FetchResponse):
                        response.parts = hot_path.fetch_frame(
                            api_version, correlation_id, response.response
                        )
                    else:
                        response.parts = encode_spliced(
                            header.api_key, header.api_version, header.correlation_id,
                            response.response, response.regions,
                        )  # fmt: skip
                except BaseException:
                    response.close()
                    raise
                return response
            code = getattr(response, "error_code", 0)  # the top-level code of kio responses
            if code:
                self.metrics.request_error(api_key, code)
            return encode_response(
                header.api_key, header.api_version, header.correlation_id, response
            )
        except Exception as exc:  # the handler boundary: every request gets an answer
            code = error_code_of(exc)
            self.metrics.request_error(api_key, code)
            if isinstance(exc, KafkaError):
                log.info(
                    "connection %s: api key %s v%s: %s: %s",
                    self.id, api_key, api_version, code.name.upper(), exc,
                )  # fmt: skip
            else:
                log.error(
                    "connection %s: api key %s v%s failed (%s): %s: %s",
                    self.id, api_key, api_version, _where(exc), type(exc).__name__, exc,
                )  # fmt: skip
            return self.error_answer(header, request, code, str(exc) or code.name)

    def error_answer(
        self, header: RequestHeader, request: Any, code: ErrorCode, message: str
    ) -> bytes:
        """Answer ``request`` with ``code`` (Kafka's ``getErrorResponse``).

        A Produce with acks=0 expects no answer: as Kafka does, the connection is closed so
        the producer learns of the failure."""
        if header.api_key == PRODUCE_KEY and getattr(request, "acks", None) == 0:
            raise _CloseConnection(f"acks=0 produce failed: {message}")
        cls = response_class(header.api_key, header.api_version)
        response = error_response(cls, request, code, message)
        return encode_response(header.api_key, header.api_version, header.correlation_id, response)


def _where(exc: BaseException) -> str:
    """``file:line`` of the innermost frame of ``exc``: enough to find a bug, in one line."""
    tb = exc.__traceback__
    if tb is None:
        return "?"
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    return f"{code.co_filename.rsplit('/', 1)[-1]}:{tb.tb_lineno} in {code.co_name}"


class _CloseConnection(Exception):
    pass


def unsupported_api_versions_response(correlation_id: int) -> bytes:
    """ApiVersions v0 format, UNSUPPORTED_VERSION, with the full API list (so the client can
    retry with a version we serve)."""
    from kio.schema.api_versions.v0.response import ApiVersion, ApiVersionsResponse
    from kio.static.primitive import i16

    response = ApiVersionsResponse(
        error_code=ErrorCode.unsupported_version,
        api_keys=tuple(
            ApiVersion(
                api_key=i16(s.api_key), min_version=i16(s.advertise_min), max_version=i16(s.advertised_max)
            )
            for s in dispatch.supported_apis()
        ),
    )
    return encode_response(API_VERSIONS_KEY, 0, correlation_id, response)
