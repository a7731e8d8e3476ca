"""Idempotent-producer state survives restarts (issue 13 item 6): after SIGTERM the broker
loads the Kafka-format snapshot it wrote at shutdown; after kill -9 it rebuilds from the log.
Either way a retried last batch is answered with its original offset, and the next sequence
follows on."""

from __future__ import annotations

import datetime
import os
import signal
import struct
import time
from typing import Any

from kio.index import load_payload_module
from kio.static.constants import EntityType

from strom.protocol.errors import ErrorCode
from strom.protocol.messages import build
from strom.protocol.record_batch import build_batch
from strom.testing.raw import RawConnection
from tests.integration.clients import consume_all, create_topic


def _produce(bootstrap: str, topic: str, records: bytes) -> Any:
    mod = load_payload_module(0, 9, EntityType.request)
    data = build(mod.TopicProduceData, name=topic, partition_data=(
        build(mod.PartitionProduceData, index=0, records=records),))  # fmt: skip
    with RawConnection(bootstrap) as conn:
        resp = conn.request(0, 9, transactional_id=None, acks=-1,
                            timeout=datetime.timedelta(seconds=5), topic_data=(data,))  # fmt: skip
    return resp.responses[0].partition_responses[0]


def test_producer_state_survives_sigterm_and_kill_9(fresh_broker, topic_name) -> None:
    create_topic(fresh_broker.bootstrap, topic_name)
    with RawConnection(fresh_broker.bootstrap) as conn:
        init = conn.request(22, 4, transactional_id=None, transaction_timeout=60000,
                            producer_id=-1, producer_epoch=-1)  # fmt: skip
    pid, epoch = init.producer_id, init.producer_epoch
    now = int(time.time() * 1000)

    def batch(seq: int, n: int) -> bytes:
        return build_batch([(None, b"s%d" % (seq + i), [], now) for i in range(n)],
                           producer_id=pid, producer_epoch=epoch, base_sequence=seq)  # fmt: skip

    assert _produce(fresh_broker.bootstrap, topic_name, batch(0, 3)).base_offset == 0
    assert _produce(fresh_broker.bootstrap, topic_name, batch(3, 2)).base_offset == 3
    os.kill(fresh_broker.pid, signal.SIGTERM)
    assert fresh_broker.wait(15) == 0
    part_dir = fresh_broker.data_dir / f"{topic_name}-0"
    snapshot = part_dir / f"{5:020d}.snapshot"
    data = snapshot.read_bytes()
    assert struct.unpack_from(">hIi", data)[0::2] == (1, 1)  # Kafka's version 1, one producer
    assert struct.unpack_from(">qhiqi", data, 10) == (pid, epoch, 4, 4, 1)
    fresh_broker.start()
    retry = _produce(fresh_broker.bootstrap, topic_name, batch(3, 2))
    assert (retry.error_code, retry.base_offset) == (ErrorCode.none, 3)  # a duplicate
    assert _produce(fresh_broker.bootstrap, topic_name, batch(5, 1)).base_offset == 5
    fresh_broker.kill()  # no snapshot at offset 6: rebuilt from the snapshot at 5 + the log
    fresh_broker.start()
    retry = _produce(fresh_broker.bootstrap, topic_name, batch(5, 1))
    assert (retry.error_code, retry.base_offset) == (ErrorCode.none, 5)
    gap = _produce(fresh_broker.bootstrap, topic_name, batch(8, 1))
    assert gap.error_code == ErrorCode.out_of_order_sequence_number
    got = consume_all(fresh_broker.bootstrap, topic_name, [0], expected=6)
    assert [m.value() for m in got] == [b"s%d" % i for i in range(6)]
    assert not list(part_dir.glob("*.tmp"))
