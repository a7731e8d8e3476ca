"""The controller inside the broker process, and the broker's controlled shutdown.

:class:`ControllerService` runs a :class:`Controller` beside the request handlers when the
broker has an asynchronous metadata store (``broker.metadata_store``, or ``broker.store`` once
it is the async one): it stands for election at start, and ``broker.extensions["controller"]``
lets the controller's handlers (AlterPartition, ControlledShutdown, ElectLeaders,
AlterPartitionReassignments, ListPartitionReassignments) find it; they answer NOT_CONTROLLER
unless it is the active one. The controller reaches its own broker by calling the handler of
the request directly (:meth:`ControllerService.local_call`), never through a socket.

Controlled shutdown (``controlled.shutdown.enable``, on by default): before the broker stops
serving, it sends ControlledShutdown to the active controller (found in ``/controller``) and
repeats, ``controlled.shutdown.max.retries`` times ``controlled.shutdown.retry.backoff.ms``
apart, until the answer lists no partition it still leads; then it stops. A broker that is the
controller itself asks its own controller directly.

Only in cluster mode (``zookeeper.connect`` set, see :func:`cluster_store`) for now.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import TYPE_CHECKING, Any

from strom.broker import dispatch
from strom.broker.broker import Service, register_service
from strom.broker.context import RequestContext
from strom.controller import election, requests, single_node
from strom.controller.controller import Controller, ControllerSettings, NotControllerError
from strom.metadata.store import MetadataStore, NoNodeError, StoreError
from strom.metadata.zk_model import BrokerRegistration, broker_path
from strom.protocol.errors import ErrorCode
from strom.protocol.interbroker import CONTROLLED_SHUTDOWN, VERSIONS
from strom.protocol.interbroker import controlled_shutdown_v3_request as csr
from strom.protocol.messages import RequestHeader, build
from strom.replication.connection import BrokerConnection, BrokerConnectionError

if TYPE_CHECKING:
    from strom.broker.broker import Broker

log = logging.getLogger(__name__)
EXTENSION = "controller"


def async_store(broker: Broker) -> MetadataStore | None:
    """The broker's asynchronous metadata store, if it has one (cluster mode)."""
    for name in ("metadata_store", "store"):
        store = getattr(broker, name, None)
        if store is not None and inspect.iscoroutinefunction(getattr(store, "multi", None)):
            return store  # type: ignore[no-any-return]
    return None


def _source_host(broker: Broker) -> str | None:
    """Our listener address to bind outgoing connections to (None for a wildcard listener)."""
    host = broker.listen[0]
    return None if host in ("", "0.0.0.0", "::") else host


def cluster_store(broker: Broker) -> MetadataStore | None:
    """The async store when the broker is in cluster mode (``zookeeper.connect`` set), else None.

    A single node keeps its own topic path (:mod:`strom.broker.topic_lifecycle`) and runs no
    controller until its partition layer serves LeaderAndIsr (issue 9's replication part)."""
    if not broker.config.get("zookeeper.connect"):
        return None
    return async_store(broker)


def active_controller(broker: Broker) -> Controller | None:
    """This broker's controller if it is the active one, else None (answer NOT_CONTROLLER)."""
    found = broker.extensions.get(EXTENSION)
    return found if isinstance(found, Controller) and found.active else None


def admin_controller(broker: Broker) -> Controller | None:
    """The controller serving ElectLeaders and the reassignment APIs: the active one, or on a
    single node (it leads itself, :mod:`strom.replication.local_leadership`) its stand-in
    (:mod:`strom.controller.single_node`); None elsewhere (answer NOT_CONTROLLER)."""
    if broker.replicas.led_locally:
        return single_node.controller_for(broker)
    return active_controller(broker)


class ControllerService(Service):
    """Runs the controller in cluster mode (nothing on a single node, see :func:`cluster_store`)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.controller: Controller | None = None

    async def start(self) -> None:
        store = cluster_store(self.broker)
        if store is None:
            return
        config = self.broker.config
        self.controller = Controller(
            store, self.broker.node_id, self.local_call, source_host=_source_host(self.broker),
            settings=ControllerSettings.from_config(config.get),
        )  # fmt: skip
        self.controller.on_election = self.broker.metrics.replication.leader_election
        self.broker.extensions[EXTENSION] = self.controller
        await self.controller.start()

    async def local_call(self, api_key: int, api_version: int, request: Any) -> Any:
        spec = dispatch.lookup(api_key)
        if spec is None:
            log.warning("controller request %d to the local broker: no handler", api_key)
            return None
        header = RequestHeader(api_key, api_version, 0, f"controller-{self.broker.node_id}")
        ctx = RequestContext(header, self.broker, "local", 0, -1)
        return await spec.fn(ctx, request)

    async def prepare_stop(self) -> None:
        store = cluster_store(self.broker)
        config = self.broker.config
        if store is None or not config.get_bool("controlled.shutdown.enable"):
            return
        retries = config.get_int("controlled.shutdown.max.retries")
        backoff_ms = config.get_int("controlled.shutdown.retry.backoff.ms")
        done = await controlled_shutdown(store, self.broker.node_id, self.controller,
                                         source_host=_source_host(self.broker), retries=retries,
                                         backoff=backoff_ms / 1000.0)  # fmt: skip
        if not done:
            log.warning("controlled shutdown of broker %d did not complete: stopping anyway",
                        self.broker.node_id)  # fmt: skip

    async def stop(self) -> None:
        if self.controller is not None:
            await self.controller.stop()
            self.broker.extensions.pop(EXTENSION, None)


register_service(ControllerService, first=True)  # the coordinators create topics through it


async def _ask(store: MetadataStore, broker_id: int, broker_epoch: int, local: Controller | None,
               source_host: str | None, timeout: float) -> tuple[int, list[Any]]:  # fmt: skip
    holder = await election.active_controller(store)
    if holder is None:
        raise NotControllerError("no controller")
    if local is not None and holder == broker_id and local.active:
        code, remaining = await local.call(
            lambda: requests.controlled_shutdown(local, broker_id, broker_epoch))  # fmt: skip
        return int(code), remaining
    data, _ = await store.get(broker_path(holder))
    reg = BrokerRegistration.from_json(holder, data)
    conn = BrokerConnection(reg.host, reg.port, client_id=f"broker-{broker_id}",
                            source_host=source_host)  # fmt: skip
    try:
        request = build(csr.ControlledShutdownRequest, broker_id=broker_id,
                        broker_epoch=broker_epoch)  # fmt: skip
        response = await conn.send(CONTROLLED_SHUTDOWN, VERSIONS[CONTROLLED_SHUTDOWN], request,
                                   timeout)  # fmt: skip
    finally:
        conn.close()
    return int(response.error_code), list(response.remaining_partitions)


async def controlled_shutdown(store: MetadataStore, broker_id: int, local: Controller | None, *,
                              source_host: str | None = None, retries: int = 3,
                              backoff: float = 5.0, timeout: float = 30.0) -> bool:  # fmt: skip
    """Ask the controller to move this broker's leaderships away; True once none is left."""
    try:
        _, stat = await store.get(broker_path(broker_id))
    except (NoNodeError, StoreError):
        return False
    for attempt in range(max(1, retries)):
        try:
            code, remaining = await _ask(store, broker_id, stat.created, local, source_host,
                                         timeout)  # fmt: skip
        except (NotControllerError, BrokerConnectionError, StoreError, OSError) as exc:
            log.info("controlled shutdown attempt %d: %s", attempt + 1, exc)
        else:
            if code == ErrorCode.none and not remaining:
                log.info("controlled shutdown of broker %d succeeded", broker_id)
                return True
            log.info("controlled shutdown attempt %d: error %d, %d partitions still led",
                     attempt + 1, code, len(remaining))  # fmt: skip
        if attempt + 1 < retries:
            await asyncio.sleep(backoff)
    return False
