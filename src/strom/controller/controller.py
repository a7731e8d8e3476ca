"""The controller: the office, the event queue, and the terms of office.

Kafka's ``KafkaController`` (ZooKeeper mode). Every broker runs one; the one that holds
``/controller`` (:mod:`strom.controller.election`) is *active*. All its work runs as events,
one at a time, on one task (Kafka's ``ControllerEventManager``): watch callbacks, requests from
brokers (AlterPartition, ControlledShutdown …) and timers only enqueue, so the context is never
seen half-changed. An event's requests to brokers are batched (:class:`RequestBatch`) and
queued on the channels when it ends.

Terms: each election won starts a :class:`~strom.controller.term.Term` (numbered locally to
this process), the one thing events act on. Resignation, on ``SessionState.SUSPENDED``/``LOST``,
on losing ``/controller``, or on a fenced write refused (:class:`ControllerMovedError`), ends
it at once: channels closed (nothing more is sent), context forgotten; events and watches of
an ended term are dropped. After a session is back (``CONNECTED``) the broker stands again,
with a new epoch if it wins. A new term starts with the failover
(:func:`strom.controller.failover.take_office`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from strom.controller import election, failover, requests
from strom.controller.channel import ChannelManager, ControllerNetwork
from strom.controller.context import ControllerContext
from strom.controller.partitions import ControllerMovedError
from strom.controller.settings import ControllerSettings
from strom.controller.term import Event, Term
from strom.metadata.store import (
    MetadataStore,
    SessionLostError,
    SessionState,
    StoreError,
    WatchEvent,
)

log = logging.getLogger(__name__)
T = TypeVar("T")


class NotControllerError(Exception):
    """This broker is not (or no longer) the active controller."""


class Controller:
    def __init__(self, store: MetadataStore, broker_id: int, network: ControllerNetwork, *,
                 settings: ControllerSettings | None = None) -> None:  # fmt: skip
        self.store = store
        self.broker_id = broker_id
        self.network = network
        self.settings = settings or ControllerSettings()
        #: the current term of office (None while this broker is not the controller)
        self.office: Term | None = None
        self.term = 0  # the number of the current (or the next) term
        self.active_id: int | None = None
        self._queue: asyncio.Queue[tuple[int, Event, asyncio.Future[Any] | None]] = (
            asyncio.Queue())  # fmt: skip
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.Task[None] | None = None
        self._stopped = False
        #: told of every leader change written (the broker's ReplicationMetrics.leader_election)
        self.on_election: Any = None

    # public ------------------------------------------------------------------------------------
    @property
    def active(self) -> bool:
        return self.office is not None

    @property
    def ctx(self) -> ControllerContext | None:
        """What the active controller knows (None when not active)."""
        return self.office.ctx if self.office is not None else None

    @property
    def epoch(self) -> int:
        return self.office.ctx.epoch if self.office is not None else -1

    async def start(self) -> None:
        self.store.add_session_listener(self._on_session)
        self._task = asyncio.get_running_loop().create_task(self._run())
        self._submit(self._stand, 0)

    async def stop(self) -> None:
        self._stopped = True
        await self._resign("broker stopping")
        await election.resign(self.store, self.broker_id)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait({self._task}, timeout=1.0)

    def call(self, fn: Callable[[Term], Awaitable[T]]) -> asyncio.Future[T]:
        """Run ``fn(term)`` as an event of the current term (NotControllerError if not
        active)."""
        office = self.office
        if office is None:
            raise NotControllerError(f"broker {self.broker_id} is not the controller")
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((office.number, lambda: fn(office), future))
        return future

    async def idle(self) -> None:
        """Wait until the event queue and the channels are drained (tests)."""
        while True:
            await self._queue.join()
            channel = self.office.channel if self.office is not None else None
            if channel is None or channel.idle():
                await asyncio.sleep(0)
                if self._queue.empty():
                    return
            await asyncio.sleep(0.01)

    # the event loop ----------------------------------------------------------------------------
    def _submit(self, fn: Event, term: int) -> None:
        self._queue.put_nowait((term, fn, None))

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
                    self._submit(self._stand, self.term)
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
                self._submit(self._stand, self.term)
            return
        # SUSPENDED or LOST: nothing this broker believes can be trusted: stop acting now.
        if self.office is not None:
            asyncio.get_running_loop().create_task(self._resign(f"store session {state.value}"))

    # election ----------------------------------------------------------------------------------
    async def _stand(self) -> None:
        if self._stopped or self.office is not None:
            return
        term = self.term

        def on_change(_event: WatchEvent) -> None:
            if term == self.term and self.office is None:
                self._submit(self._stand, self.term)

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
        ctx = ControllerContext(office.epoch, office.epoch_version)
        ctx.on_election = self.on_election
        channel = ChannelManager(self.broker_id, self.network,
                                 request_timeout=self.settings.request_timeout_s)  # fmt: skip
        held = self.office = Term(self.term, self.store, self.broker_id, ctx, channel,
                                  self.settings, self._submit, lambda: self.term)  # fmt: skip
        log.info("broker %d is the controller, epoch %d", self.broker_id, office.epoch)
        try:
            await election.active_controller(self.store,
                                             watch=held.watch(self._check_office))  # fmt: skip
            if self.office is not held:  # resigned meanwhile (stopping, session lost)
                return
            await failover.take_office(held)
            if self.settings.auto_rebalance and self.office is held:
                self._timer = asyncio.get_running_loop().create_task(
                    self._rebalance_timer(held))  # fmt: skip
        except ControllerMovedError:
            await self._resign("a newer controller exists")
        except (SessionLostError, StoreError) as exc:
            log.warning("controller failover failed: %s", exc)
            await self._resign("failover failed")

    async def _check_office(self) -> None:
        """``/controller`` changed while this broker holds the office: resign if it is gone."""
        office = self.office
        if office is None:
            return
        holder = await election.active_controller(self.store,
                                                  watch=office.watch(self._check_office))  # fmt: skip
        if holder != self.broker_id:
            await self._resign(f"/controller is now held by {holder}")
            self._submit(self._stand, self.term)

    async def _resign(self, why: str) -> None:
        office = self.office
        if office is None:
            return
        log.info("controller %d (epoch %d) resigns: %s", self.broker_id, office.ctx.epoch, why)
        self.office = None
        self.term += 1
        self.active_id = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if office.channel is not None:
            await office.channel.close()

    # preferred-leader rebalance ----------------------------------------------------------------
    async def _rebalance_timer(self, office: Term) -> None:
        while office.current:
            await asyncio.sleep(self.settings.imbalance_interval_s)
            if office.current:
                office.submit(lambda: requests.rebalance(office))
