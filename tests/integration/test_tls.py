"""TLS and mTLS listeners of a real broker started from a server.properties written with
Kafka's names, with a CA made by the test: confluent-kafka, kafka-python, aiokafka and kcat
produce and consume over SSL and mTLS; an untrusted CA, a missing client certificate and a
client certificate no mapping rule names are refused with nothing read or written; the mTLS
principal follows ssl.principal.mapping.rules; a dynamic key store change (KIP-226) is served
to new connections without a restart."""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from strom.testing.process import BrokerProcess, free_port, properties_file
from strom.testing.tls import CertificateAuthority, TlsFiles, make_tls_files
from tests.integration.clients import consume_all, produce

kcat = pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
# CN=alice,... becomes "alice"; DNs of O=Strangers match no rule (no DEFAULT): refused
RULES = "RULE:^CN=([^,]*),OU=eng,.*$/$1/L,RULE:^CN=([^,]*),O=strom$/$1/"


@dataclass
class TlsBroker:
    proc: BrokerProcess
    files: TlsFiles
    plain: int
    ssl_port: int
    mtls: int
    tmp: Path

    def conf(self, port: int, mtls: bool = False) -> dict[str, str]:
        return {"bootstrap.servers": f"127.0.0.1:{port}", **self.files.client_config(mtls)}

    def end_offset(self, topic: str) -> int:
        """The topic's end offset read over PLAINTEXT (-1: no such topic)."""
        md = AdminClient({"bootstrap.servers": f"127.0.0.1:{self.plain}"}).list_topics(
            topic, timeout=10)  # fmt: skip
        if md.topics[topic].error is not None:
            return -1
        from confluent_kafka import Consumer

        c = Consumer({"bootstrap.servers": f"127.0.0.1:{self.plain}", "group.id": "x"})
        try:
            return int(c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
        finally:
            c.close()

    def log(self) -> str:
        return self.proc.log_file.read_text(errors="replace")


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsBroker]:
    tmp = tmp_path_factory.mktemp("tls")
    files = make_tls_files(tmp / "tls")
    plain, ssl_port, mtls = free_port(), free_port(), free_port()
    props = {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{ssl_port},"
                     f"MTLS://127.0.0.1:{mtls}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
        "inter.broker.listener.name": "PLAINTEXT",
        "ssl.principal.mapping.rules": RULES,
        "group.initial.rebalance.delay.ms": "0",
        **files.listener_properties("SSL"),
        **files.listener_properties("MTLS", client_auth="required"),
    }  # fmt: skip
    config = properties_file(tmp / "server.properties", props)
    # DEBUG: the broker logs each TLS connection's principal (what the test observes)
    proc = BrokerProcess(tmp / "data", port=plain, config_file=config,
                         extra_args=["--log-level", "DEBUG"])  # fmt: skip
    with proc:
        yield TlsBroker(proc, files, plain, ssl_port, mtls, tmp)


def _values(n: int, tag: str) -> list[bytes]:
    return [f"{tag}-{i}".encode() for i in range(n)]


@pytest.mark.parametrize("mtls", [False, True], ids=["ssl", "mtls"])
def test_confluent_kafka_over_ssl_and_mtls(tls_broker: TlsBroker, mtls: bool) -> None:
    port = tls_broker.mtls if mtls else tls_broker.ssl_port
    topic = f"ck-{port}"
    conf = tls_broker.conf(port, mtls)
    sent = _values(500, "ck")
    produce(conf["bootstrap.servers"], topic, [{"value": v, "partition": 0} for v in sent],
            **{k: v for k, v in conf.items() if k != "bootstrap.servers"})  # fmt: skip
    got = consume_all(conf["bootstrap.servers"], topic, [0], expected=len(sent),
                      **{k: v for k, v in conf.items() if k != "bootstrap.servers"})  # fmt: skip
    assert [m.value() for m in got] == sent
    assert [m.offset() for m in got] == list(range(len(sent)))
    if mtls:  # the client certificate's DN through the mapping rules
        assert "TLS principal User:alice" in tls_broker.log()


@pytest.mark.parametrize("mtls", [False, True], ids=["ssl", "mtls"])
def test_kafka_python_over_ssl_and_mtls(tls_broker: TlsBroker, mtls: bool) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition

    files = tls_broker.files
    port = tls_broker.mtls if mtls else tls_broker.ssl_port
    common: dict[str, Any] = {
        "bootstrap_servers": f"127.0.0.1:{port}",
        "security_protocol": "SSL",
        "ssl_cafile": str(files.ca),
    }
    if mtls:
        common |= {"ssl_certfile": str(files.client_cert), "ssl_keyfile": str(files.client_key)}
    topic = f"kp-{port}"
    producer = KafkaProducer(acks="all", linger_ms=5, **common)
    futures = [producer.send(topic, value=v) for v in _values(300, "kp")]
    producer.flush(30)
    assert [f.get(timeout=10).offset for f in futures] == list(range(300))
    producer.close(10)
    consumer = KafkaConsumer(enable_auto_commit=False, consumer_timeout_ms=3000, **common)
    consumer.assign([KTopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    got = [r.value for r in consumer]
    consumer.close()
    assert got == _values(300, "kp")


@pytest.mark.parametrize("mtls", [False, True], ids=["ssl", "mtls"])
def test_aiokafka_over_ssl_and_mtls(tls_broker: TlsBroker, mtls: bool) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as ATopicPartition
    from aiokafka.helpers import create_ssl_context

    files = tls_broker.files
    port = tls_broker.mtls if mtls else tls_broker.ssl_port
    topic = f"aio-{port}"

    async def run() -> list[bytes]:
        context = create_ssl_context(
            cafile=str(files.ca), certfile=str(files.client_cert) if mtls else None,
            keyfile=str(files.client_key) if mtls else None)  # fmt: skip
        common: dict[str, Any] = {
            "bootstrap_servers": f"127.0.0.1:{port}",
            "security_protocol": "SSL",
            "ssl_context": context,
        }
        producer = AIOKafkaProducer(acks="all", **common)
        await producer.start()
        try:
            for v in _values(200, "aio"):
                await producer.send(topic, v, partition=0)
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(enable_auto_commit=False, **common)
        await consumer.start()
        got: list[bytes] = []
        try:
            consumer.assign([ATopicPartition(topic, 0)])
            await consumer.seek_to_beginning()
            deadline = time.monotonic() + 30
            while len(got) < 200 and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                got += [r.value for records in batches.values() for r in records]
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(run()) == _values(200, "aio")


@kcat
@pytest.mark.parametrize("mtls", [False, True], ids=["ssl", "mtls"])
def test_kcat_over_ssl_and_mtls(tls_broker: TlsBroker, mtls: bool) -> None:
    port = tls_broker.mtls if mtls else tls_broker.ssl_port
    topic = f"kcat-{port}"
    args = ["-b", f"127.0.0.1:{port}"]
    for key, value in tls_broker.files.client_config(mtls).items():
        args += ["-X", f"{key}={value}"]
    lines = "".join(f"k{i}:v{i}\n" for i in range(100))
    subprocess.run(["kcat", *args, "-P", "-t", topic, "-K", ":"], input=lines.encode(),
                   check=True, timeout=30)  # fmt: skip
    out = subprocess.run(["kcat", *args, "-C", "-t", topic, "-o", "beginning", "-e",
                          "-f", "%o|%k|%s\n"], capture_output=True, check=True,
                         timeout=30).stdout.decode()  # fmt: skip
    assert out.splitlines() == [f"{i}|k{i}|v{i}" for i in range(100)]


def _refused_producer(conf: dict[str, str], topic: str) -> list[Any]:
    """Produce one message with ``conf``; the delivery errors (the message must not go)."""
    errors: list[Any] = []
    producer = Producer({**conf, "message.timeout.ms": 4000, "socket.timeout.ms": 3000})
    producer.produce(topic, b"secret", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(10)
    return errors


def test_untrusted_ca_missing_or_unmapped_certificate_refused(tls_broker: TlsBroker) -> None:
    files, tmp = tls_broker.files, tls_broker.tmp
    # a client that trusts another CA refuses the broker: nothing is written
    other = CertificateAuthority("CN=another CA").write_pem(tmp / "other-ca.pem")
    conf = {**tls_broker.conf(tls_broker.ssl_port), "ssl.ca.location": str(other)}
    assert [e is not None for e in _refused_producer(conf, "refused-1")] == [True]
    # the mTLS listener without a client certificate: the handshake fails
    assert [e is not None for e in _refused_producer(tls_broker.conf(tls_broker.mtls),
                                                     "refused-2")] == [True]  # fmt: skip
    # a certificate of another CA on the mTLS listener
    stranger = CertificateAuthority("CN=rogue CA").issue("CN=mallory,OU=eng,O=x,C=US", hosts=())
    stranger.write_cert_and_key(tmp / "m.crt", tmp / "m.key")
    conf = {**tls_broker.conf(tls_broker.mtls, mtls=True), "ssl.certificate.location":
            str(tmp / "m.crt"), "ssl.key.location": str(tmp / "m.key")}  # fmt: skip
    assert [e is not None for e in _refused_producer(conf, "refused-3")] == [True]
    # a trusted certificate whose DN no rule maps: closed before anything is read
    unmapped = files.authority.issue("CN=eve,O=Strangers", hosts=())
    unmapped.write_cert_and_key(tmp / "e.crt", tmp / "e.key")
    conf = {**tls_broker.conf(tls_broker.mtls, mtls=True), "ssl.certificate.location":
            str(tmp / "e.crt"), "ssl.key.location": str(tmp / "e.key")}  # fmt: skip
    assert [e is not None for e in _refused_producer(conf, "refused-4")] == [True]
    assert "no ssl.principal.mapping.rules rule applies to 'CN=eve,O=Strangers'" in (
        tls_broker.log()
    )
    for topic in ("refused-1", "refused-2", "refused-3", "refused-4"):  # nothing written
        assert tls_broker.end_offset(topic) in (-1, 0)
    # the broker still serves
    assert produce(f"127.0.0.1:{tls_broker.plain}", "after-refusals", [{"value": b"ok"}])


def _served_subject(port: int, ca: Path) -> str:
    ctx = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, ctx.wrap_socket(
            raw, server_hostname="127.0.0.1") as conn:  # fmt: skip
        cert = conn.getpeercert()
    assert cert is not None
    return dict(x[0] for x in cert["subject"])["commonName"]  # type: ignore[index,return-value]


def test_dynamic_key_store_change_served_without_restart(tls_broker: TlsBroker) -> None:
    files, tmp = tls_broker.files, tls_broker.tmp
    assert _served_subject(tls_broker.ssl_port, files.ca) == "strom-broker"
    renewed = files.authority.issue("CN=strom-broker-renewed,O=strom",
                                    hosts=["127.0.0.1", "localhost"])  # fmt: skip
    path = renewed.write_pem(tmp / "renewed.pem")
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{tls_broker.plain}"})
    resource = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[
        ConfigEntry("listener.name.ssl.ssl.keystore.location", str(path),
                    incremental_operation=AlterConfigOpType.SET)])  # fmt: skip
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=15)
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, "1")])
    entries = next(iter(described.values())).result(timeout=15)
    entry = entries["listener.name.ssl.ssl.keystore.location"]
    assert (entry.value, entry.is_read_only, entry.is_sensitive) == (str(path), False, False)
    deadline = time.monotonic() + 10
    while _served_subject(tls_broker.ssl_port, files.ca) != "strom-broker-renewed":
        assert time.monotonic() < deadline, "the renewed certificate is not served"
        time.sleep(0.2)
    # clients still produce over the renewed certificate
    conf = tls_broker.conf(tls_broker.ssl_port)
    produce(conf["bootstrap.servers"], "after-renewal", [{"value": b"v"}],
            **{k: v for k, v in conf.items() if k != "bootstrap.servers"})  # fmt: skip
