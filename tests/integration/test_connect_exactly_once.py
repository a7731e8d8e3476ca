"""Exactly-once source tasks (KIP-618) in a distributed worker, through kill -9 crashes.

Real processes: one broker, one `strom connect distributed` worker with
`exactly.once.source.support=enabled`, killed with SIGKILL mid-stream three times and
restarted. Two FileStreamSource connectors tail files that a writer thread keeps growing: one
commits a transaction every second (`transaction.boundary=interval`, so every crash leaves an
open transaction behind), the other one per poll with its own offsets topic. A read_committed
consumer must see every line exactly once, in order; the read_uncommitted view shows the
aborted records an at-least-once runtime would have delivered as duplicates.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from strom.testing import BrokerProcess
from strom.testing.connect import ConnectWorkerProcess

GROUP = "connect-cluster"  # ConnectWorkerProcess's group.id


def wait_for(what: str, check, timeout: float = 60.0, interval: float = 0.2):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


def request_until(worker: ConnectWorkerProcess, method: str, path: str, body: object = None,
                  timeout: float = 60.0) -> tuple[int, object]:
    deadline = time.monotonic() + timeout
    while True:
        status, doc = worker.request(method, path, body)
        if status != 409 or time.monotonic() > deadline:
            return status, doc
        time.sleep(0.2)


def read_all(bootstrap: str, topic: str, isolation: str, partition: int = 0
             ) -> list[tuple[bytes | None, bytes | None]]:
    """(key, value) of every record of one partition up to its end for ``isolation`` (the
    last stable offset for read_committed, the high watermark otherwise)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{isolation}",
                         "enable.auto.commit": False, "isolation.level": isolation})
    out: list[tuple[bytes | None, bytes | None]] = []
    try:
        consumer.list_topics(topic, timeout=10)
        tp = TopicPartition(topic, partition, 0)
        end = consumer.get_watermark_offsets(tp, timeout=10, cached=False)[1]
        consumer.assign([tp])
        deadline = time.monotonic() + 30
        while end > 0 and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.2):
                if not msg.error():
                    out.append((msg.key(), msg.value()))
            if consumer.position([TopicPartition(topic, partition)])[0].offset >= end:
                break
    finally:
        consumer.close()
    return out


def committed_lines(bootstrap: str, topic: str) -> list[str]:
    try:
        return [v.decode() for _, v in read_all(bootstrap, topic, "read_committed") if v]
    except KafkaException:
        return []


def wait_for_progress(bootstrap: str, names: list[str], lines: int) -> None:
    """Until every connector's topic has ``lines`` more committed lines than now."""
    seen = {n: len(committed_lines(bootstrap, f"eo-{n}")) for n in names}
    wait_for("progress", lambda: all(
        len(committed_lines(bootstrap, f"eo-{n}")) >= seen[n] + lines for n in names))


def wait_for_lines(bootstrap: str, topic: str, total: int) -> list[str]:
    def enough() -> list[str] | None:
        lines = committed_lines(bootstrap, topic)
        return lines if len(lines) >= total else None
    return wait_for(f"{total} lines in {topic}", enough, timeout=90)  # type: ignore[no-any-return]


class Writer(threading.Thread):
    """Appends numbered lines to each file, a few at a time, until stopped."""

    def __init__(self, files: dict[str, Path]) -> None:
        super().__init__(daemon=True)
        self.files = files
        self.count = 0
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(0.02):
            for name, path in self.files.items():
                with open(path, "a") as f:
                    f.write("".join(f"{name} {i}\n" for i in range(self.count, self.count + 5)))
            self.count += 5


@pytest.mark.slow
@pytest.mark.timeout(300)  # about a minute on an idle machine; more under load
def test_exactly_once_source_survives_kill_9(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "broker",
                           settings={"group.initial.rebalance.delay.ms": "0"}).start()
    worker = ConnectWorkerProcess(tmp_path / "w", broker.bootstrap, distributed=True, settings={
        "exactly.once.source.support": "enabled", "scheduled.rebalance.max.delay.ms": "0"})
    bootstrap = broker.bootstrap
    files = {"interval": tmp_path / "interval.txt", "poll": tmp_path / "poll.txt"}
    for path in files.values():
        path.write_text("")
    writer = Writer(files)
    zombie = Producer({"bootstrap.servers": bootstrap,
                       "transactional.id": f"{GROUP}-interval-0"})
    try:
        # A zombie of task interval-0 holds an open transaction when the worker comes up.
        zombie.init_transactions(30)
        zombie.begin_transaction()
        zombie.produce("eo-interval", value=b"zombie")
        zombie.flush(10)

        worker.start(60)
        request_until(worker, "GET", "/connectors")
        # A connector that cannot define its transactions is refused with the reason.
        status, doc = request_until(worker, "POST", "/connectors", {"name": "bad", "config": {
            "connector.class": "FileStreamSource", "file": str(files["poll"]), "topic": "x",
            "exactly.once.support": "required", "transaction.boundary": "connector"}})
        assert status == 400 and "transaction.boundary: The connector does not support " \
            "connector-defined transaction boundaries" in doc["message"], doc  # type: ignore[index]
        common = {"connector.class": "FileStreamSource", "batch.size": "20",
                  "exactly.once.support": "required"}
        status, doc = request_until(worker, "POST", "/connectors", {"name": "interval", "config": {
            **common, "file": str(files["interval"]), "topic": "eo-interval",
            "transaction.boundary": "interval", "transaction.boundary.interval.ms": "1000"}})
        assert status == 201, doc
        status, doc = request_until(worker, "POST", "/connectors", {"name": "poll", "config": {
            **common, "file": str(files["poll"]), "topic": "eo-poll",
            "offsets.storage.topic": "poll-offsets"}})
        assert status == 201, doc
        writer.start()

        # The task's InitProducerId fenced the zombie: its commit fails, its record never shows.
        wait_for("the first committed lines", lambda: committed_lines(bootstrap, "eo-interval"))
        with pytest.raises(KafkaException):
            zombie.commit_transaction(10)

        for _ in range(3):
            wait_for_progress(bootstrap, list(files), 20)
            time.sleep(0.3)  # into the current one-second transaction
            worker.kill()
            worker.start(60)
        wait_for_progress(bootstrap, list(files), 40)
        writer.halt.set()
        writer.join(10)
        total = writer.count

        for name in files:
            expected = [f"{name} {i}" for i in range(total)]
            got = wait_for_lines(bootstrap, f"eo-{name}", total)
            dupes = [line for line, n in Counter(got).items() if n > 1]
            assert not dupes, f"{name}: duplicates {dupes[:5]}"
            assert got == expected, f"{name}: {len(got)} lines, {total} expected"
        # Aborted transactions existed (the crashes left them) and stayed invisible.
        raw = [v.decode() for _, v in read_all(bootstrap, "eo-interval", "read_uncommitted")
               if v]
        assert "zombie" in raw
        assert len(raw) > total + 1, "no crash left an open transaction behind"

        # The offsets travelled in the same transactions: the final ones are the files' ends.
        ends = {name: path.stat().st_size for name, path in files.items()}
        keys = {}
        for topic, name in (("poll-offsets", "poll"), ("connect-offsets", "interval")):
            for p in range(5):
                for k, v in read_all(bootstrap, topic, "read_committed", p):
                    if k and v and json.loads(k)[0] == name:
                        keys[(topic, name)] = json.loads(v)
        assert keys[("poll-offsets", "poll")] == {"position": ends["poll"]}
        assert keys[("connect-offsets", "interval")] == {"position": ends["interval"]}
        mirrored = {"offsets": [{"partition": {"filename": str(files["poll"])},
                                 "offset": {"position": ends["poll"]}}]}
        wait_for("offsets mirrored to the worker's topic", lambda: request_until(
            worker, "GET", "/connectors/poll/offsets") == (200, mirrored))
        # The leader fenced the first generation and recorded its task count.
        configs = {k.decode(): json.loads(v) for k, v in
                   read_all(bootstrap, "connect-configs", "read_committed") if k and v}
        assert configs["task-count-record-interval"] == {"task-count": 1}
        assert configs["task-count-record-poll"] == {"task-count": 1}
        assert request_until(worker, "PUT", "/connectors/poll/fence") == (204, None)
    finally:
        writer.halt.set()
        worker.stop()
        broker.stop()
