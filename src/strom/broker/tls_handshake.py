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

What :class:`HandshakeFailures` logs (rate-limited as every failed authentication is,
:mod:`strom.broker.auth_failures`):

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
  that retries (librdkafka reconnects every second or so) does not flood the log: the first
  failure of a (peer host, reason) is logged, the next minute's are summarised in one line.
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
from typing import cast

from strom.broker.auth_failures import AuthenticationFailures

log = logging.getLogger(__name__)

#: the handshakes under way (their tasks, referenced while they run)
_handshakes: set[asyncio.Task[None]] = set()

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


class HandshakeFailures(AuthenticationFailures):
    """One listener's failed TLS handshakes: refused ones counted and logged (rate-limited,
    :class:`~strom.broker.auth_failures.AuthenticationFailures`), abandoned ones DEBUG."""

    def refused(self, peer: tuple[str, int], exc: ssl.SSLError) -> None:
        """A handshake TLS refused: counted; logged unless its (host, reason) was just now."""
        reason = f"SSL handshake failed: {reason_of(exc)}"
        self.failed(peer, reason, f"failed authentication with {peer[0]}:{peer[1]} "
                                  f"(listener {self.listener}): {reason}")  # fmt: skip

    def gave_up(self, peer: tuple[str, int], exc: BaseException | None) -> None:
        """A handshake the peer abandoned (or that timed out)."""
        log.debug("TLS handshake with %s:%s on listener %s abandoned: %s", peer[0], peer[1],
                  self.listener, (str(exc) or type(exc).__name__) if exc else "closed")  # fmt: skip


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
