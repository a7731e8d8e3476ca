"""Connect's REST API with a login: Kafka Connect's basic auth extension, HTTPS and mTLS, on
real standalone workers configured with Kafka Connect's names and a CA made by the test."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.testing.connect import ConnectWorkerProcess
from strom.testing.tls import CertificateAuthority, Issued
from tests.integration.cli_helpers import assert_clean_error, strom
from tests.integration.clients import create_topic
from tests.integration.connect_helpers import connect_broker, wait_for

EXTENSION = "org.apache.kafka.connect.rest.basic.auth.extension.BasicAuthSecurityRestExtension"
MODULE = "org.apache.kafka.connect.rest.basic.auth.extension.PropertyFileLoginModule"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    yield from connect_broker(tmp_path_factory)


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority()


def jaas_files(folder: Path) -> Path:
    """A JAAS file in Kafka's syntax (with a comment) naming a users file of two users."""
    users = folder / "users.properties"
    users.write_text("# Kafka Connect REST users\nalice: alice-secret\nbob=bob:secret\n")
    jaas = folder / "connect_jaas.conf"
    jaas.write_text(f'// the REST login\nKafkaConnect {{\n  {MODULE} required\n'
                    f'  file="{users}";\n}};\n')
    return jaas


def test_basic_auth_refuses_without_right_credentials(broker: Any, tmp_path: Path,
                                                      topic_name: str) -> None:
    jaas = jaas_files(tmp_path)
    worker = ConnectWorkerProcess(
        tmp_path / "w", broker.bootstrap, settings={"rest.extension.classes": EXTENSION},
        env={"KAFKA_OPTS": f"-Xmx1g -Djava.security.auth.login.config={jaas}"})
    worker.start()
    try:
        for auth in (None, ("alice", "wrong"), ("mallory", "alice-secret"), ("alice", "")):
            status, body = worker.request("GET", "/connectors", auth=auth)
            assert (status, body) == (401, "User cannot access the resource."), auth
        # a refused write changes nothing
        config = {"connector.class": "FileStreamSink", "tasks.max": "1", "topics": topic_name,
                  "file": str(tmp_path / "out.txt")}
        assert worker.request("POST", "/connectors", {"name": "s", "config": config},
                              auth=("bob", "wrong"))[0] == 401
        assert worker.request("GET", "/connectors", auth=("alice", "alice-secret")) == (200, [])
        # a password holding ':' (only the first colon separates user from password)
        create_topic(broker.bootstrap, topic_name, partitions=1)
        status, _ = worker.request("POST", "/connectors", {"name": "s", "config": config},
                                   auth=("bob", "bob:secret"))
        assert status == 201
        assert worker.request("GET", "/connectors", auth=("alice", "alice-secret")) == (200, ["s"])
        assert "REST API on http://127.0.0.1" in worker.log_tail(100)
        assert "basic auth" in worker.log_tail(100)
        # strom's own REST client (strom connector, the console) with credentials in the URL
        url = f"http://bob:bob%3Asecret@127.0.0.1:{worker.port}"
        listed = strom("connector", "list", "--connect-url", url, "--format", "json")
        assert listed.returncode == 0, listed.stderr
        assert [c["name"] for c in json.loads(listed.stdout)] == ["s"]
        refused = assert_clean_error(strom("connector", "list", "--connect-url",
                                           f"http://bob:nope@127.0.0.1:{worker.port}"))
        assert "HTTP 401" in refused and "nope" not in refused
    finally:
        worker.stop()


def test_without_login_says_so(broker: Any, tmp_path: Path) -> None:
    worker = ConnectWorkerProcess(tmp_path / "w", broker.bootstrap)
    worker.start()
    try:
        assert worker.request("GET", "/connectors") == (200, [])
        wait_for(lambda: "without a login" in worker.log_tail(100), "the start-up line")
    finally:
        worker.stop()


def test_https_with_client_certificates_and_basic_auth(broker: Any, ca: CertificateAuthority,
                                                       tmp_path: Path) -> None:
    keystore = ca.issue("CN=connect", hosts=("127.0.0.1",)).write_pem(tmp_path / "connect.pem",
                                                                      password="kp")
    ca_file = ca.write_pem(tmp_path / "ca.pem")
    client = ca.issue("CN=operator", hosts=())
    stranger = CertificateAuthority().issue("CN=stranger", hosts=())
    jaas = jaas_files(tmp_path)
    settings = {
        "rest.extension.classes": EXTENSION,
        "java.security.auth.login.config": str(jaas),
        "listeners.https.ssl.keystore.type": "PEM",
        "listeners.https.ssl.keystore.location": str(keystore),
        "listeners.https.ssl.key.password": "kp",
        "listeners.https.ssl.truststore.type": "PEM",
        "listeners.https.ssl.truststore.location": str(ca_file),
        "listeners.https.ssl.client.auth": "required",
    }

    def context(cert: Issued | None = None) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(ca_file))
        if cert is not None:
            name = cert.certificate.subject.rfc4514_string()
            cert.write_cert_and_key(tmp_path / f"{name}.crt", tmp_path / f"{name}.key")
            ctx.load_cert_chain(str(tmp_path / f"{name}.crt"), str(tmp_path / f"{name}.key"))
        return ctx

    worker = ConnectWorkerProcess(tmp_path / "w", broker.bootstrap, settings=settings,
                                  scheme="https", client_ssl=context(client))
    worker.start()
    try:
        assert worker.request("GET", "/connectors", auth=("alice", "alice-secret")) == (200, [])
        assert worker.request("GET", "/connectors")[0] == 401  # certificate alone: not enough
        # no client certificate, or one from another CA: the TLS handshake fails
        for ctx in (context(), context(stranger)):
            with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
                urllib.request.urlopen(worker.url + "/connectors", timeout=10, context=ctx)
        # plain http on the https port gets nothing served
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            urllib.request.urlopen(f"http://127.0.0.1:{worker.port}/connectors", timeout=10)
        assert "client certificates required" in worker.log_tail(100)
    finally:
        worker.stop()


def test_https_pkcs12_keystore(broker: Any, ca: CertificateAuthority, tmp_path: Path) -> None:
    store = ca.issue("CN=connect12", hosts=("127.0.0.1",)).write_pkcs12(
        tmp_path / "connect12.p12", "storepass")
    ca_file = ca.write_pem(tmp_path / "ca.pem")
    settings = {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(store),
                "ssl.keystore.password": "storepass"}
    worker = ConnectWorkerProcess(tmp_path / "w", broker.bootstrap, settings=settings,
                                  scheme="https",
                                  client_ssl=ssl.create_default_context(cafile=str(ca_file)))
    worker.start()
    try:
        status, body = worker.request("GET", "/")
        assert status == 200 and body["version"]
    finally:
        worker.stop()


def test_bad_security_settings_are_one_line(broker: Any, tmp_path: Path) -> None:
    cases = [
        ({"rest.extension.classes": EXTENSION}, "needs a JAAS file"),
        ({"rest.extension.classes": "com.example.Other"}, "unsupported com.example.Other"),
        ({"listeners": "https://127.0.0.1:1"}, "needs a key store"),
        ({"rest.extension.classes": EXTENSION,
          "java.security.auth.login.config": str(tmp_path / "missing.conf")}, "cannot read"),
    ]
    for extra, expected in cases:
        props = {"bootstrap.servers": broker.bootstrap, "listeners": "http://127.0.0.1:0",
                 "offset.storage.file.filename": str(tmp_path / "o"),
                 "key.converter": "org.apache.kafka.connect.storage.StringConverter",
                 "value.converter": "org.apache.kafka.connect.storage.StringConverter",
                 **extra}
        path = tmp_path / "worker.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        line = assert_clean_error(strom("connect", "standalone", str(path), timeout=30))
        assert expected in line, line


def test_distributed_forwarding_over_https_with_basic_auth(broker: Any, ca: CertificateAuthority,
                                                           tmp_path: Path) -> None:
    """Two distributed workers, HTTPS with client certificates required and basic auth: a
    request to the follower is forwarded to the leader over TLS (the worker's own certificate)
    with the caller's credentials; the connector's task configs reach the leader through the
    internal endpoint, so its task runs."""
    keystore = ca.issue("CN=worker", hosts=("127.0.0.1",)).write_pem(tmp_path / "worker.pem")
    ca_file = ca.write_pem(tmp_path / "ca.pem")
    ca.issue("CN=operator", hosts=()).write_cert_and_key(tmp_path / "op.crt", tmp_path / "op.key")
    jaas = jaas_files(tmp_path)
    tag = tmp_path.name[-12:]
    settings = {
        "group.id": f"secure-{tag}", "config.storage.topic": f"secure-configs-{tag}",
        "offset.storage.topic": f"secure-offsets-{tag}",
        "status.storage.topic": f"secure-status-{tag}",
        "rest.extension.classes": EXTENSION, "java.security.auth.login.config": str(jaas),
        "listeners.https.ssl.keystore.location": str(keystore),
        "listeners.https.ssl.truststore.location": str(ca_file),
        "listeners.https.ssl.client.auth": "required",
    }
    ctx = ssl.create_default_context(cafile=str(ca_file))
    ctx.load_cert_chain(str(tmp_path / "op.crt"), str(tmp_path / "op.key"))
    workers = [ConnectWorkerProcess(tmp_path / f"w{i}", broker.bootstrap, settings=settings,
                                    distributed=True, scheme="https", client_ssl=ctx)
               for i in range(2)]
    for w in workers:
        w.start()
    try:
        def leader() -> ConnectWorkerProcess | None:
            for w in workers:
                lines = [ln for ln in w.log_file.read_text().splitlines() if " generation " in ln]
                if lines and "= this worker" in lines[-1]:
                    return w
            return None

        def both_joined() -> bool:  # one generation naming both workers' assignments
            return all(" generation " in w.log_file.read_text() for w in workers) and \
                leader() is not None
        wait_for(both_joined, "both workers in one group", timeout=60)
        lead = leader()
        follower = next(w for w in workers if w is not lead)
        (tmp_path / "in.txt").write_text("x\n")
        config = {"connector.class": "FileStreamSource", "tasks.max": "1",
                  "file": str(tmp_path / "in.txt"), "topic": f"secure-out-{tag}"}
        body = {"name": "fwd", "config": config}
        assert follower.request("POST", "/connectors", body)[0] == 401

        def created() -> bool:
            status, doc = follower.request("POST", "/connectors", body,
                                           auth=("alice", "alice-secret"))
            assert status in (201, 409), (status, doc)  # 409: a rebalance, asked again
            return status == 201

        wait_for(created, "the connector created through the follower", timeout=60)

        def running() -> bool:
            status, doc = follower.request("GET", "/connectors/fwd/status",
                                           auth=("alice", "alice-secret"))
            return status == 200 and [t["state"] for t in doc["tasks"]] == ["RUNNING"]

        wait_for(running, "the connector's task running", timeout=60)
    finally:
        for w in workers:
            w.stop()
