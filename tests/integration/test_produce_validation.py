"""What a Produce may write (issue 13 items 2-3), with real clients and raw requests.

KIP-467: when some records of a batch break a per-record rule, the broker names them in
``record_errors`` and librdkafka fails exactly those with the broker's error (INVALID_RECORD /
INVALID_TIMESTAMP) and their message, and the rest of the batch with
``_INVALID_DIFFERENT_RECORD`` (nothing of the batch is stored, as in Kafka).
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from kio.index import load_payload_module
from kio.static.constants import EntityType

from strom.protocol import record_batch as rb
from strom.protocol.messages import build
from strom.testing.raw import RawConnection
from tests.integration.clients import consume_all, create_topic, produce
from tests.integration.routing import leader_of
from tests.topology import module_broker

HOUR = 3_600_000


@pytest.fixture(scope="module", params=["native", "python"])
def broker(request: pytest.FixtureRequest, topology: str,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:  # fmt: skip
    """The module's broker, once on each record codec (``STROM_NATIVE=0``: the pure-Python
    walk), so every validation rule is checked on both."""
    with pytest.MonkeyPatch.context() as env:
        if request.param == "python":
            env.setenv("STROM_NATIVE", "0")
        with module_broker(topology, tmp_path_factory.mktemp("broker")) as b:
            yield b


def _produce_one_batch(bootstrap: str, topic: str, messages: list[dict[str, Any]]) -> list[Any]:
    """Produce ``messages`` in one batch; return (error, value) per message in order."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1000,
                         "batch.num.messages": 1000, "retries": 0})  # fmt: skip
    producer.list_topics(topic, timeout=10)
    reports: dict[bytes, Any] = {}

    def on_delivery(err: Any, msg: Any) -> None:
        reports[msg.value()] = err

    for m in messages:
        producer.produce(topic, partition=0, on_delivery=on_delivery, **m)
    assert producer.flush(30) == 0
    return [reports[m["value"]] for m in messages]


def test_null_keys_on_compacted_topic_fail_only_those_records(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name, config={"cleanup.policy": "compact"})
    msgs = [{"key": b"a", "value": b"0"}, {"key": None, "value": b"1"},
            {"key": b"c", "value": b"2"}, {"key": None, "value": b"3"}]  # fmt: skip
    errors = _produce_one_batch(broker.bootstrap, topic_name, msgs)
    codes = [e.code() if e else None for e in errors]
    assert codes == [KafkaError._INVALID_DIFFERENT_RECORD, KafkaError.INVALID_RECORD,
                     KafkaError._INVALID_DIFFERENT_RECORD, KafkaError.INVALID_RECORD]  # fmt: skip
    # nothing of that batch was stored; a keyed batch goes through
    produce(broker.bootstrap, topic_name, [{"key": b"k", "value": b"ok"}])
    got = consume_all(broker.bootstrap, topic_name, [0], expected=1)
    assert [(m.offset(), m.key(), m.value()) for m in got] == [(0, b"k", b"ok")]


def test_timestamps_out_of_range_fail_only_those_records(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name, config={
        "message.timestamp.before.max.ms": str(HOUR), "message.timestamp.after.max.ms": str(HOUR),
    })  # fmt: skip
    now = int(time.time() * 1000)
    msgs = [{"value": b"now", "timestamp": now}, {"value": b"old", "timestamp": now - 3 * HOUR},
            {"value": b"future", "timestamp": now + 3 * HOUR}]  # fmt: skip
    errors = _produce_one_batch(broker.bootstrap, topic_name, msgs)
    codes = [e.code() if e else None for e in errors]
    # librdkafka reports every record named in record_errors as INVALID_RECORD, whatever the
    # partition's error code (INVALID_TIMESTAMP here, checked on the wire below)
    assert codes == [KafkaError._INVALID_DIFFERENT_RECORD, KafkaError.INVALID_RECORD,
                     KafkaError.INVALID_RECORD]  # fmt: skip
    batch = rb.build_batch([(None, b"a", [], now), (None, b"b", [], now + 3 * HOUR)])
    part = _raw_produce(broker.bootstrap, topic_name, batch)
    assert part.error_code == 32  # INVALID_TIMESTAMP
    assert [e.batch_index for e in part.record_errors] == [1]
    assert "out of range" in part.record_errors[0].batch_index_error_message


def _raw_produce(bootstrap: str, topic: str, records: bytes) -> Any:
    mod = load_payload_module(0, 9, EntityType.request)
    data = build(mod.TopicProduceData, name=topic, partition_data=(
        build(mod.PartitionProduceData, index=0, records=records),))  # fmt: skip
    with RawConnection(leader_of(bootstrap, topic)) as conn:
        resp = conn.request(0, 9, transactional_id=None, acks=1,
                            timeout=datetime.timedelta(seconds=5), topic_data=(data,))  # fmt: skip
    return resp.responses[0].partition_responses[0]


def test_raw_client_writes_refused(broker, topic_name) -> None:
    """Control batches, several batches, an empty batch: INVALID_RECORD with a message; the
    log is unchanged."""
    create_topic(broker.bootstrap, topic_name)
    now = int(time.time() * 1000)
    one = rb.build_batch([(b"k", b"v", [], now)])
    marker = rb.build_batch([(b"\x00\x00\x00\x01", b"\x00" * 6, [], now)], producer_id=1,
                            producer_epoch=0, is_transactional=True, is_control=True)  # fmt: skip
    empty = rb.build_batch_from_records([], base_offset=0, last_offset_delta=0)
    for records in (marker, one + one, empty):
        part = _raw_produce(broker.bootstrap, topic_name, records)
        assert part.error_code == 87, part  # INVALID_RECORD
        assert part.error_message
    part = _raw_produce(broker.bootstrap, topic_name, one)
    assert (part.error_code, part.base_offset) == (0, 0)


def test_raw_record_errors_on_the_wire(broker, topic_name) -> None:
    """The response itself: error_message and (batch_index, message) per refused record."""
    create_topic(broker.bootstrap, topic_name, config={"cleanup.policy": "compact"})
    now = int(time.time() * 1000)
    batch = rb.build_batch([(b"a", b"1", [], now), (None, b"2", [], now), (None, b"3", [], now)])
    part = _raw_produce(broker.bootstrap, topic_name, batch)
    assert part.error_code == 87
    assert "2 record errors" in part.error_message
    assert [(e.batch_index, e.batch_index_error_message) for e in part.record_errors] == [
        (1, "Compacted topic cannot accept message without key"),
        (2, "Compacted topic cannot accept message without key"),
    ]


def _send_acks0(conn: RawConnection, topic_data: tuple[Any, ...]) -> None:
    """An acks=0 Produce v9 written to the socket: no answer is read (none is due)."""
    from strom.protocol.messages import RequestHeader, encode_request, request_class

    req = build(request_class(0, 9), transactional_id=None, acks=0,
                timeout=datetime.timedelta(seconds=5), topic_data=topic_data)  # fmt: skip
    conn.send_bytes(encode_request(RequestHeader(0, 9, 7, "acks0-test"), req))


def _leader_address(bootstrap: str, topic: str) -> str:
    """host:port of the leader of ``topic``'s partition 0 (a single node, or STROM_TEST_CLUSTER)."""
    with RawConnection(bootstrap.split(",")[0]) as conn:
        meta = conn.request(3, 9, topics=None, allow_auto_topic_creation=False,
                            include_cluster_authorized_operations=False,
                            include_topic_authorized_operations=False)  # fmt: skip
    leader = next(p.leader_id for t in meta.topics if t.name == topic for p in t.partitions
                  if p.partition_index == 0)  # fmt: skip
    b = next(b for b in meta.brokers if b.node_id == leader)
    return f"{b.host}:{b.port}"


def test_refused_acks0_produce_closes_the_connection(broker, topic_name) -> None:
    """acks=0 has no answer to carry an error, so a refused partition makes the broker close
    the connection, as Kafka does (the producer then reconnects and refreshes its metadata).
    The single-partition fast path and the generic path (two topics) behave alike; what was
    valid in the generic request is still stored, as in Kafka."""
    create_topic(broker.bootstrap, topic_name, partitions=1)
    mod = load_payload_module(0, 9, EntityType.request)
    good = rb.build_batch([(None, b"kept", [], 1)])
    bad = bytearray(rb.build_batch([(None, b"corrupt", [], 1)]))
    bad[-1] ^= 0xFF  # the CRC no longer matches

    def topic(name: str, records: bytes) -> Any:
        return build(mod.TopicProduceData, name=name, partition_data=(
            build(mod.PartitionProduceData, index=0, records=records),))  # fmt: skip

    server = _leader_address(broker.bootstrap, topic_name)
    with RawConnection(server) as conn:  # one partition: the fast path
        _send_acks0(conn, (topic(topic_name, bytes(bad)),))
        assert conn.is_closed_by_peer(10)
    with RawConnection(server) as conn:  # a valid topic and an unknown one: the generic path
        _send_acks0(conn, (topic(topic_name, good), topic(f"{topic_name}-missing", good)))
        assert conn.is_closed_by_peer(10)
    with RawConnection(server) as conn:  # a valid acks=0 produce leaves the connection open
        _send_acks0(conn, (topic(topic_name, good),))
        assert not conn.is_closed_by_peer(1)
    got = consume_all(broker.bootstrap, topic_name, [0], expected=2)
    assert [m.value() for m in got] == [b"kept", b"kept"]
