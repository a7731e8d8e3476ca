"""Client security settings reach the clients strom's tools make: the CLI (``-X`` and
profiles, confluent-kafka and strom's own wire requests), the Spark source's executors and
Connect workers (top-level and ``producer.*`` settings in the Java client's names).

The broker is started from a server.properties with Kafka's names: an mTLS listener
(``ssl.client.auth=required``, a CA made by the test) the clients are pointed at, and a
PLAINTEXT one for inter-broker traffic only. Metadata answers each client with the listener it
came in on, so a client works at all only if it speaks TLS with the certificate it was given.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as TP
from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing import BrokerProcess, free_port
from strom.testing.connect import ConnectWorkerProcess
from strom.testing.process import properties_file
from strom.testing.tls import make_tls_files
from tests.integration.cli_helpers import assert_clean_error, strom
from tests.integration.connect_helpers import wait_for


@dataclass
class Secured:
    broker: BrokerProcess
    address: str  # the mTLS listener
    ca: Path
    client_cert: Path
    client_key: Path
    client_keystore: Path  # key + chain, one PEM file (the Java client's PEM key store)

    @property
    def librdkafka(self) -> dict[str, str]:
        return {"bootstrap.servers": self.address, "security.protocol": "SSL",
                "ssl.ca.location": str(self.ca),
                "ssl.certificate.location": str(self.client_cert),
                "ssl.key.location": str(self.client_key)}

    @property
    def java(self) -> dict[str, str]:
        """The same in the Java client's names (PEM trust store and key store)."""
        return {"security.protocol": "SSL", "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(self.ca), "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(self.client_keystore)}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    folder = tmp_path_factory.mktemp("secured")
    files = make_tls_files(folder / "tls", client_dn="CN=operator,O=strom")
    keystore = files.authority.issue("CN=operator,O=strom", hosts=()).write_pem(
        folder / "tls" / "operator.pem")
    plain, mtls = free_port(), free_port()
    props = {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},MTLS://127.0.0.1:{mtls}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,MTLS:SSL",
        "inter.broker.listener.name": "PLAINTEXT",
        "group.initial.rebalance.delay.ms": "0",
        **files.listener_properties("MTLS", client_auth="required"),
    }
    config = properties_file(folder / "server.properties", props)
    broker = BrokerProcess(folder / "data", port=plain, config_file=config)
    broker.start()
    try:
        yield Secured(broker, f"127.0.0.1:{mtls}", files.ca, files.client_cert,
                      files.client_key, keystore)
    finally:
        broker.stop()


def x_options(props: dict[str, str]) -> list[str]:
    return [a for k, v in props.items() if k != "bootstrap.servers" for a in ("-X", f"{k}={v}")]


def produce(secured: Secured, topic: str, values: list[bytes]) -> None:
    admin = AdminClient(secured.librdkafka)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer(secured.librdkafka)
    for v in values:
        producer.produce(topic, v, partition=0)
    assert producer.flush(30) == 0


def consume(secured: Secured, topic: str, count: int) -> list[bytes]:
    consumer = Consumer({**secured.librdkafka, "group.id": f"check-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([TP(topic, 0, 0)])
    got: list[bytes] = []
    try:
        wait_for(lambda: (got.extend(m.value() for m in consumer.consume(10, 0.5)
                                     if m.error() is None) or len(got) >= count),
                 f"{count} records of {topic}", timeout=40)
    finally:
        consumer.close()
    return got


def test_cli_x_options_and_profiles(secured: Secured, tmp_path: Path, topic_name: str) -> None:
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config")}
    b = ["-b", secured.address]
    x = x_options(secured.librdkafka)
    # plain text to the TLS endpoint: nothing works, one line
    assert_clean_error(strom("topic", "list", *b, "--timeout", "3", env=env))
    assert strom("topic", "create", topic_name, *b, *x, env=env).returncode == 0
    sent = strom("produce", topic_name, *b, *x, stdin="one\ntwo\n", env=env)
    assert sent.returncode == 0, sent.stderr
    read = ("--from-beginning", "--max-messages", "2", "--timeout-ms", "20000")
    got = strom("consume", topic_name, *b, *x, *read, env=env)
    assert got.stdout.splitlines() == ["one", "two"], got.stderr
    # strom's own wire request (DescribeConfigs of the cluster default) over TLS too
    default = strom("cluster", "config", "get", "--default", *b, *x, "--format", "json",
                    env=env)
    assert default.returncode == 0 and isinstance(json.loads(default.stdout), list), \
        default.stderr
    # a profile keeps the settings, here in the Java client's names
    created = strom("profile", "create", "secure", *b, *x_options(secured.java), env=env)
    assert created.returncode == 0, created.stderr
    assert strom("consume", topic_name, *read, env=env).stdout.splitlines() == ["one", "two"]
    assert strom("cluster", "config", "get", "--default", env=env).returncode == 0
    listed = json.loads(strom("profile", "list", "--format", "json", env=env).stdout)
    assert listed[0]["properties"]["ssl.truststore.location"] == str(secured.ca)
    # a password is kept (mode 0600 file) but never shown
    strom("profile", "create", "sasl", *b, "-X", "sasl.password=hunter2", env=env)
    profiles = tmp_path / "config" / "strom" / "profiles.toml"
    assert os.stat(profiles).st_mode & 0o077 == 0
    shown = strom("profile", "list", "--format", "json", env=env).stdout
    assert "hunter2" not in shown and "******" in shown
    # SASL with a mechanism strom's own connection does not have: one line, nothing sent
    line = assert_clean_error(strom(
        "cluster", "config", "get", "--default", *b, "-X", "security.protocol=SASL_SSL",
        "-X", "sasl.mechanism=GSSAPI", "-X", "sasl.username=u", "-X", "sasl.password=p",
        env=env))
    assert "sasl.mechanism=GSSAPI" in line


def test_spark_executors_read_over_tls(secured: Secured, topic_name: str) -> None:
    pytest.importorskip("pyarrow")
    from strom.spark.fetcher import RangePartition, read_range
    from strom.spark.options import parse_read_options
    from strom.spark.schema import arrow_schema

    values = [f"v{i}".encode() for i in range(25)]
    produce(secured, topic_name, values)
    options = {"kafka.bootstrap.servers": secured.address, "subscribe": topic_name,
               **{f"kafka.{k}": v for k, v in secured.java.items()}}
    opts = parse_read_options(options, streaming=False)
    assert opts.client["ssl.ca.location"] == str(secured.ca)  # Java names carried over
    schema = arrow_schema(False)
    rows = [r for b in read_range(opts, RangePartition(topic_name, 0, 0, 25), schema)
            for r in b.to_pylist()]
    assert [r["value"] for r in rows] == values
    assert [r["offset"] for r in rows] == list(range(25))


def test_connect_worker_clients_over_tls(secured: Secured, tmp_path: Path,
                                         topic_name: str) -> None:
    lines = [f"line {i}" for i in range(7)]
    (tmp_path / "in.txt").write_text("".join(f"{line}\n" for line in lines))
    source = tmp_path / "source.properties"
    source.write_text(f"name=tls-source\nconnector.class=FileStreamSource\ntasks.max=1\n"
                      f"file={tmp_path / 'in.txt'}\ntopic={topic_name}\n")
    admin = AdminClient(secured.librdkafka)  # held: a collected client cancels its futures
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(30)
    settings = {**secured.java,  # the worker's own clients
                **{f"producer.{k}": v for k, v in secured.java.items()}}  # the task's producer
    worker = ConnectWorkerProcess(tmp_path / "w", secured.address,
                                  connector_files=[source], settings=settings)
    worker.start()
    try:
        got = consume(secured, topic_name, len(lines))
        assert [v.decode() for v in got] == lines
        # the worker's own admin client (the cluster id of GET /) went through TLS too
        cluster_id = wait_for(lambda: worker.request("GET", "/")[1]["kafka_cluster_id"],
                              "the cluster id")
        assert cluster_id
    finally:
        worker.stop()


def test_connect_task_without_producer_settings_fails_as_kafka(
        secured: Secured, tmp_path: Path, topic_name: str) -> None:
    """Kafka's rule: the worker's top-level security settings are not the tasks' (they need
    ``producer.*``): the source task's records never reach the TLS-only cluster."""
    (tmp_path / "in.txt").write_text("x\n")
    source = tmp_path / "source.properties"
    source.write_text(f"name=plain-source\nconnector.class=FileStreamSource\ntasks.max=1\n"
                      f"file={tmp_path / 'in.txt'}\ntopic={topic_name}\n")
    worker = ConnectWorkerProcess(tmp_path / "w", secured.address,
                                  connector_files=[source], settings=secured.java)
    worker.start()
    try:
        wait_for(lambda: worker.request("GET", "/")[1]["kafka_cluster_id"], "the cluster id")
        md = AdminClient(secured.librdkafka).list_topics(timeout=10)
        assert topic_name not in md.topics or not any(
            p for p in consume_nothing(secured, topic_name))
    finally:
        worker.stop()


def consume_nothing(secured: Secured, topic: str) -> list[Any]:
    consumer = Consumer({**secured.librdkafka, "group.id": f"none-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest"})
    consumer.assign([TP(topic, 0, 0)])
    try:
        return [m for m in consumer.consume(10, 3) if m.error() is None]
    finally:
        consumer.close()
