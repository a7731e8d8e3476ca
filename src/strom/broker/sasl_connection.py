"""A client connection on a SASL listener (SASL_PLAINTEXT, SASL_SSL): the authentication gate
in front of :class:`~strom.broker.server.KafkaConnection`.

Before a frame is decoded, the connection's :class:`~strom.security.sasl.Authenticator` says
whether its API key may be served now (read from the frame's first two bytes: nothing of an
unauthenticated client's request body is decoded unless it is ApiVersions, SaslHandshake or
SaslAuthenticate); any other request closes the connection with nothing read or written, as
Kafka does. After a v0 SaslHandshake the frames are bare SASL tokens (Kafka's v0 framing: a
4-byte length and the token, both ways) until the exchange completes; a failed raw exchange
closes the connection without an answer (v0 has no way to say why).

A failed authentication (SASL_AUTHENTICATION_FAILED, an unsupported mechanism, a request out
of order) is logged (client address, the user tried, why; a client failing the same way again
within the minute is summarised, :mod:`strom.broker.auth_failures`), counted in the listener's
failed-authentication metric, and answered after
``connection.failed.authentication.delay.ms`` (Kafka's default 100 ms), then the connection
closes. The delay is a timer on the event loop (reading paused meanwhile), so a flood of
failed logins slows the guessers, never the others.

Plaintext listeners use :class:`KafkaConnection` itself: the gate costs them nothing.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from strom.broker.connection import CloseConnection
from strom.broker.server import Answer, KafkaConnection, Pending
from strom.security.sasl.authenticator import Authenticator

if TYPE_CHECKING:
    from strom.broker.auth_failures import AuthenticationFailures
    from strom.broker.services import BrokerServices
    from strom.security.listeners import ListenerSpec
    from strom.security.sasl import SaslSettings
    from strom.security.tls import ServerTls


class SaslConnection(KafkaConnection):
    def __init__(self, services: BrokerServices, connections: set[KafkaConnection],
                 listener: ListenerSpec, settings: SaslSettings,
                 failures: AuthenticationFailures, tls: ServerTls | None = None) -> None:  # fmt: skip
        super().__init__(services, connections, listener, tls)
        self.auth = Authenticator(settings)
        self.failures = failures  # the listener's: counts and logs (rate-limited) each failure
        self.client.sasl = self.auth
        self.failing = False  # a failure is being answered: every later frame is dropped

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.client.sasl = self.auth  # connection_made made the Client with the peer's address

    def connection_lost(self, exc: Exception | None) -> None:
        refused = self.auth.abandoned()
        if refused is not None:  # told "invalid_token", the client hung up: still one line
            self.auth.failure = f"{refused} (the client closed the connection)"
            self._log_failure()
        super().connection_lost(exc)

    def begin(self, frame: bytes, arrived: float) -> Answer | Pending:
        if self.failing:
            return None
        auth = self.auth
        if auth.raw:
            return self._raw_token(frame)
        api_key = (frame[0] << 8 | frame[1]) if len(frame) >= 2 else -1
        if not auth.allows(api_key):
            raise CloseConnection(f"{auth.refusal(api_key)} (SASL listener "
                                  f"{auth.settings.listener})")  # fmt: skip
        answer = KafkaConnection.begin(self, frame, arrived)
        if auth.failed:
            return self._fail(answer)
        return answer

    def _raw_token(self, token: bytes) -> Answer:
        """A bare token after a v0 SaslHandshake: the bare challenge back, or close."""
        auth = self.auth
        result = auth.authenticate(token, 0)
        if auth.failed:
            self._log_failure()
            raise CloseConnection("SASL authentication failed (v0 framing: no answer)")
        if auth.authenticated:
            self.client.principal = auth.principal or self.client.principal
        self.handled += 1
        return len(result.challenge).to_bytes(4, "big") + result.challenge

    def _fail(self, answer: Answer | Pending) -> Answer:
        """Answer a failed authentication after the delay, then close (module doc)."""
        self._log_failure()
        self.failing = True
        if self.transport is None or self.transport.is_closing():
            return None
        self.transport.pause_reading()
        self.reading_paused = True
        delay = self.auth.settings.failed_delay_ms / 1000
        asyncio.get_running_loop().call_later(delay, self._close_failed, answer)
        return None

    def _close_failed(self, answer: Answer | Pending) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        self.flush()  # the answers before this one
        if type(answer) is bytes:
            transport.write(answer)
        self.close()

    def _log_failure(self) -> None:
        """One count (the listener's failed-authentication metric) per failure, and its line
        (unless the same host failed the same way within the minute: auth_failures)."""
        auth = self.auth
        mechanism = auth.mechanism or "-"
        host, port = self.peer
        self.failures.failed(
            self.peer, f"mechanism {mechanism}: {auth.failure}",
            f"failed authentication with {host}:{port} (connection {self.id}, listener "
            f"{auth.settings.listener}, mechanism {mechanism}): {auth.failure}")  # fmt: skip
