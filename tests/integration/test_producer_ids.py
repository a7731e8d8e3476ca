"""InitProducerId on the wire: a caller cannot fence another producer by naming its id.

Kafka's rules: without a transactional id every request gets a new producer id with epoch 0
(the named id and epoch are not bumped); naming only one of id and epoch is INVALID_REQUEST;
an empty transactional id is INVALID_REQUEST.
"""

from __future__ import annotations

import datetime
import time

from confluent_kafka import Producer
from kio.schema.errors import ErrorCode

from strom.protocol.record_batch import iter_batches
from strom.testing.raw import RawConnection
from tests.integration.clients import consume_all, create_topic
from tests.integration.routing import TRANSACTION, any_broker, coordinator_of, leader_of
from tests.integration.test_wire_semantics import fetch

TIMEOUT = datetime.timedelta(seconds=60)


def init(conn: RawConnection, version: int = 4, tid: str | None = None, pid: int = -1,
         epoch: int = -1):  # fmt: skip
    fields = {"transactional_id": tid, "transaction_timeout": TIMEOUT}
    if version >= 3:
        fields |= {"producer_id": pid, "producer_epoch": epoch}
    return conn.request(22, version, **fields)


def find_transaction_coordinator(conn: RawConnection, tid: str, timeout: float = 30.0) -> None:
    """FindCoordinator (v4, key type 1) until it names a coordinator (this single broker)."""
    deadline = time.monotonic() + timeout
    while True:
        [found] = conn.request(10, 4, key_type=1, coordinator_keys=(tid,)).coordinators
        if found.error_code == ErrorCode.none:
            return
        assert time.monotonic() < deadline, f"no transaction coordinator: {found.error_code!r}"
        time.sleep(0.1)


def test_naming_another_producers_id_gets_a_new_id_and_fences_nobody(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name)
    victim = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                       "linger.ms": 0})  # fmt: skip
    errors: list = []

    def send(values: range) -> None:
        for i in values:
            victim.produce(topic_name, f"v{i}".encode(), on_delivery=lambda e, m: errors.append(e))
        assert victim.flush(30) == 0

    send(range(0, 10))
    with RawConnection(leader_of(broker.bootstrap, topic_name)) as conn:
        batches = [h for h, _ in iter_batches(fetch(conn, topic_name, {0: 0}).responses[0]
                                              .partitions[0].records)]  # fmt: skip
        pid, epoch = batches[0].producer_id, batches[0].producer_epoch
        assert pid >= 0 and epoch >= 0
        seen = {pid}
        for version in (3, 4):
            answer = init(conn, version, pid=pid, epoch=epoch)
            assert answer.error_code == ErrorCode.none
            assert answer.producer_id not in seen and answer.producer_epoch == 0
            seen.add(answer.producer_id)
        fresh = init(conn, 2)
        assert fresh.error_code == ErrorCode.none and fresh.producer_id not in seen
    # the victim's id and epoch are untouched: it keeps producing, nothing lost or doubled
    send(range(10, 20))
    assert errors == [None] * 20
    values = [m.value() for m in consume_all(broker.bootstrap, topic_name, [0], 20)]
    assert values == [f"v{i}".encode() for i in range(20)]
    with RawConnection(leader_of(broker.bootstrap, topic_name)) as conn:
        records = fetch(conn, topic_name, {0: 0}).responses[0].partitions[0].records
        assert {(h.producer_id, h.producer_epoch) for h, _ in iter_batches(records)} == {
            (pid, epoch)
        }
    victim.flush(1)


def test_malformed_init_producer_id_requests_are_invalid_request(broker, topic_name) -> None:
    tid = f"{topic_name}-tx"
    with RawConnection(any_broker(broker.bootstrap)) as conn:
        for pid, epoch in ((5, -1), (-1, 0)):
            answer = init(conn, 4, pid=pid, epoch=epoch)
            assert (answer.error_code, answer.producer_id, answer.producer_epoch) == (
                ErrorCode.invalid_request, -1, -1
            )
        assert init(conn, 4, tid="").error_code == ErrorCode.invalid_request
        # a transactional id owns its producer id: the coordinator bumps its epoch each time.
        # As a client does, find the coordinator first: that creates __transaction_state
        # (before it, as in Kafka, InitProducerId with an id gets NOT_COORDINATOR)
        find_transaction_coordinator(conn, tid)
    with RawConnection(coordinator_of(broker.bootstrap, tid, TRANSACTION)) as conn:
        tx = init(conn, 4, tid=tid)
        assert tx.error_code == ErrorCode.none and tx.producer_epoch == 0
        again = init(conn, 4, tid=tid)
        assert (again.error_code, again.producer_id, again.producer_epoch) == (
            ErrorCode.none, tx.producer_id, 1)  # fmt: skip
        ok = init(conn, 4)
        assert ok.error_code == ErrorCode.none and ok.producer_id >= 0
