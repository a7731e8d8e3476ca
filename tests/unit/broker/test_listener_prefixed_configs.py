"""Listener-prefixed broker configs (listener.name.<l>.<config>, KIP-226) take their base
config's rules: dynamic or not, type, sensitivity."""

from __future__ import annotations

from strom.broker import broker_config_defs as defs


def test_listener_prefixed_names_resolve_to_their_config() -> None:
    assert defs.base_name("listener.name.ssl.ssl.keystore.location") == "ssl.keystore.location"
    assert defs.base_name("listener.name.ssl.no.such.config") == "listener.name.ssl.no.such.config"
    assert defs.base_name("log.retention.ms") == "log.retention.ms"


def test_listener_prefixed_secrets_are_sensitive() -> None:
    for name in (
        "listener.name.internal.ssl.keystore.key",
        "listener.name.ssl.ssl.key.password",
        "ssl.keystore.key",
    ):
        assert defs.is_sensitive(name), name
    assert not defs.is_sensitive("listener.name.ssl.ssl.keystore.location")
    assert defs.type_id("listener.name.ssl.ssl.keystore.key") == defs.TYPE_IDS["password"]
    assert "ssl.keystore.location" in defs.APPLIED  # the TLS listeners reload it
