"""Metadata on a cluster whose brokers' listeners differ: a partition whose leader has no
endpoint on the listener the request came in on is LISTENER_NOT_FOUND with no leader named
(Kafka's ZkMetadataCache, from Metadata v6; LEADER_NOT_AVAILABLE before), while the same
partition asked on a listener the leader has answers it normally."""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

from strom.broker.context import Client, RequestContext
from strom.broker.handlers import metadata
from strom.broker.metadata_answers import MetadataAnswers
from strom.protocol.errors import ErrorCode
from strom.protocol.messages import RequestHeader
from strom.replication.metadata_cache import BrokerInfo, MetadataCache, PartitionInfo

BOTH = (("INTERNAL", "127.0.0.2", 9001), ("EXTERNAL", "localhost", 19001))


def _services() -> Any:
    cache = MetadataCache(node_id=1)
    cache.brokers = {1: BrokerInfo(1, "127.0.0.2", 9001, None, BOTH),
                     2: BrokerInfo(2, "127.0.0.3", 9002, None,
                                   (("INTERNAL", "127.0.0.3", 9002),))}  # fmt: skip
    cache.partitions[("t", 0)] = PartitionInfo(1, 3, (1, 2), (1, 2))
    cache.partitions[("t", 1)] = PartitionInfo(2, 4, (2, 1), (2, 1))
    return SimpleNamespace(replicas=SimpleNamespace(cache=cache),
                           metadata_answers=MetadataAnswers())  # fmt: skip


def _partitions(services: Any, version: int, listener: str) -> list[tuple[int, int, int]]:
    ctx = RequestContext(RequestHeader(3, version, 1, "test"), services,
                         Client("127.0.0.1", 5000, 1, listener=listener))  # fmt: skip
    info = SimpleNamespace(name="t", topic_id=uuid.uuid4(), is_internal=False,
                           replicas={0: (1, 2), 1: (2, 1)})  # fmt: skip
    entry = metadata.topic_metadata(ctx, info)  # type: ignore[arg-type]
    return [(p.partition_index, p.error_code, p.leader_id) for p in entry.partitions]


def test_a_leader_without_the_listener_is_listener_not_found() -> None:
    services = _services()
    assert _partitions(services, 12, "EXTERNAL") == [
        (0, ErrorCode.none, 1), (1, ErrorCode.listener_not_found, -1)]
    # the same topic, the same cache, asked on the listener both brokers have
    assert _partitions(services, 12, "INTERNAL") == [(0, ErrorCode.none, 1), (1, ErrorCode.none, 2)]
    # before v6 Kafka says LEADER_NOT_AVAILABLE
    assert _partitions(services, 5, "EXTERNAL") == [
        (0, ErrorCode.none, 1), (1, ErrorCode.leader_not_available, -1)]
