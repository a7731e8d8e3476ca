"""Kafka clients through one leader failover (issue 9): confluent-kafka, kafka-python and
aiokafka each produce (acks=all) and consume a partition of RF 3, min.insync.replicas 2, while
its leader is killed with kill -9; every acknowledged message is consumed exactly once and in
order, by that client's own consumer, which was reading all along.

The producers use the settings a Kafka user would for "no loss, no duplicates":

- confluent-kafka: ``enable.idempotence=true`` (so acks=all, unlimited retries bounded by
  ``message.timeout.ms`` = 60 s);
- kafka-python 2.1+/3.x: ``acks="all"``, ``enable_idempotence=True``, ``retries`` left at its
  default (unlimited, bounded by ``delivery_timeout_ms`` = 60 s here), ``retry_backoff_ms=200``;
  on NOT_LEADER_OR_FOLLOWER (or a refused connection) it refreshes metadata and retries;
- aiokafka: ``acks="all"``, ``enable_idempotence=True``; it retries retriable errors after a
  metadata refresh until ``request_timeout_ms`` (40 s) expires the batch.

The consumers assign the partition (no group) and read from the beginning; on the dead leader
they refresh metadata and go on from their position at the new one.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from strom.testing.cluster import ClusterProcess
from strom.testing.history import History
from strom.testing.workload import QUIET
from strom.testing.zookeeper import zookeeper_available

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not zookeeper_available(), reason="apt-get install -y zookeeper"),
]
ALL = {1, 2, 3}
DEADLINE_S = 60.0


@dataclass
class Flow:
    """Shared between the test and one client's producer and consumer threads."""

    topic: str
    name: str
    bootstrap: str
    history: History
    stop_producing: threading.Event = field(default_factory=threading.Event)
    read_until: int | None = None  # set once producing stopped: the partition's end offset
    sent: int = 0
    acked: int = 0
    failed: int = 0
    offsets_read: list[int] = field(default_factory=list)
    error: BaseException | None = None

    def value(self) -> bytes:
        v = f"{self.name}-{self.sent}".encode()
        self.history.attempt(self.topic, None, v, self.name)
        self.sent += 1
        return v

    def acknowledged(self, partition: int, offset: int, value: bytes) -> None:
        self.history.ack(self.topic, partition, offset, None, value, self.name)
        self.acked += 1

    def refused(self, value: bytes) -> None:
        self.history.fail(self.topic, value, self.name)
        self.failed += 1

    def consumed(self, partition: int, offset: int, value: bytes) -> None:
        self.history.read(self.topic, partition, offset, None, value, f"{self.name}-consumer")
        self.offsets_read.append(offset)

    def reading_done(self, position: int) -> bool:
        return self.read_until is not None and position >= self.read_until


def _thread(flow: Flow, body: Callable[[Flow], None]) -> threading.Thread:
    def run() -> None:
        try:
            body(flow)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            flow.error = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


# --- confluent-kafka ----------------------------------------------------------------------


def confluent_produce(flow: Flow) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": flow.bootstrap, "enable.idempotence": True,
                         "acks": "all", "message.timeout.ms": 60_000, "logger": QUIET})  # fmt: skip

    def report(err: object, msg: object) -> None:
        if err is None:
            flow.acknowledged(msg.partition(), msg.offset(), msg.value())  # type: ignore[attr-defined]
        else:
            flow.refused(msg.value())  # type: ignore[attr-defined]

    while not flow.stop_producing.is_set():
        producer.produce(flow.topic, flow.value(), partition=0, on_delivery=report)
        producer.poll(0.005)
    assert producer.flush(90) == 0


def confluent_consume(flow: Flow) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": flow.bootstrap, "group.id": f"{flow.name}-g",
                         "enable.auto.commit": False, "logger": QUIET})  # fmt: skip
    consumer.assign([TopicPartition(flow.topic, 0, OFFSET_BEGINNING)])
    position = 0
    try:
        while not flow.reading_done(position):
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                offset = int(msg.offset() or 0)
                flow.consumed(int(msg.partition() or 0), offset, bytes(msg.value() or b""))
                position = offset + 1
    finally:
        consumer.close()


# --- kafka-python -------------------------------------------------------------------------


def kafka_python_produce(flow: Flow) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=flow.bootstrap, acks="all",
                             enable_idempotence=True, retry_backoff_ms=200,
                             delivery_timeout_ms=60_000, request_timeout_ms=10_000)  # fmt: skip
    try:
        while not flow.stop_producing.is_set():
            value = flow.value()
            future = producer.send(flow.topic, value, partition=0)
            future.add_callback(lambda md, v=value: flow.acknowledged(md.partition, md.offset, v))
            future.add_errback(lambda _exc, v=value: flow.refused(v))
            time.sleep(0.005)
        producer.flush(90)
    finally:
        producer.close(10)


def kafka_python_consume(flow: Flow) -> None:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=flow.bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest", retry_backoff_ms=200,
                             request_timeout_ms=10_000)  # fmt: skip
    tp = TopicPartition(flow.topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    position = 0
    try:
        while not flow.reading_done(position):
            for records in consumer.poll(timeout_ms=200).values():
                for r in records:
                    flow.consumed(r.partition, r.offset, r.value)
                    position = r.offset + 1
    finally:
        consumer.close()


# --- aiokafka -----------------------------------------------------------------------------


async def _aiokafka_produce(flow: Flow) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=flow.bootstrap, acks="all",
                                enable_idempotence=True, request_timeout_ms=40_000,
                                retry_backoff_ms=200)  # fmt: skip
    await producer.start()

    def done(fut: asyncio.Future[object], value: bytes) -> None:
        if fut.exception() is None:
            md = fut.result()
            flow.acknowledged(md.partition, md.offset, value)  # type: ignore[attr-defined]
        else:
            flow.refused(value)

    try:
        while not flow.stop_producing.is_set():
            value = flow.value()
            fut = await producer.send(flow.topic, value, partition=0)
            fut.add_done_callback(lambda f, v=value: done(f, v))
            await asyncio.sleep(0.005)
        await producer.flush()
    finally:
        await producer.stop()


async def _aiokafka_consume(flow: Flow) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=flow.bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest", retry_backoff_ms=200)  # fmt: skip
    await consumer.start()
    tp = TopicPartition(flow.topic, 0)
    consumer.assign([tp])
    await consumer.seek_to_beginning(tp)
    position = 0
    try:
        while not flow.reading_done(position):
            for records in (await consumer.getmany(timeout_ms=200)).values():
                for r in records:
                    flow.consumed(r.partition, r.offset, r.value)
                    position = r.offset + 1
    finally:
        await consumer.stop()


CLIENTS: dict[str, tuple[Callable[[Flow], None], Callable[[Flow], None]]] = {
    "confluent": (confluent_produce, confluent_consume),
    "kafka-python": (kafka_python_produce, kafka_python_consume),
    "aiokafka": (lambda f: asyncio.run(_aiokafka_produce(f)),
                 lambda f: asyncio.run(_aiokafka_consume(f))),
}  # fmt: skip


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterProcess]:
    settings = {"replica.lag.time.max.ms": "5000", "auto.leader.rebalance.enable": "false"}
    with ClusterProcess(tmp_path_factory.mktemp("failover"), 3, settings=settings) as c:
        yield c


def _wait(flow: Flow, what: str, condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if flow.error is not None:
            raise AssertionError(f"{flow.name}: {what}: failed with {flow.error!r}")
        if time.monotonic() >= deadline:
            raise AssertionError(f"{flow.name}: {what} not within {DEADLINE_S:g} s "
                                 f"({flow.sent} sent, {flow.acked} acked, {flow.failed} failed, "
                                 f"{len(flow.offsets_read)} read)")  # fmt: skip
        time.sleep(0.05)


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_produce_and_consume_through_a_leader_failover(
    cluster: ClusterProcess, client: str
) -> None:
    from confluent_kafka import Consumer, TopicPartition

    topic = f"failover-{client}"
    cluster.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})
    cluster.wait_for_isr(topic, 0, ALL)
    history = History()
    flow = Flow(topic, client, cluster.bootstrap, history)
    produce, consume = CLIENTS[client]
    threads = [_thread(flow, produce), _thread(flow, consume)]

    _wait(flow, "200 acknowledged and 100 consumed before the kill",
          lambda: flow.acked >= 200 and len(flow.offsets_read) >= 100)  # fmt: skip
    leader = cluster.leader_of(topic, 0)
    cluster.kill(leader)
    acked_at_kill, read_at_kill = flow.acked, len(flow.offsets_read)
    new_leader = cluster.wait_for_leader(topic, 0, not_in={leader}, timeout=DEADLINE_S)
    # both sides go on at the new leader
    _wait(
        flow, "200 more acknowledged after the failover", lambda: flow.acked >= acked_at_kill + 200
    )
    _wait(flow, "consumed past the failover",
          lambda: len(flow.offsets_read) >= max(read_at_kill, acked_at_kill) + 100)  # fmt: skip
    flow.stop_producing.set()
    threads[0].join(DEADLINE_S + 30)
    assert not threads[0].is_alive() and flow.error is None, f"producer: {flow.error!r}"

    probe = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "probe",
                      "logger": QUIET})  # fmt: skip
    flow.read_until = probe.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1]
    probe.close()
    threads[1].join(DEADLINE_S)
    assert not threads[1].is_alive() and flow.error is None, f"consumer: {flow.error!r}"

    report = history.check()
    report.assert_ok()
    assert cluster.leader_of(topic, 0) == new_leader != leader  # the failover happened
    assert flow.acked >= acked_at_kill + 200 and report.acknowledged == flow.acked
    # retrying producers ride out a failover well within their delivery timeouts
    assert flow.failed == 0, f"{flow.failed} of {flow.sent} writes failed"
    # consumed once each, in offset order, with no gap up to the end
    assert flow.offsets_read == list(range(flow.read_until)), "consumer skipped or re-read"
    # the killed broker comes back and rejoins the ISR (for the next client, and as a check)
    cluster.start_broker(leader)
    cluster.wait_for_isr(topic, 0, ALL, timeout=60)
