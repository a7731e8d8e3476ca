"""The share-partitions led by this broker: loading, fetching, acknowledging, lock expiry.

Kafka's ``SharePartitionManager``. A share-partition (group, topic id, partition) lives at its
partition's leader. It is loaded on first use: its state is read from the share coordinator
(:mod:`strom.broker.share.persister`) with this broker's leader epoch, which fences the previous
leader's late writes; a state whose start offset was never chosen gets one from the group's
``share.auto.offset.reset`` — the high watermark (``latest``), the log start (``earliest``) or
the first offset at or after now minus a duration (``by_duration:``) — and it is written back.
It is dropped (and loaded again on next use) when the partition's leader epoch changes or this
broker stops leading it, when no share session uses it and it holds no acquired records, and
when a state write is fenced (another leader, or the state was reset by
AlterShareGroupOffsets).

Acknowledgements and releases change the state in memory, then :meth:`ShareManager.persist`
writes it (the start offset and the whole in-flight window, so writes coalesce: one write
covers every change made before it started) before the request is answered — an acknowledged
record stays acknowledged after a crash; acquisitions are not written (after a crash, whatever
was in flight is delivered again). Locks are checked every ``EXPIRY_TICK_S``; records whose
lock ran out become available again (or archived at the delivery limit), which is persisted
and wakes long-polling ShareFetches (through the fetch purgatory, key (topic, partition)).

Reads for ShareFetch (:meth:`ShareManager.acquire`) start at the first available offset of the
window and stop at the high watermark, or at the last stable offset under
``share.isolation.level=read_committed``, where the records of aborted transactions are
archived, never delivered; control batches are archived too.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from strom.broker.group_configs import duration_ms
from strom.broker.share.coordinator import UNINITIALIZED, Key
from strom.broker.share.partition import (
    RENEW,
    Acquired,
    FetchedBatch,
    Limits,
    SharePartition,
    Stats,
)
from strom.broker.share.sessions import ShareSession, ShareSessionCache
from strom.broker.share.settings import ShareSettings
from strom.protocol import record_batch as rb
from strom.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from strom.broker.share.persister import Persister
    from strom.broker.topics import Topics
    from strom.clock import Clock
    from strom.replication.partition import Partition
    from strom.replication.replica_manager import ReplicaManager
    from strom.storage.log import Log

log = logging.getLogger(__name__)
E = ErrorCode
EXPIRY_TICK_S = 0.1
#: write errors meaning "this share-partition's state here is stale": drop it, load it again
STALE = frozenset({E.fenced_leader_epoch, E.fenced_state_epoch, E.invalid_request})


@dataclass(slots=True)
class FetchResult:
    """One partition's part of a ShareFetch answer."""

    error: ErrorCode = E.none
    message: str | None = None
    records: bytes = b""
    acquired: tuple[Acquired, ...] = ()


class ShareManager:
    def __init__(self, replicas: ReplicaManager, topics: Topics, persister: Persister,
                 clock: Clock, max_sessions: int = 2000) -> None:  # fmt: skip
        self.replicas = replicas
        self.topics = topics
        self.persister = persister
        self.clock = clock
        self.partitions: dict[Key, SharePartition] = {}
        self.sessions = ShareSessionCache(max_sessions)
        #: counters of share-partitions no longer here (the metrics' totals never go down)
        self.retired = Stats()
        self._loading: dict[Key, asyncio.Task[SharePartition]] = {}
        self._write_locks: dict[Key, asyncio.Lock] = {}
        self._persisted: dict[Key, int] = {}  # key -> SharePartition.changes last written
        self._background: set[asyncio.Task[None]] = set()

    # --- loading ---------------------------------------------------------------------------------
    async def partition(self, group: str, topic_id: uuid.UUID, index: int,
                        settings: ShareSettings) -> SharePartition:  # fmt: skip
        """The share-partition, loaded if need be; KafkaError UNKNOWN_TOPIC_ID,
        NOT_LEADER_OR_FOLLOWER (…) when this broker cannot serve it."""
        info = self.topics.by_id(topic_id)
        if info is None:
            raise KafkaError(E.unknown_topic_id, f"topic id {topic_id} does not exist")
        part = self.replicas.leader_partition(info.name, index)
        key: Key = (group, topic_id, index)
        sp = self.partitions.get(key)
        if sp is not None and sp.leader_epoch != part.leader_epoch:
            self.drop(key, "its partition's leader epoch changed")
            sp = None
        if sp is None:
            task = self._loading.get(key)
            if task is None:
                task = asyncio.get_running_loop().create_task(
                    self._load(key, info.name, part, settings))
                self._loading[key] = task
                task.add_done_callback(lambda _t: self._loading.pop(key, None))
            sp = await asyncio.shield(task)
        sp.limits = Limits(settings.lock_ms, settings.delivery_limit, settings.max_locks)
        log_start = part.log.log_start_offset
        if sp.spso < log_start:
            sp.move_start(log_start)
        return sp

    async def _load(self, key: Key, topic: str, part: Partition, settings: ShareSettings
                    ) -> SharePartition:  # fmt: skip
        epoch = part.leader_epoch
        state = await self.persister.read(key, epoch)
        if state.error != E.none:
            raise KafkaError(_leader_side(state.error), state.message or state.error.name)
        start = state.start_offset
        if start == UNINITIALIZED:
            start = self.reset_offset(part.log, settings)
            code, message = await self.persister.initialize(key, state.state_epoch, start)
            if code == E.none:  # initialized before (start not chosen): choose it now
                code, message = await self.persister.write(key, state.state_epoch, epoch, start,
                                                           0, [])  # fmt: skip
            if code != E.none:
                raise KafkaError(_leader_side(code), message or code.name)
            log.info("share group %s: %s-%d starts at offset %d (share.auto.offset.reset=%s)",
                     key[0], topic, key[2], start, settings.auto_offset_reset)  # fmt: skip
        if self.replicas.leader_partition(topic, key[2]).leader_epoch != epoch:
            raise KafkaError(E.not_leader_or_follower, f"{topic}-{key[2]}: leadership moved")
        sp = SharePartition(key[0], topic, key[1], key[2], leader_epoch=epoch,
                            state_epoch=state.state_epoch, start_offset=start,
                            batches=state.batches,
                            limits=Limits(settings.lock_ms, settings.delivery_limit,
                                          settings.max_locks))  # fmt: skip
        self.partitions[key] = sp
        self._persisted[key] = sp.changes
        return sp

    def reset_offset(self, log_: Log, settings: ShareSettings) -> int:
        """Where a share-partition with no start offset starts (``share.auto.offset.reset``)."""
        policy = settings.auto_offset_reset
        if policy == "earliest":
            return log_.log_start_offset
        if policy.startswith("by_duration:"):
            try:
                since = self.clock.time_ms() - duration_ms(policy.partition(":")[2])
            except ValueError:
                log.warning("share.auto.offset.reset=%s is not valid: latest", policy)
                return log_.high_watermark
            found = log_.offset_for_timestamp(since)
            return found[0] if found is not None else log_.high_watermark
        return log_.last_stable_offset if settings.read_committed else log_.high_watermark

    def drop(self, key: Key, why: str) -> None:
        sp = self.partitions.pop(key, None)
        self._persisted.pop(key, None)
        if sp is not None:
            _add(self.retired, sp.stats)
            log.debug("share-partition %s %s-%d unloaded: %s", key[0], sp.topic, key[2], why)

    # --- fetching --------------------------------------------------------------------------------
    def acquire(self, sp: SharePartition, member: str, max_records: int, max_bytes: int,
                read_committed: bool, strict: bool) -> FetchResult:  # fmt: skip
        """Read from the first available offset and acquire what ``member`` may have."""
        offset = sp.next_fetch_offset()
        if offset is None:
            return FetchResult()
        part = self.replicas.leader_partition(sp.topic, sp.index)
        log_ = part.log
        bound = log_.last_stable_offset if read_committed else log_.high_watermark
        if offset >= bound:
            return FetchResult()
        if offset < log_.log_start_offset:
            sp.move_start(log_.log_start_offset)
            offset = log_.log_start_offset
        data = log_.read(offset, max(max_bytes, 1), max_offset=bound, min_one_batch=True).records
        if not data:
            return FetchResult()
        aborted = log_.collect_aborted(offset, bound) if read_committed else []
        fetched = []
        views = []
        for header, view in rb.iter_batches(data):
            skip = header.is_control or (
                header.is_transactional and any(
                    a.producer_id == header.producer_id and a.first_offset <= header.base_offset
                    <= a.last_offset for a in aborted))  # fmt: skip
            fetched.append(FetchedBatch(header.base_offset, header.last_offset, skip))
            views.append(view)
        before = sp.changes
        acquired = sp.acquire(member, fetched, max_records, self.clock.time_ms(), strict=strict)
        if sp.changes != before:  # control/aborted records archived: persisted with the next write
            self._persist_soon(sp)
        if not acquired:
            return FetchResult()
        # only the batches holding acquired records go back (Kafka's KAFKA-18522): the others
        # are another member's, or done
        sent = b"".join(bytes(v) for b, v in zip(fetched, views, strict=True)
                        if any(a.first <= b.last_offset and b.base_offset <= a.last
                               for a in acquired))  # fmt: skip
        return FetchResult(records=sent, acquired=tuple(acquired))

    # --- acknowledging ---------------------------------------------------------------------------
    async def acknowledge(self, group: str, member: str, topic_id: uuid.UUID, index: int,
                          batches: list[tuple[int, int, list[int]]], renew: bool
                          ) -> tuple[ErrorCode, str | None]:  # fmt: skip
        """Apply ``member``'s acknowledgements of one share-partition and persist them; the
        answer is sent only once they are written (an acknowledged record is never delivered
        again, even after a crash). RENEW is accepted only when the request says it carries
        renewals (ShareFetch/ShareAcknowledge v2 ``is_renew_ack``)."""
        info = self.topics.by_id(topic_id)
        if info is None:
            return E.unknown_topic_id, f"topic id {topic_id} does not exist"
        try:
            part = self.replicas.leader_partition(info.name, index)
        except KafkaError as exc:
            return exc.error_code, str(exc)
        if not renew and any(t == RENEW for _f, _l, types in batches for t in types):
            return E.invalid_request, "RENEW acknowledgements need is_renew_ack"
        sp = self.partitions.get((group, topic_id, index))
        if sp is None or sp.leader_epoch != part.leader_epoch:
            return E.invalid_record_state, "no records are acquired there"
        before = sp.changes
        code = sp.acknowledge(member, batches, self.clock.time_ms())
        if code != E.none:
            return code, None
        if sp.changes == before:
            return E.none, None  # renewals only: nothing to persist
        self.replicas.purgatory.notify((sp.topic, sp.index))  # released records are available
        return await self.persist(sp)

    # --- persisting ------------------------------------------------------------------------------
    async def persist(self, sp: SharePartition) -> tuple[ErrorCode, str | None]:
        """Write the share-partition's state unless a write made after its latest change
        succeeded already; the write's error, and the share-partition dropped when the error
        says its state here is stale."""
        key: Key = (sp.group, sp.topic_id, sp.index)
        target = sp.changes
        lock = self._write_locks.setdefault(key, asyncio.Lock())
        async with lock:
            if self.partitions.get(key) is not sp:
                return E.invalid_record_state, "the share-partition was reloaded"
            if self._persisted.get(key, -1) >= target:
                return E.none, None
            changes = sp.changes
            start, batches, done = sp.persisted()
            code, message = await self.persister.write(key, sp.state_epoch, sp.leader_epoch, start,
                                                       done, batches)  # fmt: skip
            if code == E.none:
                if self.partitions.get(key) is sp:
                    self._persisted[key] = max(self._persisted.get(key, -1), changes)
                return E.none, None
            log.warning("share-partition %s %s-%d: writing its state failed: %s %s", sp.group,
                        sp.topic, sp.index, code.name, message or "")  # fmt: skip
            if code in STALE:
                self.drop(key, f"its state write was refused ({code.name})")
            return code, message

    def _persist_soon(self, sp: SharePartition) -> None:
        """Persist in the background (lock expiry, a closed session, archived control records)."""
        task = asyncio.get_running_loop().create_task(self._persist_logged(sp))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _persist_logged(self, sp: SharePartition) -> None:
        try:
            await self.persist(sp)
        except Exception:
            log.exception("persisting share-partition %s %s-%d failed", sp.group, sp.topic, sp.index)

    # --- sessions and locks --------------------------------------------------------------------
    def release_session(self, session: ShareSession | None) -> int:
        """A share session closed: its member's acquired records here are released."""
        if session is None:
            return 0
        total = 0
        for topic_id, index in session.partitions:
            sp = self.partitions.get((session.group, topic_id, index))
            if sp is None:
                continue
            n = sp.release_member(session.member)
            if n:
                total += n
                self._persist_soon(sp)
                self.replicas.purgatory.notify((sp.topic, sp.index))
        if total:
            log.info("share group %s: member %s's session closed, %d records released",
                     session.group, session.member, total)  # fmt: skip
        return total

    def connection_closed(self, connection_id: int) -> None:
        for session in self.sessions.close_connection(connection_id):
            self.release_session(session)

    def expire_due(self) -> None:
        """Release the records whose lock ran out; drop share-partitions not led any more, or
        idle (no session, nothing acquired)."""
        now = self.clock.time_ms()
        used = {(s.group, p) for s in self.sessions.sessions.values() for p in s.partitions}
        for key, sp in list(self.partitions.items()):
            part = self.replicas.partitions.get((sp.topic, sp.index))
            if part is None or not part.is_leader or part.leader_epoch != sp.leader_epoch:
                self.drop(key, "this broker no longer leads its partition")
                continue
            if sp.expire(now):
                self._persist_soon(sp)
                self.replicas.purgatory.notify((sp.topic, sp.index))
            elif (sp.acquired_count() == 0 and self._persisted.get(key, -1) >= sp.changes
                  and (sp.group, (sp.topic_id, sp.index)) not in used):  # fmt: skip
                lock = self._write_locks.get(key)
                if lock is None or not lock.locked():
                    self.drop(key, "no session uses it")
                    self._write_locks.pop(key, None)

    def drop_group(self, group: str, topic_ids: Iterable[uuid.UUID] | None = None) -> None:
        """Forget a group's share-partitions (its state was reset or deleted)."""
        wanted = set(topic_ids) if topic_ids is not None else None
        for key in [k for k in self.partitions if k[0] == group]:
            if wanted is None or key[1] in wanted:
                self.drop(key, "its state was reset or deleted")

    async def close(self) -> None:
        for task in list(self._background):
            task.cancel()
        for loading in list(self._loading.values()):
            loading.cancel()


def _leader_side(code: ErrorCode) -> ErrorCode:
    """A share coordinator's error as the share-partition's leader reports it to a consumer."""
    if code in (E.fenced_leader_epoch, E.not_coordinator, E.coordinator_not_available,
                E.coordinator_load_in_progress):  # fmt: skip
        return E.not_leader_or_follower if code == E.fenced_leader_epoch else E.coordinator_not_available
    return code


def _add(total: Stats, more: Stats) -> None:
    for name in Stats.__dataclass_fields__:
        setattr(total, name, getattr(total, name) + getattr(more, name))
