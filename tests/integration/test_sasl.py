"""SASL on a real broker started from a server.properties written with Kafka's names:
confluent-kafka, kafka-python, aiokafka and kcat produce and consume over SASL_PLAINTEXT with
PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 (a SCRAM user made offline before the broker started,
Kafka's ``kafka-storage format --add-scram``), and with OAUTHBEARER's unsecured tokens; wrong
passwords, expired tokens and requests before authentication are refused with nothing read or
written; sessions end per ``connections.max.reauth.ms`` (KIP-368) and clients re-authenticate;
SCRAM users made online survive kill -9."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from strom.protocol.errors import ErrorCode
from strom.testing.process import BrokerProcess, free_port, wait_for_port
from strom.testing.raw import RawConnection
from strom.testing.tls import TlsFiles, make_tls_files
from tests.integration.admin_http import scrape

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="admin" password="admin-secret" '
              'user_admin="admin-secret" user_alice="alice-secret";')  # fmt: skip
OAUTH_JAAS = ("org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
              'unsecuredValidatorAllowableClockSkewMs="1000";')  # fmt: skip
USERS = {"PLAIN": ("alice", "alice-secret"), "SCRAM-SHA-256": ("bob", "bob-secret"),
         "SCRAM-SHA-512": ("bob", "bob-secret")}  # fmt: skip
REAUTH_MS = 1500


class SaslBroker:
    def __init__(self, proc: BrokerProcess, internal: int, sasl: int, reauth: int,
                 sasl_ssl: int | None = None, ca: Path | None = None) -> None:  # fmt: skip
        self.proc = proc
        self.internal = f"127.0.0.1:{internal}"  # PLAINTEXT (inter-broker, admin)
        self.sasl = f"127.0.0.1:{sasl}"
        self.reauth = f"127.0.0.1:{reauth}"  # SASL_PLAINTEXT with connections.max.reauth.ms
        self.sasl_ssl = f"127.0.0.1:{sasl_ssl}"  # SASL_SSL, the broker's certificate from ca
        self.ca = ca

    def log(self) -> str:
        return self.proc.log_file.read_text(errors="replace")


def write_properties(path: Path, internal: int, sasl: int, reauth: int,
                     sasl_ssl: int | None = None, tls: TlsFiles | None = None) -> None:  # fmt: skip
    secured = ""
    if sasl_ssl is not None and tls is not None:
        secured = "".join(f"{k}={v}\n" for k, v in tls.listener_properties("SASL_SSL").items())
        secured += f"listener.name.sasl_ssl.plain.sasl.jaas.config={PLAIN_JAAS}\n"
    path.write_text(
        f"listeners=INTERNAL://127.0.0.1:{internal},SASL_PLAINTEXT://127.0.0.1:{sasl},"
        f"REAUTH://127.0.0.1:{reauth}"
        + (f",SASL_SSL://127.0.0.1:{sasl_ssl}" if secured else "") + "\n"
        + secured +
        "listener.security.protocol.map=INTERNAL:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,"
        "REAUTH:SASL_PLAINTEXT,SASL_SSL:SASL_SSL\n"
        "inter.broker.listener.name=INTERNAL\n"
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER\n"
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={PLAIN_JAAS}\n"
        f"listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config={OAUTH_JAAS}\n"
        f"listener.name.reauth.plain.sasl.jaas.config={PLAIN_JAAS}\n"
        "listener.name.reauth.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256\n"
        f"listener.name.reauth.connections.max.reauth.ms={REAUTH_MS}\n"
        "connection.failed.authentication.delay.ms=100\n"
        "password.encoder.secret=sasl-test-encoder-secret\n"  # dynamic JAAS configs, encrypted
        "group.initial.rebalance.delay.ms=0\n"
        "offsets.topic.num.partitions=3\n"
    )


def strom(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strom", *args], capture_output=True, text=True,
                          input=stdin, timeout=60)  # fmt: skip


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslBroker]:
    tmp = tmp_path_factory.mktemp("sasl")
    internal, sasl, reauth, sasl_ssl = free_port(), free_port(), free_port(), free_port()
    tls = make_tls_files(tmp / "tls")
    props = tmp / "server.properties"
    write_properties(props, internal, sasl, reauth, sasl_ssl, tls)
    data = tmp / "data"
    data.mkdir()
    # the first SCRAM user, with no broker running (kafka-storage format --add-scram)
    made = strom("user", "create", "bob", "--password", "bob-secret", "--data-dir", str(data))
    assert made.returncode == 0, made.stderr
    proc = BrokerProcess(data, port=internal, config_file=props, admin=True)  # its metrics
    with proc:
        for port in (sasl, reauth, sasl_ssl):  # start-up waited for the first listener only
            assert wait_for_port("127.0.0.1", port, 20)
        yield SaslBroker(proc, internal, sasl, reauth, sasl_ssl, tls.ca)


def sasl_conf(bootstrap: str, mechanism: str, ca: Path | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
                            "sasl.mechanism": mechanism}  # fmt: skip
    if ca is not None:
        conf |= {"security.protocol": "SASL_SSL", "ssl.ca.location": str(ca)}
    if mechanism == "OAUTHBEARER":
        conf["sasl.oauthbearer.config"] = "principal=carol"
        conf["enable.sasl.oauthbearer.unsecure.jwt"] = True
    else:
        conf["sasl.username"], conf["sasl.password"] = USERS[mechanism]
    return conf


def make_topic(broker: SaslBroker, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.internal})
    from confluent_kafka.admin import NewTopic

    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=20)


def read_plain(broker: SaslBroker, topic: str, count: int) -> list[bytes]:
    """What the topic holds, read over the PLAINTEXT listener."""
    consumer = Consumer({"bootstrap.servers": broker.internal, "group.id": "reader",
                         "enable.auto.commit": False})  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    return got


def unsecured_token(claims: dict[str, Any]) -> str:
    def b64(doc: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(doc).encode()).rstrip(b"=").decode()

    return f"{b64({'alg': 'none'})}.{b64(claims)}."


# --- the clients ------------------------------------------------------------------------------
def confluent_roundtrip(broker: SaslBroker, topic: str, mechanism: str,
                        values: list[bytes], ssl: bool = False) -> list[bytes]:  # fmt: skip
    conf = sasl_conf(broker.sasl_ssl, mechanism, broker.ca) if ssl else sasl_conf(broker.sasl,
                                                                                   mechanism)
    producer = Producer(conf)
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(30) == 0
    consumer = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])  # FindCoordinator, JoinGroup … all over SASL
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < len(values) and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    return got


def kafka_python_kwargs(mechanism: str, ca: Path | None = None) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism}
    if ca is not None:
        kwargs |= {"security_protocol": "SASL_SSL", "ssl_cafile": str(ca)}
    if mechanism == "OAUTHBEARER":
        from kafka.net.sasl.oauth import AbstractTokenProvider

        class Tokens(AbstractTokenProvider):  # type: ignore[misc]
            def token(self) -> str:
                return unsecured_token({"sub": "carol", "exp": time.time() + 300})

        kwargs["sasl_oauth_token_provider"] = Tokens()
    else:
        kwargs["sasl_plain_username"], kwargs["sasl_plain_password"] = USERS[mechanism]
    return kwargs


def kafka_python_roundtrip(broker: SaslBroker, topic: str, mechanism: str,
                           values: list[bytes], ssl: bool = False) -> list[bytes]:  # fmt: skip
    from kafka import KafkaConsumer, KafkaProducer

    kwargs = kafka_python_kwargs(mechanism, broker.ca if ssl else None)
    bootstrap = broker.sasl_ssl if ssl else broker.sasl
    producer = KafkaProducer(bootstrap_servers=bootstrap, **kwargs)
    try:
        for value in values:
            producer.send(topic, value, partition=0).get(timeout=30)
    finally:
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             auto_offset_reset="earliest", consumer_timeout_ms=10_000,
                             **kwargs)  # fmt: skip
    from kafka import TopicPartition as KTP

    consumer.assign([KTP(topic, 0)])
    got = []
    try:
        for msg in consumer:
            got.append(msg.value)
            if len(got) >= len(values):
                break
    finally:
        consumer.close()
    return got


def aiokafka_roundtrip(broker: SaslBroker, topic: str, mechanism: str,
                       values: list[bytes], ssl: bool = False) -> list[bytes]:  # fmt: skip
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as ATP
    from aiokafka.helpers import create_ssl_context

    kwargs: dict[str, Any] = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism}
    bootstrap = broker.sasl
    if ssl:
        kwargs |= {"security_protocol": "SASL_SSL",
                   "ssl_context": create_ssl_context(cafile=str(broker.ca))}  # fmt: skip
        bootstrap = broker.sasl_ssl
    if mechanism == "OAUTHBEARER":
        from aiokafka.abc import AbstractTokenProvider

        class Tokens(AbstractTokenProvider):  # type: ignore[misc]
            async def token(self) -> str:
                return unsecured_token({"sub": "carol", "exp": time.time() + 300})

        kwargs["sasl_oauth_token_provider"] = Tokens()
    else:
        kwargs["sasl_plain_username"], kwargs["sasl_plain_password"] = USERS[mechanism]

    async def main() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **kwargs)
        await producer.start()
        try:
            for value in values:
                await producer.send_and_wait(topic, value, partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                    **kwargs)  # fmt: skip
        await consumer.start()
        got: list[bytes] = []
        try:
            consumer.assign([ATP(topic, 0)])
            await consumer.seek_to_beginning()
            while len(got) < len(values):
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=500), 30)
                for records in batch.values():
                    got.extend(r.value for r in records)
        finally:
            await consumer.stop()
        return got

    return asyncio.run(main())


def kcat_roundtrip(broker: SaslBroker, topic: str, mechanism: str,
                   values: list[bytes], ssl: bool = False) -> list[bytes]:  # fmt: skip
    user, password = USERS[mechanism]
    auth = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", f"sasl.mechanisms={mechanism}",
            "-X", f"sasl.username={user}", "-X", f"sasl.password={password}"]  # fmt: skip
    bootstrap = broker.sasl
    if ssl:
        auth += ["-X", "security.protocol=SASL_SSL", "-X", f"ssl.ca.location={broker.ca}"]
        bootstrap = broker.sasl_ssl
    subprocess.run(["kcat", "-b", bootstrap, *auth, "-P", "-t", topic],
                   input=b"".join(v + b"\n" for v in values), check=True, timeout=30)  # fmt: skip
    out = subprocess.run(["kcat", "-b", bootstrap, *auth, "-C", "-t", topic, "-o", "beginning",
                          "-e", "-f", "%s\n"], capture_output=True, check=True, timeout=30)  # fmt: skip
    return out.stdout.splitlines()


CLIENTS = {"confluent": confluent_roundtrip, "kafka-python": kafka_python_roundtrip,
           "aiokafka": aiokafka_roundtrip, "kcat": kcat_roundtrip}  # fmt: skip


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_clients_produce_and_consume(sasl_broker: SaslBroker, client: str,
                                     mechanism: str) -> None:  # fmt: skip
    if client == "kcat" and shutil.which("kcat") is None:
        pytest.skip("kcat (Debian package) is not installed")
    topic = f"sasl-{client}-{mechanism}".lower()
    make_topic(sasl_broker, topic)
    values = [f"{client}-{mechanism}-{i}".encode() for i in range(30)]
    assert CLIENTS[client](sasl_broker, topic, mechanism, values) == values
    assert read_plain(sasl_broker, topic, len(values)) == values


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_clients_over_sasl_ssl(sasl_broker: SaslBroker, client: str, mechanism: str) -> None:
    """SASL_SSL: the same exchange inside TLS (the test CA's broker certificate)."""
    if client == "kcat" and shutil.which("kcat") is None:
        pytest.skip("kcat (Debian package) is not installed")
    topic = f"ssl-{client}-{mechanism}".lower()
    make_topic(sasl_broker, topic)
    values = [f"tls-{client}-{mechanism}-{i}".encode() for i in range(30)]
    assert CLIENTS[client](sasl_broker, topic, mechanism, values, ssl=True) == values
    assert read_plain(sasl_broker, topic, len(values)) == values


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka"])
def test_oauthbearer_unsecured_tokens(sasl_broker: SaslBroker, client: str) -> None:
    topic = f"oauth-{client}"
    make_topic(sasl_broker, topic)
    values = [f"{client}-oauth-{i}".encode() for i in range(20)]
    assert CLIENTS[client](sasl_broker, topic, "OAUTHBEARER", values) == values


# --- refusals -----------------------------------------------------------------------------------
def test_wrong_password_refused_and_logged_once(sasl_broker: SaslBroker) -> None:
    for mechanism, user in (("PLAIN", "alice"), ("SCRAM-SHA-256", "bob"),
                            ("SCRAM-SHA-512", "nobody")):  # fmt: skip
        conf = sasl_conf(sasl_broker.sasl, mechanism)
        conf["sasl.username"], conf["sasl.password"] = user, "wrong-password"
        admin = AdminClient({**conf, "reconnect.backoff.ms": 5000, "reconnect.backoff.max.ms": 5000})
        with pytest.raises(KafkaException) as info:
            admin.list_topics(timeout=3)
        del admin
        assert "uthentication" in str(info.value) or "_TRANSPORT" in str(info.value) or \
            "_TIMED_OUT" in str(info.value)  # fmt: skip
    # a raw exchange: SASL_AUTHENTICATION_FAILED with Kafka's message, then the close
    with RawConnection(sasl_broker.sasl) as conn:
        assert conn.request(17, 1, mechanism="PLAIN").error_code == ErrorCode.none
        answer = conn.request(36, 2, auth_bytes=b"\0alice\0not-it")
        assert answer.error_code == ErrorCode.sasl_authentication_failed
        assert answer.error_message == "Authentication failed: Invalid username or password"
        assert conn.is_closed_by_peer(5)
    lines = [line for line in sasl_broker.log().splitlines()
             if "failed authentication with 127.0.0.1" in line and "not-it" not in line]
    assert any("user 'alice'" in line for line in lines)
    assert any("unknown user 'nobody'" in line for line in lines)
    assert all("wrong-password" not in line for line in lines)


def test_a_guessing_client_is_one_line_and_every_guess_counted(sasl_broker: SaslBroker) -> None:
    """Failed logins are rate-limited as failed TLS handshakes are (strom.broker.auth_failures):
    the first of a (host, reason) is logged, the rest of its minute only counted."""
    metric = "kafka_server_socket_server_metrics_failed_authentication_total"

    def counted() -> float:
        return scrape(sasl_broker.proc.admin_url).get(metric, listener="REAUTH") or 0.0

    def guess(user: bytes, password: bytes) -> None:
        with RawConnection(sasl_broker.reauth) as conn:
            assert conn.request(17, 1, mechanism="PLAIN").error_code == ErrorCode.none
            answer = conn.request(36, 2, auth_bytes=b"\0" + user + b"\0" + password)
            assert answer.error_code == ErrorCode.sasl_authentication_failed
            assert conn.is_closed_by_peer(5)

    before = counted()
    for i in range(6):
        guess(b"alice", b"guess-%d" % i)
    guess(b"mallory", b"anything")  # another reason (an unknown user): its own line

    def lines(user: str) -> list[str]:
        return [line for line in sasl_broker.log().splitlines()
                if "failed authentication with 127.0.0.1:" in line
                and "listener REAUTH, mechanism PLAIN" in line and user in line]  # fmt: skip

    deadline = time.monotonic() + 10
    while not lines("mallory") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(lines("'alice'")) == 1, lines("'alice'")
    assert len(lines("'mallory'")) == 1, lines("'mallory'")
    assert all("guess-" not in line for line in lines("'alice'"))  # never the password
    assert counted() - before == 7


def _plain_login(bootstrap: str, user: bytes, password: bytes) -> int:
    """A PLAIN exchange on a raw connection: SaslAuthenticate's error code."""
    with RawConnection(bootstrap) as conn:
        assert conn.request(17, 1, mechanism="PLAIN").error_code == ErrorCode.none
        return int(conn.request(36, 2, auth_bytes=b"\0" + user + b"\0" + password).error_code)


def _alter_broker(sasl_broker: SaslBroker, name: str, value: str | None) -> Any:
    """IncrementalAlterConfigs of this broker's ``name`` (None: delete): the error or None."""
    admin = AdminClient({"bootstrap.servers": sasl_broker.internal})
    node = str(next(iter(admin.list_topics(timeout=10).brokers)))
    resource = ConfigResource(ResourceType.BROKER, node)
    op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    resource.add_incremental_config(ConfigEntry(name, value, incremental_operation=op))
    try:
        admin.incremental_alter_configs([resource])[resource].result(timeout=20)
    except KafkaException as exc:
        return exc.args[0]
    return None


def test_a_plain_user_added_without_a_restart(sasl_broker: SaslBroker) -> None:
    """KIP-226: listener.name.<l>.<mechanism>.sasl.jaas.config is a dynamic per-broker config;
    the listener's new connections authenticate against it, a JAAS config that does not parse
    is refused and changes nothing, and deleting it brings the static one back."""
    name = "listener.name.reauth.plain.sasl.jaas.config"
    bootstrap = sasl_broker.reauth
    assert _plain_login(bootstrap, b"dave", b"dave-secret") == ErrorCode.sasl_authentication_failed
    with_dave = PLAIN_JAAS.replace(";", ' user_dave="dave-secret";')
    assert _alter_broker(sasl_broker, name, with_dave) is None

    def logs_in(user: bytes, password: bytes) -> bool:
        return _plain_login(bootstrap, user, password) == ErrorCode.none

    deadline = time.monotonic() + 10  # the broker applies it from its config store's watch
    while not logs_in(b"dave", b"dave-secret"):
        assert time.monotonic() < deadline, "the new PLAIN user never logged in"
        time.sleep(0.1)
    assert logs_in(b"alice", b"alice-secret")  # the users kept
    assert _plain_login(sasl_broker.sasl, b"dave", b"dave-secret") != ErrorCode.none  # one listener
    # a JAAS config that does not parse: refused as Kafka refuses it, nothing changed
    error = _alter_broker(sasl_broker, name, "org.apache.kafka.common.security.plain."
                          "PlainLoginModule required user_eve=;")  # fmt: skip
    assert error is not None and error.code() == KafkaError.INVALID_REQUEST, error
    assert name in error.str(), error.str()
    assert logs_in(b"dave", b"dave-secret")
    assert "dave-secret" not in sasl_broker.log()  # the new value is never logged
    # deleted: the static config again
    assert _alter_broker(sasl_broker, name, None) is None
    deadline = time.monotonic() + 10
    while logs_in(b"dave", b"dave-secret"):
        assert time.monotonic() < deadline, "the deleted PLAIN user still logs in"
        time.sleep(0.1)
    assert logs_in(b"alice", b"alice-secret")


def test_expired_token_refused_then_closed(sasl_broker: SaslBroker) -> None:
    token = unsecured_token({"sub": "carol", "exp": time.time() - 60, "iat": time.time() - 120})
    with RawConnection(sasl_broker.sasl) as conn:
        assert conn.request(17, 1, mechanism="OAUTHBEARER").error_code == ErrorCode.none
        first = conn.request(36, 2, auth_bytes=f"n,,\x01auth=Bearer {token}\x01\x01".encode())
        assert first.error_code == ErrorCode.none
        assert json.loads(first.auth_bytes) == {"status": "invalid_token"}
        final = conn.request(36, 2, auth_bytes=b"\x01")
        assert final.error_code == ErrorCode.sasl_authentication_failed
        assert conn.is_closed_by_peer(5)
    # a client that hangs up once told invalid_token: its failure is logged all the same
    with RawConnection(sasl_broker.sasl) as conn:
        conn.request(17, 1, mechanism="OAUTHBEARER")
        stale = unsecured_token({"sub": "hangs-up", "exp": time.time() - 60})
        answer = conn.request(36, 2, auth_bytes=f"n,,\x01auth=Bearer {stale}\x01\x01".encode())
        assert json.loads(answer.auth_bytes) == {"status": "invalid_token"}
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        logged = [line for line in sasl_broker.log().splitlines()
                  if "token refused" in line and "the client closed the connection" in line]
        if logged:
            break
        time.sleep(0.1)
    assert len(logged) == 1 and "the token expired" in logged[0]


def _metadata_frame(correlation: int) -> bytes:
    from strom.protocol.messages import RequestHeader, build, encode_request, request_class

    req = build(request_class(3, 12), topics=None, allow_auto_topic_creation=True,
                include_topic_authorized_operations=False)  # fmt: skip
    return encode_request(RequestHeader(3, 12, correlation, "early"), req)


def test_requests_before_authentication_close_the_connection(sasl_broker: SaslBroker) -> None:
    """Nothing but ApiVersions / SaslHandshake is read before authentication: a Metadata or a
    Produce request closes the connection with no answer; data sent so is never written."""
    topic = "before-auth"
    make_topic(sasl_broker, topic)
    for early in (_metadata_frame(1), _raw_produce(topic)):
        with RawConnection(sasl_broker.sasl) as conn:
            conn.send_bytes(early)
            assert _closed_without_answer(conn)
    with RawConnection(sasl_broker.sasl) as conn:  # after the handshake, before authenticating
        assert conn.request(17, 1, mechanism="PLAIN").error_code == ErrorCode.none
        conn.send_bytes(_raw_produce(topic))
        assert _closed_without_answer(conn)
    with RawConnection(sasl_broker.sasl) as conn:  # SaslAuthenticate before SaslHandshake
        conn.send_bytes(_authenticate_frame(b"\0alice\0alice-secret"))
        assert _closed_without_answer(conn)
    assert read_plain(sasl_broker, topic, 1) == []
    # the same requests, authenticated: served
    with RawConnection(sasl_broker.sasl) as conn:
        assert conn.request(17, 1, mechanism="PLAIN").error_code == ErrorCode.none
        assert conn.request(36, 2, auth_bytes=b"\0alice\0alice-secret").error_code == 0
        conn.send_bytes(_metadata_frame(99))
        assert conn.recv_frame()[:4] == (99).to_bytes(4, "big")


def _authenticate_frame(token: bytes) -> bytes:
    from strom.protocol.messages import RequestHeader, build, encode_request, request_class

    return encode_request(RequestHeader(36, 2, 7, "early"),
                          build(request_class(36, 2), auth_bytes=token))  # fmt: skip


def _raw_produce(topic: str) -> bytes:
    """A well-formed acks=-1 Produce of one record to ``topic``, partition 0."""
    import datetime

    from kio.schema.produce.v9 import request as mod

    from strom.protocol.messages import RequestHeader, build, encode_request, request_class
    from strom.protocol.record_batch import build_batch

    batch = build_batch([(None, b"sneaked-in", [], 1_700_000_000_000)])
    req = build(request_class(0, 9), transactional_id=None, acks=-1,
                timeout=datetime.timedelta(seconds=5),
                topic_data=(build(mod.TopicProduceData, name=topic, partition_data=(
                    build(mod.PartitionProduceData, index=0, records=batch),)),))  # fmt: skip
    return encode_request(RequestHeader(0, 9, 1, "early"), req)


def _closed_without_answer(conn: RawConnection) -> bool:
    conn.sock.settimeout(5)
    try:
        data = conn.sock.recv(65536)
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return data == b""


def test_v0_handshake_raw_tokens(sasl_broker: SaslBroker) -> None:
    """SaslHandshake v0: the SASL tokens then travel bare (length-prefixed, no header)."""
    with RawConnection(sasl_broker.sasl) as conn:
        answer = conn.request(17, 0, mechanism="PLAIN")
        assert answer.error_code == ErrorCode.none and "PLAIN" in answer.mechanisms
        token = b"\0alice\0alice-secret"
        conn.send_bytes(len(token).to_bytes(4, "big") + token)
        assert conn.recv_frame() == b""  # PLAIN: an empty challenge, authenticated
        conn.send_bytes(_metadata_frame(5))
        assert conn.recv_frame()[:4] == (5).to_bytes(4, "big")
    with RawConnection(sasl_broker.sasl) as conn:  # a wrong password: closed, no answer
        conn.request(17, 0, mechanism="PLAIN")
        token = b"\0alice\0wrong"
        conn.send_bytes(len(token).to_bytes(4, "big") + token)
        assert _closed_without_answer(conn)


def test_unsupported_mechanism_lists_the_enabled_ones(sasl_broker: SaslBroker) -> None:
    with RawConnection(sasl_broker.reauth) as conn:
        answer = conn.request(17, 1, mechanism="OAUTHBEARER")
        assert answer.error_code == ErrorCode.unsupported_sasl_mechanism
        assert list(answer.mechanisms) == ["PLAIN", "SCRAM-SHA-256"]
        assert conn.is_closed_by_peer(5)


def test_session_lifetime_expiry_and_reauthentication(sasl_broker: SaslBroker) -> None:
    # a raw client that does not re-authenticate: told the lifetime, closed after it
    with RawConnection(sasl_broker.reauth) as conn:
        conn.request(17, 1, mechanism="PLAIN")
        answer = conn.request(36, 2, auth_bytes=b"\0alice\0alice-secret")
        assert answer.error_code == ErrorCode.none
        assert answer.session_lifetime.total_seconds() * 1000 == REAUTH_MS
        conn.send_bytes(_metadata_frame(11))
        assert conn.recv_frame()[:4] == (11).to_bytes(4, "big")
        time.sleep(REAUTH_MS / 1000 + 0.3)
        conn.send_bytes(_metadata_frame(12))
        assert _closed_without_answer(conn)
    # KIP-368 re-authentication on the same connection: the same principal, served on
    with RawConnection(sasl_broker.reauth) as conn:
        conn.request(17, 1, mechanism="PLAIN")
        conn.request(36, 2, auth_bytes=b"\0alice\0alice-secret")
        time.sleep(REAUTH_MS / 1000 + 0.3)
        assert conn.request(17, 1, mechanism="PLAIN").error_code == ErrorCode.none
        assert conn.request(36, 2, auth_bytes=b"\0alice\0alice-secret").error_code == 0
        conn.send_bytes(_metadata_frame(13))
        assert conn.recv_frame()[:4] == (13).to_bytes(4, "big")
    with RawConnection(sasl_broker.reauth) as conn:  # another principal: refused, closed
        conn.request(17, 1, mechanism="PLAIN")
        conn.request(36, 2, auth_bytes=b"\0alice\0alice-secret")
        conn.request(17, 1, mechanism="PLAIN")
        answer = conn.request(36, 2, auth_bytes=b"\0admin\0admin-secret")
        assert answer.error_code == ErrorCode.sasl_authentication_failed
        assert conn.is_closed_by_peer(5)
    # librdkafka re-authenticates by itself (KIP-368) and keeps producing past the lifetime
    topic = "reauth"
    make_topic(sasl_broker, topic)
    producer = Producer({**sasl_conf(sasl_broker.reauth, "PLAIN"), "linger.ms": 0})
    sent = []
    deadline = time.monotonic() + 3 * REAUTH_MS / 1000
    i = 0
    while time.monotonic() < deadline:
        value = f"r{i}".encode()
        producer.produce(topic, value)
        sent.append(value)
        producer.flush(10)
        i += 1
        time.sleep(0.05)
    assert producer.flush(10) == 0
    assert read_plain(sasl_broker, topic, len(sent)) == sent


def test_user_cli_online_and_admin_errors(sasl_broker: SaslBroker) -> None:
    made = strom("user", "create", "dora", "--password", "dora-pw", "--mechanism",
                 "SCRAM-SHA-512", "-b", sasl_broker.internal)  # fmt: skip
    assert made.returncode == 0, made.stderr
    listed = strom("user", "list", "-b", sasl_broker.internal, "--format", "json")
    users = {u["user"]: u["credentials"] for u in json.loads(listed.stdout)}
    assert users["dora"] == [{"mechanism": "SCRAM-SHA-512", "iterations": 4096}]
    assert {c["mechanism"] for c in users["bob"]} == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    topic = "dora-topic"
    make_topic(sasl_broker, topic)
    conf = {**sasl_conf(sasl_broker.sasl, "SCRAM-SHA-512"), "sasl.username": "dora",
            "sasl.password": "dora-pw"}  # fmt: skip
    producer = Producer(conf)
    producer.produce(topic, b"from-dora")
    assert producer.flush(20) == 0
    bad = strom("user", "create", "erin", "--password", "x", "--iterations", "100", "-b",
                sasl_broker.internal)  # fmt: skip
    assert bad.returncode != 0
    assert bad.stderr.count("\n") == 1 and "Too few iterations" in bad.stderr
    gone = strom("user", "delete", "dora", "-b", sasl_broker.internal)
    assert gone.returncode == 0, gone.stderr
    missing = strom("user", "delete", "dora", "-b", sasl_broker.internal)
    assert missing.returncode != 0 and "no SCRAM credentials" in missing.stderr
    admin = AdminClient({**conf, "reconnect.backoff.ms": 5000})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=3)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_strom_own_connections_log_in(sasl_broker: SaslBroker, mechanism: str) -> None:
    """strom's own wire connections (the CLI's raw requests, Spark's executors, a Connect
    worker's group membership) log in before their first request, as librdkafka does."""
    from strom.admin.client_security import AuthenticationError, WireSecurity
    from strom.admin.wire import WireConnection

    user, password = USERS[mechanism]
    settings = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
                "sasl.username": user, "sasl.password": password}  # fmt: skip
    with WireConnection(sasl_broker.sasl, security=WireSecurity.from_properties(settings)) as c:
        answer = c.request(3, 12, topics=None, allow_auto_topic_creation=False,
                           include_topic_authorized_operations=False)  # fmt: skip
    sasl_port = int(sasl_broker.sasl.rsplit(":", 1)[1])
    assert [int(b.port) for b in answer.brokers] == [sasl_port]  # this listener's endpoint
    over_tls = {**settings, "security.protocol": "SASL_SSL", "ssl.ca.location": str(sasl_broker.ca)}
    with WireConnection(sasl_broker.sasl_ssl, security=WireSecurity.from_properties(over_tls)) as c:
        answer = c.request(3, 12, topics=None, allow_auto_topic_creation=False,
                           include_topic_authorized_operations=False)  # fmt: skip
    assert [int(b.port) for b in answer.brokers] == [int(sasl_broker.sasl_ssl.rsplit(":", 1)[1])]
    wrong = {**settings, "sasl.password": "wrong"}
    with pytest.raises(AuthenticationError, match=f"SASL authentication as '{user}' failed"):
        WireConnection(sasl_broker.sasl, security=WireSecurity.from_properties(wrong))
    # the CLI's own wire request (the cluster-wide default configs) with -X settings
    x = [a for k, v in settings.items() for a in ("-X", f"{k}={v}")]
    got = strom("cluster", "config", "get", "--default", "-b", sasl_broker.sasl, *x,
                "--format", "json")  # fmt: skip
    assert got.returncode == 0 and isinstance(json.loads(got.stdout), list), got.stderr
    bad = strom("cluster", "config", "get", "--default", "-b", sasl_broker.sasl, *x[:-2],
                "-X", "sasl.password=wrong")  # fmt: skip
    assert bad.returncode != 0 and bad.stderr.count("\n") == 1, bad.stderr
    assert "refused the login" in bad.stderr and "wrong" not in bad.stderr


def test_spark_executors_read_over_sasl(sasl_broker: SaslBroker) -> None:
    pytest.importorskip("pyarrow")
    from strom.spark.fetcher import RangePartition, read_range
    from strom.spark.options import parse_read_options
    from strom.spark.schema import arrow_schema

    topic = "spark-sasl"
    make_topic(sasl_broker, topic)
    producer = Producer({"bootstrap.servers": sasl_broker.internal})
    for i in range(12):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(20) == 0
    user, password = USERS["SCRAM-SHA-256"]
    options = {"kafka.bootstrap.servers": sasl_broker.sasl, "subscribe": topic,
               "kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "SCRAM-SHA-256",
               "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
                                         f'required username="{user}" password="{password}";'}  # fmt: skip
    opts = parse_read_options(options, streaming=False)
    schema = arrow_schema(False)
    rows = [r for b in read_range(opts, RangePartition(topic, 0, 0, 12), schema)
            for r in b.to_pylist()]  # fmt: skip
    assert [r["value"] for r in rows] == [f"v{i}".encode() for i in range(12)]


def test_scram_users_survive_kill_9(tmp_path: Path) -> None:
    internal, sasl, reauth = free_port(), free_port(), free_port()
    props = tmp_path / "server.properties"
    write_properties(props, internal, sasl, reauth)
    proc = BrokerProcess(tmp_path / "data", port=internal, config_file=props)
    with proc:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{internal}"})
        futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "frank", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"frank-pw")])
        for future in futures.values():
            future.result(timeout=20)
        proc.kill()
        proc.start()
        assert wait_for_port("127.0.0.1", sasl, 20)
        conf = {**sasl_conf(f"127.0.0.1:{sasl}", "SCRAM-SHA-256"), "sasl.username": "frank",
                "sasl.password": "frank-pw"}  # fmt: skip
        topic_meta = AdminClient(conf).list_topics(timeout=15)
        assert list(topic_meta.brokers) == [1]  # authenticated as frank: answered
        plain = AdminClient({"bootstrap.servers": f"127.0.0.1:{internal}"})
        described = plain.describe_user_scram_credentials(["frank"])["frank"].result(timeout=15)
        assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [
            (ScramMechanism.SCRAM_SHA_256, 8192)]


def test_oauthbearer_jwks_validator(tmp_path: Path) -> None:
    """KIP-768: tokens signed by a key of the JWKS (a file: URL), with the expected audience
    and issuer, are accepted; a token signed by another key, or for another audience, is
    refused (invalid_token, then the close)."""
    import jwt
    from cryptography.hazmat.primitives.asymmetric import rsa
    from kafka import KafkaProducer
    from kafka.errors import KafkaError as KPError

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    public.update(kid="k1", use="sig", alg="RS256")
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": [public]}))
    internal, sasl = free_port(), free_port()
    props = tmp_path / "server.properties"
    props.write_text(
        f"listeners=INTERNAL://127.0.0.1:{internal},OAUTH://127.0.0.1:{sasl}\n"
        "listener.security.protocol.map=INTERNAL:PLAINTEXT,OAUTH:SASL_PLAINTEXT\n"
        "inter.broker.listener.name=INTERNAL\n"
        "listener.name.oauth.sasl.enabled.mechanisms=OAUTHBEARER\n"
        "listener.name.oauth.oauthbearer.sasl.server.callback.handler.class="
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler\n"
        f"sasl.oauthbearer.jwks.endpoint.url=file://{tmp_path / 'jwks.json'}\n"
        "sasl.oauthbearer.expected.audience=kafka\n"
        "sasl.oauthbearer.expected.issuer=https://idp.test\n"
    )

    def token(signer: Any, audience: str = "kafka") -> str:
        now = int(time.time())
        return jwt.encode({"sub": "svc-a", "aud": audience, "iss": "https://idp.test",
                           "iat": now, "exp": now + 300}, signer, "RS256",
                          headers={"kid": "k1"})  # fmt: skip

    def first(value: str) -> bytes:
        return f"n,,\x01auth=Bearer {value}\x01\x01".encode()

    proc = BrokerProcess(tmp_path / "data", port=internal, config_file=props)
    with proc:
        assert wait_for_port("127.0.0.1", sasl, 20)
        with RawConnection(f"127.0.0.1:{sasl}") as conn:
            assert conn.request(17, 1, mechanism="OAUTHBEARER").error_code == ErrorCode.none
            answer = conn.request(36, 2, auth_bytes=first(token(key)))
            assert answer.error_code == ErrorCode.none and answer.auth_bytes == b""
            assert answer.session_lifetime.total_seconds() > 250  # bounded by the token's exp
            conn.send_bytes(_metadata_frame(3))
            assert conn.recv_frame()[:4] == (3).to_bytes(4, "big")
        other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        for bad in (token(other), token(key, audience="not-kafka")):
            with RawConnection(f"127.0.0.1:{sasl}") as conn:
                conn.request(17, 1, mechanism="OAUTHBEARER")
                answer = conn.request(36, 2, auth_bytes=first(bad))
                assert json.loads(answer.auth_bytes) == {"status": "invalid_token"}
                final = conn.request(36, 2, auth_bytes=b"\x01")
                assert final.error_code == ErrorCode.sasl_authentication_failed
                assert conn.is_closed_by_peer(5)
        # a real client with a token provider
        from kafka.net.sasl.oauth import AbstractTokenProvider

        class Tokens(AbstractTokenProvider):  # type: ignore[misc]
            def token(self) -> str:
                return token(key)

        make_topic(SaslBroker(proc, internal, sasl, sasl), "jwks-topic")
        producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{sasl}",
                                 security_protocol="SASL_PLAINTEXT",
                                 sasl_mechanism="OAUTHBEARER",
                                 sasl_oauth_token_provider=Tokens())  # fmt: skip
        try:
            meta = producer.send("jwks-topic", b"signed", partition=0).get(timeout=30)
        except KPError as exc:  # pragma: no cover - the assertion below says what failed
            raise AssertionError(f"kafka-python with a JWKS-signed token: {exc}") from exc
        finally:
            producer.close()
        assert meta.offset == 0


def test_sasl_principals_are_what_acls_name(tmp_path: Path) -> None:
    """The authorizer sees ``User:<authorization id>``: an ACL for User:alice lets alice
    (PLAIN) write and bob (SCRAM) not; the super user admin (PLAIN) does anything."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        NewTopic,
        ResourcePatternType,
        ResourceType,
    )

    internal, sasl = free_port(), free_port()
    props = tmp_path / "server.properties"
    props.write_text(
        f"listeners=SASL_PLAINTEXT://127.0.0.1:{sasl},INTERNAL://127.0.0.1:{internal}\n"
        "listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,INTERNAL:PLAINTEXT\n"
        "inter.broker.listener.name=INTERNAL\n"
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256\n"
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={PLAIN_JAAS}\n"
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer\n"
        "super.users=User:admin;User:ANONYMOUS\n"  # ANONYMOUS: the PLAINTEXT listener
    )
    data = tmp_path / "data"
    data.mkdir()
    made = strom("user", "create", "bob", "--password", "bob-secret", "--mechanism",
                 "SCRAM-SHA-256", "--data-dir", str(data))  # fmt: skip
    assert made.returncode == 0, made.stderr
    proc = BrokerProcess(data, port=internal, config_file=props)
    with proc:
        assert wait_for_port("127.0.0.1", sasl, 20)
        bootstrap = f"127.0.0.1:{sasl}"
        admin = AdminClient(sasl_conf(bootstrap, "PLAIN") | {"sasl.username": "admin",
                                                              "sasl.password": "admin-secret"})
        admin.create_topics([NewTopic("acl-t", 1, 1)])["acl-t"].result(timeout=20)
        for op in (AclOperation.WRITE, AclOperation.DESCRIBE):
            binding = AclBinding(ResourceType.TOPIC, "acl-t", ResourcePatternType.LITERAL,
                                 "User:alice", "*", op, AclPermissionType.ALLOW)  # fmt: skip
            for future in admin.create_acls([binding]).values():
                future.result(timeout=20)
        time.sleep(1)  # the ACL watch
        alice = Producer(sasl_conf(bootstrap, "PLAIN") | {"message.timeout.ms": 10_000})
        alice.produce("acl-t", b"by-alice")
        assert alice.flush(20) == 0
        errors: list[Any] = []
        bob = Producer(sasl_conf(bootstrap, "SCRAM-SHA-256") | {"message.timeout.ms": 5_000})
        bob.produce("acl-t", b"by-bob", on_delivery=lambda err, _m: errors.append(err))
        bob.flush(15)
        assert errors and errors[0] is not None
        assert "AUTHORIZATION" in errors[0].name()
        got = read_plain(SaslBroker(proc, internal, sasl, sasl), "acl-t", 2)
        assert got == [b"by-alice"]
