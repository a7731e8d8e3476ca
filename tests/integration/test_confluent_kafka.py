"""confluent-kafka (librdkafka) producing and consuming against a real strom broker."""

from __future__ import annotations

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME

from tests.integration.clients import consume_all, create_topic, produce

pytestmark = pytest.mark.both_topologies  # [single] and [cluster3]: docs/cluster.md


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_produce_consume_every_codec_keys_headers_timestamps(broker, topic_name, compression) -> None:
    create_topic(broker.bootstrap, topic_name, partitions=3)
    sent = [
        {
            "key": f"key-{i % 7}".encode(),
            "value": (f"value-{i}-" + "x" * (i % 50)).encode(),
            "headers": [("h", f"{i}".encode()), ("empty", b"")],
            "timestamp": 1_700_000_000_000 + i,
        }
        for i in range(500)
    ]
    produce(broker.bootstrap, topic_name, sent, **{"compression.type": compression})
    got = consume_all(broker.bootstrap, topic_name, range(3), expected=len(sent))
    assert len(got) == len(sent)
    by_partition: dict[int, list] = {}
    for msg in got:
        by_partition.setdefault(msg.partition(), []).append(msg)
    for msgs in by_partition.values():
        offsets = [m.offset() for m in msgs]
        assert offsets == list(range(len(msgs))), "offsets per partition are dense and ordered"
        values = [int(m.value().split(b"-")[1]) for m in msgs]
        assert values == sorted(values), "per-partition order is production order"
    # the same key always lands in the same partition
    key_partitions: dict[bytes, set[int]] = {}
    for m in got:
        key_partitions.setdefault(m.key(), set()).add(m.partition())
    assert all(len(p) == 1 for p in key_partitions.values())
    expected = {(m["key"], m["value"], tuple(m["headers"]), m["timestamp"]) for m in sent}
    actual = {
        (m.key(), m.value(), tuple(m.headers() or ()), m.timestamp()[1]) for m in got
    }
    assert actual == expected
    assert {m.timestamp()[0] for m in got} == {TIMESTAMP_CREATE_TIME}


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_acks(broker, topic_name, acks) -> None:
    create_topic(broker.bootstrap, topic_name)
    sent = [{"value": f"m{i}".encode()} for i in range(200)]
    reports = produce(broker.bootstrap, topic_name, sent, acks=acks)
    got = consume_all(broker.bootstrap, topic_name, [0], expected=200)
    assert [m.value() for m in got] == [m["value"] for m in sent]
    if acks != "0":
        assert [r.offset() for r in reports] == list(range(200))


def test_null_key_and_null_value(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name)
    produce(broker.bootstrap, topic_name, [{"value": None, "key": b"k"}, {"value": b"v"}])
    got = consume_all(broker.bootstrap, topic_name, [0], expected=2)
    assert [(m.key(), m.value()) for m in got] == [(b"k", None), (None, b"v")]


def test_idempotent_producer_stores_each_message_once(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name, partitions=2)
    sent = [{"key": f"{i}".encode(), "value": f"{i}".encode()} for i in range(1000)]
    produce(broker.bootstrap, topic_name, sent, **{"enable.idempotence": True, "acks": "all"})
    got = consume_all(broker.bootstrap, topic_name, [0, 1], expected=1000)
    assert sorted(int(m.value()) for m in got) == list(range(1000))


def test_log_append_time_topic(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name, config={"message.timestamp.type": "LogAppendTime"})
    produce(broker.bootstrap, topic_name, [{"value": b"a", "timestamp": 1000}], **{"compression.type": "lz4"})
    (msg,) = consume_all(broker.bootstrap, topic_name, [0], expected=1)
    kind, ts = msg.timestamp()
    assert kind == TIMESTAMP_LOG_APPEND_TIME
    assert ts > 1_600_000_000_000


def test_auto_created_topic_on_produce(broker, topic_name) -> None:
    from confluent_kafka.admin import AdminClient

    produce(broker.bootstrap, topic_name, [{"value": b"auto"}])
    # a keyless message lands on any partition of the new topic (num.partitions of the broker)
    md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(topic_name, timeout=10)
    got = consume_all(broker.bootstrap, topic_name, md.topics[topic_name].partitions, expected=1)
    assert [m.value() for m in got] == [b"auto"]


def test_large_message_and_fetch_limits(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name)
    big = b"x" * 900_000
    produce(broker.bootstrap, topic_name, [{"value": big}, {"value": b"small"}],
            **{"message.max.bytes": 1_000_000})
    # a fetch limit smaller than the batch still returns the whole batch (progress guaranteed)
    got = consume_all(broker.bootstrap, topic_name, [0], expected=2,
                      **{"fetch.max.bytes": 1024, "message.max.bytes": 1024,
                         "max.partition.fetch.bytes": 1024, "receive.message.max.bytes": 2_000_000})
    assert [len(m.value()) for m in got] == [900_000, 5]
