"""Replication between real broker processes, with the test acting as the controller.

Brokers run with ``strom.controller.enable=false`` and learn what to lead and follow only from
the test's UpdateMetadata / LeaderAndIsr / StopReplica (:mod:`tests.integration.controller_stub`);
an AlterPartition stub accepts the leaders' ISR changes. Producers and consumers are
confluent-kafka; follower logs are compared file by file with the leader's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer

from strom.admin import wire
from strom.testing import BrokerProcess
from tests.integration.clients import consume_all, produce
from tests.integration.controller_stub import AlterPartitionStub, FakeController, PartitionState

NOT_LEADER_OR_FOLLOWER, STALE_CONTROLLER_EPOCH = 6, 11


def _wait(what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _segment(broker: BrokerProcess, topic: str, partition: int = 0) -> bytes:
    path = broker.data_dir / f"{topic}-{partition}" / f"{0:020d}.log"
    try:
        return path.read_bytes()
    except OSError:
        return b""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[FakeController]:
    stub = AlterPartitionStub()
    brokers = {
        i: BrokerProcess(tmp_path / f"b{i}", settings={
            "node.id": str(i), "strom.controller.enable": "false",
            "replica.lag.time.max.ms": "2000", "replica.fetch.backoff.ms": "200",
            "replica.fetch.wait.max.ms": "200", "min.insync.replicas": "2",
        })  # fmt: skip
        for i in (1, 2)
    }
    try:
        for b in brokers.values():
            b.start()
        yield FakeController(brokers, stub)
    finally:
        for b in brokers.values():
            b.stop()
        stub.close()


def _list_offsets(broker: BrokerProcess, topic: str) -> tuple[int, int]:
    """(error code, latest offset) of partition 0 by ListOffsets v7."""
    answer = wire.request(broker.bootstrap, 2, 7, replica_id=-1, isolation_level=0, topics=(
        wire.part(2, 7, "ListOffsetsTopic", name=topic, partitions=(
            wire.part(2, 7, "ListOffsetsPartition", partition_index=0, current_leader_epoch=-1,
                      timestamp=-1),)),))  # fmt: skip
    p = answer.topics[0].partitions[0]
    return int(p.error_code), int(p.offset)


def _fetch(broker: BrokerProcess, topic: str, version: int) -> tuple[int, int, int]:
    """(error code, high watermark, record bytes) of a consumer's Fetch of partition 0."""
    rack = {"rack_id": ""} if version >= 11 else {}
    answer = wire.request(broker.bootstrap, 1, version, replica_id=-1, max_wait=0, min_bytes=0,
                          max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                          forgotten_topics_data=(), **rack, topics=(
                              wire.part(1, version, "FetchTopic", topic=topic, partitions=(
                                  wire.part(1, version, "FetchPartition", partition=0,
                                            fetch_offset=0, partition_max_bytes=1 << 20),)),))  # fmt: skip
    p = answer.responses[0].partitions[0]
    return int(p.error_code), int(p.high_watermark), len(p.records or b"")


def _messages(prefix: str, n: int) -> list[dict[str, bytes]]:
    return [{"value": f"{prefix}-{i}".encode(), "partition": 0} for i in range(n)]


def test_acks_all_replicates_and_the_follower_takes_over(cluster: FakeController) -> None:
    b1, b2 = cluster.brokers[1], cluster.brokers[2]
    state = PartitionState(leader=1, leader_epoch=1, replicas=[1, 2], isr=[1, 2])
    cluster.apply({"rep": {0: state}})
    produce(b1.bootstrap, "rep", _messages("a", 20), acks="all")
    got = consume_all(b1.bootstrap, "rep", [0], 20)
    assert [m.value() for m in got] == [f"a-{i}".encode() for i in range(20)]
    assert [m.offset() for m in got] == list(range(20))
    # the follower holds the same batches, byte for byte (offsets and epochs kept)
    _wait("the follower's copy", lambda: _segment(b2, "rep") == _segment(b1, "rep"))
    # the follower refuses clients (librdkafka would go to the leader: ask on the wire)
    assert _list_offsets(b2, "rep") == (NOT_LEADER_OR_FOLLOWER, -1)
    assert _fetch(b2, "rep", 10)[0] == NOT_LEADER_OR_FOLLOWER
    # ... but from Fetch v11 it serves consumers up to its high watermark (KIP-392)
    _wait("the follower's high watermark", lambda: _fetch(b2, "rep", 12)[1] == 20)
    code, _hw, size = _fetch(b2, "rep", 12)
    assert code == 0 and size == len(_segment(b1, "rep"))
    assert _list_offsets(b1, "rep") == (0, 20)
    # leadership moves to broker 2 in epoch 2: it serves the same records
    moved = PartitionState(leader=2, leader_epoch=2, replicas=[1, 2], isr=[1, 2],
                           partition_epoch=1)  # fmt: skip
    cluster.apply({"rep": {0: moved}})
    produce(b2.bootstrap, "rep", _messages("b", 5), acks="all")
    got = consume_all(b2.bootstrap, "rep", [0], 25)
    assert [m.value() for m in got] == [f"a-{i}".encode() for i in range(20)] + [
        f"b-{i}".encode() for i in range(5)]  # fmt: skip
    assert [m.leader_epoch() for m in got[-5:]] == [2] * 5
    _wait("the old leader's copy", lambda: _segment(b1, "rep") == _segment(b2, "rep"))


def test_stale_controller_epoch_is_refused(cluster: FakeController) -> None:
    cluster.epoch = 5
    cluster.apply({"fenced": {0: PartitionState(leader=1, leader_epoch=1, replicas=[1, 2],
                                                isr=[1, 2])}})  # fmt: skip
    stale = PartitionState(leader=2, leader_epoch=9, replicas=[1, 2], isr=[1, 2])
    answer = cluster.leader_and_isr(1, {"fenced": {0: stale}}, epoch=4)
    assert int(answer.error_code) == STALE_CONTROLLER_EPOCH
    cluster.epoch = 4
    assert cluster.update_metadata({"fenced": {0: stale}}) == {1: STALE_CONTROLLER_EPOCH,
                                                                2: STALE_CONTROLLER_EPOCH}
    # nothing changed: broker 1 still leads in epoch 1
    produce(cluster.brokers[1].bootstrap, "fenced", _messages("x", 3), acks="all")
    assert len(consume_all(cluster.brokers[1].bootstrap, "fenced", [0], 3)) == 3


def test_divergent_tail_is_truncated(cluster: FakeController) -> None:
    b1, b2 = cluster.brokers[1], cluster.brokers[2]
    cluster.apply({"div": {0: PartitionState(leader=1, leader_epoch=1, replicas=[1, 2],
                                             isr=[1, 2])}})  # fmt: skip
    produce(b1.bootstrap, "div", _messages("ok", 5), acks="all")  # offsets 0-4 on both
    _wait("the follower's copy", lambda: _segment(b2, "div") == _segment(b1, "div"))
    assert int(cluster.stop_replica(2, "div", 0, delete=False).error_code) == 0
    produce(b1.bootstrap, "div", _messages("lost", 3), acks=1)  # offsets 5-7, epoch 1, b1 only
    time.sleep(0.5)
    assert len(_segment(b1, "div")) > len(_segment(b2, "div"))
    # broker 2 becomes the leader in epoch 2 (broker 1 is cut off) and takes new writes
    cluster.epoch = 2
    cluster.update_metadata({"div": {0: PartitionState(2, 2, [1, 2], [2], 1)}}, to=[2])
    answer = cluster.leader_and_isr(2, {"div": {0: PartitionState(2, 2, [1, 2], [2], 1)}})
    assert int(answer.error_code) == 0
    produce(b2.bootstrap, "div", _messages("new", 2), acks=1)  # offsets 5-6, epoch 2
    # broker 1 returns as a follower: its epoch-1 tail (5-7) goes, epoch 2's comes
    cluster.apply({"div": {0: PartitionState(2, 2, [1, 2], [2], 1)}})
    _wait("the truncated copy", lambda: _segment(b1, "div") == _segment(b2, "div"))
    got = consume_all(b2.bootstrap, "div", [0], 7)
    assert [m.value() for m in got] == [f"ok-{i}".encode() for i in range(5)] + [
        b"new-0", b"new-1"]  # fmt: skip
    assert "truncating div-0 from 8 to 5" in b1.log_file.read_text()


def _produce_one(bootstrap: str, topic: str, value: bytes) -> int:
    """One acks=all record without retries: its delivery error code (0: acknowledged)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0,
                         "enable.idempotence": False, "request.timeout.ms": 20000})  # fmt: skip
    result: list[int] = []
    producer.produce(topic, value, partition=0,
                     on_delivery=lambda err, _m: result.append(err.code() if err else 0))  # fmt: skip
    producer.flush(30)
    assert result, "no delivery report"
    return result[0]


def test_isr_shrinks_and_expands_through_the_controller(cluster: FakeController) -> None:
    b1, b2 = cluster.brokers[1], cluster.brokers[2]
    stub = cluster.stub
    assert stub is not None
    cluster.apply({"isr": {0: PartitionState(1, 1, [1, 2], [1, 2])}})
    key = (cluster.topic_ids["isr"], 0)
    assert _produce_one(b1.bootstrap, "isr", b"both") == 0
    b2.kill()
    # in flight while the follower is gone: stored once the ISR shrinks to [1], but on fewer
    # replicas than min.insync.replicas=2 asks
    assert _produce_one(b1.bootstrap, "isr", b"alone") == KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    assert stub.isr[key] == [1]
    assert _produce_one(b1.bootstrap, "isr", b"refused") == KafkaError.NOT_ENOUGH_REPLICAS
    # the follower returns (the controller tells it the current state), catches up, rejoins
    b2.start()
    cluster.apply({"isr": {0: PartitionState(1, 1, [1, 2], [1], 1)}})
    _wait("the ISR expansion", lambda: stub.isr[key] == [1, 2])
    assert _produce_one(b1.bootstrap, "isr", b"again") == 0
    got = consume_all(b1.bootstrap, "isr", [0], 3)
    assert [m.value() for m in got] == [b"both", b"alone", b"again"]
    _wait("the follower's copy", lambda: _segment(b2, "isr") == _segment(b1, "isr"))
