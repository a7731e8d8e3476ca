"""Named listeners: a broker started from a server.properties with Kafka's listener names
answers Metadata, DescribeCluster and FindCoordinator with its endpoint on the listener the
request came in on, and serves produce/consume on each."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from strom.testing.process import BrokerProcess, free_port


@pytest.fixture(scope="module")
def two_listeners(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[BrokerProcess, int, int]]:
    tmp = tmp_path_factory.mktemp("listeners")
    internal, external = free_port(), free_port()
    props = tmp / "server.properties"
    props.write_text(
        f"listeners=INTERNAL://127.0.0.1:{internal},EXTERNAL://127.0.0.1:{external}\n"
        # clients of EXTERNAL are told a name of the same host, distinct from INTERNAL's
        f"advertised.listeners=INTERNAL://127.0.0.1:{internal},EXTERNAL://localhost:{external}\n"
        "listener.security.protocol.map=INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT\n"
        "inter.broker.listener.name=INTERNAL\n"
        "group.initial.rebalance.delay.ms=0\n"
    )
    proc = BrokerProcess(tmp / "data", port=internal, config_file=props)
    with proc:
        yield proc, internal, external


def _brokers(bootstrap: str) -> dict[int, tuple[str, int]]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=15)
    return {b.id: (b.host, b.port) for b in md.brokers.values()}


def test_metadata_answers_the_listener_asked(two_listeners: tuple[BrokerProcess, int, int]) -> None:
    _proc, internal, external = two_listeners
    assert _brokers(f"127.0.0.1:{internal}") == {1: ("127.0.0.1", internal)}
    assert _brokers(f"127.0.0.1:{external}") == {1: ("localhost", external)}
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{external}"})
    cluster = admin.describe_cluster().result(timeout=15)
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [(1, "localhost", external)]


def test_produce_and_consume_on_each_listener(two_listeners: tuple[BrokerProcess, int, int],
                                              tmp_path: Path) -> None:  # fmt: skip
    _proc, internal, external = two_listeners
    sent = [f"m{i}".encode() for i in range(200)]
    for port in (internal, external):
        topic = f"t-{port}"
        producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "linger.ms": 5})
        for value in sent:
            producer.produce(topic, value)
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": f"g{port}",
                             "auto.offset.reset": "earliest"})  # fmt: skip
        consumer.subscribe([topic])  # the group's coordinator: found through FindCoordinator
        got: list[bytes] = []
        try:
            for _ in range(300):
                msg = consumer.poll(0.2)
                if msg is not None and msg.error() is None:
                    got.append(msg.value())
                if len(got) >= len(sent):
                    break
            consumer.commit(asynchronous=False)
        finally:
            consumer.close()
        assert got == sent
