"""Transforms, errors.tolerance and the dead letter queue on a real standalone worker."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from strom.testing.connect import ConnectWorkerProcess
from tests.integration.clients import create_topic
from tests.integration.connect_helpers import connect_broker, wait_for


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """This module's broker: the shared one's, without the initial rebalance delay."""
    yield from connect_broker(tmp_path_factory)


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for i, v in enumerate(values):
        p.produce(topic, key=f"k{i}".encode(), value=v, partition=0,
                  headers=[("origin", b"test")])
    assert p.flush(15) == 0


def consume_all(bootstrap: str, topic: str, count: int) -> list[Any]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    out: list[Any] = []
    deadline = time.monotonic() + 20
    try:
        while len(out) < count and time.monotonic() < deadline:
            out += [m for m in c.consume(100, 0.5) if m.error() is None]
    finally:
        c.close()
    return out


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_poison_record_goes_to_dlq_with_context_headers(
        worker: ConnectWorkerProcess, broker: Any, tmp_path: Path, topic_name: str) -> None:
    good = [json.dumps({"msg": f"m{i}", "n": i}).encode() for i in range(6)]
    poison = b'{"msg": "broken'
    produce(broker.bootstrap, topic_name, [*good[:3], poison, *good[3:]])
    out = tmp_path / "out.txt"
    dlq = f"{topic_name}-dlq"
    config = {
        "connector.class": "FileStreamSink", "topics": topic_name, "file": str(out),
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "false",
        "errors.tolerance": "all", "errors.log.enable": "true",
        "errors.deadletterqueue.topic.name": dlq,
        "errors.deadletterqueue.topic.replication.factor": "1",
        "errors.deadletterqueue.context.headers.enable": "true",
        "transforms": "extract,up", "transforms.extract.type":
        "org.apache.kafka.connect.transforms.ExtractField$Value",
        "transforms.extract.field": "msg",
        "transforms.up.type": "org.apache.kafka.connect.transforms.Filter",
        "transforms.up.predicate": "odd", "predicates": "odd",
        "predicates.odd.type": "org.apache.kafka.connect.transforms.predicates.HasHeaderKey",
        "predicates.odd.name": "drop-me",
    }
    status, body = worker.request("POST", "/connectors", {"name": "dlq-sink", "config": config})
    assert status == 201, body
    try:
        assert wait_for(lambda: len(lines(out)) >= 6 and lines(out), "good records") == \
            [f"m{i}" for i in range(6)]
        [dead] = consume_all(broker.bootstrap, dlq, 1)
        assert (dead.key(), dead.value()) == (b"k3", poison)
        headers = {k: v.decode() for k, v in dead.headers()}
        assert headers["origin"] == "test"
        assert {k: headers[f"__connect.errors.{k}"] for k in (
            "topic", "partition", "offset", "connector.name", "task.id", "stage",
            "class.name", "exception.class.name")} == {
            "topic": topic_name, "partition": "0", "offset": "3", "connector.name": "dlq-sink",
            "task.id": "0", "stage": "VALUE_CONVERTER",
            "class.name": "org.apache.kafka.connect.json.JsonConverter",
            "exception.class.name": "strom.connect.converters.DataError"}
        assert "Converting byte[] to Kafka Connect data failed" in \
            headers["__connect.errors.exception.message"]
        assert "Traceback" in headers["__connect.errors.exception.stacktrace"]
        status, st = worker.request("GET", "/connectors/dlq-sink/status")
        assert [t["state"] for t in st["tasks"]] == ["RUNNING"]
    finally:
        worker.request("DELETE", "/connectors/dlq-sink")


def test_tolerance_none_fails_the_task_with_the_trace(
        worker: ConnectWorkerProcess, broker: Any, tmp_path: Path, topic_name: str) -> None:
    produce(broker.bootstrap, topic_name, [b'{"a": 1}', b"not json"])
    config = {"connector.class": "FileStreamSink", "topics": topic_name,
              "file": str(tmp_path / "out.txt"),
              "value.converter": "org.apache.kafka.connect.json.JsonConverter",
              "value.converter.schemas.enable": "false"}
    assert worker.request("POST", "/connectors", {"name": "strict", "config": config})[0] == 201
    try:
        def failed() -> Any:
            task = worker.request("GET", "/connectors/strict/status")[1]["tasks"][0]
            return task if task["state"] == "FAILED" else None

        task = wait_for(failed, "task FAILED")
        assert "Tolerance exceeded in error handler" in task["trace"]
        assert "DataError: Converting byte[] to Kafka Connect data failed" in task["trace"]
        assert lines(tmp_path / "out.txt") in ([], ['{"a": 1}'], ["{'a': 1}"])
    finally:
        worker.request("DELETE", "/connectors/strict")


def test_bad_transform_config_is_400_and_in_validate(worker: ConnectWorkerProcess,
                                                      tmp_path: Path) -> None:
    config = {"connector.class": "FileStreamSink", "topics": "t", "file": str(tmp_path / "o"),
              "transforms": "r", "transforms.r.type": "RegexRouter",
              "errors.tolerance": "sometimes"}
    status, body = worker.request("POST", "/connectors", {"name": "bad", "config": config})
    assert status == 400 and body["error_code"] == 400
    assert "transforms.r.regex" in body["message"] and "errors.tolerance" in body["message"]
    status, result = worker.request("PUT", "/connector-plugins/FileStreamSink/config/validate",
                                    config)
    assert status == 200
    errors = {c["value"]["name"]: c["value"]["errors"] for c in result["configs"]}
    assert errors["transforms.r.regex"] == [
        'Missing required configuration "transforms.r.regex" which has no default value.']
    assert result["error_count"] == 4  # name, regex, replacement, errors.tolerance
    assert "Transforms: r" in result["groups"] and "Error Handling" in result["groups"]


def test_plugins_list_transforms_and_predicates(worker: ConnectWorkerProcess) -> None:
    status, plugins = worker.request("GET", "/connector-plugins?connectorsOnly=false")
    assert status == 200
    kinds = {p["class"]: p["type"] for p in plugins}
    assert kinds["org.apache.kafka.connect.transforms.InsertField$Value"] == "transformation"
    assert kinds["org.apache.kafka.connect.transforms.predicates.RecordIsTombstone"] == \
        "predicate"
    assert kinds["io.confluent.connect.jdbc.JdbcSinkConnector"] == "sink"
    assert kinds["strom.connect.parquet.ParquetSinkConnector"] == "sink"


def test_source_transforms_shape_what_is_produced(worker: ConnectWorkerProcess, broker: Any,
                                                  tmp_path: Path, topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name, partitions=1)  # alpha before beta: one partition
    (tmp_path / "in.txt").write_text("alpha\nbeta\n")
    config = {"connector.class": "FileStreamSource", "file": str(tmp_path / "in.txt"),
              "topic": "raw", "value.converter": "org.apache.kafka.connect.json.JsonConverter",
              "value.converter.schemas.enable": "false",
              "transforms": "route,hoist,insert",
              "transforms.route.type": "RegexRouter", "transforms.route.regex": "raw",
              "transforms.route.replacement": topic_name,
              "transforms.hoist.type": "HoistField$Value", "transforms.hoist.field": "line",
              "transforms.insert.type": "InsertField$Value",
              "transforms.insert.static.field": "data_source",
              "transforms.insert.static.value": "test-file-source"}
    assert worker.request("POST", "/connectors", {"name": "src", "config": config})[0] == 201
    try:
        values = [m.value() for m in consume_all(broker.bootstrap, topic_name, 2)]
    finally:
        worker.request("DELETE", "/connectors/src")
    assert values == [b'{"line":"alpha","data_source":"test-file-source"}',
                      b'{"line":"beta","data_source":"test-file-source"}']
