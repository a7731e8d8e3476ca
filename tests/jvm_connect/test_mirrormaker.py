"""MirrorMaker 2 (connect-mirror 4.x, dedicated mode) copying topics and consumer-group offsets
into strom: from an Apache Kafka cluster (the migration a Kafka user makes) and from one strom
cluster to another.

Each run: a topic of 3 partitions with keyed, timestamped, header-carrying records (a
tombstone among them) and a topic config on the source; a consumer group that has read it all
and committed (an application drained before its cut-over); MirrorMaker 2 with checkpoints and
group-offset sync. Then on the target: the mirrored topic (``<source alias>.orders``, MM2's
default replication policy) holds the same records per partition in the same order (key,
value, headers, timestamp), its config came along, and the group's offsets were translated.
Producers keep writing to the source; the application, switched to the target with its group,
reads exactly the records written after it stopped: nothing twice, nothing missing.

The group is caught up on purpose: MM2 translates an offset exactly only near its latest offset
sync (``OffsetSyncStore`` keeps a sparse history and ``offset.lag.max`` / the outstanding-sync
limit thin them out), and for an older offset it goes back to an earlier sync (re-reading, never
skipping) or emits no checkpoint at all. That is MM2's design, the same with Kafka on both
sides, and not what these tests are about.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from benchmarks.kafka_jvm import KafkaNode, MirrorMakerProcess
from strom.testing import BrokerProcess

PARTITIONS = 3
PER_PARTITION = 100
LATER = 20  # records per partition written to the source after the group's cut-over
RETENTION_MS = "123456789"

COORDINATOR_MOVING = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                      KafkaError.COORDINATOR_NOT_AVAILABLE}  # fmt: skip
Record = tuple[bytes | None, bytes | None, tuple[tuple[str, bytes], ...], int]


def wait_for(condition: Callable[[], Any], timeout: float, what: str,
             log: Callable[[], str] | None = None) -> Any:  # fmt: skip
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = condition()
        except Exception as exc:  # noqa: BLE001 - not there yet
            last = exc
        else:
            if last:
                return last
        time.sleep(0.5)
    tail = f"\n{log()}" if log else ""
    raise AssertionError(f"{what}: not within {timeout:g} s (last: {last!r}){tail}")


def produce(bootstrap: str, topic: str, first: int, count: int) -> dict[int, list[Record]]:
    """``count`` records to each partition, numbered from ``first``; what was written."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    sent: dict[int, list[Record]] = {p: [] for p in range(PARTITIONS)}
    base = int(time.time() * 1000) - 3_600_000  # an hour ago: clearly the producer's stamp
    for i in range(first, first + count):
        for p in range(PARTITIONS):
            key = f"k{p}-{i}".encode()
            value = None if i == 7 else f"order {i} of partition {p}".encode()  # a tombstone
            headers = (("source", b"kafka-user"), ("seq", str(i).encode()))
            ts = base + i * 10 + p
            producer.produce(topic, value, key, partition=p, headers=list(headers), timestamp=ts)
            sent[p].append((key, value, headers, ts))
    assert producer.flush(30) == 0
    return sent


def read_all(bootstrap: str, topic: str, ends: dict[int, int],
             timeout: float = 60.0) -> dict[int, list[Record]]:  # fmt: skip
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "verifier",
                         "enable.auto.commit": False})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    got: dict[int, list[Record]] = {p: [] for p in ends}
    deadline = time.monotonic() + timeout
    try:
        while any(len(got[p]) < ends[p] for p in ends) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            headers = tuple((k, bytes(v)) for k, v in (msg.headers() or []))
            got[msg.partition()].append((msg.key(), msg.value(), headers, msg.timestamp()[1]))
    finally:
        consumer.close()
    return got


def commit_group(bootstrap: str, topic: str, group: str, offset: int) -> None:
    """The group reads each partition up to ``offset`` and commits, then leaves (inactive:
    MM2 syncs offsets only to a group with no members on the target)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})  # fmt: skip
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        seen = dict.fromkeys(range(PARTITIONS), 0)
        deadline = time.monotonic() + 60
        while min(seen.values()) < offset and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error() and msg.offset() < offset:
                seen[msg.partition()] += 1
        assert min(seen.values()) == offset, seen
        offsets = [TopicPartition(topic, p, offset) for p in range(PARTITIONS)]
        deadline = time.monotonic() + 60
        while True:
            try:
                consumer.commit(offsets=offsets, asynchronous=False)
                break
            except KafkaException as exc:
                # a fresh Kafka node is still loading __consumer_offsets (the Java client
                # retries these itself; librdkafka's synchronous commit hands them back)
                if exc.args[0].code() not in COORDINATOR_MOVING or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        consumer.close()


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        parts = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)],
                                   timeout=10)  # fmt: skip
        return {tp.partition: tp.offset for tp in parts}
    finally:
        consumer.close()


def mm2_settings(source: str, source_bootstrap: str, target: str,
                 target_bootstrap: str) -> dict[str, str]:  # fmt: skip
    """A dedicated MirrorMaker 2 with one flow, ``source -> target``, its intervals short."""
    return {
        "clusters": f"{source}, {target}",
        f"{source}.bootstrap.servers": source_bootstrap,
        f"{target}.bootstrap.servers": target_bootstrap,
        f"{source}->{target}.enabled": "true",
        f"{source}->{target}.topics": "orders",
        f"{source}->{target}.groups": "app",
        f"{target}->{source}.enabled": "false",
        "replication.factor": "1",
        "checkpoints.topic.replication.factor": "1",
        "heartbeats.topic.replication.factor": "1",
        "offset-syncs.topic.replication.factor": "1",
        "offset.storage.replication.factor": "1",
        "status.storage.replication.factor": "1",
        "config.storage.replication.factor": "1",
        "sync.group.offsets.enabled": "true",
        "sync.group.offsets.interval.seconds": "1",
        "emit.checkpoints.interval.seconds": "1",
        "emit.heartbeats.interval.seconds": "1",
        "refresh.topics.interval.seconds": "2",
        "refresh.groups.interval.seconds": "2",
        "sync.topic.configs.interval.seconds": "2",
        "offset.lag.max": "0",  # an offset sync for every record: exact translation
        "tasks.max": "1",
    }


@pytest.fixture(params=["kafka", "strom"])
def source(request: pytest.FixtureRequest, tmp_path: Path, kafka_jars: str) -> Iterator[Any]:
    """The source cluster: Apache Kafka 4 (KRaft, one node) or another strom broker."""
    if request.param == "kafka":
        with KafkaNode(tmp_path / "kafka-source") as node:  # .name "kafka"
            yield node
    else:
        with BrokerProcess(tmp_path / "strom-source" / "data") as broker:  # .name "strom"
            yield broker


def test_mirror_topics_and_group_offsets_into_strom(source: Any, strom_broker: BrokerProcess,
                                                    tmp_path: Path) -> None:  # fmt: skip
    alias = "src" if source.name == "strom" else "kafka"
    admin = AdminClient({"bootstrap.servers": source.bootstrap})
    admin.create_topics([NewTopic("orders", PARTITIONS, 1,
                                  config={"retention.ms": RETENTION_MS})])["orders"].result(30)  # fmt: skip
    sent = produce(source.bootstrap, "orders", 0, PER_PARTITION)
    commit_group(source.bootstrap, "orders", "app", PER_PARTITION)

    mm2 = MirrorMakerProcess(tmp_path / "mm2",
                             mm2_settings(alias, source.bootstrap, "strom", strom_broker.bootstrap))  # fmt: skip
    target = AdminClient({"bootstrap.servers": strom_broker.bootstrap})
    mirrored = f"{alias}.orders"
    with mm2:
        # the records, partition by partition, as the source holds them
        wait_for(lambda: len(target.list_topics(mirrored, timeout=5).topics[mirrored].partitions)
                 == PARTITIONS, 240, f"{mirrored} created on strom", mm2.log_tail)  # fmt: skip
        ends = dict.fromkeys(range(PARTITIONS), PER_PARTITION)
        wait_for(lambda: all(_end_offset(strom_broker.bootstrap, mirrored, p) == PER_PARTITION
                             for p in range(PARTITIONS)),
                 120, "every record mirrored", mm2.log_tail)  # fmt: skip
        assert read_all(strom_broker.bootstrap, mirrored, ends) == sent

        # the topic's config came along
        resource = ConfigResource(ConfigResource.Type.TOPIC, mirrored)
        wait_for(lambda: target.describe_configs([resource])[resource].result(10)
                 ["retention.ms"].value == RETENTION_MS,
                 120, "retention.ms synced", mm2.log_tail)  # fmt: skip

        # the group's committed offsets, translated through MM2's checkpoints
        want = dict.fromkeys(range(PARTITIONS), PER_PARTITION)
        wait_for(lambda: committed(strom_broker.bootstrap, "app", mirrored) == want,
                 120, "group app's offsets synced to strom", mm2.log_tail)  # fmt: skip
        checkpoints = f"{alias}.checkpoints.internal"
        assert checkpoints in target.list_topics(timeout=10).topics

        # the source's producers go on writing; MM2 keeps up
        later = produce(source.bootstrap, "orders", PER_PARTITION, LATER)
        wait_for(lambda: all(_end_offset(strom_broker.bootstrap, mirrored, p)
                             == PER_PARTITION + LATER for p in range(PARTITIONS)),
                 120, "the later records mirrored", mm2.log_tail)  # fmt: skip

    # the application moves to strom: it resumes where it stopped on the source
    consumer = Consumer({"bootstrap.servers": strom_broker.bootstrap, "group.id": "app",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    consumer.subscribe([mirrored])
    resumed: dict[int, list[Record]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 90
    expected = PARTITIONS * LATER
    try:
        while sum(map(len, resumed.values())) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            headers = tuple((k, bytes(v)) for k, v in (msg.headers() or []))
            resumed[msg.partition()].append((msg.key(), msg.value(), headers, msg.timestamp()[1]))
        extra = consumer.poll(2.0)
    finally:
        consumer.close()
    assert resumed == later
    assert extra is None or extra.error() is not None


def _end_offset(bootstrap: str, topic: str, partition: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=5)[1])
    finally:
        consumer.close()
