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

KIP-848 consumer groups see topics through :class:`RegistryTopics` (the topic registry, and
the replicas' racks from the metadata cache), and their settings are Kafka's
``group.consumer.*`` (:func:`coordinator_config` checks them at start-up as Kafka does); a
group's own ``consumer.session.timeout.ms`` / ``consumer.heartbeat.interval.ms`` (group
configs, :mod:`strom.broker.group_configs`) are read by the heartbeat handler through
:meth:`GroupService.consumer_overrides`, cached for a second.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from strom.broker import group_configs, internal_topics
from strom.broker.group.coordinator import CoordinatorConfig, GroupCoordinator
from strom.broker.group.rebalance import AppendDone
from strom.broker.group.topics_view import TopicMeta
from strom.broker.internal_log_replay import replay
from strom.config import ConfigError
from strom.metadata.topics import INTERNAL_TOPICS
from strom.protocol import record_batch as rb
from strom.protocol.errors import ErrorCode, KafkaError
from strom.storage.batch_validation import AppendOrigin

if TYPE_CHECKING:
    import uuid

    from strom.clock import Clock
    from strom.config import BrokerConfig
    from strom.metadata.store import MetadataStore
    from strom.metadata.topics import TopicInfo, TopicRegistry
    from strom.periodic import Periodic
    from strom.replication.metadata_cache import MetadataCache
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


class RegistryTopics:
    """The coordinator's :class:`~strom.broker.group.topics_view.TopicsView` on this broker:
    topics from the registry (its version bumped at every topic change it hears of), each
    partition's replica racks from the metadata cache's live brokers."""

    def __init__(self, registry: TopicRegistry, cache: MetadataCache) -> None:
        self.registry = registry
        self.cache = cache
        self._version = 0
        registry.add_listener(self._changed)

    def _changed(self, name: str, info: TopicInfo | None) -> None:
        self._version += 1

    @property
    def version(self) -> int:
        return self._version

    def _meta(self, info: TopicInfo | None) -> TopicMeta | None:
        if info is None:
            return None
        brokers = self.cache.brokers
        racks = tuple(
            frozenset(r for b in info.replicas[p] if (r := getattr(brokers.get(b), "rack", None)))
            for p in sorted(info.replicas))  # fmt: skip
        return TopicMeta(info.name, info.topic_id, info.partition_count, racks)

    def get(self, name: str) -> TopicMeta | None:
        return self._meta(self.registry.get(name))

    def by_id(self, topic_id: uuid.UUID) -> TopicMeta | None:
        return self._meta(self.registry.by_id(topic_id))

    def names(self) -> list[str]:
        return [t.name for t in self.registry if t.name not in INTERNAL_TOPICS]


def coordinator_config(cfg: BrokerConfig, offsets_partitions: int) -> CoordinatorConfig:
    """The coordinator's settings from the broker's config; ConfigError (one line) for
    ``group.consumer.*`` values Kafka refuses at start-up."""
    hb, session = cfg.get_int("group.consumer.heartbeat.interval.ms"), cfg.get_int(
        "group.consumer.session.timeout.ms")  # fmt: skip
    for name, value in (("heartbeat.interval.ms", hb), ("session.timeout.ms", session)):
        low, high = (cfg.get_int(f"group.consumer.min.{name}"),
                     cfg.get_int(f"group.consumer.max.{name}"))  # fmt: skip
        if not low <= value <= high:
            raise ConfigError(f"group.consumer.{name} must be between group.consumer.min.{name} "
                              f"({low}) and group.consumer.max.{name} ({high}), not {value}")  # fmt: skip
    if hb >= session:
        raise ConfigError("group.consumer.heartbeat.interval.ms must be less than "
                          "group.consumer.session.timeout.ms")  # fmt: skip
    policy = str(cfg.get("group.consumer.migration.policy") or "bidirectional").lower()
    if policy not in ("bidirectional", "upgrade", "downgrade", "disabled"):
        raise ConfigError(f"group.consumer.migration.policy={policy!r}: one of bidirectional, "
                          f"upgrade, downgrade, disabled")  # fmt: skip
    names = tuple(n.strip() for n in str(cfg.get("group.consumer.assignors") or "").split(",")
                  if n.strip())  # fmt: skip
    unknown = [n for n in names if n not in ("uniform", "range")]
    if unknown or not names:
        raise ConfigError(f"group.consumer.assignors: {', '.join(unknown) or 'empty'}: strom's "
                          f"server-side assignors are uniform and range")  # fmt: skip
    return CoordinatorConfig(
        offsets_partitions=offsets_partitions,
        initial_rebalance_delay_ms=cfg.get_int("group.initial.rebalance.delay.ms"),
        min_session_timeout_ms=cfg.get_int("group.min.session.timeout.ms"),
        max_session_timeout_ms=cfg.get_int("group.max.session.timeout.ms"),
        max_group_size=cfg.get_int("group.max.size"),
        offsets_retention_ms=cfg.get_int("offsets.retention.minutes") * 60_000,
        offset_metadata_max_bytes=int(cfg.get("offset.metadata.max.bytes") or 4096),
        consumer_heartbeat_interval_ms=hb,
        consumer_session_timeout_ms=session,
        consumer_assignors=names,
        consumer_max_size=cfg.get_int("group.consumer.max.size"),
        migration_policy=policy,
    )


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
        # group id -> (read at, its consumer.session.timeout.ms / consumer.heartbeat.interval.ms)
        self._overrides: dict[str, tuple[float, tuple[int | None, int | None]]] = {}

    def active(self) -> GroupCoordinator:
        """The coordinator; COORDINATOR_NOT_AVAILABLE before the service started."""
        if self.coordinator is None:
            raise KafkaError(ErrorCode.coordinator_not_available, "group coordinator not started")
        return self.coordinator

    async def consumer_overrides(self, store: MetadataStore,
                                 group_id: str) -> tuple[int | None, int | None]:  # fmt: skip
        """A group's own consumer.session.timeout.ms and consumer.heartbeat.interval.ms (None:
        the broker's), read from its group configs at most once a second."""
        now = self.clock.monotonic()
        cached = self._overrides.get(group_id)
        if cached is not None and now - cached[0] < 1.0:
            return cached[1]
        try:
            configs = await group_configs.read(store, group_id)
        except Exception:  # the store is unreachable: the broker's settings
            configs = {}

        def number(name: str) -> int | None:
            value = configs.get(name)
            return int(value) if value is not None and value.lstrip("-").isdigit() else None

        found = (number("consumer.session.timeout.ms"), number("consumer.heartbeat.interval.ms"))
        if len(self._overrides) > 10_000:
            self._overrides.clear()
        self._overrides[group_id] = (now, found)
        return found

    async def start(self) -> None:
        cfg = self.config
        partitions = internal_topics.partition_count(self.registry, cfg, OFFSETS_TOPIC)
        config = coordinator_config(cfg, partitions)
        topics = RegistryTopics(self.registry, self.replicas.cache)
        self.coordinator = GroupCoordinator(config, self.clock, AsyncioTimers(), self._append,
                                            topics)  # fmt: skip
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
            if group.consumer is not None:
                coord.consumer.cancel_all(group.consumer)

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
