"""Named listeners parsed as Kafka parses them (strom.security.listeners)."""

from __future__ import annotations

import pytest

from strom.security.listeners import (
    DEFAULT_PROTOCOL_MAP,
    ListenerConfigError,
    from_config,
    parse_listener_list,
    parse_protocol_map,
)


def test_kafka_default_map_and_single_plaintext_default() -> None:
    assert (
        parse_protocol_map(None)
        == DEFAULT_PROTOCOL_MAP
        == {
            "PLAINTEXT": "PLAINTEXT",
            "SSL": "SSL",
            "SASL_PLAINTEXT": "SASL_PLAINTEXT",
            "SASL_SSL": "SASL_SSL",
        }
    )
    ls = from_config({})
    assert [(s.name, s.host, s.port, s.security_protocol) for s in ls.bound] == [
        ("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT")
    ]
    assert ls.inter_broker == "PLAINTEXT"


def test_several_named_listeners_with_overrides() -> None:
    values = {
        "listeners": "INTERNAL://127.0.0.2:9093,EXTERNAL://:9092",
        "advertised.listeners": "internal://127.0.0.2:9093,EXTERNAL://broker1.example:19092",
        "listener.security.protocol.map": "INTERNAL:SSL, external:sasl_ssl",
        "inter.broker.listener.name": "internal",
        "sasl.enabled.mechanisms": "GSSAPI",
        "listener.name.external.sasl.enabled.mechanisms": "plain,SCRAM-SHA-256",
        "listener.name.external.scram-sha-256.sasl.jaas.config": "per mechanism",
        "sasl.jaas.config": "broker-wide",
        "ssl.client.auth": "none",
        "listener.name.internal.ssl.client.auth": "required",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
    }
    ls = from_config(values)
    internal, external = ls.bound
    assert (internal.name, internal.security_protocol, internal.uses_tls, internal.uses_sasl) == (
        "INTERNAL",
        "SSL",
        True,
        False,
    )
    assert (external.host, external.bind_host, external.port, external.uses_sasl) == (
        "",
        None,
        9092,
        True,
    )
    assert [(s.name, s.host, s.port) for s in ls.advertised] == [
        ("INTERNAL", "127.0.0.2", 9093),
        ("EXTERNAL", "broker1.example", 19092),
    ]
    assert ls.inter_broker_listener.port == 9093
    assert ls.inter_broker_sasl_mechanism == "SCRAM-SHA-512"
    assert [s.name for s in ls.registration_order()] == ["INTERNAL", "EXTERNAL"]
    assert external.get("sasl.enabled.mechanisms") == "plain,SCRAM-SHA-256"  # as written
    assert internal.get("sasl.enabled.mechanisms") == "GSSAPI"  # the broker-wide setting
    assert external.get("sasl.jaas.config", mechanism="SCRAM-SHA-256") == "per mechanism"
    assert external.get("sasl.jaas.config", mechanism="PLAIN") == "broker-wide"
    assert internal.get("ssl.client.auth") == "required"
    assert external.get("ssl.client.auth") == "none"
    assert external.overrides() == {
        "sasl.enabled.mechanisms": "plain,SCRAM-SHA-256",
        "scram-sha-256.sasl.jaas.config": "per mechanism",
    }


def test_inter_broker_listener_first_in_registration_order() -> None:
    ls = from_config(
        {"listeners": "PLAINTEXT://h:1,SSL://h:2", "security.inter.broker.protocol": "SSL"}
    )
    assert ls.inter_broker == "SSL"
    assert [s.name for s in ls.registration_order()] == ["SSL", "PLAINTEXT"]
    assert [s.host for s in ls.advertised] == ["h", "h"]


def test_wildcard_listener_advertised_as_localhost() -> None:
    ls = from_config({"listeners": "PLAINTEXT://0.0.0.0:9092"})
    assert (ls.bound[0].bind_host, ls.advertised[0].host) == (None, "localhost")


def test_listen_shortcut() -> None:
    ls = from_config({}, "[127.0.0.1]:0", "[example.com]:9092")
    assert [(s.name, s.host, s.port) for s in ls.bound] == [("PLAINTEXT", "127.0.0.1", 0)]
    assert [(s.host, s.port) for s in ls.advertised] == [("example.com", 9092)]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"listeners": "PLAINTEXT://h:1,PLAINTEXT://h:2"}, "given twice"),
        ({"listeners": "PLAINTEXT:/h:1"}, "is not NAME://HOST:PORT"),
        ({"listeners": "PLAINTEXT://h:70000"}, "port"),
        ({"listeners": "INTERNAL://h:1"}, "no security protocol for listener INTERNAL"),
        ({"listener.security.protocol.map": "A:TLS"}, "unknown security protocol 'TLS'"),
        ({"listener.security.protocol.map": "A"}, "is not NAME:SECURITY_PROTOCOL"),
        ({"listeners": "SSL://h:1"}, "inter-broker listener must be one of the advertised"),
        (
            {"listeners": "PLAINTEXT://h:1", "advertised.listeners": "SSL://h:2"},
            "SSL is not one of the listeners",
        ),
        (
            {"listeners": "PLAINTEXT://h:1", "advertised.listeners": "PLAINTEXT://0.0.0.0:1"},
            "wildcard",
        ),
        (
            {
                "inter.broker.listener.name": "PLAINTEXT",
                "security.inter.broker.protocol": "PLAINTEXT",
            },
            "only one of",
        ),
        ({"security.inter.broker.protocol": "TLS"}, "unknown security protocol"),
    ],
)
def test_refused_with_the_property_named(values: dict[str, str], message: str) -> None:
    with pytest.raises(ListenerConfigError, match=message):
        from_config(values)


def test_listen_shortcut_and_listeners_property_conflict() -> None:
    with pytest.raises(ListenerConfigError, match="--listen and the property listeners"):
        from_config({"listeners": "PLAINTEXT://h:1"}, "[h]:2")


def test_ipv6_hosts() -> None:
    assert parse_listener_list("SSL://[::1]:9093", "listeners") == [("SSL", "::1", 9093)]
    spec = from_config({"listeners": "PLAINTEXT://[::1]:9093"}).bound[0]
    assert spec.url() == "PLAINTEXT://[::1]:9093"
