"""The controller's admin requests on a single node: ElectLeaders, AlterPartitionReassignments,
ListPartitionReassignments.

A single node (the embedded store, no ``zookeeper.connect``) runs no :class:`Controller`: it
leads every partition it hosts itself (:mod:`strom.replication.local_leadership`) and names itself the
controller in Metadata and DescribeCluster. So that these admin APIs answer as Kafka's do against
one broker, :class:`SingleNodeController` stands in for the active controller: a term of
office (:class:`~strom.controller.term.Term`) whose context is built, for each request, from
this broker alone (itself the
only live broker, at its broker epoch; the topic registry's assignment of every partition hosted
here; each partition's leader, leader epoch, ISR and partition epoch from the replica manager),
on which the handlers run the controller's own functions
(:func:`strom.controller.requests.elect_leaders`, :func:`strom.controller.reassignment.alter`,
:func:`~strom.controller.reassignment.ongoing`). The rules are the controller's; none is
restated here.

On one broker those functions find nothing to hand over: the only live replica already leads
with ISR [itself]. So a preferred or unclean election answers ELECTION_NOT_NEEDED, a
reassignment to [this broker] completes within the request (its target is in the ISR), and one
naming another broker is refused (INVALID_REPLICA_ASSIGNMENT: not live). What they write is
applied as follows (:class:`_LocalStates`, :meth:`SingleNodeController.write_topic`):

* a partition state keeping its leader and ISR is taken into the request's context only: the
  broker keeps LocalLeadership's leader epoch (bumping it would hand nothing over, and
  LocalLeadership starts at the same epoch after a restart, so it must never move);
* a state moving the leader or the ISR is refused (no broker could take it);
* a topic document whose assignment changed is written in the topic registry's format (only
  possible for a partition assigned to brokers that are gone, moved back to this one).

The requests a controller would send are not sent: they would tell this broker what it does.
Requests run one at a time, as controller events do.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Protocol, TypeVar

from strom.controller.batch import RequestBatch
from strom.controller.context import ControllerContext, LeaderIsr, LiveBroker, TopicDoc
from strom.controller.controller import NotControllerError
from strom.controller.partitions import PartitionStates
from strom.controller.settings import ControllerSettings
from strom.controller.term import Event, Term
from strom.metadata.store import MetadataStore
from strom.metadata.topics import TopicInfo, TopicRegistry, topic_document
from strom.metadata.zk_model import BrokerRegistration, PartitionState, topic_path

if TYPE_CHECKING:
    from strom.controller.context import TP

log = logging.getLogger(__name__)
T = TypeVar("T")
#: the controller epoch a single node leads in (strom.replication.local_leadership's)
LOCAL_CONTROLLER_EPOCH = 0


class HostedPartition(Protocol):
    """What the stand-in reads of each partition this broker hosts (its replica manager's
    :class:`~strom.replication.partition.Partition`)."""

    @property
    def leader_id(self) -> int: ...

    @property
    def leader_epoch(self) -> int: ...

    @property
    def isr(self) -> tuple[int, ...]: ...

    @property
    def partition_epoch(self) -> int: ...


class _LocalStates(PartitionStates):
    """Partition-state writes of one request on a single node (see the module docstring)."""

    async def write(self, tp: TP, new: PartitionState, version: int) -> LeaderIsr | None:
        current = self.ctx.states.get(tp)
        if current is None or current.version != version:
            return None
        old = current.state
        if new.leader != old.leader or set(new.isr) != set(old.isr):
            log.warning("partition %s-%d: a single node cannot move leader %d ISR %s to %d %s",
                        tp[0], tp[1], old.leader, list(old.isr), new.leader, list(new.isr))  # fmt: skip
            return None
        self.ctx.states[tp] = written = LeaderIsr(old, version)
        return written


class _SingleNodeTerm(Term):
    """One request's term on a single node: nothing is sent, writes as the module doc says."""

    def __init__(self, owner: SingleNodeController, ctx: ControllerContext) -> None:
        super().__init__(0, owner.store, owner.registration.broker_id, ctx, None,
                         ControllerSettings(), self._no_events, lambda: 0)  # fmt: skip
        self.registry = owner.registry

    @staticmethod
    def _no_events(event: Event, term: int) -> None:
        raise NotControllerError("a single node's controller works within a request only")

    def send(self, batch: RequestBatch) -> None:
        """The batch could only tell this broker what it already does: dropped."""

    def states(self) -> PartitionStates:
        return _LocalStates(self.store, self.ctx)

    async def write_topic(self, topic: str) -> None:
        doc = self.ctx.topics[topic]
        info = self.registry.get(topic)
        if info is None:
            return
        replicas = {**info.replicas, **{p: list(r) for p, r in doc.assignment.items()}}
        if replicas == info.replicas:
            return
        log.info("topic %s: assignment %s -> %s", topic, info.replicas, replicas)
        moved = TopicInfo(topic, info.topic_id, replicas, info.configs)
        await self.store.set(topic_path(topic), topic_document(moved))


class SingleNodeController:
    """The controller of a single node's admin requests (see the module docstring)."""

    def __init__(self, store: MetadataStore, registry: TopicRegistry,
                 hosted: Mapping[tuple[str, int], HostedPartition],
                 registration: BrokerRegistration, broker_epoch: Callable[[], int]) -> None:  # fmt: skip
        self.store = store
        self.registry = registry
        self.hosted = hosted
        self.registration = registration
        self.broker_epoch = broker_epoch
        self._lock = asyncio.Lock()

    @property
    def active(self) -> bool:
        return True  # a single node always holds the office

    def call(self, fn: Callable[[Term], Awaitable[T]]) -> asyncio.Future[T]:
        """Run ``fn`` on a term built from this broker, one request at a time."""
        return asyncio.ensure_future(self._serialized(fn))

    async def _serialized(self, fn: Callable[[Term], Awaitable[T]]) -> T:
        async with self._lock:
            return await fn(_SingleNodeTerm(self, self._build()))

    def _build(self) -> ControllerContext:
        me = self.registration.broker_id
        ctx = ControllerContext(epoch=LOCAL_CONTROLLER_EPOCH)
        ctx.brokers[me] = LiveBroker(self.registration, self.broker_epoch())
        hosted: dict[str, dict[int, LeaderIsr]] = {}
        for (topic, index), part in self.hosted.items():
            if part.leader_id < 0:
                continue
            state = PartitionState(part.leader_id, part.leader_epoch, tuple(part.isr),
                                   LOCAL_CONTROLLER_EPOCH)  # fmt: skip
            hosted.setdefault(topic, {})[index] = LeaderIsr(state, part.partition_epoch)
        for info in self.registry:
            found = hosted.get(info.name)
            if not found:
                continue  # being created or deleted: not a partition of this broker yet / now
            assignment = {p: list(r) for p, r in info.replicas.items() if p in found}
            ctx.topics[info.name] = TopicDoc(info.name, info.topic_id, assignment)
            for p in assignment:
                ctx.states[(info.name, p)] = found[p]
        return ctx
