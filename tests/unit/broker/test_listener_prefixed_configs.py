"""Listener-prefixed broker configs (listener.name.<l>.<config>, KIP-226) take their base
config's rules: dynamic or not, type, sensitivity."""

from __future__ import annotations

from strom.broker import broker_config_defs as defs


def test_listener_prefixed_names_resolve_to_their_config() -> None:
    assert defs.base_name("listener.name.ssl.ssl.keystore.location") == "ssl.keystore.location"
    assert defs.base_name("listener.name.ssl.no.such.config") == "listener.name.ssl.no.such.config"
    assert defs.base_name("log.retention.ms") == "log.retention.ms"


def test_a_listener_mechanisms_sasl_configs_resolve_to_their_config() -> None:
    """listener.name.<l>.<mechanism>.<config>: Kafka's per-mechanism SASL settings."""
    assert defs.base_name("listener.name.sasl_ssl.plain.sasl.jaas.config") == "sasl.jaas.config"
    assert defs.base_name("listener.name.internal.scram-sha-512.sasl.jaas.config") == \
        "sasl.jaas.config"  # fmt: skip
    assert defs.base_name("listener.name.sasl_ssl.oauthbearer.connections.max.reauth.ms") == \
        "connections.max.reauth.ms"  # fmt: skip
    # only SASL's: another config under a mechanism-like level is no config at all
    assert defs.base_name("listener.name.ssl.plain.ssl.keystore.location") == \
        "listener.name.ssl.plain.ssl.keystore.location"  # fmt: skip
    jaas = "listener.name.sasl_ssl.plain.sasl.jaas.config"
    assert defs.is_sensitive(jaas) and defs.is_dynamic_password(jaas)
    assert defs.base_name(jaas) in defs.PER_BROKER_ONLY  # Kafka: per broker, not cluster-wide


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
