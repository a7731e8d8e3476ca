"""Dynamic broker configs on the wire: AlterConfigs / IncrementalAlterConfigs on BROKER
resources (this broker, ``"1"``, and the cluster default, ``""``), applied without a restart,
kept across one, described with Kafka's sources, synonyms and types; read-only ones refused.
Through confluent-kafka's AdminClient, kafka-python's admin client, raw requests and the CLI.
A password config (a TLS listener's key store password) is stored encrypted with
password.encoder.secret, opens its key store again after a restart, and is refused with
Kafka's error by a broker without a secret."""

from __future__ import annotations

import base64
import json
import socket
import ssl
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from strom.broker import password_encoder as pe
from strom.metadata import journal
from strom.testing import BrokerProcess
from strom.testing.process import free_port, properties_file, wait_for_port
from strom.testing.tls import make_tls_files
from tests.integration.cli_helpers import assert_clean_error, strom
from tests.integration.clients import consume_all, create_topic, produce
from tests.integration.test_admin import nested, raw_call

DYNAMIC_TOPIC, DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT = 1, 2, 3, 4, 5
SETTINGS = {"log.retention.ms": "3600000", "log.retention.check.interval.ms": "200"}


def incremental(bootstrap: str, broker: str, **ops: str | None) -> KafkaError | None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.BROKER, broker)
    for name, value in ops.items():
        op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
        resource.add_incremental_config(ConfigEntry(name.replace("_", "."), value,
                                                    incremental_operation=op))  # fmt: skip
    try:
        admin.incremental_alter_configs([resource])[resource].result(timeout=20)
    except Exception as exc:
        return exc.args[0]
    return None


def describe_raw(bootstrap: str, rtype: int, name: str, keys: tuple[str, ...] | None,
                 docs: bool = False) -> dict[str, Any]:  # fmt: skip
    resource = nested(32, 4, "DescribeConfigsResource", resource_type=rtype, resource_name=name,
                      configuration_keys=keys)  # fmt: skip
    [result] = raw_call(bootstrap, 32, 4, resources=(resource,), include_synonyms=True,
                        include_documentation=docs).results  # fmt: skip
    assert result.error_code == 0, result.error_message
    return {c.name: c for c in result.configs}


def synonyms(entry: Any) -> list[tuple[str, str | None, int]]:
    return [(s.name, s.value, s.source) for s in entry.synonyms]


def earliest(bootstrap: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm"})
    try:
        return int(c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[0])
    finally:
        c.close()


def produce_values(bootstrap: str, topic: str, values: list[bytes]) -> list[Any]:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    errors: list[Any] = []
    for v in values:
        p.produce(topic, v, on_delivery=lambda e, m: errors.append(e))
        p.flush(10)
    return errors


def test_dynamic_broker_configs_apply_live_persist_and_describe(
    tmp_path: Path, topic_name: str
) -> None:
    proc = BrokerProcess(tmp_path / "data", settings=SETTINGS)
    proc.start()
    try:
        b = proc.bootstrap
        assert incremental(b, "1", log_segment_bytes="1024") is None
        plain, kept = f"{topic_name}-plain", f"{topic_name}-kept"
        create_topic(b, plain)
        create_topic(b, kept, config={"retention.ms": "-1"})
        seg = describe_raw(b, 2, plain, ("segment.bytes", "retention.ms"))
        assert (seg["segment.bytes"].value, seg["segment.bytes"].config_source) == (
            "1024", DYNAMIC_BROKER)
        assert synonyms(seg["segment.bytes"]) == [
            ("log.segment.bytes", "1024", DYNAMIC_BROKER),
            ("log.segment.bytes", "1073741824", DEFAULT),
        ]
        assert seg["segment.bytes"].config_type == 3  # INT
        values = [f"{i:04d}".encode() * 50 for i in range(30)]  # 200 bytes: ~4 per segment
        assert produce_values(b, plain, values) == [None] * 30
        assert produce_values(b, kept, values) == [None] * 30
        assert earliest(b, plain) == 0
        # a retention default for every topic without its own: old segments go at once
        assert incremental(b, "1", log_retention_ms="1") is None
        deadline = time.monotonic() + 20
        while earliest(b, plain) == 0:
            assert time.monotonic() < deadline, "dynamic log.retention.ms was not applied"
            time.sleep(0.1)
        assert earliest(b, kept) == 0  # its own retention.ms=-1 wins
        got = consume_all(b, kept, [0], 30)
        assert [m.value() for m in got] == values
        entry = describe_raw(b, 4, "1", ("log.retention.ms",))["log.retention.ms"]
        assert (entry.value, entry.config_source, entry.read_only) == ("1", DYNAMIC_BROKER, False)
        assert synonyms(entry) == [
            ("log.retention.ms", "1", DYNAMIC_BROKER),
            ("log.retention.ms", "3600000", STATIC),
            ("log.retention.hours", "168", DEFAULT),
        ]
        # read-only names and bad values: INVALID_REQUEST with Kafka's message (its
        # ConfigAdminManager wraps DynamicBrokerConfig's refusal); unknown names:
        # INVALID_CONFIG; nothing changes
        refused: list[tuple[dict[str, str | None], int, str]] = [
            ({"num_partitions": "4"}, KafkaError.INVALID_REQUEST,
             "Cannot update these configs dynamically: Set(num.partitions)"),
            ({"log_retention_hours": "4"}, KafkaError.INVALID_REQUEST,
             "Cannot update these configs dynamically: Set(log.retention.hours)"),
            ({"advertised_listeners": "PLAINTEXT://x:1"}, KafkaError.INVALID_REQUEST,
             "Cannot update these configs dynamically"),
            ({"log_segment_bytes": "abc"}, KafkaError.INVALID_REQUEST,
             "Invalid value abc for configuration log.segment.bytes: Not a number of type INT"),
            ({"log_retention_ms": "-5"}, KafkaError.INVALID_REQUEST, "log.retention.ms"),
            ({"num_io_threads": "0"}, KafkaError.INVALID_REQUEST,
             "Invalid value 0 for configuration num.io.threads: Value must be at least 1"),
            ({"no_such_config": "1"}, KafkaError.INVALID_CONFIG, "Unknown broker config"),
        ]  # fmt: skip
        for ops, code, message in refused:
            err = incremental(b, "1", **ops)
            assert err is not None and err.code() == code, (ops, err)
            assert message in err.str(), (ops, err)
        for name in ("x", "7"):  # not an id; another broker's (Kafka answers only for itself)
            resource = nested(32, 4, "DescribeConfigsResource", resource_type=4,
                              resource_name=name, configuration_keys=None)  # fmt: skip
            [result] = raw_call(b, 32, 4, resources=(resource,), include_synonyms=False,
                                include_documentation=False).results  # fmt: skip
            assert result.error_code == KafkaError.INVALID_REQUEST
    finally:
        proc.stop()
    # kept across a restart, with the same sources
    proc = BrokerProcess(tmp_path / "data", settings=SETTINGS, port=proc.port)
    proc.start()
    try:
        every = describe_raw(proc.bootstrap, 4, "1", None, docs=True)
        assert (every["log.segment.bytes"].value, every["log.segment.bytes"].config_source) == (
            "1024", DYNAMIC_BROKER)
        assert every["log.retention.ms"].value == "1"
        assert every["advertised.listeners"].value == f"PLAINTEXT://{proc.bootstrap}"
        assert every["num.partitions"].read_only and not every["message.max.bytes"].read_only
        assert all(c.config_type != 0 for c in every.values())
        assert every["log.segment.bytes"].documentation
        topic = describe_raw(proc.bootstrap, 2, f"{topic_name}-kept", None)
        assert len(topic) >= 23 and all(c.config_type != 0 for c in topic.values())
        assert all(c.documentation is None for c in topic.values())  # not asked for
    finally:
        proc.stop()


def alter_default_raw(bootstrap: str, configs: dict[str, str], broker: str = "",
                      validate_only: bool = False) -> Any:  # fmt: skip
    """AlterConfigs v1 on the cluster default (no client library can name ``""``), or on
    ``broker``."""
    entries = tuple(nested(33, 1, "AlterableConfig", name=k, value=v) for k, v in configs.items())
    resource = nested(33, 1, "AlterConfigsResource", resource_type=4, resource_name=broker,
                      configs=entries)  # fmt: skip
    [result] = raw_call(bootstrap, 33, 1, resources=(resource,),
                        validate_only=validate_only).responses  # fmt: skip
    return result


def test_message_max_bytes_per_broker_with_kafka_python_and_cluster_default(
    fresh_broker, topic_name
) -> None:
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    b = fresh_broker.bootstrap
    create_topic(b, topic_name)
    assert alter_default_raw(b, {"message.max.bytes": "3000"}).error_code == 0
    kp = KafkaAdminClient(bootstrap_servers=b, request_timeout_ms=10000)
    try:
        # legacy AlterConfigs: the broker's whole dynamic set (kafka-python first checks the
        # names are dynamic ones, from our DescribeConfigs)
        limit = KpResource(ConfigResourceType.BROKER, "1", configs={"message.max.bytes": "2000"})
        kp.alter_configs([limit], incremental=False)
        entry = describe_raw(b, 4, "1", ("message.max.bytes",))["message.max.bytes"]
        assert (entry.value, entry.config_source) == ("2000", DYNAMIC_BROKER)
        assert synonyms(entry) == [
            ("message.max.bytes", "2000", DYNAMIC_BROKER),
            ("message.max.bytes", "3000", DYNAMIC_DEFAULT),
            ("message.max.bytes", "1048588", DEFAULT),
        ]
        errors = produce_values(b, topic_name, [b"s" * 100, b"M" * 2500])
        assert errors[0] is None and errors[1].code() == KafkaError.MSG_SIZE_TOO_LARGE
        kp.alter_configs([KpResource(ConfigResourceType.BROKER, "1",  # IncrementalAlterConfigs
                                     configs={"message.max.bytes": ("DELETE", None)})])  # fmt: skip
        errors = produce_values(b, topic_name, [b"M" * 2500, b"L" * 5000])
        assert errors[0] is None and errors[1].code() == KafkaError.MSG_SIZE_TOO_LARGE
        assert alter_default_raw(b, {}).error_code == 0
        assert produce_values(b, topic_name, [b"L" * 5000]) == [None]
        assert [len(m.value()) for m in consume_all(b, topic_name, [0], 3)] == [100, 2500, 5000]
        refused = alter_default_raw(b, {"log.dirs": "/elsewhere"})
        assert refused.error_code == KafkaError.INVALID_REQUEST
        assert refused.error_message == "Cannot update these configs dynamically: Set(log.dirs)"
        # a per-broker config at the cluster default: Kafka's refusal
        refused = alter_default_raw(b, {"sasl.kerberos.min.time.before.relogin": "70000"})
        assert refused.error_code == KafkaError.INVALID_REQUEST
        assert refused.error_message.startswith("Cannot update these configs at default cluster "
                                                "level, broker id must be specified")  # fmt: skip
    finally:
        kp.close()


def test_cli_cluster_config_get_set_delete(fresh_broker) -> None:
    b = fresh_broker.bootstrap
    ok = strom("cluster", "config", "set", "--default", "log.retention.ms=18000000", "-b", b)
    assert ok.returncode == 0, ok.stderr
    ok = strom("cluster", "config", "set", "--broker", "1", "log.segment.bytes=4096", "-b", b)
    assert ok.returncode == 0, ok.stderr
    got = strom("cluster", "config", "get", "log.retention.ms", "log.segment.bytes",
                "num.partitions", "--format", "json", "-b", b)  # fmt: skip
    assert got.returncode == 0, got.stderr
    import json

    rows = {r["name"]: (r["value"], r["source"], r["dynamic"]) for r in json.loads(got.stdout)}
    assert rows == {
        "log.retention.ms": ("18000000", "DYNAMIC_DEFAULT_BROKER_CONFIG", True),
        "log.segment.bytes": ("4096", "DYNAMIC_BROKER_CONFIG", True),
        "num.partitions": ("1", "DEFAULT_CONFIG", False),
    }
    default = strom("cluster", "config", "get", "--default", "-b", b)
    assert default.returncode == 0 and "log.retention.ms" in default.stdout
    line = assert_clean_error(strom("cluster", "config", "set", "num.partitions=3", "-b", b))
    assert "INVALID_REQUEST" in line and "num.partitions" in line
    line = assert_clean_error(strom("cluster", "config", "get", "--broker", "7", "-b", b))
    assert line.endswith("broker 7 is not in the cluster (brokers: 1)")
    assert strom("cluster", "config", "delete", "--default", "log.retention.ms",
                 "-b", b).returncode == 0  # fmt: skip
    assert strom("cluster", "config", "delete", "log.segment.bytes", "-b", b).returncode == 0
    got = strom("cluster", "config", "get", "log.retention.hours", "log.segment.bytes",
                "--format", "json", "-b", b)  # fmt: skip
    rows = {r["name"]: (r["value"], r["source"]) for r in json.loads(got.stdout)}
    assert rows == {"log.retention.hours": ("168", "DEFAULT_CONFIG"),
                    "log.segment.bytes": ("1073741824", "DEFAULT_CONFIG")}  # fmt: skip


def test_kafka_dynamic_configs_strom_does_not_act_on_are_kept(fresh_broker) -> None:
    """librdkafka's 0081 AlterConfigs / IncrementalAlterConfigs case: a per-broker config of
    Kafka's (``sasl.kerberos.min.time.before.relogin``) is accepted, kept and described, as
    Kafka does, though strom has no use for it (docs/configs.md)."""
    b = fresh_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": b})
    name = "sasl.kerberos.min.time.before.relogin"
    legacy = ConfigResource(ResourceType.BROKER, "1", set_config={name: "58000"})
    admin.alter_configs([legacy])[legacy].result(timeout=20)
    entry = describe_raw(b, 4, "1", (name,), docs=True)[name]
    assert (entry.value, entry.config_source, entry.read_only) == ("58000", DYNAMIC_BROKER, False)
    assert synonyms(entry) == [(name, "58000", DYNAMIC_BROKER), (name, "60000", DEFAULT)]
    assert entry.config_type == 5 and entry.documentation  # LONG, Kafka's text
    assert incremental(b, "1", **{name.replace(".", "_"): "59000"}) is None
    assert describe_raw(b, 4, "1", (name,))[name].value == "59000"
    bad = incremental(b, "1", **{name.replace(".", "_"): "soon"})
    assert bad is not None and bad.code() == KafkaError.INVALID_REQUEST, bad
    assert incremental(b, "1", **{name.replace(".", "_"): None}) is None
    entry = describe_raw(b, 4, "1", (name,))[name]
    assert (entry.value, entry.config_source) == ("60000", DEFAULT)
    # a topic config of Kafka's that strom does not act on: kept and described as well
    topic = "kept-kafka-topic-config"
    create_topic(b, topic, config={"remote.storage.enable": "false"})
    resource = ConfigResource(ResourceType.TOPIC, topic)
    resource.add_incremental_config(ConfigEntry("compression.zstd.level", "7",
                                                incremental_operation=AlterConfigOpType.SET))
    admin.incremental_alter_configs([resource])[resource].result(timeout=20)
    got = describe_raw(b, 2, topic, ("compression.zstd.level", "remote.storage.enable"))
    assert (got["compression.zstd.level"].value, got["compression.zstd.level"].config_source) \
        == ("7", DYNAMIC_TOPIC)
    assert got["remote.storage.enable"].value == "false"


# --- password configs encrypted at rest (password.encoder.secret) ------------------------------

KEYSTORE_PASSWORD = "keystore-pässword-7f3a"
ENCODER_SECRET = "encoder-secret-91c2"


def served_subject(port: int, ca: Path) -> str:
    """The CN of the certificate a TLS listener serves now (a new connection)."""
    context = ssl.create_default_context(cafile=str(ca))
    with (socket.create_connection(("127.0.0.1", port), timeout=5) as sock,
          context.wrap_socket(sock, server_hostname="127.0.0.1") as conn):  # fmt: skip
        cert = conn.getpeercert()
    assert cert is not None
    rdns: Any = cert["subject"]  # ((("commonName", "..."),), ...)
    return str(dict(pair for rdn in rdns for pair in rdn)["commonName"])


def stored_broker_configs(data_dir: Path, entity: str) -> tuple[dict[str, str], bytes]:
    """``/config/brokers/<entity>``'s configs as the stopped broker's embedded store files
    hold them, and every node's data and every file of the store (to search for a secret)."""
    image = journal.load(data_dir / journal.FILE_NAME, data_dir / journal.JOURNAL_NAME)
    node = base64.b64decode(image.nodes[f"/config/brokers/{entity}"][0])
    everything = b"".join(base64.b64decode(n[0]) for n in image.nodes.values())
    everything += b"".join(p.read_bytes() for p in data_dir.iterdir() if p.is_file())
    return dict(json.loads(node)["config"]), everything


def test_keystore_password_is_encrypted_at_rest_and_opens_the_keystore_after_a_restart(
    tmp_path: Path,
) -> None:
    files = make_tls_files(tmp_path / "tls")
    plain, ssl_port = free_port(), free_port()
    props = {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{ssl_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL",
        "inter.broker.listener.name": "PLAINTEXT",
        "password.encoder.secret": ENCODER_SECRET,
        **files.listener_properties("SSL"),
    }  # fmt: skip
    config = properties_file(tmp_path / "server.properties", props)
    data_dir = tmp_path / "data"
    proc = BrokerProcess(data_dir, port=plain, config_file=config)
    bootstrap = f"127.0.0.1:{plain}"
    renewed = files.authority.issue("CN=strom-broker-renewed,O=strom",
                                    hosts=["127.0.0.1", "localhost"])  # fmt: skip
    store = renewed.write_pkcs12(tmp_path / "renewed.p12", KEYSTORE_PASSWORD)
    prefix = "listener.name.ssl."
    with proc:
        assert wait_for_port("127.0.0.1", ssl_port, 10)  # bound after the PLAINTEXT one
        assert served_subject(ssl_port, files.ca) == "strom-broker"
        err = incremental(bootstrap, "1", **{
            prefix + "ssl.keystore.type": "PKCS12", prefix + "ssl.keystore.location": str(store),
            prefix + "ssl.keystore.password": KEYSTORE_PASSWORD})  # fmt: skip
        assert err is None, err
        deadline = time.monotonic() + 10
        while served_subject(ssl_port, files.ca) != "strom-broker-renewed":
            assert time.monotonic() < deadline, "the PKCS12 key store is not served"
            time.sleep(0.2)
        entry = describe_raw(bootstrap, 4, "1", (prefix + "ssl.keystore.password",))[
            prefix + "ssl.keystore.password"]  # fmt: skip
        assert (entry.value, entry.is_sensitive, entry.config_source) == (None, True,
                                                                          DYNAMIC_BROKER)
        assert synonyms(entry) == [(prefix + "ssl.keystore.password", None, DYNAMIC_BROKER)]
        secret = describe_raw(bootstrap, 4, "1", ("password.encoder.secret",))[
            "password.encoder.secret"]  # fmt: skip
        assert (secret.value, secret.is_sensitive, secret.config_source, secret.read_only) == (
            None, True, STATIC, True)
    # the stopped broker's store: the password encrypted with the secret, nowhere in plain
    configs, everything = stored_broker_configs(data_dir, "1")
    assert configs[prefix + "ssl.keystore.location"] == str(store)  # the rest as before
    assert configs[prefix + "ssl.keystore.type"] == "PKCS12"
    encoded = configs[prefix + "ssl.keystore.password"]
    assert encoded.startswith("keyFactoryAlgorithm:PBKDF2WithHmacSHA512,cipherAlgorithm:AES/CBC/")
    assert KEYSTORE_PASSWORD.encode() not in everything
    assert ENCODER_SECRET.encode() not in everything
    assert pe.PasswordEncoder(ENCODER_SECRET).decode(encoded) == KEYSTORE_PASSWORD
    # restarted, the broker decodes it and opens the key store with it: served at once
    with proc:
        assert wait_for_port("127.0.0.1", ssl_port, 10)
        assert served_subject(ssl_port, files.ca) == "strom-broker-renewed"
        conf = files.client_config()
        produce(f"127.0.0.1:{ssl_port}", "after-restart", [{"value": b"tls"}], **conf)
        assert [m.value() for m in consume_all(bootstrap, "after-restart", [0], 1)] == [b"tls"]


def test_password_config_refused_without_password_encoder_secret(fresh_broker) -> None:
    bootstrap = fresh_broker.bootstrap
    name = "listener.name.ssl.ssl.key.password"
    err = incremental(bootstrap, "1", **{name: "p4ss", "message.max.bytes": "2048"})
    assert err is not None
    assert err.code() == KafkaError.INVALID_CONFIG
    assert err.str() == ("Invalid config value for resource ConfigResource(type=BROKER, "
                         "name='1'): Password encoder secret not configured")  # fmt: skip
    for validate_only in (False, True):  # AlterConfigs (whole set), also only validating
        result = alter_default_raw(bootstrap, {name: "p4ss"}, "1", validate_only)
        assert (result.error_code, result.error_message) == (KafkaError.INVALID_CONFIG, (
            "Invalid config value for resource ConfigResource(type=BROKER, name='1'): "
            "Password encoder secret not configured"))  # fmt: skip
    described = describe_raw(bootstrap, 4, "1", (name, "message.max.bytes"))
    assert described["message.max.bytes"].config_source == DEFAULT  # nothing of it applied
    assert name not in described or described[name].config_source != DYNAMIC_BROKER


def test_bad_password_encoder_settings_stop_serve_with_one_line(tmp_path: Path) -> None:
    for sets, message in (
        (["password.encoder.old.secret=x"], "password.encoder.old.secret is set without "
         "password.encoder.secret (the secret the passwords are re-encoded with)"),
        (["password.encoder.secret=x", "password.encoder.key.length=100"],
         "password.encoder.key.length=100 is not an AES key length (128, 192, 256)"),
        (["password.encoder.secret=x", "password.encoder.cipher.algorithm=AES/ECB/NoPadding"],
         "password.encoder.cipher.algorithm='AES/ECB/NoPadding' is not supported (one of "
         "AES/CBC/PKCS5Padding, AES/GCM/NoPadding)"),
    ):  # fmt: skip
        args = [a for s in sets for a in ("--set", s)]
        proc = strom("serve", "--data-dir", str(tmp_path / "d"), "--listen",
                     f"127.0.0.1:{free_port()}", "--strict", *args)  # fmt: skip
        assert assert_clean_error(proc) == f"strom serve: {message}"
        assert not (tmp_path / "d").exists()
