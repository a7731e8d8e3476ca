"""Helpers of the transaction tests: read a topic to its end under an isolation level, ask
ListOffsets under read_committed."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition
from kio.index import load_payload_module
from kio.static.constants import EntityType

from strom.protocol.messages import build
from strom.testing.raw import RawConnection
from tests.integration.routing import leader_of


def read_to_end(bootstrap: str, topic: str, partitions: Iterable[int], isolation: str,
                timeout: float = 30.0) -> list[Any]:  # fmt: skip
    """Every message from the start to the end (EOF on each partition; under read_committed
    the end is the last stable offset)."""
    parts = list(partitions)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": isolation})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in parts])
    out: list[Any] = []
    eof: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        while len(eof) < len(parts):
            assert time.monotonic() < deadline, f"no EOF on {set(parts) - eof} in {timeout}s"
            for msg in consumer.consume(1000, 0.5):
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        eof.add(msg.partition())
                        continue
                    raise AssertionError(msg.error())
                eof.discard(msg.partition())
                out.append(msg)
    finally:
        consumer.close()
    return out


def list_latest(bootstrap: str, topic: str, partition: int, isolation_level: int) -> int:
    """ListOffsets v7 latest (-1) under an isolation level (1 = read_committed)."""
    mod = load_payload_module(2, 7, EntityType.request)
    p = build(mod.ListOffsetsPartition, partition_index=partition, current_leader_epoch=-1,
              timestamp=-1)  # fmt: skip
    t = build(mod.ListOffsetsTopic, name=topic, partitions=(p,))
    with RawConnection(leader_of(bootstrap, topic, partition)) as conn:
        resp = conn.request(2, 7, replica_id=-1, isolation_level=isolation_level, topics=(t,))
    part = resp.topics[0].partitions[0]
    assert part.error_code == 0, part
    return int(part.offset)


def wait_until(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
