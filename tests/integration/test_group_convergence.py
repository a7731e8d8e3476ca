"""Groups converge promptly: four kafka-python consumers started together (threads in one
process, as the issue reports) reach one Stable generation with every member assigned within
15 s, as they do against Apache Kafka; then every message is read once, by its owner.

kafka-python 3.0.12 has a client-side deadlock this scenario can hit (a few runs in a hundred
here): a leader whose rejoin was triggered by new topic metadata loses its JoinGroup/SyncGroup
result when ``poll()`` times out while the join is in flight and the assignment catches up with
the metadata meanwhile (``need_rejoin()`` is then False, so the finished join task is never
collected: the member stays REBALANCING, heartbeats off, and sends nothing again). The test
recognises exactly that client state and reports it as an expected failure; any other way of
not converging fails it.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from strom.testing import BrokerProcess
from tests.integration.clients import create_topic, produce

SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "offsets.topic.num.partitions": "4",
    "offsets.retention.check.interval.ms": "200",
}
PARTITIONS = 4
MEMBERS = 4
CONVERGE_WITHIN_S = 15.0


@pytest.fixture(scope="module")
def cbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("converge") / "data", settings=SETTINGS)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


class Member(threading.Thread):
    """One kafka-python consumer polling in its own thread; what it sees is read from there
    (kafka-python is not thread-safe)."""

    def __init__(self, bootstrap: str, group: str, topic: str, start: threading.Event) -> None:
        super().__init__(daemon=True)
        self.args = (bootstrap, group, topic)
        self.start_event = start
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.view: tuple[int, frozenset[int]] = (-1, frozenset())
        self.stuck = False
        self.got: list[tuple[int, bytes]] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        from kafka import KafkaConsumer

        bootstrap, group, topic = self.args
        try:
            self.start_event.wait()
            consumer = KafkaConsumer(
                bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                enable_auto_commit=False, session_timeout_ms=3000, heartbeat_interval_ms=500,
                request_timeout_ms=4000,
            )  # fmt: skip
            consumer.subscribe([topic])
            try:
                while not self.stop_event.is_set():
                    records = consumer.poll(timeout_ms=200)
                    generation = consumer._coordinator._generation.generation_id
                    assigned = frozenset(tp.partition for tp in consumer.assignment())
                    stuck = client_join_deadlock(consumer._coordinator)
                    with self.lock:
                        self.view = (generation, assigned)
                        self.stuck = stuck
                        for batch in records.values():
                            self.got.extend((r.partition, r.value) for r in batch)
            finally:
                consumer.close()
        except BaseException as exc:  # reported by the test
            self.error = exc


def client_join_deadlock(coordinator: Any) -> bool:
    """kafka-python's own deadlock (module docstring): REBALANCING, a finished join task never
    collected, no rejoin wanted, heartbeats disabled."""
    from kafka.coordinator.base import MemberState

    task = getattr(coordinator, "_join_task", None)
    return (
        getattr(coordinator, "state", None) is MemberState.REBALANCING
        and task is not None
        and bool(getattr(task, "is_done", False))
        and not coordinator.need_rejoin()
        and not getattr(coordinator, "_heartbeat_enabled", True)
    )


def converged(members: list[Member]) -> bool:
    views = []
    for m in members:
        with m.lock:
            views.append(m.view)
    generations = {g for g, _ in views}
    parts = [p for _, p in views]
    return (
        len(generations) == 1
        and min(generations) > 0
        and all(len(p) == 1 for p in parts)
        and frozenset().union(*parts) == frozenset(range(PARTITIONS))
    )


def describe(bootstrap: str, group: str) -> Any:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)


@pytest.mark.slow
@pytest.mark.serial  # convergence is timed
def test_four_kafka_python_consumers_reach_one_stable_generation_quickly(
    cbroker, topic_name
) -> None:
    create_topic(cbroker.bootstrap, topic_name, PARTITIONS)
    group = f"converge-{uuid.uuid4().hex[:8]}"
    go = threading.Event()
    members = [Member(cbroker.bootstrap, group, topic_name, go) for _ in range(MEMBERS)]
    for m in members:
        m.start()
    started = time.monotonic()
    go.set()
    try:
        while not converged(members):
            errors = [m.error for m in members if m.error is not None]
            assert not errors, errors
            elapsed = time.monotonic() - started
            if elapsed >= CONVERGE_WITHIN_S and any(m.stuck for m in members):
                pytest.xfail("kafka-python 3.0.12 lost a finished JoinGroup/SyncGroup (see top)")
            assert elapsed < CONVERGE_WITHIN_S, (
                f"no stable generation after {elapsed:.1f} s: {[m.view for m in members]}"
            )
            time.sleep(0.05)
        # the broker agrees: one Stable generation, four members, one partition each
        desc = describe(cbroker.bootstrap, group)
        assert desc.state.name == "STABLE"
        assert sorted(
            tp.partition for mem in desc.members for tp in mem.assignment.topic_partitions
        ) == list(range(PARTITIONS))
        # and each partition's messages reach its owner, each once
        sent = [(p, f"{p}:{i}".encode()) for i in range(10) for p in range(PARTITIONS)]
        produce(cbroker.bootstrap, topic_name, [{"value": v, "partition": p} for p, v in sent])
        deadline = time.monotonic() + 20
        while sum(len(m.got) for m in members) < len(sent):
            assert time.monotonic() < deadline, "messages did not all arrive"
            time.sleep(0.05)
        time.sleep(0.3)  # anything extra (a duplicate) would arrive now
        for m in members:
            with m.lock:
                assert {p for p, _ in m.got} == set(m.view[1])
        assert sorted(v for m in members for v in m.got) == sorted(sent)
    finally:
        for m in members:
            m.stop_event.set()
        for m in members:
            m.join(15)


def group_ids(bootstrap: str) -> set[str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    listing = admin.list_consumer_groups(request_timeout=10).result(timeout=15)
    return {g.group_id for g in listing.valid}


def test_empty_group_without_offsets_goes_at_the_next_sweep(cbroker, topic_name) -> None:
    """Kafka removes an Empty group with no offsets at the next expiry sweep (here every
    200 ms), not offsets.retention.minutes later; one with committed offsets stays."""
    create_topic(cbroker.bootstrap, topic_name, 1)
    produce(cbroker.bootstrap, topic_name, [{"value": b"v0"}])
    bare, committed = f"bare-{uuid.uuid4().hex[:8]}", f"kept-{uuid.uuid4().hex[:8]}"
    for group in (bare, committed):
        c = Consumer({"bootstrap.servers": cbroker.bootstrap, "group.id": group,
                      "enable.auto.commit": False, "auto.offset.reset": "earliest",
                      "session.timeout.ms": 6000})  # fmt: skip
        c.subscribe([topic_name])
        deadline = time.monotonic() + 20
        msg = None
        while msg is None or msg.error():
            assert time.monotonic() < deadline, "no message"
            msg = c.poll(0.5)
        assert msg.value() == b"v0"
        if group == committed:
            c.commit(offsets=[TopicPartition(topic_name, 0, 1)], asynchronous=False)
        assert group in group_ids(cbroker.bootstrap)
        c.close()  # LeaveGroup: the group is Empty now
    deadline = time.monotonic() + 10
    while bare in group_ids(cbroker.bootstrap):
        assert time.monotonic() < deadline, "the empty group was not removed"
        time.sleep(0.1)
    assert committed in group_ids(cbroker.bootstrap)
    c = Consumer({"bootstrap.servers": cbroker.bootstrap, "group.id": committed})
    try:
        [tp] = c.committed([TopicPartition(topic_name, 0)], timeout=10)
        assert tp.offset == 1
    finally:
        c.close()
