"""An asyncio connection from one broker to another, for the cluster's own traffic.

Used by the replica fetcher (Fetch, OffsetForLeaderEpoch), by the controller (LeaderAndIsr,
UpdateMetadata, StopReplica) and by a leader talking to the controller (AlterPartition,
ControlledShutdown). Not a Kafka client: one peer, no metadata, no routing, no retries; the
caller decides what a failure means.

Requests are pipelined: :meth:`BrokerConnection.send` writes at once and waits for the answer
with the same correlation id; Kafka answers a connection's requests in order, so answers are
matched in order and any other correlation id is a protocol error that closes the connection.
On any failure every pending request fails with :class:`BrokerConnectionError` and the
connection is closed; :meth:`send` reconnects lazily on the next call.

Security: every connection of the process goes to the peers' inter-broker listener, so how
they connect is one process-wide setting, :func:`configure` (the broker's assembly sets it at
start from ``inter.broker.listener.name``: a TLS context for an SSL / SASL_SSL inter-broker
listener, verifying the peer's certificate and presenting this broker's own; on a SASL_PLAINTEXT
/ SASL_SSL inter-broker listener the broker's own credentials, with which each new connection
authenticates — SaslHandshake v1, SaslAuthenticate v2 — before its first request). A process
runs one broker; tests that run several in one process use PLAINTEXT.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import ssl
from dataclasses import dataclass
from typing import Any

from strom.protocol.framing import FrameDecoder
from strom.protocol.messages import (
    RequestHeader,
    build,
    decode_response,
    encode_request,
    request_class,
)
from strom.security.sasl.client import ClientCredentials, SaslClient

log = logging.getLogger(__name__)
_MAX_RESPONSE = 256 << 20


class BrokerConnectionError(ConnectionError):
    """The peer could not be reached, closed the connection, or did not answer in time."""


@dataclass(frozen=True, slots=True)
class InterBrokerSecurity:
    """How this process connects to peers: ``ssl`` None is no TLS, ``sasl`` None no SASL."""

    ssl: ssl.SSLContext | None = None
    sasl: ClientCredentials | None = None


_security = InterBrokerSecurity()


def configure(security: InterBrokerSecurity) -> None:
    """Set how every later connection to a peer is made (module doc)."""
    global _security
    _security = security


def security() -> InterBrokerSecurity:
    return _security


class BrokerConnection:
    def __init__(
        self, host: str, port: int, *, client_id: str, connect_timeout: float = 5.0,
        source_host: str | None = None,
    ) -> None:  # fmt: skip
        self.host = host
        self.port = port
        self.client_id = client_id
        self.connect_timeout = connect_timeout
        # Bind the local end to our own listener address so that per-broker firewall rules
        # (network-partition tests on 127.0.0.x) can tell brokers apart.
        self.source_host = source_host
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._pending: collections.deque[tuple[int, int, int, asyncio.Future[Any]]] = (
            collections.deque()
        )
        self._correlation = 0
        self._connecting: asyncio.Lock | None = None

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    async def send(self, api_key: int, api_version: int, request: Any, timeout: float) -> Any:
        """Send ``request`` (a kio request entity) and return the decoded response."""
        await self._ensure_connected()
        assert self._writer is not None
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        correlation = self._correlation
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        header = RequestHeader(api_key, api_version, correlation, self.client_id)
        self._pending.append((correlation, api_key, api_version, future))
        self._writer.write(encode_request(header, request))
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            # The answer may still come, but the ordering of this connection is now unknown to
            # the caller: drop it rather than match a late answer to the next request.
            self.close(BrokerConnectionError(f"no answer from {self} within {timeout:.1f}s"))
            raise BrokerConnectionError(f"no answer from {self} within {timeout:.1f}s") from None

    async def _ensure_connected(self) -> None:
        if self.connected:
            return
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self.connected:
                return
            local = (self.source_host, 0) if self.source_host else None
            context = _security.ssl
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(self.host, self.port, local_addr=local,
                                            ssl=context,
                                            server_hostname=self.host if context else None),
                    self.connect_timeout,
                )
            except (OSError, TimeoutError) as exc:  # ssl.SSLError too: an untrusted peer
                raise BrokerConnectionError(f"cannot connect to {self}: {exc}") from None
            if _security.sasl is not None:
                try:
                    await asyncio.wait_for(self._authenticate(reader, writer, _security.sasl),
                                           self.connect_timeout)  # fmt: skip
                except (OSError, TimeoutError, ValueError, asyncio.IncompleteReadError) as exc:
                    writer.close()
                    raise BrokerConnectionError(
                        f"cannot authenticate to {self}: {exc or type(exc).__name__}") from None
            self._writer = writer
            self._reader_task = asyncio.get_running_loop().create_task(self._read(reader))

    async def _authenticate(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                            creds: ClientCredentials) -> None:  # fmt: skip
        """The SASL exchange on a new connection (ValueError when the peer refuses it)."""

        async def call(api_key: int, version: int, **fields: Any) -> Any:
            self._correlation = (self._correlation + 1) & 0x7FFFFFFF
            header = RequestHeader(api_key, version, self._correlation, self.client_id)
            writer.write(encode_request(header, build(request_class(api_key, version),
                                                      **fields)))  # fmt: skip
            size = int.from_bytes(await reader.readexactly(4), "big")
            if not 0 <= size <= _MAX_RESPONSE:
                raise ValueError(f"a {size}-byte answer")
            return decode_response(api_key, version, await reader.readexactly(size))[1]

        answer = await call(17, 1, mechanism=creds.mechanism)
        if answer.error_code:
            raise ValueError(f"SaslHandshake {creds.mechanism}: error {answer.error_code}, "
                             f"the peer offers {list(answer.mechanisms)}")  # fmt: skip
        client = SaslClient(creds)
        token: bytes | None = client.first()
        while token is not None:
            answer = await call(36, 2, auth_bytes=token)
            if answer.error_code:
                raise ValueError(f"SaslAuthenticate as {creds.username!r}: "
                                 f"{answer.error_message or answer.error_code}")  # fmt: skip
            token = client.step(bytes(answer.auth_bytes))

    async def _read(self, reader: asyncio.StreamReader) -> None:
        decoder = FrameDecoder(_MAX_RESPONSE)
        error: Exception = BrokerConnectionError(f"{self} closed the connection")
        try:
            while True:
                data = await reader.read(1 << 16)
                if not data:
                    break
                for frame in decoder.feed(data):
                    if not self._pending:
                        raise BrokerConnectionError(f"{self} sent an unrequested answer")
                    correlation, api_key, api_version, future = self._pending.popleft()
                    got, response = decode_response(api_key, api_version, frame)
                    if got != correlation:
                        raise BrokerConnectionError(
                            f"{self} answered request {got}, expected {correlation}"
                        )
                    if not future.done():
                        future.set_result(response)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a decode error or a reset: fail everything pending
            error = exc if isinstance(exc, BrokerConnectionError) else BrokerConnectionError(
                f"{self}: {exc}"
            )
        self._fail_pending(error)
        self._close_writer()

    def close(self, error: Exception | None = None) -> None:
        self._fail_pending(error or BrokerConnectionError(f"{self} closed"))
        if self._reader_task is not None and self._reader_task is not asyncio.current_task():
            self._reader_task.cancel()
        self._reader_task = None
        self._close_writer()

    def _fail_pending(self, error: Exception) -> None:
        while self._pending:
            future = self._pending.popleft()[3]
            if not future.done():
                future.set_exception(error)

    def _close_writer(self) -> None:
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()
            self._writer = None

    def __str__(self) -> str:
        return f"broker {self.host}:{self.port}"
