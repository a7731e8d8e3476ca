"""Exactly-once transactions on a replicated cluster (ZooKeeper + 3 broker processes).

The output topic has RF 3, min.insync.replicas 2 and one partition led by each broker, so
every transaction's markers reach all three brokers through WriteTxnMarkers. A transactional
confluent-kafka producer commits and aborts; read_committed sees exactly the committed
records, read_uncommitted every record. Then the broker coordinating the transactional id
(FindCoordinator) is killed with kill -9 in the middle of a transaction: another broker
becomes the leader of its ``__transaction_state`` partition, loads it, and the producer
(continuing, or re-initialised after a fatal error as an application would) commits again.
No partition stays behind an open transaction (the last stable offset reaches the log end)
and every logical batch is committed exactly once (``strom.testing.history``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.testing.zookeeper import zookeeper_available

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not zookeeper_available(), reason="apt-get install -y zookeeper"),
]
cluster_mod = pytest.importorskip("strom.testing.cluster")
ck = pytest.importorskip("confluent_kafka")
history_mod = pytest.importorskip("strom.testing.history")

TOPIC = "txn-out"
TXN_ID = "cluster-txn-1"
SESSION_MS = 6000


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Any]:
    settings = {"auto.leader.rebalance.enable": "false",
                "transaction.state.log.num.partitions": "6",
                "offsets.topic.num.partitions": "6"}  # fmt: skip
    with cluster_mod.ClusterProcess(tmp_path, brokers=3, session_timeout_ms=SESSION_MS,
                                    settings=settings) as c:  # fmt: skip
        c.create_topic(TOPIC, 3, 3, {"min.insync.replicas": "2"})
        leaders = {p: c.leader_of(TOPIC, p) for p in range(3)}
        if len(set(leaders.values())) != 3:  # the assignment spreads leaders; make sure
            pytest.fail(f"partitions not led by three brokers: {leaders}")
        yield c


def find_coordinator(cluster: Any, txn_id: str, timeout: float = 30.0) -> int:
    """FindCoordinator (key type 1) asked of every live broker until one answers; the id."""
    from kio.schema.find_coordinator.v4 import request as fc

    from strom.protocol.messages import build
    from strom.replication.connection import BrokerConnection

    async def ask(host: str, port: int) -> int | None:
        conn = BrokerConnection(host, port, client_id="test-find-coordinator")
        try:
            answer = await conn.send(10, 4, build(fc.FindCoordinatorRequest, key_type=1,
                                                  coordinator_keys=(txn_id,)), 5.0)  # fmt: skip
        except Exception:
            return None
        finally:
            conn.close()
        found = answer.coordinators[0]
        return int(found.node_id) if int(found.error_code) == 0 else None

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for broker_id in sorted(cluster.running_ids()):
            b = cluster.broker(broker_id)
            node = asyncio.run(ask(b.host, b.port))
            if node is not None:
                return node
        time.sleep(0.2)
    raise AssertionError(f"no coordinator for {txn_id} within {timeout}s")


def new_producer(cluster: Any) -> Any:
    p = ck.Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": TXN_ID,
                     "acks": "all", "transaction.timeout.ms": 60000,
                     "message.timeout.ms": 60000, "logger": cluster_mod._CLIENT_LOG})  # fmt: skip
    p.init_transactions(60)
    return p


class Batches:
    """Transactions of three records per partition; values unique per attempt."""

    def __init__(self) -> None:
        self.history = history_mod.History()
        self.delivered: list[tuple[int, int, bytes]] = []  # (partition, offset, value): all
        self.committed: dict[str, list[bytes]] = {}  # logical batch -> values of its commit
        self.aborted: list[bytes] = []

    def produce(self, producer: Any, batch: str, attempt: int) -> list[tuple[int, int, bytes]]:
        sent: list[tuple[int, int, bytes]] = []

        def on_delivery(err: Any, msg: Any) -> None:
            if err is None:
                sent.append((msg.partition(), msg.offset(), msg.value()))

        values = []
        for p in range(3):
            for i in range(3):
                value = f"{batch}-a{attempt}-p{p}-{i}".encode()
                values.append(value)
                self.history.attempt(TOPIC, None, value)
                producer.produce(TOPIC, value, partition=p, on_delivery=on_delivery)
        producer.flush(60)
        assert len(sent) == len(values), f"{batch}: {len(sent)} of {len(values)} delivered"
        self.delivered.extend(sent)
        return sent

    def commit(self, batch: str, sent: list[tuple[int, int, bytes]]) -> None:
        assert batch not in self.committed, f"{batch} committed twice"
        self.committed[batch] = [v for _p, _o, v in sent]
        for p, offset, value in sent:
            self.history.ack(TOPIC, p, offset, None, value)

    def abort(self, sent: list[tuple[int, int, bytes]]) -> None:
        for _p, _o, value in sent:
            self.aborted.append(value)
            self.history.fail(TOPIC, value, definite=True)  # read_committed must never see it


def read_all(cluster: Any, isolation: str) -> dict[int, list[tuple[int, bytes]]]:
    """Every partition of TOPIC from the start to its end (under ``isolation``)."""
    c = ck.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"check-{isolation}",
                     "isolation.level": isolation, "enable.auto.commit": False,
                     "logger": cluster_mod._CLIENT_LOG})  # fmt: skip
    out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(3)}
    try:
        ends = {}
        for p in range(3):
            tp = ck.TopicPartition(TOPIC, p)
            ends[p] = c.get_watermark_offsets(tp, timeout=10)[1]
        c.assign([ck.TopicPartition(TOPIC, p, ck.OFFSET_BEGINNING) for p in range(3)])
        deadline = time.monotonic() + 30
        done: set[int] = set()
        while len(done) < 3 and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and msg.error() is None:
                out[msg.partition()].append((msg.offset(), msg.value()))
            for p in range(3):
                pos = c.position([ck.TopicPartition(TOPIC, p)])[0].offset
                if pos >= ends[p]:
                    done.add(p)
        assert len(done) == 3, f"{isolation}: only partitions {done} read to their end {ends}"
    finally:
        c.close()
    return out


def assert_lso_at_end(cluster: Any, timeout: float = 30.0) -> None:
    """No partition left behind an open transaction: read_committed latest == log end."""
    from confluent_kafka import IsolationLevel
    from confluent_kafka.admin import OffsetSpec

    admin = cluster.admin()
    tps = [ck.TopicPartition(TOPIC, p) for p in range(3)]

    def offsets(level: Any) -> dict[int, int]:
        got = admin.list_offsets({tp: OffsetSpec.latest() for tp in tps}, isolation_level=level)
        return {tp.partition: f.result(10).offset for tp, f in got.items()}

    cluster_mod.wait_until(
        lambda: offsets(IsolationLevel.READ_COMMITTED) == offsets(IsolationLevel.READ_UNCOMMITTED),
        timeout, "last stable offsets at the log ends")  # fmt: skip


def check_committed(cluster: Any, batches: Batches) -> dict[int, list[tuple[int, bytes]]]:
    """read_committed: exactly the committed values, in produce order per partition, each
    logical batch once; checked by the history checker as well."""
    committed = read_all(cluster, "read_committed")
    for p, records in committed.items():
        for offset, value in records:
            batches.history.read(TOPIC, p, offset, None, value)
    report = batches.history.check()
    assert report.ok, str(report)
    expected = {p: [(o, v) for q, o, v in batches.delivered if q == p
                    and v not in set(batches.aborted)] for p in range(3)}  # fmt: skip
    wanted = {v for vs in batches.committed.values() for v in vs}
    expected = {p: [(o, v) for o, v in rs if v in wanted] for p, rs in expected.items()}
    assert committed == expected
    logical = [v.decode().split("-a")[0] for rs in committed.values() for _o, v in rs]
    assert sorted(set(logical)) == sorted(batches.committed)
    assert all(logical.count(b) == 9 for b in batches.committed)  # each batch exactly once
    return committed


def test_transactions_commit_and_abort_across_three_leaders(cluster: Any) -> None:
    batches = Batches()
    producer = new_producer(cluster)
    for n in range(6):
        producer.begin_transaction()
        sent = batches.produce(producer, f"b{n}", 0)
        if n % 3 == 2:
            producer.abort_transaction(60)
            batches.abort(sent)
        else:
            producer.commit_transaction(60)
            batches.commit(f"b{n}", sent)
    assert len(batches.committed) == 4 and len(batches.aborted) == 18
    check_committed(cluster, batches)
    everything = read_all(cluster, "read_uncommitted")
    for p in range(3):  # the data records, every one, where the producer was told
        assert everything[p] == [(o, v) for q, o, v in batches.delivered if q == p]
    assert_lso_at_end(cluster)


def _raw_produce(cluster: Any, leader: int, partition: int, records: bytes) -> Any:
    """One Produce v9 (acks=all) naming TXN_ID, sent to broker ``leader``; its partition answer."""
    import datetime

    from kio.schema.produce.v9 import request as pr

    from strom.protocol.messages import build
    from strom.testing.raw import RawConnection

    data = build(pr.TopicProduceData, name=TOPIC, partition_data=(
        build(pr.PartitionProduceData, index=partition, records=records),))  # fmt: skip
    with RawConnection(cluster.broker(leader).bootstrap) as conn:
        resp = conn.request(0, 9, transactional_id=TXN_ID, acks=-1,
                            timeout=datetime.timedelta(seconds=10), topic_data=(data,))  # fmt: skip
    return resp.responses[0].partition_responses[0]


def test_late_batch_on_a_leader_that_is_not_the_coordinator_is_refused(cluster: Any) -> None:
    """KIP-890's verification across brokers: a transactional batch that would open a
    transaction on a leader whose transaction coordinator is another broker is checked with
    that coordinator (AddPartitionsToTxn v4 verify_only). A zombie's batch, or a late batch
    after the commit, is refused and not stored; before, it was appended and held the
    partition's last stable offset back for good (no coordinator would end it).
    The fenced zombie's gets INVALID_PRODUCER_EPOCH (the coordinator's PRODUCER_FENCED, as
    Kafka's leader maps it), the late batch of the current epoch INVALID_TXN_STATE."""
    from strom.protocol.errors import ErrorCode
    from strom.protocol.record_batch import build_batch
    from strom.testing.raw import RawConnection

    coordinator = find_coordinator(cluster, TXN_ID)
    partition = next(p for p in range(3) if cluster.leader_of(TOPIC, p) != coordinator)
    leader = cluster.leader_of(TOPIC, partition)
    with RawConnection(cluster.broker(coordinator).bootstrap) as conn:
        init = conn.request(22, 4, transactional_id=TXN_ID, transaction_timeout=60000,
                            producer_id=-1, producer_epoch=-1)  # fmt: skip
    assert init.error_code == ErrorCode.none
    pid, zombie_epoch = int(init.producer_id), int(init.producer_epoch)
    producer = new_producer(cluster)  # the same id: epoch + 1, the raw instance is a zombie
    producer.begin_transaction()
    sent: list[tuple[int, int, bytes]] = []
    for p in range(3):  # every partition (read_all reads each to its end)
        producer.produce(TOPIC, b"c%d" % p, partition=p, on_delivery=lambda err, msg: sent.append(
            (msg.partition(), msg.offset(), msg.value())))  # fmt: skip
    producer.commit_transaction(60)  # accepted: each leader verified it with the coordinator
    assert sorted(sent) == [(p, 0, b"c%d" % p) for p in range(3)]

    def late(epoch: int, seq: int) -> bytes:
        return build_batch([(None, b"late", [], int(time.time() * 1000))], producer_id=pid,
                           producer_epoch=epoch, base_sequence=seq, is_transactional=True)  # fmt: skip

    for epoch, seq, code in ((zombie_epoch + 1, 1, ErrorCode.invalid_txn_state),  # after the commit
                             (zombie_epoch, 0, ErrorCode.invalid_producer_epoch)):  # the zombie
        answer = _raw_produce(cluster, leader, partition, late(epoch, seq))
        assert answer.error_code == code, (epoch, answer)
    assert_lso_at_end(cluster)
    expected = {p: [(0, b"c%d" % p)] for p in range(3)}
    assert read_all(cluster, "read_uncommitted") == expected  # the late batches: not stored
    assert read_all(cluster, "read_committed") == expected


def test_coordinator_killed_mid_transaction(cluster: Any) -> None:
    batches = Batches()
    producer = new_producer(cluster)
    producer.begin_transaction()
    sent = batches.produce(producer, "b0", 0)
    producer.commit_transaction(60)
    batches.commit("b0", sent)
    coordinator = find_coordinator(cluster, TXN_ID)
    # mid-stream: records of the open transaction are in all three partitions
    producer.begin_transaction()
    sent = batches.produce(producer, "b1", 0)
    cluster.kill(coordinator)
    attempt = 0
    while True:
        try:
            producer.commit_transaction(60)
            batches.commit("b1", sent)
            break
        except ck.KafkaException as exc:
            err = exc.args[0]
            attempt += 1
            assert attempt < 10, f"no commit after {attempt} attempts: {err}"
            if err.retriable():
                continue
            if err.txn_requires_abort():
                producer.abort_transaction(60)
                batches.abort(sent)
            else:  # fatal: a new instance completes or aborts what the old one left
                producer = new_producer(cluster)
                visible = {v for rs in read_all(cluster, "read_committed").values()
                           for _o, v in rs}  # fmt: skip
                if all(v in visible for _p, _o, v in sent):  # it was committed after all
                    batches.commit("b1", sent)
                    break
                assert not any(v in visible for _p, _o, v in sent), "half a transaction"
                batches.abort(sent)
            producer.begin_transaction()
            sent = batches.produce(producer, "b1", attempt)
    after = find_coordinator(cluster, TXN_ID)
    assert after != coordinator and coordinator not in cluster.running_ids()
    for n in (2, 3):  # the new coordinator keeps serving
        producer.begin_transaction()
        sent = batches.produce(producer, f"b{n}", 0)
        producer.commit_transaction(60)
        batches.commit(f"b{n}", sent)
    producer.flush(10)
    assert_lso_at_end(cluster)
    check_committed(cluster, batches)


def test_fenced_producer_is_told_so_by_a_new_leader(cluster: Any) -> None:
    """A zombie's batch reaching a partition's *new* leader (after a controlled shutdown moved
    it) gets INVALID_PRODUCER_EPOCH from that leader's KIP-890 verification, so librdkafka
    raises its fatal _FENCED, as against Kafka; nothing of the zombie is ever committed."""
    coordinator = find_coordinator(cluster, TXN_ID)
    partition = next(p for p in range(3) if cluster.leader_of(TOPIC, p) != coordinator)
    old_leader = cluster.leader_of(TOPIC, partition)
    zombie = new_producer(cluster)
    zombie.begin_transaction()
    zombie.produce(TOPIC, b"zombie-before", partition=partition)
    zombie.flush(60)
    fresh = new_producer(cluster)  # bumps the epoch, aborts the zombie's transaction
    assert cluster.stop(old_leader) == 0  # a controlled shutdown: leadership moves away
    new_leader = cluster.wait_for_leader(TOPIC, partition, not_in={old_leader})
    assert new_leader != old_leader
    zombie.produce(TOPIC, b"zombie-after", partition=partition)
    with pytest.raises(ck.KafkaException) as raised:  # flush raises the fatal error
        zombie.flush(60)
    err = raised.value.args[0]
    assert err.fatal() and err.code() == ck.KafkaError._FENCED, err
    assert "old epoch" in err.str(), err  # the broker's INVALID_PRODUCER_EPOCH
    with pytest.raises(ck.KafkaException) as ended:
        zombie.commit_transaction(30)
    err = ended.value.args[0]
    assert err.fatal() and not err.txn_requires_abort() and err.code() == ck.KafkaError._FENCED
    fresh.begin_transaction()
    fresh.produce(TOPIC, b"live", partition=partition)
    fresh.commit_transaction(60)
    from tests.integration.txn_helpers import read_to_end

    committed = read_to_end(cluster.bootstrap, TOPIC, [partition], "read_committed")
    assert [m.value() for m in committed] == [b"live"]
    cluster.start_broker(old_leader)
