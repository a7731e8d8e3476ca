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
- ``task-count-record-<name>``: ``{"task-count": N}``, written by the leader once it fenced
  the transactional ids of the connector's previous task generation (exactly-once sources,
  KIP-618); a connector whose ``commit-<name>`` came after its last task-count record is
  *pending fencing* and its exactly-once tasks do not start

Offset topic (``offset.storage.topic``): key ``["<connector>",{source partition}]``, value the
source offset. Status topic (``status.storage.topic``): ``status-connector-<name>`` and
``status-task-<name>-<n>`` -> ``{"state", "trace", "worker_id", "generation"}``.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
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
    kind: str  # connector | tasks | target | restart | task-count
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
        self.task_count_records: dict[str, int] = {}
        self.fence_pending: set[str] = set()
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
                    self.task_count_records.pop(connector, None)
                    self.fence_pending.discard(connector)
                else:
                    self.connectors[connector] = dict(value.get("properties") or {})
                event = ConfigEvent("connector", connector, value is None)
            elif name.startswith("task-count-record-") and (
                    value is None or "task-count" in value):  # not a task config's key
                connector = name[len("task-count-record-"):]
                if value is None or connector not in self.connectors:
                    return
                self.task_count_records[connector] = int(value.get("task-count", 0))
                self.fence_pending.discard(connector)
                event = ConfigEvent("task-count", connector,
                                    self.task_count_records[connector])
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
                self.fence_pending.add(connector)
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

    def pending_fencing(self, name: str) -> bool:
        with self.lock:
            return name in self.fence_pending

    def put_task_count_record(self, name: str, count: int) -> None:
        self.log.send([(f"task-count-record-{name}".encode(), dumps({"task-count": count}))])
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

    def remember(self, connector: str, offsets: dict[str, dict[str, Any]]) -> None:
        """Offsets written to the topic by someone else (a task's transaction, committed)."""
        with self._lock:
            for partition_json, offset in offsets.items():
                self._data[_key(connector, json.loads(partition_json))] = offset


class StatusTopicStore:
    """Connector and task statuses; each worker writes those of what it runs.

    The view shows this worker's own writes at once, and then stays on them: when the topic
    is read back, a record of this worker's that a later write of its own replaced is not
    applied again, nor is another worker's record read before that write (it is older in the
    log). Without that the view would step back each time a record is read back (RUNNING,
    then the UNASSIGNED written just before it, then RUNNING again).
    """

    def __init__(self, make_log: Callable[..., TopicLog]) -> None:
        self.lock = threading.Lock()
        self.send_lock = threading.Lock()  # one writer at a time: unread writes in log order
        self.connectors: dict[str, dict[str, Any]] = {}
        self.tasks: dict[tuple[str, int], dict[str, Any]] = {}
        self.unread: dict[bytes, deque[bytes | None]] = {}  # own writes not read back yet
        self.log = make_log(self._on_record)

    def _on_record(self, key: bytes | None, raw: bytes | None, _p: int, _o: int) -> None:
        key = key or b""
        with self.lock:
            own = self.unread.get(key)
            if own:
                if own[0] == raw:
                    own.popleft()
                if own:
                    return  # a write of ours comes later in the log: the view holds it
                del self.unread[key]
            self._apply(key, raw)

    def _apply(self, key: bytes, raw: bytes | None) -> None:
        name = key.decode()
        value = _loads(raw)
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

    def _send(self, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Write ``records`` and show them in the view (a write already read back is there,
        with whatever followed it in the log, and is not shown again)."""
        with self.send_lock:
            with self.lock:
                for key, value in records:
                    self.unread.setdefault(key, deque()).append(value)
            try:
                self.log.send(records)
            except Exception:
                with self.lock:  # not written (or unknown): read it like anyone else's
                    for key, _ in records:
                        own = self.unread.get(key)
                        if own:
                            own.pop()
                            if not own:
                                del self.unread[key]
                raise
            with self.lock:
                for key, value in records:
                    if key in self.unread:  # still unread: this write is the last of it
                        self._apply(key, value)

    def put_connector(self, name: str, state: str, trace: str | None, worker_id: str,
                      generation: int) -> None:
        value = self._value(state, trace, worker_id, generation)
        self._send([(f"status-connector-{name}".encode(), value)])

    def put_task(self, task: tuple[str, int], state: str, trace: str | None, worker_id: str,
                 generation: int) -> None:
        value = self._value(state, trace, worker_id, generation)
        self._send([(f"status-task-{task[0]}-{task[1]}".encode(), value)])

    def delete(self, name: str, task_count: int) -> None:
        with self.lock:
            ids = {i for (c, i) in self.tasks if c == name} | set(range(task_count))
        self._send([(f"status-connector-{name}".encode(), None)] +
                   [(f"status-task-{name}-{i}".encode(), None) for i in sorted(ids)])

    def connector(self, name: str) -> dict[str, Any] | None:
        with self.lock:
            return self.connectors.get(name)

    def tasks_of(self, name: str) -> dict[int, dict[str, Any]]:
        with self.lock:
            return {i: v for (c, i), v in self.tasks.items() if c == name}
