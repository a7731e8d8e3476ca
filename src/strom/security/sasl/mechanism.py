"""The one interface every SASL mechanism server implements, sans-IO (Kafka's ``SaslServer``).

A mechanism server lives for one authentication exchange on one connection. The connection's
authenticator (:mod:`strom.security.sasl.authenticator`) feeds it each token the client sends
(SaslAuthenticate's ``auth_bytes``, or a raw token after a v0 SaslHandshake) and sends back
what :meth:`MechanismServer.evaluate` returns. Once :attr:`complete` is true the exchange is
over and :attr:`authorization_id` is the name the connection acts as (``User:<it>``).

A failed exchange raises :class:`AuthenticationFailed`: ``reason`` is for the broker's log
only (it may name the user); ``client_message`` is what the client is told, which — as in
Kafka — is a generic sentence unless the mechanism chose to say more (an authorization id
that differs from the user, for instance). Nothing here does I/O or blocks: credentials are
looked up through callables the broker gives (an in-memory cache of the metadata store).
"""

from __future__ import annotations

from typing import Protocol


class AuthenticationFailed(Exception):
    """The exchange failed; the connection is answered SASL_AUTHENTICATION_FAILED and closed."""

    def __init__(self, reason: str, client_message: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.client_message = client_message


class MechanismServer(Protocol):
    #: the mechanism's SASL name (``PLAIN``, ``SCRAM-SHA-256`` …)
    mechanism: str

    @property
    def complete(self) -> bool:
        """The exchange succeeded (nothing more to evaluate)."""
        ...

    @property
    def authorization_id(self) -> str:
        """The name the authenticated client acts as; only once :attr:`complete`."""
        ...

    @property
    def credential_expiry_ms(self) -> int | None:
        """When the credential used stops being valid (epoch ms; an OAuth token's ``exp``),
        None for a credential without an end: bounds the session lifetime (KIP-368)."""
        ...

    @property
    def refusal(self) -> str | None:
        """Why the last token was refused when the refusal went out as a challenge the client
        must acknowledge (OAUTHBEARER's error JSON), else None: a client that hangs up
        instead still failed to log in."""
        ...

    def evaluate(self, token: bytes) -> bytes:
        """The challenge answering ``token`` (``b""`` when there is nothing to say); raises
        :class:`AuthenticationFailed`."""
        ...


def generic_failure(mechanism: str) -> str:
    """What Kafka tells a client whose credentials were refused, whatever the reason."""
    return ("Authentication failed during authentication due to invalid credentials with "
            f"SASL mechanism {mechanism}")  # fmt: skip
