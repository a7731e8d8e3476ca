"""Which consumer offsets a sink task commits, on every path that commits, in both worker modes.

Kafka's rule: an offset is committed only once ``put`` of its record returned and the task's
``pre_commit`` (flush) confirmed it; a failed or stopped task commits nothing past the last
record it delivered. Each test drives one path on a real broker and a real worker process
(standalone, then distributed), fixes the cause through ``PUT /config`` (which restarts the
task, as Kafka does) and checks that every record arrives at least once, in order, and that
the group's committed offset ends at the end of the topic. The sink is FileStreamSink, or the
probe of :mod:`tests.integration.connect_probe` where ``put``/``flush`` must fail.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from strom.testing.connect import ConnectWorkerProcess
from strom.testing.process import free_port
from tests.integration.clients import create_topic
from tests.integration.connect_helpers import connect_broker, wait_for

PROBE = "tests.integration.connect_probe.ProbeSinkConnector"
JSON = "org.apache.kafka.connect.json.JsonConverter"
STRING = "org.apache.kafka.connect.storage.StringConverter"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    yield from connect_broker(tmp_path_factory)


@pytest.fixture(scope="module", params=["standalone", "distributed"])
def runtime(request: pytest.FixtureRequest, broker: Any,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectWorkerProcess]:
    """One worker of each mode on the module's broker (offsets committed every 500 ms)."""
    proc = ConnectWorkerProcess(tmp_path_factory.mktemp(request.param), broker.bootstrap,
                                distributed=request.param == "distributed")
    proc.start()
    try:
        wait_for(lambda: proc.request("GET", "/connectors")[0] == 200, "the worker's REST API",
                 timeout=60)
        yield proc
    finally:
        proc.stop()


def call(worker: ConnectWorkerProcess, method: str, path: str, body: object = None,
         ok: tuple[int, ...] = (200, 201, 202, 204)) -> Any:
    """The request's body once it is answered with one of ``ok`` (a distributed worker
    answers 409 while its group rebalances)."""
    def attempt() -> Any:
        status, answer = worker.request(method, path, body)
        if status in ok:
            return [answer]
        assert status == 409, (status, answer)
        return None

    return wait_for(attempt, f"{method} {path}", timeout=60, interval=0.3)[0]


def task_state(worker: ConnectWorkerProcess, name: str) -> dict[str, Any] | None:
    status, body = worker.request("GET", f"/connectors/{name}/status")
    if status != 200 or not body["tasks"]:
        return None
    task: dict[str, Any] = body["tasks"][0]
    return task


def produce(bootstrap: str, topic: str, values: list[str], partition: int = 0) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for v in values:
        p.produce(topic, v.encode(), partition=partition)
    assert p.flush(15) == 0


def committed(bootstrap: str, name: str, topic: str, partition: int = 0) -> int | None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"connect-{name}"})
    try:
        offset = c.committed([TopicPartition(topic, partition)], timeout=10)[0].offset
    finally:
        c.close()
    return offset if offset >= 0 else None


def group_left(bootstrap: str, name: str) -> bool:
    """The task's consumer has left its group: its closing commit is done."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    group = f"connect-{name}"
    described = admin.describe_consumer_groups([group])[group].result(15)
    return not described.members


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def first_seen(values: list[str]) -> list[str]:
    """``values`` without the repeats an at-least-once replay may add."""
    return list(dict.fromkeys(values))


def wait_failed(worker: ConnectWorkerProcess, name: str, bootstrap: str) -> str:
    def failed() -> str | None:
        task = task_state(worker, name)
        return task["trace"] if task and task["state"] == "FAILED" else None

    trace: str = wait_for(failed, f"task {name}-0 FAILED", timeout=45)
    wait_for(lambda: group_left(bootstrap, name), f"the consumer of {name} closed")
    return trace


def fix_and_restart(worker: ConnectWorkerProcess, name: str, config: dict[str, str]) -> None:
    """Kafka's way out of a failure: correct the config, restart the task."""
    call(worker, "PUT", f"/connectors/{name}/config", config)
    call(worker, "POST", f"/connectors/{name}/tasks/0/restart", ok=(204,))


def delivered_all(worker: ConnectWorkerProcess, broker: Any, name: str, topic: str,
                  out: Path, expected: list[str], end: int | None = None) -> None:
    """Every record of ``expected`` in the file, in order (repeats allowed), and the
    committed offset at ``end`` (the topic's end: one record per expected value by default)."""
    got = wait_for(lambda: first_seen(lines(out)) == expected and lines(out),
                   f"{expected} in {out.name}", timeout=45)
    assert set(got) == set(expected), got
    end = len(expected) if end is None else end
    wait_for(lambda: committed(broker.bootstrap, name, topic) == end,
             f"committed offset {end}", timeout=30)
    task = task_state(worker, name)
    assert task is not None and task["state"] == "RUNNING", task


@pytest.fixture
def cleanup(runtime: ConnectWorkerProcess) -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for name in names:
        call(runtime, "DELETE", f"/connectors/{name}", ok=(204, 404))


def start(worker: ConnectWorkerProcess, cleanup: list[str], name: str,
          config: dict[str, str]) -> None:
    cleanup.append(name)
    call(worker, "POST", "/connectors", {"name": name, "config": config}, ok=(201,))


def connector_name(topic: str) -> str:
    return "c-" + topic[-12:]


def test_converter_failure_commits_nothing_and_a_restart_delivers_every_record(
        runtime: ConnectWorkerProcess, broker: Any, tmp_path: Path, topic_name: str,
        cleanup: list[str]) -> None:
    """The issue's run: plain text through JsonConverter with schemas (none is JSON)."""
    values = [f"p{i}" for i in range(1, 6)]
    create_topic(broker.bootstrap, topic_name, 1)
    produce(broker.bootstrap, topic_name, values)
    name, out = connector_name(topic_name), tmp_path / "out.txt"
    config = {"connector.class": "FileStreamSink", "topics": topic_name, "file": str(out),
              "value.converter": JSON}
    start(runtime, cleanup, name, config)
    trace = wait_failed(runtime, name, broker.bootstrap)
    assert "Tolerance exceeded in error handler" in trace
    assert committed(broker.bootstrap, name, topic_name) is None
    assert lines(out) == []
    fix_and_restart(runtime, name, {**config, "value.converter": STRING})
    delivered_all(runtime, broker, name, topic_name, out, values)


def test_transform_failure_commits_only_what_was_delivered(
        runtime: ConnectWorkerProcess, broker: Any, tmp_path: Path, topic_name: str,
        cleanup: list[str]) -> None:
    create_topic(broker.bootstrap, topic_name, 1)
    name, out = connector_name(topic_name), tmp_path / "out.txt"
    config = {"connector.class": "FileStreamSink", "topics": topic_name, "file": str(out),
              "transforms": "cast",
              "transforms.cast.type": "org.apache.kafka.connect.transforms.Cast$Value",
              "transforms.cast.spec": "int32"}
    start(runtime, cleanup, name, config)
    produce(broker.bootstrap, topic_name, ["1", "2"])
    wait_for(lambda: lines(out) == ["1", "2"], "the first two records")
    produce(broker.bootstrap, topic_name, ["x", "4", "5"])
    trace = wait_failed(runtime, name, broker.bootstrap)
    assert "Value 'x' cannot be cast to int32" in trace
    assert committed(broker.bootstrap, name, topic_name) == 2  # delivered, nothing past
    fix_and_restart(runtime, name, {k: v for k, v in config.items()
                                    if not k.startswith("transforms")})
    delivered_all(runtime, broker, name, topic_name, out, ["1", "2", "x", "4", "5"])


def test_put_failure_commits_only_what_was_delivered(
        runtime: ConnectWorkerProcess, broker: Any, tmp_path: Path, topic_name: str,
        cleanup: list[str]) -> None:
    create_topic(broker.bootstrap, topic_name, 1)
    name, out = connector_name(topic_name), tmp_path / "out.txt"
    config = {"connector.class": PROBE, "topics": topic_name, "file": str(out),
              "probe.fail.value": "p3"}
    start(runtime, cleanup, name, config)
    produce(broker.bootstrap, topic_name, ["p1", "p2"])
    wait_for(lambda: lines(out) == ["p1", "p2"], "the first two records")
    produce(broker.bootstrap, topic_name, ["p3", "p4", "p5"])
    assert "probe: put refused p3" in wait_failed(runtime, name, broker.bootstrap)
    assert committed(broker.bootstrap, name, topic_name) == 2
    fix_and_restart(runtime, name, {**config, "probe.fail.value": ""})
    delivered_all(runtime, broker, name, topic_name, out, ["p1", "p2", "p3", "p4", "p5"])


def test_failed_task_is_reported_before_it_has_finished_closing(
        runtime: ConnectWorkerProcess, broker: Any, tmp_path: Path, topic_name: str,
        cleanup: list[str]) -> None:
    """The status says FAILED once the failure is caught, not after the closing commit
    (here a flush that takes 8 s after the failure) and the consumer's close."""
    create_topic(broker.bootstrap, topic_name, 1)
    name, out = connector_name(topic_name), tmp_path / "out.txt"
    config = {"connector.class": PROBE, "topics": topic_name, "file": str(out),
              "probe.fail.value": "p2", "probe.flush.delay.ms": "8000"}
    start(runtime, cleanup, name, config)
    produce(broker.bootstrap, topic_name, ["p1"])
    wait_for(lambda: committed(broker.bootstrap, name, topic_name) == 1, "offset 1 committed")
    wait_for(lambda: (task_state(runtime, name) or {}).get("state") == "RUNNING", "RUNNING")
    produce(broker.bootstrap, topic_name, ["p2"])
    failed_at = time.monotonic()
    task = wait_for(lambda: (t := task_state(runtime, name)) and t["state"] != "RUNNING" and t,
                    "a state other than RUNNING", timeout=30, interval=0.05)
    assert task["state"] == "FAILED" and "probe: put refused p2" in task["trace"], task
    assert time.monotonic() - failed_at < 4.0
    wait_for(lambda: group_left(broker.bootstrap, name), "the consumer closed", timeout=30)
    assert committed(broker.bootstrap, name, topic_name) == 1


def test_retried_put_is_not_committed_when_the_task_stops(
        runtime: ConnectWorkerProcess, broker: Any, tmp_path: Path, topic_name: str,
        cleanup: list[str]) -> None:
    """RetriableError: the batch is delivered again and again; stopping the task meanwhile
    (here by the config update) must not commit it."""
    create_topic(broker.bootstrap, topic_name, 1)
    name, out = connector_name(topic_name), tmp_path / "out.txt"
    puts = Path(str(out) + ".puts")
    config = {"connector.class": PROBE, "topics": topic_name, "file": str(out),
              "probe.fail.value": "p3", "probe.fail.mode": "retriable"}
    start(runtime, cleanup, name, config)
    produce(broker.bootstrap, topic_name, ["p1", "p2"])
    wait_for(lambda: lines(out) == ["p1", "p2"], "the first two records")
    wait_for(lambda: committed(broker.bootstrap, name, topic_name) == 2, "offset 2 committed")
    attempts = len(lines(puts))
    produce(broker.bootstrap, topic_name, ["p3", "p4", "p5"])
    wait_for(lambda: len(lines(puts)) >= attempts + 3, "put retried")
    time.sleep(1.0)  # two commit intervals while the batch waits
    task = task_state(runtime, name)
    assert task is not None and task["state"] == "RUNNING", task
    assert committed(broker.bootstrap, name, topic_name) == 2
    assert lines(out) == ["p1", "p2"]
    call(runtime, "PUT", f"/connectors/{name}/config", {**config, "probe.fail.value": ""})
    delivered_all(runtime, broker, name, topic_name, out, ["p1", "p2", "p3", "p4", "p5"])


def test_failed_flush_commits_nothing_and_delivers_again(
        runtime: ConnectWorkerProcess, broker: Any, tmp_path: Path, topic_name: str,
        cleanup: list[str]) -> None:
    """``pre_commit`` (flush) fails: no commit, the task rewinds to the last committed offset
    and goes on (as Kafka's); records put since are delivered again."""
    create_topic(broker.bootstrap, topic_name, 1)
    name, out = connector_name(topic_name), tmp_path / "out.txt"
    config = {"connector.class": PROBE, "topics": topic_name, "file": str(out),
              "probe.fail.value": "p3", "probe.fail.mode": "flush"}
    start(runtime, cleanup, name, config)
    produce(broker.bootstrap, topic_name, ["p1", "p2"])
    wait_for(lambda: committed(broker.bootstrap, name, topic_name) == 2, "offset 2 committed")
    produce(broker.bootstrap, topic_name, ["p3", "p4", "p5"])
    # Rewound and delivered again after a failed flush: p3 is written a second time.
    wait_for(lambda: lines(out).count("p3") >= 2, "p3 delivered again after the rewind")
    task = task_state(runtime, name)
    assert task is not None and task["state"] == "RUNNING", task
    assert committed(broker.bootstrap, name, topic_name) == 2
    call(runtime, "PUT", f"/connectors/{name}/config", {**config, "probe.fail.value": ""})
    delivered_all(runtime, broker, name, topic_name, out, ["p1", "p2", "p3", "p4", "p5"])


def test_tolerated_records_commit_only_once_in_the_dead_letter_queue(
        runtime: ConnectWorkerProcess, broker: Any, tmp_path: Path, topic_name: str,
        cleanup: list[str]) -> None:
    """errors.tolerance=all: a record counts as delivered once it is in the DLQ; when the DLQ
    cannot take it, the task fails without committing it."""
    create_topic(broker.bootstrap, topic_name, 1)
    name, out = connector_name(topic_name), tmp_path / "out.txt"
    dlq = f"{topic_name}-dlq"
    config = {"connector.class": "FileStreamSink", "topics": topic_name, "file": str(out),
              "value.converter": JSON, "value.converter.schemas.enable": "false",
              "errors.tolerance": "all", "errors.deadletterqueue.topic.name": "no such topic!",
              "errors.deadletterqueue.topic.replication.factor": "1"}
    start(runtime, cleanup, name, config)
    produce(broker.bootstrap, topic_name, ['"p1"'])
    wait_for(lambda: lines(out) == ["p1"], "the first record")
    produce(broker.bootstrap, topic_name, ["oops", '"p3"'])
    assert "Could not create the DLQ topic" in wait_failed(runtime, name, broker.bootstrap)
    assert committed(broker.bootstrap, name, topic_name) == 1
    fix_and_restart(runtime, name, {**config, "errors.deadletterqueue.topic.name": dlq})
    delivered_all(runtime, broker, name, topic_name, out, ["p1", "p3"], end=3)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"check-{dlq}"})
    c.assign([TopicPartition(dlq, 0, 0)])
    try:
        dead = wait_for(lambda: [m for m in c.consume(10, 0.5) if m.error() is None],
                        "the DLQ record")
    finally:
        c.close()
    assert [m.value() for m in dead] == [b"oops"]


def test_paused_task_commits_what_it_delivered_and_resumes_after_a_restart(
        runtime: ConnectWorkerProcess, broker: Any, tmp_path: Path, topic_name: str,
        cleanup: list[str]) -> None:
    create_topic(broker.bootstrap, topic_name, 1)
    name, out = connector_name(topic_name), tmp_path / "out.txt"
    config = {"connector.class": "FileStreamSink", "topics": topic_name, "file": str(out)}
    start(runtime, cleanup, name, config)
    produce(broker.bootstrap, topic_name, ["p1", "p2"])
    wait_for(lambda: lines(out) == ["p1", "p2"], "the first two records")
    call(runtime, "PUT", f"/connectors/{name}/pause", ok=(202,))
    wait_for(lambda: (task_state(runtime, name) or {}).get("state") == "PAUSED", "PAUSED")
    produce(broker.bootstrap, topic_name, ["p3", "p4"])
    wait_for(lambda: committed(broker.bootstrap, name, topic_name) == 2, "offset 2 committed")
    call(runtime, "POST", f"/connectors/{name}/tasks/0/restart", ok=(204,))
    time.sleep(1.0)
    assert lines(out) == ["p1", "p2"]  # paused, also after the restart
    assert committed(broker.bootstrap, name, topic_name) == 2
    call(runtime, "PUT", f"/connectors/{name}/resume", ok=(202,))
    delivered_all(runtime, broker, name, topic_name, out, ["p1", "p2", "p3", "p4"])


@contextlib.contextmanager
def another_member(bootstrap: str, name: str, topic: str) -> Iterator[dict[int, int]]:
    """A consumer joins the sink task's group (a rebalance revokes the task's partitions)
    and holds its share, reading nothing, until it leaves; yields the committed offsets of
    that share as they were when it was assigned."""
    seen: dict[int, int] = {}

    def assigned(c: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in c.committed(partitions, timeout=10):
            seen[tp.partition] = tp.offset

    other = Consumer({"bootstrap.servers": bootstrap, "group.id": f"connect-{name}",
                      "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    other.subscribe([topic], on_assign=assigned)
    try:
        def joined() -> dict[int, int]:
            other.consume(1, 0.2)  # joins the group; reads nothing past the committed offset
            return seen

        wait_for(joined, "the other member's share")
        yield seen
    finally:
        other.close()  # leaves without committing


def test_revoked_partitions_commit_what_was_delivered_and_lose_nothing(
        runtime: ConnectWorkerProcess, broker: Any, tmp_path: Path, topic_name: str,
        cleanup: list[str]) -> None:
    """Another member joins the sink's consumer group: the task commits the revoked
    partitions; records produced while the other member holds a partition arrive once it
    leaves (without committing anything)."""
    create_topic(broker.bootstrap, topic_name, 2)
    name, out = connector_name(topic_name), tmp_path / "out.txt"
    config = {"connector.class": "FileStreamSink", "topics": topic_name, "file": str(out)}
    start(runtime, cleanup, name, config)
    first = {0: ["a0", "a1"], 1: ["b0", "b1"]}
    for partition, values in first.items():
        produce(broker.bootstrap, topic_name, values, partition)
    wait_for(lambda: sorted(lines(out)) == ["a0", "a1", "b0", "b1"], "the first records")
    with another_member(broker.bootstrap, name, topic_name) as seen:
        assert set(seen.values()) == {2}, seen  # committed when revoked from the task
        for partition in (0, 1):
            produce(broker.bootstrap, topic_name, [f"{'ab'[partition]}{i}" for i in (2, 3)],
                    partition)
        time.sleep(1.0)
    expected = {"a0", "a1", "a2", "a3", "b0", "b1", "b2", "b3"}
    wait_for(lambda: set(lines(out)) == expected, "every record", timeout=45)
    for partition, prefix in ((0, "a"), (1, "b")):
        in_order = first_seen([v for v in lines(out) if v.startswith(prefix)])
        assert in_order == [f"{prefix}{i}" for i in range(4)]
        wait_for(lambda p=partition: committed(broker.bootstrap, name, topic_name, p) == 4,
                 f"partition {partition} committed to 4")


def test_revocation_while_a_batch_waits_for_redelivery(
        runtime: ConnectWorkerProcess, broker: Any, tmp_path: Path, topic_name: str,
        cleanup: list[str]) -> None:
    """The group rebalances while ``put`` keeps raising RetriableError: the consumer is still
    polled, so the task takes part; it commits only what was delivered, drops the waiting
    batch with the partitions, and delivers it again once it has them back."""
    create_topic(broker.bootstrap, topic_name, 2)
    name, out = connector_name(topic_name), tmp_path / "out.txt"
    puts = Path(str(out) + ".puts")
    config = {"connector.class": PROBE, "topics": topic_name, "file": str(out),
              "probe.fail.value": "p3", "probe.fail.mode": "retriable"}
    start(runtime, cleanup, name, config)
    produce(broker.bootstrap, topic_name, ["p1", "p2"])
    wait_for(lambda: committed(broker.bootstrap, name, topic_name) == 2, "offset 2 committed")
    attempts = len(lines(puts))
    produce(broker.bootstrap, topic_name, ["p3", "p4", "p5"])
    wait_for(lambda: len(lines(puts)) >= attempts + 2, "put retried")
    with another_member(broker.bootstrap, name, topic_name) as seen:
        assert seen.get(0, 2) == 2, seen  # if it took partition 0: nothing past p2
    retried = len(lines(puts))
    wait_for(lambda: len(lines(puts)) >= retried + 2, "put retried with the partitions back")
    assert committed(broker.bootstrap, name, topic_name) == 2
    assert lines(out) == ["p1", "p2"]
    call(runtime, "PUT", f"/connectors/{name}/config", {**config, "probe.fail.value": ""})
    delivered_all(runtime, broker, name, topic_name, out, ["p1", "p2", "p3", "p4", "p5"])


@pytest.mark.parametrize("mode", ["standalone", "distributed"])
def test_worker_without_converters_refuses_to_start(tmp_path: Path, mode: str) -> None:
    props = {"bootstrap.servers": f"127.0.0.1:{free_port()}",
             "listeners": f"http://127.0.0.1:{free_port()}",
             "offset.storage.file.filename": str(tmp_path / "offsets"),
             "group.id": "g", "config.storage.topic": "c", "offset.storage.topic": "o",
             "status.storage.topic": "s", "value.converter": STRING}
    for missing in (["key.converter"], ["key.converter", "value.converter"]):
        worker = tmp_path / "worker.properties"
        worker.write_text("".join(f"{k}={v}\n" for k, v in props.items() if k not in missing))
        done = subprocess.run([sys.executable, "-m", "strom", "connect", mode, str(worker)],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode != 0
        [line] = done.stderr.strip().splitlines()
        assert all(f'"{k}"' in line for k in missing), line
        assert "no default value" in line



def test_reconfigured_task_is_back_at_once_while_a_departed_workers_work_waits(
        broker: Any, tmp_path: Path, topic_name: str) -> None:
    """Two workers; the second leaves with a task (the leader holds that task back for
    ``scheduled.rebalance.max.delay.ms``, as Kafka's). A failed task fixed by ``PUT /config``
    on the remaining worker must not wait for that delay: it is still this worker's."""
    suffix = topic_name[-8:]
    settings = {"group.id": f"cluster-{suffix}", "config.storage.topic": f"configs-{suffix}",
                "offset.storage.topic": f"offsets-{suffix}",
                "status.storage.topic": f"status-{suffix}",
                "scheduled.rebalance.max.delay.ms": "90000"}
    workers = [ConnectWorkerProcess(tmp_path / f"w{i}", broker.bootstrap, distributed=True,
                                    settings=settings) for i in (1, 2)]
    try:
        for w in workers:
            w.start()
            wait_for(lambda w=w: w.request("GET", "/connectors")[0] == 200, "REST", timeout=60)
        first, second = workers
        spread = f"{topic_name}-spread"
        create_topic(broker.bootstrap, spread, 2)
        call(first, "POST", "/connectors", {"name": "spread", "config": {
            "connector.class": "FileStreamSink", "topics": spread, "tasks.max": "2",
            "file": str(tmp_path / "spread.txt")}}, ok=(201,))

        def owners() -> set[str]:
            status, body = first.request("GET", "/connectors/spread/status")
            tasks = body["tasks"] if status == 200 else []
            return {t["worker_id"] for t in tasks if t["state"] == "RUNNING"}

        wait_for(lambda: owners() == {first.worker_id, second.worker_id},
                 "a task on each worker", timeout=60)
        second.stop()  # leaves with spread-1: held back for the delay
        create_topic(broker.bootstrap, topic_name, 1)
        values = [f"p{i}" for i in range(1, 6)]
        produce(broker.bootstrap, topic_name, values)
        name, out = connector_name(topic_name), tmp_path / "out.txt"
        config = {"connector.class": "FileStreamSink", "topics": topic_name, "file": str(out),
                  "value.converter": JSON}
        call(first, "POST", "/connectors", {"name": name, "config": config}, ok=(201,))
        wait_failed(first, name, broker.bootstrap)
        assert committed(broker.bootstrap, name, topic_name) is None
        fixed_at = time.monotonic()
        fix_and_restart(first, name, {**config, "value.converter": STRING})
        delivered_all(first, broker, name, topic_name, out, values)
        assert time.monotonic() - fixed_at < 45  # not after the 90 s delay
    finally:
        for w in workers:
            w.stop()
