"""The Kafka 4.x admin APIs: DescribeTopicPartitions (KIP-966) and ListConfigResources
(KIP-1142), with kafka-python's admin client told it faces Kafka 4.3 and with raw requests for
the pagination rules (Kafka's ``DescribeTopicPartitionsRequestHandler``)."""

from __future__ import annotations

from typing import Any

import pytest
from kafka import KafkaAdminClient

from strom.protocol.errors import ErrorCode
from strom.protocol.messages import build
from strom.testing.raw import RawConnection
from tests.integration.clients import create_topic
from tests.integration.routing import any_broker

pytestmark = pytest.mark.both_topologies  # [single] and [cluster3]: docs/cluster.md


def _admin(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, api_version=(4, 3),
                            request_timeout_ms=30_000)  # fmt: skip


def _dtp(bootstrap: str, topics: list[str], limit: int = 2000,
         cursor: tuple[str, int] | None = None) -> Any:  # fmt: skip
    from kio.schema.describe_topic_partitions.v0 import request as req

    with RawConnection(any_broker(bootstrap)) as conn:
        return conn.request(
            75, 0, topics=tuple(build(req.TopicRequest, name=t) for t in topics),
            response_partition_limit=limit,
            cursor=build(req.Cursor, topic_name=cursor[0], partition_index=cursor[1])
            if cursor else None,
        )  # fmt: skip


def _pages(resp: Any) -> list[tuple[str, list[int]]]:
    return [(t.name, [int(p.partition_index) for p in t.partitions]) for t in resp.topics]


def _cursor(resp: Any) -> tuple[str, int] | None:
    c = resp.next_cursor
    return None if c is None else (c.topic_name, int(c.partition_index))


def test_kafka_python_describes_topic_partitions(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name, partitions=4)
    client = _admin(broker.bootstrap)
    try:
        result = client.describe_topic_partitions([topic_name])
    finally:
        client.close()
    (topic,) = result["topics"]
    assert (topic["name"], topic["error_code"]) == (topic_name, 0)
    assert topic["topic_id"] is not None and str(topic["topic_id"]) != "0" * 32
    assert result["next_cursor"] is None
    parts = sorted(topic["partitions"], key=lambda p: p["partition_index"])
    assert [p["partition_index"] for p in parts] == [0, 1, 2, 3]
    for p in parts:
        assert p["error_code"] == 0 and p["leader_id"] >= 0 and p["leader_epoch"] >= 0
        assert p["leader_id"] in p["replica_nodes"] and p["leader_id"] in p["isr_nodes"]


def test_elr_lists_are_empty_not_null(broker, topic_name) -> None:
    """Kafka answers empty ELR lists when ELR is off; Java's admin client (``describeTopics``,
    kafka-topics --describe) dies with a NullPointerException on null ones (found by
    tests/jvm)."""
    create_topic(broker.bootstrap, topic_name, partitions=2)
    resp = _dtp(broker.bootstrap, [topic_name])
    (topic,) = resp.topics
    assert len(topic.partitions) == 2
    for p in topic.partitions:
        assert p.eligible_leader_replicas == () and p.last_known_elr == ()


def test_metadata_by_topic_id_with_an_empty_name(broker, topic_name) -> None:
    """Java's admin client (``describeTopics(TopicCollection.ofTopicIds(...))``) asks Metadata
    v12+ for a topic id with the name "" rather than null: Kafka looks it up by the id."""
    from kio.schema.metadata.v12 import request as req

    create_topic(broker.bootstrap, topic_name, partitions=2)
    (topic,) = _dtp(broker.bootstrap, [topic_name]).topics
    unknown = __import__("uuid").uuid4()
    with RawConnection(any_broker(broker.bootstrap)) as conn:
        resp = conn.request(3, 12, topics=tuple(
            build(req.MetadataRequestTopic, topic_id=tid, name="") for tid in
            (topic.topic_id, unknown)), allow_auto_topic_creation=False,
            include_topic_authorized_operations=False)  # fmt: skip
    found, missing = resp.topics
    assert (found.error_code, found.name, found.topic_id) == (0, topic_name, topic.topic_id)
    assert len(found.partitions) == 2
    assert (missing.error_code, missing.topic_id) == (ErrorCode.unknown_topic_id, unknown)


def test_kafka_python_paginates(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name, partitions=4)
    client = _admin(broker.bootstrap)
    try:
        seen: list[int] = []
        cursor = None
        for _ in range(10):
            page = client.describe_topic_partitions([topic_name], response_partition_limit=1,
                                                    cursor=cursor)  # fmt: skip
            (topic,) = page["topics"]
            seen += [p["partition_index"] for p in topic["partitions"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
            assert cursor["topic_name"] == topic_name
    finally:
        client.close()
    assert seen == [0, 1, 2, 3]


def test_pagination_rules(broker, topic_name) -> None:
    a, b, missing = f"{topic_name}-a", f"{topic_name}-b", f"{topic_name}-none"
    create_topic(broker.bootstrap, a, partitions=3)
    create_topic(broker.bootstrap, b, partitions=2)
    # sorted by name; the limit cuts inside a topic: the cursor names the first partition left
    first = _dtp(broker.bootstrap, [b, a], limit=2)
    assert (_pages(first), _cursor(first)) == ([(a, [0, 1])], (a, 2))
    second = _dtp(broker.bootstrap, [b, a], limit=2, cursor=(a, 2))
    # the rest of a, then b up to the limit
    assert (_pages(second), _cursor(second)) == ([(a, [2]), (b, [0])], (b, 1))
    third = _dtp(broker.bootstrap, [b, a], limit=2, cursor=(b, 1))
    assert (_pages(third), _cursor(third)) == ([(b, [1])], None)
    # a limit reached exactly at a topic's end: the cursor is the next topic at partition 0
    exact = _dtp(broker.bootstrap, [a, b], limit=3)
    assert (_pages(exact), _cursor(exact)) == ([(a, [0, 1, 2])], (b, 0))
    # an unknown topic asked by name: UNKNOWN_TOPIC_OR_PARTITION in its place, null id
    resp = _dtp(broker.bootstrap, [missing, a])
    codes = {t.name: (t.error_code, t.topic_id.int if t.topic_id else 0)  # kio: null is None
             for t in resp.topics}  # fmt: skip
    assert codes[missing] == (ErrorCode.unknown_topic_or_partition, 0)
    assert codes[a][0] == ErrorCode.none and codes[a][1] != 0
    # a limit below 1 is 1
    assert _pages(_dtp(broker.bootstrap, [a], limit=0)) == [(a, [0])]
    # the cursor's topic must be among those asked, its partition not negative
    for cursor in ((b, 0), (a, -1)):
        bad = _dtp(broker.bootstrap, [a], cursor=cursor)
        assert [(t.name, t.error_code) for t in bad.topics] == [(a, ErrorCode.invalid_request)]
    # the whole list (no topics asked): every topic from the cursor's on, sorted
    everything = _dtp(broker.bootstrap, [], cursor=(a, 1))
    names = [t.name for t in everything.topics]
    assert names == sorted(names) and names[:2] == [a, b]
    assert _pages(everything)[0] == (a, [1, 2])
    # every topic supports these operations; no authorizer: all of them (Kafka's answer)
    assert next(t for t in resp.topics if t.name == a).topic_authorized_operations == 3576


def test_kafka_python_lists_config_resources(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name)
    client = _admin(broker.bootstrap)
    try:
        result = client.list_config_resources()
    finally:
        client.close()
    brokers = {str(b) for b in broker_ids(broker.bootstrap)}
    assert set(result["broker"]) == brokers
    assert topic_name in result["topic"]


def broker_ids(bootstrap: str) -> list[int]:
    with RawConnection(any_broker(bootstrap)) as conn:
        meta = conn.request(3, 12, topics=None, allow_auto_topic_creation=False,
                            include_topic_authorized_operations=False)  # fmt: skip
    return sorted(int(b.node_id) for b in meta.brokers)


def test_list_config_resources_by_type(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name)
    ids = broker_ids(broker.bootstrap)
    with RawConnection(any_broker(broker.bootstrap)) as conn:
        every = conn.request(74, 1, resource_types=())
        brokers = conn.request(74, 1, resource_types=(4,))
        loggers = conn.request(74, 1, resource_types=(8,))
        groups = conn.request(74, 1, resource_types=(32, 16))
        unknown = conn.request(74, 1, resource_types=(2, 99))
        v0 = conn.request(74, 0)
    assert every.error_code == ErrorCode.none
    found = {(r.resource_name, int(r.resource_type)) for r in every.config_resources}
    assert (topic_name, 2) in found and {(str(i), 4) for i in ids} <= found
    assert [(r.resource_name, int(r.resource_type)) for r in brokers.config_resources] == [
        (str(i), 4) for i in ids]
    assert [r.resource_name for r in loggers.config_resources] == [str(i) for i in ids]
    assert (groups.error_code, groups.config_resources) == (ErrorCode.none, ())
    assert (unknown.error_code, unknown.config_resources) == (ErrorCode.unsupported_version, ())
    assert (v0.error_code, v0.config_resources) == (ErrorCode.none, ())  # client metrics: none


def test_group_configs_are_kept_described_and_listed(broker, topic_name) -> None:
    """librdkafka's 0081 IncrementalAlterConfigs sets ``consumer.session.timeout.ms`` on a
    GROUP resource (Kafka 4's group configs): kept, described (source GROUP_CONFIG 8), listed
    by ListConfigResources; unknown names and values outside the broker's bounds refused."""
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    group = f"{topic_name}-g"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def alter(name: str, value: str | None) -> Any:
        op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
        resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry(name, value, incremental_operation=op)])  # fmt: skip
        try:
            admin.incremental_alter_configs([resource])[resource].result(timeout=20)
        except Exception as exc:
            return exc.args[0]
        return None

    def describe() -> dict[str, tuple[str, int]]:
        resource = build(load(32, 4).DescribeConfigsResource, resource_type=32,
                         resource_name=group, configuration_keys=None)  # fmt: skip
        with RawConnection(any_broker(broker.bootstrap)) as conn:
            (result,) = conn.request(32, 4, resources=(resource,), include_synonyms=False,
                                     include_documentation=False).results  # fmt: skip
        assert result.error_code == ErrorCode.none, result
        return {c.name: (c.value, int(c.config_source)) for c in result.configs}

    assert alter("consumer.session.timeout.ms", "50000") is None
    got = describe()
    assert got["consumer.session.timeout.ms"] == ("50000", 8)
    assert got["consumer.heartbeat.interval.ms"] == ("5000", 5)  # the broker's default
    with RawConnection(any_broker(broker.bootstrap)) as conn:
        listed = conn.request(74, 1, resource_types=(32,))
    assert [(r.resource_name, int(r.resource_type)) for r in listed.config_resources] \
        == [(group, 32)]  # fmt: skip
    for name, value in (("no.such.group.config", "1"), ("consumer.session.timeout.ms", "1000"),
                        ("consumer.session.timeout.ms", "x")):  # fmt: skip
        err = alter(name, value)
        assert err is not None and err.code() == KafkaError.INVALID_CONFIG, (name, value, err)
    assert alter("consumer.session.timeout.ms", None) is None
    assert describe()["consumer.session.timeout.ms"] == ("45000", 5)
    with RawConnection(any_broker(broker.bootstrap)) as conn:
        assert conn.request(74, 1, resource_types=(32,)).config_resources == ()


def load(key: int, version: int) -> Any:
    from kio.index import load_payload_module
    from kio.static.constants import EntityType

    return load_payload_module(key, version, EntityType.request)
