"""kafka-python, aiokafka and kcat producing and consuming against a real strom broker; each
client's data is read back by another client too, so both directions are checked."""

from __future__ import annotations

import asyncio
import shutil
import subprocess

import pytest

from tests.integration.clients import consume_all, create_topic, produce

CODECS = ["gzip", "snappy", "lz4", "zstd"]


@pytest.mark.parametrize("compression", [None, *CODECS])
def test_kafka_python_produce_and_consume(broker, topic_name, compression) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    create_topic(broker.bootstrap, topic_name, partitions=2)
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap, compression_type=compression, acks="all", linger_ms=5
    )
    futures = [
        producer.send(
            topic_name,
            key=f"k{i % 5}".encode(),
            value=f"v{i}".encode(),
            headers=[("n", str(i).encode())],
            timestamp_ms=1_700_000_000_000 + i,
        )
        for i in range(300)
    ]
    producer.flush(30)
    metas = [f.get(timeout=10) for f in futures]
    producer.close(10)
    assert all(m.offset >= 0 for m in metas)

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=3000)
    consumer.assign([TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)])
    consumer.seek_to_beginning()
    got = list(consumer)
    consumer.close()
    assert sorted((r.key, r.value, tuple(r.headers), r.timestamp) for r in got) == sorted(
        (f"k{i % 5}".encode(), f"v{i}".encode(), (("n", str(i).encode()),), 1_700_000_000_000 + i)
        for i in range(300)
    )
    for p in (0, 1):
        offsets = [r.offset for r in got if r.partition == p]
        assert offsets == list(range(len(offsets)))
    # and librdkafka reads the same data
    assert len(consume_all(broker.bootstrap, topic_name, [0, 1], expected=300)) == 300


@pytest.mark.parametrize("compression", [None, *CODECS])
def test_aiokafka_produce_and_consume(broker, topic_name, compression) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    create_topic(broker.bootstrap, topic_name)

    async def run() -> list:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=compression,
                                    enable_idempotence=True)
        await producer.start()
        try:
            batch = [
                producer.send(topic_name, key=b"k", value=f"v{i}".encode(),
                              headers=[("h", b"x")], timestamp_ms=1_700_000_000_000 + i)
                for i in range(200)
            ]
            metas = [await (await f) for f in batch]
            assert [m.offset for m in metas] == list(range(200))
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                                    auto_offset_reset="earliest")
        await consumer.start()
        try:
            tp = TopicPartition(topic_name, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            out: list = []
            async with asyncio.timeout(30):
                while len(out) < 200:
                    batches = await consumer.getmany(timeout_ms=1000)
                    for records in batches.values():
                        out.extend(records)
            return out
        finally:
            await consumer.stop()

    got = asyncio.run(run())
    assert [(r.offset, r.key, r.value, tuple(r.headers), r.timestamp) for r in got] == [
        (i, b"k", f"v{i}".encode(), (("h", b"x"),), 1_700_000_000_000 + i) for i in range(200)
    ]


kcat = pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat (Debian package) is not installed")


@kcat
@pytest.mark.parametrize("compression", ["none", *CODECS])
def test_kcat_produce_and_consume(broker, topic_name, compression) -> None:
    create_topic(broker.bootstrap, topic_name)
    lines = "".join(f"key{i}:value {i}\n" for i in range(100))
    subprocess.run(
        ["kcat", "-b", broker.bootstrap, "-P", "-t", topic_name, "-K", ":", "-z", compression,
         "-H", "origin=kcat"],
        input=lines.encode(), check=True, timeout=30,
    )
    out = subprocess.run(
        ["kcat", "-b", broker.bootstrap, "-C", "-t", topic_name, "-o", "beginning", "-e",
         "-f", "%p|%o|%k|%s|%h\n"],
        capture_output=True, check=True, timeout=30,
    ).stdout.decode()
    assert out.splitlines() == [f"0|{i}|key{i}|value {i}|origin=kcat" for i in range(100)]
    # what kcat wrote, librdkafka-in-Python reads identically
    got = consume_all(broker.bootstrap, topic_name, [0], expected=100)
    assert [(m.key(), m.value()) for m in got] == [
        (f"key{i}".encode(), f"value {i}".encode()) for i in range(100)
    ]


@kcat
def test_kcat_reads_what_confluent_kafka_wrote_and_lists_metadata(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name, partitions=3)
    produce(broker.bootstrap, topic_name, [{"value": f"{i}".encode(), "partition": i % 3} for i in range(30)])
    meta = subprocess.run(["kcat", "-b", broker.bootstrap, "-L", "-t", topic_name],
                          capture_output=True, check=True, timeout=30).stdout.decode()
    assert f'topic "{topic_name}" with 3 partitions' in meta
    out = subprocess.run(["kcat", "-b", broker.bootstrap, "-C", "-t", topic_name, "-e", "-f", "%p:%s\n"],
                         capture_output=True, check=True, timeout=30).stdout.decode()
    assert sorted(out.split()) == sorted(f"{i % 3}:{i}" for i in range(30))
