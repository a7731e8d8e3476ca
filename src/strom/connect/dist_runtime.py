"""What a distributed worker runs locally: its assigned connectors and tasks, and their statuses.

The rebalance loop (:mod:`strom.connect.distributed`) decides *what* this worker owns; this
class starts and stops it and reacts to the config topic:

- a connector started here computes its task configs; when they differ from the committed
  ones they go to the leader (written directly when this worker leads, else ``POST
  /connectors/{name}/tasks`` on the leader), and every worker then stops its tasks of that
  connector and rejoins, so the new configs are assigned (Kafka's incremental handling);
- a new or deleted connector makes every worker rejoin; an updated config restarts the
  connector where it runs; target states pause, resume or stop it here; restart requests
  restart what runs here.

Statuses go to the status topic on each change (``worker_id`` = this worker, ``generation`` =
the group generation); UNASSIGNED is written on a stop only while the record still names this
worker, so a late stop never hides the new owner's RUNNING.
"""

from __future__ import annotations

import logging
import queue
import threading
import traceback

from strom.connect.api import ConnectorContext
from strom.connect.forward import post_json
from strom.connect.group_protocol import ConnectorsAndTasks, TaskId
from strom.connect.herder import ConnectorRuntime, StandaloneHerder
from strom.connect.plugins import class_name, find_connector
from strom.connect.tasks import WorkerTask
from strom.connect.topic_stores import (
    ConfigEvent,
    ConfigTopicStore,
    OffsetTopicStore,
    StatusTopicStore,
)

LOG = logging.getLogger("strom.connect.distributed")


class DistributedRuntime(StandaloneHerder):
    configs: ConfigTopicStore
    offsets: OffsetTopicStore

    def __init__(self, worker_id: str, worker_config: dict[str, str],
                 offsets: OffsetTopicStore, configs: ConfigTopicStore,
                 statuses: StatusTopicStore) -> None:
        super().__init__(worker_id, worker_config, offsets, configs)
        self.statuses = statuses
        self.running = ConnectorsAndTasks()
        self.local_connectors: dict[str, ConnectorRuntime] = {}
        self.local_tasks: dict[TaskId, WorkerTask] = {}
        self.published: dict[object, tuple[str, str | None]] = {}
        self.events: queue.Queue[ConfigEvent] = queue.Queue()
        self.seen: set[str] = set()
        self.pending_task_configs: dict[str, list[dict[str, str]]] = {}
        self.need_rejoin = threading.Event()
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.generation = -1
        self.assigned_offset = -1  # config offset the last applied assignment was made at
        self.task_started_at: dict[TaskId, int] = {}  # config offset read when started
        self.is_leader = False
        self.leader_url: str | None = None

    def on_config_event(self, event: ConfigEvent) -> None:
        """Called by the config topic's reader thread: queue it for the herder thread."""
        self.events.put(event)
        self.wake.set()

    # -- config topic events (herder thread) ----------------------------------------------
    def drain_events(self) -> None:
        while True:
            try:
                event = self.events.get_nowait()
            except queue.Empty:
                return
            with self.lock:
                self._apply_event(event)

    def _apply_event(self, event: ConfigEvent) -> None:
        name = event.connector
        # A record the leader had read when it made the current assignment is accounted for
        # in it: no rebalance for that one (Kafka would rejoin anyway; this spares a round).
        stale = event.offset < self.assigned_offset
        if event.kind == "connector":
            if event.detail:  # removed
                self.seen.discard(name)
                if name in self.local_connectors:
                    self.stop_connector(name, deleted=True)
                for tid in [t for t in self.local_tasks if t[0] == name]:
                    self.stop_task(tid, deleted=True)
                if not stale:
                    self.need_rejoin.set()
            elif name not in self.seen:
                self.seen.add(name)
                if not stale:
                    self.need_rejoin.set()
            elif name in self.local_connectors:
                LOG.info("connector %s reconfigured: restarting it", name)
                self.stop_connector(name)
                self.start_connector(name)
        elif event.kind == "tasks":
            # Tasks started before these configs were read run old configs: stop them, and
            # the rebalance hands them out again with the new ones.
            old = [t for t in self.local_tasks if t[0] == name and
                   self.task_started_at.get(t, -1) <= event.offset]
            for tid in old:
                self.stop_task(tid)
            self.running.tasks = [t for t in self.running.tasks if t not in old]
            if old or not stale:
                self.need_rejoin.set()
        elif event.kind == "target":
            self._apply_target(name, str(event.detail))
        elif event.kind == "restart":
            include_tasks, only_failed = event.detail
            rt = self.local_connectors.get(name)
            if rt is not None and (not only_failed or rt.state == "FAILED"):
                self.stop_connector(name)
                self.start_connector(name)
            for tid, task in list(self.local_tasks.items()):
                if include_tasks and tid[0] == name and (not only_failed or
                                                         task.state == "FAILED"):
                    self.restart_local_task(tid)

    def _apply_target(self, name: str, target: str) -> None:
        rt = self.local_connectors.get(name)
        if rt is not None:
            if target == "STOPPED" or rt.state == "STOPPED":
                self.stop_connector(name)
                self.start_connector(name)
            elif rt.state in ("RUNNING", "PAUSED"):
                rt.state = "PAUSED" if target == "PAUSED" else "RUNNING"
                self.publish_connector(name, rt.state, None)
        for tid, task in self.local_tasks.items():
            if tid[0] == name:
                task.set_paused(target == "PAUSED")

    # -- connectors ---------------------------------------------------------------------
    def start_connector(self, name: str) -> None:
        config = self.configs.get(name)
        if config is None:
            return
        rt = ConnectorRuntime(name, config)
        target = self.configs.target_state(name)
        try:
            rt.instance = find_connector(config["connector.class"])()
            rt.instance.initialize(ConnectorContext(name))
            if target == "STOPPED":
                rt.state = "STOPPED"
            else:
                rt.instance.start(dict(config))
                max_tasks = int(config.get("tasks.max", "1"))
                task_class = class_name(rt.instance.task_class())
                configs = [{**c, "task.class": task_class}
                           for c in rt.instance.task_configs(max_tasks)[:max_tasks]]
                rt.state = "PAUSED" if target == "PAUSED" else "RUNNING"
                self.submit_task_configs(name, configs)
        except Exception as exc:  # noqa: BLE001 - the connector's FAILED status
            rt.state, rt.trace = "FAILED", "".join(traceback.format_exception(exc))
            LOG.error("connector %s failed: %s", name, exc)
        self.local_connectors[name] = rt
        self.publish_connector(name, rt.state, rt.trace)
        LOG.info("connector %s started here (%s)", name, rt.state)

    def stop_connector(self, name: str, deleted: bool = False) -> None:
        rt = self.local_connectors.pop(name, None)
        if rt is None:
            return
        if rt.instance is not None and rt.state in ("RUNNING", "PAUSED"):
            try:
                rt.instance.stop()
            except Exception:  # noqa: BLE001
                LOG.exception("connector %s stop failed", name)
        self.pending_task_configs.pop(name, None)
        if deleted:
            self.statuses.delete(name, 0)
        elif self.configs.get(name) is not None:
            self._publish_unassigned(("connector", name), self.statuses.connector(name))

    def submit_task_configs(self, name: str, configs: list[dict[str, str]]) -> None:
        with self.configs.lock:
            same = (configs == self.configs.task_configs.get(name) and
                    name not in self.configs.inconsistent and name in self.configs.task_counts)
        if same:
            return
        self.pending_task_configs[name] = configs
        self.retry_task_configs()

    def retry_task_configs(self) -> None:
        """Hand pending task configs to the leader (kept for the next tick if that fails)."""
        for name, configs in list(self.pending_task_configs.items()):
            try:
                if self.is_leader:
                    self.configs.put_task_configs(name, configs)
                elif self.leader_url:
                    url = f"{self.leader_url.rstrip('/')}/connectors/{name}/tasks?forward=true"
                    status = post_json(url, configs)
                    if status >= 300:
                        raise OSError(f"leader answered {status}")
                else:
                    continue
            except Exception as exc:  # noqa: BLE001 - retried on the next tick
                LOG.warning("task configs of %s not written yet: %s", name, exc)
                continue
            self.pending_task_configs.pop(name, None)

    # -- tasks --------------------------------------------------------------------------
    def start_task(self, tid: TaskId) -> None:
        name, index = tid
        read_up_to = self.configs.offset  # before the configs: never newer than they are
        config = self.configs.get(name)
        task_configs = self.configs.tasks_of(name)
        if config is None or index >= len(task_configs):
            LOG.warning("task %s-%d assigned without a committed config", name, index)
            return
        rt = ConnectorRuntime(name, config, task_configs=task_configs)
        try:
            rt.instance = find_connector(config["connector.class"])()
            task = self._make_task(rt, index)
        except Exception as exc:  # noqa: BLE001 - the task's FAILED status
            self.publish_task(tid, "FAILED", "".join(traceback.format_exception(exc)))
            return
        task.set_paused(self.configs.target_state(name) == "PAUSED")
        task.start()
        self.local_tasks[tid] = task
        self.task_started_at[tid] = read_up_to

    def stop_task(self, tid: TaskId, deleted: bool = False) -> None:
        task = self.local_tasks.pop(tid, None)
        if task is None:
            return
        task.stop()
        if not deleted and self.configs.get(tid[0]) is not None:
            self._publish_unassigned(tid, self.statuses.tasks_of(tid[0]).get(tid[1]))

    def restart_local_task(self, tid: TaskId) -> None:
        self.stop_task(tid)
        self.start_task(tid)

    # -- statuses -----------------------------------------------------------------------
    def publish_connector(self, name: str, state: str, trace: str | None) -> None:
        self.published[("connector", name)] = (state, trace)
        self.statuses.put_connector(name, state, trace, self.worker_id, self.generation)

    def publish_task(self, tid: TaskId, state: str, trace: str | None) -> None:
        self.published[tid] = (state, trace)
        self.statuses.put_task(tid, state, trace, self.worker_id, self.generation)

    def _publish_unassigned(self, key: object, current: dict[str, object] | None) -> None:
        self.published.pop(key, None)
        if current is None or current.get("worker_id") != self.worker_id:
            return  # another worker already owns it: its status stands
        if isinstance(key, tuple) and key and key[0] == "connector":
            self.statuses.put_connector(str(key[1]), "UNASSIGNED", None, self.worker_id,
                                        self.generation)
        elif isinstance(key, tuple):
            self.statuses.put_task((str(key[0]), int(key[1])), "UNASSIGNED", None,
                                   self.worker_id, self.generation)

    def publish_task_states(self) -> None:
        """Write the status of every local task whose state changed (tasks run on threads)."""
        for tid, task in list(self.local_tasks.items()):
            state = (task.state, task.trace)
            if state[0] != "UNASSIGNED" and self.published.get(tid) != state:
                self.publish_task(tid, *state)

    def stop_everything(self) -> None:
        for tid in list(self.local_tasks):
            self.stop_task(tid)
        for name in list(self.local_connectors):
            self.stop_connector(name)
        self.running = ConnectorsAndTasks()
