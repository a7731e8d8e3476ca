"""Consumer groups with confluent-kafka (librdkafka) against a real strom broker process.

Every test asserts the exact data: which messages, consumed by which member, nothing missing,
nothing extra. Timeouts are short (the broker allows 1 s sessions, no initial rebalance delay)
so the module runs in well under a minute.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient

from strom.testing import BrokerProcess
from tests.integration.clients import create_topic, produce
from tests.topology import module_broker

pytestmark = pytest.mark.both_topologies  # [single] and [cluster3]: docs/cluster.md

SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "offsets.topic.num.partitions": "10",
}
SESSION_MS = 2000


@pytest.fixture(scope="module")
def gbroker(topology: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The module's broker (or cluster) with short group timeouts."""
    with module_broker(topology, tmp_path_factory.mktemp("groups"), SETTINGS) as proc:
        yield proc


def group_name() -> str:
    return f"g-{uuid.uuid4().hex[:8]}"


def consumer(bootstrap: str, group: str, **conf: Any) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": SESSION_MS,
            "heartbeat.interval.ms": 300,
            "topic.metadata.refresh.interval.ms": 1000,
            **conf,
        }
    )


def produce_numbered(
    bootstrap: str, topic: str, partitions: int, per_partition: int, start: int = 0
) -> set[tuple[int, bytes]]:
    """``per_partition`` messages to each partition, values ``p:i``; returns {(partition, value)}."""
    msgs = [
        {"value": f"{p}:{i}".encode(), "partition": p}
        for i in range(start, start + per_partition)
        for p in range(partitions)
    ]
    produce(bootstrap, topic, msgs)
    return {(m["partition"], m["value"]) for m in msgs}


class Poller:
    """Polls several consumers round-robin from this thread and records what each got."""

    def __init__(self, *consumers: Consumer) -> None:
        self.consumers = list(consumers)
        self.got: dict[int, list[Any]] = {id(c): [] for c in consumers}

    def poll_until(self, done: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            self.poll_once()

    def poll_once(self, timeout: float = 0.1) -> None:
        for c in self.consumers:
            msg = c.poll(timeout)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise AssertionError(msg.error())
            self.got[id(c)].append(msg)

    def drain(self, seconds: float) -> None:
        """Keep polling a while: whatever arrives now is 'extra'."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.poll_once()

    def values(self, c: Consumer) -> list[tuple[int, bytes]]:
        return [(m.partition(), m.value()) for m in self.got[id(c)]]

    def total(self) -> int:
        return sum(len(v) for v in self.got.values())


def partitions_of(c: Consumer) -> set[int]:
    return {tp.partition for tp in c.assignment()}


def test_six_partitions_three_members_each_get_two_and_every_message_once(
    gbroker, topic_name
) -> None:
    create_topic(gbroker.bootstrap, topic_name, 6)
    group = group_name()
    members = [consumer(gbroker.bootstrap, group) for _ in range(3)]
    try:
        for c in members:
            c.subscribe([topic_name])
        poller = Poller(*members)
        t0 = time.monotonic()
        poller.poll_until(
            lambda: (
                all(len(partitions_of(c)) == 2 for c in members)
                and set().union(*(partitions_of(c) for c in members)) == set(range(6))
            ),
            20,
            "3 members with 2 partitions each",
        )
        assert time.monotonic() - t0 < 20
        expected = produce_numbered(gbroker.bootstrap, topic_name, 6, 20)
        poller.poll_until(lambda: poller.total() >= len(expected), 20, "all 120 messages")
        poller.drain(1.0)
        everything = [v for c in members for v in poller.values(c)]
        assert sorted(everything) == sorted(expected)  # each message exactly once
        for c in members:
            assert {p for p, _ in poller.values(c)} == partitions_of(c)
            per_partition: dict[int, list[bytes]] = {}
            for p, v in poller.values(c):
                per_partition.setdefault(p, []).append(v)
            for p, vals in per_partition.items():
                assert vals == [f"{p}:{i}".encode() for i in range(20)]  # in order
    finally:
        for c in members:
            c.close()


KILLABLE_CONSUMER = textwrap.dedent(
    """
    import sys, time
    from confluent_kafka import Consumer
    bootstrap, group, topic, limit = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 300})
    c.subscribe([topic], on_assign=lambda cons, parts: print(
        "ASSIGNED", ",".join(str(p.partition) for p in parts), flush=True))
    done = 0
    while done < limit:
        m = c.poll(0.2)
        if m is None or m.error():
            continue
        c.commit(message=m, asynchronous=False)
        print("COMMITTED", m.partition(), m.value().decode(), flush=True)
        done += 1
    print("DONE", flush=True)
    time.sleep(600)
    """
).replace("SESSION_MS", str(SESSION_MS))


def test_killed_member_partitions_move_and_resume_from_committed_offsets(
    gbroker, topic_name, tmp_path
) -> None:
    create_topic(gbroker.bootstrap, topic_name, 2)
    group = group_name()
    survivor = consumer(gbroker.bootstrap, group)
    survivor.subscribe([topic_name])
    poller = Poller(survivor)
    poller.poll_until(lambda: partitions_of(survivor) == {0, 1}, 15, "first member assigned")
    script = tmp_path / "victim.py"
    script.write_text(KILLABLE_CONSUMER)
    victim = subprocess.Popen(
        [sys.executable, "-u", str(script), gbroker.bootstrap, group, topic_name, "10"],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    lines: list[str] = []
    try:
        reader = threading.Thread(
            target=lambda: lines.extend(line.rstrip("\n") for line in victim.stdout),  # type: ignore[union-attr]
            daemon=True,
        )
        reader.start()

        def read_victim() -> None:
            return None

        poller.poll_until(
            lambda: (
                (read_victim() or True)
                and len(partitions_of(survivor)) == 1
                and any(line.startswith("ASSIGNED ") and line != "ASSIGNED " for line in lines)
            ),
            20,
            "both members with one partition",
        )
        victim_partition = ({0, 1} - partitions_of(survivor)).pop()
        mine = partitions_of(survivor).pop()
        assert f"ASSIGNED {victim_partition}" in lines
        produce_numbered(gbroker.bootstrap, topic_name, 2, 20)
        poller.poll_until(lambda: (read_victim() or True) and "DONE" in lines, 20, "victim commits")
        committed_by_victim = [line.split()[2] for line in lines if line.startswith("COMMITTED")]
        assert committed_by_victim == [f"{victim_partition}:{i}" for i in range(10)]
        poller.poll_until(lambda: len(poller.got[id(survivor)]) >= 20, 10, "survivor's partition")
        survivor.commit(asynchronous=False)  # what it has processed is not redelivered
        victim.send_signal(signal.SIGKILL)
        victim.wait(5)
        killed = time.monotonic()
        poller.poll_until(lambda: partitions_of(survivor) == {0, 1}, 15, "partition moved")
        moved_after = time.monotonic() - killed
        assert moved_after < SESSION_MS / 1000 + 3, moved_after
        poller.poll_until(lambda: len(poller.got[id(survivor)]) >= 30, 10, "victim's rest")
        poller.drain(1.0)
        got = poller.values(survivor)
        assert [v for p, v in got if p == mine] == [f"{mine}:{i}".encode() for i in range(20)]
        # Resumed exactly after the victim's last commit: nothing lost, nothing twice.
        assert [v for p, v in got if p == victim_partition] == [
            f"{victim_partition}:{i}".encode() for i in range(10, 20)
        ]
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait(5)
        survivor.close()


def test_two_groups_each_receive_every_message(gbroker, topic_name) -> None:
    create_topic(gbroker.bootstrap, topic_name, 3)
    expected = produce_numbered(gbroker.bootstrap, topic_name, 3, 10)
    a = consumer(gbroker.bootstrap, group_name())
    b = consumer(gbroker.bootstrap, group_name())
    try:
        for c in (a, b):
            c.subscribe([topic_name])
        poller = Poller(a, b)
        poller.poll_until(lambda: poller.total() >= 60, 20, "both groups read everything")
        poller.drain(0.5)
        assert sorted(poller.values(a)) == sorted(expected)
        assert sorted(poller.values(b)) == sorted(expected)
    finally:
        a.close()
        b.close()


def committed(c: Consumer, topic: str, partitions: int) -> dict[int, int]:
    tps = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
    return {tp.partition: tp.offset for tp in tps}


def test_sync_async_and_auto_commit_and_restart_continues_after_last_commit(
    gbroker, topic_name
) -> None:
    create_topic(gbroker.bootstrap, topic_name, 1)
    produce_numbered(gbroker.bootstrap, topic_name, 1, 30)
    group = group_name()
    # synchronous commit after 10 messages
    c = consumer(gbroker.bootstrap, group)
    c.subscribe([topic_name])
    poller = Poller(c)
    poller.poll_until(lambda: len(poller.got[id(c)]) >= 10, 20, "10 messages")
    tenth = poller.got[id(c)][9]
    result = c.commit(
        offsets=[TopicPartition(topic_name, 0, tenth.offset() + 1)], asynchronous=False
    )
    assert [(tp.partition, tp.offset, tp.error) for tp in result] == [(0, 10, None)]
    assert committed(c, topic_name, 1) == {0: 10}
    c.close()
    # a restarted consumer continues after the last commit; asynchronous commit with callback
    seen: list[tuple[Any, list[tuple[int, int]]]] = []
    c = consumer(
        gbroker.bootstrap, group,
        on_commit=lambda err, parts: seen.append((err, [(p.partition, p.offset) for p in parts])),
    )  # fmt: skip
    c.subscribe([topic_name])
    poller = Poller(c)
    poller.poll_until(lambda: len(poller.got[id(c)]) >= 10, 20, "next 10 messages")
    assert [m.value() for m in poller.got[id(c)][:10]] == [f"0:{i}".encode() for i in range(10, 20)]
    c.commit(message=poller.got[id(c)][9], asynchronous=True)
    poller.poll_until(lambda: bool(seen), 10, "commit callback")
    assert seen == [(None, [(0, 20)])]
    c.close()
    # auto commit
    c = consumer(
        gbroker.bootstrap, group, **{"enable.auto.commit": True, "auto.commit.interval.ms": 200}
    )
    c.subscribe([topic_name])
    poller = Poller(c)
    poller.poll_until(lambda: len(poller.got[id(c)]) >= 10, 20, "last 10 messages")
    assert [m.value() for m in poller.got[id(c)]] == [f"0:{i}".encode() for i in range(20, 30)]
    poller.poll_until(lambda: committed(c, topic_name, 1) == {0: 30}, 10, "auto commit")
    c.close()


def test_auto_offset_reset_earliest_and_latest_and_seek(gbroker, topic_name) -> None:
    create_topic(gbroker.bootstrap, topic_name, 1)
    produce_numbered(gbroker.bootstrap, topic_name, 1, 5)
    early = consumer(gbroker.bootstrap, group_name(), **{"auto.offset.reset": "earliest"})
    late = consumer(gbroker.bootstrap, group_name(), **{"auto.offset.reset": "latest"})
    try:
        assigned: list[str] = []
        early.subscribe([topic_name])
        late.subscribe([topic_name], on_assign=lambda c, p: assigned.append("late"))
        poller = Poller(early, late)
        poller.poll_until(
            lambda: len(poller.got[id(early)]) >= 5 and bool(assigned), 20, "assignments"
        )
        # latest: its position is resolved on assignment; give it a moment to fetch the end
        poller.drain(1.0)
        produce(gbroker.bootstrap, topic_name, [{"value": b"0:5", "partition": 0}])
        poller.poll_until(lambda: len(poller.got[id(late)]) >= 1, 10, "latest consumer's message")
        poller.drain(0.5)
        assert [v for _, v in poller.values(early)] == [f"0:{i}".encode() for i in range(6)]
        assert [v for _, v in poller.values(late)] == [b"0:5"]
        # seek back to offset 2
        early.seek(TopicPartition(topic_name, 0, 2))
        before = len(poller.got[id(early)])
        poller.poll_until(lambda: len(poller.got[id(early)]) >= before + 4, 10, "after seek")
        assert [v for _, v in poller.values(early)[before:]] == [
            f"0:{i}".encode() for i in range(2, 6)
        ]
    finally:
        early.close()
        late.close()


def list_groups(bootstrap: str) -> dict[str, str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    result = admin.list_consumer_groups(request_timeout=10).result()
    return {g.group_id: str(g.state) for g in result.valid}


def test_broker_kill_9_keeps_committed_offsets_and_groups(tmp_path: Path, topic_name) -> None:
    broker = BrokerProcess(tmp_path / "data", settings=SETTINGS)
    broker.start()
    try:
        create_topic(broker.bootstrap, topic_name, 2)
        produce_numbered(broker.bootstrap, topic_name, 2, 10)
        group = group_name()
        c = consumer(broker.bootstrap, group)
        c.subscribe([topic_name])
        poller = Poller(c)
        poller.poll_until(lambda: len(poller.got[id(c)]) >= 20, 20, "20 messages")
        c.commit(
            offsets=[TopicPartition(topic_name, 0, 4), TopicPartition(topic_name, 1, 7)],
            asynchronous=False,
        )
        c.close()
        simple = group_name()  # a "simple" (assign-only) commit with metadata
        s = consumer(broker.bootstrap, simple)
        s.commit(offsets=[TopicPartition(topic_name, 0, 3, metadata="meta!")], asynchronous=False)
        s.close()
        before = list_groups(broker.bootstrap)
        assert before[group] == "ConsumerGroupState.EMPTY" and simple in before
        broker.kill()
        broker.start()
        assert {g: before[g] for g in (group, simple)} == {
            g: s for g, s in list_groups(broker.bootstrap).items() if g in (group, simple)
        }
        c = consumer(broker.bootstrap, group)
        assert committed(c, topic_name, 2) == {0: 4, 1: 7}
        meta = c.committed([TopicPartition(topic_name, 0)], timeout=10)
        c.close()
        s = consumer(broker.bootstrap, simple)
        (tp,) = s.committed([TopicPartition(topic_name, 0)], timeout=10)
        assert (tp.offset, tp.metadata) == (3, "meta!")
        s.close()
        assert meta[0].offset == 4
        c = consumer(broker.bootstrap, group)
        c.subscribe([topic_name])
        poller = Poller(c)
        poller.poll_until(lambda: len(poller.got[id(c)]) >= 9, 20, "the rest")
        poller.drain(0.5)
        assert sorted(poller.values(c)) == sorted(
            [(0, f"0:{i}".encode()) for i in range(4, 10)]
            + [(1, f"1:{i}".encode()) for i in range(7, 10)]
        )
        c.close()
    finally:
        broker.stop()


def test_static_member_restart_gets_its_partitions_back_without_rebalance(
    gbroker, topic_name
) -> None:
    create_topic(gbroker.bootstrap, topic_name, 2)
    group = group_name()
    events: list[tuple[str, str, tuple[int, ...]]] = []

    def static(name: str) -> Consumer:
        c = consumer(
            gbroker.bootstrap, group, **{"group.instance.id": name, "session.timeout.ms": 6000}
        )
        c.subscribe(
            [topic_name],
            on_assign=lambda _c, ps: events.append(
                (name, "assign", tuple(p.partition for p in ps))
            ),
            on_revoke=lambda _c, ps: events.append(
                (name, "revoke", tuple(p.partition for p in ps))
            ),
        )
        return c

    a, b = static("a"), static("b")
    poller = Poller(a, b)
    poller.poll_until(
        lambda: len(partitions_of(a)) == 1 and len(partitions_of(b)) == 1, 20, "one partition each"
    )
    poller.drain(1.0)
    a_parts, b_parts = partitions_of(a), partitions_of(b)
    a.close()  # a static member does not leave the group on close
    events.clear()
    a = static("a")
    poller = Poller(a, b)
    poller.poll_until(lambda: partitions_of(a) == a_parts, 5, "a's partitions back")
    poller.drain(2.0)
    assert partitions_of(b) == b_parts
    assert [e for e in events if e[0] == "b"] == []  # b saw no rebalance at all
    assert events == [("a", "assign", tuple(sorted(a_parts)))]
    a.close()
    b.close()


def test_cooperative_sticky_members_rebalance_incrementally(gbroker, topic_name) -> None:
    """librdkafka's cooperative-sticky assignor runs on the classic protocol with incremental
    assign/revoke: a second member takes half the partitions while the first keeps the rest
    (no partition moves twice) and every message is consumed exactly once."""
    create_topic(gbroker.bootstrap, topic_name, 4)
    group = group_name()
    conf = {"partition.assignment.strategy": "cooperative-sticky"}
    first = consumer(gbroker.bootstrap, group, **conf)
    revoked: list[int] = []
    first.subscribe(
        [topic_name],
        on_revoke=lambda c, parts: revoked.extend(p.partition for p in parts),
    )
    poller = Poller(first)
    poller.poll_until(lambda: len(partitions_of(first)) == 4, 20, "first member owns all 4")
    expected = produce_numbered(gbroker.bootstrap, topic_name, 4, 10)
    poller.poll_until(lambda: poller.total() >= 40, 20, "first 40 messages")
    for m in poller.got[id(first)]:
        first.commit(message=m, asynchronous=False)

    second = consumer(gbroker.bootstrap, group, **conf)
    second.subscribe([topic_name])
    poller.consumers.append(second)
    poller.got[id(second)] = []
    try:
        poller.poll_until(
            lambda: len(partitions_of(first)) == 2 and len(partitions_of(second)) == 2,
            30,
            "2 + 2 after the incremental rebalance",
        )
        kept = partitions_of(first)
        assert sorted(revoked) == sorted(set(range(4)) - kept), "only the moved partitions are revoked"
        assert partitions_of(second) == set(range(4)) - kept
        more = produce_numbered(gbroker.bootstrap, topic_name, 4, 10, start=10)
        poller.poll_until(lambda: poller.total() >= 80, 20, "all 80 messages")
        poller.drain(1.0)
        assert sorted(poller.values(first) + poller.values(second)) == sorted(expected | more)
        assert {p for p, v in poller.values(second)} == partitions_of(second)
    finally:
        first.close()
        second.close()
