"""What the broker does when a log directory goes offline (Kafka's ``LogDirFailureHandler``).

:class:`~strom.storage.log_dir_failures.LogDirFailures` finds the failure on whatever thread
met the disk error (the event loop for an append, the flusher for an fsync or a checkpoint)
and stops the directory's logs at once; this handler then does the rest on the event loop:

1. the replica manager detaches the directory's logs and stops its partitions here
   (:meth:`~strom.replication.replica_manager.ReplicaManager.log_dir_offline`): reads and
   appends answer KAFKA_STORAGE_ERROR, fetchers stop, coordinators there unload;
2. in a cluster, the controller is told through ZooKeeper, as Kafka's ZooKeeper mode does:
   a persistent ``/log_dir_event_notification/log_dir_event_<n>`` naming this broker
   (:mod:`strom.controller.log_dirs` moves the leadership of those partitions and takes the
   replicas out of their ISRs).

In a cluster a full disk also takes its directory offline (another broker can lead its
partitions), which :attr:`LogDirFailures.fail_over` tells the storage layer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from strom.metadata.store import MetadataStore, NodeExistsError
from strom.metadata.zk_model import LOG_DIR_EVENT_PATH, LOG_DIR_EVENT_PREFIX, log_dir_event_to_json
from strom.replication.replica_manager import ReplicaManager

log = logging.getLogger(__name__)
#: how often the notification is retried while the store cannot be written (a cut)
NOTIFY_RETRY_S = 1.0


class LogDirFailureHandler:
    def __init__(self, replicas: ReplicaManager, node_id: int,
                 cluster_store: MetadataStore | None) -> None:  # fmt: skip
        self.replicas = replicas
        self.node_id = node_id
        self.store = cluster_store
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    def start(self) -> None:
        """Listen for failures (on the running loop)."""
        self._loop = asyncio.get_running_loop()
        failures = self.replicas.logs.failures
        failures.fail_over = self.store is not None
        failures.listeners.append(self._failed)
        for dir in failures.offline():  # failed before the loop listened (start-up)
            self._loop.call_soon(self._offline, dir)

    def _failed(self, dir: Path) -> None:
        """(Any thread) a log directory went offline."""
        loop = self._loop
        if loop is not None and not self._closed:
            loop.call_soon_threadsafe(self._offline, dir)

    def _offline(self, dir: Path) -> None:
        if self._closed:
            return
        self.replicas.log_dir_offline(dir)
        if self.store is not None:
            task = asyncio.get_running_loop().create_task(self._notify())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _notify(self) -> None:
        """Write the controller's notification, retrying while the store refuses."""
        assert self.store is not None
        name = f"{LOG_DIR_EVENT_PATH}/{LOG_DIR_EVENT_PREFIX}{time.time_ns():020d}_{self.node_id}"
        while not self._closed:
            try:
                await self.store.create(name, log_dir_event_to_json(self.node_id),
                                        make_parents=True)  # fmt: skip
                log.info("told the controller that a log directory of broker %d is offline",
                         self.node_id)  # fmt: skip
                return
            except NodeExistsError:
                return
            except Exception as exc:  # noqa: BLE001 - the store is retried until it answers
                log.warning("cannot notify the controller of the offline log directory yet: "
                            "%s", exc)  # fmt: skip
                await asyncio.sleep(NOTIFY_RETRY_S)

    async def close(self) -> None:
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=1.0)
