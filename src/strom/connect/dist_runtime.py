"""What a distributed worker runs locally: its assigned connectors and tasks, and their statuses.

The rebalance loop (:mod:`strom.connect.distributed`) decides *what* this worker owns; this
class starts and stops it and reacts to the config topic:

- a connector started here computes its task configs; when they differ from the committed
  ones they go to the leader (written directly when this worker leads, else ``POST
  /connectors/{name}/tasks`` on the leader), and every worker then stops its tasks of that
  connector, keeps them in its assignment and rejoins; those the new assignment leaves with
  it start again with the new configs (Kafka's incremental handling);
- a new or deleted connector makes every worker rejoin; an updated config restarts the
  connector where it runs; target states pause, resume or stop it here; restart requests
  restart what runs here.

Exactly-once sources (``exactly.once.source.support=enabled``, see :mod:`strom.connect.eos`):
an assigned source task whose connector is *pending fencing* (task configs committed after its
last task-count record) is held back; every tick this worker asks the leader (``PUT
/connectors/{name}/fence``, or directly when it leads) to fence the previous generation's
transactional ids and write the new task-count record, and the held tasks start when that
record is read.

Statuses go to the status topic on each change, written by the thread that made it (a task's
own thread when it starts or fails; ``worker_id`` = this worker, ``generation`` = the group
generation); UNASSIGNED is written on a stop only while the record still names this
worker, so a late stop never hides the new owner's RUNNING.
"""

from __future__ import annotations

import logging
import queue
import threading
import traceback
from typing import Any

from strom.connect import client_configs, eos
from strom.connect.api import ConnectorContext, SourceConnector
from strom.connect.forward import post_json
from strom.connect.group_protocol import ConnectorsAndTasks, TaskId
from strom.connect.herder import ConnectorRuntime, RestError, StandaloneHerder
from strom.connect.plugins import class_name, find_connector
from strom.connect.tasks import WorkerTask
from strom.connect.topic_log import TopicLog
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
        self.tasks_to_restart: set[TaskId] = set()  # stopped for new configs, still owned
        self.is_leader = False
        self.leader_url: str | None = None
        self.eos_mode = worker_config.get("exactly.once.source.support",
                                          "disabled").strip().lower()
        self.awaiting_fence: set[TaskId] = set()  # assigned, held until zombies are fenced
        self.fence_lock = threading.Lock()
        # Status writes come from the herder thread and from task threads. Taken after
        # ``self.lock`` (never the other way round), never held while a task is joined.
        self.publish_lock = threading.RLock()

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
            # Tasks started before these configs were read run old configs: stop them. They
            # stay this worker's in the rebalance that follows and start again, with the new
            # configs, if it leaves them here (Kafka's stopReconfiguredTasks). Dropped from
            # the running set, the leader would count them lost and, while a departed
            # worker's scheduled delay runs, hold them back for up to 5 minutes.
            old = [t for t in self.local_tasks if t[0] == name and
                   self.task_started_at.get(t, -1) <= event.offset]
            for tid in old:
                self.stop_task(tid)
            self.tasks_to_restart.update(old)
            if old or not stale:
                self.need_rejoin.set()
        elif event.kind == "target":
            self._apply_target(name, str(event.detail))
        elif event.kind == "task-count":
            for tid in sorted(t for t in self.awaiting_fence if t[0] == name):
                self.awaiting_fence.discard(tid)
                if tid in self.running.tasks:
                    self.start_task(tid)
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
            if self._exactly_once(rt.instance) and self.configs.pending_fencing(name):
                LOG.info("task %s-%d waits for the leader to fence zombies", name, index)
                self.awaiting_fence.add(tid)
                self.wake.set()
                return
            task = self._make_task(rt, index)
        except Exception as exc:  # noqa: BLE001 - the task's FAILED status
            self.publish_task(tid, "FAILED", "".join(traceback.format_exception(exc)))
            return
        task.set_paused(self.configs.target_state(name) == "PAUSED")
        task.on_state = self._task_state_changed
        self.local_tasks[tid] = task  # before it runs: its first state change is published
        self.task_started_at[tid] = read_up_to
        task.start()

    def stop_task(self, tid: TaskId, deleted: bool = False) -> None:
        self.awaiting_fence.discard(tid)
        task = self.local_tasks.pop(tid, None)
        if task is None:
            return
        task.stop()
        if not deleted and self.configs.get(tid[0]) is not None:
            self._publish_unassigned(tid, self.statuses.tasks_of(tid[0]).get(tid[1]))

    def restart_local_task(self, tid: TaskId) -> None:
        self.stop_task(tid)
        self.start_task(tid)

    # -- exactly-once sources -------------------------------------------------------------
    def _exactly_once(self, connector: object) -> bool:
        return self.eos_mode == "enabled" and isinstance(connector, SourceConnector)

    def _source_task(self, rt: ConnectorRuntime, index: int, common: dict[str, Any],
                     client_config: dict[str, Any]) -> WorkerTask:
        if not self._exactly_once(rt.instance):
            return super()._source_task(rt, index, common, client_config)
        w = self.worker_config
        boundary = rt.config.get("transaction.boundary", "poll").strip().lower()
        interval = rt.config.get("transaction.boundary.interval.ms", "").strip()
        interval_s = int(interval) / 1000 if interval else self.flush_interval_s
        global_topic = w["offset.storage.topic"].strip()
        topic = (rt.config.get("offsets.storage.topic") or "").strip() or global_topic
        own = None
        if topic != global_topic:
            bootstrap = w.get("bootstrap.servers", "localhost:9092")
            partitions = int(w.get("offset.storage.partitions", "25"))
            replication = int(w.get("offset.storage.replication.factor", "3"))
            client_id = f"{w['group.id']}-offsets-{rt.name}-{index}-{self.worker_id}"
            own = OffsetTopicStore(lambda on_record: TopicLog(
                bootstrap, topic, partitions=partitions, replication=replication,
                client_id=client_id, on_record=on_record,
                client_config=client_configs.worker_client(w)))
        return eos.ExactlyOnceWorkerSourceTask(
            **common, client_config=client_config, offsets=self.offsets,
            transactional_id=eos.transactional_id(w["group.id"].strip(), rt.name, index),
            boundary=boundary, interval_s=interval_s, offsets_topic=topic,
            connector_offsets=own)

    def request_fences(self) -> None:
        """Ask the leader to fence the zombies of connectors whose tasks wait here."""
        for name in sorted({t[0] for t in self.awaiting_fence}):
            try:
                if self.is_leader:
                    self.fence_zombies(name)
                elif self.leader_url:
                    url = f"{self.leader_url.rstrip('/')}/connectors/{name}/fence?forward=true"
                    status = post_json(url, None, method="PUT")
                    if status >= 300:
                        raise OSError(f"leader answered {status}")
            except Exception as exc:  # noqa: BLE001 - retried on the next tick
                LOG.warning("zombie fencing of %s not done yet: %s", name, exc)

    def fence_zombies(self, name: str) -> None:
        """The leader's part: fence every transactional id the connector's previous task
        generation may still use, then write the task-count record of the current one."""
        with self.fence_lock:
            if not self.configs.pending_fencing(name):
                return
            with self.configs.lock:
                previous = self.configs.task_count_records.get(name, 0)
                current = len(self.configs.task_configs.get(name, []))
            group = self.worker_config["group.id"].strip()
            client = client_configs.task_client(self.worker_config, "producer", {})
            try:
                eos.fence_producers(client, [eos.transactional_id(group, name, i)
                                             for i in range(max(previous, current))])
            except Exception as exc:  # noqa: BLE001 - one readable reason for the caller
                raise RestError(500, f"Failed to fence zombie tasks of {name}: {exc}") from None
            self.configs.put_task_count_record(name, current)
            LOG.info("connector %s: zombies fenced, task count %d", name, current)

    # -- statuses -----------------------------------------------------------------------
    def publish_connector(self, name: str, state: str, trace: str | None) -> None:
        with self.publish_lock:
            self.published[("connector", name)] = (state, trace)
            self.statuses.put_connector(name, state, trace, self.worker_id, self.generation)

    def publish_task(self, tid: TaskId, state: str, trace: str | None) -> None:
        with self.publish_lock:
            self.published[tid] = (state, trace)
            self.statuses.put_task(tid, state, trace, self.worker_id, self.generation)

    def _publish_unassigned(self, key: object, current: dict[str, object] | None) -> None:
        with self.publish_lock:
            self.published.pop(key, None)
            if current is None or current.get("worker_id") != self.worker_id:
                return  # another worker already owns it: its status stands
            if isinstance(key, tuple) and key and key[0] == "connector":
                self.statuses.put_connector(str(key[1]), "UNASSIGNED", None, self.worker_id,
                                            self.generation)
            elif isinstance(key, tuple):
                self.statuses.put_task((str(key[0]), int(key[1])), "UNASSIGNED", None,
                                       self.worker_id, self.generation)

    def _task_state_changed(self, task: WorkerTask) -> None:
        """A local task changed state (on its own thread, or pause/resume): publish it now,
        so the status never shows an older state than the task is in for longer than a
        write takes. A task already stopped here (its successor may run) is not published."""
        tid = (task.connector, task.task_id)
        with self.publish_lock:
            if self.local_tasks.get(tid) is task:
                self._publish_if_changed(tid, task)

    def _publish_if_changed(self, tid: TaskId, task: WorkerTask) -> None:
        state = (task.state, task.trace)
        if state[0] != "UNASSIGNED" and self.published.get(tid) != state:
            self.publish_task(tid, *state)

    def publish_task_states(self) -> None:
        """Write the status of every local task whose state changed and was not published
        yet (a write that failed when the task changed state is retried here)."""
        for tid, task in list(self.local_tasks.items()):
            with self.publish_lock:
                self._publish_if_changed(tid, task)

    def restart_reconfigured_tasks(self) -> None:
        """After a rebalance: start again the tasks stopped for new configs that are still
        assigned here (the others were revoked, or the assignment starts them)."""
        for tid in sorted(self.tasks_to_restart):
            if tid in self.running.tasks and tid not in self.local_tasks:
                self.start_task(tid)
        self.tasks_to_restart.clear()

    def stop_everything(self) -> None:
        self.tasks_to_restart.clear()
        for tid in list(self.local_tasks):
            self.stop_task(tid)
        for name in list(self.local_connectors):
            self.stop_connector(name)
        self.running = ConnectorsAndTasks()
