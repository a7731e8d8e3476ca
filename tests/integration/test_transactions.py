"""Transactions with confluent-kafka's transactional producer against a real broker: isolation
levels, control records, the last stable offset, zombie fencing, timeouts, kill -9."""

from __future__ import annotations

import datetime
import time
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer
from kio.index import load_payload_module
from kio.static.constants import EntityType

from strom.protocol.errors import ErrorCode
from strom.protocol.messages import build
from strom.protocol.record_batch import build_batch
from strom.testing import BrokerProcess
from strom.testing.raw import RawConnection
from tests.integration.clients import create_topic
from tests.integration.routing import TRANSACTION, coordinator_of, leader_of
from tests.integration.txn_helpers import list_latest, read_to_end, wait_until

pytestmark = pytest.mark.both_topologies  # [single] and [cluster3]: docs/cluster.md

FAST_ABORT = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"}


def _producer(bootstrap: str, txn_id: str, **conf: object) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5,
                  **conf})  # fmt: skip
    p.init_transactions(30)
    return p


def _values(msgs: list) -> list[bytes]:
    return [m.value() for m in msgs]


def test_isolation_levels_and_control_records(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name, partitions=2)
    p = _producer(broker.bootstrap, f"{topic_name}-tx")
    expected_committed: dict[int, list[bytes]] = {0: [], 1: []}
    everything: dict[int, list[bytes]] = {0: [], 1: []}
    for round_ in range(4):
        commit = round_ % 2 == 0
        p.begin_transaction()
        for i in range(10):
            value = b"%s-%d-%d" % (b"c" if commit else b"a", round_, i)
            p.produce(topic_name, value=value, partition=i % 2)
            everything[i % 2].append(value)
            if commit:
                expected_committed[i % 2].append(value)
        p.flush(30)  # the aborted batches reach the log too
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
    for part in (0, 1):
        committed = read_to_end(broker.bootstrap, topic_name, [part], "read_committed")
        assert _values(committed) == expected_committed[part]
        uncommitted = read_to_end(broker.bootstrap, topic_name, [part], "read_uncommitted")
        assert _values(uncommitted) == everything[part]  # no marker surfaces as a message
        # 4 transactions, each ended by one marker in each partition
        assert list_latest(broker.bootstrap, topic_name, part, 0) == 20 + 4
        assert list_latest(broker.bootstrap, topic_name, part, 1) == 24
        offsets = [m.offset() for m in uncommitted]
        assert offsets == sorted(offsets) and len(set(offsets)) == 20


def test_open_transaction_holds_back_read_committed(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce(topic_name, value=b"before")
    plain.flush(30)
    p = _producer(broker.bootstrap, f"{topic_name}-tx")
    p.begin_transaction()
    p.produce(topic_name, value=b"in-txn")
    p.flush(30)
    plain.produce(topic_name, value=b"after")  # non-transactional, behind the open txn
    plain.flush(30)
    assert list_latest(broker.bootstrap, topic_name, 0, 0) == 3
    assert list_latest(broker.bootstrap, topic_name, 0, 1) == 1  # the LSO
    assert _values(read_to_end(broker.bootstrap, topic_name, [0], "read_committed")) == [b"before"]
    p.commit_transaction(30)
    assert list_latest(broker.bootstrap, topic_name, 0, 1) == 4
    assert _values(read_to_end(broker.bootstrap, topic_name, [0], "read_committed")) == [
        b"before", b"in-txn", b"after"]  # fmt: skip


def test_zombie_producer_is_fenced(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name)
    txn_id = f"{topic_name}-tx"
    old = _producer(broker.bootstrap, txn_id)
    old.begin_transaction()
    old.produce(topic_name, value=b"zombie")
    old.flush(30)
    new = _producer(broker.bootstrap, txn_id)  # bumps the epoch, aborts the zombie's txn
    new.begin_transaction()
    new.produce(topic_name, value=b"live")
    new.commit_transaction(30)
    with pytest.raises(KafkaException) as info:
        old.produce(topic_name, value=b"zombie-2")
        old.commit_transaction(10)
    err = info.value.args[0]
    assert err.fatal() or "fenced" in str(err).lower(), err
    assert _values(read_to_end(broker.bootstrap, topic_name, [0], "read_committed")) == [b"live"]
    uncommitted = _values(read_to_end(broker.bootstrap, topic_name, [0], "read_uncommitted"))
    assert uncommitted == [b"zombie", b"live"]  # zombie-2 was refused by the partition


def test_abandoned_transaction_is_aborted_after_its_timeout(tmp_path, topic_name) -> None:
    proc = BrokerProcess(tmp_path / "data", settings=FAST_ABORT).start()
    try:
        create_topic(proc.bootstrap, topic_name)
        p = _producer(proc.bootstrap, f"{topic_name}-tx", **{"transaction.timeout.ms": 2000})
        p.begin_transaction()
        p.produce(topic_name, value=b"abandoned")
        p.flush(30)
        assert list_latest(proc.bootstrap, topic_name, 0, 1) == 0
        wait_until(lambda: list_latest(proc.bootstrap, topic_name, 0, 1) == 2, 20,
                   "the timed-out transaction to be aborted")  # fmt: skip
        assert read_to_end(proc.bootstrap, topic_name, [0], "read_committed") == []
        with pytest.raises(KafkaException):  # its epoch was bumped: the producer is fenced
            p.commit_transaction(10)
    finally:
        proc.stop()


def test_broker_kill_9_mid_transaction_leaves_no_stuck_lso(tmp_path, topic_name) -> None:
    proc = BrokerProcess(tmp_path / "data", settings=FAST_ABORT).start()
    try:
        create_topic(proc.bootstrap, topic_name, partitions=2)
        done = _producer(proc.bootstrap, f"{topic_name}-done")
        done.begin_transaction()
        done.produce(topic_name, value=b"committed", partition=0)
        done.commit_transaction(30)
        p = _producer(proc.bootstrap, f"{topic_name}-open", **{"transaction.timeout.ms": 3000})
        p.begin_transaction()
        for part in (0, 1):
            p.produce(topic_name, value=b"open", partition=part)
        p.flush(30)
        proc.kill()
        proc.start()
        assert list_latest(proc.bootstrap, topic_name, 0, 1) == 2  # still open after restart
        wait_until(lambda: all(list_latest(proc.bootstrap, topic_name, part, 1)
                               == list_latest(proc.bootstrap, topic_name, part, 0)
                               for part in (0, 1)), 30, "the LSO to catch up")  # fmt: skip
        values = _values(read_to_end(proc.bootstrap, topic_name, [0, 1], "read_committed"))
        assert values == [b"committed"]
    finally:
        proc.stop()


def _raw_produce(bootstrap: str, topic: str, records: bytes, txn_id: str | None = None) -> Any:
    mod = load_payload_module(0, 9, EntityType.request)
    data = build(mod.TopicProduceData, name=topic, partition_data=(
        build(mod.PartitionProduceData, index=0, records=records),))  # fmt: skip
    with RawConnection(leader_of(bootstrap, topic)) as conn:
        resp = conn.request(0, 9, transactional_id=txn_id, acks=-1,
                            timeout=datetime.timedelta(seconds=5), topic_data=(data,))  # fmt: skip
    return resp.responses[0].partition_responses[0]


def test_transactional_batch_outside_its_transaction_is_refused(broker, topic_name) -> None:
    """A late batch (after the commit) or one of a producer with no transaction would open a
    transaction no coordinator ends: refused with Kafka's codes (INVALID_TXN_STATE,
    INVALID_PRODUCER_ID_MAPPING, INVALID_PRODUCER_EPOCH for a fenced one), nothing stored."""
    create_topic(broker.bootstrap, topic_name)
    deadline = time.monotonic() + 30
    while True:  # FindCoordinator creates __transaction_state, then it loads: as a client
        with RawConnection(coordinator_of(broker.bootstrap, f"{topic_name}-tx",
                                          TRANSACTION)) as conn:  # fmt: skip
            conn.request(10, 4, key_type=TRANSACTION, coordinator_keys=(f"{topic_name}-tx",))
            init = conn.request(22, 4, transactional_id=f"{topic_name}-tx",
                                transaction_timeout=60000, producer_id=-1, producer_epoch=-1)
        if init.error_code == ErrorCode.none or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert init.error_code == ErrorCode.none, init
    pid, epoch = init.producer_id, init.producer_epoch
    p = _producer(broker.bootstrap, f"{topic_name}-tx")  # epoch + 1: the raw one is a zombie
    p.begin_transaction()
    p.produce(topic_name, value=b"ok")
    p.commit_transaction(30)

    def batch(producer_id: int, producer_epoch: int, seq: int) -> bytes:
        return build_batch([(None, b"late", [], int(time.time() * 1000))], producer_id=producer_id,
                           producer_epoch=producer_epoch, base_sequence=seq,
                           is_transactional=True)  # fmt: skip

    # with its transactional id, as a client sends it: on a cluster the partition's leader
    # asks the id's coordinator, which may be another broker (AddPartitionsToTxn v4)
    txn_id = f"{topic_name}-tx"
    assert _raw_produce(broker.bootstrap, topic_name, batch(pid, epoch + 1, 1), txn_id).error_code \
        == ErrorCode.invalid_txn_state  # the current epoch, but its transaction has ended
    # a producer id the transactional id does not own: Kafka's coordinator answers
    # INVALID_PRODUCER_ID_MAPPING, which its leader passes on
    assert _raw_produce(broker.bootstrap, topic_name, batch(987654, 0, 0), txn_id).error_code == (
        ErrorCode.invalid_producer_id_mapping)
    # the zombie's own epoch: fenced (the coordinator's PRODUCER_FENCED, as a leader maps it)
    assert _raw_produce(broker.bootstrap, topic_name, batch(pid, epoch, 1), txn_id).error_code == (
        ErrorCode.invalid_producer_epoch)
    assert list_latest(broker.bootstrap, topic_name, 0, 0) == 2  # "ok" and its marker
    assert list_latest(broker.bootstrap, topic_name, 0, 1) == 2
