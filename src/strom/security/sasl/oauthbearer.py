"""SASL/OAUTHBEARER (RFC 7628, KIP-255, KIP-768) as Kafka's broker serves it.

The client's one message is ``n,[a=<authzid>],\\x01auth=Bearer <token>\\x01[key=value\\x01]*\\x01``.
The token goes to a validator; a valid one completes the exchange with the token's principal
(an authorization id, if sent, must equal it) and its expiry (``exp``) bounds the session
(KIP-368). An invalid token is answered, as Kafka and RFC 7628 do, with a JSON challenge
(``{"status":"invalid_token"}``, or ``insufficient_scope`` with the scope); the client
acknowledges it with a lone ``\\x01`` and the exchange then fails, closing the connection.

Two validators, both Kafka's:

- :class:`UnsecuredValidator` (``OAuthBearerUnsecuredValidatorCallbackHandler``, development
  only): an unsecured JWS (``alg: none``, empty signature) with the options
  ``unsecuredValidatorPrincipalClaimName`` (``sub``), ``unsecuredValidatorScopeClaimName``
  (``scope``), ``unsecuredValidatorRequiredScope`` (space-separated, each required),
  ``unsecuredValidatorAllowableClockSkewMs`` (0); ``exp`` is required, ``iat`` optional.
- :class:`JwksValidator` (``OAuthBearerValidatorCallbackHandler``): a JWT signed by a key of
  the JWKS at ``sasl.oauthbearer.jwks.endpoint.url`` (https, http or file), checked by PyJWT
  for signature, ``exp``/``iat``/``nbf`` (with ``sasl.oauthbearer.clock.skew.seconds``),
  ``sasl.oauthbearer.expected.audience`` and ``sasl.oauthbearer.expected.issuer``; the
  principal is ``sasl.oauthbearer.sub.claim.name`` (``sub``). The key set is held by a
  :class:`KeySet` the broker refreshes off the event loop: validation never does I/O.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from strom.security.sasl.mechanism import AuthenticationFailed

MECHANISM = "OAUTHBEARER"
_TOKEN_CHARS = re.compile(r"[-_.a-zA-Z0-9]+")


class TokenInvalid(Exception):
    """A token refused: ``status`` (and ``scope``) go into the JSON challenge, ``reason`` to
    the broker's log."""

    def __init__(self, reason: str, status: str = "invalid_token",
                 scope: str | None = None) -> None:  # fmt: skip
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.scope = scope

    def challenge(self) -> bytes:
        doc = {"status": self.status}
        if self.scope is not None:
            doc["scope"] = self.scope
        return json.dumps(doc, separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class ValidToken:
    principal: str
    expiry_ms: int  # epoch ms
    scope: frozenset[str]


class TokenValidator(Protocol):
    def validate(self, token: str) -> ValidToken:
        """The token's principal and expiry; raises :class:`TokenInvalid`."""
        ...


def _b64url_json(part: str, what: str) -> dict[str, Any]:
    try:
        raw = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
        doc = json.loads(raw)
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise TokenInvalid(f"the token's {what} is not base64url JSON") from None
    if not isinstance(doc, dict):
        raise TokenInvalid(f"the token's {what} is not a JSON object")
    return doc


def _scopes(value: Any) -> frozenset[str]:
    if value is None:
        return frozenset()
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return frozenset(value)
    raise TokenInvalid("the scope claim is neither a string nor a list of strings")


def _number(claims: dict[str, Any], name: str, required: bool) -> float | None:
    value = claims.get(name)
    if value is None:
        if required:
            raise TokenInvalid(f"the token has no {name!r} claim")
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TokenInvalid(f"the token's {name!r} claim is not a number")
    return float(value)


class UnsecuredValidator:
    """Kafka's unsecured validator (development only: anyone can make such a token)."""

    def __init__(self, principal_claim: str = "sub", scope_claim: str = "scope",
                 required_scope: Iterable[str] = (), clock_skew_ms: int = 0,
                 clock: Callable[[], float] = time.time) -> None:  # fmt: skip
        self.principal_claim = principal_claim
        self.scope_claim = scope_claim
        self.required_scope = tuple(required_scope)
        self.clock_skew_ms = clock_skew_ms
        self.clock = clock

    @classmethod
    def from_options(cls, options: dict[str, str],
                     clock: Callable[[], float] = time.time) -> UnsecuredValidator:  # fmt: skip
        """From the ``unsecuredValidator*`` options of the JAAS entry."""
        skew = options.get("unsecuredValidatorAllowableClockSkewMs", "0").strip() or "0"
        try:
            skew_ms = int(skew)
        except ValueError:
            raise ValueError(f"unsecuredValidatorAllowableClockSkewMs={skew!r} is not an integer") from None
        if skew_ms < 0:
            raise ValueError("unsecuredValidatorAllowableClockSkewMs must not be negative")
        return cls(options.get("unsecuredValidatorPrincipalClaimName", "sub").strip() or "sub",
                   options.get("unsecuredValidatorScopeClaimName", "scope").strip() or "scope",
                   options.get("unsecuredValidatorRequiredScope", "").split(), skew_ms, clock)  # fmt: skip

    def validate(self, token: str) -> ValidToken:
        parts = token.split(".")
        if len(parts) != 3:
            raise TokenInvalid(f"an unsecured JWS has 3 parts, this token {len(parts)}")
        header = _b64url_json(parts[0], "header")
        if header.get("alg") != "none" or parts[2]:
            raise TokenInvalid("not an unsecured JWS (alg must be none, the signature empty)")
        claims = _b64url_json(parts[1], "payload")
        now_ms = self.clock() * 1000
        exp = _number(claims, "exp", required=True)
        assert exp is not None
        iat = _number(claims, "iat", required=False)
        if iat is not None and iat * 1000 > now_ms + self.clock_skew_ms:
            raise TokenInvalid(f"the token was issued in the future (iat {iat})")
        if now_ms > exp * 1000 + self.clock_skew_ms:
            raise TokenInvalid(f"the token expired (exp {exp})")
        if iat is not None and exp <= iat:
            raise TokenInvalid("the token expires before it was issued")
        principal = claims.get(self.principal_claim)
        if not isinstance(principal, str) or not principal.strip():
            raise TokenInvalid(f"the token has no principal claim {self.principal_claim!r}")
        scope = _scopes(claims.get(self.scope_claim))
        missing = [s for s in self.required_scope if s not in scope]
        if missing:
            raise TokenInvalid(f"the token lacks the required scope {missing}",
                               "insufficient_scope", " ".join(self.required_scope))  # fmt: skip
        return ValidToken(principal, int(exp * 1000), scope)


class KeySet:
    """The signing keys of a JWKS, swapped whole by :meth:`update` (the broker's refresher
    fetches the document off the event loop). Empty until the first update."""

    def __init__(self) -> None:
        self._keys: dict[str | None, Any] = {}
        self.updated_at = 0.0

    def update(self, jwks: dict[str, Any]) -> int:
        """Take the keys of a JWKS document; the number of usable keys. ValueError if none."""
        import jwt  # PyJWT: the JWKS validator's library (the oauth extra)

        try:
            key_set = jwt.PyJWKSet.from_dict(jwks)
        except jwt.PyJWTError as exc:
            raise ValueError(f"no usable key in the JWKS: {exc}") from None
        keys: dict[str | None, Any] = {}
        for key in key_set.keys:
            keys[key.key_id] = key
        self._keys = keys
        self.updated_at = time.time()
        return len(keys)

    def key(self, kid: str | None) -> Any | None:
        if kid is None and len(self._keys) == 1:
            return next(iter(self._keys.values()))
        return self._keys.get(kid)

    def __len__(self) -> int:
        return len(self._keys)


class JwksValidator:
    """Kafka's JWT validator against a JWKS (KIP-768)."""

    ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384",
                  "ES512", "EdDSA")  # fmt: skip

    def __init__(self, keys: KeySet, audience: Iterable[str] = (), issuer: str | None = None,
                 sub_claim: str = "sub", scope_claim: str = "scope",
                 clock_skew_s: int = 30) -> None:  # fmt: skip
        self.keys = keys
        self.audience = tuple(audience)
        self.issuer = issuer or None
        self.sub_claim = sub_claim
        self.scope_claim = scope_claim
        self.clock_skew_s = clock_skew_s

    def validate(self, token: str) -> ValidToken:
        import jwt

        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise TokenInvalid(f"not a JWT: {exc}") from None
        key = self.keys.key(header.get("kid"))
        if key is None:
            raise TokenInvalid(f"no key {header.get('kid')!r} in the JWKS")
        options: Any = {"require": ["exp"], "verify_aud": bool(self.audience)}
        try:
            claims = jwt.decode(token, key, algorithms=list(self.ALGORITHMS),
                                audience=list(self.audience) or None, issuer=self.issuer,
                                leeway=self.clock_skew_s, options=options)  # fmt: skip
        except jwt.PyJWTError as exc:
            raise TokenInvalid(f"JWT refused: {exc}") from None
        principal = claims.get(self.sub_claim)
        if not isinstance(principal, str) or not principal.strip():
            raise TokenInvalid(f"the token has no principal claim {self.sub_claim!r}")
        return ValidToken(principal, int(float(claims["exp"]) * 1000),
                          _scopes(claims.get(self.scope_claim)))  # fmt: skip


def parse_client_first(message: str) -> tuple[str, str, dict[str, str]]:
    """(authzid, token, extensions) of an OAUTHBEARER client-first message (RFC 7628)."""
    if not message.startswith("n,"):
        raise AuthenticationFailed("Invalid OAUTHBEARER client first message: gs2 header")
    end = message.find(",", 2)
    if end < 0:
        raise AuthenticationFailed("Invalid OAUTHBEARER client first message: gs2 header")
    authzid = message[2:end]
    if authzid and not authzid.startswith("a="):
        raise AuthenticationFailed("Invalid OAUTHBEARER client first message: authzid")
    authzid = authzid[2:].replace("=2C", ",").replace("=3D", "=")
    rest = message[end + 1:]
    if not rest.startswith("\x01") or not rest.endswith("\x01\x01"):
        raise AuthenticationFailed("Invalid OAUTHBEARER client first message: separators")
    pairs: dict[str, str] = {}
    for kv in rest[1:-2].split("\x01"):
        key, sep, value = kv.partition("=")
        if not sep or not key:
            raise AuthenticationFailed("Invalid OAUTHBEARER client first message: key=value")
        pairs[key] = value
    auth = pairs.pop("auth", None)
    if auth is None:
        raise AuthenticationFailed("Invalid OAUTHBEARER client first message: no auth")
    scheme, _, token = auth.partition(" ")
    token = token.strip(" ")
    if scheme.lower() != "bearer":
        raise AuthenticationFailed(f"Invalid scheme in OAUTHBEARER client first message: {scheme}")
    if not _TOKEN_CHARS.fullmatch(token):
        raise AuthenticationFailed("Invalid OAUTHBEARER client first message: token")
    return authzid, token, pairs


class OAuthBearerServer:
    mechanism = MECHANISM

    def __init__(self, validator: TokenValidator) -> None:
        self._validator = validator
        self._token: ValidToken | None = None
        self._error: TokenInvalid | None = None

    @property
    def complete(self) -> bool:
        return self._token is not None

    @property
    def authorization_id(self) -> str:
        if self._token is None:
            raise RuntimeError("the OAUTHBEARER exchange has not completed")
        return self._token.principal

    @property
    def credential_expiry_ms(self) -> int | None:
        return None if self._token is None else self._token.expiry_ms

    @property
    def refusal(self) -> str | None:
        return None if self._error is None else f"OAUTHBEARER token refused: {self._error.reason}"

    def evaluate(self, token: bytes) -> bytes:
        if self._token is not None:
            raise AuthenticationFailed("OAUTHBEARER: a token after the exchange completed")
        if self._error is not None:
            # the client's acknowledgement of our error challenge (a lone %x01): now fail
            error, self._error = self._error, None
            raise AuthenticationFailed(f"OAUTHBEARER token refused: {error.reason}",
                                       error.challenge().decode())  # fmt: skip
        try:
            message = token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed("OAUTHBEARER: a message that is not UTF-8") from None
        authzid, value, _extensions = parse_client_first(message)
        try:
            valid = self._validator.validate(value)
        except TokenInvalid as exc:
            self._error = exc
            return exc.challenge()
        if authzid and authzid != valid.principal:
            text = (f"Authentication failed: Client requested an authorization id ({authzid}) "
                    f"that is different from the token's principal name ({valid.principal})")  # fmt: skip
            raise AuthenticationFailed(text, text)
        self._token = valid
        return b""
