"""Partition state changes, written to the store fenced by the controller epoch.

Kafka's ``PartitionStateMachine`` and the ISR half of its ``ReplicaStateMachine``. Every write
of a state node is ``multi([CheckOp("/controller_epoch", epoch_version), <create or set>])``:

* the check fails (``MultiError`` at index 0) when a newer controller bumped the epoch: this
  one has lost its office, :class:`ControllerMovedError` is raised and the controller resigns;
* the set fails at index 1 when the partition epoch (the node's version) is not the one this
  controller knows: the state is read again and the change recomputed from it once; a second
  failure leaves the partition as it is (the next event retries).

A successful write updates the context and records, in the event's :class:`RequestBatch`, a
LeaderAndIsr to the partition's live replicas and an UpdateMetadata to every live broker.
Leader epoch: +1 at every leader change and at every ISR change made by the controller (as
Kafka's ``newLeaderAndIsr``), so a broker can tell the newer of two states apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable

from strom.controller.batch import RequestBatch
from strom.controller.context import TP, ControllerContext, Elected, LeaderIsr
from strom.metadata.store import (
    CheckOp,
    CreateOp,
    MetadataStore,
    MultiError,
    NodeExistsError,
    NoNodeError,
    SetOp,
)
from strom.metadata.zk_model import (
    CONTROLLER_EPOCH_PATH,
    NO_LEADER,
    PartitionState,
    partition_state_path,
)

log = logging.getLogger(__name__)

#: Computes the new state of a partition from its current one (None: nothing to change).
Change = Callable[[TP, PartitionState], PartitionState | None]


class ControllerMovedError(Exception):
    """A fenced write failed on ``/controller_epoch``: another controller holds the office."""


class PartitionStates:
    def __init__(self, store: MetadataStore, ctx: ControllerContext) -> None:
        self.store = store
        self.ctx = ctx

    def _check(self) -> CheckOp:
        return CheckOp(CONTROLLER_EPOCH_PATH, self.ctx.epoch_version)

    async def read(self, tp: TP) -> LeaderIsr | None:
        try:
            data, stat = await self.store.get(partition_state_path(*tp))
        except NoNodeError:
            return None
        return LeaderIsr(PartitionState.from_json(data), stat.version)

    # creation (NewPartition -> OnlinePartition) --------------------------------------------
    async def initialize(self, tps: Iterable[TP], batch: RequestBatch) -> list[TP]:
        """Give partitions without a state their first one: leader the first live replica,
        ISR the live replicas, leader epoch 0. Partitions with no live replica stay new."""
        done = await asyncio.gather(*(self._initialize(tp, batch) for tp in tps))
        return [tp for tp in done if tp is not None]

    async def _initialize(self, tp: TP, batch: RequestBatch) -> TP | None:
        replicas = self.ctx.replicas(tp)
        live = tuple(b for b in replicas if self.ctx.live(b))
        if not live:
            log.warning("partition %s-%d has no live replica %s: it stays offline", *tp, replicas)
            return None
        state = PartitionState(live[0], 0, live, self.ctx.epoch)
        path = partition_state_path(*tp)
        with contextlib.suppress(NodeExistsError):
            await self.store.create(path.rsplit("/", 1)[0], make_parents=True)
        try:
            stats = await self.store.multi([self._check(), CreateOp(path, state.to_json())])
        except MultiError as exc:
            if exc.index == 0:
                raise ControllerMovedError(str(exc)) from None
            found = await self.read(tp)  # created by an earlier controller: adopt it
            if found is None:
                return None
            self.ctx.states[tp] = found
            batch.add_leader_and_isr(replicas, tp)
            return tp
        stat = stats[1]
        assert stat is not None
        self.ctx.states[tp] = LeaderIsr(state, stat.version)
        batch.add_leader_and_isr(replicas, tp, is_new=True)
        return tp

    # updates -------------------------------------------------------------------------------
    async def update(self, tps: Iterable[TP], change: Change, batch: RequestBatch, *,
                     notify_replicas: bool = True) -> set[TP]:  # fmt: skip
        """Apply ``change`` to each partition, fenced; the partitions actually changed. Their
        replicas get LeaderAndIsr unless ``notify_replicas`` is false; every live broker gets
        UpdateMetadata."""
        tps = list(tps)
        results = await asyncio.gather(*(self._update(tp, change) for tp in tps),
                                       return_exceptions=True)  # fmt: skip
        changed: set[TP] = set()
        for tp, result in zip(tps, results, strict=True):
            if isinstance(result, ControllerMovedError):
                raise result
            if isinstance(result, BaseException):
                log.error("updating the state of %s-%d failed: %r", tp[0], tp[1], result)
            elif result:
                changed.add(tp)
                if notify_replicas:
                    batch.add_leader_and_isr(self.ctx.replicas(tp), tp)
                else:
                    batch.add_update_metadata(self.ctx.live_ids(), [tp])
        return changed

    async def _update(self, tp: TP, change: Change) -> bool:
        began = time.perf_counter()
        for _attempt in range(2):
            current = self.ctx.states.get(tp)
            if current is None:
                return False
            new = change(tp, current.state)
            if new is None:
                return False
            if await self.write(tp, new, current.version) is not None:
                old = current.state
                if new.leader != old.leader and new.leader >= 0 and self.ctx.on_election:
                    self.ctx.on_election(tp[0], tp[1], unclean=new.leader not in old.isr,
                                         duration_ms=(time.perf_counter() - began) * 1000)
                return True
        return False

    async def write(self, tp: TP, new: PartitionState, version: int) -> LeaderIsr | None:
        """Write ``new`` if the state is still at ``version``: the new state, or None when the
        version is stale (the context then holds the state read back)."""
        try:
            stats = await self.store.multi([
                self._check(), SetOp(partition_state_path(*tp), new.to_json(), version),
            ])  # fmt: skip
        except MultiError as exc:
            if exc.index == 0:
                raise ControllerMovedError(str(exc)) from None
            found = await self.read(tp)
            if found is not None:
                self.ctx.states[tp] = found
            log.info("partition %s-%d: state version %d is stale", tp[0], tp[1], version)
            return None
        stat = stats[1]
        assert stat is not None
        self.ctx.states[tp] = written = LeaderIsr(new, stat.version)
        return written

    # the changes the controller makes ------------------------------------------------------
    def elect(self, elector: Callable[[TP, PartitionState], Elected]) -> Change:
        """A leader election: ``elector`` picks (leader, isr) or None (no change)."""

        def change(tp: TP, s: PartitionState) -> PartitionState | None:
            picked = elector(tp, s)
            if picked is None:
                return None
            leader, isr = picked
            recovery = 1 if leader not in s.isr else 0
            return PartitionState(leader, s.leader_epoch + 1, isr, self.ctx.epoch, recovery)

        return change

    def remove_from_isr(self, broker: int) -> Change:
        """``broker`` leaves the ISR; if it led, the partition has no leader now. The last ISR
        member is kept (Kafka: it tells which replica has the data)."""

        def change(tp: TP, s: PartitionState) -> PartitionState | None:
            if broker not in s.isr and s.leader != broker:
                return None
            leader = NO_LEADER if s.leader == broker else s.leader
            isr = s.isr if len(s.isr) == 1 else tuple(b for b in s.isr if b != broker)
            if leader == s.leader and isr == s.isr:
                return None
            return PartitionState(leader, s.leader_epoch + 1, isr, self.ctx.epoch,
                                  s.leader_recovery_state)  # fmt: skip

        return change
