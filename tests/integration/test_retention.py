"""Retention by size and time, segment rolling, and auto-creation switched off, on a real
broker whose maintenance runs every 200 ms."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from strom.testing import BrokerProcess
from tests.integration.clients import consume_all, create_topic, produce


@pytest.fixture(scope="module")
def rbroker(tmp_path_factory: pytest.TempPathFactory):
    proc = BrokerProcess(
        tmp_path_factory.mktemp("retention") / "data",
        settings={
            "log.retention.check.interval.ms": "200",
            "auto.create.topics.enable": "false",
            "offsets.topic.num.partitions": "3",
        },
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def earliest(bootstrap: str, topic: str) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        c.close()


def wait_for(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_retention_bytes_deletes_oldest_segments_only(rbroker, topic_name) -> None:
    create_topic(rbroker.bootstrap, topic_name,
                 config={"segment.bytes": "10000", "retention.bytes": "30000"})
    sent = [{"value": f"{i:05d}".encode() + b"x" * 500} for i in range(400)]
    for chunk in range(0, 400, 20):  # separate batches so segments roll between them
        produce(rbroker.bootstrap, topic_name, sent[chunk : chunk + 20], **{"linger.ms": 0})
    seg_dir = rbroker.data_dir / f"{topic_name}-0"

    def kept_bytes() -> int:
        return sum(f.stat().st_size for f in seg_dir.glob("*.log"))

    # retention runs every 200 ms: wait until it has caught up with all 400 records; what is
    # kept is at most retention.bytes plus the active segment (which is never deleted)
    wait_for(lambda: kept_bytes() <= 30000 + 10000, 15, "retention to catch up")
    low, high = earliest(rbroker.bootstrap, topic_name)
    assert high == 400 and low > 0
    got = consume_all(rbroker.bootstrap, topic_name, [0], expected=400 - low, timeout=20,
                      **{"auto.offset.reset": "earliest"})
    # what is left is exactly the newest suffix, in order, nothing missing
    assert [m.value()[:5] for m in got] == [f"{i:05d}".encode() for i in range(low, 400)]


def test_retention_ms_deletes_old_segments(rbroker, topic_name) -> None:
    create_topic(rbroker.bootstrap, topic_name, config={"segment.ms": "100", "retention.ms": "1000"})
    old_ts = int(time.time() * 1000) - 60_000
    produce(rbroker.bootstrap, topic_name, [{"value": b"old", "timestamp": old_ts}] * 5)
    time.sleep(0.3)  # let segment.ms roll the segment holding the old records
    produce(rbroker.bootstrap, topic_name, [{"value": b"new"}])
    low, high = wait_for(
        lambda: (w := earliest(rbroker.bootstrap, topic_name))[0] >= 5 and w, 15, "old segment gone"
    )
    assert (low, high) == (5, 6)


def test_auto_create_disabled_refuses_unknown_topics(rbroker, topic_name) -> None:
    producer = Producer({"bootstrap.servers": rbroker.bootstrap, "message.timeout.ms": 3000})
    errors: list = []
    producer.produce(topic_name, b"x", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(10)
    assert errors and errors[0] is not None
    assert errors[0].code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._MSG_TIMED_OUT)
    meta = producer.list_topics(timeout=10)
    assert topic_name not in meta.topics or meta.topics[topic_name].error is not None
