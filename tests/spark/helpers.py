"""Small helpers for the Spark tests: topics, producing, reading back, waiting."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic


def create_topic(bootstrap: str, name: str, partitions: int, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name].result(30)


def add_partitions(bootstrap: str, name: str, total: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(name, total)])[name].result(30)


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[dict[str, Any]],
    **config: Any,
) -> list[tuple[int, int]]:
    """Produce and wait; (partition, offset) of each record in order."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    results: list[Any] = []
    for record in records:
        slot = len(results)
        results.append(None)

        def done(err: Any, msg: Any, slot: int = slot) -> None:
            assert err is None, err
            results[slot] = (msg.partition(), msg.offset())

        producer.produce(topic, on_delivery=done, **record)
        producer.poll(0)
    assert producer.flush(30) == 0
    return results


def consume_all(
    bootstrap: str, topic: str, partitions: Sequence[int], timeout: float = 20.0, **config: Any
) -> list[Any]:
    """Every record of the partitions from offset 0 to their end (ends at EOF on each)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "spark-tests-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            **config,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    out: list[Any] = []
    eof: set[int] = set()
    deadline = time.monotonic() + timeout
    while len(eof) < len(partitions) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                eof.add(msg.partition())
                continue
            raise AssertionError(msg.error())
        out.append(msg)
    consumer.close()
    assert len(eof) == len(partitions), f"no EOF on all partitions of {topic} in {timeout}s"
    return out


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
