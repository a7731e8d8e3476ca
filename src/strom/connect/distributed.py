"""The distributed herder: group rebalances, and the REST operations of a distributed worker.

One thread runs the rebalance loop: join the group (protocol type ``connect``) offering the
protocols of ``connect.protocol``; the elected leader reads the config topic up to the highest
config offset any member reported (else it answers CONFIG_MISMATCH and everyone rejoins) and
assigns with the eager or the incremental cooperative assignor; each member applies what it
got (eager: it stopped everything before joining; cooperative: it stops only what is revoked,
rejoins at once after a revocation, and again after the announced ``delay``). Another thread
heartbeats every ``heartbeat.interval.ms`` while the member is stable and starts a rebalance
when the coordinator answers REBALANCE_IN_PROGRESS.

REST: reads come from the config and status topics; while a rebalance is under way (from the
moment one is needed until the new assignment is applied) the operations Kafka guards answer
409. Writes Kafka reserves to the leader (create, update, delete, stop, restart, offsets
changes, task configs) raise :class:`ForwardRequest` on other workers, and the REST layer
forwards them. Pause and resume are written by whichever worker is asked, as in Kafka.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from strom.connect import client_configs
from strom.connect import offsets as offsets_api
from strom.connect.assignor import EagerAssignor, IncrementalCooperativeAssignor, config_mismatch
from strom.connect.dist_runtime import DistributedRuntime
from strom.connect.forward import REBALANCE, ForwardRequest, worker_url
from strom.connect.group_protocol import (
    NAME_VERSIONS,
    NO_ERROR,
    Assignment,
    ConnectorsAndTasks,
    decode_assignment,
    decode_metadata,
    encode_assignment,
    join_protocols,
)
from strom.connect.group_protocol import WorkerState as MemberState
from strom.connect.herder import RestError
from strom.connect.membership import GroupMember, MembershipError
from strom.connect.plugins import find_connector
from strom.connect.topic_stores import ConfigTopicStore, OffsetTopicStore, StatusTopicStore
from strom.connect.validation import checked_connector_config
from strom.protocol.errors import ErrorCode

LOG = logging.getLogger("strom.connect.distributed")
_REJOIN_CODES = {int(ErrorCode.rebalance_in_progress), int(ErrorCode.illegal_generation),
                 int(ErrorCode.unknown_member_id)}


class DistributedHerder(DistributedRuntime):
    def __init__(self, worker_id: str, url: str, worker_config: dict[str, str], *,
                 member: GroupMember, mode: str, heartbeat_interval_ms: int, max_delay_ms: int,
                 offsets: OffsetTopicStore, configs: ConfigTopicStore,
                 statuses: StatusTopicStore) -> None:
        super().__init__(worker_id, worker_config, offsets, configs, statuses)
        self.url = url
        self.member = member
        self.mode = mode
        self.heartbeat_s = heartbeat_interval_ms / 1000
        self.assignor = IncrementalCooperativeAssignor(max_delay_ms,
                                                       lambda: time.monotonic() * 1000)
        self.rebalancing = True
        self.in_join = False
        self.protocol_version = -1
        self.last_completed_generation = -1
        self.leader_id: str | None = None
        self.rejoin_at: float | None = None
        self.threads: list[threading.Thread] = []

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        for store in (self.offsets, self.statuses, self.configs):
            store.log.start()
        self.seen = set(self.configs.names())
        while not self.events.empty():
            self.events.get_nowait()
        for target, name in ((self._run, "herder"), (self._heartbeats, "heartbeat")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self.threads.append(thread)

    def shutdown(self) -> None:
        self.stopping.set()
        self.wake.set()
        self.member.abort_join()  # a rebalance may hold the herder thread for a while
        for thread in self.threads:
            thread.join(30)
        with self.lock:
            self.stop_everything()
        self.member.leave()
        self.member.close()
        for store in (self.configs, self.statuses, self.offsets):
            store.log.stop()

    def _run(self) -> None:
        while not self.stopping.is_set():
            try:
                if self.need_rejoin.is_set() or self.generation < 0:
                    self._rebalance()
                elif self.rejoin_at is not None and time.monotonic() >= self.rejoin_at:
                    self.rejoin_at = None
                    self.need_rejoin.set()
                    continue
                self.drain_events()
                if self.need_rejoin.is_set():
                    self.rebalancing = True
                    continue
                with self.lock:
                    self.retry_task_configs()
                    self.request_fences()
                    self.publish_task_states()
            except MembershipError as exc:
                LOG.info("rebalance interrupted: %s", exc)
                self.need_rejoin.set()
                if exc.code not in _REJOIN_CODES:
                    self.stopping.wait(1.0)
                continue
            except Exception:  # noqa: BLE001 - the worker keeps going; the next tick retries
                LOG.exception("herder tick failed")
                if self.rebalancing:
                    self.need_rejoin.set()
                self.stopping.wait(1.0)
            self.wake.wait(0.2)
            self.wake.clear()

    def _heartbeats(self) -> None:
        while not self.stopping.wait(self.heartbeat_s):
            # Also while tasks start or stop after a rebalance (that can outlast a session),
            # never during the JoinGroup/SyncGroup round itself.
            if self.in_join or self.generation < 0:
                continue
            generation = self.generation
            try:
                code = self.member.heartbeat()
            except MembershipError as exc:
                LOG.warning("heartbeat failed: %s", exc)
                continue
            if code != 0 and generation == self.generation and not self.rebalancing:
                LOG.info("heartbeat: %s, rejoining", ErrorCode(code).name)
                self.rebalancing = True
                self.need_rejoin.set()
                self.wake.set()

    # -- rebalance ----------------------------------------------------------------------
    def _rebalance(self) -> None:
        self.rebalancing = True
        self.need_rejoin.clear()
        if self.protocol_version == 0 and not self.running.is_empty():
            with self.lock:
                self.stop_everything()  # eager: everything is revoked before joining
        current = None
        if not self.running.is_empty():
            current = Assignment(1, NO_ERROR, self.leader_id, self.leader_url,
                                 self.configs.offset, ConnectorsAndTasks(
                                     list(self.running.connectors), list(self.running.tasks)))
        state = MemberState(self.url, self.configs.offset, current)
        self.in_join = True
        try:
            join = self.member.join(join_protocols(self.mode, state))
            version = NAME_VERSIONS.get(join.protocol, 0)
            if version == 0 and not self.running.is_empty():
                with self.lock:
                    self.stop_everything()
            self.protocol_version = version
            assignments: dict[str, bytes] = {}
            if join.is_leader:
                assignments = {m: encode_assignment(a) for m, a in self._assign(
                    join.leader, join.members, version, join.generation).items()}
            assignment = decode_assignment(self.member.sync(assignments))
        finally:
            self.in_join = False
        self._apply(assignment, version, join.generation)

    def _assign(self, leader: str, raw: dict[str, bytes], version: int, generation: int
                ) -> dict[str, Assignment]:
        members = {m: decode_metadata(b) for m, b in raw.items()}
        max_offset = max(s.config_offset for s in members.values())
        if self.configs.offset < max_offset:
            self.configs.log.read_to_end()
        if self.configs.offset < max_offset:
            LOG.warning("leader behind the config topic (%d < %d)", self.configs.offset,
                        max_offset)
            return config_mismatch(members, leader, version, max_offset)
        snapshot = self.configs.snapshot()
        if version == 0:
            return EagerAssignor().assign(leader, members, snapshot)
        return self.assignor.assign(leader, members, snapshot, version,
                                    self.last_completed_generation, generation)

    def _apply(self, a: Assignment, version: int, generation: int) -> None:
        if a.error != NO_ERROR or self.configs.offset < a.config_offset:
            self.configs.log.read_to_end()
            if a.error != NO_ERROR or self.configs.offset < a.config_offset:
                LOG.warning("config topic behind the assignment's offset: rejoining")
                self.need_rejoin.set()
                return
        with self.lock:
            self.leader_id, self.leader_url = a.leader, a.leader_url
            self.is_leader = a.leader == self.member.member_id
            self.generation = generation
            self.assigned_offset = a.config_offset
            for name in a.revoked.connectors:
                self.stop_connector(name)
            for tid in a.revoked.tasks:
                self.stop_task(tid)
            self.running.connectors = [c for c in self.running.connectors
                                       if c not in a.revoked.connectors]
            self.running.tasks = [t for t in self.running.tasks if t not in a.revoked.tasks]
            if a.assigned.tasks:
                self.offsets.log.read_to_end()  # offsets another worker stored for them
            for name in a.assigned.connectors:
                if name not in self.running.connectors:
                    self.running.connectors.append(name)
                    self.start_connector(name)
            for tid in a.assigned.tasks:
                if tid not in self.running.tasks:
                    self.running.tasks.append(tid)
                    self.start_task(tid)
            self.restart_reconfigured_tasks()
        self.last_completed_generation = generation
        if version >= 1 and not a.revoked.is_empty():
            self.need_rejoin.set()
        if a.delay_ms > 0:
            self.rejoin_at = time.monotonic() + a.delay_ms / 1000
        LOG.info("generation %d (%s, leader %s%s): +%s/%s -%s/%s, delay %d ms", generation,
                 "eager" if version == 0 else "cooperative", a.leader_url,
                 " = this worker" if self.is_leader else "", a.assigned.connectors,
                 a.assigned.tasks, a.revoked.connectors, a.revoked.tasks, a.delay_ms)
        self.rebalancing = self.need_rejoin.is_set()

    # -- REST: reads ----------------------------------------------------------------------
    def _check_rebalance(self) -> None:
        if self.rebalancing:
            raise RestError(409, REBALANCE)

    def _leader_only(self, what: str) -> None:
        self._check_rebalance()
        if not self.is_leader:
            raise ForwardRequest(self.leader_url, what)

    def _config_of(self, name: str) -> dict[str, str]:
        config = self.configs.get(name)
        if config is None:
            raise RestError(404, f"Connector {name} not found")
        return config

    @staticmethod
    def _type(config: dict[str, str]) -> str:
        try:
            return find_connector(config["connector.class"]).connector_type or "unknown"
        except Exception:  # noqa: BLE001 - a connector class that vanished
            return "unknown"

    def names(self) -> list[str]:
        self._check_rebalance()
        return self.configs.names()

    def info(self, name: str) -> dict[str, Any]:
        self._check_rebalance()
        config = self._config_of(name)
        count = len(self.configs.tasks_of(name))
        return {"name": name, "config": config, "type": self._type(config),
                "tasks": [{"connector": name, "task": i} for i in range(count)]}

    def config(self, name: str) -> dict[str, str]:
        return self._config_of(name)

    def tasks(self, name: str) -> list[dict[str, Any]]:
        self._check_rebalance()
        self._config_of(name)
        return [{"id": {"connector": name, "task": i}, "config": c}
                for i, c in enumerate(self.configs.tasks_of(name))]

    def status(self, name: str) -> dict[str, Any]:
        connector = self.statuses.connector(name)
        config = self.configs.get(name)
        if connector is None or config is None:
            raise RestError(404, f"No status found for connector {name}")
        count = len(self.configs.tasks_of(name))
        tasks = self.statuses.tasks_of(name)
        return {"name": name, "connector": _status_doc(connector),
                "tasks": [{"id": i, **_status_doc(tasks[i])} for i in sorted(tasks)
                          if i < count],
                "type": self._type(config)}

    def task_status(self, name: str, task_id: int) -> dict[str, Any]:
        status = self.statuses.tasks_of(name).get(task_id)
        if status is None or task_id >= len(self.configs.tasks_of(name)):
            raise RestError(404, f"No status found for task {name}-{task_id}")
        return {"id": task_id, **_status_doc(status)}

    # -- REST: writes ---------------------------------------------------------------------
    def put_config(self, name: str, config: dict[str, str], *, allow_replace: bool
                   ) -> tuple[bool, dict[str, Any]]:
        config = checked_connector_config(name, config, self.eos_mode)
        self._leader_only("Only the leader can set connector configs.")
        exists = self.configs.get(name) is not None
        if exists and not allow_replace:
            raise RestError(409, f"Connector {name} already exists")
        self.configs.put(name, config)
        LOG.info("connector %s %s", name, "reconfigured" if exists else "created")
        return not exists, {"name": name, "config": config, "type": self._type(config),
                            "tasks": [{"connector": name, "task": i} for i in
                                      range(len(self.configs.tasks_of(name)))]}

    def put_task_configs(self, name: str, configs: Any) -> None:
        if not isinstance(configs, list) or not all(isinstance(c, dict) for c in configs):
            raise RestError(400, "Task configurations must be a JSON list of objects")
        self._leader_only("Only the leader may write task configurations.")
        self._config_of(name)
        self.configs.put_task_configs(name, [{str(k): str(v) for k, v in c.items()}
                                             for c in configs])

    def delete(self, name: str) -> None:
        self._leader_only("Only the leader can delete connector configs.")
        self._config_of(name)
        self.configs.remove(name)
        self.statuses.delete(name, len(self.configs.tasks_of(name)))
        LOG.info("connector %s deleted", name)

    def pause(self, name: str) -> None:
        self._config_of(name)
        self.configs.set_target_state(name, "PAUSED")

    def resume(self, name: str) -> None:
        self._config_of(name)
        self.configs.set_target_state(name, "STARTED")

    def stop(self, name: str) -> None:
        self._config_of(name)
        self._leader_only("Only the leader can transition connectors to the STOPPED state.")
        # Kafka writes the empty task list first, from the tick thread that also runs its
        # rebalances; here rebalances run on their own thread, and a connector restarted by
        # one between the two records would publish its tasks again. STOPPED first instead:
        # its tasks run on until the empty task list lands a moment later.
        self.configs.set_target_state(name, "STOPPED")
        self.configs.put_task_configs(name, [])

    def restart(self, name: str, include_tasks: bool, only_failed: bool) -> None:
        self._config_of(name)
        self._leader_only("Only the leader can process restart requests.")
        self.configs.put_restart_request(name, include_tasks, only_failed)

    def restart_task(self, name: str, task_id: int) -> None:
        self._check_rebalance()
        self._config_of(name)
        if not 0 <= task_id < len(self.configs.tasks_of(name)):
            raise RestError(404, f"Task {name}-{task_id} not found")
        with self.lock:
            if (name, task_id) in self.local_tasks:
                self.restart_local_task((name, task_id))
                return
        owner = (self.statuses.tasks_of(name).get(task_id) or {}).get("worker_id")
        raise ForwardRequest(worker_url(owner) if owner else None,
                             "Cannot restart task since it is not assigned to this member")

    def fence(self, name: str) -> None:
        """``PUT /connectors/{name}/fence`` (worker to leader, KIP-618)."""
        self._config_of(name)
        if self.eos_mode != "enabled":
            raise RestError(400, "Exactly-once source support is not enabled on this worker")
        self._leader_only("Only the leader may perform zombie fencing.")
        self.fence_zombies(name)

    def connector_offsets(self, name: str, method: str, body: Any = None) -> dict[str, Any]:
        config = self._config_of(name)
        if method != "GET":
            if self.configs.target_state(name) != "STOPPED":
                raise RestError(400, offsets_api.NOT_STOPPED)
            self._leader_only("Only the leader can process external offsets modification "
                              "requests")
        bootstrap = client_configs.admin_client(self.worker_config)
        kind = self._type(config)
        try:
            if method == "GET":
                self.offsets.log.read_to_end()
                return offsets_api.read(kind, name, self.offsets, bootstrap)
            if method == "PATCH":
                offsets_api.alter(kind, name, body, self.offsets, bootstrap)
                return {"message": "The offsets for this connector have been altered "
                                   "successfully"}
            offsets_api.reset(kind, name, self.offsets, bootstrap)
            return {"message": "The offsets for this connector have been reset successfully"}
        except offsets_api.OffsetsError as exc:
            raise RestError(exc.status, exc.message) from None


def _status_doc(record: dict[str, Any]) -> dict[str, Any]:
    doc = {"state": record.get("state", "UNASSIGNED"), "worker_id": record.get("worker_id")}
    if record.get("trace"):
        doc["trace"] = record["trace"]
    return doc
