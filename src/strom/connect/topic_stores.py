"""Distributed mode's backing stores on compacted topics, in Kafka Connect's record formats.

Values are JSON as Kafka's internal JsonConverter writes them (schemas disabled, compact,
UTF-8); a null value is a tombstone.

Config topic (``config.storage.topic``, one partition), string keys:

- ``connector-<name>``: ``{"properties": {...}}`` (null: the connector was deleted)
- ``task-<name>-<n>``: ``{"properties": {...}}``, applied only when the following
  ``commit-<name>``: ``{"tasks": N}`` arrives with all N task configs seen (else the connector
  is *inconsistent* until its next commit, as Kafka)
- ``target-state-<name>``: ``{"state": "STARTED"|"PAUSED", "state.v2": "STARTED"|"PAUSED"|
  "STOPPED"}`` (``state`` says PAUSED for STOPPED, for older readers)
- ``restart-connector-<name>``: ``{"include-tasks": bool, "only-failed": bool}``

Offset topic (``offset.storage.topic``): key ``["<connector>",{source partition}]``, value the
source offset. Status topic (``status.storage.topic``): ``status-connector-<name>`` and
``status-task-<name>-<n>`` -> ``{"state", "trace", "worker_id", "generation"}``.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from strom.connect.assignor import ConfigSnapshot
from strom.connect.backing import ConfigBackingStore, MemoryOffsetBackingStore, _key
from strom.connect.topic_log import TopicLog

LOG = logging.getLogger("strom.connect.stores")


def dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _loads(raw: bytes | None) -> Any:
    return None if raw is None else json.loads(raw)


@dataclass
class ConfigEvent:
    kind: str  # connector | tasks | target | restart
    connector: str
    detail: Any = None
    offset: int = -1  # of the record in the config topic


class ConfigTopicStore(ConfigBackingStore):
    """The cluster's connector configs, task configs and target states, from the config topic."""

    def __init__(self, make_log: Callable[..., TopicLog],
                 listener: Callable[[ConfigEvent], None]) -> None:
        self.lock = threading.RLock()
        self.connectors: dict[str, dict[str, str]] = {}
        self.task_configs: dict[str, list[dict[str, str]]] = {}
        self.task_counts: dict[str, int] = {}
        self.targets: dict[str, str] = {}
        self.deferred: dict[str, dict[int, dict[str, str]]] = {}
        self.inconsistent: set[str] = set()
        self.offset = -1  # position after the last record read (Kafka's config offset)
        self.listener = listener
        self.log = make_log(self._on_record)

    def _on_record(self, key: bytes | None, raw: bytes | None, _p: int, offset: int) -> None:
        name = (key or b"").decode()
        value = _loads(raw)
        event: ConfigEvent | None = None
        with self.lock:
            self.offset = offset + 1
            if name.startswith("connector-"):
                connector = name[len("connector-"):]
                if value is None:
                    self.connectors.pop(connector, None)
                    self.task_configs.pop(connector, None)
                    self.task_counts.pop(connector, None)
                    self.targets.pop(connector, None)
                else:
                    self.connectors[connector] = dict(value.get("properties") or {})
                event = ConfigEvent("connector", connector, value is None)
            elif name.startswith("task-"):
                connector, _, index = name[len("task-"):].rpartition("-")
                if value is not None and index.isdigit():
                    props = dict(value.get("properties") or {})
                    self.deferred.setdefault(connector, {})[int(index)] = props
            elif name.startswith("commit-"):
                connector = name[len("commit-"):]
                deferred = self.deferred.pop(connector, {})
                count = int((value or {}).get("tasks", 0))
                if connector not in self.connectors:
                    return  # deleted before its tasks were committed (compaction left this)
                if set(deferred) != set(range(count)):
                    self.inconsistent.add(connector)
                else:
                    self.inconsistent.discard(connector)
                    self.task_configs[connector] = [deferred[i] for i in range(count)]
                self.task_counts[connector] = count
                event = ConfigEvent("tasks", connector)
            elif name.startswith("target-state-"):
                connector = name[len("target-state-"):]
                if value is None:
                    self.targets.pop(connector, None)
                    return
                self.targets[connector] = value.get("state.v2") or value.get("state", "STARTED")
                event = ConfigEvent("target", connector, self.targets[connector])
            elif name.startswith("restart-connector-") and value is not None:
                event = ConfigEvent("restart", name[len("restart-connector-"):],
                                    (bool(value.get("include-tasks")),
                                     bool(value.get("only-failed"))))
        if event is not None:
            event.offset = offset
            self.listener(event)

    # -- reads --------------------------------------------------------------------------
    def get(self, name: str) -> dict[str, str] | None:
        with self.lock:
            config = self.connectors.get(name)
            return dict(config) if config is not None else None

    def names(self) -> list[str]:
        with self.lock:
            return sorted(self.connectors)

    def target_state(self, name: str) -> str:
        with self.lock:
            return self.targets.get(name, "STARTED")

    def tasks_of(self, name: str) -> list[dict[str, str]]:
        with self.lock:
            return [dict(c) for c in self.task_configs.get(name, [])]

    def snapshot(self) -> ConfigSnapshot:
        with self.lock:
            counts = {c: (0 if c in self.inconsistent else self.task_counts.get(c, 0))
                      for c in self.connectors}
            return ConfigSnapshot(self.offset, counts)

    # -- writes (the leader's, except target states and restarts) -------------------------
    def put(self, name: str, config: dict[str, str], target: str | None = None) -> None:
        records = []
        if target is not None:
            records.append(self._target_record(name, target))
        records.append((f"connector-{name}".encode(), dumps({"properties": config})))
        self.log.send(records)
        self.log.read_to_end()

    def remove(self, name: str) -> None:
        self.log.send([(f"connector-{name}".encode(), None),
                       (f"target-state-{name}".encode(), None)])
        self.log.read_to_end()

    def put_task_configs(self, name: str, configs: list[dict[str, str]]) -> None:
        self.log.read_to_end()
        self.log.send([(f"task-{name}-{i}".encode(), dumps({"properties": c}))
                       for i, c in enumerate(configs)])
        self.log.send([(f"commit-{name}".encode(), dumps({"tasks": len(configs)}))])
        self.log.read_to_end()

    @staticmethod
    def _target_record(name: str, state: str) -> tuple[bytes, bytes]:
        legacy = "PAUSED" if state == "STOPPED" else state
        return (f"target-state-{name}".encode(), dumps({"state": legacy, "state.v2": state}))

    def set_target_state(self, name: str, state: str) -> None:
        self.log.send([self._target_record(name, state)])
        self.log.read_to_end()

    def put_restart_request(self, name: str, include_tasks: bool, only_failed: bool) -> None:
        self.log.send([(f"restart-connector-{name}".encode(),
                        dumps({"include-tasks": include_tasks, "only-failed": only_failed}))])
        self.log.read_to_end()


class OffsetTopicStore(MemoryOffsetBackingStore):
    """Source offsets in the offset topic; every worker tails it, any worker writes."""

    def __init__(self, make_log: Callable[..., TopicLog]) -> None:
        super().__init__()
        self.log = make_log(self._on_record)

    def _on_record(self, key: bytes | None, raw: bytes | None, _p: int, _o: int) -> None:
        try:
            connector, partition = json.loads(key or b"null")
        except (TypeError, ValueError):
            LOG.warning("offset topic: key %r is not [connector, partition]", key)
            return
        with self._lock:
            if raw is None:
                self._data.pop(_key(connector, partition), None)
            else:
                self._data[_key(connector, partition)] = json.loads(raw)

    def put_all(self, connector: str, offsets: dict[str, dict[str, Any]]) -> None:
        self.put_all_or_remove(connector, [(json.loads(p), o) for p, o in offsets.items()])

    def put_all_or_remove(self, connector: str,
                          offsets: list[tuple[dict[str, Any], dict[str, Any] | None]]) -> None:
        records = [(_key(connector, p).encode(), None if o is None else dumps(o))
                   for p, o in offsets]
        self.log.send(records)  # acknowledged before it counts (at-least-once)
        with self._lock:
            for partition, offset in offsets:
                if offset is None:
                    self._data.pop(_key(connector, partition), None)
                else:
                    self._data[_key(connector, partition)] = offset

    def forget(self, connector: str) -> None:
        self.put_all_or_remove(connector, [(p, None) for p, _ in self.entries(connector)])


class StatusTopicStore:
    """Connector and task statuses; each worker writes those of what it runs."""

    def __init__(self, make_log: Callable[..., TopicLog]) -> None:
        self.lock = threading.Lock()
        self.connectors: dict[str, dict[str, Any]] = {}
        self.tasks: dict[tuple[str, int], dict[str, Any]] = {}
        self.log = make_log(self._on_record)

    def _on_record(self, key: bytes | None, raw: bytes | None, _p: int, _o: int) -> None:
        name = (key or b"").decode()
        value = _loads(raw)
        with self.lock:
            if name.startswith("status-connector-"):
                connector = name[len("status-connector-"):]
                if value is None:
                    self.connectors.pop(connector, None)
                else:
                    self.connectors[connector] = value
            elif name.startswith("status-task-"):
                connector, _, index = name[len("status-task-"):].rpartition("-")
                if not index.isdigit():
                    return
                if value is None:
                    self.tasks.pop((connector, int(index)), None)
                else:
                    self.tasks[(connector, int(index))] = value

    @staticmethod
    def _value(state: str, trace: str | None, worker_id: str, generation: int) -> bytes:
        return dumps({"state": state, "trace": trace, "worker_id": worker_id,
                      "generation": generation})

    def put_connector(self, name: str, state: str, trace: str | None, worker_id: str,
                      generation: int) -> None:
        value = self._value(state, trace, worker_id, generation)
        self.log.send([(f"status-connector-{name}".encode(), value)])
        with self.lock:
            self.connectors[name] = json.loads(value)

    def put_task(self, task: tuple[str, int], state: str, trace: str | None, worker_id: str,
                 generation: int) -> None:
        value = self._value(state, trace, worker_id, generation)
        self.log.send([(f"status-task-{task[0]}-{task[1]}".encode(), value)])
        with self.lock:
            self.tasks[task] = json.loads(value)

    def delete(self, name: str, task_count: int) -> None:
        with self.lock:
            ids = {i for (c, i) in self.tasks if c == name} | set(range(task_count))
        self.log.send([(f"status-connector-{name}".encode(), None)] +
                      [(f"status-task-{name}-{i}".encode(), None) for i in sorted(ids)])
        with self.lock:
            self.connectors.pop(name, None)
            for i in ids:
                self.tasks.pop((name, i), None)

    def connector(self, name: str) -> dict[str, Any] | None:
        with self.lock:
            return self.connectors.get(name)

    def tasks_of(self, name: str) -> dict[int, dict[str, Any]]:
        with self.lock:
            return {i: v for (c, i), v in self.tasks.items() if c == name}
