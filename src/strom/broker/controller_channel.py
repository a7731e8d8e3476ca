"""The broker's side of the controller: running it, reaching it, and controlled shutdown.

:class:`ControllerService` runs a :class:`~strom.controller.Controller` beside the request
handlers in cluster mode (``zookeeper.connect`` set): it stands for election at start. The
controller reaches the brokers only through :class:`BrokerNetwork` (its
:class:`~strom.controller.channel.ControllerNetwork`): connections to the other brokers, and
its own broker by calling the handler of the request directly (``local_call``, built by the
assembly), never through a socket.

:class:`ControllerChannel` is what the handlers get: the controller serving AlterPartition,
ControlledShutdown, ElectLeaders, AlterPartitionReassignments and ListPartitionReassignments —
the active one (they answer NOT_CONTROLLER unless this broker holds the office), or on a
single node, which leads itself (:mod:`strom.replication.local_leadership`), its stand-in
(:mod:`strom.controller.single_node`) for the admin APIs.

Controlled shutdown (``controlled.shutdown.enable``, on by default): before the broker stops
serving, it sends ControlledShutdown to the active controller (found in ``/controller``) and
repeats, ``controlled.shutdown.max.retries`` times ``controlled.shutdown.retry.backoff.ms``
apart, until the answer lists no partition it still leads; then it stops. A broker that is the
controller itself asks its own controller directly.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from strom.controller import election, requests
from strom.controller.channel import LocalCall
from strom.controller.controller import Controller, NotControllerError
from strom.controller.settings import ControllerSettings
from strom.controller.single_node import SingleNodeController
from strom.metadata.store import MetadataStore, NoNodeError, StoreError
from strom.metadata.zk_model import BrokerRegistration, broker_path
from strom.protocol.errors import ErrorCode
from strom.protocol.interbroker import CONTROLLED_SHUTDOWN, VERSIONS
from strom.protocol.interbroker import controlled_shutdown_v3_request as csr
from strom.protocol.messages import build
from strom.replication.connection import BrokerConnection, BrokerConnectionError

if TYPE_CHECKING:
    from strom.config import BrokerConfig
    from strom.replication.replica_manager import ReplicaManager

log = logging.getLogger(__name__)


class BrokerNetwork:
    """The controller's network (:class:`~strom.controller.channel.ControllerNetwork`): a
    :class:`BrokerConnection` per other broker, from this broker's listener address."""

    def __init__(self, node_id: int, deliver: LocalCall, source_host: str | None) -> None:
        self.node_id = node_id
        self.deliver = deliver
        self.source_host = source_host

    async def local_call(self, api_key: int, api_version: int, request: Any) -> Any:
        return await self.deliver(api_key, api_version, request)

    def connect(self, broker_id: int, registration: BrokerRegistration) -> BrokerConnection:
        return BrokerConnection(registration.host, registration.port,
                                client_id=f"controller-{self.node_id}",
                                source_host=self.source_host)  # fmt: skip


class ControllerService:
    """Runs the controller in cluster mode (``store`` set); nothing on a single node."""

    def __init__(self, store: MetadataStore | None, node_id: int, config: BrokerConfig,
                 local_call: LocalCall, source_host: str | None,
                 on_election: Any = None) -> None:  # fmt: skip
        self.store = store
        self.node_id = node_id
        self.config = config
        self.source_host = source_host
        self.controller: Controller | None = None
        if store is not None:
            self.controller = Controller(store, node_id,
                                         BrokerNetwork(node_id, local_call, source_host),
                                         settings=ControllerSettings.from_config(config.get))  # fmt: skip
            self.controller.on_election = on_election

    async def start(self) -> None:
        if self.controller is not None:
            await self.controller.start()

    async def prepare_stop(self) -> None:
        """Controlled shutdown (module doc), while the broker still serves."""
        config = self.config
        if self.store is None or not config.get_bool("controlled.shutdown.enable"):
            return
        retries = config.get_int("controlled.shutdown.max.retries")
        backoff_ms = config.get_int("controlled.shutdown.retry.backoff.ms")
        done = await controlled_shutdown(self.store, self.node_id, self.controller,
                                         source_host=self.source_host, retries=retries,
                                         backoff=backoff_ms / 1000.0)  # fmt: skip
        if not done:
            log.warning("controlled shutdown of broker %d did not complete: stopping anyway",
                        self.node_id)  # fmt: skip

    async def stop(self) -> None:
        if self.controller is not None:
            await self.controller.stop()


class ControllerChannel:
    """The handlers' way to the controller (module doc)."""

    def __init__(self, service: ControllerService, replicas: ReplicaManager,
                 single_node: SingleNodeController) -> None:  # fmt: skip
        self.service = service
        self.replicas = replicas
        self.single_node = single_node

    def active(self) -> Controller | None:
        """This broker's controller if it is the active one, else None (answer
        NOT_CONTROLLER)."""
        found = self.service.controller
        return found if found is not None and found.active else None

    def for_admin(self) -> Controller | SingleNodeController | None:
        """The controller serving ElectLeaders and the reassignment APIs: the active one, or
        on a single node its stand-in; None elsewhere (answer NOT_CONTROLLER)."""
        if self.replicas.led_locally:
            return self.single_node
        return self.active()


async def _ask(store: MetadataStore, broker_id: int, broker_epoch: int, local: Controller | None,
               source_host: str | None, timeout: float) -> tuple[int, list[Any]]:  # fmt: skip
    holder = await election.active_controller(store)
    if holder is None:
        raise NotControllerError("no controller")
    if local is not None and holder == broker_id and local.active:
        code, remaining = await local.call(
            lambda term: requests.controlled_shutdown(term, broker_id, broker_epoch))  # fmt: skip
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
