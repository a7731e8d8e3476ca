"""Cluster membership: the cluster id, and this broker's registration in ``/brokers/ids``.

Kafka's ZooKeeper-mode rules (``KafkaZkClient.registerBroker``, ``getOrGenerateClusterId``):

* ``/cluster/id`` holds ``{"version": "1", "id": "<cluster id>"}``, created by the first broker
  (with the id of its ``meta.properties`` if it has one, else a new one). A broker whose
  ``meta.properties`` names another cluster is refused (:class:`InconsistentClusterIdError`,
  Kafka's InconsistentClusterIdException): its ``zookeeper.connect`` is probably wrong.
* ``/brokers/ids/<id>`` is an *ephemeral* :class:`~strom.metadata.zk_model.BrokerRegistration`:
  it lives as long as the broker's store session. Its ``Stat.created`` (ZooKeeper's czxid) is the
  **broker epoch** the controller sends back in every request, so a broker can tell a request
  meant for an earlier incarnation. A node already there at start-up means the id is taken
  (:class:`BrokerIdTakenError`), except when it is this broker's own previous incarnation (same
  endpoints: a kill -9 and restart), whose session is waited out (at most the session timeout).
* After ``SessionState.LOST`` the node is gone with the session: :class:`BrokerMembership`
  registers again as soon as the new session is CONNECTED, giving a new, higher epoch, and tells
  its listeners. Until then :attr:`BrokerMembership.registered` is False.
* :meth:`BrokerMembership.still_registered` asks the store itself whether the registration
  is alive, rather than trusting the session state this process last saw: a process stopped
  past its session (SIGSTOP, a long GC-like stall) wakes with a session the store has already
  expired and may read requests the controller sent before, ahead of the client library
  noticing the expiry. The LeaderAndIsr handler asks it before taking any role, so such a
  stale request cannot make this broker a leader the controller has replaced meanwhile.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
import uuid
from collections.abc import Callable

from strom.metadata.store import (
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    SessionState,
    StoreError,
    WatchEvent,
)
from strom.metadata.zk_model import (
    BROKER_IDS_PATH,
    CLUSTER_ID_PATH,
    BrokerRegistration,
    broker_path,
    cluster_id_from_bytes,
    cluster_id_to_bytes,
)

log = logging.getLogger(__name__)
EpochListener = Callable[[int], None]


class InconsistentClusterIdError(StoreError):
    pass


class BrokerIdTakenError(StoreError):
    pass


def new_cluster_id() -> str:
    """Kafka's ``Uuid.randomUuid().toString``: 22 characters of base64url."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


async def ensure_cluster_id(store: MetadataStore, local: str | None) -> str:
    """The cluster's id from ``/cluster/id``, created with ``local`` (or a new id) if absent;
    InconsistentClusterIdError if ``local`` (from ``meta.properties``) names another cluster."""
    while True:
        try:
            cluster_id = cluster_id_from_bytes((await store.get(CLUSTER_ID_PATH))[0])
            break
        except NoNodeError:
            proposed = local or new_cluster_id()
            try:
                await store.create(CLUSTER_ID_PATH, cluster_id_to_bytes(proposed))
            except NodeExistsError:
                continue  # another broker was first: read its id
            cluster_id = proposed
            log.info("cluster id %s created", cluster_id)
            break
    if local is not None and local != cluster_id:
        raise InconsistentClusterIdError(
            f"The Cluster ID {cluster_id} doesn't match stored clusterId {local} in "
            "meta.properties. The broker is trying to join the wrong cluster. Configured "
            "zookeeper.connect may be wrong."
        )
    return cluster_id


async def live_brokers(store: MetadataStore) -> dict[int, tuple[BrokerRegistration, int]]:
    """Every registered broker: id -> (registration, broker epoch)."""
    try:
        ids = await store.children(BROKER_IDS_PATH)
    except NoNodeError:
        return {}
    out: dict[int, tuple[BrokerRegistration, int]] = {}
    for name in ids:
        try:
            data, stat = await store.get(broker_path(int(name)))
        except NoNodeError:
            continue  # gone meanwhile
        out[int(name)] = (BrokerRegistration.from_json(int(name), data), stat.created)
    return out


class BrokerMembership:
    """This broker's ephemeral registration, kept alive across lost sessions (module doc)."""

    def __init__(
        self, store: MetadataStore, registration: BrokerRegistration, session_timeout_ms: int
    ) -> None:
        self.store = store
        self.registration = registration
        self.session_timeout_ms = session_timeout_ms
        self.broker_epoch = -1
        self.registered = False
        self._listeners: list[EpochListener] = []
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def path(self) -> str:
        return broker_path(self.registration.broker_id)

    def add_listener(self, listener: EpochListener) -> None:
        """``listener(broker_epoch)`` after every registration (the first and each re-one)."""
        self._listeners.append(listener)

    async def register(self) -> int:
        """Create the registration node; the broker epoch. BrokerIdTakenError if another
        broker holds the id."""
        self.store.add_session_listener(self._on_session)
        await self._create(first=True)
        return self.broker_epoch

    async def _create(self, first: bool) -> None:
        deadline = time.monotonic() + self.session_timeout_ms / 1000.0 + 5.0
        data = self.registration.to_json()
        while True:
            try:
                stat = await self.store.create(self.path, data, ephemeral=True)
                break
            except NodeExistsError:
                holder = await self._holder()
                if holder is None:
                    continue  # it went meanwhile
                owner, theirs = holder
                if owner == self.store.session_id:  # ours already (a retried create)
                    stat = (await self.store.get(self.path))[1]
                    break
                same = theirs is not None and theirs.endpoints == self.registration.endpoints
                if not same or time.monotonic() > deadline:
                    raise BrokerIdTakenError(
                        f"broker.id {self.registration.broker_id} is already registered at "
                        f"{self.path} by another broker"
                        + (f" ({theirs.host}:{theirs.port})" if theirs is not None else "")
                        + "; choose another broker.id"
                    ) from None
                if first:
                    log.info("waiting for the session of a previous run of broker %d to expire",
                             self.registration.broker_id)  # fmt: skip
                    first = False
                await self._gone(deadline)
        self.broker_epoch = stat.created
        self.registered = True
        # the broker epoch is the store's version (zxid) of the registration, not a count of
        # starts: a brand-new data dir's first epoch is already > 1, so it is no INFO news
        log.info("registered broker %d at %s", self.registration.broker_id,
                 self.registration.endpoints[0].url())  # fmt: skip
        log.debug("broker %d's epoch is %d", self.registration.broker_id, self.broker_epoch)
        for listener in list(self._listeners):
            listener(self.broker_epoch)

    async def still_registered(self, epoch: int = -1, margin_s: float = 5.0) -> bool:
        """Whether the registration of broker epoch ``epoch`` (a controller request's; -1:
        whichever is current) is this broker's live registration, asked of the store (module
        doc): ``/brokers/ids/<id>`` exists, is owned by the current session and was created
        with that epoch. While the store cannot answer (its connection lost) it is asked again,
        and while this broker is registering anew (a session lost) that is waited for, for at
        most the session timeout plus ``margin_s``: a request for the new registration may
        arrive before this process has seen its own registration complete. A request meant
        for the registration that expired is then older than the current one: False."""
        deadline = time.monotonic() + self.session_timeout_ms / 1000.0 + margin_s
        while not self._closed and time.monotonic() < deadline:
            if not self.registered:
                await asyncio.sleep(0.05)
                continue
            session, current = self.store.session_id, self.broker_epoch
            if 0 <= epoch < current:
                return False  # meant for a registration that expired
            try:
                left = max(0.0, deadline - time.monotonic())
                stat = await asyncio.wait_for(self.store.exists(self.path), left)
            except (StoreError, TimeoutError):
                await asyncio.sleep(0.05)
                continue
            if stat is None or stat.ephemeral_owner != session or stat.created != current:
                await asyncio.sleep(0.05)  # gone with the session: registering anew
                continue
            return epoch < 0 or epoch == current
        return False

    async def _holder(self) -> tuple[int, BrokerRegistration | None] | None:
        try:
            data, stat = await self.store.get(self.path)
        except NoNodeError:
            return None
        try:
            theirs: BrokerRegistration | None = BrokerRegistration.from_json(
                self.registration.broker_id, data
            )
        except (ValueError, KeyError, TypeError):
            theirs = None
        return stat.ephemeral_owner, theirs

    async def _gone(self, deadline: float) -> None:
        """Return once the registration node is gone (or at ``deadline``)."""
        gone = asyncio.Event()

        def on_change(event: WatchEvent) -> None:
            gone.set()

        if await self.store.exists(self.path, watch=on_change) is None:
            return
        timeout = max(0.1, deadline - time.monotonic())
        with contextlib.suppress(TimeoutError):  # look again: the watch may have been dropped
            await asyncio.wait_for(gone.wait(), min(timeout, 1.0))

    def _on_session(self, state: SessionState) -> None:
        if state is SessionState.LOST:
            self.registered = False
            log.warning("broker %d lost its store session: its registration is gone",
                        self.registration.broker_id)  # fmt: skip
        elif (state is SessionState.CONNECTED and not self.registered and not self._closed
              and (self._task is None or self._task.done())):  # fmt: skip
            self._task = asyncio.get_running_loop().create_task(self._reregister())

    async def _reregister(self) -> None:
        while not self._closed and not self.registered:
            try:
                await self._create(first=False)
            except BrokerIdTakenError as exc:
                log.error("broker %d cannot register again: %s", self.registration.broker_id, exc)
                return
            except StoreError as exc:
                log.warning("re-registering broker %d failed (%s); retrying",
                            self.registration.broker_id, exc)  # fmt: skip
                await asyncio.sleep(1.0)

    async def close(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
