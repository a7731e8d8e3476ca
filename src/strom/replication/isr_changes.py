"""ISR changes of the partitions this broker leads, sent to the controller (AlterPartition v3).

Kafka's ``AlterPartitionManager`` + ``Partition.maybeShrinkIsr/maybeExpandIsr``: the leader
never changes its ISR alone. It proposes a new ISR (:meth:`IsrChangeManager.propose`), which
the partition keeps as *pending* (KIP-497: meanwhile the HW uses the maximal ISR, the
min.insync check the minimal one), and sends it to the controller (its id from the metadata
cache, its address from the live brokers). The answer carries the ISR, leader epoch and
partition epoch the controller wrote; the partition applies it. Errors:

- top-level (NOT_CONTROLLER, STALE_BROKER_EPOCH, no controller known, connection lost): the
  proposal is sent again after ``replica.fetch.backoff.ms``-like back-off;
- per partition (INVALID_UPDATE_VERSION, FENCED_LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION …):
  the proposal is dropped; the controller's next LeaderAndIsr brings the truth.

A check every half ``replica.lag.time.max.ms`` proposes to remove ISR followers that have not
caught up for longer than that (:meth:`shrink_check`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.alter_partition.v3 import request as ap_req

from strom.protocol.errors import ErrorCode
from strom.protocol.messages import build
from strom.replication.connection import BrokerConnection, BrokerConnectionError
from strom.replication.task_stop import cancel_and_wait

if TYPE_CHECKING:
    import uuid

    from strom.replication.partition import Partition
    from strom.replication.replica_manager import ReplicaManager

log = logging.getLogger(__name__)
API_KEY, VERSION = 56, 3


class IsrMetrics(Protocol):
    """Told of every committed ISR change (Kafka's IsrShrinksPerSec / IsrExpandsPerSec)."""

    def isr_shrink(self, topic: str, partition: int) -> None: ...

    def isr_expand(self, topic: str, partition: int) -> None: ...


class IsrChangeManager:
    def __init__(self, replicas: ReplicaManager, topic_id: Callable[[str], uuid.UUID | None],
                 lag_ms: int, backoff_ms: int = 500, broker_epoch: Callable[[], int] = lambda: -1,
                 source_host: str | None = None, metrics: IsrMetrics | None = None) -> None:  # fmt: skip
        self.replicas = replicas
        self.topic_id = topic_id
        self.lag_ms = lag_ms
        self.backoff = backoff_ms / 1000
        self.broker_epoch = broker_epoch
        self.source_host = source_host
        self._queued: dict[tuple[str, int], Partition] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False  # ends the sender even if its cancellation is lost (task_stop)
        self._conn: BrokerConnection | None = None
        self._conn_to: tuple[str, int] = ("", -1)
        self.metrics = metrics

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        self._closed = True
        self._wake.set()
        await cancel_and_wait(self._task, "AlterPartition sender")
        if self._conn is not None:
            self._conn.close()

    def propose(self, part: Partition, isr: tuple[int, ...]) -> None:
        proposed = tuple(sorted(set(isr)))
        if proposed == tuple(sorted(part.isr)):
            return
        part.propose_isr(proposed)
        log.info("proposing ISR %s for %s-%d (was %s)", list(proposed), part.topic, part.index,
                 list(part.isr))  # fmt: skip
        self._queued[(part.topic, part.index)] = part
        self._wake.set()

    def shrink_check(self) -> None:
        """Propose to drop lagging ISR followers. Visits only the leaders with followers in
        their ISR (:attr:`ReplicaManager.with_isr_followers`): none on a single node, so
        10,000 partitions cost nothing here; entries that no longer qualify (a follower now,
        alone in its ISR, stopped) are dropped."""
        hosted = self.replicas.partitions
        candidates = self.replicas.with_isr_followers
        for key, part in list(candidates.items()):
            if hosted.get(key) is not part or not part.has_isr_followers:
                del candidates[key]
                continue
            if part.pending is not None:
                continue
            lagging = part.out_of_sync_replicas(self.lag_ms)
            if lagging:
                self.propose(part, tuple(r for r in part.isr if r not in lagging))

    # --- sending -------------------------------------------------------------------------------

    async def _run(self) -> None:
        while not self._closed:
            await self._wake.wait()
            self._wake.clear()
            if self._closed:
                return
            batch = {k: p for k, p in self._queued.items() if p.pending is not None}
            self._queued.clear()
            if not batch:
                continue
            try:
                await self._send(batch)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # no controller, lost connection, a bad answer
                level = logging.WARNING if isinstance(exc, BrokerConnectionError | _NoController) \
                    else logging.ERROR  # fmt: skip
                log.log(level, "AlterPartition not sent (%s): retrying in %.1fs", exc, self.backoff)
                for key, part in batch.items():
                    self._queued.setdefault(key, part)
                await asyncio.sleep(self.backoff)
                self._wake.set()

    def _connection(self) -> BrokerConnection:
        cache = self.replicas.cache
        controller = cache.broker(cache.controller_id)
        if controller is None:
            raise _NoController(f"no live controller known (id {cache.controller_id})")
        address = (controller.host, controller.port)
        if self._conn is None or self._conn_to != address:
            if self._conn is not None:
                self._conn.close()
            self._conn = BrokerConnection(*address, client_id=f"strom-isr-{self.replicas.node_id}",
                                          source_host=self.source_host)  # fmt: skip
            self._conn_to = address
        return self._conn

    def _request(self, batch: dict[tuple[str, int], Partition]) -> Any:
        topics: dict[str, list[Any]] = {}
        for (topic, index), part in batch.items():
            assert part.pending is not None
            topics.setdefault(topic, []).append(build(ap_req.PartitionData,
                partition_index=index, leader_epoch=part.leader_epoch,
                new_isr_with_epochs=tuple(build(ap_req.BrokerState, broker_id=r, broker_epoch=-1)
                                          for r in part.pending.proposed),
                leader_recovery_state=0, partition_epoch=part.partition_epoch,
            ))  # fmt: skip
        return build(ap_req.AlterPartitionRequest,
            broker_id=self.replicas.node_id, broker_epoch=self.broker_epoch(),
            topics=tuple(build(ap_req.TopicData, topic_id=self.topic_id(t), partitions=tuple(ps))
                         for t, ps in topics.items()),
        )  # fmt: skip

    async def _send(self, batch: dict[tuple[str, int], Partition]) -> None:
        conn = self._connection()
        response = await conn.send(API_KEY, VERSION, self._request(batch), timeout=30)
        top = ErrorCode(response.error_code)
        if top != ErrorCode.none:
            raise _NoController(f"controller answered {top.name}")
        names = {self.topic_id(t): t for t, _ in batch}
        for topic in response.topics:
            name = names.get(topic.topic_id)
            for p in topic.partitions:
                part = batch.get((name, int(p.partition_index))) if name else None
                if part is None:
                    continue
                self.apply(part, p)

    def apply(self, part: Partition, answer: Any) -> None:
        """Apply one partition's AlterPartition answer (see the module doc)."""
        code = ErrorCode(answer.error_code)
        if code != ErrorCode.none:
            log.warning("AlterPartition of %s-%d refused: %s", part.topic, part.index, code.name)
            part.pending = None
            self.replicas.isr_changed(part)  # a refused expansion no longer holds the HW
            return
        if int(answer.leader_epoch) < part.leader_epoch:
            part.pending = None  # answered for an epoch this partition has left already
            self.replicas.isr_changed(part)
            return
        isr = tuple(int(r) for r in answer.isr)
        log.info("ISR of %s-%d is now %s (leader epoch %d, partition epoch %d)", part.topic,
                 part.index, list(isr), answer.leader_epoch, answer.partition_epoch)  # fmt: skip
        before = set(part.isr)
        part.apply_isr(isr, int(answer.leader_epoch), int(answer.partition_epoch))
        self.replicas.isr_changed(part)
        if self.metrics is not None:  # Kafka's IsrShrinksPerSec / IsrExpandsPerSec
            if before - set(isr):
                self.metrics.isr_shrink(part.topic, part.index)
            if set(isr) - before:
                self.metrics.isr_expand(part.topic, part.index)


class _NoController(Exception):
    pass
