"""The group coordinator as a broker service: ``__consumer_offsets``, timers, loading.

``__consumer_offsets`` is created by the first FindCoordinator of a group
(:mod:`strom.broker.internal_topics`), not here. The coordinator serves the groups of the
partitions this broker leads (Kafka's onElection / onResignation, through the replica manager's
leadership listener): when it becomes a partition's leader, the partition's log is replayed into
the coordinator (synchronously, so no request sees it half loaded); when it stops leading it,
that partition's groups are dropped, and their requests here get NOT_COORDINATOR. At start-up
the partitions already led (a single node leads what it hosts) are loaded before the broker
listens. Records are appended as ordinary record batches (no compression, CreateTime) to the
partition as its leader; offset commits and group records acks=-1 (Kafka's
``offsets.commit.required.acks=-1``): the coordinator's completion callback runs once the high
watermark passes them (at once on a single node), within ``offsets.commit.timeout.ms``. Timers are
the event loop's ``call_later``; expired offsets are swept every
``offsets.retention.check.interval.ms``.

Handlers reach the coordinator with :meth:`GroupService.active` (COORDINATOR_NOT_AVAILABLE
before it started) and turn its callbacks into awaits with :func:`wait_for_callback`.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from strom.broker import internal_topics
from strom.broker.group.coordinator import CoordinatorConfig, GroupCoordinator
from strom.broker.group.rebalance import AppendDone
from strom.broker.internal_log_replay import replay
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
OFFSETS_TOPIC = internal_topics.OFFSETS_TOPIC
T = TypeVar("T")
_KEY_TYPE = struct.Struct(">h")
#: replay(key, value) of another group type's record in __consumer_offsets
Replay = Callable[[bytes, "bytes | None"], None]


class OffsetsPartitionListener(Protocol):
    def on_unloaded(self, partition: int) -> None:
        """This coordinator no longer serves the groups of ``partition`` of __consumer_offsets."""


class AsyncioTimers:
    """:class:`~strom.broker.group.coordinator.Timers` on the running event loop."""

    def call_later(self, delay_ms: int, fn: Callable[[], None]) -> asyncio.TimerHandle:
        def run() -> None:
            try:
                fn()
            except Exception:
                log.exception("group coordinator timer failed")

        return asyncio.get_running_loop().call_later(max(delay_ms, 0) / 1000.0, run)


class GroupService:
    def __init__(self, config: BrokerConfig, clock: Clock, replicas: ReplicaManager,
                 registry: TopicRegistry, periodic: Periodic) -> None:  # fmt: skip
        self.config = config
        self.clock = clock
        self.replicas = replicas
        self.registry = registry
        self.periodic = periodic
        #: made at start (its partition count is the topic's, once the registry is loaded)
        self.coordinator: GroupCoordinator | None = None
        # tasks waiting for the high watermark to pass an acks=-1 append
        self._replicating: set[asyncio.Task[None]] = set()
        #: the coordinators of other group types keeping records in __consumer_offsets (share
        #: groups, KIP-848's consumer groups): record type (the key's int16) -> their replay,
        #: called in log order while a partition loads; and who hears of partitions unloaded
        self.record_types: dict[int, Replay] = {}
        self.partition_listeners: list[OffsetsPartitionListener] = []

    def active(self) -> GroupCoordinator:
        """The coordinator; COORDINATOR_NOT_AVAILABLE before the service started."""
        if self.coordinator is None:
            raise KafkaError(ErrorCode.coordinator_not_available, "group coordinator not started")
        return self.coordinator

    async def start(self) -> None:
        cfg = self.config
        partitions = internal_topics.partition_count(self.registry, cfg, OFFSETS_TOPIC)
        config = CoordinatorConfig(
            offsets_partitions=partitions,
            initial_rebalance_delay_ms=cfg.get_int("group.initial.rebalance.delay.ms"),
            min_session_timeout_ms=cfg.get_int("group.min.session.timeout.ms"),
            max_session_timeout_ms=cfg.get_int("group.max.session.timeout.ms"),
            max_group_size=cfg.get_int("group.max.size"),
            offsets_retention_ms=cfg.get_int("offsets.retention.minutes") * 60_000,
            offset_metadata_max_bytes=int(cfg.get("offset.metadata.max.bytes") or 4096),
        )
        self.coordinator = GroupCoordinator(config, self.clock, AsyncioTimers(), self._append)
        self.coordinator.append_txn = self._append_txn
        self.coordinator.owned = set()
        # partitions led already (a single node leads all of them) are loaded right here
        self.replicas.ownership.register(OFFSETS_TOPIC, self)
        self.coordinator.loading = False
        log.info("group coordinator: %d partitions of %s loaded, %d groups",
                 len(self.coordinator.owned), OFFSETS_TOPIC, len(self.coordinator.groups))  # fmt: skip
        interval = max(cfg.get_int("offsets.retention.check.interval.ms"), 100) / 1000.0
        self.periodic.every(interval, self._expire)

    def _expire(self) -> None:
        if self.coordinator is not None:
            self.coordinator.expire_offsets()

    async def stop(self) -> None:
        self.replicas.ownership.unregister(OFFSETS_TOPIC, self)
        for task in list(self._replicating):
            task.cancel()
        coord = self.coordinator
        if coord is None:
            return
        for group in coord.groups.values():
            for timer in (group.join_timer, group.sync_timer, *group.pending_members.values()):
                if timer is not None:
                    timer.cancel()
            for member in group.members.values():
                if member.heartbeat_timer is not None:
                    member.heartbeat_timer.cancel()

    # partition ownership (strom.replication.coordinator_partitions) ---------------------------------
    def on_elected(self, partition: int, leader_epoch: int) -> None:
        coord = self.coordinator
        if coord is not None and partition < coord.config.offsets_partitions:
            self._load(partition)

    def on_resigned(self, partition: int) -> None:
        coord = self.coordinator
        if coord is not None and partition < coord.config.offsets_partitions:
            coord.unload_partition(partition)
            for listener in self.partition_listeners:
                listener.on_unloaded(partition)

    def _load(self, partition: int) -> None:
        """Replay ``partition`` of ``__consumer_offsets`` (this broker now leads it) up to its
        log end, as Kafka's loadGroupsForPartition; its groups are served from then on."""
        coord = self.coordinator
        assert coord is not None
        count = 0
        coord.loading = True
        log_ = self.replicas.logs.get(OFFSETS_TOPIC, partition)
        if log_ is not None:
            for entry in replay(log_, controls=True):
                if entry.is_control:
                    if entry.marker is not None:
                        coord.complete_txn(entry.header.producer_id, entry.marker.commit)
                    continue
                assert entry.key is not None
                other = self.record_types.get(_KEY_TYPE.unpack_from(entry.key)[0]
                                              if len(entry.key) >= 2 else -1)  # fmt: skip
                try:
                    if other is not None:
                        other(entry.key, entry.value)
                    elif entry.header.is_transactional:
                        coord.replay_txn_offset(entry.header.producer_id, entry.key, entry.value)
                    else:
                        coord.replay(entry.key, entry.value)
                    count += 1
                except ValueError as exc:
                    log.warning("%s-%d offset %d: skipping record: %s",
                                OFFSETS_TOPIC, partition, entry.offset, exc)  # fmt: skip
        coord.finish_loading(partition)
        log.debug("replayed %d records of %s-%d", count, OFFSETS_TOPIC, partition)

    def append_records(self, group_id: str, records: list[tuple[bytes, bytes | None]],
                       done: AppendDone | None = None) -> None:
        """Append records of another group type (see :attr:`record_types`) to the partition of
        ``group_id``, as the coordinator's own appends (``done``: acks=-1, see :meth:`_write`)."""
        self._append(self.active().partition_for(group_id), records, done)

    def _append(self, partition: int, records: list[tuple[bytes, bytes | None]],
                done: AppendDone | None = None) -> None:  # fmt: skip
        now = self.clock.time_ms()
        batch = rb.build_batch([(key, value, [], now) for key, value in records])
        self._write(partition, batch, done)

    def _append_txn(self, partition: int, records: list[tuple[bytes, bytes | None]],
                    producer_id: int, producer_epoch: int, done: AppendDone) -> None:  # fmt: skip
        now = self.clock.time_ms()
        batch = rb.build_batch([(key, value, [], now) for key, value in records],
                               producer_id=producer_id, producer_epoch=producer_epoch,
                               is_transactional=True)  # fmt: skip
        self._write(partition, batch, done)

    def _write(self, partition: int, batch: bytes, done: AppendDone | None) -> None:
        """The coordinator's append port. Without ``done``: leader-local. With it, acks=-1:
        NOT_ENOUGH_REPLICAS raised before writing when the ISR is below min.insync.replicas;
        ``done(NONE)`` right here when the high watermark is already past the batch (a single
        node: no task, no wait), else from a task once it is, or with the error
        (NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT after
        ``offsets.commit.timeout.ms``)."""
        replicas = self.replicas
        if done is None:
            replicas.append(OFFSETS_TOPIC, partition, batch, AppendOrigin.COORDINATOR)
            return
        replicas.check_min_isr(replicas.leader_partition(OFFSETS_TOPIC, partition))
        result = replicas.append(OFFSETS_TOPIC, partition, batch, AppendOrigin.COORDINATOR)
        if replicas.get_log(OFFSETS_TOPIC, partition).high_watermark > result.last_offset:
            done(ErrorCode.none)
            return
        future = replicas.delayed.watch((OFFSETS_TOPIC, partition), result.last_offset)
        task = asyncio.get_running_loop().create_task(self._when_replicated(future, done))
        self._replicating.add(task)
        task.add_done_callback(self._replicating.discard)

    async def _when_replicated(self, future: asyncio.Future[ErrorCode], done: AppendDone) -> None:
        timeout_ms = int(self.config.get("offsets.commit.timeout.ms") or 5000)
        try:
            code = await asyncio.wait_for(future, timeout_ms / 1000)
        except TimeoutError:
            code = ErrorCode.request_timed_out
        except asyncio.CancelledError:  # the broker stops: answer rather than leave it hanging
            done(ErrorCode.not_leader_or_follower)
            raise
        try:
            done(code)
        except Exception:
            log.exception("group coordinator: completing an append failed")



async def wait_for_callback(register: Callable[[Callable[[T], None]], Any]) -> T:
    """Call ``register(callback)`` and wait until the coordinator invokes the callback."""
    future: asyncio.Future[T] = asyncio.get_running_loop().create_future()

    def done(result: T) -> None:
        if not future.done():
            future.set_result(result)

    register(done)
    return await future


def millis(value: Any) -> int:
    """A ``kio`` timedelta field (or a plain int) as integer milliseconds."""
    if hasattr(value, "total_seconds"):
        return round(value.total_seconds() * 1000)
    return int(value)
