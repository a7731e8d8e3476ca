"""The broker process: wires storage, metadata and the network server, and runs them.

Start-up order: data directory and ``meta.properties`` (cluster id, node id), metadata store,
topic registry, log manager (recovery of every partition; directories of partitions the
registry does not know are removed in the background), then the listener. Shutdown in
reverse: controlled shutdown (in a cluster: leaderships move away while this broker still
serves), stop accepting, in a cluster close each connection once its requests are answered
(bounded: produce requests refused NOT_LEADER_OR_FOLLOWER name the new leader), close the
others, stop services, flush and close every log (which marks a clean shutdown so the next
start skips recovery).

Topics are created, grown and deleted through :mod:`strom.broker.topic_lifecycle` (file work
on a worker thread, registration on the loop, all or nothing).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strom.broker import dispatch, dynamic_config, long_lived, replication, topic_config_sync
from strom.broker.listener import drain, start_server
from strom.broker.log_mover import LogMover
from strom.broker.observability import BrokerMetrics, broker_health
from strom.broker.producer_ids import ProducerIdManager
from strom.broker.replica_manager import ReplicaManager
from strom.broker.replica_selector import check_selector
from strom.broker.topic_lifecycle import TopicLifecycle
from strom.clock import Clock, SystemClock
from strom.config import BrokerConfig, ConfigError, parse_properties
from strom.metadata.brokers import BrokerMembership, ensure_cluster_id
from strom.metadata.embedded import EmbeddedStore
from strom.metadata.store import MetadataStore
from strom.metadata.topics import TopicInfo, TopicRegistry
from strom.metadata.zk_model import BrokerRegistration, Endpoint
from strom.storage import file_handles
from strom.storage.flusher import Flusher
from strom.storage.log_manager import LogManager

if TYPE_CHECKING:
    from strom.broker.server import KafkaConnection

log = logging.getLogger(__name__)
#: Logs visited by periodic maintenance between two yields to the event loop (a visit costs
#: about 4-10 us: a slice stays near a millisecond whatever the partition count)
MAINTENANCE_SLICE = 200


class Service:
    """Something that runs beside the request handlers (group coordinator, cleaner …)."""

    async def start(self) -> None: ...

    async def prepare_stop(self) -> None:
        """Called first at shutdown, while the broker still serves (controlled shutdown)."""

    async def stop(self) -> None: ...


#: how long one shutdown step may take before the broker goes on without it
SHUTDOWN_STEP_S = 10.0
#: how long connections may take to become idle before they are closed anyway (listener.drain)
CONNECTION_DRAIN_S = 1.0


async def _bounded(what: str, step: Awaitable[Any], seconds: float = SHUTDOWN_STEP_S) -> None:
    """Await one shutdown step for at most ``seconds``. A step that hangs is named in a
    WARNING and left behind, so SIGTERM always ends the process and the logs are still closed
    cleanly. Seen once in CI: a broker SIGTERMed right after its controlled shutdown, while its
    new replica fetchers were truncating, never exited. The cause found since: a fetcher woken
    by that LeaderAndIsr lost its cancellation to Python 3.11's ``wait_for`` and its close
    awaited it for ever (:mod:`strom.broker.task_stop`); this bound stays as a safety net."""
    task = asyncio.ensure_future(step)
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if not done:
        log.warning("shutdown: %s did not finish within %.0f s; going on without it", what,
                    seconds)  # fmt: skip
        task.cancel()
        return
    task.result()


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
        # KIP-392: which replica a consumer with a rack reads from (None: always the leader)
        self.replica_selector = check_selector(config.get("replica.selector.class"))
        self.cluster_id = ""
        self.connections: set[KafkaConnection] = set()
        self.services: list[Service] = []
        self.extensions: dict[str, Any] = {}
        self._server: asyncio.Server | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()
        self.metrics = BrokerMetrics()
        self.health = broker_health(self)
        self.started = False  # start() finished
        self.stopping = False  # stop() begun
        self.logs_loaded = False
        self._admin: Any = None  # the admin listener (observability.admin), when on

    # lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        await self._start_admin_listener()  # first: /health/live answers during recovery
        self.data_dir.mkdir(parents=True, exist_ok=True)
        local_cluster_id = self._read_meta_properties()
        file_handles.configure(file_handles.default_capacity())
        log.info("segment files kept open: at most %d", file_handles.HANDLES.capacity)
        self.store = self._make_store()
        await self.store.start()
        self.cluster_id = await ensure_cluster_id(self.store, local_cluster_id)
        if local_cluster_id is None:
            self._write_meta_properties(self.cluster_id)
        self._check_log_dirs_meta()
        self.topics = TopicRegistry(self.store)
        await self.topics.start()
        await dynamic_config.load(self)  # before the logs open: they take its defaults
        self.logs = LogManager(self.log_dirs, self.clock, self.config.values, Flusher())
        with long_lived.paused():  # however many logs: see long_lived
            doomed = self.logs.load(self._topic_overrides, self._hosted)
        self.logs_loaded = True
        self.replicas = ReplicaManager(self.logs, self.node_id, self.clock)
        self.lifecycle = TopicLifecycle(self)
        self.log_mover = LogMover(self)
        self.lifecycle.remove_in_background(doomed)
        self.log_mover.resume(self.logs.futures)  # moves a crash or a shutdown interrupted
        topic_config_sync.start(self)  # config changes made on other brokers reach our logs
        for topic in self.topics:  # logs lost (a crash mid-deletion) come back empty
            missing = [p for p, r in topic.replicas.items()
                       if self.node_id in r and self.logs.get(topic.name, p) is None]  # fmt: skip
            if missing:
                log.warning("creating %d missing logs of topic %s", len(missing), topic.name)
                made = self.logs.create_logs(topic.name, missing, topic.configs)
                self.logs.add(topic.name, made, topic.configs)
        self.producer_ids = ProducerIdManager(self.store, self.node_id)
        dispatch.load_handlers()
        replication.start(self)  # leaders and followers before any service appends
        long_lived.added(self.logs.count())  # the partitions' objects: out of the collector
        # Registered before the services start, as Kafka does: the controller (a service)
        # needs this broker among the live. Peers that connect before the listener is up retry.
        self.membership = BrokerMembership(self.store, self._registration(),
                                           self._session_timeout_ms())  # fmt: skip
        await self.membership.register()
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
        self.started = True
        log.info(
            "strom broker %s listening on %s:%s (advertised %s:%s), data in %s, cluster %s",
            self.node_id, host, port, *self.advertised, self.data_dir, self.cluster_id,
        )

    async def _start_admin_listener(self) -> None:
        from strom.broker.observability import admin

        if self._admin is not None:  # already serving (tests start it ahead of start())
            return

        address = admin.parse_listener(self.config.get(admin.CONFIG_KEY) or "")
        if address is None:
            log.info("admin listener off (%s is empty)", admin.CONFIG_KEY)
            return
        missing = admin.missing_packages()
        if missing:  # dependencies of strom, but a broker without metrics beats no broker
            log.warning("admin listener off: missing packages %s", ", ".join(missing))
            return
        self._admin = admin.AdminListener(self, *address)
        await self._admin.start()

    def listener_serving(self) -> bool:
        """Whether the Kafka listener accepts connections (a readiness check)."""
        return self._server is not None and self._server.is_serving()

    async def stop(self) -> None:
        self.stopping = True  # /health/ready answers 503 from now on
        for service in reversed(self.services):
            try:
                await service.prepare_stop()
            except Exception:
                log.exception("error preparing %s to stop", type(service).__name__)
        if self._server is not None:
            self._server.close()
        if self.config.get("zookeeper.connect"):  # in a cluster, leaderships just moved away
            await drain(self.connections, CONNECTION_DRAIN_S)
        for conn in list(self.connections):
            conn.close()
        for task in self._tasks:
            task.cancel()
        for service in reversed(self.services):
            try:
                await _bounded(f"stopping {type(service).__name__}", service.stop())
            except Exception:
                log.exception("error stopping %s", type(service).__name__)
        creating = self.extensions.get("internal_topics")
        if creating is not None:  # internal topics being created (strom.broker.internal_topics)
            await _bounded("internal topic creation", creating.close())
        if hasattr(self, "replicas"):
            await _bounded("replication", replication.stop(self))
        if hasattr(self, "log_mover"):
            await _bounded("log dir moves", self.log_mover.close())
        if hasattr(self, "lifecycle"):
            await _bounded("topic lifecycle", self.lifecycle.close())
        if hasattr(self, "logs"):
            self.logs.close_all()
        if hasattr(self, "membership"):
            await _bounded("broker registration", self.membership.close())
        if hasattr(self, "producer_ids"):
            await _bounded("producer ids", self.producer_ids.close())
        if hasattr(self, "topics"):
            await _bounded("topic registry", self.topics.close())
        if hasattr(self, "store"):
            await _bounded("metadata store", self.store.close())
        if self._admin is not None:  # last: probes see "not ready" until the process ends
            await self._admin.stop()
            self._admin = None
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

    async def _maintenance(self) -> None:
        """Log maintenance in slices of :data:`MAINTENANCE_SLICE` logs, yielding to the loop
        between them: a tick with thousands of logs due (the first batch to every partition
        of a new topic touches each) must not hold every connection for all of them."""
        logs = self.logs
        # bounded: each log needs at most one visit and one producer-expiry check per tick;
        # what appends touch meanwhile waits for the next tick, as before
        slices = 2 * (logs.count() // MAINTENANCE_SLICE) + 2
        logs.maintenance(MAINTENANCE_SLICE)
        while logs.maintenance_backlog() and slices > 0:
            slices -= 1
            await asyncio.sleep(0)
            logs.maintenance(MAINTENANCE_SLICE)

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

    def _make_store(self) -> MetadataStore:
        """ZooKeeper when ``zookeeper.connect`` is set (a cluster), else the embedded store."""
        connect = self.config.get("zookeeper.connect")
        if not connect:
            return EmbeddedStore(self.data_dir)
        from strom.metadata.zookeeper import ZooKeeperStore

        timeout = self.config.get("zookeeper.connection.timeout.ms")
        host = self.listen[0]  # the session leaves from our address (network-fault tests)
        return ZooKeeperStore(
            connect,
            session_timeout_ms=self._session_timeout_ms(),
            connection_timeout_ms=int(timeout) if timeout else None,
            source_host=None if host in ("", "0.0.0.0", "::") else host,
        )

    def _session_timeout_ms(self) -> int:
        return self.config.get_int("zookeeper.session.timeout.ms")

    def _registration(self) -> BrokerRegistration:
        host, port = self.advertised
        rack = self.config.get("broker.rack") or None
        return BrokerRegistration(self.node_id, (Endpoint("PLAINTEXT", host, port),), rack)

    @property
    def broker_epoch(self) -> int:
        """The ``Stat.created`` of this broker's registration (-1 before it registered)."""
        membership = getattr(self, "membership", None)
        return membership.broker_epoch if membership is not None else -1

    @property
    def log_dirs(self) -> list[Path]:
        """Kafka's ``log.dirs`` (comma-separated), else ``log.dir``, else the data dir."""
        return configured_log_dirs(self.config.values, self.data_dir)

    def _check_log_dirs_meta(self) -> None:
        """Every log directory other than the data dir has its own ``meta.properties`` (as
        Kafka's): written when missing, refused when it names another cluster or node."""
        for parent in self.log_dirs:
            if parent.resolve() == self.data_dir.resolve():
                continue
            parent.mkdir(parents=True, exist_ok=True)
            found = self._read_meta_properties(parent)
            if found is None:
                self._write_meta_properties(self.cluster_id, parent)
            elif found != self.cluster_id:
                raise ConfigError(f"{parent / 'meta.properties'} belongs to cluster {found},"
                                  f" but this broker is in cluster {self.cluster_id}")  # fmt: skip

    def _read_meta_properties(self, parent: Path | None = None) -> str | None:
        """Kafka's ``meta.properties``: the cluster id (None in a new data dir) survives
        restarts; the node id must match."""
        path = (parent or self.data_dir) / "meta.properties"
        if not path.exists():
            return None
        props = parse_properties(path.read_text(), str(path))
        stored = props.get("node.id", props.get("broker.id"))
        if stored is not None and int(stored) != self.node_id:
            raise ConfigError(
                f"{path} belongs to node.id={stored}, but this broker is node.id={self.node_id}"
            )
        return props["cluster.id"]

    def _write_meta_properties(self, cluster_id: str, parent: Path | None = None) -> None:
        path = (parent or self.data_dir) / "meta.properties"
        path.write_text(f"version=1\ncluster.id={cluster_id}\nnode.id={self.node_id}\n")


def configured_log_dirs(values: Mapping[str, str], data_dir: Path) -> list[Path]:
    """The log directories a broker config names: ``log.dirs`` (comma-separated), else
    ``log.dir``, else ``data_dir`` (strom's default, one directory)."""
    raw = values.get("log.dirs") or values.get("log.dir") or ""
    dirs: list[Path] = []
    for item in raw.split(","):
        if item.strip() and Path(item.strip()) not in dirs:
            dirs.append(Path(item.strip()))
    return dirs or [Path(data_dir)]


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
