"""Transactional producers of kafka-python (3.x) and aiokafka: committed data is visible to
read_committed readers, aborted data never (read_uncommitted sees both)."""

from __future__ import annotations

import asyncio

import pytest

from tests.integration.clients import create_topic
from tests.integration.txn_helpers import read_to_end

pytestmark = pytest.mark.both_topologies  # [single] and [cluster3]: docs/cluster.md


def _check(bootstrap: str, topic: str) -> None:
    committed = [m.value() for m in read_to_end(bootstrap, topic, [0], "read_committed")]
    assert committed == [b"c0", b"c1", b"c2"]
    everything = [m.value() for m in read_to_end(bootstrap, topic, [0], "read_uncommitted")]
    assert everything == [b"c0", b"c1", b"a0", b"a1", b"c2"]


def test_kafka_python_transactions(broker, topic_name) -> None:
    from kafka import KafkaProducer

    create_topic(broker.bootstrap, topic_name)
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=f"{topic_name}-tx")
    try:
        p.init_transactions()
        for values, commit in (([b"c0", b"c1"], True), ([b"a0", b"a1"], False), ([b"c2"], True)):
            p.begin_transaction()
            for v in values:
                p.send(topic_name, value=v, partition=0)
            p.flush(30)
            if commit:
                p.commit_transaction()
            else:
                p.abort_transaction()
    finally:
        p.close(10)
    _check(broker.bootstrap, topic_name)


def test_aiokafka_transactions(broker, topic_name) -> None:
    from aiokafka import AIOKafkaProducer

    create_topic(broker.bootstrap, topic_name)

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap,
                             transactional_id=f"{topic_name}-tx")  # fmt: skip
        await p.start()
        try:
            async with p.transaction():
                for v in (b"c0", b"c1"):
                    await p.send_and_wait(topic_name, value=v, partition=0)
            await p.begin_transaction()
            for v in (b"a0", b"a1"):
                await p.send_and_wait(topic_name, value=v, partition=0)
            await p.abort_transaction()
            async with p.transaction():
                await p.send_and_wait(topic_name, value=b"c2", partition=0)
        finally:
            await p.stop()

    asyncio.run(asyncio.wait_for(run(), 60))
    _check(broker.bootstrap, topic_name)
