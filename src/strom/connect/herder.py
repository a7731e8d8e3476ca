"""The standalone herder: runs connectors and their tasks in this worker, answers the REST API.

Every public method is one REST operation, serialised by a lock, and raises
:class:`RestError` (HTTP status + Kafka Connect's message) for the API to render as
``{"error_code": status, "message": ...}``; connector configurations are checked by
:mod:`strom.connect.validation` before they are stored. Configs go through a
:class:`~strom.connect.backing.ConfigBackingStore`, source offsets through an
:class:`~strom.connect.backing.OffsetBackingStore` (distributed mode swaps both).
"""

from __future__ import annotations

import logging
import threading
import traceback
from dataclasses import dataclass, field
from typing import Any

from strom.connect import client_configs
from strom.connect import errors as errors_api
from strom.connect import offsets as offsets_api
from strom.connect.api import Connector, ConnectorContext
from strom.connect.backing import ConfigBackingStore, OffsetBackingStore
from strom.connect.converters import Converter
from strom.connect.plugins import class_name, find_connector, find_converter
from strom.connect.rest_error import RestError
from strom.connect.sink_task import WorkerSinkTask
from strom.connect.tasks import WorkerSourceTask, WorkerTask
from strom.connect.transforms import chain as transform_chain
from strom.connect.validation import checked_connector_config, validate_connector_config

__all__ = ["ConnectorRuntime", "RestError", "StandaloneHerder"]

LOG = logging.getLogger("strom.connect.herder")


@dataclass
class ConnectorRuntime:
    name: str
    config: dict[str, str]
    instance: Connector | None = None
    state: str = "UNASSIGNED"
    trace: str | None = None
    task_configs: list[dict[str, str]] = field(default_factory=list)
    tasks: list[WorkerTask] = field(default_factory=list)

    @property
    def type(self) -> str:
        return self.instance.connector_type if self.instance else "unknown"


class StandaloneHerder:
    #: ``exactly.once.source.support``: standalone workers have none (as Kafka's).
    eos_mode = "disabled"

    def __init__(self, worker_id: str, worker_config: dict[str, str],
                 offsets: OffsetBackingStore, configs: ConfigBackingStore) -> None:
        self.worker_id = worker_id
        self.worker_config = worker_config
        self.offsets = offsets
        self.configs = configs
        self.runtimes: dict[str, ConnectorRuntime] = {}
        self.lock = threading.RLock()
        interval = int(worker_config.get("offset.flush.interval.ms", "60000"))
        self.flush_interval_s = interval / 1000.0

    # -- validation ---------------------------------------------------------------------
    def validate(self, config: dict[str, str]) -> dict[str, Any]:
        """The body of ``/config/validate`` (Kafka's ConfigInfos)."""
        return validate_connector_config(config, self.eos_mode)

    # -- reads --------------------------------------------------------------------------
    def names(self) -> list[str]:
        with self.lock:
            return sorted(self.runtimes)

    def _get(self, name: str) -> ConnectorRuntime:
        runtime = self.runtimes.get(name)
        if runtime is None:
            raise RestError(404, f"Connector {name} not found")
        return runtime

    def info(self, name: str) -> dict[str, Any]:
        with self.lock:
            rt = self._get(name)
            return {"name": name, "config": dict(rt.config),
                    "tasks": [{"connector": name, "task": i}
                              for i in range(len(rt.task_configs))],
                    "type": rt.type}

    def config(self, name: str) -> dict[str, str]:
        with self.lock:
            return dict(self._get(name).config)

    def status(self, name: str) -> dict[str, Any]:
        with self.lock:
            rt = self._get(name)
            connector: dict[str, Any] = {"state": rt.state, "worker_id": self.worker_id}
            if rt.trace:
                connector["trace"] = rt.trace
            return {"name": name, "connector": connector,
                    "tasks": [self._task_status(t, i) for i, t in enumerate(rt.tasks)],
                    "type": rt.type}

    def _task_status(self, task: WorkerTask, index: int) -> dict[str, Any]:
        doc: dict[str, Any] = {"id": index, "state": task.state, "worker_id": self.worker_id}
        if task.trace:
            doc["trace"] = task.trace
        return doc

    def task_status(self, name: str, task_id: int) -> dict[str, Any]:
        with self.lock:
            rt = self._get(name)
            if not 0 <= task_id < len(rt.tasks):
                raise RestError(404, f"No status found for task {name}-{task_id}")
            return self._task_status(rt.tasks[task_id], task_id)

    def tasks(self, name: str) -> list[dict[str, Any]]:
        with self.lock:
            rt = self._get(name)
            return [{"id": {"connector": name, "task": i}, "config": dict(c)}
                    for i, c in enumerate(rt.task_configs)]

    # -- writes -------------------------------------------------------------------------
    def put_config(self, name: str, config: dict[str, str], *, allow_replace: bool
                   ) -> tuple[bool, dict[str, Any]]:
        """Create (or with ``allow_replace`` update) a connector; (created, info)."""
        config = checked_connector_config(name, config, self.eos_mode)
        with self.lock:
            exists = name in self.runtimes
            if exists and not allow_replace:
                raise RestError(409, f"Connector {name} already exists")
            if exists:
                self._stop_runtime(self.runtimes[name])
            self.configs.put(name, config)
            rt = ConnectorRuntime(name, config)
            self.runtimes[name] = rt
            self._start_runtime(rt)
            LOG.info("connector %s %s", name, "reconfigured" if exists else "created")
            return not exists, self.info(name)

    def delete(self, name: str) -> None:
        with self.lock:
            rt = self._get(name)
            self._stop_runtime(rt)
            del self.runtimes[name]
            self.configs.remove(name)
            LOG.info("connector %s deleted", name)

    def pause(self, name: str) -> None:
        self._set_target(name, "PAUSED")

    def resume(self, name: str) -> None:
        self._set_target(name, "STARTED")

    def stop(self, name: str) -> None:
        self._set_target(name, "STOPPED")

    def _set_target(self, name: str, target: str) -> None:
        with self.lock:
            rt = self._get(name)
            previous = self.configs.target_state(name)
            self.configs.set_target_state(name, target)
            if target == "STOPPED" or previous == "STOPPED":
                self._stop_runtime(rt)
                self._start_runtime(rt)
                return
            paused = target == "PAUSED"
            for task in rt.tasks:
                task.set_paused(paused)
            if rt.state in ("RUNNING", "PAUSED"):
                rt.state = "PAUSED" if paused else "RUNNING"

    def restart(self, name: str, include_tasks: bool, only_failed: bool) -> None:
        """Kafka's semantics: the Connector instance, plus its tasks with ``include_tasks``;
        with ``only_failed`` only instances that are FAILED."""
        with self.lock:
            rt = self._get(name)
            if not only_failed or rt.state == "FAILED":
                self._stop_runtime(rt, tasks=False)
                self._start_runtime(rt, with_tasks=not rt.tasks)
            if include_tasks:
                for i, task in enumerate(list(rt.tasks)):
                    if not only_failed or task.state == "FAILED":
                        self._restart_task(rt, i)

    def restart_task(self, name: str, task_id: int) -> None:
        with self.lock:
            rt = self._get(name)
            if not 0 <= task_id < len(rt.tasks):
                raise RestError(404, f"Task {name}-{task_id} not found")
            self._restart_task(rt, task_id)

    def connector_offsets(self, name: str, method: str, body: Any = None) -> dict[str, Any]:
        """KIP-875's offsets endpoints: GET any time, PATCH/DELETE only when STOPPED."""
        bootstrap = client_configs.admin_client(self.worker_config)
        with self.lock:
            rt = self._get(name)
            kind = rt.type
            if method != "GET" and self.configs.target_state(name) != "STOPPED":
                raise RestError(400, offsets_api.NOT_STOPPED)
            try:
                if method == "GET":
                    return offsets_api.read(kind, name, self.offsets, bootstrap)
                if method == "PATCH":
                    offsets_api.alter(kind, name, body, self.offsets, bootstrap)
                    return {"message": "The offsets for this connector have been altered "
                                       "successfully"}
                offsets_api.reset(kind, name, self.offsets, bootstrap)
                return {"message": "The offsets for this connector have been reset "
                                   "successfully"}
            except offsets_api.OffsetsError as exc:
                raise RestError(exc.status, exc.message) from None

    def shutdown(self) -> None:
        with self.lock:
            for rt in self.runtimes.values():
                self._stop_runtime(rt)

    # -- lifecycle ----------------------------------------------------------------------
    def _start_runtime(self, rt: ConnectorRuntime, with_tasks: bool = True) -> None:
        target = self.configs.target_state(rt.name)
        rt.trace = None
        try:
            cls = find_connector(rt.config["connector.class"])
            rt.instance = cls()
            rt.instance.initialize(ConnectorContext(rt.name))
            if target == "STOPPED":
                rt.state, rt.task_configs, rt.tasks = "STOPPED", [], []
                return
            rt.instance.start(dict(rt.config))
            max_tasks = int(rt.config.get("tasks.max", "1"))
            configs = rt.instance.task_configs(max_tasks)[:max_tasks]
        except Exception as exc:  # noqa: BLE001 - reported as the connector's FAILED status
            rt.state, rt.trace = "FAILED", "".join(traceback.format_exception(exc))
            LOG.error("connector %s failed: %s", rt.name, exc)
            return
        rt.state = "PAUSED" if target == "PAUSED" else "RUNNING"
        if with_tasks:
            rt.task_configs = [{**c, "task.class": class_name(rt.instance.task_class())}
                               for c in configs]
            rt.tasks = [self._make_task(rt, i) for i in range(len(rt.task_configs))]
            for task in rt.tasks:
                task.set_paused(target == "PAUSED")
                task.start()

    def _stop_runtime(self, rt: ConnectorRuntime, tasks: bool = True) -> None:
        for task in rt.tasks if tasks else ():
            task.stop()
        if rt.instance is not None and rt.state in ("RUNNING", "PAUSED"):
            try:
                rt.instance.stop()
            except Exception:  # noqa: BLE001
                LOG.exception("connector %s stop failed", rt.name)
        rt.state = "UNASSIGNED"

    def _restart_task(self, rt: ConnectorRuntime, index: int) -> None:
        rt.tasks[index].stop()
        rt.tasks[index] = self._make_task(rt, index)
        rt.tasks[index].set_paused(self.configs.target_state(rt.name) == "PAUSED")
        rt.tasks[index].start()

    def _converter(self, rt: ConnectorRuntime, which: str) -> Converter:
        """The connector's ``key.converter``/``value.converter`` or else the worker's (which
        the worker checked at start: there is no default, as in Kafka)."""
        source = rt.config if rt.config.get(which) else self.worker_config
        name = source[which]
        prefix = which + "."
        settings = {k[len(prefix):]: v for k, v in source.items() if k.startswith(prefix)}
        converter = find_converter(name)()
        converter.configure(settings, is_key=which == "key.converter")
        return converter

    def _make_task(self, rt: ConnectorRuntime, index: int) -> WorkerTask:
        assert rt.instance is not None
        task = rt.instance.task_class()()
        common = dict(connector=rt.name, task_id=index, task=task,
                      config=rt.task_configs[index],
                      key_converter=self._converter(rt, "key.converter"),
                      value_converter=self._converter(rt, "value.converter"),
                      flush_interval_s=self.flush_interval_s)
        base = {"client.id": f"connector-{rt.name}-{index}"}
        # producer.* / consumer.* (+ the connector's overrides) as Kafka: client_configs
        producer = {**base, **client_configs.task_client(
            self.worker_config, "producer", _overrides(rt.config, "producer"))}
        common["transforms"] = transform_chain.build_chain(rt.config)
        common["errors"] = errors_api.ErrorHandler(rt.name, index, rt.config,
                                                   sink=rt.type == "sink",
                                                   client_config=producer)
        if rt.type == "sink":
            consumer = {**base, **client_configs.task_client(
                self.worker_config, "consumer", _overrides(rt.config, "consumer"))}
            topics = [t.strip() for t in rt.config.get("topics", "").split(",") if t.strip()]
            return WorkerSinkTask(**common, client_config=consumer, topics=topics,
                                  topics_regex=rt.config.get("topics.regex") or None)
        return self._source_task(rt, index, common, producer)

    def _source_task(self, rt: ConnectorRuntime, index: int, common: dict[str, Any],
                     client_config: dict[str, Any]) -> WorkerTask:
        """The worker task of a source task (distributed mode may make it exactly-once)."""
        return WorkerSourceTask(**common, client_config=client_config, offsets=self.offsets)


def _overrides(config: dict[str, str], client: str) -> dict[str, str]:
    """``consumer.override.*``/``producer.override.*`` (KIP-458; Kafka 3's default policy
    ``All``, the only one strom has): they win over the worker's ``consumer.*``/``producer.*``."""
    prefix = f"{client}.override."
    return {k[len(prefix):]: v for k, v in config.items() if k.startswith(prefix)}
