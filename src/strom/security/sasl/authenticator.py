"""The SASL side of one connection, sans-IO: Kafka's ``SaslServerAuthenticator`` rules.

A connection on a SASL_PLAINTEXT / SASL_SSL listener gets one :class:`Authenticator`. The
broker asks it, before decoding each request, whether the request may be served
(:meth:`Authenticator.allows`), and hands it the SaslHandshake and SaslAuthenticate requests.
The states and what each allows (any other request closes the connection, as Kafka does):

``initial``        ApiVersions, SaslHandshake
``handshaken``     SaslAuthenticate (v1 handshake), or raw tokens (v0 handshake: the next
                   frames are bare SASL tokens, no request header, answered the same way)
``authenticated``  everything; a SaslHandshake starts a re-authentication (KIP-368)
``reauth``         SaslAuthenticate only (the client sends nothing else meanwhile)
``failed``         nothing: the answer is sent, then the connection closes

Sessions (KIP-368): when ``connections.max.reauth.ms`` is set, or the credential expires (an
OAuth token's ``exp``), the session lifetime is the smaller of the two and is told to clients
that use SaslAuthenticate v1+; once it is over, any request but a SaslHandshake closes the
connection. A re-authentication must use the same mechanism and end with the same principal.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from strom.protocol.errors import ErrorCode
from strom.security.sasl.config import SaslSettings
from strom.security.sasl.mechanism import AuthenticationFailed, MechanismServer, generic_failure

API_VERSIONS = 18
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
INITIAL, HANDSHAKEN, AUTHENTICATED, REAUTH, FAILED = ("initial", "handshaken", "authenticated",
                                                       "reauth", "failed")  # fmt: skip


@dataclass(frozen=True, slots=True)
class AuthenticateResult:
    error: ErrorCode
    message: str | None
    challenge: bytes
    session_lifetime_ms: int


class Authenticator:
    __slots__ = ("settings", "clock", "state", "mechanism", "server", "principal",
                 "expires_at", "raw", "failure", "authenticate_version")  # fmt: skip

    def __init__(self, settings: SaslSettings, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.clock = clock  # seconds (wall clock: OAuth tokens' exp are wall-clock times)
        self.state = INITIAL
        self.mechanism: str | None = None
        self.server: MechanismServer | None = None
        #: Kafka's principal string once authenticated ("User:<authorization id>")
        self.principal: str | None = None
        #: when the session ends (clock seconds), inf without a lifetime
        self.expires_at = float("inf")
        self.raw = False  # after a v0 SaslHandshake: frames are bare tokens
        #: why the exchange failed (for the log line), None while it has not
        self.failure: str | None = None
        self.authenticate_version = 0

    @property
    def authenticated(self) -> bool:
        return self.state == AUTHENTICATED

    def allows(self, api_key: int) -> bool:
        """Whether a request of ``api_key`` may be served now (else: close the connection)."""
        state = self.state
        if state == AUTHENTICATED:
            return api_key == SASL_HANDSHAKE or self.clock() < self.expires_at
        if state == INITIAL:
            return api_key in (API_VERSIONS, SASL_HANDSHAKE)
        if state in (HANDSHAKEN, REAUTH):
            return api_key == SASL_AUTHENTICATE and not self.raw
        return False

    def refusal(self, api_key: int) -> str:
        """Why :meth:`allows` said no (the log line of the close)."""
        if self.state == AUTHENTICATED:
            return f"session expired, api key {api_key} without re-authentication"
        return f"api key {api_key} not allowed while the SASL state is {self.state}"

    def handshake(self, mechanism: str, version: int) -> tuple[ErrorCode, list[str]]:
        """Answer a SaslHandshake: (error, the enabled mechanisms). An unsupported mechanism
        fails the connection (the answer is sent, then it closes)."""
        enabled = list(self.settings.mechanisms)
        if self.state == AUTHENTICATED:  # KIP-368 re-authentication
            if version < 1 or mechanism != self.mechanism:
                self._fail(f"re-authentication with mechanism {mechanism} (was "
                           f"{self.mechanism}, handshake v{version})")  # fmt: skip
                return ErrorCode.illegal_sasl_state, enabled
            self.server = self.settings.server(mechanism)
            self.state = REAUTH
            return ErrorCode.none, enabled
        if self.state != INITIAL:
            self._fail(f"unexpected SaslHandshake in state {self.state}")
            return ErrorCode.illegal_sasl_state, enabled
        if mechanism not in self.settings.mechanisms:
            self._fail(f"unsupported SASL mechanism {mechanism!r} (enabled: {enabled})")
            return ErrorCode.unsupported_sasl_mechanism, enabled
        self.mechanism = mechanism
        self.server = self.settings.server(mechanism)
        self.state = HANDSHAKEN
        self.raw = version == 0
        return ErrorCode.none, enabled

    def authenticate(self, token: bytes, version: int) -> AuthenticateResult:
        """Answer a SaslAuthenticate (or, after a v0 handshake, a raw token)."""
        if self.state not in (HANDSHAKEN, REAUTH) or self.server is None:
            if self.state == AUTHENTICATED:
                message = "SaslAuthenticate request received after successful authentication"
            else:
                message = f"Unexpected SaslAuthenticate request in state {self.state}"
            self._fail(message)
            return AuthenticateResult(ErrorCode.illegal_sasl_state, message, b"", 0)
        self.authenticate_version = version
        server = self.server
        try:
            challenge = server.evaluate(token)
        except AuthenticationFailed as exc:
            self._fail(exc.reason)
            message = exc.client_message or generic_failure(server.mechanism)
            return AuthenticateResult(ErrorCode.sasl_authentication_failed, message, b"", 0)
        except Exception as exc:  # a mechanism's bug: still a refusal, never a traceback out
            self._fail(f"{server.mechanism} failed: {type(exc).__name__}: {exc}")
            return AuthenticateResult(ErrorCode.sasl_authentication_failed,
                                      generic_failure(server.mechanism), b"", 0)  # fmt: skip
        if not server.complete:
            return AuthenticateResult(ErrorCode.none, None, challenge, 0)
        principal = "User:" + server.authorization_id
        if self.state == REAUTH and principal != self.principal:
            message = (f"Cannot change principals during re-authentication from "
                       f"{self.principal}: {principal}")  # fmt: skip
            self._fail(message)
            return AuthenticateResult(ErrorCode.sasl_authentication_failed, message, b"", 0)
        lifetime_ms = self._lifetime_ms(server.credential_expiry_ms)
        now = self.clock()
        self.expires_at = now + lifetime_ms / 1000 if lifetime_ms > 0 else float("inf")
        self.principal = principal
        self.state = AUTHENTICATED
        self.raw = False
        self.server = None
        return AuthenticateResult(ErrorCode.none, None, challenge, lifetime_ms)

    def _lifetime_ms(self, credential_expiry_ms: int | None) -> int:
        """Kafka's session lifetime: min(connections.max.reauth.ms, the credential's time
        left), 0 for none; at least 1 ms when a bound exists (0 would mean none)."""
        max_reauth = self.settings.max_reauth_ms.get(self.mechanism or "", 0)
        if credential_expiry_ms is None:
            return max(max_reauth, 0)
        left = credential_expiry_ms - int(self.clock() * 1000)
        lifetime = left if max_reauth <= 0 else min(left, max_reauth)
        return max(lifetime, 1)

    def _fail(self, reason: str) -> None:
        self.state = FAILED
        self.failure = reason
        self.server = None

    def abandoned(self) -> str | None:
        """Why the exchange failed when the client hung up before its end: a refusal it was
        told as a challenge (OAUTHBEARER), None otherwise."""
        if self.state == FAILED or self.server is None:
            return None
        return self.server.refusal

    @property
    def failed(self) -> bool:
        return self.state == FAILED

    @property
    def user_hint(self) -> str:
        """Who tried, as far as known (the failed-login log line)."""
        return self.principal or "unknown user"
