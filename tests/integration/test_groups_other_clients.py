"""Consumer groups with kafka-python and aiokafka: two members split a topic, commit, and a
restarted member resumes after the last commit. Exact data, bounded time."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.clients import create_topic, produce
from tests.topology import module_broker

pytestmark = pytest.mark.both_topologies  # [single] and [cluster3]: docs/cluster.md

SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "offsets.topic.num.partitions": "10",
}


@pytest.fixture(scope="module")
def gbroker(topology: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The module's broker (or cluster) with short group timeouts."""
    with module_broker(topology, tmp_path_factory.mktemp("groups-other"), SETTINGS) as proc:
        yield proc


def numbered(
    bootstrap: str, topic: str, partitions: int, start: int, stop: int
) -> list[tuple[int, bytes]]:
    msgs = [(p, f"{p}:{i}".encode()) for i in range(start, stop) for p in range(partitions)]
    produce(bootstrap, topic, [{"value": v, "partition": p} for p, v in msgs])
    return msgs


# kafka-python ---------------------------------------------------------------------------------
def kp_consumer(bootstrap: str, group: str, topic: str) -> Any:
    from kafka import KafkaConsumer

    c = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=3000,
        heartbeat_interval_ms=300,
        max_poll_interval_ms=10000,
        request_timeout_ms=15000,
    )
    c.subscribe([topic])
    return c


class KpMember(threading.Thread):
    """A kafka-python consumer polling in its own thread, committing after each poll."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.consumer = kp_consumer(bootstrap, group, topic)
        self.got: list[tuple[int, bytes]] = []
        self.stop_event = threading.Event()
        self.error: BaseException | None = None
        self.assigned: set[int] = (
            set()
        )  # read only from this thread: kafka-python is not thread-safe

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                records = self.consumer.poll(timeout_ms=1000)
                self.assigned = {tp.partition for tp in self.consumer.assignment()}
                for batch in records.values():
                    self.got.extend((r.partition, r.value) for r in batch)
                if records:
                    self.consumer.commit()
        except BaseException as exc:  # reported by the test
            self.error = exc

    def partitions(self) -> set[int]:
        return self.assigned

    def close(self) -> None:
        self.stop_event.set()
        self.join(10)
        self.consumer.close()
        assert self.error is None, self.error


def wait_for(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_kafka_python_two_members_split_commit_and_resume(gbroker, topic_name) -> None:
    create_topic(gbroker.bootstrap, topic_name, 4)
    group = f"kp-{uuid.uuid4().hex[:8]}"
    a = KpMember(gbroker.bootstrap, group, topic_name)
    b = KpMember(gbroker.bootstrap, group, topic_name)
    a.start()
    b.start()
    try:
        wait_for(
            lambda: len(a.partitions()) == 2 and len(b.partitions()) == 2, 30, "2 + 2 partitions"
        )
        assert a.partitions() | b.partitions() == {0, 1, 2, 3}
        first = numbered(gbroker.bootstrap, topic_name, 4, 0, 10)
        wait_for(lambda: len(a.got) + len(b.got) >= 40, 20, "40 messages")
        time.sleep(0.5)
        assert sorted(a.got + b.got) == sorted(first)
        assert {p for p, _ in a.got} == a.partitions() and {p for p, _ in b.got} == b.partitions()
    finally:
        a.close()
        b.close()
    # a restarted member continues after the last commit
    more = numbered(gbroker.bootstrap, topic_name, 4, 10, 15)
    c = KpMember(gbroker.bootstrap, group, topic_name)
    c.start()
    try:
        wait_for(lambda: len(c.got) >= 20, 30, "20 new messages")
        time.sleep(0.5)
        assert sorted(c.got) == sorted(more)
    finally:
        c.close()


# aiokafka ---------------------------------------------------------------------------------------
async def aio_member(bootstrap: str, group: str, topic: str, got: list[tuple[int, bytes]],
                     want: int, stop: asyncio.Event) -> set[int]:  # fmt: skip
    from aiokafka import AIOKafkaConsumer

    c = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=3000,
        heartbeat_interval_ms=300,
    )
    await c.start()
    try:
        while not stop.is_set():
            batches = await c.getmany(timeout_ms=100)
            for records in batches.values():
                got.extend((r.partition, r.value) for r in records)
            if batches:
                await c.commit()
        return {tp.partition for tp in c.assignment()}
    finally:
        await c.stop()


def test_aiokafka_two_members_split_commit_and_resume(gbroker, topic_name) -> None:
    create_topic(gbroker.bootstrap, topic_name, 4)
    group = f"aio-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        a_got: list[tuple[int, bytes]] = []
        b_got: list[tuple[int, bytes]] = []
        stop = asyncio.Event()
        tasks = [
            asyncio.create_task(aio_member(gbroker.bootstrap, group, topic_name, got, 0, stop))
            for got in (a_got, b_got)
        ]
        await asyncio.sleep(0)  # let both start joining before any data exists
        loop = asyncio.get_running_loop()
        # produce once both have joined: give the group time to settle
        deadline = loop.time() + 30

        async def settled() -> None:
            from aiokafka.admin import AIOKafkaAdminClient

            admin = AIOKafkaAdminClient(bootstrap_servers=gbroker.bootstrap)
            await admin.start()
            try:
                while True:
                    assert loop.time() < deadline, "group did not stabilise"
                    (desc,) = await admin.describe_consumer_groups([group])
                    groups = desc.groups if hasattr(desc, "groups") else desc
                    g = groups[0]
                    state, members = g[2], g[5]
                    if state == "Stable" and len(members) == 2:
                        return
                    await asyncio.sleep(0.1)
            finally:
                await admin.close()

        await settled()
        expected = await loop.run_in_executor(
            None, numbered, gbroker.bootstrap, topic_name, 4, 0, 10
        )
        while len(a_got) + len(b_got) < 40:
            assert loop.time() < deadline, "messages missing"
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
        stop.set()
        parts_a, parts_b = await asyncio.wait_for(asyncio.gather(*tasks), 15)
        assert sorted(a_got + b_got) == sorted(expected)
        assert len(parts_a) == len(parts_b) == 2 and parts_a | parts_b == {0, 1, 2, 3}
        assert {p for p, _ in a_got} == parts_a and {p for p, _ in b_got} == parts_b
        # restart: continues after the last commit
        more = await loop.run_in_executor(None, numbered, gbroker.bootstrap, topic_name, 4, 10, 15)
        c_got: list[tuple[int, bytes]] = []
        stop2 = asyncio.Event()
        task = asyncio.create_task(
            aio_member(gbroker.bootstrap, group, topic_name, c_got, 0, stop2)
        )
        deadline = loop.time() + 30
        while len(c_got) < 20:
            assert loop.time() < deadline, "restarted member got too little"
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
        stop2.set()
        await asyncio.wait_for(task, 15)
        assert sorted(c_got) == sorted(more)

    asyncio.run(asyncio.wait_for(scenario(), 90))
