"""Small helpers shared by the client integration tests (real clients only)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None,
                 *, one_leader: bool = False) -> None:
    """Create ``name`` with the broker's default replication factor (1 on a single node, every
    broker of a test cluster). ``one_leader``: on a cluster, every partition gets the same
    replica list, so one broker leads them all (for raw requests naming several partitions,
    which a real client would split by leader)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if one_leader and "," in bootstrap:
        brokers = sorted(admin.list_topics(timeout=15).brokers)
        new = NewTopic(name, num_partitions=partitions, replication_factor=-1,
                       replica_assignment=[brokers] * partitions, config=config or {})
    else:
        new = NewTopic(name, partitions, -1, config=config or {})
    futures = admin.create_topics([new], request_timeout=15)
    futures[name].result(timeout=20)


def produce(bootstrap: str, topic: str, messages: Iterable[dict[str, Any]], **conf: Any) -> list[Any]:
    """Produce every message (dict of Producer.produce kwargs) and return the delivery reports."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    reports: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        reports.append((err, msg))

    for m in messages:
        producer.produce(topic, on_delivery=on_delivery, **m)
        producer.poll(0)
    remaining = producer.flush(30)
    assert remaining == 0, f"{remaining} messages were not delivered"
    errors = [err for err, _ in reports if err is not None]
    assert not errors, errors
    return [msg for _, msg in reports]


def consume_all(bootstrap: str, topic: str, partitions: Iterable[int], expected: int,
                timeout: float = 30.0, **conf: Any) -> list[Any]:
    """Read ``expected`` messages from the beginning of ``partitions`` (no group), then check
    that nothing more arrives for a moment."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "unused",
        "enable.auto.commit": False,
        "enable.partition.eof": False,
        **conf,
    })
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise AssertionError(msg.error())
                out.append(msg)
        extra_deadline = time.monotonic() + 0.5
        while time.monotonic() < extra_deadline:
            for msg in consumer.consume(100, 0.1):
                if not msg.error():
                    out.append(msg)
    finally:
        consumer.close()
    return out
