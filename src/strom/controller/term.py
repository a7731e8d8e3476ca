"""One term of office of the active controller: what every controller event acts on.

A :class:`Term` starts when this broker wins the election (:mod:`strom.controller.controller`)
and ends at its resignation. It holds what the controller knows in that term (the
:class:`~strom.controller.context.ControllerContext`), the channels to the brokers, and the
means to act: request batches (:meth:`Term.batch`, :meth:`Term.send`), fenced partition-state
writes (:meth:`Term.states`) and topic-document writes (:meth:`Term.write_topic`), leader
elections of offline partitions (:meth:`Term.elect_offline`), and new events of the same term
(:meth:`Term.submit`, :meth:`Term.watch`). The event modules (:mod:`.changes`,
:mod:`.requests`, :mod:`.reassignment`, :mod:`.deletion`, :mod:`.failover`) take a term and
use only this surface.

Invariant: once the term has ended (:attr:`Term.current` false), nothing it sends reaches a
broker (its channels are closed), its watches and submitted events are dropped, and its
fenced writes fail (ControllerMovedError: the epoch it was elected at is no longer the
store's).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from strom.controller.batch import RequestBatch
from strom.controller.context import TP, ControllerContext, offline_election
from strom.controller.partitions import ControllerMovedError, PartitionStates
from strom.metadata.store import CheckOp, MetadataStore, MultiError, NoNodeError, SetOp, WatchEvent
from strom.metadata.zk_model import CONTROLLER_EPOCH_PATH, TOPIC_CONFIGS_PATH, topic_path

if TYPE_CHECKING:
    from strom.controller.channel import ChannelManager
    from strom.controller.settings import ControllerSettings

log = logging.getLogger(__name__)
#: an event of the controller: runs alone, on the controller's task
Event = Callable[[], Awaitable[Any]]


class Term:
    def __init__(self, number: int, store: MetadataStore, broker_id: int,
                 ctx: ControllerContext, channel: ChannelManager | None,
                 settings: ControllerSettings, submit: Callable[[Event, int], None],
                 current_term: Callable[[], int]) -> None:  # fmt: skip
        self.number = number
        self.store = store
        self.broker_id = broker_id
        self.ctx = ctx
        self.channel = channel
        self.settings = settings
        self._submit = submit
        self._current_term = current_term
        #: called with (broker, response) for every LeaderAndIsr answer of this term's batches;
        #: :func:`strom.controller.failover.take_office` sets it first thing (the log-dir
        #: rule of :mod:`strom.controller.log_dirs`), so the term's first batch is read too
        self.leader_and_isr_answered: Callable[[int, Any], None] | None = None

    @property
    def current(self) -> bool:
        """Whether this term is still the controller's (not resigned since)."""
        return self._current_term() == self.number

    # events of this term -----------------------------------------------------------------------
    def submit(self, event: Event) -> None:
        """Queue ``event`` to run after the current one, in this term (dropped if it ended)."""
        self._submit(event, self.number)

    def watch(self, event: Event) -> Callable[[WatchEvent], None]:
        """A store watch callback that queues ``event`` in this term (ignored once it ended)."""

        def fire(_event: WatchEvent) -> None:
            if self.current:
                self._submit(event, self.number)

        return fire

    # acting ------------------------------------------------------------------------------------
    def batch(self) -> RequestBatch:
        return RequestBatch(self.ctx, self.broker_id)

    def send(self, batch: RequestBatch) -> None:
        """Queue the batch's requests on the channels to the brokers. Every LeaderAndIsr
        answer goes to :attr:`leader_and_isr_answered` (replicas in offline log directories,
        :mod:`strom.controller.log_dirs`)."""
        if self.channel is not None:
            if batch.leader_and_isr_callback is None:
                batch.leader_and_isr_callback = self.leader_and_isr_answered
            batch.send(self.channel)

    def states(self) -> PartitionStates:
        return PartitionStates(self.store, self.ctx)

    async def write_topic(self, topic: str) -> None:
        """Write ``topic``'s document from the context (a reassignment), fenced by the
        controller epoch (ControllerMovedError when another controller holds the office)."""
        ctx = self.ctx
        try:
            await self.store.multi([CheckOp(CONTROLLER_EPOCH_PATH, ctx.epoch_version),
                                    SetOp(topic_path(topic), ctx.topics[topic].to_json())])  # fmt: skip
        except MultiError as exc:
            if exc.index == 0:
                raise ControllerMovedError(str(exc)) from None
            raise

    async def unclean_allowed(self, topic: str) -> bool:
        """``unclean.leader.election.enable`` of ``topic`` (its override, else the broker's)."""
        try:
            data, _ = await self.store.get(f"{TOPIC_CONFIGS_PATH}/{topic}")
            value = json.loads(data).get("config", {}).get("unclean.leader.election.enable")
        except (NoNodeError, ValueError, AttributeError):
            value = None
        return self.settings.unclean_default if value is None else str(value).lower() == "true"

    async def elect_offline(self, tps: list[TP], batch: RequestBatch) -> set[TP]:
        """Elect leaders for partitions whose leader is gone (OfflinePartition -> Online)."""
        ctx = self.ctx
        unclean = {t: await self.unclean_allowed(t) for t in {tp[0] for tp in tps}}
        states = self.states()
        elector = states.elect(
            lambda tp, s: offline_election(ctx, ctx.replicas(tp), s.isr, unclean[tp[0]], tp)
        )
        changed = await states.update(tps, elector, batch)
        for tp in set(tps) - changed:
            log.warning("partition %s-%d has no eligible leader (ISR %s): offline", *tp,
                        list(ctx.states[tp].state.isr) if tp in ctx.states else [])  # fmt: skip
        return changed
