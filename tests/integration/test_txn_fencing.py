"""A zombie transactional producer is told it is fenced, on every path, as Kafka tells it.

Producer p1 begins a transaction; p2 calls ``init_transactions`` with the same
``transactional.id`` (the coordinator bumps the epoch and aborts p1's transaction); then p1
goes on. Whatever p1 sends next, the answer must make librdkafka raise its *fatal* error
``_FENCED`` (Kafka's ``TransactionCoordinator`` / ``AddPartitionsToTxnManager`` rules), never an
abortable one that would let a zombie abort and carry on:

* Produce to a partition already in the transaction (no AddPartitionsToTxn first): the leader
  verifies the batch with the coordinator (KIP-890) and answers INVALID_PRODUCER_EPOCH, on the
  single-partition fast path and on the generic path (two partitions in one request);
* Produce to a partition not yet in it: AddPartitionsToTxn answers PRODUCER_FENCED;
* ``send_offsets_to_transaction``: AddOffsetsToTxn answers PRODUCER_FENCED;
* ``commit_transaction`` / ``abort_transaction``: EndTxn answers PRODUCER_FENCED;
* TxnOffsetCommit and InitProducerId with the old epoch, which no client sends after being
  fenced, are checked on the wire: INVALID_PRODUCER_EPOCH (the only fencing code librdkafka
  knows for TxnOffsetCommit) and PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before v4).

Each test then checks that nothing of p1's transaction is visible to read_committed.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

from strom.protocol.errors import ErrorCode
from strom.testing.raw import RawConnection
from tests.integration.clients import create_topic
from tests.integration.routing import GROUP, TRANSACTION, coordinator_of, leader_of
from tests.integration.txn_helpers import read_to_end

pytestmark = pytest.mark.both_topologies  # [single] and [cluster3]: docs/cluster.md


class Zombie:
    """p1: a transactional producer that keeps the fatal errors it raises."""

    def __init__(self, bootstrap: str, txn_id: str, **conf: Any) -> None:
        self.errors: list[KafkaError] = []
        self.producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                                  **conf})  # fmt: skip
        self.producer.init_transactions(30)

    def produce(self, topic: str, value: bytes, partition: int) -> None:
        self.producer.produce(topic, value=value, partition=partition)

    def flush(self) -> None:
        """confluent-kafka raises the producer's fatal error from ``flush`` / ``poll``."""
        try:
            self.producer.flush(30)
        except KafkaException as exc:
            self.errors.append(exc.args[0])

    def assert_fenced(self, *, broker_said: str | None = None) -> None:
        """librdkafka's own fatal state: ``flush`` raised a fatal _FENCED when the broker's
        answer made it one (``broker_said``: the broker error's text in it, e.g. Kafka's
        INVALID_PRODUCER_EPOCH "old epoch", never INVALID_TXN_STATE's abortable error), and
        the commit fails with _FENCED (fatal, not abortable, not retriable)."""
        if broker_said is not None:
            fatal = [e for e in self.errors if e.fatal()]
            assert fatal, f"no fatal error raised by flush: {self.errors}"
            assert fatal[0].code() == KafkaError._FENCED, fatal[0]
            assert broker_said in fatal[0].str(), fatal[0]
        with pytest.raises(KafkaException) as info:
            self.producer.commit_transaction(10)
        err = info.value.args[0]
        assert err.fatal(), err
        assert not err.txn_requires_abort(), err
        assert not err.retriable(), err
        assert err.code() == KafkaError._FENCED, err


#: librdkafka's text of INVALID_PRODUCER_EPOCH (a Produce answer)
OLD_EPOCH = "Producer attempted an operation with an old epoch"


def _fence(bootstrap: str, txn_id: str) -> Producer:
    """p2: the new instance, whose init_transactions fences p1."""
    p2 = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    p2.init_transactions(30)
    return p2


def _committed(bootstrap: str, topic: str, partitions: list[int]) -> list[bytes]:
    return [m.value() for m in read_to_end(bootstrap, topic, partitions, "read_committed")]


def test_produce_after_fence_fast_path(broker, topic_name) -> None:
    """librdkafka's 0103 "produce after fence": one partition, linger.ms=0."""
    create_topic(broker.bootstrap, topic_name)
    p1 = Zombie(broker.bootstrap, f"{topic_name}-tx", **{"linger.ms": 0})
    p1.producer.begin_transaction()
    p1.produce(topic_name, b"before", 0)
    p1.producer.flush(30)
    _fence(broker.bootstrap, f"{topic_name}-tx")
    p1.produce(topic_name, b"after", 0)
    p1.flush()
    p1.assert_fenced(broker_said=OLD_EPOCH)
    assert _committed(broker.bootstrap, topic_name, [0]) == []


def _two_partitions_with_one_leader(bootstrap: str, topic: str, count: int) -> list[int]:
    by_leader: dict[str, list[int]] = {}
    for p in range(count):
        by_leader.setdefault(leader_of(bootstrap, topic, p), []).append(p)
    return next(ps[:2] for ps in by_leader.values() if len(ps) >= 2)


def test_produce_after_fence_generic_path(broker, topic_name) -> None:
    """Two partitions of one leader in one Produce request (the generic path)."""
    create_topic(broker.bootstrap, topic_name, partitions=4)  # 4 > 3 brokers: two share one
    parts = _two_partitions_with_one_leader(broker.bootstrap, topic_name, 4)
    p1 = Zombie(broker.bootstrap, f"{topic_name}-tx", **{"linger.ms": 200})
    p1.producer.begin_transaction()
    for p in parts:
        p1.produce(topic_name, b"before", p)
    p1.producer.flush(30)
    _fence(broker.bootstrap, f"{topic_name}-tx")
    for p in parts:  # within one linger: one request with both partitions
        p1.produce(topic_name, b"after", p)
    p1.flush()
    p1.assert_fenced(broker_said=OLD_EPOCH)
    assert _committed(broker.bootstrap, topic_name, parts) == []


def test_add_partitions_after_fence(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name, partitions=2)
    p1 = Zombie(broker.bootstrap, f"{topic_name}-tx")
    p1.producer.begin_transaction()
    p1.produce(topic_name, b"before", 0)
    p1.producer.flush(30)
    _fence(broker.bootstrap, f"{topic_name}-tx")
    p1.produce(topic_name, b"after", 1)  # a new partition: AddPartitionsToTxn first
    p1.flush()
    p1.assert_fenced(broker_said="Failed to add partitions to transaction")
    assert _committed(broker.bootstrap, topic_name, [0, 1]) == []


def test_send_offsets_after_fence(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name)
    p1 = Zombie(broker.bootstrap, f"{topic_name}-tx")
    p1.producer.begin_transaction()
    p1.produce(topic_name, b"before", 0)
    p1.producer.flush(30)
    _fence(broker.bootstrap, f"{topic_name}-tx")
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"{topic_name}-g"})
    try:
        with pytest.raises(KafkaException) as info:  # AddOffsetsToTxn: PRODUCER_FENCED
            p1.producer.send_offsets_to_transaction(
                [TopicPartition(topic_name, 0, 1)], consumer.consumer_group_metadata(), 10)
        err = info.value.args[0]
        assert err.fatal() and not err.txn_requires_abort(), err
        assert err.code() == KafkaError._FENCED, err
    finally:
        consumer.close()
    p1.assert_fenced()


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_end_txn_after_fence(broker, topic_name, commit: bool) -> None:
    """librdkafka's 0103 "do not produce after fence": EndTxn is the first to hear of it."""
    create_topic(broker.bootstrap, topic_name)
    p1 = Zombie(broker.bootstrap, f"{topic_name}-tx")
    p1.producer.begin_transaction()
    p1.produce(topic_name, b"before", 0)
    p1.producer.flush(30)
    _fence(broker.bootstrap, f"{topic_name}-tx")
    with pytest.raises(KafkaException) as info:
        if commit:
            p1.producer.commit_transaction(10)
        else:
            p1.producer.abort_transaction(10)
    err = info.value.args[0]
    assert err.fatal() and not err.txn_requires_abort() and not err.retriable(), err
    assert err.code() == KafkaError._FENCED, err
    assert _committed(broker.bootstrap, topic_name, [0]) == []


# On the wire: what no client sends once fenced -------------------------------------------------


def _init(conn: RawConnection, txn_id: str, version: int, pid: int = -1, epoch: int = -1) -> Any:
    fields: dict[str, Any] = {"transactional_id": txn_id,
                              "transaction_timeout": datetime.timedelta(seconds=60)}  # fmt: skip
    if version >= 3:
        fields.update(producer_id=pid, producer_epoch=epoch)
    return conn.request(22, version, **fields)


def test_init_producer_id_with_the_old_epoch_is_fenced(broker, topic_name) -> None:
    txn_id = f"{topic_name}-tx"
    with RawConnection(coordinator_of(broker.bootstrap, txn_id, TRANSACTION)) as conn:
        first = _init(conn, txn_id, 4)
        assert first.error_code == 0, first
        pid, old = int(first.producer_id), int(first.producer_epoch)
        second = _init(conn, txn_id, 4)  # another instance: no expected id/epoch
        assert (second.error_code, int(second.producer_id)) == (0, pid), second
        assert int(second.producer_epoch) == old + 1
        # the first instance's own epoch, now older than the current one: fenced
        zombie = _init(conn, txn_id, 4, pid, old)
        assert zombie.error_code == ErrorCode.producer_fenced, zombie
        zombie3 = _init(conn, txn_id, 3, pid, old)
        assert zombie3.error_code == ErrorCode.invalid_producer_epoch, zombie3
        # the current instance may still bump its own epoch
        bump = _init(conn, txn_id, 4, pid, old + 1)
        assert (bump.error_code, int(bump.producer_epoch)) == (0, old + 2), bump


def test_txn_offset_commit_with_the_old_epoch_is_invalid_producer_epoch(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name)
    txn_id, group = f"{topic_name}-tx", f"{topic_name}-g"
    from confluent_kafka import Consumer

    p1 = Zombie(broker.bootstrap, txn_id)
    p1.producer.begin_transaction()
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:  # AddOffsetsToTxn + TxnOffsetCommit while p1 is current
        p1.producer.send_offsets_to_transaction([TopicPartition(topic_name, 0, 1)],
                                                consumer.consumer_group_metadata(), 10)  # fmt: skip
    finally:
        consumer.close()
    with RawConnection(coordinator_of(broker.bootstrap, txn_id, TRANSACTION)) as conn:
        current = _init(conn, txn_id, 4)  # p2: bumps the epoch, aborts p1's transaction
        assert current.error_code == 0, current
    pid, new_epoch = int(current.producer_id), int(current.producer_epoch)
    from kio.index import load_payload_module
    from kio.static.constants import EntityType

    from strom.protocol.messages import build

    with RawConnection(coordinator_of(broker.bootstrap, group, GROUP)) as conn:
        for version in (0, 3):
            mod = load_payload_module(28, version, EntityType.request)
            part = build(mod.TxnOffsetCommitRequestPartition, partition_index=0,
                         committed_offset=1, committed_metadata="")  # fmt: skip
            topic = build(mod.TxnOffsetCommitRequestTopic, name=topic_name, partitions=(part,))
            extra = {"generation_id": -1, "member_id": "", "group_instance_id": None} \
                if version >= 3 else {}  # fmt: skip
            resp = conn.request(28, version, transactional_id=txn_id, group_id=group,
                                producer_id=pid, producer_epoch=new_epoch - 1,
                                topics=(topic,), **extra)  # fmt: skip
            code = resp.topics[0].partitions[0].error_code
            assert code == ErrorCode.invalid_producer_epoch, (version, resp)
    p1.assert_fenced()
