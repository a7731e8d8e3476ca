"""Distributed stores replaying Kafka Connect's records (no broker: a fake log)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from strom.connect.forward import NO_LEADER, TOO_MANY_HOPS, ForwardRequest, forward
from strom.connect.herder import RestError
from strom.connect.topic_stores import (
    ConfigEvent,
    ConfigTopicStore,
    OffsetTopicStore,
    StatusTopicStore,
)


class FakeLog:
    """Records what is sent and replays it, as the broker would hand it back."""

    def __init__(self, on_record: Any) -> None:
        self.on_record = on_record
        self.records: list[tuple[bytes, bytes | None]] = []

    def send(self, records: list[tuple[bytes, bytes | None]]) -> None:
        for key, value in records:
            self.on_record(key, value, 0, len(self.records))
            self.records.append((key, value))

    def read_to_end(self, timeout: float = 30.0) -> bool:
        return True


def replay(store_log: FakeLog, key: str, value: Any) -> None:
    raw = None if value is None else json.dumps(value).encode()
    store_log.send([(key.encode(), raw)])


def test_config_records_apply_tasks_only_on_a_complete_commit() -> None:
    events: list[ConfigEvent] = []
    store = ConfigTopicStore(FakeLog, events.append)
    log = store.log
    assert isinstance(log, FakeLog)
    replay(log, "connector-c", {"properties": {"connector.class": "X", "tasks.max": "2"}})
    replay(log, "task-c-0", {"properties": {"a": "0"}})
    assert store.tasks_of("c") == [] and store.snapshot().task_counts == {"c": 0}
    replay(log, "commit-c", {"tasks": 2})  # task 1 missing: inconsistent, as Kafka
    assert "c" in store.inconsistent and store.snapshot().task_counts == {"c": 0}
    replay(log, "task-c-0", {"properties": {"a": "0"}})
    replay(log, "task-c-1", {"properties": {"a": "1"}})
    replay(log, "commit-c", {"tasks": 2})
    assert store.tasks_of("c") == [{"a": "0"}, {"a": "1"}]
    assert store.snapshot().task_counts == {"c": 2} and store.snapshot().offset == 6
    replay(log, "target-state-c", {"state": "PAUSED", "state.v2": "STOPPED"})
    assert store.target_state("c") == "STOPPED"
    replay(log, "connector-c", None)
    assert store.names() == [] and store.snapshot().task_counts == {}
    assert [e.kind for e in events] == ["connector", "tasks", "tasks", "target", "connector"]
    assert events[-1].detail is True


def test_config_writes_use_kafka_connect_keys_and_values() -> None:
    store = ConfigTopicStore(FakeLog, lambda e: None)
    log = store.log
    assert isinstance(log, FakeLog)
    store.put("n", {"k": "v"})
    store.put_task_configs("n", [{"t": "1"}])
    store.set_target_state("n", "STOPPED")
    store.put_restart_request("n", True, False)
    store.remove("n")
    assert [(k.decode(), json.loads(v) if v else None) for k, v in log.records] == [
        ("connector-n", {"properties": {"k": "v"}}),
        ("task-n-0", {"properties": {"t": "1"}}),
        ("commit-n", {"tasks": 1}),
        ("target-state-n", {"state": "PAUSED", "state.v2": "STOPPED"}),
        ("restart-connector-n", {"include-tasks": True, "only-failed": False}),
        ("connector-n", None), ("target-state-n", None)]


def test_offsets_keyed_connector_and_partition_with_tombstones() -> None:
    store = OffsetTopicStore(FakeLog)
    log = store.log
    assert isinstance(log, FakeLog)
    store.put_all("src", {json.dumps({"filename": "/f"}): {"position": 42}})
    assert log.records[-1] == (b'["src",{"filename":"/f"}]', b'{"position":42}')
    assert store.get("src", {"filename": "/f"}) == {"position": 42}
    store.forget("src")
    assert log.records[-1] == (b'["src",{"filename":"/f"}]', None)
    assert store.entries("src") == []


def test_status_records() -> None:
    store = StatusTopicStore(FakeLog)
    store.put_task(("my-conn", 3), "RUNNING", None, "h:1", 4)
    assert store.log.records[-1] == (  # type: ignore[attr-defined]
        b"status-task-my-conn-3",
        b'{"state":"RUNNING","trace":null,"worker_id":"h:1","generation":4}')
    assert store.tasks_of("my-conn") == {3: {"state": "RUNNING", "trace": None,
                                             "worker_id": "h:1", "generation": 4}}
    store.delete("my-conn", 0)
    assert store.tasks_of("my-conn") == {}


class LaggingLog(FakeLog):
    """Acknowledges at once, hands the records back only when :meth:`read` is called (the
    reader thread's lag), interleaved with other workers' records as the broker ordered them."""

    def __init__(self, on_record: Any) -> None:
        super().__init__(on_record)
        self.unread: list[tuple[bytes, bytes | None]] = []

    def send(self, records: list[tuple[bytes, bytes | None]]) -> None:
        self.unread += records

    def read(self) -> Iterator[None]:
        """Hand the records back one at a time (yield after each)."""
        while self.unread:
            key, value = self.unread.pop(0)
            self.on_record(key, value, 0, len(self.records))
            self.records.append((key, value))
            yield


def test_status_view_never_steps_back_to_a_replaced_own_write() -> None:
    store = StatusTopicStore(LaggingLog)
    log = store.log
    assert isinstance(log, LaggingLog)
    key = b"status-task-c-0"

    def other(state: str) -> tuple[bytes, bytes]:
        return key, json.dumps({"state": state, "worker_id": "other:1"}).encode()

    log.unread.append(other("FAILED"))  # another worker's, before ours in the log
    store.put_task(("c", 0), "UNASSIGNED", None, "me:1", 2)
    store.put_task(("c", 0), "RUNNING", None, "me:1", 2)
    assert store.tasks_of("c")[0]["state"] == "RUNNING"
    for _ in log.read():  # FAILED, UNASSIGNED, RUNNING read back: the view stays on RUNNING
        assert store.tasks_of("c")[0]["state"] == "RUNNING"
    log.unread.append(other("RUNNING"))  # the task moved: a later record wins
    list(log.read())
    assert store.tasks_of("c")[0]["worker_id"] == "other:1"
    store.put_task(("c", 0), "UNASSIGNED", None, "me:1", 3)
    log.unread.append(other("PAUSED"))  # after ours in the log
    states = [store.tasks_of("c")[0]["state"] for _ in log.read()]
    assert states == ["UNASSIGNED", "PAUSED"]


def test_forwarding_hops_and_unknown_leader() -> None:
    with pytest.raises(RestError) as exc:
        forward(ForwardRequest(None, "x"), "POST", "/connectors", [], b"")
    assert (exc.value.status, exc.value.message) == (409, NO_LEADER)
    with pytest.raises(RestError) as exc:
        forward(ForwardRequest("http://127.0.0.1:1/", "x"), "POST", "/connectors",
                [("forward", "false")], b"")
    assert (exc.value.status, exc.value.message) == (409, TOO_MANY_HOPS)
    with pytest.raises(RestError) as exc:  # nobody listens there
        forward(ForwardRequest("http://127.0.0.1:1/", "x"), "POST", "/connectors", [], b"{}")
    assert exc.value.status == 500
