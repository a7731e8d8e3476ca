"""The share coordinator as a broker service: ``__share_group_state``, loading, appends.

The coordinator (:class:`~strom.broker.share.coordinator.ShareCoordinator`) serves the keys of
the ``__share_group_state`` partitions this broker leads, as the group coordinator serves
``__consumer_offsets`` (:mod:`strom.replication.coordinator_partitions`): a partition is
replayed into it (synchronously: no request sees it half loaded) when this broker becomes its
leader, and forgotten when it stops leading it — its keys are then NOT_COORDINATOR here and
the share-partition leaders look for the new coordinator. The state thus moves with the
partition's leadership, and since every record is appended with acks=all (the high watermark
passes it, ``min.insync.replicas`` of the topic) before the request is answered, a new leader
has every acknowledged write.

Each operation (:meth:`ShareStateService.initialize` … ``summary``) runs under the lock of its
key's partition: the coordinator computes the records from the current state, they are
appended and replicated, and only then replayed into the state, in log order; an append that
fails changes nothing and answers with its error (NOT_COORDINATOR when the leadership moved,
REQUEST_TIMED_OUT after ``share.coordinator.write.timeout.ms``).

Periodic work, each every ``share.coordinator.state.topic.prune.interval.ms`` /
``share.coordinator.cold.partition.snapshot.interval.ms``: snapshots of keys that only got
updates lately (so older records stop being needed), then *pruning* — the log start offset of
each partition led here moves up to the oldest record a live key still needs (its latest
snapshot), as Kafka's ``ShareCoordinatorService`` deletes records of the topic.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from strom.broker import internal_topics
from strom.broker.internal_log_replay import replay
from strom.broker.share.coordinator import Key, ReadResult, Record, ShareCoordinator
from strom.broker.share.state import Batch
from strom.protocol import record_batch as rb
from strom.protocol.errors import ErrorCode, KafkaError
from strom.storage.batch_validation import AppendOrigin

if TYPE_CHECKING:
    from strom.clock import Clock
    from strom.config import BrokerConfig
    from strom.metadata.topics import TopicRegistry
    from strom.periodic import Periodic
    from strom.replication.replica_manager import ReplicaManager

log = logging.getLogger(__name__)
SHARE_STATE_TOPIC = internal_topics.SHARE_STATE_TOPIC
R = TypeVar("R")


class ShareStateService:
    def __init__(self, config: BrokerConfig, clock: Clock, replicas: ReplicaManager,
                 registry: TopicRegistry, periodic: Periodic) -> None:  # fmt: skip
        self.config = config
        self.clock = clock
        self.replicas = replicas
        self.registry = registry
        self.periodic = periodic
        self.coordinator: ShareCoordinator | None = None
        self._locks: dict[int, asyncio.Lock] = {}
        self.write_timeout_s = max(config.get_int("share.coordinator.write.timeout.ms"), 1) / 1000

    def active(self) -> ShareCoordinator:
        if self.coordinator is None:
            raise KafkaError(ErrorCode.coordinator_not_available, "share coordinator not started")
        return self.coordinator

    async def start(self) -> None:
        cfg = self.config
        partitions = internal_topics.partition_count(self.registry, cfg, SHARE_STATE_TOPIC)
        coord = ShareCoordinator(partitions,
                                 cfg.get_int("share.coordinator.snapshot.update.records.per.snapshot"))  # fmt: skip
        coord.owned = set()
        self.coordinator = coord
        self.replicas.ownership.register(SHARE_STATE_TOPIC, self)
        log.info("share coordinator: %d partitions of %s loaded, %d share-partitions",
                 len(coord.owned), SHARE_STATE_TOPIC, len(coord.states))  # fmt: skip
        cold_ms = max(cfg.get_int("share.coordinator.cold.partition.snapshot.interval.ms"), 100)
        prune_ms = max(cfg.get_int("share.coordinator.state.topic.prune.interval.ms"), 100)
        self.periodic.every(cold_ms / 1000, self._cold_snapshots)
        self.periodic.every(prune_ms / 1000, self._prune)

    async def stop(self) -> None:
        self.replicas.ownership.unregister(SHARE_STATE_TOPIC, self)

    # --- partition ownership (strom.replication.coordinator_partitions) -------------------------
    def on_elected(self, partition: int, leader_epoch: int) -> None:
        coord = self.coordinator
        if coord is None or partition >= coord.partitions:
            return
        coord.unload(partition)  # a re-election at a newer epoch: the log is the truth
        coord.loading.add(partition)
        count = 0
        log_ = self.replicas.logs.get(SHARE_STATE_TOPIC, partition)
        try:
            if log_ is not None:
                for entry in replay(log_):
                    assert entry.key is not None
                    try:
                        coord.replay(entry.offset, entry.key, entry.value)
                        count += 1
                    except ValueError as exc:
                        log.warning("%s-%d offset %d: skipping record: %s",
                                    SHARE_STATE_TOPIC, partition, entry.offset, exc)  # fmt: skip
        finally:
            coord.loading.discard(partition)
        if coord.owned is not None:
            coord.owned.add(partition)
        log.debug("share coordinator: replayed %d records of %s-%d", count, SHARE_STATE_TOPIC,
                  partition)  # fmt: skip

    def on_resigned(self, partition: int) -> None:
        coord = self.coordinator
        if coord is not None and partition < coord.partitions:
            dropped = coord.unload(partition)
            if dropped:
                log.info("share coordinator unloaded %d share-partitions of partition %d",
                         dropped, partition)  # fmt: skip

    # --- operations ------------------------------------------------------------------------------
    async def initialize(self, key: Key, state_epoch: int, start_offset: int) -> tuple[ErrorCode, str | None]:
        now = self.clock.time_ms()
        return await self._run(key, lambda c: _split(c.initialize(key, state_epoch, start_offset, now)))

    async def read(self, key: Key, leader_epoch: int) -> ReadResult:
        return await self._run(key, lambda c: c.read(key, leader_epoch))

    async def write(self, key: Key, state_epoch: int, leader_epoch: int, start_offset: int,
                    delivery_complete_count: int, batches: list[Batch]
                    ) -> tuple[ErrorCode, str | None]:  # fmt: skip
        now = self.clock.time_ms()
        return await self._run(key, lambda c: _split(c.write(
            key, state_epoch, leader_epoch, start_offset, delivery_complete_count, batches, now)))

    async def delete(self, key: Key) -> ErrorCode:
        return await self._run(key, lambda c: c.delete(key))

    async def summary(self, key: Key, leader_epoch: int) -> ReadResult:
        _check(key)
        coord = self.active()
        if (code := coord.not_here(key)) is not None:
            raise KafkaError(code)
        return coord.summary(key, leader_epoch)

    async def _run(self, key: Key, compute: Callable[[ShareCoordinator], tuple[list[Record], R]]) -> R:
        """``compute``'s answer once its records are appended, replicated and replayed;
        KafkaError when this broker does not serve the key or the append failed."""
        _check(key)
        coord = self.active()
        if (code := coord.not_here(key)) is not None:
            raise KafkaError(code)
        partition = coord.partition_for(key)
        lock = self._locks.setdefault(partition, asyncio.Lock())
        async with lock:
            if (code := coord.not_here(key)) is not None:  # the leadership moved meanwhile
                raise KafkaError(code)
            records, answer = compute(coord)
            if records:
                await self._append(partition, records)
            return answer

    async def _append(self, partition: int, records: list[Record]) -> None:
        now = self.clock.time_ms()
        batch = rb.build_batch([(key, value, [], now) for key, value in records])
        try:
            result = await self.replicas.append_replicated(
                SHARE_STATE_TOPIC, partition, batch, AppendOrigin.COORDINATOR, self.write_timeout_s)
        except KafkaError as exc:
            if exc.error_code in (ErrorCode.not_leader_or_follower,
                                  ErrorCode.unknown_topic_or_partition):  # fmt: skip
                raise KafkaError(ErrorCode.not_coordinator, str(exc)) from None
            raise
        coord = self.active()
        if coord.not_here_partition(partition):
            # unloaded while waiting for replication: the new leader replays the log instead
            raise KafkaError(ErrorCode.not_coordinator, f"{SHARE_STATE_TOPIC}-{partition} moved")
        for i, (key, value) in enumerate(records):
            coord.replay(result.base_offset + i, key, value)
            if value is not None:
                coord.stamp(key, now)

    # --- periodic work ---------------------------------------------------------------------------
    async def _cold_snapshots(self) -> None:
        coord = self.coordinator
        if coord is None or not coord.owned:
            return
        interval = self.config.get_int("share.coordinator.cold.partition.snapshot.interval.ms")
        for partition in sorted(coord.owned):
            lock = self._locks.setdefault(partition, asyncio.Lock())
            async with lock:
                if coord.not_here_partition(partition):
                    continue
                records = coord.cold_snapshots(partition, self.clock.time_ms(), interval)
                if records:
                    try:
                        await self._append(partition, records)
                    except KafkaError as exc:
                        log.info("cold snapshots of %s-%d: %s", SHARE_STATE_TOPIC, partition, exc)

    def _prune(self) -> None:
        coord = self.coordinator
        if coord is None or not coord.owned:
            return
        for partition in sorted(coord.owned):
            log_ = self.replicas.logs.get(SHARE_STATE_TOPIC, partition)
            if log_ is None:
                continue
            lock = self._locks.get(partition)
            if lock is not None and lock.locked():
                continue  # a write is under way: its records are not replayed yet
            upto = min(coord.prune_offset(partition, log_.log_end_offset), log_.high_watermark)
            if upto > log_.log_start_offset:
                log_.delete_records_before(upto)
                log.debug("pruned %s-%d below offset %d", SHARE_STATE_TOPIC, partition, upto)


def _check(key: Key) -> None:
    """A key from the wire: a group id, a topic id, a partition index (else INVALID_REQUEST,
    or INVALID_GROUP_ID for an empty group id)."""
    group, topic_id, partition = key
    if not group:
        raise KafkaError(ErrorCode.invalid_group_id, "the group id is empty")
    if topic_id is None or topic_id.int == 0 or partition < 0:
        raise KafkaError(ErrorCode.invalid_request,
                         f"not a share-partition: topic id {topic_id}, partition {partition}")  # fmt: skip


def _split(result: tuple[list[Record], ErrorCode, str | None]
           ) -> tuple[list[Record], tuple[ErrorCode, str | None]]:  # fmt: skip
    records, code, message = result
    return records, (code, message)
