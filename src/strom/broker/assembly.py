"""The broker's assembly: every service built explicitly, in dependency order, started, and
stopped in reverse.

Nothing starts by an import's side effect and nothing is looked up by name: :meth:`Broker.start`
is the whole wiring, top to bottom. Each part that starts pushes its stop step on a stack,
so a start that fails half way stops exactly what it started, and :meth:`Broker.stop` unwinds
the stack. Handlers never see the assembly: they get the frozen
:class:`~strom.broker.services.BrokerServices` built at the end of the wiring.

Start-up order (each line uses only what is above it):

1. the admin listener (``/health/live`` answers during recovery);
2. the data directory and ``meta.properties`` (cluster id, node id), the file-handle cap;
3. the metadata store (embedded, or ZooKeeper when ``zookeeper.connect`` is set), the cluster
   id, the other log directories' ``meta.properties``;
4. the topic registry, then the dynamic broker configs (the logs take their defaults);
5. the log manager (recovery of every partition; directories of partitions the registry does
   not know are removed in the background);
6. the partition layer (:class:`~strom.replication.replica_manager.ReplicaManager`,
   :class:`~strom.replication.service.ReplicationService`), topic lifecycle, log cleaner,
   log-directory mover; interrupted moves resumed, topic config sync, missing logs re-made;
7. producer ids, the handlers' registry, replication started (leaders and followers before any
   service appends), the broker registration (before the services: the controller needs this
   broker among the live), the authorizer with every ACL of the store (watched from then on);
8. the handlers' services (topics, internal topics, coordinators, the controller channel …)
   and the services that run beside the handlers, started in order: controller (the
   coordinators' topics are created through it), group coordinator, transaction coordinator
   (after the group coordinator: markers reaching ``__consumer_offsets`` complete offsets),
   share groups (their records are loaded with the group coordinator's; then the share
   coordinator over ``__share_group_state``), log cleaner;
9. the Kafka listener, then periodic log maintenance and the recovery-point checkpoint.

Shutdown: controlled shutdown first (in a cluster: leaderships move away while this broker
still serves), stop accepting, in a cluster close each connection once its requests are
answered (bounded: produce requests refused NOT_LEADER_OR_FOLLOWER name the new leader),
close the others, cancel the periodic work, then the stack in reverse: services, internal
topic creation, registration, replication, producer ids, moves, topic lifecycle, the logs
(flushed and closed: a clean shutdown, so the next start skips recovery), the registry, the
store, and last the admin listener.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from strom import long_lived
from strom.broker import dispatch, log_maintenance, meta_properties, topic_config_sync
from strom.broker.context import Client, RequestContext
from strom.broker.controller_channel import ControllerChannel, ControllerService
from strom.broker.dynamic_config import DynamicConfig
from strom.broker.fetch_session import FetchSessionCache
from strom.broker.group.service import GroupService
from strom.broker.internal_topics import InternalTopics
from strom.broker.listener import LiveSasl, drain, start_server
from strom.broker.log_cleaner import LogCleaner
from strom.broker.log_dir_failure_handler import LogDirFailureHandler
from strom.broker.log_mover import LogMover
from strom.broker.metadata_answers import MetadataAnswers
from strom.broker.node import NodeIdentity
from strom.broker.observability import BrokerMetrics, broker_health
from strom.broker.observability import admin as admin_listener
from strom.broker.producer_ids import ProducerIdManager
from strom.broker.server import KafkaConnection
from strom.broker.services import BrokerServices
from strom.broker.share.service import ShareService
from strom.broker.topic_lifecycle import TopicLifecycle
from strom.broker.topics import Topics
from strom.broker.txn.service import TxnService
from strom.clock import Clock, SystemClock
from strom.config import BrokerConfig, ConfigError
from strom.controller.single_node import SingleNodeController
from strom.metadata.brokers import BrokerMembership, ensure_cluster_id
from strom.metadata.embedded import EmbeddedStore
from strom.metadata.store import MetadataStore
from strom.metadata.topics import TopicRegistry
from strom.metadata.zk_model import BrokerRegistration, Endpoint
from strom.metadata.zookeeper import ZooKeeperStore
from strom.periodic import Periodic
from strom.protocol.messages import RequestHeader
from strom.replication import connection as peer_connection
from strom.replication.metadata_cache import BrokerInfo
from strom.replication.replica_manager import ReplicaManager
from strom.replication.replica_selector import check_selector
from strom.replication.service import ReplicationService
from strom.security.acl import AclError, Authorizer, authorizer_from_config
from strom.security.acl.store import AclStore
from strom.security.listeners import Listeners
from strom.security.listeners import from_config as listeners_from_config
from strom.security.quota_store import QuotaStore
from strom.security.quotas import ClientQuotas
from strom.security.sasl import SaslConfigError
from strom.security.sasl import client as sasl_client
from strom.security.scram_credentials import ScramCredentials
from strom.security.tls import ServerTls, TlsConfigError, client_context
from strom.storage import file_handles
from strom.storage.flusher import Flusher
from strom.storage.log_manager import LogManager

log = logging.getLogger(__name__)
#: how long one shutdown step may take before the broker goes on without it
SHUTDOWN_STEP_S = 10.0
#: how long connections may take to become idle before they are closed anyway (listener.drain)
CONNECTION_DRAIN_S = 1.0
StopStep = Callable[[], "Awaitable[None] | None"]


async def _bounded(what: str, step: Awaitable[Any], seconds: float = SHUTDOWN_STEP_S) -> None:
    """Await one shutdown step for at most ``seconds``. A step that hangs is named in a
    WARNING and left behind, so SIGTERM always ends the process and the logs are still closed
    cleanly. Seen once in CI: a broker SIGTERMed right after its controlled shutdown, while its
    new replica fetchers were truncating, never exited. The cause found since: a fetcher woken
    by that LeaderAndIsr lost its cancellation to Python 3.11's ``wait_for`` and its close
    awaited it for ever (:mod:`strom.replication.task_stop`); this bound stays as a safety net."""
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
        listen: tuple[str, int] | None = None,
        advertised: tuple[str, int] | None = None,
        clock: Clock | None = None,
        listeners: Listeners | None = None,
    ) -> None:
        """``listeners``: every listener (:mod:`strom.security.listeners`); else ``listen`` /
        ``advertised`` as one PLAINTEXT listener (the ``--listen`` shortcut); else the
        ``listeners`` property."""
        self.config = config
        self.data_dir = Path(data_dir)
        if listeners is None:
            listeners = listeners_from_config(
                config.values, f"[{listen[0]}]:{listen[1]}" if listen else None,
                f"[{advertised[0]}]:{advertised[1]}" if advertised else None)  # fmt: skip
        self.listeners = listeners
        inter = listeners.inter_broker
        bound = listeners.bound_listener(inter)
        adv = listeners.inter_broker_listener
        #: the inter-broker listener's addresses (peers, and the source of outgoing connections)
        self.listen = (bound.host, bound.port)
        self.advertised = (adv.host, adv.port)
        self.clock: Clock = clock or SystemClock()
        self.node_id = config.node_id
        # KIP-392: which replica a consumer with a rack reads from (None: always the leader)
        self.replica_selector = check_selector(config.get("replica.selector.class"))
        self.metrics = BrokerMetrics()
        self.periodic = Periodic()
        self.connections: set[KafkaConnection] = set()
        #: what handlers get; built once every service exists (None before, and if the start
        #: failed before it)
        self.services: BrokerServices | None = None
        self.health = broker_health(self)
        self.started = False  # start() finished
        self.stopping = False  # stop() begun
        self.logs_loaded = False
        self._admin: admin_listener.AdminListener | None = None
        self._server: asyncio.Server | None = None  # the first listener's (tests read its port)
        self._servers: list[asyncio.Server] = []
        self._tls: list[ServerTls] = []  # the TLS listeners' live contexts (reloaded: KIP-226)
        self._sasl: list[LiveSasl] = []  # the SASL listeners' live settings (reloaded too)
        self._stops: list[tuple[str, StopStep]] = []  # what started, in order (stop: reversed)
        self._prepare_stop: Callable[[], Awaitable[None]] | None = None
        self._stopping = asyncio.Event()

    # lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        config, clock, node_id = self.config, self.clock, self.node_id
        await self._start_admin_listener()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        local_cluster_id = meta_properties.read(self.data_dir, node_id)
        file_handles.configure(file_handles.default_capacity())
        log.info("segment files kept open: at most %d", file_handles.HANDLES.capacity)

        store = self._make_store()
        await store.start()
        self._stops.append(("metadata store", store.close))
        cluster_id = await ensure_cluster_id(store, local_cluster_id)
        if local_cluster_id is None:
            meta_properties.write(self.data_dir, cluster_id, node_id)
        log_dirs = meta_properties.configured_log_dirs(config.values, self.data_dir)
        meta_properties.check_log_dirs(log_dirs, self.data_dir, cluster_id, node_id)
        rack = config.get("broker.rack") or None
        node = NodeIdentity(node_id, cluster_id, self.advertised, self.listen, rack,
                            self.data_dir, tuple(log_dirs), self.listeners)  # fmt: skip

        registry = TopicRegistry(store)
        await registry.start()
        self._stops.append(("topic registry", registry.close))
        configs = DynamicConfig(store, config, node, registry)
        await configs.load()  # before the logs open: they take its defaults

        def overrides(topic: str) -> dict[str, str]:
            info = registry.get(topic)
            return dict(info.configs) if info else {}

        def hosted(topic: str, partition: int) -> bool:
            info = registry.get(topic)
            return info is not None and node_id in info.replicas.get(partition, ())

        logs = LogManager(log_dirs, clock, config.values, Flusher())
        with long_lived.paused():  # however many logs there are: see strom.long_lived
            doomed = logs.load(overrides, hosted)
        self._stops.append(("logs", logs.close_all))
        self.logs_loaded = True
        configs.on_change(logs.update_broker_configs)

        host, port = self.advertised
        # the inter-broker listener first: peers connect to a registration's first endpoint
        endpoints = tuple(Endpoint(s.name, s.host, s.port, s.security_protocol)
                          for s in self.listeners.registration_order())  # fmt: skip
        registration = BrokerRegistration(node_id, endpoints, rack)
        inter_broker = self.listeners.inter_broker_listener
        peer_connection.configure(peer_connection.InterBrokerSecurity(
            client_context(inter_broker) if inter_broker.uses_tls else None,
            sasl_client.credentials(config.values, inter_broker.name,
                                    self.listeners.inter_broker_sasl_mechanism)
            if inter_broker.uses_sasl else None))  # fmt: skip
        self._stops.append(("inter-broker security",
                            lambda: peer_connection.configure(
                                peer_connection.InterBrokerSecurity())))  # fmt: skip
        membership = BrokerMembership(store, registration,
                                      config.get_int("zookeeper.session.timeout.ms"))  # fmt: skip

        def broker_epoch() -> int:
            """The ``Stat.created`` of this broker's registration (-1 before it registered)."""
            return membership.broker_epoch

        replicas = ReplicaManager(logs, node_id, clock, broker_epoch=broker_epoch,
                                  still_registered=membership.still_registered,
                                  topic_configs=overrides)  # fmt: skip
        replication = ReplicationService(replicas, registry, config, self.periodic,
                                         BrokerInfo(node_id, host, port, rack, tuple(
                                             (e.listener, e.host, e.port) for e in endpoints)),
                                         source_host=node.source_host, broker_epoch=broker_epoch,
                                         metrics=self.metrics.replication)  # fmt: skip
        lifecycle = TopicLifecycle(registry, logs, replication, node_id)
        self._stops.append(("topic lifecycle", lifecycle.close))
        cleaner = LogCleaner(config, logs, clock, self.periodic)
        log_mover = LogMover(logs, config, lifecycle, cleaner)
        self._stops.append(("log dir moves", log_mover.close))
        lifecycle.remove_in_background(doomed)
        log_mover.resume(logs.futures)  # moves a crash or a shutdown interrupted
        topic_config_sync.start(registry, logs)  # config changes made on other brokers
        for topic in registry:  # logs lost (a crash mid-deletion) come back empty
            missing = [p for p, r in topic.replicas.items()
                       if node_id in r and logs.get(topic.name, p) is None]  # fmt: skip
            if missing:
                log.warning("creating %d missing logs of topic %s", len(missing), topic.name)
                made = logs.create_logs(topic.name, missing, topic.configs)
                logs.add(topic.name, made, topic.configs)

        scram = ScramCredentials(store)  # SCRAM logins look credentials up without I/O
        await scram.start()
        self._stops.append(("SCRAM credentials", scram.close))
        producer_ids = ProducerIdManager(store, node_id)
        self._stops.append(("producer ids", producer_ids.close))
        dispatch.load_handlers()
        replication.start()  # leaders and followers before any service appends
        long_lived.added(logs.count())  # the partitions' objects: out of the collector's way
        self._stops.append(("replication", replication.stop))
        # Registered before the services start, as Kafka does: the controller (a service)
        # needs this broker among the live. Peers that connect before the listener is up retry.
        await membership.register()
        self._stops.append(("broker registration", membership.close))

        authorizer, acls = await self._start_authorizer(store)
        cluster_store = store if config.get("zookeeper.connect") else None
        dir_failures = LogDirFailureHandler(replicas, node_id, cluster_store)
        dir_failures.start()
        self._stops.append(("log directory failure handler", dir_failures.close))
        topics = Topics(registry, lifecycle, node_id, cluster_store)
        internal_topics = InternalTopics(topics, config)
        self._stops.append(("internal topic creation", internal_topics.close))
        groups = GroupService(config, clock, replicas, registry, self.periodic)
        # share groups' records live in __consumer_offsets: registered before the groups load
        shares = ShareService(config, clock, replicas, registry, topics, internal_topics, groups,
                              configs, self.periodic, node_id, node.source_host)  # fmt: skip
        transactions = TxnService(config, clock, replicas, registry, groups, producer_ids,
                                  self.periodic, node.source_host)  # fmt: skip
        controller = ControllerService(cluster_store, node_id, config, self._deliver_locally,
                                       node.source_host,
                                       self.metrics.replication.leader_election)  # fmt: skip
        single_node = SingleNodeController(store, registry, replicas.partitions, registration,
                                           broker_epoch)  # fmt: skip
        quotas = QuotaStore(store, ClientQuotas(config.get_int("quota.window.num"),
                                                config.get_int("quota.window.size.seconds")))
        await quotas.start()  # every entity's quotas, watched: in force before the listener
        self._stops.append(("client quotas", quotas.close))
        self.services = BrokerServices(
            node=node, config=config, configs=configs, clock=clock, metrics=self.metrics,
            replicas=replicas, logs=logs, topics=topics, internal_topics=internal_topics,
            groups=groups, transactions=transactions, producer_ids=producer_ids,
            controller=ControllerChannel(controller, replicas, single_node),
            log_mover=log_mover,
            fetch_sessions=FetchSessionCache(
                config.get_int("max.incremental.fetch.session.cache.slots")),
            metadata_answers=MetadataAnswers(), replica_selector=self.replica_selector,
            shares=shares, scram=scram, quotas=quotas, authorizer=authorizer, acls=acls,
        )  # fmt: skip
        self._prepare_stop = controller.prepare_stop
        await controller.start()  # first: the coordinators' topics are created through it
        self._stops.append(("controller", controller.stop))
        await groups.start()
        self._stops.append(("group coordinator", groups.stop))
        await transactions.start()
        self._stops.append(("transaction coordinator", transactions.stop))
        await shares.start()
        self._stops.append(("share groups", shares.stop))
        await cleaner.start()
        self._stops.append(("log cleaner", cleaner.stop))

        for spec in self.listeners.bound:
            tls = ServerTls(spec) if spec.uses_tls else None
            if tls is not None:
                self._tls.append(tls)
            # read at start (a bad SASL setting fails the start, naming the property), then
            # whenever a dynamic config changes it
            sasl = LiveSasl(spec, self.services.scram.lookup) if spec.uses_sasl else None
            if sasl is not None:
                self._sasl.append(sasl)
                configs.check_with(sasl.check)
            server = await start_server(self.services, self.connections, spec, tls, sasl)
            self._servers.append(server)
            log.info("listener %s (%s) on %s:%s", spec.name, spec.security_protocol,
                     spec.host or "*", server.sockets[0].getsockname()[1] if server.sockets
                     else spec.port)  # fmt: skip
        self._server = self._servers[0]
        if self._tls or self._sasl:
            configs.on_change(lambda _values: self._reload_listeners())
        host, port = self.listen
        self.periodic.every(log_maintenance.interval_s(config), lambda: log_maintenance.tick(logs))
        checkpoint_ms = max(config.get_int("log.flush.offset.checkpoint.interval.ms"), 100)
        self.periodic.every(checkpoint_ms / 1000.0,
                            lambda: log_maintenance.checkpoint_recovery_points(logs))  # fmt: skip
        self.started = True
        log.info(
            "strom broker %s listening on %s:%s (advertised %s:%s), data in %s, cluster %s",
            node_id, host, port, *self.advertised, self.data_dir, cluster_id,
        )

    def _reload_listeners(self) -> None:
        """A dynamic config changed: each TLS listener reloads its key and trust stores if
        their settings (or the key store file) changed, each SASL listener its settings if
        theirs did; a bad new store or setting (one written before this broker could check
        it, or a key store file replaced) is logged and the listener keeps the old one."""
        for tls in self._tls:
            try:
                tls.reload()
            except TlsConfigError as exc:
                log.error("%s; the listener keeps its current certificate", exc)
        for sasl in self._sasl:
            try:
                sasl.reload()
            except SaslConfigError as exc:
                log.error("%s; listener %s keeps its current SASL settings", exc, sasl.spec.name)

    async def _start_authorizer(self, store: MetadataStore) -> tuple[Authorizer | None, AclStore | None]:
        """The authorizer ``authorizer.class.name`` asks for, with every ACL of the store
        loaded (and watched) before any request is served; (None, None) when it is empty."""
        config = self.config
        try:
            authorizer = authorizer_from_config(config.get("authorizer.class.name"),
                                                config.get("super.users"),
                                                config.get("allow.everyone.if.no.acl.found"))  # fmt: skip
        except AclError as exc:
            raise ConfigError(str(exc)) from None
        if authorizer is None:
            return None, None
        acls = AclStore(store, authorizer)
        await acls.start()
        self._stops.append(("ACL watcher", acls.close))
        return authorizer, acls

    async def _deliver_locally(self, api_key: int, api_version: int, request: Any) -> Any:
        """The controller's requests to this broker: its own handlers, called directly."""
        services = self.services
        assert services is not None  # the controller starts after the services exist
        spec = dispatch.lookup(api_key)
        if spec is None:
            log.warning("controller request %d to the local broker: no handler", api_key)
            return None
        header = RequestHeader(api_key, api_version, 0, f"controller-{self.node_id}")
        return await spec.fn(RequestContext(header, services, Client("local", 0, -1)), request)

    async def _start_admin_listener(self) -> None:
        if self._admin is not None:  # already serving (tests start it ahead of start())
            return
        address = admin_listener.parse_listener(self.config.get(admin_listener.CONFIG_KEY) or "")
        if address is None:
            log.info("admin listener off (%s is empty)", admin_listener.CONFIG_KEY)
            return
        missing = admin_listener.missing_packages()
        if missing:  # dependencies of strom, but a broker without metrics beats no broker
            log.warning("admin listener off: missing packages %s", ", ".join(missing))
            return
        self._admin = admin_listener.AdminListener(
            self, *address, required=admin_listener.CONFIG_KEY in self.config.explicit,
            security=admin_listener.AdminSecurity.from_config(self.config.get,
                                                              list(self.config.values)))
        await self._admin.start()
        # last to stop: probes see "not ready" until the process ends
        self._stops.append(("admin listener", self._admin.stop))

    def listener_serving(self) -> bool:
        """Whether the Kafka listener accepts connections (a readiness check)."""
        return bool(self._servers) and all(s.is_serving() for s in self._servers)

    async def stop(self) -> None:
        self.stopping = True  # /health/ready answers 503 from now on
        if self._prepare_stop is not None:
            try:
                await self._prepare_stop()
            except Exception:
                log.exception("error preparing the controller service to stop")
        for server in self._servers:
            server.close()
        if self.config.get("zookeeper.connect"):  # in a cluster, leaderships just moved away
            await drain(self.connections, CONNECTION_DRAIN_S)
        for conn in list(self.connections):
            conn.close()
        self.periodic.cancel_all()
        while self._stops:
            what, step = self._stops.pop()
            try:
                result = step()
                if result is not None:
                    await _bounded(f"stopping the {what}", result)
            except Exception:
                log.exception("error stopping the %s", what)
        log.info("strom broker %s stopped", self.node_id)

    async def serve_forever(self) -> None:
        await self._stopping.wait()

    def request_stop(self) -> None:
        self._stopping.set()

    def _make_store(self) -> MetadataStore:
        """ZooKeeper when ``zookeeper.connect`` is set (a cluster), else the embedded store."""
        connect = self.config.get("zookeeper.connect")
        if not connect:
            return EmbeddedStore(self.data_dir)
        timeout = self.config.get("zookeeper.connection.timeout.ms")
        host = self.listen[0]  # the session leaves from our address (network-fault tests)
        return ZooKeeperStore(
            connect,
            session_timeout_ms=self.config.get_int("zookeeper.session.timeout.ms"),
            connection_timeout_ms=int(timeout) if timeout else None,
            source_host=None if host in ("", "0.0.0.0", "::") else host,
        )
