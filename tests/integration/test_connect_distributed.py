"""Distributed Connect: workers sharing FileStreamSource connectors through a group.

Real processes: one broker, `strom connect distributed` workers. Each connector tails its own
file into its own one-partition topic, so every line's arrival is checkable (exact set,
duplicates only as at-least-once allows, counted).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from strom.testing import BrokerProcess
from strom.testing.connect import ConnectWorkerProcess

CONNECTORS = [f"files-{i}" for i in range(4)]
REBALANCE_409 = ("Cannot complete request momentarily due to stale configuration (typically "
                 "caused by a concurrent config change)")


@pytest.fixture
def cluster_broker(tmp_path: Path):  # type: ignore[no-untyped-def]
    broker = BrokerProcess(tmp_path / "broker",
                           settings={"group.initial.rebalance.delay.ms": "0"}).start()
    try:
        yield broker
    finally:
        broker.stop()


def wait_for(what: str, check, timeout: float = 45.0, interval: float = 0.2):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


def request_until(worker: ConnectWorkerProcess, method: str, path: str, body: object = None,
                  timeout: float = 45.0) -> tuple[int, object]:
    """Retry while the cluster answers 409 *for a rebalance*; the first other answer (a 409
    such as "already exists" is returned at once)."""
    deadline = time.monotonic() + timeout
    while True:
        status, doc = worker.request(method, path, body)
        rebalancing = status == 409 and isinstance(doc, dict) and doc.get("message") == \
            REBALANCE_409
        if not rebalancing or time.monotonic() > deadline:
            return status, doc
        time.sleep(0.2)


def leader_of(workers: list[ConnectWorkerProcess]) -> ConnectWorkerProcess:
    """The worker whose last completed generation named itself leader (from its log)."""
    def find() -> ConnectWorkerProcess | None:
        for w in workers:
            lines = [ln for ln in w.log_file.read_text().splitlines() if " generation " in ln]
            if lines and "= this worker" in lines[-1]:
                return w
        return None
    return wait_for("a leader", find)  # type: ignore[no-any-return]


def task_owners(worker: ConnectWorkerProcess) -> dict[str, str] | None:
    """connector -> worker id of its RUNNING task 0, once every connector has one."""
    status, doc = worker.request("GET", "/connectors?expand=status")
    if status != 200 or not isinstance(doc, dict) or set(doc) != set(CONNECTORS):
        return None
    owners = {}
    for name, entry in doc.items():
        tasks = entry["status"]["tasks"]
        if len(tasks) != 1 or tasks[0]["state"] != "RUNNING":
            return None
        owners[name] = tasks[0]["worker_id"]
    return owners


def append_lines(tmp_path: Path, start: int, count: int) -> None:
    for name in CONNECTORS:
        with open(tmp_path / f"{name}.txt", "a") as f:
            f.write("".join(f"{name} line {i}\n" for i in range(start, start + count)))


def topic_lines(bootstrap: str, topic: str, expected: int, timeout: float = 45.0
                ) -> list[str]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        while len(set(out)) < expected and time.monotonic() < deadline:
            out += [m.value().decode() for m in consumer.consume(1000, 0.5) if not m.error()]
    finally:
        consumer.close()
    return out


def read_topic(bootstrap: str, topic: str, start: int = 0) -> list[tuple[str, object]]:
    """(key, JSON value or None) of every record of a one-partition topic from ``start``."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{topic}",
                         "enable.auto.commit": False})
    tp = TopicPartition(topic, 0, start)
    consumer.list_topics(topic, timeout=10)
    end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    consumer.assign([tp])
    out: list[tuple[str, object]] = []
    position = start
    deadline = time.monotonic() + 20
    try:
        while position < end and time.monotonic() < deadline:
            for m in consumer.consume(1000, 0.5):
                if m.error():
                    continue
                position = m.offset() + 1
                out.append((m.key().decode(), json.loads(m.value()) if m.value() else None))
    finally:
        consumer.close()
    return out


def end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ends"})
    try:
        assert len(consumer.list_topics(topic, timeout=10).topics[topic].partitions) == partitions
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)]
    finally:
        consumer.close()


def status_records_after(bootstrap: str, starts: list[int]) -> list[tuple[str, object]]:
    records: list[tuple[str, object]] = []
    for p, start in enumerate(starts):
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "status-reader",
                             "enable.auto.commit": False})
        consumer.list_topics("connect-status", timeout=10)
        end = consumer.get_watermark_offsets(TopicPartition("connect-status", p), timeout=10)[1]
        consumer.assign([TopicPartition("connect-status", p, start)])
        position = start
        deadline = time.monotonic() + 20
        try:
            while position < end and time.monotonic() < deadline:
                for m in consumer.consume(1000, 0.5):
                    if not m.error():
                        position = m.offset() + 1
                        records.append((m.key().decode(),
                                        json.loads(m.value()) if m.value() else None))
        finally:
            consumer.close()
    return records


@pytest.mark.slow
def test_distributed_failover_and_cooperative_join(cluster_broker: BrokerProcess,
                                                   tmp_path: Path) -> None:
    bootstrap = cluster_broker.bootstrap
    # The third worker's long session keeps the group rebalancing while it is frozen below
    # (until the rebalance timeout, 20 s), whatever the load on the machine.
    workers = [ConnectWorkerProcess(tmp_path / f"w{i}", bootstrap, distributed=True,
                                    settings={"session.timeout.ms": "30000"} if i == 2 else {})
               for i in range(4)]
    a, b, c, d = workers
    try:
        a.start(60)
        b.start(60)
        for w in (a, b):
            request_until(w, "GET", "/connectors")
        leader = leader_of([a, b])
        follower = b if leader is a else a
        append_lines(tmp_path, 0, 300)
        # Created through the non-leader: forwarded to the leader, as Kafka Connect does.
        for name in CONNECTORS:
            status, doc = request_until(follower, "POST", "/connectors", {
                "name": name, "config": {"connector.class": "FileStreamSource",
                                         "file": str(tmp_path / f"{name}.txt"),
                                         "topic": name, "batch.size": "50"}})
            assert status == 201, doc
        status, doc = request_until(leader, "POST", "/connectors", {
            "name": CONNECTORS[0], "config": {"connector.class": "FileStreamSource",
                                              "file": "x", "topic": "y"}})
        assert (status, doc) == (409, {"error_code": 409,
                                       "message": f"Connector {CONNECTORS[0]} already exists"})
        owners = wait_for("tasks running on both workers",
                          lambda: (o := task_owners(a)) and set(o.values()) ==
                          {a.worker_id, b.worker_id} and o)
        assert Counter(owners.values()) == {a.worker_id: 2, b.worker_id: 2}

        # The stores are compacted topics the workers created, with the configured partitions.
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topics = admin.list_topics(timeout=10).topics
        for topic, partitions in (("connect-configs", 1), ("connect-offsets", 5),
                                  ("connect-status", 2)):
            assert len(topics[topic].partitions) == partitions
            resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
            described = admin.describe_configs([resource])[resource].result(10)
            assert described["cleanup.policy"].value == "compact"
        # The config topic holds Kafka Connect's keys and values.
        config_records = dict(read_topic(bootstrap, "connect-configs"))
        for name in CONNECTORS:
            assert config_records[f"connector-{name}"]["properties"]["topic"] == name
            assert config_records[f"commit-{name}"] == {"tasks": 1}
            task = config_records[f"task-{name}-0"]["properties"]
            assert task["file"] == str(tmp_path / f"{name}.txt")

        # kill -9 one worker: its tasks move to the survivor within the session timeout
        # (6 s) plus the scheduled rebalance delay (2 s); nothing is lost.
        append_lines(tmp_path, 300, 200)
        assert b.kill() == -signal.SIGKILL  # the crash really happened
        killed_at = time.monotonic()
        append_lines(tmp_path, 500, 200)
        wait_for("every task on the survivor", lambda: (o := task_owners(a)) and
                 set(o.values()) == {a.worker_id}, timeout=40)
        moved_after = time.monotonic() - killed_at
        assert moved_after < 6 + 2 + 10, moved_after
        append_lines(tmp_path, 700, 100)
        duplicates = 0
        for name in CONNECTORS:
            expected = {f"{name} line {i}" for i in range(800)}
            got = topic_lines(bootstrap, name, len(expected))
            assert set(got) == expected, f"{name}: missing {sorted(expected - set(got))[:5]}"
            # At-least-once on one partition: first occurrences in file order, replays after.
            assert list(dict.fromkeys(got)) == [f"{name} line {i}" for i in range(800)]
            duplicates += len(got) - len(expected)
        print(f"failover: tasks moved after {moved_after:.1f}s, {duplicates} duplicates")

        # A third worker joins and takes tasks; tasks staying put are not restarted.
        starts = end_offsets(bootstrap, "connect-status", 2)
        c.start(60)
        owners = wait_for("tasks spread over the survivor and the newcomer",
                          lambda: (o := task_owners(a)) and set(o.values()) ==
                          {a.worker_id, c.worker_id} and o)
        assert Counter(owners.values()) == {a.worker_id: 2, c.worker_id: 2}
        stayed = {n for n, w in owners.items() if w == a.worker_id}
        later = status_records_after(bootstrap, starts)
        touched = {key for key, _ in later}
        for name in stayed:
            assert f"status-task-{name}-0" not in touched, later
        for name in set(CONNECTORS) - stayed:
            states = [v["state"] for k, v in later  # type: ignore[index]
                      if k == f"status-task-{name}-0"]
            assert states[-1] == "RUNNING" and "UNASSIGNED" in states, (name, states)

        # 409 while a rebalance is in progress: with the newcomer frozen, a fourth worker's
        # join keeps the group rebalancing until it is thawed.
        assert c.pid is not None
        os.kill(c.pid, signal.SIGSTOP)
        try:
            d.start(60)
            status, doc = wait_for("a 409 from the survivor",
                                   lambda: (r := a.request("GET", "/connectors"))[0] == 409
                                   and r, timeout=20, interval=0.05)
            assert doc == {"error_code": 409, "message": REBALANCE_409}
        finally:
            os.kill(c.pid, signal.SIGCONT)
        status, doc = request_until(a, "GET", "/connectors")
        assert status == 200 and sorted(doc) == CONNECTORS  # type: ignore[arg-type]
    finally:
        for w in workers:
            w.stop()


def connector_state(worker: ConnectWorkerProcess, name: str) -> tuple[str, list[str]] | None:
    status, doc = worker.request("GET", f"/connectors/{name}/status")
    if status != 200 or not isinstance(doc, dict):
        return None
    return doc["connector"]["state"], [t["state"] for t in doc["tasks"]]


@pytest.mark.slow
def test_distributed_lifecycle_through_the_follower_eager(cluster_broker: BrokerProcess,
                                                          tmp_path: Path) -> None:
    """Eager protocol; every operation asked of the non-leader (forwarded where Kafka does)."""
    bootstrap = cluster_broker.bootstrap
    settings = {"connect.protocol": "eager"}
    workers = [ConnectWorkerProcess(tmp_path / f"w{i}", bootstrap, distributed=True,
                                    settings=settings) for i in range(2)]
    source = tmp_path / "in.txt"
    source.write_text("".join(f"line {i}\n" for i in range(10)))
    try:
        for w in workers:
            w.start(60)
        for w in workers:
            request_until(w, "GET", "/connectors")
        leader = leader_of(workers)
        f = workers[1] if leader is workers[0] else workers[0]
        status, _ = request_until(f, "POST", "/connectors", {"name": "src", "config": {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
            "file": str(source), "topic": "lines"}})
        assert status == 201
        wait_for("RUNNING", lambda: connector_state(f, "src") == ("RUNNING", ["RUNNING"]))
        assert sorted(topic_lines(bootstrap, "lines", 10)) == sorted(
            f"line {i}" for i in range(10))
        # A sink with two tasks, placed by the same assignment, writes the lines back out.
        out = tmp_path / "out.txt"
        status, _ = request_until(f, "POST", "/connectors", {"name": "sink", "config": {
            "connector.class": "FileStreamSink", "tasks.max": "2", "topics": "lines",
            "file": str(out)}})
        assert status == 201
        wait_for("sink tasks", lambda: connector_state(leader, "sink") == (
            "RUNNING", ["RUNNING", "RUNNING"]))
        wait_for("lines written by the sink", lambda: out.exists() and set(
            out.read_text().splitlines()) == {f"line {i}" for i in range(10)})
        # A new task count, PUT through the follower, applied on every worker.
        sink_config = {"connector.class": "FileStreamSink", "tasks.max": "1",
                       "topics": "lines", "file": str(out)}
        assert request_until(f, "PUT", "/connectors/sink/config", sink_config)[0] == 200
        one_task = [({"connector": "sink", "task": 0}, {**sink_config, "name": "sink"})]

        def tasks(w: ConnectWorkerProcess) -> list[tuple[object, object]] | None:
            status, doc = w.request("GET", "/connectors/sink/tasks")
            if status != 200:
                return None  # 409 while the group rebalances
            return [(t["id"], {k: v for k, v in t["config"].items() if k != "task.class"})
                    for t in doc]  # type: ignore[union-attr]
        wait_for("one sink task on every worker", lambda: all(
            connector_state(w, "sink") == ("RUNNING", ["RUNNING"]) and tasks(w) == one_task
            for w in workers))

        assert request_until(f, "PUT", "/connectors/src/pause")[0] == 202
        wait_for("PAUSED", lambda: connector_state(leader, "src") == ("PAUSED", ["PAUSED"]))
        assert dict(read_topic(bootstrap, "connect-configs"))["target-state-src"] == {
            "state": "PAUSED", "state.v2": "PAUSED"}
        assert request_until(f, "PUT", "/connectors/src/resume")[0] == 202
        wait_for("RUNNING", lambda: connector_state(f, "src") == ("RUNNING", ["RUNNING"]))
        status, doc = request_until(f, "PATCH", "/connectors/src/offsets", {"offsets": []})
        assert status == 400 and "STOPPED" in doc["message"]  # type: ignore[index]

        assert request_until(f, "PUT", "/connectors/src/stop")[0] == 204
        wait_for("STOPPED", lambda: connector_state(f, "src") == ("STOPPED", []))
        assert request_until(f, "GET", "/connectors/src/tasks") == (200, [])
        assert dict(read_topic(bootstrap, "connect-configs"))["target-state-src"] == {
            "state": "PAUSED", "state.v2": "STOPPED"}
        end = len(source.read_bytes())
        partition = {"filename": str(source)}
        assert request_until(f, "GET", "/connectors/src/offsets") == (200, {"offsets": [
            {"partition": partition, "offset": {"position": end}}]})
        status, doc = request_until(f, "PATCH", "/connectors/src/offsets", {
            "offsets": [{"partition": partition, "offset": {"position": 0}}]})
        assert status == 200, doc
        assert request_until(leader, "GET", "/connectors/src/offsets") == (200, {"offsets": [
            {"partition": partition, "offset": {"position": 0}}]})
        keys = {k for p in range(5) for k, _ in read_partition(bootstrap, "connect-offsets", p)}
        assert json.dumps(["src", partition], separators=(",", ":")) in keys

        # Resumed from the rewound offset: every line a second time.
        assert request_until(f, "PUT", "/connectors/src/resume")[0] == 202
        wait_for("RUNNING", lambda: connector_state(f, "src") == ("RUNNING", ["RUNNING"]))
        got = wait_for("every line twice", lambda: len(
            x := topic_lines(bootstrap, "lines", 10, timeout=2)) >= 20 and x)
        assert Counter(got) == Counter({f"line {i}": 2 for i in range(10)})
        # The reconfigured sink went on from its group's offsets: every line twice, no more.
        wait_for("the replay written by the sink", lambda: len(out.read_text().splitlines())
                 >= 20)
        assert Counter(out.read_text().splitlines()) == Counter(
            {f"line {i}": 2 for i in range(10)})

        status, doc = request_until(f, "POST", "/connectors/src/restart?includeTasks=true")
        assert status == 202 and doc["name"] == "src"  # type: ignore[index]
        assert request_until(f, "DELETE", "/connectors/src")[0] == 204
        wait_for("deleted everywhere", lambda: all(
            w.request("GET", "/connectors/src")[0] == 404 for w in workers))
        assert request_until(f, "GET", "/connectors/src/status")[1] == {
            "error_code": 404, "message": "No status found for connector src"}
    finally:
        for w in workers:
            w.stop()


def read_partition(bootstrap: str, topic: str, partition: int) -> list[tuple[str, object]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{topic}",
                         "enable.auto.commit": False})
    consumer.list_topics(topic, timeout=10)
    end = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
    consumer.assign([TopicPartition(topic, partition, 0)])
    out: list[tuple[str, object]] = []
    position = 0
    deadline = time.monotonic() + 20
    try:
        while position < end and time.monotonic() < deadline:
            for m in consumer.consume(1000, 0.5):
                if not m.error():
                    position = m.offset() + 1
                    out.append((m.key().decode(), m.value()))
    finally:
        consumer.close()
    return out
