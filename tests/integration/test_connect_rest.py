"""Kafka Connect's REST API on a real standalone worker, endpoint by endpoint, with errors."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.cli.main import main
from strom.testing import BrokerProcess
from strom.testing.connect import ConnectWorkerProcess
from tests.integration.cli_helpers import assert_clean_error, strom
from tests.integration.clients import create_topic
from tests.integration.connect_helpers import connect_broker, wait_for


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """This module's broker: the shared one's, without the initial rebalance delay."""
    yield from connect_broker(tmp_path_factory)


def state(worker: ConnectWorkerProcess, name: str) -> tuple[str, list[str]]:
    status, body = worker.request("GET", f"/connectors/{name}/status")
    assert status == 200, body
    return body["connector"]["state"], [t["state"] for t in body["tasks"]]


def sink_config(tmp_path: Path, topic: str, **extra: str) -> dict[str, str]:
    return {"connector.class": "FileStreamSink", "tasks.max": "1", "topics": topic,
            "file": str(tmp_path / "out.txt"), **extra}


def test_root_and_plugins(worker: ConnectWorkerProcess, broker: BrokerProcess) -> None:
    status, body = worker.request("GET", "/")
    assert status == 200 and body["version"] and "commit" in body
    wait_for(lambda: worker.request("GET", "/")[1]["kafka_cluster_id"], "cluster id", timeout=20.0)
    status, plugins = worker.request("GET", "/connector-plugins")
    assert status == 200
    assert {"class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
            "type": "source", "version": "0.1.0"} in plugins
    status, all_plugins = worker.request("GET", "/connector-plugins?connectorsOnly=false")
    assert "org.apache.kafka.connect.json.JsonConverter" in {p["class"] for p in all_plugins}


def test_unknown_connector_is_404_everywhere(worker: ConnectWorkerProcess) -> None:
    body404 = {"error_code": 404, "message": "Connector nope not found"}
    for method, path in [("GET", ""), ("DELETE", ""), ("GET", "/config"), ("GET", "/status"),
                         ("GET", "/tasks"), ("POST", "/restart"), ("PUT", "/pause"),
                         ("PUT", "/resume"), ("PUT", "/stop")]:
        assert worker.request(method, f"/connectors/nope{path}") == (404, body404), path
    assert worker.request("GET", "/no/such/path")[0] == 404


def test_create_conflict_and_bad_config(worker: ConnectWorkerProcess, tmp_path: Path,
                                        topic_name: str) -> None:
    config = sink_config(tmp_path, topic_name)
    status, info = worker.request("POST", "/connectors", {"name": "c1", "config": config})
    assert status == 201
    assert info == {"name": "c1", "config": {**config, "name": "c1"},
                    "tasks": [{"connector": "c1", "task": 0}], "type": "sink"}
    status, body = worker.request("POST", "/connectors", {"name": "c1", "config": config})
    assert (status, body) == (409, {"error_code": 409, "message": "Connector c1 already exists"})
    bad = {"connector.class": "FileStreamSink", "tasks.max": "0"}
    status, body = worker.request("POST", "/connectors", {"name": "bad", "config": bad})
    assert status == 400 and body["error_code"] == 400
    assert "contains the following 4 error(s)" in body["message"]
    assert "topics: Must configure one of topics or topics.regex" in body["message"]
    assert worker.request("GET", "/connectors/bad")[0] == 404
    status, body = worker.request("POST", "/connectors",
                                  {"name": "x", "config": {"connector.class": "Nope"}})
    assert status == 400 and "which name matches Nope" in body["message"]
    assert worker.request("DELETE", "/connectors/c1") == (204, None)
    assert worker.request("GET", "/connectors/c1")[0] == 404


def test_config_put_status_tasks(worker: ConnectWorkerProcess, tmp_path: Path,
                                 topic_name: str) -> None:
    config = sink_config(tmp_path, topic_name)
    status, info = worker.request("PUT", "/connectors/c2/config", config)
    assert status == 201 and info["name"] == "c2"
    status, info = worker.request("PUT", "/connectors/c2/config", {**config, "tasks.max": "2"})
    assert status == 200 and len(info["tasks"]) == 2
    assert worker.request("GET", "/connectors/c2/config") == (
        200, {**config, "tasks.max": "2", "name": "c2"})
    status, body = worker.request("PUT", "/connectors/c2/config", {**config, "name": "other"})
    assert status == 400
    assert body["message"] == ("Connector name configuration (other) doesn't match connector "
                               "name in the URL (c2)")
    wait_for(lambda: state(worker, "c2") == ("RUNNING", ["RUNNING", "RUNNING"]), "running")
    status, tasks = worker.request("GET", "/connectors/c2/tasks")
    assert status == 200 and [t["id"] for t in tasks] == [
        {"connector": "c2", "task": 0}, {"connector": "c2", "task": 1}]
    assert tasks[0]["config"]["topics"] == topic_name
    status, body = worker.request("GET", "/connectors/c2/tasks/1/status")
    assert status == 200 and body["id"] == 1 and body["state"] == "RUNNING"
    assert body["worker_id"] == f"127.0.0.1:{worker.port}"
    assert worker.request("GET", "/connectors/c2/tasks/5/status")[0] == 404
    status, listing = worker.request("GET", "/connectors?expand=status&expand=info")
    assert listing["c2"]["status"]["type"] == "sink"
    assert listing["c2"]["info"]["config"]["tasks.max"] == "2"
    assert "c2" in worker.request("GET", "/connectors")[1]
    assert worker.request("DELETE", "/connectors/c2")[0] == 204


def test_pause_resume_stop_restart(worker: ConnectWorkerProcess, tmp_path: Path,
                                   topic_name: str) -> None:
    worker.request("PUT", "/connectors/c3/config", sink_config(tmp_path, topic_name))
    wait_for(lambda: state(worker, "c3") == ("RUNNING", ["RUNNING"]), "running")
    assert worker.request("PUT", "/connectors/c3/pause") == (202, None)
    assert state(worker, "c3") == ("PAUSED", ["PAUSED"])
    assert worker.request("PUT", "/connectors/c3/resume") == (202, None)
    assert state(worker, "c3") == ("RUNNING", ["RUNNING"])
    assert worker.request("PUT", "/connectors/c3/stop") == (204, None)
    assert state(worker, "c3") == ("STOPPED", [])
    assert worker.request("PUT", "/connectors/c3/resume") == (202, None)
    wait_for(lambda: state(worker, "c3") == ("RUNNING", ["RUNNING"]), "running again")
    assert worker.request("POST", "/connectors/c3/restart") == (204, None)
    status, body = worker.request("POST", "/connectors/c3/restart?includeTasks=true")
    assert status == 202 and body["name"] == "c3" and len(body["tasks"]) == 1
    assert worker.request("POST", "/connectors/c3/tasks/0/restart") == (204, None)
    assert worker.request("POST", "/connectors/c3/tasks/3/restart")[0] == 404
    wait_for(lambda: state(worker, "c3") == ("RUNNING", ["RUNNING"]), "running after restart")
    assert worker.request("DELETE", "/connectors/c3")[0] == 204


def test_paused_sink_moves_no_data_until_resumed(
        worker: ConnectWorkerProcess, broker: BrokerProcess, tmp_path: Path,
        topic_name: str) -> None:
    from confluent_kafka import Producer

    out = tmp_path / "out.txt"
    worker.request("PUT", "/connectors/c7/config", sink_config(tmp_path, topic_name))
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic_name, b"before")
    assert producer.flush(10) == 0
    wait_for(lambda: out.exists() and out.read_text() == "before\n", "first record")
    assert worker.request("PUT", "/connectors/c7/pause") == (202, None)
    producer.produce(topic_name, b"while-paused")
    assert producer.flush(10) == 0
    # Bounded check of an absence: the consumer would have delivered it in well under 2 s.
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        assert out.read_text() == "before\n"
        time.sleep(0.1)
    assert worker.request("PUT", "/connectors/c7/resume") == (202, None)
    wait_for(lambda: out.read_text() == "before\nwhile-paused\n", "record after resume", timeout=20.0)
    assert worker.request("DELETE", "/connectors/c7")[0] == 204


def test_unreachable_sink_fails_with_reason_then_restarts(
        worker: ConnectWorkerProcess, tmp_path: Path, topic_name: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A FAILED task's trace through REST and ``strom connector status``; ``strom connector
    restart --include-tasks --only-failed`` brings it back once its file can be written."""
    missing = tmp_path / "missing-dir"
    config = sink_config(tmp_path, topic_name, file=str(missing / "out.txt"))
    assert worker.request("PUT", "/connectors/c4/config", config)[0] == 201
    wait_for(lambda: state(worker, "c4") == ("RUNNING", ["FAILED"]), "task failed")
    status, body = worker.request("GET", "/connectors/c4/tasks/0/status")
    assert "No such file or directory" in body["trace"]
    assert main(["connector", "status", "c4", "--url", worker.url]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2].split()[:3] == ["task", "0", "FAILED"]
    assert "No such file or directory" in out[-1]
    missing.mkdir()
    assert main(["connector", "restart", "c4", "--include-tasks", "--only-failed",
                 "--format", "json", "--url", worker.url]) == 0
    [doc] = json.loads(capsys.readouterr().out)
    assert doc["name"] == "c4" and doc["connector"]["state"] == "RUNNING"
    wait_for(lambda: state(worker, "c4") == ("RUNNING", ["RUNNING"]), "task restarted")
    assert worker.request("DELETE", "/connectors/c4")[0] == 204


def test_sink_topics_regex_matches_whole_names_and_new_topics(
        worker: ConnectWorkerProcess, broker: BrokerProcess, tmp_path: Path,
        topic_name: str) -> None:
    """``topics.regex`` as Kafka's consumer matches it: the whole name, Java-like syntax
    (``\\d``), topics created later picked up at the next metadata refresh."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap})
    sent = {f"{topic_name}-1": ["a1", "a2"], f"{topic_name}-2": ["b1"],
            f"{topic_name}-1x": ["prefix-only"], f"{topic_name}-x": ["other"]}
    for topic, values in sent.items():
        for v in values:  # one partition each: a1 before a2 is an order within a partition
            producer.produce(topic, v.encode(), partition=0)
    assert producer.flush(10) == 0
    out = tmp_path / "out.txt"
    regex = topic_name + r"-\d"
    config = {"connector.class": "FileStreamSink", "topics.regex": regex, "file": str(out),
              "consumer.override.metadata.max.age.ms": "500"}
    bad = {**config, "topics.regex": "(", "errors.deadletterqueue.topic.name": "x"}
    status, body = worker.request("PUT", "/connectors/rx/config", bad)
    assert status == 400 and "topics.regex: Invalid regex" in body["message"]
    dlq = {**config, "errors.deadletterqueue.topic.name": f"{topic_name}-9"}
    status, body = worker.request("PUT", "/connectors/rx/config", dlq)
    assert status == 400 and "may not be included in the regex matching" in body["message"]
    assert worker.request("PUT", "/connectors/rx/config", config)[0] == 201
    wait_for(lambda: out.exists() and len(out.read_text().splitlines()) == 3, "3 lines")
    producer.produce(f"{topic_name}-3", b"c1", partition=0)  # a new topic the regex matches
    assert producer.flush(10) == 0
    lines = wait_for(lambda: (x := out.read_text().splitlines()) and len(x) >= 4 and x,
                     "the new topic's record")
    assert sorted(lines) == ["a1", "a2", "b1", "c1"]  # nothing of -1x and -x
    assert lines.index("a1") < lines.index("a2") and lines[-1] == "c1"
    assert worker.request("DELETE", "/connectors/rx")[0] == 204


def test_validate_endpoint(worker: ConnectWorkerProcess) -> None:
    status, body = worker.request("PUT", "/connector-plugins/FileStreamSource/config/validate",
                                  {"connector.class": "FileStreamSource", "name": "v",
                                   "topic": "a,b", "file": "/tmp/x"})
    assert status == 200
    assert body["name"] == "org.apache.kafka.connect.file.FileStreamSourceConnector"
    assert body["error_count"] == 1
    errors = {c["value"]["name"]: c["value"]["errors"] for c in body["configs"]}
    assert errors["topic"] and "single topic" in errors["topic"][0]
    definition = {c["definition"]["name"]: c["definition"] for c in body["configs"]}
    assert definition["batch.size"]["default_value"] == "2000"
    assert definition["file"]["required"] is True
    status, body = worker.request("PUT", "/connector-plugins/FileStreamSink/config/validate",
                                  {"connector.class": "FileStreamSource"})
    assert status == 400 and "does not match request type FileStreamSink" in body["message"]


def test_connector_cli(worker: ConnectWorkerProcess, tmp_path: Path, topic_name: str,
                       capsys: pytest.CaptureFixture[str]) -> None:
    """``strom connector`` in-process (fast); the error path once as a real subprocess."""
    url = ["--url", worker.url]

    def cli(*args: str) -> str:
        code = main(["connector", *args, *url])
        out, err = capsys.readouterr()
        assert code == 0, err
        return out

    spec = tmp_path / "c5.json"
    spec.write_text(json.dumps({"name": "c5", "config": sink_config(tmp_path, topic_name)}))
    assert json.loads(cli("create", "-f", str(spec), "--format", "json"))[0]["name"] == "c5"
    assert "c5" in cli("list")
    wait_for(lambda: state(worker, "c5") == ("RUNNING", ["RUNNING"]), "running")
    [status] = json.loads(cli("status", "c5", "--format", "json"))
    assert status["connector"]["state"] == "RUNNING"
    assert {"name": "c5", "type": "sink", "state": "RUNNING",
            "tasks": [{"id": 0, "state": "RUNNING"}]} in json.loads(cli("list", "--format",
                                                                         "json"))
    assert f"topics={topic_name}" in cli("config", "c5").splitlines()
    assert cli("pause", "c5") == "Paused connector c5\n"
    assert state(worker, "c5")[0] == "PAUSED"
    cli("resume", "c5")
    assert state(worker, "c5")[0] == "RUNNING"
    [restarted] = json.loads(cli("restart", "c5", "--include-tasks", "--format", "json"))
    assert restarted["name"] == "c5"
    assert "org.apache.kafka.connect.file.FileStreamSinkConnector" in cli("plugins")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "bad", "connector.class": "FileStreamSink"}))
    assert main(["connector", "create", "-f", str(bad), *url]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "contains the following 3 error(s)" in err
    assert "(HTTP 400)" in err
    cli("delete", "c5")
    line = assert_clean_error(strom("connector", "status", "c5", *url))
    assert line == "strom: error: Connector c5 not found (HTTP 404)"
    assert main(["connector", "list", "--url", "http://127.0.0.1:1"]) == 1
    assert "cannot reach the Connect worker" in capsys.readouterr().err


def test_offsets_endpoints(worker: ConnectWorkerProcess, broker: BrokerProcess,
                           tmp_path: Path, topic_name: str) -> None:
    from confluent_kafka import Producer

    create_topic(broker.bootstrap, topic_name, partitions=1)  # the offsets of one partition
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(3):
        producer.produce(topic_name, f"v{i}".encode())
    assert producer.flush(10) == 0
    (tmp_path / "in.txt").write_text("a\nb\n")
    source = {"connector.class": "FileStreamSource", "topic": topic_name,
              "file": str(tmp_path / "in.txt")}
    worker.request("PUT", "/connectors/src6/config", source)
    worker.request("PUT", "/connectors/snk6/config", sink_config(tmp_path, topic_name))
    wait_for(lambda: (tmp_path / "out.txt").exists()
             and len((tmp_path / "out.txt").read_text().splitlines()) >= 5, "sink output")
    # Offsets are stored at each flush interval (500 ms) and when the tasks stop.
    for name in ("src6", "snk6"):
        assert worker.request("PATCH", f"/connectors/{name}/offsets", {"offsets": []}) == (
            400, {"error_code": 400, "message": offsets_not_stopped(name)})
        assert worker.request("PUT", f"/connectors/{name}/stop") == (204, None)
    status, body = worker.request("GET", "/connectors/src6/offsets")
    assert (status, body) == (200, {"offsets": [
        {"partition": {"filename": str(tmp_path / "in.txt")}, "offset": {"position": 4}}]})
    status, body = worker.request("GET", "/connectors/snk6/offsets")
    assert (status, body) == (200, {"offsets": [
        {"partition": {"kafka_topic": topic_name, "kafka_partition": 0},
         "offset": {"kafka_offset": 5}}]})
    patch = {"offsets": [{"partition": {"filename": str(tmp_path / "in.txt")},
                          "offset": {"position": 2}}]}
    assert worker.request("PATCH", "/connectors/src6/offsets", patch)[0] == 200
    assert worker.request("GET", "/connectors/src6/offsets")[1]["offsets"][0]["offset"] == {
        "position": 2}
    status, body = worker.request("DELETE", "/connectors/src6/offsets")
    assert (status, body["message"]) == (
        200, "The offsets for this connector have been reset successfully")
    assert worker.request("GET", "/connectors/src6/offsets") == (200, {"offsets": []})
    # A sink's offsets are its group's: rewound to 3 while stopped, it writes 3 and 4 again.
    patch = {"offsets": [{"partition": {"kafka_topic": topic_name, "kafka_partition": 0},
                          "offset": {"kafka_offset": 3}}]}
    assert worker.request("PATCH", "/connectors/snk6/offsets", patch) == (
        200, {"message": "The offsets for this connector have been altered successfully"})
    assert worker.request("GET", "/connectors/snk6/offsets")[1]["offsets"][0]["offset"] == {
        "kafka_offset": 3}
    written = (tmp_path / "out.txt").read_text().splitlines()
    assert sorted(written) == ["a", "b", "v0", "v1", "v2"]
    assert worker.request("PUT", "/connectors/snk6/resume") == (202, None)
    wait_for(lambda: (tmp_path / "out.txt").read_text().splitlines()[5:] == written[3:],
             "records 3 and 4 written again")
    assert worker.request("PUT", "/connectors/snk6/stop") == (204, None)
    assert (tmp_path / "out.txt").read_text().splitlines() == written + written[3:]
    assert worker.request("DELETE", "/connectors/snk6/offsets")[0] == 200
    assert worker.request("GET", "/connectors/snk6/offsets") == (200, {"offsets": []})
    for name in ("src6", "snk6"):
        assert worker.request("DELETE", f"/connectors/{name}")[0] == 204


def offsets_not_stopped(name: str) -> str:
    return ("Connectors must be in the STOPPED state before their offsets can be modified. "
            "This can be done for the specified connector by issuing a 'PUT' request to the "
            "'/connectors/{name}/stop' endpoint")


def test_second_worker_on_a_taken_port_is_one_line(worker: ConnectWorkerProcess,
                                                   tmp_path: Path) -> None:
    props = tmp_path / "worker.properties"
    props.write_text(f"listeners={worker.url}\n"
                     f"offset.storage.file.filename={tmp_path / 'offsets'}\n"
                     "key.converter=org.apache.kafka.connect.storage.StringConverter\n"
                     "value.converter=org.apache.kafka.connect.storage.StringConverter\n"
                     "plugin.path=/usr/share/java\n")
    proc = strom("connect", "standalone", str(props))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    note, error = proc.stderr.strip().splitlines()
    assert "plugin.path is ignored" in note
    assert error.startswith(f"strom: error: cannot listen on 127.0.0.1:{worker.port}: ")
    assert worker.request("GET", "/")[0] == 200  # the running worker is untouched
