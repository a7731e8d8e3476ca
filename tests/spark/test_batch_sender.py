"""The at-least-once sink's record-batch path (:mod:`strom.spark.batch_sender`) against a real
broker: which settings it serves, Java-compatible key partitioning, null keys, order, errors,
and retries across a broker restart."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from strom.spark.batch_sender import BatchSender, eligible
from strom.spark.options import WriteOptions
from strom.spark.row_producer import (
    RowProducer,
    drop_kept_producers,
    kept_producer,
    write_at_least_once,
)
from strom.testing import BrokerProcess

from .helpers import consume_all, create_topic


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _batch(values: list[bytes | None], keys: list[bytes | None] | None = None) -> pa.RecordBatch:
    columns = {"value": pa.array(values, pa.binary())}
    if keys is not None:
        columns["key"] = pa.array(keys, pa.binary())
    return pa.RecordBatch.from_pydict(columns)


@pytest.mark.parametrize(("setting", "served"), [
    ({}, True),
    ({"acks": "1", "linger.ms": "5", "client.id": "x", "batch.size": "65536"}, True),
    ({"max.in.flight.requests.per.connection": "1"}, True),  # one in flight per connection
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
      "sasl.username": "u", "sasl.password": "p"}, True),
    ({"compression.type": "lz4"}, False),
    ({"partitioner": "consistent_random"}, False),
    ({"acks": "0"}, False),
    ({"enable.idempotence": "true"}, False),
    ({"transactional.id": "t"}, False),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "GSSAPI"}, False),
    ({"some.other.setting": "1"}, False),
])  # fmt: skip
def test_eligible_only_for_settings_it_honours(setting: dict[str, str], served: bool) -> None:
    config = {"bootstrap.servers": "127.0.0.1:1", **setting}
    assert eligible(config, "t") is served
    assert eligible(config, None) is False  # rows name their topic: the Producer path


def test_keys_partitioned_as_librdkafka_murmur2_random(spark_broker: BrokerProcess) -> None:
    bs = spark_broker.bootstrap
    topic = _name("sender-keys")
    create_topic(bs, topic, 6)
    keys = [b"key-%d" % i for i in range(300)] + [b""]
    rows = RowProducer({"bootstrap.servers": bs}, topic)
    try:
        assert rows.sender is not None
        rows.produce_batch(_batch([b"v-%d" % i for i in range(len(keys))], list(keys)))
        rows.flush(30)
        assert rows._producer is None  # nothing went through confluent-kafka
    finally:
        rows.close()
    expected: dict[bytes, int] = {}
    probe = Producer({"bootstrap.servers": bs, "partitioner": "murmur2_random"})
    probe_topic = _name("sender-probe")
    create_topic(bs, probe_topic, 6)
    for key in keys:
        probe.produce(probe_topic, b"p", key, on_delivery=lambda e, m, k=key: expected.__setitem__(k, m.partition()))
    assert probe.flush(30) == 0
    got = consume_all(bs, topic, list(range(6)))
    assert len(got) == len(keys)
    assert {m.key(): m.partition() for m in got} == expected
    for partition in range(6):  # row order kept within each partition
        values = [int(m.value().split(b"-")[1]) for m in got if m.partition() == partition]
        assert values == sorted(values)


def test_null_keys_rotate_and_values_may_be_null(spark_broker: BrokerProcess) -> None:
    bs = spark_broker.bootstrap
    topic = _name("sender-null")
    create_topic(bs, topic, 3)
    options = WriteOptions(client={"bootstrap.servers": bs}, topic=topic)
    try:
        batches = [_batch([b"a%d" % i for i in range(5)]), _batch([b"b0", None, b"b2"]),
                   _batch([b"c0"], keys=[None])]  # fmt: skip
        assert write_at_least_once(options, iter(batches)) == 9
    finally:
        drop_kept_producers()
    got = consume_all(bs, topic, [0, 1, 2])
    by_partition = {p: [m.value() for m in got if m.partition() == p] for p in range(3)}
    # one partition per Arrow batch for null keys, the next one each time
    assert sorted(by_partition.values(), key=lambda v: str(v)) == sorted(
        [[b"a0", b"a1", b"a2", b"a3", b"a4"], [b"b0", None, b"b2"], [b"c0"]], key=lambda v: str(v))
    assert all(m.key() is None for m in got)


def test_string_columns_and_batches_split_by_batch_size(spark_broker: BrokerProcess) -> None:
    bs = spark_broker.bootstrap
    topic = _name("sender-split")
    create_topic(bs, topic, 1)
    values = pa.array([f"value-{i:04d}" for i in range(2000)], pa.string())
    keys = pa.array(["k"] * 2000, pa.string())
    sender = BatchSender({"bootstrap.servers": bs, "batch.size": "4096"}, topic)
    try:
        sender.send(keys.slice(1), values.slice(1))  # sliced arrays: a non-zero offset
    finally:
        sender.close()
    got = consume_all(bs, topic, [0])
    assert [m.value() for m in got] == [b"value-%04d" % i for i in range(1, 2000)]
    assert all(m.key() == b"k" for m in got)


def test_a_record_above_message_max_bytes_fails_before_anything_is_sent(
    spark_broker: BrokerProcess,
) -> None:
    bs = spark_broker.bootstrap
    topic = _name("sender-large")
    create_topic(bs, topic, 1)
    sender = BatchSender({"bootstrap.servers": bs}, topic)
    try:
        with pytest.raises(KafkaException, match="MSG_SIZE_TOO_LARGE"):
            sender.send(None, pa.array([b"small", b"x" * 1_500_000], pa.binary()))
        sender.send(None, pa.array([b"after"], pa.binary()))
    finally:
        sender.close()
    assert [m.value() for m in consume_all(bs, topic, [0])] == [b"after"]


def test_a_fatal_broker_error_names_its_code(tmp_path: Path) -> None:
    # the sender's Metadata creates the topic (as librdkafka's producer asks): no AdminClient,
    # whose handle can outlive this broker until a garbage collection and log its reconnects
    broker = BrokerProcess(tmp_path / "data", settings={"message.max.bytes": "2000"})
    broker.start()
    try:
        topic = _name("sender-fatal")
        # the client allows 1 MB, the broker 2,000 bytes: MESSAGE_TOO_LARGE from the broker
        sender = BatchSender({"bootstrap.servers": broker.bootstrap}, topic)
        try:
            with pytest.raises(KafkaException, match="MESSAGE_TOO_LARGE") as raised:
                sender.send(None, pa.array([b"y" * 5000], pa.binary()))
            assert raised.value.args[0].code() == 10
        finally:
            sender.close()
    finally:
        broker.stop()


def test_retried_across_a_broker_restart_nothing_lost(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", settings={"num.partitions": "2"})
    broker.start()
    try:
        topic = _name("sender-restart")  # created by the sender's Metadata (auto-creation)
        sender = BatchSender({"bootstrap.servers": broker.bootstrap, "acks": "all"}, topic)
        try:
            sender.send(None, pa.array([b"before-%d" % i for i in range(100)], pa.binary()))
            broker.stop()  # the kept connections break; the next send finds them closed
            broker.start()
            sender.send(None, pa.array([b"after-%d" % i for i in range(100)], pa.binary()))
            assert sender.retries >= 1  # the restart broke the kept connections: retried
        finally:
            sender.close()
        got = sorted(m.value() for m in consume_all(broker.bootstrap, topic, [0, 1]))
        assert got == sorted([b"before-%d" % i for i in range(100)]
                             + [b"after-%d" % i for i in range(100)])  # fmt: skip
    finally:
        broker.stop()


def test_an_unreachable_cluster_times_out_with_the_delivery_timeout() -> None:
    from strom.testing import free_port

    config: dict[str, Any] = {"bootstrap.servers": f"127.0.0.1:{free_port()}",
                              "delivery.timeout.ms": "800"}  # fmt: skip
    sender = BatchSender(config, "nowhere")
    with pytest.raises(KafkaException, match="_MSG_TIMED_OUT|MSG_TIMED_OUT"):
        sender.send(None, pa.array([b"v"], pa.binary()))


# -- pipelined sends (submit: the answer is read when the next rows come, or at flush) --------
def _set_min_insync(bootstrap: str, topic: str, value: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("min.insync.replicas", value,
                    incremental_operation=AlterConfigOpType.SET)])  # fmt: skip
    admin.incremental_alter_configs([resource])[resource].result(30)


def test_submit_returns_before_the_answer_and_flush_acknowledges(
    spark_broker: BrokerProcess,
) -> None:
    # min.insync.replicas 2 on one broker: every acks=all Produce is refused with the
    # retriable NOT_ENOUGH_REPLICAS (nothing appended), so submit() cannot have waited for an
    # acknowledgement; once the topic allows it, flush() has every row written, in order
    bs = spark_broker.bootstrap
    topic = _name("sender-pipelined")
    create_topic(bs, topic, 1, {"min.insync.replicas": "2"})
    sender = BatchSender({"bootstrap.servers": bs, "acks": "all", "batch.size": "2048"}, topic)
    try:
        for n in range(3):
            sender.submit(None, pa.array([b"%d-%03d" % (n, i) for i in range(200)], pa.binary()))
        assert sender.retries >= 1  # the first batch was refused and sent again meanwhile
        assert consume_all(bs, topic, [0]) == []
        _set_min_insync(bs, topic, "1")
        sender.flush()
    finally:
        sender.close()
    got = [m.value() for m in consume_all(bs, topic, [0])]
    # several batches per submit (batch.size), one in flight for the partition: a retried
    # batch went before every later one, and a refused one was not appended
    assert got == [b"%d-%03d" % (n, i) for n in range(3) for i in range(200)]


def test_a_batch_in_flight_finally_refused_fails_the_task(spark_broker: BrokerProcess) -> None:
    bs = spark_broker.bootstrap
    topic = _name("sender-refused")
    create_topic(bs, topic, 1, {"max.message.bytes": "2000"})
    options = WriteOptions(client={"bootstrap.servers": bs}, topic=topic)
    batches = [_batch([b"small-%d" % i for i in range(3)]), _batch([b"z" * 5000]),
               _batch([b"later"])]  # fmt: skip
    try:
        # the client allows 1 MB, the topic 2,000 bytes: the broker refuses the second batch
        # (MESSAGE_TOO_LARGE, not retriable) after it was sent without waiting
        with pytest.raises(KafkaException, match="MESSAGE_TOO_LARGE") as raised:
            write_at_least_once(options, iter(batches))
        assert raised.value.args[0].code() == 10
        assert kept_producer(options) is None  # a failed task's sender is not kept
    finally:
        drop_kept_producers()
    assert [m.value() for m in consume_all(bs, topic, [0])] == [b"small-0", b"small-1",
                                                                 b"small-2"]  # fmt: skip


def test_a_batch_in_flight_never_acknowledged_times_out(spark_broker: BrokerProcess) -> None:
    bs = spark_broker.bootstrap
    topic = _name("sender-never")
    create_topic(bs, topic, 1, {"min.insync.replicas": "2"})
    sender = BatchSender({"bootstrap.servers": bs, "acks": "all", "delivery.timeout.ms": "700"},
                         topic)  # fmt: skip
    try:
        sender.submit(None, pa.array([b"never"], pa.binary()))
        with pytest.raises(KafkaException, match="_MSG_TIMED_OUT|MSG_TIMED_OUT") as raised:
            sender.flush()
        assert "NOT_ENOUGH_REPLICAS" in str(raised.value)
        assert sender.retries >= 2
    finally:
        sender.close()
    assert consume_all(bs, topic, [0]) == []


def test_a_task_across_a_broker_restart_loses_nothing_and_keeps_order(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", settings={"num.partitions": "2"})
    broker.start()
    try:
        topic = _name("task-restart")  # created by the sender's Metadata (auto-creation)
        options = WriteOptions(client={"bootstrap.servers": broker.bootstrap, "acks": "all",
                                       "batch.size": "4096"}, topic=topic)  # fmt: skip
        keys = [b"k%d" % (i % 7) for i in range(300)]

        def batches() -> Iterator[pa.RecordBatch]:
            for n in range(4):
                if n == 2:  # mid-task, with the previous batches' requests in flight
                    broker.stop()
                    broker.start()
                yield _batch([b"%d-%03d" % (n, i) for i in range(300)], keys)

        try:
            assert write_at_least_once(options, batches()) == 1200
            sender = kept_producer(options)
            assert sender is not None and sender.sender is not None
            assert sender.sender.retries >= 1  # the restart broke the connection: retried
        finally:
            drop_kept_producers()
        got = consume_all(broker.bootstrap, topic, [0, 1])
        expected = {b"%d-%03d" % (n, i) for n in range(4) for i in range(300)}
        assert {m.value() for m in got} == expected  # at least once: nothing lost
        for partition in (0, 1):
            # at-least-once may write a batch again (its answer lost in the restart), but a
            # retried batch goes before any later one of its partition: the rows' first
            # copies come in row order
            values = [m.value() for m in got if m.partition() == partition]
            first = list(dict.fromkeys(values))
            assert first == sorted(first)
    finally:
        broker.stop()
