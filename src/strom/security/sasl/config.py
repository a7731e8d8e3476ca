"""A SASL listener's settings, read from the broker's properties under Kafka's names.

For a listener named ``L`` (lower-cased in property names, as Kafka writes them) and a
mechanism ``M`` (lower-cased too), the first of these that is set wins:

- mechanisms: ``listener.name.L.sasl.enabled.mechanisms``, ``sasl.enabled.mechanisms``
  (Kafka's default, GSSAPI, is not served by strom: unset, strom enables SCRAM-SHA-256 and
  SCRAM-SHA-512, plus PLAIN and OAUTHBEARER when their JAAS configuration is given);
- the JAAS entry: ``listener.name.L.M.sasl.jaas.config``, ``sasl.jaas.config``
  (PLAIN: the ``user_<name>`` options; OAUTHBEARER: the ``unsecuredValidator*`` options);
- ``listener.name.L.M.connections.max.reauth.ms``, ``listener.name.L.connections.max.reauth.ms``,
  ``connections.max.reauth.ms`` (0: sessions never expire);
- OAUTHBEARER: the JWKS validator (KIP-768) when ``sasl.oauthbearer.jwks.endpoint.url`` is set
  (listener-prefixed variants first), with ``sasl.oauthbearer.expected.audience``,
  ``sasl.oauthbearer.expected.issuer``, ``sasl.oauthbearer.sub.claim.name``,
  ``sasl.oauthbearer.scope.claim.name``, ``sasl.oauthbearer.clock.skew.seconds``,
  ``sasl.oauthbearer.jwks.endpoint.refresh.ms``; else Kafka's unsecured validator.

A mistake (a mechanism strom does not serve, PLAIN without users, a JAAS string that does not
parse) is a :class:`SaslConfigError` naming the property, raised when the broker starts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from strom.security.sasl import jaas
from strom.security.sasl.mechanism import MechanismServer
from strom.security.sasl.oauthbearer import (
    JwksValidator,
    KeySet,
    OAuthBearerServer,
    TokenValidator,
    UnsecuredValidator,
)
from strom.security.sasl.plain import PlainServer
from strom.security.sasl.scram import MECHANISMS as SCRAM_MECHANISMS
from strom.security.sasl.scram import ScramCredential, ScramServer

PLAIN = "PLAIN"
OAUTHBEARER = "OAUTHBEARER"
SUPPORTED = (PLAIN, *SCRAM_MECHANISMS, OAUTHBEARER)
#: (mechanism, user) -> the user's SCRAM credential of that mechanism, None if none
ScramLookup = Callable[[str, str], "ScramCredential | None"]
#: broker properties this module reads (beside listener.name.* and mechanism prefixes)
KNOWN_KEYS = {
    "sasl.enabled.mechanisms", "sasl.jaas.config", "connections.max.reauth.ms",
    "connection.failed.authentication.delay.ms", "sasl.mechanism.inter.broker.protocol",
    "sasl.oauthbearer.jwks.endpoint.url", "sasl.oauthbearer.expected.audience",
    "sasl.oauthbearer.expected.issuer", "sasl.oauthbearer.sub.claim.name",
    "sasl.oauthbearer.scope.claim.name", "sasl.oauthbearer.clock.skew.seconds",
    "sasl.oauthbearer.jwks.endpoint.refresh.ms",
}  # fmt: skip


class SaslConfigError(ValueError):
    """A SASL setting strom cannot use; the message names the property."""


def _first(values: Mapping[str, str], *keys: str) -> tuple[str, str] | None:
    for key in keys:
        value = values.get(key)
        if value is not None and value.strip():
            return key, value.strip()
    return None


@dataclass
class SaslSettings:
    """What a listener's connections authenticate against (one per SASL listener)."""

    listener: str
    mechanisms: tuple[str, ...]
    plain_users: dict[str, str] = field(default_factory=dict)
    scram_lookup: ScramLookup | None = None
    oauth_validator: TokenValidator | None = None
    #: connections.max.reauth.ms per mechanism (0: sessions never expire)
    max_reauth_ms: dict[str, int] = field(default_factory=dict)
    failed_delay_ms: int = 100
    #: the JWKS to refresh (OAUTHBEARER with a JWKS URL): (url, refresh ms, key set)
    jwks: tuple[str, int, KeySet] | None = None

    def server(self, mechanism: str) -> MechanismServer:
        """A new mechanism server for one exchange."""
        if mechanism == PLAIN:
            return PlainServer(self.plain_users)
        if mechanism in SCRAM_MECHANISMS:
            lookup = self.scram_lookup
            if lookup is None:
                return ScramServer(mechanism, lambda _user: None)
            return ScramServer(mechanism, lambda user: lookup(mechanism, user))
        if mechanism == OAUTHBEARER and self.oauth_validator is not None:
            return OAuthBearerServer(self.oauth_validator)
        raise ValueError(f"mechanism {mechanism} is not enabled")

    @classmethod
    def from_config(cls, values: Mapping[str, str], listener: str,
                    scram_lookup: ScramLookup | None = None) -> SaslSettings:  # fmt: skip
        lname = listener.lower()
        prefix = f"listener.name.{lname}."

        def jaas_of(mechanism: str) -> tuple[str, str] | None:
            return _first(values, f"{prefix}{mechanism.lower()}.sasl.jaas.config",
                          "sasl.jaas.config")  # fmt: skip

        found = _first(values, f"{prefix}sasl.enabled.mechanisms", "sasl.enabled.mechanisms")
        if found is None:
            mechanisms = [*SCRAM_MECHANISMS]
            if _first(values, f"{prefix}plain.sasl.jaas.config"):
                mechanisms.insert(0, PLAIN)
            if _first(values, f"{prefix}oauthbearer.sasl.jaas.config"):
                mechanisms.append(OAUTHBEARER)
            key = "sasl.enabled.mechanisms"
        else:
            key, text = found
            mechanisms = [m.strip().upper() for m in text.split(",") if m.strip()]
        if not mechanisms:
            raise SaslConfigError(f"{key}: no mechanism for listener {listener}")
        unknown = [m for m in mechanisms if m not in SUPPORTED]
        if unknown:
            raise SaslConfigError(f"{key}: strom does not serve {', '.join(unknown)} "
                                  f"(it serves {', '.join(SUPPORTED)})")  # fmt: skip
        settings = cls(listener, tuple(dict.fromkeys(mechanisms)), scram_lookup=scram_lookup)
        if PLAIN in mechanisms:
            entry = jaas_of(PLAIN)
            if entry is None:
                raise SaslConfigError(f"{prefix}plain.sasl.jaas.config: PLAIN is enabled on "
                                      f"listener {listener} but no users are configured")  # fmt: skip
            try:
                settings.plain_users = jaas.plain_users(entry[1])
            except jaas.JaasError as exc:
                raise SaslConfigError(f"{entry[0]}: {exc}") from None
        if OAUTHBEARER in mechanisms:
            settings.oauth_validator, settings.jwks = _oauth_validator(values, prefix, jaas_of)
        for mechanism in settings.mechanisms:
            reauth = _first(values, f"{prefix}{mechanism.lower()}.connections.max.reauth.ms",
                            f"{prefix}connections.max.reauth.ms", "connections.max.reauth.ms")
            settings.max_reauth_ms[mechanism] = _int(reauth, 0)
        settings.failed_delay_ms = _int(_first(values, "connection.failed.authentication.delay.ms"),
                                        100)  # fmt: skip
        return settings


def _int(found: tuple[str, str] | None, default: int) -> int:
    if found is None:
        return default
    key, text = found
    try:
        value = int(text)
    except ValueError:
        raise SaslConfigError(f"{key}={text!r} is not an integer") from None
    if value < 0:
        raise SaslConfigError(f"{key}={text!r} must not be negative")
    return value


def _oauth_validator(values: Mapping[str, str], prefix: str,
                     jaas_of: Callable[[str], tuple[str, str] | None],
                     ) -> tuple[TokenValidator, tuple[str, int, KeySet] | None]:  # fmt: skip
    mech = f"{prefix}oauthbearer."

    def get(name: str) -> tuple[str, str] | None:
        return _first(values, f"{mech}{name}", f"{prefix}{name}", name)

    url = get("sasl.oauthbearer.jwks.endpoint.url")
    if url is not None:
        audience = get("sasl.oauthbearer.expected.audience")
        issuer = get("sasl.oauthbearer.expected.issuer")
        keys = KeySet()
        validator = JwksValidator(
            keys,
            audience=[a.strip() for a in audience[1].split(",") if a.strip()] if audience else (),
            issuer=issuer[1] if issuer else None,
            sub_claim=(get("sasl.oauthbearer.sub.claim.name") or ("", "sub"))[1],
            scope_claim=(get("sasl.oauthbearer.scope.claim.name") or ("", "scope"))[1],
            clock_skew_s=_int(get("sasl.oauthbearer.clock.skew.seconds"), 30),
        )
        refresh_ms = _int(get("sasl.oauthbearer.jwks.endpoint.refresh.ms"), 3_600_000)
        return validator, (url[1], refresh_ms, keys)
    entry = jaas_of(OAUTHBEARER)
    options: dict[str, str] = {}
    if entry is not None:
        try:
            options = jaas.module_options(entry[1], jaas.OAUTHBEARER_LOGIN_MODULE)
        except jaas.JaasError as exc:
            raise SaslConfigError(f"{entry[0]}: {exc}") from None
    try:
        return UnsecuredValidator.from_options(options), None
    except ValueError as exc:
        raise SaslConfigError(f"{entry[0] if entry else 'sasl.jaas.config'}: {exc}") from None
