"""SASL/PLAIN (RFC 4616) as Kafka's broker serves it (``PlainSaslServer``).

The client sends one token, ``authzid NUL authcid NUL password`` (UTF-8); the server checks
the password against the users of the listener's JAAS configuration (``user_<name>``), and
refuses an authorization id that is neither empty nor the user. One token, no challenge.
Passwords are compared in constant time, and an unknown user costs what a wrong password
does.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from strom.security.sasl.mechanism import AuthenticationFailed

MECHANISM = "PLAIN"


class PlainServer:
    mechanism = MECHANISM

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self._authorization_id: str | None = None

    @property
    def complete(self) -> bool:
        return self._authorization_id is not None

    @property
    def authorization_id(self) -> str:
        if self._authorization_id is None:
            raise RuntimeError("the PLAIN exchange has not completed")
        return self._authorization_id

    @property
    def credential_expiry_ms(self) -> int | None:
        return None

    @property
    def refusal(self) -> str | None:
        return None

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise AuthenticationFailed("PLAIN: a token after the exchange completed")
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed("PLAIN: the response is not UTF-8") from None
        parts = text.split("\0")
        if len(parts) != 3:
            raise AuthenticationFailed(
                f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid, username, password = parts
        if not username:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        expected = self._users.get(username)
        # compared even for an unknown user, so its answer takes as long as a wrong password's
        ok = hmac.compare_digest((expected or "\0" + password).encode(), password.encode())
        if expected is None or not ok:
            raise AuthenticationFailed(
                f"Authentication failed: Invalid username or password (user {username!r})",
                "Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            message = ("Authentication failed: Client requested an authorization id that is "
                       "different from username")  # fmt: skip
            raise AuthenticationFailed(message, message)
        self._authorization_id = username
        return b""
