"""The broker process: wires storage, metadata and the network server, and runs them.

Start-up order: data directory and ``meta.properties`` (cluster id, node id), metadata store,
topic registry, log manager (recovery of every partition; directories of partitions the
registry does not know are removed in the background), then the listener. Shutdown in
reverse: stop accepting, close connections, stop services, flush and close every log (which
marks a clean shutdown so the next start skips recovery).

Topics are created, grown and deleted through :mod:`strom.broker.topic_lifecycle` (file work
on a worker thread, registration on the loop, all or nothing).
"""

from __future__ import annotations

import asyncio
import base64
import importlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strom.broker import dispatch, dynamic_config
from strom.broker.producer_ids import ProducerIdManager
from strom.broker.replica_manager import ReplicaManager
from strom.broker.server import start_server
from strom.broker.topic_lifecycle import TopicLifecycle
from strom.clock import Clock, SystemClock
from strom.config import BrokerConfig, ConfigError, parse_properties
from strom.metadata.embedded import EmbeddedStore
from strom.metadata.topics import TopicInfo, TopicRegistry
from strom.storage import file_handles
from strom.storage.flusher import Flusher
from strom.storage.log_manager import LogManager

if TYPE_CHECKING:
    from strom.broker.server import KafkaConnection

log = logging.getLogger(__name__)


class Service:
    """Something that runs beside the request handlers (group coordinator, cleaner …)."""

    async def start(self) -> None: ...

    async def prepare_stop(self) -> None:
        """Called first at shutdown, while the broker still serves (controlled shutdown)."""

    async def stop(self) -> None: ...


class Broker:
    def __init__(
        self,
        config: BrokerConfig,
        data_dir: Path,
        listen: tuple[str, int],
        advertised: tuple[str, int] | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.config = config
        self.data_dir = Path(data_dir)
        self.listen = listen
        self.advertised = advertised or listen
        self.clock: Clock = clock or SystemClock()
        self.node_id = config.node_id
        self.cluster_id = ""
        self.connections: set[KafkaConnection] = set()
        self.services: list[Service] = []
        self.extensions: dict[str, Any] = {}
        self._server: asyncio.Server | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()

    # lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.cluster_id = self._load_meta_properties()
        file_handles.configure(file_handles.default_capacity())
        log.info("segment files kept open: at most %d", file_handles.HANDLES.capacity)
        self.store = EmbeddedStore(self.data_dir)
        await self.store.start()
        self.topics = TopicRegistry(self.store.sync)
        dynamic_config.load(self)  # before the logs open: they take its defaults
        self.logs = LogManager(self.data_dir, self.clock, self.config.values, Flusher())
        doomed = self.logs.load(self._topic_overrides, self._hosted)
        self.replicas = ReplicaManager(self.logs, self.node_id)
        self.lifecycle = TopicLifecycle(self)
        self.lifecycle.remove_in_background(doomed)
        for topic in self.topics:  # logs lost (a crash mid-deletion) come back empty
            missing = [p for p, r in topic.replicas.items()
                       if self.node_id in r and self.logs.get(topic.name, p) is None]  # fmt: skip
            if missing:
                log.warning("creating %d missing logs of topic %s", len(missing), topic.name)
                made = self.logs.create_logs(topic.name, missing, topic.configs)
                self.logs.add(topic.name, made, topic.configs)
        self.producer_ids = ProducerIdManager(self.store.sync)
        dispatch.load_handlers()
        for module in _BUILTIN_SERVICE_MODULES:  # services no handler module imports
            importlib.import_module(module)
        for hook in _SERVICE_FACTORIES:
            self.services.append(hook(self))
        for service in self.services:
            await service.start()
        host, port = self.listen
        self._server = await start_server(self, host, port)
        self._every(self._maintenance_interval(), self._maintenance)
        checkpoint_ms = self.config.get_int("log.flush.offset.checkpoint.interval.ms")
        self._every(max(checkpoint_ms, 100) / 1000.0, self._checkpoint_recovery_points)
        log.info(
            "strom broker %s listening on %s:%s (advertised %s:%s), data in %s, cluster %s",
            self.node_id, host, port, *self.advertised, self.data_dir, self.cluster_id,
        )

    async def stop(self) -> None:
        for service in reversed(self.services):
            try:
                await service.prepare_stop()
            except Exception:
                log.exception("error preparing %s to stop", type(service).__name__)
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.close()
        for task in self._tasks:
            task.cancel()
        for service in reversed(self.services):
            try:
                await service.stop()
            except Exception:
                log.exception("error stopping %s", type(service).__name__)
        if hasattr(self, "lifecycle"):
            await self.lifecycle.close()
        if hasattr(self, "logs"):
            self.logs.close_all()
        if hasattr(self, "store"):
            await self.store.close()
        log.info("strom broker %s stopped", self.node_id)

    async def serve_forever(self) -> None:
        await self._stopping.wait()

    def request_stop(self) -> None:
        self._stopping.set()

    # helpers for handlers --------------------------------------------------------------------
    async def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> TopicInfo:
        """Create a topic and its logs, all or nothing (validation is the caller's); raises
        :class:`KafkaError` (TOPIC_ALREADY_EXISTS, KAFKA_STORAGE_ERROR …). In cluster mode the
        controller creates it (:func:`strom.controller.admin.create_registered`)."""
        from strom.controller import admin  # the controller imports the broker

        if admin.cluster_store(self) is not None:
            return await admin.create_registered(self, name, partitions, replication_factor,
                                                 configs)  # fmt: skip
        return await self.lifecycle.create(name, partitions, configs)

    async def ensure_internal_topic(self, name: str, partitions: int, segment_bytes: int) -> TopicInfo:
        """An internal compacted topic (``__consumer_offsets``, ``__transaction_state``), created
        with ``partitions`` on first start; an existing one is kept as it is."""
        info = self.topics.get(name)
        if info is not None:
            return info
        configs = {"cleanup.policy": "compact", "segment.bytes": str(segment_bytes)}
        rf = int(self.config.get(_INTERNAL_RF.get(name, ""), None) or 1)
        return await self.create_topic(name, partitions, rf, configs)

    def _topic_overrides(self, topic: str) -> dict[str, str]:
        info = self.topics.get(topic)
        return dict(info.configs) if info else {}

    def _hosted(self, topic: str, partition: int) -> bool:
        info = self.topics.get(topic)
        return info is not None and self.node_id in info.replicas.get(partition, ())

    def _maintenance_interval(self) -> float:
        ms = min(
            self.config.get_int("log.retention.check.interval.ms"),
            self.config.get_int("log.flush.scheduler.interval.ms"),
        )
        return max(ms, 10) / 1000.0

    def _maintenance(self) -> None:
        self.logs.maintenance()

    async def _checkpoint_recovery_points(self) -> None:
        """Kafka's recovery-point checkpoint of the data directory, written by the flusher
        thread (after the fsyncs queued before it; never concurrently with shutdown's)."""
        await asyncio.wrap_future(self.logs.checkpoint_recovery_points_async())

    def _every(self, seconds: float, fn: Callable[[], None | Awaitable[None]]) -> None:
        async def loop() -> None:
            while True:
                await asyncio.sleep(seconds)
                try:
                    result = fn()
                    if asyncio.iscoroutine(result):
                        await result
                except Exception:
                    log.exception("periodic task %s failed", getattr(fn, "__name__", fn))

        self._tasks.append(asyncio.get_running_loop().create_task(loop()))

    def every(self, seconds: float, fn: Callable[[], None | Awaitable[None]]) -> None:
        """Run ``fn`` every ``seconds`` until the broker stops (for services)."""
        self._every(seconds, fn)

    def _load_meta_properties(self) -> str:
        """Kafka's ``meta.properties``: the cluster id survives restarts; the node id must match."""
        path = self.data_dir / "meta.properties"
        if path.exists():
            props = parse_properties(path.read_text(), str(path))
            stored = props.get("node.id")
            if stored is not None and int(stored) != self.node_id:
                raise ConfigError(
                    f"{path} belongs to node.id={stored}, but this broker is node.id={self.node_id}"
                )
            return props["cluster.id"]
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        path.write_text(f"version=1\ncluster.id={cluster_id}\nnode.id={self.node_id}\n")
        return cluster_id


#: the replication factor of each internal topic (capped to the live brokers in a cluster)
_INTERNAL_RF = {"__consumer_offsets": "offsets.topic.replication.factor",
                "__transaction_state": "transaction.state.log.replication.factor"}  # fmt: skip
ServiceFactory = Callable[[Broker], Service]
_BUILTIN_SERVICE_MODULES = ("strom.broker.log_cleaner",)
_SERVICE_FACTORIES: list[ServiceFactory] = []


def register_service(factory: ServiceFactory, *, first: bool = False) -> ServiceFactory:
    """Have every broker start a service made by ``factory(broker)`` (import-time hook);
    ``first``: before the others (the controller, which the coordinators' topics need)."""
    if first:
        _SERVICE_FACTORIES.insert(0, factory)
    else:
        _SERVICE_FACTORIES.append(factory)
    return factory
