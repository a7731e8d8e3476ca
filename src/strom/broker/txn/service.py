"""The transaction coordinator as a broker service: ``__transaction_state``, loading, timers.

``__transaction_state`` is created by the first FindCoordinator of a transactional id
(:mod:`strom.broker.internal_topics`; in a cluster with ``min.insync.replicas`` =
``transaction.state.log.min.isr``), not here. The service listens to the leadership of its partitions
(:mod:`strom.replication.coordinator_partitions`): when this broker becomes the leader of one, in
a leader epoch, the coordinator loads it (:meth:`TransactionCoordinator.begin_load`, its
transactional ids answer COORDINATOR_LOAD_IN_PROGRESS; the log replayed in a task; then
:meth:`~TransactionCoordinator.finish_load`, which completes transactions left in
PrepareCommit/PrepareAbort), with that leader epoch as its coordinator epoch; when it stops
leading it, the partition is unloaded (NOT_COORDINATOR). A single node leads every partition
before its services start: start-up returns once they are all loaded, as before.

Appends to ``__transaction_state`` are acks=all (:meth:`ReplicaManager.append_replicated`,
done at the high watermark, within :data:`APPEND_TIMEOUT_S`, Kafka's ``request.timeout.ms``).
Markers go through :class:`strom.broker.txn.markers.MarkerChannel` to each partition's leader. This service starts after the group coordinator's, so markers
reaching ``__consumer_offsets`` publish or drop transactional offsets. Ongoing transactions
found at a load keep running; the timeout sweep
(``transaction.abort.timed.out.transaction.cleanup.interval.ms``) aborts them if their producer
does not come back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from strom.broker import internal_topics
from strom.broker.internal_log_replay import replay
from strom.broker.txn import records as rec
from strom.broker.txn.coordinator import TransactionCoordinator, TxnConfig, TxnValue
from strom.broker.txn.markers import MarkerChannel
from strom.broker.txn.verification import TxnVerifier
from strom.protocol import record_batch as rb
from strom.protocol.errors import ErrorCode, KafkaError
from strom.storage.batch_validation import AppendOrigin

if TYPE_CHECKING:
    from strom.broker.group.service import GroupService
    from strom.broker.producer_ids import ProducerIdManager
    from strom.clock import Clock
    from strom.config import BrokerConfig
    from strom.metadata.topics import TopicRegistry
    from strom.periodic import Periodic
    from strom.replication.replica_manager import ReplicaManager
    from strom.storage.log import Log

log = logging.getLogger(__name__)
TXN_TOPIC = internal_topics.TXN_TOPIC
APPEND_TIMEOUT_S = 30.0  # Kafka's coordinator waits request.timeout.ms for its appends
TopicPartition = tuple[str, int]


def read_records(log_: Log, topic: str = TXN_TOPIC) -> Iterator[tuple[str, TxnValue | None]]:
    """The (transactional id, value or None) records of a ``__transaction_state`` log, in
    order, up to its end (a new leader's log is the truth its followers truncate to)."""
    for entry in replay(log_):
        assert entry.key is not None
        try:
            value = None if entry.value is None else rec.decode_value(entry.value)
            yield rec.decode_key(entry.key), value
        except ValueError as exc:
            log.warning("%s offset %d: skipping record: %s", topic, entry.offset, exc)


class TxnService:
    def __init__(self, config: BrokerConfig, clock: Clock, replicas: ReplicaManager,
                 registry: TopicRegistry, groups: GroupService, producer_ids: ProducerIdManager,
                 periodic: Periodic, source_host: str | None) -> None:  # fmt: skip
        self.config = config
        self.clock = clock
        self.replicas = replicas
        self.registry = registry
        self.producer_ids = producer_ids
        self.periodic = periodic
        #: made at start (its partition count is the topic's, once the registry is loaded)
        self.coordinator: TransactionCoordinator | None = None
        self.markers = MarkerChannel(replicas, registry, groups, clock, source_host)
        self.verifier = TxnVerifier(replicas.cache, source_host)
        self._loads: dict[int, asyncio.Task[None]] = {}

    def active(self) -> TransactionCoordinator:
        """The coordinator; COORDINATOR_NOT_AVAILABLE before the service started."""
        if self.coordinator is None:
            raise KafkaError(ErrorCode.coordinator_not_available,
                             "transaction coordinator not started")  # fmt: skip
        return self.coordinator

    async def start(self) -> None:
        cfg = self.config
        config = TxnConfig(
            partitions=internal_topics.partition_count(self.registry, cfg, TXN_TOPIC),
            max_timeout_ms=cfg.get_int("transaction.max.timeout.ms"),
            id_expiration_ms=cfg.get_int("transactional.id.expiration.ms"),
        )
        self.coordinator = TransactionCoordinator(
            config, self.clock, self._append, self.markers.write, self.producer_ids.next_id,
        )  # fmt: skip
        self.replicas.ownership.register(TXN_TOPIC, self)
        if self._loads:  # partitions led already (a single node): loaded before serving
            await asyncio.gather(*self._loads.values(), return_exceptions=True)
        abort_ms = cfg.get_int("transaction.abort.timed.out.transaction.cleanup.interval.ms")
        self.periodic.every(max(abort_ms, 10) / 1000.0, self._abort_timed_out)
        expire_ms = cfg.get_int("transaction.remove.expired.transaction.cleanup.interval.ms")
        self.periodic.every(max(expire_ms, 100) / 1000.0, self._expire_ids)

    async def stop(self) -> None:
        self.replicas.ownership.unregister(TXN_TOPIC, self)
        for task in self._loads.values():
            task.cancel()
        if self.coordinator is not None:
            self.coordinator.close()
        self.markers.close()
        self.verifier.close()

    # partition ownership (strom.replication.coordinator_partitions) ---------------------------------
    def on_elected(self, partition: int, leader_epoch: int) -> None:
        coord = self.coordinator
        if coord is None or partition >= coord.config.partitions:
            return
        coord.begin_load(partition, leader_epoch)
        previous = self._loads.pop(partition, None)
        if previous is not None:
            previous.cancel()
        task = asyncio.get_running_loop().create_task(self._load(partition, leader_epoch))
        self._loads[partition] = task
        task.add_done_callback(lambda t: self._loads.pop(partition, None)
                               if self._loads.get(partition) is t else None)  # fmt: skip

    def on_resigned(self, partition: int) -> None:
        task = self._loads.pop(partition, None)
        if task is not None:
            task.cancel()
        if self.coordinator is not None:
            self.coordinator.unload(partition)
            log.info("transaction coordinator unloaded partition %d", partition)

    async def _load(self, partition: int, epoch: int) -> None:
        await asyncio.sleep(0)  # after the LeaderAndIsr that elected us is applied
        coord = self.coordinator
        log_ = self.replicas.logs.get(TXN_TOPIC, partition)
        if coord is None or log_ is None:
            return
        try:
            records = list(read_records(log_, f"{TXN_TOPIC}-{partition}"))
        except Exception:
            log.exception("loading %s-%d failed", TXN_TOPIC, partition)
            return
        coord.finish_load(partition, epoch, records)

    # timers -------------------------------------------------------------------------------------
    async def _abort_timed_out(self) -> None:
        if self.coordinator is not None:
            await self.coordinator.abort_timed_out()

    async def _expire_ids(self) -> None:
        if self.coordinator is not None:
            await self.coordinator.expire_ids()

    async def _append(self, partition: int, key: bytes, value: bytes | None) -> None:
        batch = rb.build_batch([(key, value, [], self.clock.time_ms())])
        await self.replicas.append_replicated(TXN_TOPIC, partition, batch,
                                              AppendOrigin.COORDINATOR, APPEND_TIMEOUT_S)  # fmt: skip

