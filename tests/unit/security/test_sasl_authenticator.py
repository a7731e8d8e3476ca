"""The per-connection SASL state machine (Kafka's SaslServerAuthenticator order), with a fake
clock: what is allowed when, failures, session lifetimes and re-authentication (KIP-368)."""

from __future__ import annotations

import pytest

from strom.protocol.errors import ErrorCode
from strom.security.sasl import SaslConfigError, SaslSettings
from strom.security.sasl.authenticator import Authenticator

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_alice="pw-a" user_bob="pw-b";')  # fmt: skip
API_VERSIONS, HANDSHAKE, AUTHENTICATE, METADATA, PRODUCE = 18, 17, 36, 3, 0


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def settings(**extra: str) -> SaslSettings:
    values = {"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
              "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS, **extra}  # fmt: skip
    return SaslSettings.from_config(values, "SASL_PLAINTEXT")


def test_only_versions_and_handshake_before_authentication() -> None:
    auth = Authenticator(settings())
    assert auth.allows(API_VERSIONS) and auth.allows(HANDSHAKE)
    assert not auth.allows(METADATA) and not auth.allows(PRODUCE)
    assert not auth.allows(AUTHENTICATE)  # not before the handshake
    assert auth.handshake("PLAIN", 1) == (ErrorCode.none, ["PLAIN", "SCRAM-SHA-256"])
    assert auth.allows(AUTHENTICATE)
    assert not auth.allows(API_VERSIONS) and not auth.allows(METADATA)
    result = auth.authenticate(b"\0alice\0pw-a", 2)
    assert result.error == ErrorCode.none and result.session_lifetime_ms == 0
    assert auth.authenticated and auth.principal == "User:alice"
    assert auth.allows(METADATA) and auth.allows(PRODUCE)


def test_failures_fail_the_connection() -> None:
    auth = Authenticator(settings())
    code, mechanisms = auth.handshake("GSSAPI", 1)
    assert code == ErrorCode.unsupported_sasl_mechanism and mechanisms == ["PLAIN", "SCRAM-SHA-256"]
    assert auth.failed and not auth.allows(API_VERSIONS)
    auth = Authenticator(settings())
    auth.handshake("PLAIN", 1)
    result = auth.authenticate(b"\0alice\0wrong", 2)
    assert result.error == ErrorCode.sasl_authentication_failed
    assert result.message == "Authentication failed: Invalid username or password"
    assert auth.failed and "alice" in (auth.failure or "") and auth.principal is None
    auth = Authenticator(settings())  # SaslAuthenticate first
    assert auth.authenticate(b"\0alice\0pw-a", 2).error == ErrorCode.illegal_sasl_state
    assert auth.failed


def test_v0_handshake_switches_to_raw_tokens() -> None:
    auth = Authenticator(settings())
    auth.handshake("PLAIN", 0)
    assert auth.raw and not auth.allows(AUTHENTICATE)
    assert auth.authenticate(b"\0bob\0pw-b", 0).error == ErrorCode.none
    assert auth.authenticated and not auth.raw


def test_session_lifetime_expiry_and_reauthentication() -> None:
    clock = Clock()
    auth = Authenticator(settings(**{"connections.max.reauth.ms": "5000"}), clock)
    auth.handshake("PLAIN", 1)
    assert auth.authenticate(b"\0alice\0pw-a", 1).session_lifetime_ms == 5000
    clock.now += 4.9
    assert auth.allows(METADATA)
    clock.now += 0.2
    assert not auth.allows(METADATA)  # expired: only a re-authentication
    assert auth.allows(HANDSHAKE)
    assert auth.handshake("PLAIN", 1)[0] == ErrorCode.none
    assert not auth.allows(METADATA) and auth.allows(AUTHENTICATE)
    assert auth.authenticate(b"\0alice\0pw-a", 1).error == ErrorCode.none
    assert auth.allows(METADATA)  # a new session of 5 s
    clock.now += 1
    auth.handshake("PLAIN", 1)
    result = auth.authenticate(b"\0bob\0pw-b", 1)  # another principal: refused
    assert result.error == ErrorCode.sasl_authentication_failed and auth.failed


def test_reauthentication_must_keep_the_mechanism() -> None:
    auth = Authenticator(settings())
    auth.handshake("PLAIN", 1)
    auth.authenticate(b"\0alice\0pw-a", 1)
    assert auth.handshake("SCRAM-SHA-256", 1)[0] == ErrorCode.illegal_sasl_state
    assert auth.failed


@pytest.mark.parametrize("values,names", [
    ({"sasl.enabled.mechanisms": "GSSAPI"}, "sasl.enabled.mechanisms"),
    ({"sasl.enabled.mechanisms": "PLAIN"}, "listener.name.l.plain.sasl.jaas.config"),
    ({"sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": "Broken"}, "sasl.jaas.config"),
    ({"connections.max.reauth.ms": "soon"}, "connections.max.reauth.ms"),
])  # fmt: skip
def test_bad_settings_name_their_property(values: dict[str, str], names: str) -> None:
    with pytest.raises(SaslConfigError, match=names):
        SaslSettings.from_config(values, "L")


def test_default_mechanisms_without_kafkas_gssapi() -> None:
    assert SaslSettings.from_config({}, "L").mechanisms == ("SCRAM-SHA-256", "SCRAM-SHA-512")
    with_plain = SaslSettings.from_config({"listener.name.l.plain.sasl.jaas.config": JAAS}, "L")
    assert with_plain.mechanisms == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    assert with_plain.plain_users == {"alice": "pw-a", "bob": "pw-b"}
