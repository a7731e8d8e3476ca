"""KIP-951 on Produce: a partition refused NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH names
the leader this broker knows, with its endpoint, so the producer moves without a Metadata
round trip (and without the stale answer an old leader's metadata cache can still give
between its LeaderAndIsr and its UpdateMetadata)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from strom.broker.handlers import produce
from strom.broker.observability import BrokerMetrics
from strom.protocol.errors import ErrorCode
from strom.protocol.hot_path import ProducePartition
from strom.replication.metadata_cache import BrokerInfo, MetadataCache, PartitionInfo


def _broker(part_leader: int, part_epoch: int, cached: PartitionInfo | None) -> Any:
    cache = MetadataCache(node_id=1)
    cache.brokers = {1: BrokerInfo(1, "127.0.0.2", 9001), 2: BrokerInfo(2, "127.0.0.3", 9002, "r2"),
                     3: BrokerInfo(3, "127.0.0.4", 9003)}  # fmt: skip
    if cached is not None:
        cache.partitions[("t", 0)] = cached
    part = SimpleNamespace(leader_id=part_leader, leader_epoch=part_epoch)
    return SimpleNamespace(replicas=SimpleNamespace(node_id=1, cache=cache,
                                                    partitions={("t", 0): part}),
                           metrics=BrokerMetrics())  # fmt: skip


def test_the_newer_epoch_wins_between_leader_and_isr_and_the_cache() -> None:
    # LeaderAndIsr made broker 2 the leader in epoch 5; the cache still says us, epoch 4
    stale = PartitionInfo(1, 4, (1, 2, 3), (1, 2, 3))
    assert produce.current_leader(_broker(2, 5, stale).replicas, "t", 0) == (2, 5)
    # the cache has already heard of a later move (epoch 6, broker 3)
    newer = PartitionInfo(3, 6, (1, 2, 3), (2, 3))
    assert produce.current_leader(_broker(2, 5, newer).replicas, "t", 0) == (3, 6)


def test_no_hint_naming_ourselves_nobody_or_a_broker_not_alive() -> None:
    assert produce.current_leader(_broker(1, 5, None).replicas, "t", 0) is None
    assert produce.current_leader(_broker(-1, 5, None).replicas, "t", 0) is None
    gone = PartitionInfo(7, 9, (1, 7), (7,))
    assert produce.current_leader(_broker(1, 5, gone).replicas, "t", 0) is None


def test_refused_partitions_carry_the_leader_and_its_endpoint() -> None:
    broker = _broker(2, 5, None)
    responses = [("t", [ProducePartition(0, ErrorCode.not_leader_or_follower),
                        ProducePartition(1, ErrorCode.none, 7, -1, 0)], None)]  # fmt: skip
    answer = produce._with_leader_hints(broker, responses)
    parts = answer.topics[0][1]
    assert parts[0].current_leader == (2, 5) and parts[1].current_leader is None
    assert list(answer.node_endpoints) == [(2, "127.0.0.3", 9002, "r2")]
    # nothing refused: the answer is unchanged, no endpoints
    ok = [("t", [ProducePartition(0, ErrorCode.none, 1, -1, 0)], None)]
    plain = produce._with_leader_hints(broker, ok)
    assert plain.node_endpoints == () and plain.topics[0][1][0].current_leader is None


def test_a_one_partition_answer_carries_the_hint_on_the_wire() -> None:
    """A one-partition Produce (most requests; its success answer comes from the connection's
    response template) refused for leadership names the leader from v10; decoded with kio,
    the frame shows it."""
    from strom.protocol.messages import decode_response
    from strom.protocol.produce_fast import ResponseTemplates

    broker = _broker(2, 5, None)
    refused = ProducePartition(0, ErrorCode.not_leader_or_follower)
    templates = ResponseTemplates()
    for version in (9, 10, 11):
        answer = (produce._with_leader_hints(broker, [("t", [refused], None)]) if version >= 10
                  else produce.ProduceResponse([("t", [refused], None)]))  # fmt: skip
        frame = templates.frame(version, 42, answer)
        correlation, response = decode_response(0, version, frame[4:])
        (topic,) = response.responses
        (part,) = topic.partition_responses
        assert (correlation, int(part.error_code)) == (42, 6)
        if version < 10:
            continue
        assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (2, 5)
        assert [(n.node_id, n.host, n.port) for n in response.node_endpoints] == [
            (2, "127.0.0.3", 9002)]
