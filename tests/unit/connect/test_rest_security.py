"""The REST login's parts: Kafka's JAAS file syntax, where the file is named, basic auth."""

from __future__ import annotations

import base64

import pytest

from strom.connect.rest_security import (
    BasicAuth,
    jaas_location,
    parse_jaas_file,
    tls_settings,
)
from strom.connect.worker_config import WorkerConfigError


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_jaas_file_entries_options_and_comments() -> None:
    text = '''/* two entries */
    KafkaConnect {
      org.example.A required file="/x/users.properties" other=plain; // trailing
      org.example.B optional quoted="a \\"q\\" b";
    };
    KafkaClient { org.example.C sufficient; };'''
    entries = parse_jaas_file(text)
    assert list(entries) == ["KafkaConnect", "KafkaClient"]
    a, b = entries["KafkaConnect"]
    assert (a.name, a.flag, a.options) == ("org.example.A", "required",
                                           {"file": "/x/users.properties", "other": "plain"})
    assert b.options == {"quoted": 'a "q" b'}
    assert entries["KafkaClient"][0].options == {}


@pytest.mark.parametrize("text", ["KafkaConnect { m badflag; };", "KafkaConnect { m required",
                                  "KafkaConnect m required; };", "K { m required a b; };"])
def test_jaas_syntax_errors_are_one_line(text: str) -> None:
    with pytest.raises(WorkerConfigError, match="JAAS configuration"):
        parse_jaas_file(text)


def test_jaas_location_property_then_kafka_opts() -> None:
    env = {"KAFKA_OPTS": "-Xmx1g -Djava.security.auth.login.config=/etc/jaas.conf -Dx=y"}
    assert jaas_location({}, env) == "/etc/jaas.conf"
    assert jaas_location({"java.security.auth.login.config": "/w.conf"}, env) == "/w.conf"
    assert jaas_location({}, {}) is None


def test_basic_auth_checks() -> None:
    auth = BasicAuth({"alice": "s3cret", "bob": "a:b"}, "users")
    assert auth.check(basic("alice", "s3cret")) == "alice"
    assert auth.check("basic " + basic("alice", "s3cret").split()[1]) == "alice"
    assert auth.check(basic("bob", "a:b")) == "bob"
    for header in (None, "", basic("alice", "nope"), basic("carol", "s3cret"),
                   "Bearer abc", "Basic !!!", "Basic " + base64.b64encode(b"nocolon").decode(),
                   basic("", "s3cret")):
        assert auth.check(header) is None, header
    # an empty users file lets everyone in (Kafka's rule)
    assert BasicAuth({}, "empty").check(None) == ""


def test_tls_settings_are_all_or_nothing() -> None:
    worker = {"ssl.keystore.location": "/a", "ssl.truststore.location": "/t"}
    assert tls_settings(worker) == worker
    worker["listeners.https.ssl.keystore.location"] = "/b"
    assert tls_settings(worker) == {"ssl.keystore.location": "/b"}
