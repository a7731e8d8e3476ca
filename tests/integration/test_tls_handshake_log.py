"""Failed TLS handshakes in a real broker's log and metrics: confluent-kafka clients with the
wrong CA, speaking plaintext to the TLS port and without a client certificate on an
ssl.client.auth=required listener are refused; each case is one INFO line in the broker log
(its default level) naming the listener, the peer and OpenSSL's reason, however often the
client retries, and counted in failed_authentication_total of its listener; a TCP connection
that sends nothing is neither; on a SASL_SSL listener a refused handshake is logged the same
way and a wrong password is counted too; good clients are served afterwards."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from strom.testing.process import BrokerProcess, free_port, properties_file, wait_for_port
from strom.testing.tls import CertificateAuthority, TlsFiles, make_tls_files
from tests.integration.admin_http import scrape
from tests.integration.clients import consume_all, produce

METRIC = "kafka_server_socket_server_metrics_failed_authentication_total"
API_VERSIONS = bytes.fromhex("0000001500120003000000010004746573740000000000")
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="admin" password="admin-secret" user_alice="alice-secret";')  # fmt: skip


@dataclass
class Broker:
    proc: BrokerProcess
    files: TlsFiles
    ssl_port: int
    mtls_port: int
    sasl_ssl_port: int
    tmp: Path

    def log(self) -> str:
        return self.proc.log_file.read_text(errors="replace")

    def failures(self, listener: str, reason: str) -> list[str]:
        """The broker's lines for a refused handshake on ``listener`` with ``reason``."""
        pattern = re.compile(r"INFO strom\.broker\.auth_failures: failed authentication with "
                             rf"127\.0\.0\.1:\d+ \(listener {listener}\): SSL handshake "
                             rf"failed: {reason}$")  # fmt: skip
        return [line for line in self.log().splitlines() if pattern.search(line)]

    def wait_failures(self, listener: str, reason: str, timeout: float = 10.0) -> list[str]:
        deadline = time.monotonic() + timeout
        while not (lines := self.failures(listener, reason)) and time.monotonic() < deadline:
            time.sleep(0.1)
        return lines

    def counted(self, metric: str = METRIC) -> dict[str, float]:
        """failed_authentication_total (or another per-listener series) by listener."""
        series = scrape(self.proc.admin_url).series(metric)
        return {dict(labels)["listener"]: value for labels, value in series.items()}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    tmp = tmp_path_factory.mktemp("tlslog")
    files = make_tls_files(tmp / "tls")
    plain, ssl_port, mtls, sasl_ssl = free_port(), free_port(), free_port(), free_port()
    props = {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{ssl_port},"
                     f"MTLS://127.0.0.1:{mtls},SASL_SSL://127.0.0.1:{sasl_ssl}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,"
                                          "SASL_SSL:SASL_SSL",
        "inter.broker.listener.name": "PLAINTEXT",
        "group.initial.rebalance.delay.ms": "0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        **files.listener_properties("SSL"),
        **files.listener_properties("MTLS", client_auth="required"),
        **files.listener_properties("SASL_SSL"),
    }  # fmt: skip
    config = properties_file(tmp / "server.properties", props)
    proc = BrokerProcess(tmp / "data", port=plain, config_file=config, admin=True)  # INFO
    with proc:
        for port in (ssl_port, mtls, sasl_ssl):  # start-up waited for the first listener
            assert wait_for_port("127.0.0.1", port, 20)
        yield Broker(proc, files, ssl_port, mtls, sasl_ssl, tmp)


def _refused(conf: dict[str, Any]) -> list[Any]:
    """Produce one message with ``conf`` (librdkafka retries the connection meanwhile): the
    delivery errors."""
    errors: list[Any] = []
    producer = Producer({**conf, "message.timeout.ms": 3000, "socket.timeout.ms": 3000})
    producer.produce("refused", b"secret", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(10)
    return errors


def _served(broker: Broker, port: int, mtls: bool, topic: str, **sasl: str) -> None:
    conf = {**broker.files.client_config(mtls), **sasl}
    bootstrap = f"127.0.0.1:{port}"
    sent = [f"{topic}-{i}".encode() for i in range(50)]
    produce(bootstrap, topic, [{"value": v, "partition": 0} for v in sent], **conf)
    got = consume_all(bootstrap, topic, [0], expected=len(sent), **conf)
    assert [m.value() for m in got] == sent


def test_refused_clients_are_one_line_each_and_counted(broker: Broker) -> None:
    assert broker.counted() == {"SSL": 0, "MTLS": 0, "SASL_SSL": 0}  # from 0
    files = broker.files
    # a client that trusts another CA refuses the broker's certificate
    other = CertificateAuthority("CN=another CA").write_pem(broker.tmp / "other-ca.pem")
    conf = {"bootstrap.servers": f"127.0.0.1:{broker.ssl_port}", **files.client_config(),
            "ssl.ca.location": str(other)}  # fmt: skip
    assert [e is not None for e in _refused(conf)] == [True]
    assert len(broker.wait_failures("SSL", "TLSV1_ALERT_UNKNOWN_CA")) == 1
    # a plaintext client on the TLS port
    conf = {"bootstrap.servers": f"127.0.0.1:{broker.ssl_port}"}
    assert [e is not None for e in _refused(conf)] == [True]
    assert len(broker.wait_failures("SSL", "WRONG_VERSION_NUMBER")) == 1
    # no client certificate where ssl.client.auth=required
    conf = {"bootstrap.servers": f"127.0.0.1:{broker.mtls_port}", **files.client_config()}
    assert [e is not None for e in _refused(conf)] == [True]
    assert len(broker.wait_failures("MTLS", "PEER_DID_NOT_RETURN_A_CERTIFICATE")) == 1
    # each client retried within the minute: still one line per case, every attempt counted
    counted = broker.counted()
    assert counted["SSL"] >= 2 and counted["MTLS"] >= 1, counted
    assert len(broker.failures("SSL", "TLSV1_ALERT_UNKNOWN_CA")) == 1
    assert len(broker.failures("SSL", "WRONG_VERSION_NUMBER")) == 1
    assert "Traceback" not in broker.log()
    # good clients are served on both listeners
    _served(broker, broker.ssl_port, False, "after-ssl")
    _served(broker, broker.mtls_port, True, "after-mtls")
    # the connections are counted on their own listeners (a refused handshake is not one)
    created = broker.counted("kafka_server_socket_server_metrics_connection_creation_total")
    assert {"PLAINTEXT", "SSL", "MTLS", "SASL_SSL"} <= set(created), created
    assert created["SSL"] >= 1 and created["MTLS"] >= 1, created


def _plaintext(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        raw.sendall(API_VERSIONS)
        assert raw.recv(100) == b""  # closed without a byte


def test_a_burst_is_counted_exactly_and_a_silent_connection_is_not(broker: Broker) -> None:
    before = broker.counted()
    lines_before = broker.failures("MTLS", "WRONG_VERSION_NUMBER")
    for _ in range(5):
        _plaintext(broker.mtls_port)
    with socket.create_connection(("127.0.0.1", broker.mtls_port), timeout=10):
        pass  # a TCP health check: connects, sends nothing, closes
    deadline = time.monotonic() + 10
    while broker.counted()["MTLS"] < before["MTLS"] + 5 and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.3)  # the silent connection's end reaches the broker too
    after = broker.counted()
    assert (after["MTLS"] - before["MTLS"], after["SSL"] - before["SSL"]) == (5, 0)
    # one line for the five (at most one when an earlier test already logged this pair)
    assert len(broker.failures("MTLS", "WRONG_VERSION_NUMBER")) == 1
    assert len(lines_before) in (0, 1)
    # the silent connection is not in the log at INFO
    assert "abandoned" not in broker.log()
    _served(broker, broker.mtls_port, True, "after-burst")


def _sasl(password: str) -> dict[str, str]:
    return {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
            "sasl.username": "alice", "sasl.password": password}  # fmt: skip


def test_sasl_ssl_refused_handshake_logged_wrong_password_counted(broker: Broker) -> None:
    files = broker.files
    before = broker.counted()["SASL_SSL"]
    bootstrap = f"127.0.0.1:{broker.sasl_ssl_port}"
    # the client refuses the broker's certificate: the handshake's line, as on SSL
    other = CertificateAuthority("CN=third CA").write_pem(broker.tmp / "third-ca.pem")
    conf = {"bootstrap.servers": bootstrap, **files.client_config(), **_sasl("alice-secret"),
            "ssl.ca.location": str(other)}  # fmt: skip
    assert [e is not None for e in _refused(conf)] == [True]
    assert len(broker.wait_failures("SASL_SSL", "TLSV1_ALERT_UNKNOWN_CA")) == 1
    handshakes = broker.counted()["SASL_SSL"] - before
    assert handshakes >= 1
    # a wrong password over TLS: SASL's own line, and one more count per attempt
    conf = {"bootstrap.servers": bootstrap, **files.client_config(), **_sasl("wrong")}
    assert [e is not None for e in _refused(conf)] == [True]
    sasl_lines = [line for line in broker.log().splitlines()
                  if "failed authentication with 127.0.0.1:" in line
                  and "(connection " in line and "listener SASL_SSL, mechanism PLAIN)" in line]  # fmt: skip
    # one line however often librdkafka tried again (the minute's summary comes later); each
    # attempt counted
    assert len(sasl_lines) == 1, broker.log()[-2000:]
    assert broker.counted()["SASL_SSL"] - before >= handshakes + 1
    # a good SASL_SSL client is served
    _served(broker, broker.sasl_ssl_port, False, "after-sasl-ssl", **_sasl("alice-secret"))
