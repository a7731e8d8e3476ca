"""Admin APIs against a real broker: confluent-kafka's AdminClient, kafka-python's
KafkaAdminClient, and raw requests at every advertised version."""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)
from kio.index import load_payload_module
from kio.static.constants import EntityType

from strom.protocol.messages import (
    RequestHeader,
    build,
    decode_response,
    encode_request,
    request_class,
)
from strom.testing import BrokerProcess

DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def error_of(future: Any) -> KafkaError | None:
    try:
        future.result(timeout=20)
    except KafkaException as exc:
        return exc.args[0]
    return None


def partition_count(bootstrap: str, topic: str) -> int | None:
    """Partitions of ``topic`` as Metadata reports them, None when it does not exist."""
    from confluent_kafka import TopicCollection

    client = admin(bootstrap)  # keep the handle alive while the future is pending
    future = client.describe_topics(TopicCollection([topic]))[topic]
    try:
        return len(future.result(timeout=20).partitions)
    except KafkaException as exc:
        assert exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
        return None


def broker_default(bootstrap: str, key: str) -> int:
    """A broker setting (num.partitions, default.replication.factor) as DescribeConfigs of the
    first broker answers it: a single node's defaults, or STROM_TEST_CLUSTER's."""
    client = admin(bootstrap)
    node = client.describe_cluster().result(timeout=20).nodes[0].id
    resource = ConfigResource(ResourceType.BROKER, str(node))
    return int(client.describe_configs([resource])[resource].result(timeout=20)[key].value)


def topic_configs(bootstrap: str, topic: str) -> dict[str, Any]:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    client = admin(bootstrap)
    return client.describe_configs([resource])[resource].result(timeout=20)


def produce(bootstrap: str, topic: str, values: list[bytes], partition: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    errors: list[Any] = []
    for value in values:
        producer.produce(
            topic,
            value,
            key=b"k",  # compacted topics refuse null keys (INVALID_RECORD), as Kafka does
            partition=partition,
            on_delivery=lambda err, msg: errors.append(err) if err else None,
        )
    assert producer.flush(30) == 0
    assert errors == []


def consume_from_beginning(
    bootstrap: str, topic: str, expected: int
) -> list[tuple[int | None, bytes | None]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(topic, 0, -2)])  # OFFSET_BEGINNING
    out: list[tuple[int | None, bytes | None]] = []
    deadline = time.monotonic() + 20
    try:
        while len(out) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            out.append((msg.offset(), msg.value()))
    finally:
        consumer.close()
    return out


# CreateTopics ------------------------------------------------------------------------------


def test_create_with_configs_and_validate_only(broker: Any, topic_name: str) -> None:
    client = admin(broker.bootstrap)
    new = NewTopic(topic_name, 3, 1, config={"retention.ms": "1000", "cleanup.policy": "compact"})
    assert error_of(client.create_topics([new], validate_only=True)[topic_name]) is None
    assert partition_count(broker.bootstrap, topic_name) is None  # nothing created

    assert error_of(client.create_topics([new])[topic_name]) is None
    assert partition_count(broker.bootstrap, topic_name) == 3
    configs = topic_configs(broker.bootstrap, topic_name)
    assert (configs["retention.ms"].value, configs["retention.ms"].source) == (
        "1000",
        DYNAMIC_TOPIC_CONFIG,
    )
    assert (configs["cleanup.policy"].value, configs["cleanup.policy"].source) == (
        "compact",
        DYNAMIC_TOPIC_CONFIG,
    )
    assert (configs["segment.bytes"].value, configs["segment.bytes"].source) == (
        "1073741824",
        DEFAULT_CONFIG,
    )


def test_create_with_broker_defaults(broker: Any, topic_name: str) -> None:
    client = admin(broker.bootstrap)
    assert error_of(client.create_topics([NewTopic(topic_name, -1, -1)])[topic_name]) is None
    expected = broker_default(broker.bootstrap, "num.partitions")  # 1, or 4 in a test cluster
    assert partition_count(broker.bootstrap, topic_name) == expected


def test_create_errors(broker: Any, topic_name: str) -> None:
    client = admin(broker.bootstrap)
    assert error_of(client.create_topics([NewTopic(topic_name, 1, 1)])[topic_name]) is None
    too_many = len(client.describe_cluster().result(timeout=20).nodes) + 1  # replicas > brokers
    cases = {
        topic_name: (NewTopic(topic_name, 2, 1), KafkaError.TOPIC_ALREADY_EXISTS),
        "bad name!": (NewTopic("bad name!", 1, 1), KafkaError.TOPIC_EXCEPTION),
        f"{topic_name}-rf": (
            NewTopic(f"{topic_name}-rf", 1, too_many),
            KafkaError.INVALID_REPLICATION_FACTOR,
        ),
        f"{topic_name}-cfg": (
            NewTopic(f"{topic_name}-cfg", 1, 1, config={"retention.ms": "soon"}),
            KafkaError.INVALID_CONFIG,
        ),
        f"{topic_name}-unk": (
            NewTopic(f"{topic_name}-unk", 1, 1, config={"no.such.config": "1"}),
            KafkaError.INVALID_CONFIG,
        ),
    }
    futures = client.create_topics([new for new, _ in cases.values()])
    for name, (_, code) in cases.items():
        err = error_of(futures[name])
        assert err is not None and err.code() == code, (name, err)
    cfg_err = error_of(futures[f"{topic_name}-cfg"])
    assert cfg_err is not None and "retention.ms" in cfg_err.str()
    assert partition_count(broker.bootstrap, topic_name) == 1
    assert partition_count(broker.bootstrap, f"{topic_name}-cfg") is None


# DeleteTopics ------------------------------------------------------------------------------


def test_delete_topic(broker: Any, topic_name: str) -> None:
    client = admin(broker.bootstrap)
    assert error_of(client.create_topics([NewTopic(topic_name, 2, 1)])[topic_name]) is None
    produce(broker.bootstrap, topic_name, [b"a", b"b"])
    assert error_of(client.delete_topics([topic_name])[topic_name]) is None
    assert partition_count(broker.bootstrap, topic_name) is None
    err = error_of(client.delete_topics([topic_name])[topic_name])
    assert err is not None and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    # the name is free again, and the new topic starts empty
    assert error_of(client.create_topics([NewTopic(topic_name, 1, 1)])[topic_name]) is None
    low, high = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "x"}
    ).get_watermark_offsets(TopicPartition(topic_name, 0), timeout=10)
    assert (low, high) == (0, 0)


# CreatePartitions --------------------------------------------------------------------------


def test_create_partitions(broker: Any, topic_name: str) -> None:
    client = admin(broker.bootstrap)
    assert error_of(client.create_topics([NewTopic(topic_name, 2, 1)])[topic_name]) is None
    assert (
        error_of(
            client.create_partitions([NewPartitions(topic_name, 5)], validate_only=True)[topic_name]
        )
        is None
    )
    assert partition_count(broker.bootstrap, topic_name) == 2
    assert error_of(client.create_partitions([NewPartitions(topic_name, 4)])[topic_name]) is None
    assert partition_count(broker.bootstrap, topic_name) == 4
    produce(broker.bootstrap, topic_name, [b"x"], partition=3)
    for count in (4, 3):
        err = error_of(client.create_partitions([NewPartitions(topic_name, count)])[topic_name])
        assert err is not None and err.code() == KafkaError.INVALID_PARTITIONS, count
    assert partition_count(broker.bootstrap, topic_name) == 4
    err = error_of(
        client.create_partitions([NewPartitions(f"{topic_name}-none", 3)])[f"{topic_name}-none"]
    )
    assert err is not None and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


# DescribeConfigs ---------------------------------------------------------------------------


def test_describe_configs_values_and_sources(tmp_path: Path, topic_name: str) -> None:
    proc = BrokerProcess(
        tmp_path / "data", settings={"log.retention.ms": "3600000", "num.partitions": "2"}
    )
    proc.start()
    try:
        client = admin(proc.bootstrap)
        assert (
            error_of(
                client.create_topics(
                    [NewTopic(topic_name, 1, 1, config={"max.message.bytes": "2048"})]
                )[topic_name]
            )
            is None
        )
        configs = topic_configs(proc.bootstrap, topic_name)
        # strom's 24 (with message.timestamp.difference.max.ms, gone in Kafka 4) and the
        # 10 of Kafka 4.3's it accepts without effect (docs/configs.md)
        assert len(configs) == 34
        got = {n: (c.value, c.source, c.is_read_only, c.is_sensitive) for n, c in configs.items()}
        assert got["max.message.bytes"] == ("2048", DYNAMIC_TOPIC_CONFIG, False, False)
        assert got["retention.ms"] == ("3600000", STATIC_BROKER_CONFIG, False, False)
        assert got["cleanup.policy"] == ("delete", DEFAULT_CONFIG, False, False)
        assert got["message.timestamp.type"] == ("CreateTime", DEFAULT_CONFIG, False, False)
        # synonyms, in Kafka's order (confluent-kafka keys them by name, so read them raw)
        r = nested(
            32,
            4,
            "DescribeConfigsResource",
            resource_type=2,
            resource_name=topic_name,
            configuration_keys=("retention.ms", "max.message.bytes"),
        )
        [result] = raw_call(
            proc.bootstrap,
            32,
            4,
            resources=(r,),
            include_synonyms=True,
            include_documentation=False,
        ).results
        synonyms = {
            c.name: [(s.name, s.value, s.source) for s in c.synonyms] for c in result.configs
        }
        assert synonyms == {
            "max.message.bytes": [
                ("max.message.bytes", "2048", DYNAMIC_TOPIC_CONFIG),
                ("message.max.bytes", "1048588", DEFAULT_CONFIG),
            ],
            "retention.ms": [  # Kafka has no default for the ms form: the hours' applies
                ("log.retention.ms", "3600000", STATIC_BROKER_CONFIG),
                ("log.retention.hours", "168", DEFAULT_CONFIG),
            ],
        }

        broker_res = ConfigResource(ResourceType.BROKER, "1")
        unknown = ConfigResource(ResourceType.TOPIC, f"{topic_name}-none")
        futures = client.describe_configs([broker_res, unknown])
        broker_cfg = futures[broker_res].result(timeout=20)
        assert (broker_cfg["num.partitions"].value, broker_cfg["num.partitions"].source) == (
            "2",
            STATIC_BROKER_CONFIG,
        )
        assert (
            broker_cfg["default.replication.factor"].value,
            broker_cfg["default.replication.factor"].source,
        ) == ("1", DEFAULT_CONFIG)
        assert broker_cfg["num.partitions"].is_read_only
        err = error_of(futures[unknown])
        assert err is not None and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    finally:
        proc.stop()


# AlterConfigs / IncrementalAlterConfigs ----------------------------------------------------


def test_alter_and_incremental_alter_survive_restart(
    fresh_broker: BrokerProcess, topic_name: str
) -> None:
    bootstrap = fresh_broker.bootstrap
    client = admin(bootstrap)
    assert (
        error_of(
            client.create_topics([NewTopic(topic_name, 1, 1, config={"retention.ms": "1000"})])[
                topic_name
            ]
        )
        is None
    )

    # AlterConfigs replaces the whole override set: retention.ms goes back to its default
    res = ConfigResource(ResourceType.TOPIC, topic_name, set_config={"max.message.bytes": "1000"})
    assert error_of(client.alter_configs([res])[res]) is None
    configs = topic_configs(bootstrap, topic_name)
    assert (configs["max.message.bytes"].value, configs["max.message.bytes"].source) == (
        "1000",
        DYNAMIC_TOPIC_CONFIG,
    )
    assert (configs["retention.ms"].value, configs["retention.ms"].source) == (
        "604800000",
        DEFAULT_CONFIG,
    )

    # the live log enforces the new max.message.bytes at once
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": "none"})
    results: list[Any] = []
    producer.produce(topic_name, b"x" * 5000, on_delivery=lambda err, msg: results.append(err))
    producer.flush(30)
    assert results[0] is not None and results[0].code() == KafkaError.MSG_SIZE_TOO_LARGE

    bad = ConfigResource(ResourceType.TOPIC, topic_name, set_config={"retention.ms": "-5"})
    err = error_of(client.alter_configs([bad])[bad])
    assert err is not None and err.code() == KafkaError.INVALID_CONFIG

    inc = ConfigResource(
        ResourceType.TOPIC,
        topic_name,
        incremental_configs=[
            ConfigEntry(
                "cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND
            ),
            ConfigEntry("retention.ms", "7000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("max.message.bytes", None, incremental_operation=AlterConfigOpType.DELETE),
        ],
    )
    assert error_of(client.incremental_alter_configs([inc])[inc]) is None
    wrong = ConfigResource(
        ResourceType.TOPIC,
        topic_name,
        incremental_configs=[
            ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.APPEND),
        ],
    )
    err = error_of(client.incremental_alter_configs([wrong])[wrong])
    assert err is not None and err.code() == KafkaError.INVALID_CONFIG

    expected = {"cleanup.policy": "delete,compact", "retention.ms": "7000"}
    dynamic = {
        n: c.value
        for n, c in topic_configs(bootstrap, topic_name).items()
        if c.source == DYNAMIC_TOPIC_CONFIG
    }
    assert dynamic == expected

    fresh_broker.stop()
    fresh_broker.start()
    dynamic = {
        n: c.value
        for n, c in topic_configs(bootstrap, topic_name).items()
        if c.source == DYNAMIC_TOPIC_CONFIG
    }
    assert dynamic == expected
    produce(bootstrap, topic_name, [b"y" * 5000])  # max.message.bytes is back to its default


# DeleteRecords -----------------------------------------------------------------------------


def test_delete_records(broker: Any, topic_name: str) -> None:
    bootstrap = broker.bootstrap
    client = admin(bootstrap)
    assert error_of(client.create_topics([NewTopic(topic_name, 1, 1)])[topic_name]) is None
    produce(bootstrap, topic_name, [f"m{i}".encode() for i in range(10)])

    futures = client.delete_records([TopicPartition(topic_name, 0, 4)])
    assert futures[TopicPartition(topic_name, 0)].result(timeout=20).low_watermark == 4
    got = consume_from_beginning(bootstrap, topic_name, 6)
    assert got == [(i, f"m{i}".encode()) for i in range(4, 10)]
    earliest = client.list_offsets({TopicPartition(topic_name, 0): OffsetSpec.earliest()})
    assert earliest[TopicPartition(topic_name, 0)].result(timeout=20).offset == 4

    futures = client.delete_records([TopicPartition(topic_name, 0, 11)])
    err = error_of(futures[TopicPartition(topic_name, 0)])
    assert err is not None and err.code() == KafkaError.OFFSET_OUT_OF_RANGE

    futures = client.delete_records([TopicPartition(topic_name, 0, -1)])  # the high watermark
    assert futures[TopicPartition(topic_name, 0)].result(timeout=20).low_watermark == 10
    earliest = client.list_offsets({TopicPartition(topic_name, 0): OffsetSpec.earliest()})
    assert earliest[TopicPartition(topic_name, 0)].result(timeout=20).offset == 10


# DescribeCluster ---------------------------------------------------------------------------


def test_describe_cluster(broker: Any) -> None:
    from kafka.admin import KafkaAdminClient

    # brokers 1..N at the bootstrap addresses (one on a single node, N in STROM_TEST_CLUSTER)
    addresses = sorted(
        (h, int(p)) for h, p in (a.rsplit(":", 1) for a in broker.bootstrap.split(","))
    )
    ids = list(range(1, len(addresses) + 1))
    client = admin(broker.bootstrap)
    result = client.describe_cluster().result(timeout=20)
    assert result.controller.id in ids
    assert sorted((n.host, n.port) for n in result.nodes) == addresses
    assert sorted(n.id for n in result.nodes) == ids
    assert result.cluster_id

    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        desc = kp.describe_cluster()
    finally:
        kp.close()
    assert desc["cluster_id"] == result.cluster_id
    assert desc["controller_id"] == result.controller.id
    # DescribeCluster v2 (Kafka 4.x) adds is_fenced
    assert sorted(desc["brokers"], key=lambda b: b["broker_id"]) == [
        {"broker_id": n.id, "host": n.host, "port": n.port, "rack": None, "is_fenced": False}
        for n in sorted(result.nodes, key=lambda n: n.id)
    ]


# kafka-python ------------------------------------------------------------------------------


def test_kafka_python_admin(broker: Any, topic_name: str) -> None:
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient
    from kafka.admin import NewTopic as KpNewTopic
    from kafka.errors import TopicAlreadyExistsError

    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        kp.create_topics([KpNewTopic(topic_name, 2, 1, topic_configs={"retention.ms": "1234"})])
        with pytest.raises(TopicAlreadyExistsError):
            kp.create_topics([KpNewTopic(topic_name, 2, 1)])
        assert partition_count(broker.bootstrap, topic_name) == 2
        result = kp.describe_configs([KpResource(ConfigResourceType.TOPIC, topic_name)])
        text = str(result)
        assert "'retention.ms'" in text and "'1234'" in text
        kp.delete_topics([topic_name])
        assert partition_count(broker.bootstrap, topic_name) is None
    finally:
        kp.close()


# every advertised version, over the wire -----------------------------------------------------


def raw_call(bootstrap: str, api_key: int, version: int, **fields: Any) -> Any:
    host, port = bootstrap.split(",")[0].rsplit(":", 1)  # a cluster's first broker
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        req = build(request_class(api_key, version), **fields)
        sock.sendall(encode_request(RequestHeader(api_key, version, 7, "raw"), req))
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        frame = sock.recv(size, socket.MSG_WAITALL)
    correlation, response = decode_response(api_key, version, frame)
    assert correlation == 7
    return response


def nested(api_key: int, version: int, cls_name: str, **fields: Any) -> Any:
    return build(
        getattr(load_payload_module(api_key, version, EntityType.request), cls_name), **fields
    )


def test_every_version_over_the_wire(broker: Any, topic_name: str) -> None:
    bootstrap = broker.bootstrap
    default_rf = broker_default(bootstrap, "default.replication.factor")
    for v in range(2, 8):
        name = f"{topic_name}-v{v}"
        topic = nested(
            19,
            v,
            "CreatableTopic",
            name=name,
            num_partitions=2,
            replication_factor=-1,
            assignments=(),
            configs=(nested(19, v, "CreatableTopicConfig", name="retention.ms", value="5000"),),
        )
        resp = raw_call(bootstrap, 19, v, topics=(topic,), timeout=10000, validate_only=False)
        assert [(t.name, int(t.error_code)) for t in resp.topics] == [(name, 0)]
        if v >= 5:
            assert (resp.topics[0].num_partitions, resp.topics[0].replication_factor) == (
                2,
                default_rf,
            )
            cfg = {c.name: (c.value, c.config_source) for c in resp.topics[0].configs}
            assert cfg["retention.ms"] == ("5000", DYNAMIC_TOPIC_CONFIG)
    main = f"{topic_name}-v2"
    for v in range(0, 4):
        t = nested(37, v, "CreatePartitionsTopic", name=main, count=3 + v, assignments=None)
        resp = raw_call(bootstrap, 37, v, topics=(t,), timeout=10000, validate_only=False)
        assert [int(r.error_code) for r in resp.results] == [0]
    assert partition_count(bootstrap, main) == 6
    for v in range(1, 5):
        r = nested(
            32,
            v,
            "DescribeConfigsResource",
            resource_type=2,
            resource_name=main,
            configuration_keys=("retention.ms",),
        )
        resp = raw_call(
            bootstrap, 32, v, resources=(r,), include_synonyms=True, include_documentation=True
        )
        [result] = resp.results
        assert [(c.name, c.value, c.config_source) for c in result.configs] == [
            ("retention.ms", "5000", 1)
        ]
        if v >= 3:
            assert result.configs[0].config_type == 5  # LONG
    for v in range(0, 3):
        r = nested(
            33,
            v,
            "AlterConfigsResource",
            resource_type=2,
            resource_name=main,
            configs=(nested(33, v, "AlterableConfig", name="retention.ms", value=str(6000 + v)),),
        )
        resp = raw_call(bootstrap, 33, v, resources=(r,), validate_only=False)
        assert [int(x.error_code) for x in resp.responses] == [0]
    for v in range(0, 2):
        r = nested(
            44,
            v,
            "AlterConfigsResource",
            resource_type=2,
            resource_name=main,
            configs=(
                nested(
                    44, v, "AlterableConfig", name="segment.ms", config_operation=0, value="60000"
                ),
            ),
        )
        resp = raw_call(bootstrap, 44, v, resources=(r,), validate_only=False)
        assert [int(x.error_code) for x in resp.responses] == [0]
    dynamic = {
        n: c.value
        for n, c in topic_configs(bootstrap, main).items()
        if c.source == DYNAMIC_TOPIC_CONFIG
    }
    assert dynamic == {"retention.ms": "6002", "segment.ms": "60000"}
    produce(bootstrap, main, [b"a", b"b", b"c"])
    for v in range(0, 3):
        p = nested(21, v, "DeleteRecordsPartition", partition_index=0, offset=v + 1)
        t = nested(21, v, "DeleteRecordsTopic", name=main, partitions=(p,))
        resp = raw_call(bootstrap, 21, v, topics=(t,), timeout=10000)
        assert [(x.low_watermark, int(x.error_code)) for x in resp.topics[0].partitions] == [
            (v + 1, 0)
        ]
    for v in range(0, 2):
        resp = raw_call(
            bootstrap, 60, v, include_cluster_authorized_operations=False, endpoint_type=1
        )
        ids = list(range(1, len(bootstrap.split(",")) + 1))  # one broker, or a test cluster's
        assert int(resp.error_code) == 0 and resp.controller_id in ids
        assert sorted(b.broker_id for b in resp.brokers) == ids
    resp = raw_call(bootstrap, 60, 1, include_cluster_authorized_operations=False, endpoint_type=2)
    assert int(resp.error_code) == 115  # UNSUPPORTED_ENDPOINT_TYPE
    for v in range(1, 7):
        name = f"{topic_name}-v{v + 1}"
        if v >= 6:
            resp = raw_call(
                bootstrap,
                20,
                v,
                topics=(nested(20, v, "DeleteTopicState", name=name, topic_id=None),),
                timeout=10000,
            )
        else:
            resp = raw_call(bootstrap, 20, v, topic_names=(name,), timeout=10000)
        assert [(r.name, int(r.error_code)) for r in resp.responses] == [(name, 0)]
    resp = raw_call(
        bootstrap,
        20,
        6,
        topics=(nested(20, 6, "DeleteTopicState", name=None, topic_id=__import__("uuid").uuid4()),),
        timeout=10000,
    )
    assert int(resp.responses[0].error_code) == 100  # UNKNOWN_TOPIC_ID


def test_api_versions_advertise_admin_apis(broker: Any) -> None:
    resp = raw_call(broker.bootstrap, 18, 3, client_software_name="t", client_software_version="1")
    ranges = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys}
    assert {k: ranges.get(k) for k in (19, 20, 21, 32, 33, 37, 44, 60)} == {
        19: (2, 7),
        20: (1, 6),
        21: (0, 2),
        32: (1, 4),
        33: (0, 2),
        37: (0, 3),
        44: (0, 1),
        60: (0, 2),
    }
