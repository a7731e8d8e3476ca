"""Kafka Connect's own distributed runtime (connect-runtime 4.x, the JVM worker) with strom as its
Kafka: two workers in one group (Connect's ``connect`` group protocol through strom's
coordinator), their config / offset / status topics in strom, FileStream source and sink
connectors moving a file through a strom topic and back out, line for line.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from benchmarks.kafka_jvm import ConnectDistributedProcess
from strom.testing import BrokerProcess


def wait_for(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(0.25)
    raise AssertionError(f"{what}: not within {timeout:g} s (last: {last!r})")


def read_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def running(worker: ConnectDistributedProcess, name: str) -> dict[str, Any] | None:
    status, body = worker.request("GET", f"/connectors/{name}/status")
    if status != 200 or body["connector"]["state"] != "RUNNING":
        return None
    tasks = body.get("tasks") or []
    return body if tasks and all(t["state"] == "RUNNING" for t in tasks) else None


def topic_lines(bootstrap: str, topic: str, count: int, timeout: float = 60.0) -> list[str]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check",
                         "enable.auto.commit": False})  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                out.append(msg.value().decode())
    finally:
        consumer.close()
    return out


def test_file_stream_connectors_on_two_workers(strom_broker: BrokerProcess, tmp_path: Path) -> None:
    bootstrap = strom_broker.bootstrap
    source_file, sink_file = tmp_path / "in.txt", tmp_path / "out.txt"
    first = [f"line {i} of the first batch: {'x' * (i % 40)}" for i in range(500)]
    source_file.write_text("".join(f"{line}\n" for line in first))
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("lines", 1, 1)])["lines"].result(30)  # one partition: in order

    workers = [ConnectDistributedProcess(tmp_path / f"w{i}", bootstrap) for i in (1, 2)]
    try:
        for worker in workers:
            worker.start(timeout=180)
        # both workers joined the one group: each sees the other's REST URL as a member
        status, _ = workers[0].request("POST", "/connectors", {
            "name": "file-source", "config": {
                "connector.class": "FileStreamSource", "tasks.max": "1",
                "file": str(source_file), "topic": "lines"}})  # fmt: skip
        assert status == 201, status
        status, _ = workers[1].request("POST", "/connectors", {
            "name": "file-sink", "config": {
                "connector.class": "FileStreamSink", "tasks.max": "1",
                "file": str(sink_file), "topics": "lines"}})  # fmt: skip
        assert status == 201, status
        for name in ("file-source", "file-sink"):
            wait_for(lambda name=name: running(workers[0], name), 120, f"{name} RUNNING")

        wait_for(lambda: len(read_lines(sink_file)) >= len(first), 120, "the sink file written")
        assert read_lines(sink_file) == first
        assert topic_lines(bootstrap, "lines", len(first)) == first

        # the runtime's own topics live in strom, with the configs Connect asks for
        topics = admin.list_topics(timeout=10).topics
        for internal in ("connect-jvm-configs", "connect-jvm-offsets", "connect-jvm-status"):
            assert internal in topics, sorted(topics)
        resource = ConfigResource(ConfigResource.Type.TOPIC, "connect-jvm-offsets")
        configs = admin.describe_configs([resource])[resource].result(30)
        assert configs["cleanup.policy"].value == "compact"
        assert len(topics["connect-jvm-offsets"].partitions) == 25  # Connect's default

        # tasks are spread over the two members of the group
        owners = {running(workers[0], n)["tasks"][0]["worker_id"]  # type: ignore[index]
                  for n in ("file-source", "file-sink")}  # fmt: skip
        assert owners == {f"127.0.0.1:{w.port}" for w in workers}, owners

        # a worker leaves cleanly: its task moves to the survivor, which resumes from the
        # source offsets the leaver committed to strom (no line twice, none missing)
        workers[0].stop(timeout=60)
        second = [f"line {i} of the second batch" for i in range(300)]
        with source_file.open("a") as out:
            out.write("".join(f"{line}\n" for line in second))
        for name in ("file-source", "file-sink"):
            wait_for(lambda name=name: (body := running(workers[1], name))
                     and body["tasks"][0]["worker_id"] == f"127.0.0.1:{workers[1].port}",
                     120, f"{name} running on the second worker")  # fmt: skip
        wait_for(lambda: len(read_lines(sink_file)) >= len(first) + len(second), 120,
                 "the second batch in the sink file")  # fmt: skip
        time.sleep(2)  # nothing more arrives (a duplicate would)
        assert read_lines(sink_file) == first + second

        # the source connector's offset as the runtime stored it in strom (KIP-875's GET)
        status, body = workers[1].request("GET", "/connectors/file-source/offsets")
        assert status == 200, body
        (entry,) = body["offsets"]
        assert entry["partition"] == {"filename": str(source_file)}
        assert entry["offset"]["position"] == source_file.stat().st_size
    finally:
        for worker in workers:
            worker.stop(timeout=60)
