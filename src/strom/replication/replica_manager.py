"""Partitions hosted by this broker: their roles, appends, reads, high watermarks.

Kafka's ``ReplicaManager`` in small. The controller's commands (:mod:`strom.replication.commands`)
are applied here, fenced by controller and broker epoch: LeaderAndIsr makes each hosted
:class:`~strom.replication.partition.Partition` a leader or a follower
(:meth:`ReplicaManager.apply_leader_and_isr`), UpdateMetadata fills the metadata cache
(:meth:`apply_update_metadata`), StopReplica stops (and maybe deletes) partitions
(:meth:`apply_stop_replicas`). Leaders append producers' batches stamped with their leader epoch
(:meth:`append`), serve followers' fetches (:meth:`follower_fetched`, which moves the high
watermark and decides ISR expansion) and complete acks=all requests waiting in
:mod:`strom.replication.delayed_produce`; followers copy their leader through
:mod:`strom.replication.replica_fetcher`. ISR changes go to the controller through
:mod:`strom.replication.isr_changes`. A single node leads every partition it hosts
(:mod:`strom.replication.local_leadership`), so its high watermark is the log end after each append.

High watermarks persist in ``<data dir>/replication-offset-checkpoint`` (Kafka's format,
``0\\n<count>\\n<topic> <partition> <offset>\\n…``), written by the flusher thread every
``replica.high.watermark.checkpoint.interval.ms`` and at shutdown; a restarted replica starts
from it (not from its log end, which may hold records never committed).

Appends and HW moves wake long-polling fetchers through the purgatory (key (topic, partition)).
Coordinators hear when this broker starts or stops leading a partition of an internal topic
through :attr:`ReplicaManager.ownership` (:mod:`strom.replication.coordinator_partitions`), and
append with :meth:`ReplicaManager.append_replicated` (acks=all: done at the high watermark).
"""

from __future__ import annotations

import asyncio
import logging
import operator
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING

from strom import long_lived
from strom.clock import Clock, SystemClock
from strom.protocol.errors import ErrorCode, KafkaError
from strom.replication.commands import LeaderAndIsr, PartitionRole, StopReplicas, UpdateMetadata
from strom.replication.coordinator_partitions import CoordinatorPartitions
from strom.replication.delayed_produce import DelayedProducePurgatory
from strom.replication.metadata_cache import MetadataCache
from strom.replication.partition import Partition
from strom.replication.purgatory import DataPurgatory
from strom.storage import log_dir
from strom.storage.batch_validation import AppendOrigin
from strom.storage.errors import StorageError

if TYPE_CHECKING:
    from strom.replication.isr_changes import IsrChangeManager
    from strom.replication.replica_fetcher import ReplicaFetcherManager
    from strom.storage.log import AppendResult, Log, PendingAppend
    from strom.storage.log_manager import LogManager

log = logging.getLogger(__name__)
_HW = operator.attrgetter("high_watermark")
HW_CHECKPOINT_FILE = "replication-offset-checkpoint"
TopicPartition = tuple[str, int]
#: a topic's config overrides (for the logs LeaderAndIsr creates)
TopicConfigs = Callable[[str], Mapping[str, str]]


def _no_overrides(_topic: str) -> Mapping[str, str]:
    return {}


class _Queued:
    """A client's append waiting in :meth:`ReplicaManager.append_later`."""

    __slots__ = ("part", "records", "future", "pending")

    def __init__(self, part: Partition, records: bytes,
                 future: asyncio.Future[AppendResult]) -> None:  # fmt: skip
        self.part = part
        self.records = records
        self.future = future
        self.pending: PendingAppend | None = None  # its write, once started


class ReplicaManager:
    def __init__(self, logs: LogManager, node_id: int, clock: Clock | None = None, *,
                 broker_epoch: Callable[[], int] = lambda: -1,
                 still_registered: Callable[[int], Awaitable[bool]] | None = None,
                 topic_configs: TopicConfigs = _no_overrides) -> None:  # fmt: skip
        self.logs = logs
        self.node_id = node_id
        self.clock: Clock = clock or SystemClock()
        #: this broker's registration epoch (-1 before it registered): commands meant for an
        #: older registration are STALE_BROKER_EPOCH
        self.broker_epoch = broker_epoch
        #: asks the metadata store whether this broker's registration is alive
        #: (:meth:`strom.metadata.brokers.BrokerMembership.still_registered`); None: no store
        self._still_registered = still_registered
        self.topic_configs = topic_configs
        #: set while this broker is its own controller (a single node,
        #: :mod:`strom.replication.local_leadership`): other controllers' commands are refused
        self.led_locally = False
        self.purgatory = DataPurgatory()
        self.delayed = DelayedProducePurgatory()
        self.partitions: dict[TopicPartition, Partition] = {}
        self.cache = MetadataCache(node_id)
        self.ownership = CoordinatorPartitions()
        self.controller_epoch = -1
        self.fetchers: ReplicaFetcherManager | None = None
        self.isr_changes: IsrChangeManager | None = None
        self._hw_written: dict[TopicPartition, int] = {}  # as the last checkpoint has them
        self._hw_stale = False  # the file holds entries _hw_written does not (rewrite it)
        self._deleted: list[Log] = []
        #: leaders that had another replica in their ISR when it last changed (a superset:
        #: the shrink check drops those that no longer qualify); empty on a single node
        self.with_isr_followers: dict[TopicPartition, Partition] = {}
        #: clients' appends waiting for a slow disk, in arrival order per partition
        #: (:meth:`append_later`; the one being written stays first until it is part of the
        #: log): a partition is here exactly while it has any
        self.waiting_appends: dict[TopicPartition, deque[_Queued]] = {}

    # --- lookups -------------------------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> Log:
        log_ = self.logs.get(topic, partition)
        if log_ is None:
            raise KafkaError(
                ErrorCode.unknown_topic_or_partition, f"{topic}-{partition} is not hosted here"
            )
        return log_

    def leader_partition(self, topic: str, index: int, current_epoch: int = -1) -> Partition:
        """The partition if this broker leads it in ``current_epoch`` (-1: any); raises
        UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, FENCED/UNKNOWN_LEADER_EPOCH."""
        part = self.partitions.get((topic, index))
        if (part is not None and current_epoch == -1 and part.leader_id == part.local_id
                and self.logs.get(topic, index) is part.log):  # fmt: skip
            return part  # every Produce: what replica_partition finds, in fewer steps
        return self.replica_partition(topic, index, current_epoch, followers=False)

    def replica_partition(self, topic: str, index: int, current_epoch: int = -1, *,
                          followers: bool) -> Partition:  # fmt: skip
        """As :meth:`leader_partition`, but with ``followers`` a follower's replica is returned
        too (a consumer reading from the closest replica, KIP-392)."""
        part = self.partitions.get((topic, index))
        if part is None or self.logs.get(topic, index) is not part.log:
            if self.logs.get(topic, index) is None:
                if (topic, index) in self.logs.offline_logs:
                    raise KafkaError(ErrorCode.kafka_storage_error,
                                     f"the log directory of {topic}-{index} is offline")  # fmt: skip
                raise KafkaError(ErrorCode.unknown_topic_or_partition,
                                 f"{topic}-{index} is not hosted here")  # fmt: skip
            raise KafkaError(ErrorCode.not_leader_or_follower,
                             f"{topic}-{index} has no leader here yet")  # fmt: skip
        code = part.check_leader_epoch(current_epoch)
        if code != ErrorCode.none:
            raise KafkaError(code, f"leader epoch {current_epoch} of {topic}-{index}: this "
                                   f"broker's is {part.leader_epoch}")  # fmt: skip
        if not part.is_leader and not (followers and part.leader_id >= 0):
            raise KafkaError(ErrorCode.not_leader_or_follower,
                             f"broker {self.node_id} is not the leader of {topic}-{index}")  # fmt: skip
        return part

    # --- appends ---------------------------------------------------------------------------------

    def append(self, topic: str, partition: int, records: bytes,
               origin: AppendOrigin = AppendOrigin.CLIENT) -> AppendResult:  # fmt: skip
        """Append as the partition's leader (stamped with its epoch): ``origin`` says how much
        is validated. The HW moves at once when the leader is alone in the ISR."""
        return self.append_to(self.leader_partition(topic, partition), records, origin)

    def append_to(self, part: Partition, records: bytes,
                  origin: AppendOrigin = AppendOrigin.CLIENT) -> AppendResult:  # fmt: skip
        """:meth:`append` to ``part``, which :meth:`leader_partition` returned just before
        (in the same loop step: leadership cannot have changed in between)."""
        result = part.log.append(records, origin=origin, leader_epoch=part.leader_epoch)
        key = part.key
        if part.maybe_advance_hw() and key in self.delayed.pending:  # as _hw_moved, inline
            self._complete_delayed(part)
        if key in self.purgatory.watched:
            self.purgatory.notify(key)
        return result

    # --- appends to a slow disk (strom.storage.slow_disk) ----------------------------------

    def must_wait(self, part: Partition) -> bool:
        """True when a client's append to ``part`` must go through :meth:`append_later`: its
        log directory is slow, or earlier appends of the partition are still queued there
        (being written or waiting: they keep their order). The Produce path tests the same
        two things inline (``part.log.speed.slow``, ``part.key in waiting_appends``)."""
        return part.log.speed.slow or part.key in self.waiting_appends

    def append_later(self, part: Partition, records: bytes) -> asyncio.Future[AppendResult]:
        """A client's append to ``part`` (as :meth:`append_to`) written by a writer thread,
        so that the event loop never waits on a slow disk: its future is done once the batch
        is written and part of the log (the high watermark moved over it where the leader
        is alone in the ISR, fetchers woken), or fails with the append's error.

        Ordering: the partition's appends are queued in the order this is called (a
        producer's pipelined batches keep their sequence) and prepared one at a time, each
        only once the one before it is part of the log (:meth:`strom.storage.log.Log.append`
        with ``writer``: one write in flight per log). Leadership is checked again when an
        append's turn comes (NOT_LEADER_OR_FOLLOWER if it moved meanwhile)."""
        future: asyncio.Future[AppendResult] = asyncio.get_running_loop().create_future()
        key = part.key
        queue = self.waiting_appends.get(key)
        if queue is None:
            queue = self.waiting_appends[key] = deque()
        queue.append(_Queued(part, records, future))
        if len(queue) == 1:
            self._drain(key)
        return future

    def _drain(self, key: TopicPartition) -> None:
        """Start the queued appends of ``key`` in order until one is in flight on a writer
        thread (its end starts the next: :meth:`_written`) or none is left."""
        queue = self.waiting_appends.get(key)
        while queue:
            item = queue[0]
            if item.pending is not None:  # being written: _written goes on from there
                return
            queue.popleft()
            if item.future.done():  # cancelled (the connection went away)
                continue
            log_ = item.part.log
            try:
                part = self.leader_partition(*key)
                if part is not item.part:
                    raise KafkaError(ErrorCode.not_leader_or_follower,
                                     f"the leadership of {key[0]}-{key[1]} changed while its "
                                     "append waited for the disk")  # fmt: skip
                result = log_.append(item.records, leader_epoch=part.leader_epoch,
                                     writer=self.logs.writers)  # fmt: skip
            except Exception as exc:
                item.future.set_exception(exc)
                continue
            pending = log_.in_flight
            if pending is None:  # done here: a duplicate (or the batch could not go off)
                self._appended(part)
                item.future.set_result(result)
                continue
            item.pending = pending
            queue.appendleft(item)  # stays first until written
            self._on_written(key, pending)
            return
        self.waiting_appends.pop(key, None)

    def _on_written(self, key: TopicPartition, pending: PendingAppend) -> None:
        """Call :meth:`_written` on the loop once ``pending``'s write is done (the writer
        thread runs the future's callbacks)."""
        loop = asyncio.get_running_loop()

        def done(_f: Future[None]) -> None:
            if not loop.is_closed():  # (a broker shutting down closes logs, settling writes)
                loop.call_soon_threadsafe(self._written, key, pending)

        pending.future.add_done_callback(done)

    def _written(self, key: TopicPartition, pending: PendingAppend) -> None:
        """(loop) The write of ``pending`` is done: make it part of the log (unless a
        truncation or a roll that had to wait for it did so already), answer its future, and
        start the next append of the partition."""
        queue = self.waiting_appends.get(key)
        if not queue or queue[0].pending is not pending:
            return
        item = queue.popleft()
        try:
            result = pending.finish()
        except Exception as exc:
            if not item.future.done():
                item.future.set_exception(exc)
        else:
            self._appended(item.part)
            if not item.future.done():
                item.future.set_result(result)
        self._drain(key)

    def _appended(self, part: Partition) -> None:
        """After an append that :meth:`append_later` made part of the log: what
        :meth:`append_to` does after its append (the HW where the leader is alone in the ISR,
        acks=all waiters, fetchers)."""
        if not part.is_leader:
            return
        key = part.key
        if part.maybe_advance_hw() and key in self.delayed.pending:
            self._complete_delayed(part)
        if key in self.purgatory.watched:
            self.purgatory.notify(key)

    async def append_replicated(self, topic: str, partition: int, records: bytes,
                                origin: AppendOrigin, timeout_s: float) -> AppendResult:  # fmt: skip
        """acks=all for the broker's own writers (coordinators, transaction markers): append
        as the leader, then wait until the high watermark passes the records. Raises
        KafkaError: NOT_ENOUGH_REPLICAS (before the append), NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        NOT_LEADER_OR_FOLLOWER (leadership lost while waiting), REQUEST_TIMED_OUT."""
        self.check_min_isr(self.leader_partition(topic, partition))
        result = self.append(topic, partition, records, origin)
        log_ = self.get_log(topic, partition)
        if log_.high_watermark > result.last_offset:
            return result
        future = self.delayed.watch((topic, partition), result.last_offset)
        try:
            code = await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            raise KafkaError(ErrorCode.request_timed_out,
                             f"{topic}-{partition} not replicated within {timeout_s}s") from None
        if code != ErrorCode.none:
            raise KafkaError(code, f"{topic}-{partition}: {code.name}")
        return result

    def check_min_isr(self, part: Partition) -> None:
        """acks=all before the append: NOT_ENOUGH_REPLICAS when the (minimal) ISR is smaller
        than ``min.insync.replicas``."""
        needed = part.log.config.min_insync_replicas
        have = len(part.minimal_isr)
        if have < needed:
            raise KafkaError(
                ErrorCode.not_enough_replicas,
                f"min.insync.replicas={needed} but the ISR of {part.topic}-{part.index} has "
                f"{have} replica{'s' if have != 1 else ''}",
            )

    def _hw_moved(self, part: Partition) -> None:
        """The HW (or the ISR) of a leader changed: complete acks=all waiters it satisfies."""
        key = part.key
        if key in self.delayed.pending:
            self._complete_delayed(part)
        if key in self.purgatory.watched:
            self.purgatory.notify(key)

    def _complete_delayed(self, part: Partition) -> int:
        """Complete the acks=all waiters of ``part`` its high watermark satisfies (NONE, or
        NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR it knows is below
        ``min.insync.replicas``); returns how many."""
        ok = part.log.config.min_insync_replicas <= len(part.maximal_isr)
        code = ErrorCode.none if ok else ErrorCode.not_enough_replicas_after_append
        return self.delayed.complete(part.key, part.log.high_watermark, code)

    def follower_high_watermark(self, part: Partition, leader_hw: int) -> None:
        """A follower's HW from its leader's Fetch answer (capped by its log end). Waiters of
        the leader it was whose records the HW now covers are answered as a leader answers
        them (NONE unless the ISR is below ``min.insync.replicas``): the follower's log was
        reconciled with the leader's (truncated where they differ) before it fetched, so
        records still in it below the leader's HW are committed."""
        part.follower_high_watermark(leader_hw)
        if part.key in self.delayed.pending:
            done = self._complete_delayed(part)  # the ISR of its last LeaderAndIsr
            if done:  # rare (a leadership moved under waiting requests): worth a line
                log.info("%s-%d: %d acks=all request(s) of the leader this broker was answered: "
                         "the new leader's high watermark %d covers them", *part.key, done,
                         part.log.high_watermark)  # fmt: skip

    def truncated(self, part_key: TopicPartition, everything: bool = False) -> None:
        """A follower's log was cut to its leader's (``everything``: replaced by an empty one
        starting at the leader's log start): waiters of the leader it was whose records went
        are answered NOT_LEADER_OR_FOLLOWER (they are not in the partition)."""
        if part_key not in self.delayed.pending:
            return
        log_ = self.logs.get(*part_key)
        before = self.delayed.waiting(part_key)
        if everything or log_ is None:
            self.delayed.fail_all(part_key, ErrorCode.not_leader_or_follower)
        else:
            self.delayed.truncated(part_key, log_.log_end_offset,
                                   ErrorCode.not_leader_or_follower)
        if gone := before - self.delayed.waiting(part_key):
            log.info("%s-%d: %d acks=all request(s) of the leader this broker was answered "
                     "NOT_LEADER_OR_FOLLOWER: the truncation removed their records", *part_key,
                     gone)  # fmt: skip

    def high_watermark(self, topic: str, partition: int) -> int:
        return self.get_log(topic, partition).high_watermark

    # --- leader side of replication ------------------------------------------------------------

    def follower_fetched(self, part: Partition, replica: int, fetch_offset: int) -> None:
        """A follower's Fetch at ``fetch_offset``: its LEO, maybe the HW, maybe the ISR."""
        if part.update_follower(replica, fetch_offset):
            self._hw_moved(part)
        # only a live broker may join (Kafka's isReplicaIsrEligible in ZooKeeper mode): a
        # replica that left keeps its last fetch state here, and proposing it would hold the
        # HW back (maximal ISR) until the controller refuses it
        if (self.isr_changes is not None and part.pending is None and part.can_join_isr(replica)
                and self.cache.alive(replica)):  # fmt: skip
            self.isr_changes.propose(part, (*part.isr, replica))

    def _isr_or_role_changed(self, part: Partition) -> None:
        if part.has_isr_followers:
            self.with_isr_followers[(part.topic, part.index)] = part

    def isr_changed(self, part: Partition) -> None:
        """The controller answered an ISR change (accepted, or refused: the pending change is
        dropped, so the maximal ISR shrinks back): the HW may move, waiters may complete."""
        part.maybe_advance_hw()
        self._hw_moved(part)

    # --- the controller's requests -------------------------------------------------------------

    def fence(self, controller_epoch: int, broker_epoch: int, own_epoch: int) -> ErrorCode:
        """STALE_CONTROLLER_EPOCH for a controller older than one already heard;
        STALE_BROKER_EPOCH for a request meant for an older registration of this broker
        (-1 on either side: not checked, as Kafka for requests without one)."""
        if controller_epoch < self.controller_epoch:
            return ErrorCode.stale_controller_epoch
        if broker_epoch >= 0 and own_epoch >= 0 and broker_epoch < own_epoch:
            return ErrorCode.stale_broker_epoch
        self.controller_epoch = controller_epoch
        return ErrorCode.none

    async def registration_alive(self, broker_epoch: int) -> bool:
        """Whether the registration of ``broker_epoch`` (a controller request's, -1: any) is
        this broker's live one, asked of the metadata store (True without one). A LeaderAndIsr
        is applied only then: one read by a process that was stopped past its session was sent
        to the registration that expired, and the controller has given its partitions other
        leaders meanwhile (it sends the current state again once this broker registered
        anew)."""
        return self._still_registered is None or await self._still_registered(broker_epoch)

    def apply_leader_and_isr(self, command: LeaderAndIsr
                             ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:  # fmt: skip
        """Fence ``command``, then apply each partition's role: (top-level error, error per
        partition). A partition that fails unexpectedly is KAFKA_STORAGE_ERROR (logged)."""
        code = self.fence(command.controller_epoch, command.broker_epoch, self.broker_epoch())
        if code != ErrorCode.none:
            return code, {}
        errors: dict[TopicPartition, ErrorCode] = {}
        hosted = self.logs.count()
        # logs made here for thousands of partitions at once: see strom.long_lived
        with long_lived.bulk(len(command.partitions)):
            for role in command.partitions:
                try:
                    err = self.become_leader_or_follower(role, command.controller_epoch,
                                                         self.topic_configs(role.topic))  # fmt: skip
                except StorageError as exc:  # an offline log directory (or its disk's error)
                    log.warning("LeaderAndIsr of %s-%s: %s", role.topic, role.partition, exc)
                    err = exc.error_code
                except Exception:
                    log.exception("LeaderAndIsr of %s-%s failed", role.topic, role.partition)
                    err = ErrorCode.kafka_storage_error
                errors[(role.topic, role.partition)] = err
            long_lived.added(max(0, self.logs.count() - hosted))
        if command.controller_id != self.node_id:  # the local leadership logs its own
            leading = sum(1 for r in command.partitions if r.leader == self.node_id)
            failed = sum(1 for e in errors.values() if e != ErrorCode.none)
            log.info("LeaderAndIsr of controller %s (epoch %s): leading %d, following %d "
                     "partitions, %d refused", command.controller_id, command.controller_epoch,
                     leading, len(command.partitions) - leading, failed)  # fmt: skip
        return ErrorCode.none, errors

    def apply_update_metadata(self, command: UpdateMetadata) -> ErrorCode:
        """Fence ``command``, then fill the metadata cache; replica fetchers are woken, since
        a leader's address may be new."""
        code = self.fence(command.controller_epoch, command.broker_epoch, self.broker_epoch())
        if code != ErrorCode.none:
            return code
        self.cache.apply(command.controller_id, command.controller_epoch, command.brokers,
                         ((p.topic, p.partition, p.state) for p in command.partitions))  # fmt: skip
        if self.fetchers is not None:
            self.fetchers.wake_all()
        return ErrorCode.none

    def apply_stop_replicas(self, command: StopReplicas
                            ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:  # fmt: skip
        """Fence ``command``, then stop each partition (:meth:`stop_replica`); the logs to
        delete are then in :meth:`take_deleted`."""
        code = self.fence(command.controller_epoch, command.broker_epoch, self.broker_epoch())
        if code != ErrorCode.none:
            return code, {}
        return ErrorCode.none, {(p.topic, p.partition): self.stop_replica(
            p.topic, p.partition, p.leader_epoch, p.delete) for p in command.partitions}  # fmt: skip

    def become_leader_or_follower(self, role: PartitionRole, controller_epoch: int,
                                  overrides: Mapping[str, str]) -> ErrorCode:  # fmt: skip
        """Apply one LeaderAndIsr partition state (fencing done by the caller)."""
        topic, index, replicas = role.topic, role.partition, role.replicas
        if self.node_id not in replicas:
            return ErrorCode.unknown_topic_or_partition
        key = (topic, index)
        part = self.partitions.get(key)
        log_ = self.logs.get(topic, index)
        if log_ is None:
            log_ = self.logs.create(topic, index, dict(overrides))
        if part is None or part.log is not log_:
            part = self.partitions[key] = Partition(topic, index, log_, self.node_id, self.clock)
            part.on_isr_change = self._isr_or_role_changed
        leader_epoch = role.leader_epoch
        if leader_epoch < part.leader_epoch:
            log.info("ignoring LeaderAndIsr of %s-%d at leader epoch %d: already at %d",
                     topic, index, leader_epoch, part.leader_epoch)  # fmt: skip
            return ErrorCode.stale_controller_epoch
        isr = role.isr
        leader = role.leader
        if leader == self.node_id:
            if self.fetchers is not None:
                self.fetchers.remove(key)
            if part.make_leader(leader_epoch, role.partition_epoch, replicas, isr,
                                controller_epoch):  # fmt: skip
                log.info("became leader of %s-%d at epoch %d (isr %s, end offset %d)",
                     topic, index, leader_epoch, list(isr), log_.log_end_offset)  # fmt: skip
            self._hw_moved(part)
            self.ownership.elected(topic, index, leader_epoch)
        else:
            was_leader = part.is_leader
            if part.make_follower(leader, leader_epoch, role.partition_epoch, replicas,
                                  isr, controller_epoch):  # fmt: skip
                log.info("following broker %d for %s-%d at epoch %d (end offset %d)",
                         leader, topic, index, leader_epoch, log_.log_end_offset)  # fmt: skip
                if self.fetchers is not None:
                    self.fetchers.add(key, leader, leader_epoch)
            if was_leader and leader in self.cache.brokers:  # a client's waiting acks=all
                # Produce is answered once its records' fate is known: its new leader's
                # answers tell (strom.replication.delayed_produce says why not now)
                self.delayed.leadership_lost(key, ErrorCode.not_leader_or_follower)
            elif was_leader:  # a leader this broker does not know of cannot tell it: Kafka's
                self.delayed.fail_all(key, ErrorCode.not_leader_or_follower)  # answer at once
            self.ownership.resigned(topic, index)
            self.purgatory.notify(key)
        return ErrorCode.none

    def stop_replica(self, topic: str, index: int, leader_epoch: int, delete: bool) -> ErrorCode:
        """StopReplica of one partition: stop leading/fetching; with ``delete`` the log goes
        (detached now; the caller removes the files off the loop, see :meth:`take_deleted`)."""
        key = (topic, index)
        part = self.partitions.get(key)
        if part is not None and leader_epoch >= 0 and leader_epoch < part.leader_epoch:
            return ErrorCode.fenced_leader_epoch
        if self.fetchers is not None:
            self.fetchers.remove(key)
        self.partitions.pop(key, None)
        self.delayed.fail_all(key, ErrorCode.not_leader_or_follower)
        self.ownership.resigned(topic, index)
        if delete:
            found = self.logs.detach(topic, index)
            if found is not None:
                self._deleted.append(found)
        self.purgatory.notify(key)
        return ErrorCode.none

    def take_deleted(self) -> list[Log]:
        """Logs detached by :meth:`stop_replica` since the last call (to remove off the loop)."""
        deleted, self._deleted = self._deleted, []
        return deleted

    def forget(self, topic: str, partitions: Iterable[int]) -> None:
        """A topic's partitions went away locally (topic deletion on a single node)."""
        for index in partitions:
            key = (topic, index)
            self.partitions.pop(key, None)
            self.delayed.fail_all(key, ErrorCode.not_leader_or_follower)
            self.ownership.resigned(topic, index)
            if self.fetchers is not None:
                self.fetchers.remove(key)
        self.cache.remove_topic(topic, partitions)

    def log_dir_offline(self, dir: Path) -> list[TopicPartition]:
        """A log directory went offline (:mod:`strom.storage.log_dir_failures`): its logs are
        detached and every partition there stops here as Kafka's ``handleLogDirFailure``
        does: no fetcher, no leadership, waiting acks=all requests answered
        KAFKA_STORAGE_ERROR, coordinators unloaded; reads and appends answer
        KAFKA_STORAGE_ERROR until the broker restarts. Returns the partitions."""
        gone = self.logs.take_offline(dir)
        for key in gone:
            if self.fetchers is not None:
                self.fetchers.remove(key)
            self.partitions.pop(key, None)
            self.with_isr_followers.pop(key, None)
            self.delayed.fail_all(key, ErrorCode.kafka_storage_error)
            self.ownership.resigned(*key)
            self.purgatory.notify(key)
        log.error("log directory %s is offline: %d partitions stopped here", dir, len(gone))
        return gone

    # --- high-watermark checkpoint -------------------------------------------------------------

    def load_hw_checkpoint(self) -> None:
        """Start every hosted log's HW from the checkpoint (not from its end)."""
        written: dict[TopicPartition, int] = {}
        for parent in self.logs.dirs:  # one checkpoint per log directory, as Kafka's
            written.update(log_dir.read_offsets(parent / HW_CHECKPOINT_FILE))
        for tp, log_ in self.logs.logs():
            hw = written.get(tp)
            if hw is not None:
                log_.high_watermark = hw
        self.logs.take_hw_changed()
        self._hw_written = self.high_watermarks()
        # entries of logs no longer hosted, or clamped to their log: the next one rewrites
        self._hw_stale = self._hw_written != written

    def high_watermarks(self) -> dict[TopicPartition, int]:
        """Every hosted log's, led or not yet (a restarted broker waiting for the controller
        must not forget them)."""
        return {tp: log_.high_watermark for tp, log_ in self.logs.logs()}

    def checkpoint_hw_async(self) -> None:
        """Queue a write of the checkpoint on the flusher when a HW changed since the last.

        Only the partitions whose HW changed (:meth:`LogManager.take_hw_changed`) are looked
        at: with nothing changed, 10,000 idle partitions cost nothing; otherwise the file
        still lists every partition (Kafka's format), copied from the kept map in C."""
        changed = self.logs.take_hw_changed()
        if not changed and not self._hw_stale:
            return
        written = self._hw_written
        gone = [tp for tp, log_ in changed.items() if log_ is None]
        for tp in gone:
            del changed[tp]
            written.pop(tp, None)
        # C-level loops: at 10,000 changed partitions a Python loop took ~10 ms of event loop
        written.update(zip(changed, map(_HW, changed.values()), strict=True))
        self._hw_stale = False
        split = self.logs.by_dir(written)  # copies: the flusher never sees later changes
        self.logs.flusher.submit(lambda: self._write_hw(split))

    def _write_hw(self, split: dict[Path, dict[TopicPartition, int]]) -> None:
        """(Flusher thread) write the checkpoint; when that fails (a full disk: the old file
        is intact) the next interval writes it again even if no HW changed meanwhile, as
        Kafka's checkpoint of every interval would."""
        try:
            self.logs.write_checkpoints(HW_CHECKPOINT_FILE, split)
        except OSError:
            self._hw_stale = True
            raise

    def checkpoint_hw(self) -> None:
        self.logs.take_hw_changed()
        self._hw_written = hws = self.high_watermarks()
        self._hw_stale = False
        self.logs.write_checkpoints(HW_CHECKPOINT_FILE, self.logs.by_dir(hws))

    async def shutdown(self) -> None:
        if self.fetchers is not None:
            await self.fetchers.close()
        if self.isr_changes is not None:
            await self.isr_changes.close()
        self.delayed.cancel_all()
