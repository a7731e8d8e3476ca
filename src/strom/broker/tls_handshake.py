"""The TLS handshake of each socket an SSL / SASL_SSL listener accepts, and its failures logged
(Kafka's ``Failed authentication with /<ip> (... SSL handshake failed)``; the shape of strom's
SASL failure line, :mod:`strom.broker.sasl_connection`).

Why the listener does not hand ``ssl=`` to ``loop.create_server``: asyncio's TLS server (and
uvloop's, a port of it) drops a failed handshake silently. Its SSL protocol treats the
``ssl.SSLError`` as an ``OSError`` and logs it only in asyncio debug mode, and the connection's
protocol is never told (``connection_made`` comes only after a handshake that succeeded). So a
TLS listener accepts plain TCP, and :class:`TlsAcceptor` hands each accepted socket (a
duplicate of its fd, taken before anything was read from it) to
``loop.connect_accepted_socket(..., ssl=context)``, which raises the handshake's error where it
is logged and counted. On success it has made what ``create_server(ssl=...)`` makes (the loop's
SSL protocol over a socket transport, asyncio's 60 s handshake timeout) and called the
connection's ``connection_made``: the request path is unchanged; the handshake costs a
``dup`` and a plain transport made and dropped.

(Not ``loop.start_tls`` on the plain transport: uvloop starts reading right after
``connection_made``, before ``start_tls`` can take the socket, so a client that sends at once
— plaintext, or a ClientHello — loses its first bytes; and ``start_tls`` hands the first
decrypted bytes to the protocol before it returns the transport.)

What :class:`HandshakeFailures` logs (rate-limited by :class:`HandshakeLog`):

- a handshake refused by TLS (an ``ssl.SSLError`` naming its reason: the client's certificate
  is not trusted or expired ``CERTIFICATE_VERIFY_FAILED``, no client certificate where
  ``ssl.client.auth=required`` ``PEER_DID_NOT_RETURN_A_CERTIFICATE``, plaintext on the TLS port
  ``WRONG_VERSION_NUMBER`` or ``HTTP_REQUEST``, the client refusing the broker's certificate
  ``TLSV1_ALERT_UNKNOWN_CA`` …): one INFO line, Kafka's level (the client is misconfigured, the
  broker is fine)::

      failed authentication with 127.0.0.1:50412 (listener SSL): SSL handshake failed: \
CERTIFICATE_VERIFY_FAILED, certificate has expired

  and one count in the listener's failed-authentication metric
  (:meth:`~strom.broker.observability.metrics.BrokerMetrics.authentication_failed`). A client
  that retries (librdkafka reconnects every second or so) must not flood the log: of the
  failures of one (peer host, reason), the first is logged, those in the
  :data:`WINDOW_S` seconds after it are only counted and summarised in one line when that time
  is up. At most :data:`MAX_PEERS` (host, reason) pairs are tracked at a time; failures of
  further pairs share one summary ("other peers"). So, whatever the clients do, a listener
  logs two lines per window (its first failure, its summary) for at most ``MAX_PEERS + 1``
  windows open at a time. Kafka logs every failure; every one is still counted in the metric.
- a handshake the peer abandons (EOF or a reset before it completed with no TLS error: a port
  scanner, a TCP health check, a client giving up without an alert) or that times out: DEBUG,
  not counted as a failed authentication.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
from collections.abc import Callable
from typing import NamedTuple, cast

log = logging.getLogger(__name__)

#: seconds after a logged failure during which the same (peer host, reason) is only counted
WINDOW_S = 60.0
#: (peer host, reason) pairs tracked at a time; failures of others share one summary
MAX_PEERS = 100
OTHER_PEERS = ""  # the host of the pair failures beyond MAX_PEERS are counted under

#: the handshakes under way (their tasks, referenced while they run)
_handshakes: set[asyncio.Task[None]] = set()


class Summary(NamedTuple):
    """``times`` failures of (``host``, ``reason``) not logged one by one, in the ``window_s``
    seconds after the one that was (``host`` :data:`OTHER_PEERS`: of hosts not tracked)."""

    host: str
    reason: str
    times: int
    window_s: float


class HandshakeLog:
    """The rate limit of one listener's failure lines (module doc), without I/O: the caller
    passes the time (a monotonic clock's seconds) and logs what it is told to.

    Invariant: ``windows`` maps each (host, reason) whose last logged failure is less than
    ``window_s`` old, or not yet summarised, to (the time it was logged, failures since)."""

    def __init__(self, window_s: float = WINDOW_S, max_peers: int = MAX_PEERS) -> None:
        self.window_s = window_s
        self.max_peers = max_peers
        self.windows: dict[tuple[str, str], tuple[float, int]] = {}

    def failed(self, host: str, reason: str, now: float) -> tuple[list[Summary], bool]:
        """Record a failure at ``now``: the summaries of the windows ended by then (as
        :meth:`expired`), and whether to log this failure (True: a window opened; call
        :meth:`expired` once ``window_s`` has passed) or only count it for its window's
        summary (False)."""
        ended = self.expired(now)
        key = (host, reason)
        if key not in self.windows and len(self.windows) >= self.max_peers:
            key = (OTHER_PEERS, "")
        window = self.windows.get(key)
        if window is not None:
            self.windows[key] = (window[0], window[1] + 1)
            return ended, False
        self.windows[key] = (now, 0)
        return ended, True

    def expired(self, now: float) -> list[Summary]:
        """The summaries of the windows ended by ``now`` that counted failures; every ended
        window is forgotten."""
        out = []
        for key, (opened, count) in list(self.windows.items()):
            if now >= opened + self.window_s:
                del self.windows[key]
                if count:
                    out.append(Summary(key[0], key[1], count, self.window_s))
        return out


def reason_of(exc: ssl.SSLError) -> str:
    """The short reason of a TLS error (OpenSSL's, e.g. ``CERTIFICATE_VERIFY_FAILED``), with
    the verification's own message when there is one (``certificate has expired``)."""
    reason = exc.reason or type(exc).__name__
    detail = getattr(exc, "verify_message", None)
    return f"{reason}, {detail}" if detail else reason


def abandoned(exc: BaseException) -> bool:
    """Whether a handshake's error is the peer going away (or never speaking) rather than TLS
    refusing it: EOF, a reset, the handshake timeout."""
    if isinstance(exc, ssl.SSLEOFError | ssl.SSLZeroReturnError):
        return True
    return isinstance(exc, OSError) and not isinstance(exc, ssl.SSLError)


class HandshakeFailures:
    """One listener's failed handshakes: logged through a :class:`HandshakeLog`, counted by
    ``count`` (the listener's failed-authentication metric)."""

    def __init__(self, listener: str, count: Callable[[], None],
                 limiter: HandshakeLog | None = None) -> None:  # fmt: skip
        self.listener = listener
        self.count = count
        self.limiter = limiter if limiter is not None else HandshakeLog()

    def refused(self, peer: tuple[str, int], exc: ssl.SSLError) -> None:
        """A handshake TLS refused: counted; logged unless its (host, reason) was just now."""
        self.count()
        loop = asyncio.get_running_loop()
        reason = reason_of(exc)
        now = loop.time()
        ended, first = self.limiter.failed(peer[0], reason, now)
        self._log(ended)
        if first:
            log.info("failed authentication with %s:%s (listener %s): SSL handshake failed: %s",
                     peer[0], peer[1], self.listener, reason)  # fmt: skip
            # (the loop may run a timer a clock tick early: the window's end is passed as is)
            end = now + self.limiter.window_s
            loop.call_at(end, lambda: self._log(self.limiter.expired(max(loop.time(), end))))

    def gave_up(self, peer: tuple[str, int], exc: BaseException | None) -> None:
        """A handshake the peer abandoned (or that timed out)."""
        log.debug("TLS handshake with %s:%s on listener %s abandoned: %s", peer[0], peer[1],
                  self.listener, (str(exc) or type(exc).__name__) if exc else "closed")  # fmt: skip

    def _log(self, summaries: list[Summary]) -> None:
        for s in summaries:
            if s.host == OTHER_PEERS:
                source, reason = "other peers", f"(more than {self.limiter.max_peers} at once)"
            else:
                source, reason = s.host, s.reason
            log.info("failed authentication with %s (listener %s), %d more time(s) in the %.0f s "
                     "after the one logged: SSL handshake failed: %s", source, self.listener,
                     s.times, s.window_s, reason)  # fmt: skip


class TlsAcceptor(asyncio.Protocol):
    """The protocol asyncio gives an accepted socket of a TLS listener: takes the socket out
    of that plain transport and runs its handshake with ``context()`` (the listener's live
    context, read per handshake so a reloaded key store is served), reporting a failure to
    ``failures``; on success the TLS transport calls ``connection()``'s ``connection_made``
    and every later event, as ``create_server(ssl=...)`` would have."""

    def __init__(self, connection: Callable[[], asyncio.Protocol],
                 context: Callable[[], ssl.SSLContext], failures: HandshakeFailures) -> None:  # fmt: skip
        self.connection = connection
        self.context = context
        self.failures = failures

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Both loops call connection_made before the first read: the socket's bytes are all
        # still in the kernel. A duplicate of its fd outlives the plain transport, which is
        # dropped unused (abort: nothing to flush), and goes to the TLS transport.
        try:
            accepted = socket.socket(fileno=os.dup(transport.get_extra_info("socket").fileno()))
        except OSError as exc:  # out of file descriptors: refused as asyncio would
            log.warning("refusing a connection on listener %s: %s", self.failures.listener, exc)
            accepted = None
        cast(asyncio.Transport, transport).abort()
        if accepted is not None:
            task = asyncio.get_running_loop().create_task(self._handshake(accepted))
            _handshakes.add(task)
            task.add_done_callback(_handshakes.discard)

    async def _handshake(self, accepted: socket.socket) -> None:
        try:
            peer = _peer(accepted.getpeername())
        except OSError as exc:  # reset already
            accepted.close()
            self.failures.gave_up(("?", 0), exc)
            return
        try:  # from here the socket is the transport's: closed by it on failure
            transport, _ = await asyncio.get_running_loop().connect_accepted_socket(
                self.connection, accepted, ssl=self.context())
        except ssl.SSLError as exc:
            if abandoned(exc):
                self.failures.gave_up(peer, exc)
            else:
                self.failures.refused(peer, exc)
            return
        except OSError as exc:  # EOF or reset mid-handshake, the handshake timeout
            self.failures.gave_up(peer, exc)
            return
        if transport.get_extra_info("ssl_object") is None:  # closed mid-handshake, no error:
            self.failures.gave_up(peer, None)  # the connection was never made


def _peer(address: object) -> tuple[str, int]:
    if isinstance(address, tuple) and len(address) >= 2:
        return str(address[0]), int(address[1])
    return "?", 0
