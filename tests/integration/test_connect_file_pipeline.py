"""File source -> topic -> file sink through a standalone worker; kill -9 and resume."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from strom.testing import BrokerProcess
from strom.testing.connect import ConnectWorkerProcess
from tests.integration.clients import create_topic
from tests.integration.connect_helpers import connect_broker


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """This module's broker: the shared one's, without the initial rebalance delay."""
    yield from connect_broker(tmp_path_factory)


def connector_files(tmp_path: Path, topic: str, **overrides: str) -> list[Path]:
    source = tmp_path / "file-source.properties"
    source.write_text("name=local-file-source\nconnector.class=FileStreamSource\n"
                      f"tasks.max=1\nfile={tmp_path / 'in.txt'}\ntopic={topic}\n"
                      "batch.size=500\n" + "".join(f"{k}={v}\n" for k, v in overrides.items()))
    sink = tmp_path / "file-sink.json"  # Kafka 3.7+ also accepts JSON connector configs
    sink.write_text(json.dumps({"name": "local-file-sink", "config": {
        "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
        "tasks.max": "1", "file": str(tmp_path / "out.txt"), "topics": topic, **overrides}}))
    return [source, sink]


def topic_values(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 20
    try:
        while len(values) < count and time.monotonic() < deadline:
            values += [m.value() for m in consumer.consume(1000, 0.5) if m.error() is None]
    finally:
        consumer.close()
    return values


def stored_position(worker: ConnectWorkerProcess) -> int:
    """The source position in the worker's offsets file (0 before the first store)."""
    try:
        doc = json.loads(worker.offsets_file.read_text())
    except (OSError, ValueError):
        return 0
    return sum(entry["value"]["position"] for entry in doc["offsets"])


def committed_offset(bootstrap: str, topic: str) -> int:
    """The sink's committed offset on partition 0 of ``topic`` (0 when none yet)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "connect-local-file-sink"})
    try:
        [tp] = consumer.committed([TopicPartition(topic, 0)], timeout=10)
    finally:
        consumer.close()
    return max(tp.offset, 0)


def lines_of(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def wait_for_lines(path: Path, count: int, timeout: float = 30.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = lines_of(path)
        if len(set(lines)) >= count:
            return lines
        time.sleep(0.1)
    raise AssertionError(f"{path}: {len(set(lines_of(path)))} distinct lines, wanted {count}")


def test_file_to_topic_to_file_exact_lines(broker: BrokerProcess, tmp_path: Path,
                                           topic_name: str) -> None:
    # one partition: a file's lines keep their order through one partition only (an
    # auto-created topic gets num.partitions, 4 on the test cluster)
    create_topic(broker.bootstrap, topic_name, partitions=1)
    expected = [f"line {i} ünïcode" for i in range(3000)]
    (tmp_path / "in.txt").write_text("\n".join(expected[:2000]) + "\n")
    # The connectors override the worker's StringConverter: Kafka's JSON envelope on the topic.
    files = connector_files(tmp_path, topic_name, **{
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "true"})
    worker = ConnectWorkerProcess(tmp_path / "worker", broker.bootstrap, connector_files=files)
    worker.start()
    try:
        wait_for_lines(tmp_path / "out.txt", 2000)
        with open(tmp_path / "in.txt", "a") as f:  # appended while running: tailed
            f.write("\n".join(expected[2000:]) + "\n")
        assert wait_for_lines(tmp_path / "out.txt", 3000) == expected
    finally:
        worker.stop()
    assert topic_values(broker.bootstrap, topic_name, 3000) == [
        json.dumps({"schema": {"type": "string", "optional": False}, "payload": line},
                   separators=(",", ":"), ensure_ascii=False).encode()
        for line in expected]
    offsets = json.loads((tmp_path / "worker" / "connect.offsets").read_text())
    assert offsets["offsets"] == [{
        "key": ["local-file-source", {"filename": str(tmp_path / "in.txt")}],
        "value": {"position": (tmp_path / "in.txt").stat().st_size}}]


@pytest.mark.slow
def test_kill_9_and_restart_loses_no_line(broker: BrokerProcess, tmp_path: Path,
                                          topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name, partitions=1)  # ordered lines: one partition
    total = 20000
    expected = [f"record-{i:06d}" for i in range(total)]
    source_file = tmp_path / "in.txt"
    out = tmp_path / "out.txt"
    source_file.write_text("")
    files = connector_files(tmp_path, topic_name)
    # The killed worker's sink consumer stays in its group until its session times out; a
    # short session keeps the restart's rebalance short.
    worker = ConnectWorkerProcess(tmp_path / "worker", broker.bootstrap, connector_files=files,
                                  settings={"consumer.session.timeout.ms": "6000"})
    worker.start()
    try:
        written = 0
        committed = 0
        # Feed lines while data flows; kill -9 once both sides stored progress (source offsets
        # file, sink group offsets) and the sink has part, not all, of the lines.
        deadline = time.monotonic() + 40
        while written < total // 2 or committed == 0 or not stored_position(worker):
            assert time.monotonic() < deadline, worker.log_tail()
            if written < total // 2:
                with open(source_file, "a") as f:
                    f.write("".join(e + "\n" for e in expected[written:written + 500]))
                written += 500
            committed = committed_offset(broker.bootstrap, topic_name)
            time.sleep(0.05)
        assert worker.kill() == -signal.SIGKILL  # the crash really happened
        seen_at_kill = len(lines_of(out))
        assert seen_at_kill < total
        with open(source_file, "a") as f:
            f.write("".join(e + "\n" for e in expected[written:]))
        worker.start()
        lines = wait_for_lines(out, total, timeout=60)
    finally:
        worker.stop()
    # At-least-once: every line, first occurrences in order; duplicates are replays only.
    first_seen = list(dict.fromkeys(lines))
    assert first_seen == expected
    duplicates = len(lines) - total
    print(f"lines at kill: {seen_at_kill}, duplicates after restart: {duplicates}")
    assert 0 <= duplicates < seen_at_kill  # resumed from stored offsets, not from scratch
