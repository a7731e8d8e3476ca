"""The controller: election, the event queue, start-up (broker and topic changes:
:mod:`strom.controller.changes`).

Kafka's ``KafkaController`` (ZooKeeper mode). Every broker runs one; the one that holds
``/controller`` (:mod:`strom.controller.election`) is *active*. All its work runs as events,
one at a time, on one task (Kafka's ``ControllerEventManager``): watch callbacks, requests from
brokers (AlterPartition, ControlledShutdown …) and timers only enqueue, so the context is never
seen half-changed. An event's requests to brokers are batched (:class:`RequestBatch`) and
queued on the channels when it ends.

Terms: each election won starts a *term* (a number local to this process). Resignation, on
``SessionState.SUSPENDED``/``LOST``, on losing ``/controller``, or on a fenced write refused
(:class:`ControllerMovedError`), ends it at once: channels closed (nothing more is sent),
context forgotten; events and watches of an ended term are dropped. After a session is back
(``CONNECTED``) the broker stands again, with a new epoch if it wins.

Start-up of a term (``_failover``): live brokers with their epochs, topics, partition states
and pending deletions are read (watches set on ``/brokers/ids``, ``/brokers/topics``, each
topic, ``/admin/delete_topics``); every live broker gets UpdateMetadata for every partition;
partitions without a state get one; partitions whose leader is not live get one elected from
the ISR (unclean only where ``unclean.leader.election.enable``); every live replica gets
LeaderAndIsr; unfinished reassignments and deletions resume.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from strom.controller import changes, election
from strom.controller.batch import RequestBatch
from strom.controller.channel import ChannelManager, ConnectionFactory, LocalCall
from strom.controller.context import TP, ControllerContext, LiveBroker, TopicDoc, offline_election
from strom.controller.partitions import ControllerMovedError, PartitionStates
from strom.metadata.store import (
    CheckOp,
    MetadataStore,
    MultiError,
    NodeExistsError,
    NoNodeError,
    SessionLostError,
    SessionState,
    SetOp,
    StoreError,
    WatchEvent,
)
from strom.metadata.zk_model import (
    BROKER_IDS_PATH,
    CONTROLLER_EPOCH_PATH,
    DELETE_TOPICS_PATH,
    TOPIC_CONFIGS_PATH,
    TOPICS_PATH,
    BrokerRegistration,
    broker_path,
    topic_path,
)

log = logging.getLogger(__name__)
T = TypeVar("T")
_PERSISTENT_PATHS = (BROKER_IDS_PATH, TOPICS_PATH, TOPIC_CONFIGS_PATH, DELETE_TOPICS_PATH)


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    """The broker properties the controller reads (Kafka's names and defaults)."""

    auto_rebalance: bool = True  # auto.leader.rebalance.enable
    imbalance_interval_s: float = 300.0  # leader.imbalance.check.interval.seconds
    imbalance_percentage: int = 10  # leader.imbalance.per.broker.percentage
    unclean_default: bool = False  # unclean.leader.election.enable
    request_timeout_s: float = 30.0  # controller.socket.timeout.ms

    @classmethod
    def from_config(cls, get: Callable[[str], str | None]) -> ControllerSettings:
        def value(key: str, default: str) -> str:
            found = get(key)
            return default if found is None else found

        return cls(
            value("auto.leader.rebalance.enable", "true").lower() == "true",
            float(value("leader.imbalance.check.interval.seconds", "300")),
            int(value("leader.imbalance.per.broker.percentage", "10")),
            value("unclean.leader.election.enable", "false").lower() == "true",
            int(value("controller.socket.timeout.ms", "30000")) / 1000.0,
        )


class NotControllerError(Exception):
    """This broker is not (or no longer) the active controller."""


class Controller:
    def __init__(self, store: MetadataStore, broker_id: int, local_call: LocalCall, *,
                 source_host: str | None = None,
                 settings: ControllerSettings | None = None,
                 connect: ConnectionFactory | None = None) -> None:  # fmt: skip
        self.store = store
        self.broker_id = broker_id
        self.local_call = local_call
        self.source_host = source_host
        self.settings = settings or ControllerSettings()
        self.connect = connect
        self.ctx: ControllerContext | None = None
        self.channel: ChannelManager | None = None
        self.term = 0
        self.active_id: int | None = None
        self._queue: asyncio.Queue[tuple[int, Callable[[], Awaitable[Any]],
                                         asyncio.Future[Any] | None]] = asyncio.Queue()  # fmt: skip
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.Task[None] | None = None
        self._stopped = False
        self.on_election: Any = None  # copied to each term's context (ControllerContext)

    # public ------------------------------------------------------------------------------------
    @property
    def active(self) -> bool:
        return self.ctx is not None

    @property
    def epoch(self) -> int:
        return self.ctx.epoch if self.ctx is not None else -1

    async def start(self) -> None:
        self.store.add_session_listener(self._on_session)
        self._task = asyncio.get_running_loop().create_task(self._run())
        self._submit(self._stand, term=0)

    async def stop(self) -> None:
        self._stopped = True
        await self._resign("broker stopping")
        await election.resign(self.store, self.broker_id)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait({self._task}, timeout=1.0)

    def call(self, fn: Callable[[], Awaitable[T]]) -> asyncio.Future[T]:
        """Run ``fn`` as an event of the current term (NotControllerError if not active)."""
        if self.ctx is None:
            raise NotControllerError(f"broker {self.broker_id} is not the controller")
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((self.term, fn, future))
        return future

    async def idle(self) -> None:
        """Wait until the event queue and the channels are drained (tests)."""
        while True:
            await self._queue.join()
            if self.channel is None or self.channel.idle():
                await asyncio.sleep(0)
                if self._queue.empty():
                    return
            await asyncio.sleep(0.01)

    # the event loop ----------------------------------------------------------------------------
    def _submit(self, fn: Callable[[], Awaitable[Any]], term: int | None = None) -> None:
        self._queue.put_nowait((self.term if term is None else term, fn, None))

    def _watch(self, fn: Callable[[], Awaitable[Any]]) -> Callable[[WatchEvent], None]:
        term = self.term

        def fire(_event: WatchEvent) -> None:
            if term == self.term and self.ctx is not None:
                self._submit(fn, term)

        return fire

    async def _run(self) -> None:
        while True:
            term, fn, future = await self._queue.get()
            try:
                if term != self.term and fn != self._stand:
                    if future is not None and not future.done():
                        future.set_exception(NotControllerError("the controller resigned"))
                    continue
                try:
                    result = await fn()
                except ControllerMovedError as exc:
                    log.warning("controller %d: fenced write refused (%s): resigning",
                                self.broker_id, exc)  # fmt: skip
                    await self._resign("a newer controller exists")
                    self._submit(self._stand)
                    if future is not None and not future.done():
                        future.set_exception(NotControllerError(str(exc)))
                except (SessionLostError, NotControllerError) as exc:
                    if future is not None and not future.done():
                        future.set_exception(NotControllerError(str(exc)))
                except Exception as exc:
                    log.exception("controller event failed")
                    if future is not None and not future.done():
                        future.set_exception(exc)
                else:
                    if future is not None and not future.done():
                        future.set_result(result)
            finally:
                self._queue.task_done()

    def _on_session(self, state: SessionState) -> None:
        if state is SessionState.CONNECTED:
            if not self._stopped:
                self._submit(self._stand)
            return
        # SUSPENDED or LOST: nothing this broker believes can be trusted: stop acting now.
        if self.ctx is not None:
            asyncio.get_running_loop().create_task(self._resign(f"store session {state.value}"))

    # election ----------------------------------------------------------------------------------
    async def _stand(self) -> None:
        if self._stopped or self.ctx is not None:
            return
        term = self.term

        def on_change(_event: WatchEvent) -> None:
            if term == self.term and self.ctx is None:
                self._submit(self._stand)

        try:
            self.active_id = await election.active_controller(self.store, watch=on_change)
            if self.active_id == self.broker_id:
                # ours from an earlier term of this session: give it up and stand afresh
                await election.resign(self.store, self.broker_id)
                return
            if self.active_id is not None:
                return
            office = await election.try_elect(self.store, self.broker_id)
        except (SessionLostError, StoreError) as exc:
            log.info("broker %d cannot stand for controller now: %s", self.broker_id, exc)
            return
        if office is None:
            self.active_id = await election.active_controller(self.store, watch=on_change)
            return
        self.term += 1
        self.active_id = self.broker_id
        self.ctx = ControllerContext(office.epoch, office.epoch_version)
        self.ctx.on_election = self.on_election
        self.channel = ChannelManager(self.broker_id, self.local_call, source_host=self.source_host,
                                      request_timeout=self.settings.request_timeout_s,
                                      connect=self.connect)  # fmt: skip
        log.info("broker %d is the controller, epoch %d", self.broker_id, office.epoch)
        try:
            await election.active_controller(self.store, watch=self._watch(self._check_office))
            await self._failover()
        except ControllerMovedError:
            await self._resign("a newer controller exists")
        except (SessionLostError, StoreError) as exc:
            log.warning("controller failover failed: %s", exc)
            await self._resign("failover failed")

    async def _check_office(self) -> None:
        """``/controller`` changed while this broker holds the office: resign if it is gone."""
        holder = await election.active_controller(self.store, watch=self._watch(self._check_office))
        if holder != self.broker_id:
            await self._resign(f"/controller is now held by {holder}")
            self._submit(self._stand)

    async def _resign(self, why: str) -> None:
        if self.ctx is None:
            return
        log.info("controller %d (epoch %d) resigns: %s", self.broker_id, self.ctx.epoch, why)
        self.ctx = None
        self.term += 1
        self.active_id = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        channel, self.channel = self.channel, None
        if channel is not None:
            await channel.close()

    def _context(self) -> tuple[ControllerContext, ChannelManager]:
        if self.ctx is None or self.channel is None:
            raise NotControllerError(f"broker {self.broker_id} is not the controller")
        return self.ctx, self.channel

    def batch(self) -> RequestBatch:
        ctx, _ = self._context()
        return RequestBatch(ctx, self.broker_id)

    def send(self, batch: RequestBatch) -> None:
        _, channel = self._context()
        batch.send(channel)

    def states(self) -> PartitionStates:
        ctx, _ = self._context()
        return PartitionStates(self.store, ctx)

    async def write_topic(self, topic: str) -> None:
        """Write ``topic``'s document from the context (a reassignment), fenced by the
        controller epoch (ControllerMovedError when another controller holds the office)."""
        ctx, _ = self._context()
        try:
            await self.store.multi([CheckOp(CONTROLLER_EPOCH_PATH, ctx.epoch_version),
                                    SetOp(topic_path(topic), ctx.topics[topic].to_json())])  # fmt: skip
        except MultiError as exc:
            if exc.index == 0:
                raise ControllerMovedError(str(exc)) from None
            raise

    # failover ----------------------------------------------------------------------------------
    async def _failover(self) -> None:
        ctx, channel = self._context()
        for path in _PERSISTENT_PATHS:  # Kafka's makeSurePersistentPathsExist: watches need them
            if await self.store.exists(path) is None:
                with contextlib.suppress(NodeExistsError):
                    await self.store.create(path, make_parents=True)
        for broker_id, live in (await self._read_brokers()).items():
            ctx.brokers[broker_id] = live
            channel.add_broker(broker_id, live.registration)
        try:
            names = await self.store.children(TOPICS_PATH, watch=self._watch(lambda: changes.on_topics(self)))
        except NoNodeError:
            names = []
        await asyncio.gather(*(self._load_topic(name) for name in names))
        batch = self.batch()
        batch.add_update_metadata(ctx.live_ids(), ctx.partitions())
        fresh = [tp for tp in ctx.partitions() if tp not in ctx.states]
        await self.states().initialize(fresh, batch)
        await self._elect_offline(ctx.offline(), batch)
        states = self.states()
        for dead in sorted({b for tp in ctx.partitions() for b in ctx.offline_replicas(tp)}):
            await states.update(ctx.hosted_by(dead), states.remove_from_isr(dead), batch)
        for tp in ctx.partitions():
            if tp in ctx.states:
                batch.add_leader_and_isr(ctx.replicas(tp), tp)
        self.send(batch)
        from strom.controller import reassignment, topics

        await reassignment.resume(self)
        await topics.on_delete_requests(self)
        if self.settings.auto_rebalance:
            self._timer = asyncio.get_running_loop().create_task(self._rebalance_timer())

    async def _read_brokers(self) -> dict[int, LiveBroker]:
        try:
            ids = await self.store.children(BROKER_IDS_PATH, watch=self._watch(lambda: changes.on_brokers(self)))
        except NoNodeError:
            await self.store.create(BROKER_IDS_PATH, make_parents=True)
            ids = await self.store.children(BROKER_IDS_PATH, watch=self._watch(lambda: changes.on_brokers(self)))
        found: dict[int, LiveBroker] = {}
        for name in ids:
            try:
                data, stat = await self.store.get(broker_path(int(name)))
            except (NoNodeError, ValueError):
                continue
            found[int(name)] = LiveBroker(BrokerRegistration.from_json(int(name), data), stat.created)
        return found

    async def _load_topic(self, name: str) -> TopicDoc | None:
        ctx, _ = self._context()
        try:
            data, _stat = await self.store.get(
                topic_path(name), watch=self._watch(lambda: changes.on_topic_changed(self, name))
            )
        except NoNodeError:
            return None
        doc = TopicDoc.from_json(name, data)
        ctx.topics[name] = doc
        tps = [(name, p) for p in sorted(doc.assignment)]
        for tp, found in zip(tps, await asyncio.gather(*(self.states().read(tp) for tp in tps)),
                             strict=True):  # fmt: skip
            if found is not None:
                ctx.states[tp] = found
        return doc

    async def unclean_allowed(self, topic: str) -> bool:
        try:
            data, _ = await self.store.get(f"{TOPIC_CONFIGS_PATH}/{topic}")
            value = json.loads(data).get("config", {}).get("unclean.leader.election.enable")
        except (NoNodeError, ValueError, AttributeError):
            value = None
        return self.settings.unclean_default if value is None else str(value).lower() == "true"

    async def _elect_offline(self, tps: list[TP], batch: RequestBatch) -> set[TP]:
        """Elect leaders for partitions whose leader is gone (OfflinePartition -> Online)."""
        ctx, _ = self._context()
        unclean = {t: await self.unclean_allowed(t) for t in {tp[0] for tp in tps}}
        elector = self.states().elect(
            lambda tp, s: offline_election(ctx, ctx.replicas(tp), s.isr, unclean[tp[0]])
        )
        changed = await self.states().update(tps, elector, batch)
        for tp in set(tps) - changed:
            log.warning("partition %s-%d has no eligible leader (ISR %s): offline", *tp,
                        list(ctx.states[tp].state.isr) if tp in ctx.states else [])  # fmt: skip
        return changed

    # preferred-leader rebalance ----------------------------------------------------------------
    async def _rebalance_timer(self) -> None:
        while True:
            await asyncio.sleep(self.settings.imbalance_interval_s)
            if self.ctx is not None:
                from strom.controller import requests

                self._submit(lambda: requests.rebalance(self))
