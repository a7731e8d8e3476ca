"""Followers copy their leaders: one fetcher task per leader broker (Kafka's fetcher threads).

A partition handed over by LeaderAndIsr (:meth:`ReplicaFetcherManager.add`) first
*truncates* (KIP-101/279): the follower asks the leader (OffsetForLeaderEpoch v4, replica id =
this broker) where its own latest epoch ends in the leader's log, and cuts its log there:

- leader answers the same epoch E, end offset O: truncate to min(O, own log end);
- leader answers an older epoch E' (it never saw ours): truncate to min(O, where E' ends in
  our own cache) — the divergent tail written in epochs the leader does not have goes;
- no epoch at all (ours is empty, or the leader's answer is -1): truncate to our high
  watermark, as Kafka does without epochs.

Then it fetches (Fetch v12, replica id = this broker, ``current_leader_epoch`` = the epoch
of the LeaderAndIsr) from its log end offset over an incremental fetch session (KIP-227,
:class:`FollowerSession`: after the first request only changed partitions are sent), appends what
comes with ``AppendOrigin.REPLICATION`` (offsets and epochs kept, shape and CRC checked) and
sets its high watermark to min(leader's HW, own log end) — answering the acks=all waiters of
the leader this broker was, whose records the truncation removed or the HW now covers
(:mod:`strom.replication.delayed_produce`). A partition error backs that
partition off (``replica.fetch.backoff.ms``) and re-truncates after OFFSET_OUT_OF_RANGE; a
connection error backs the whole task off. A task sleeps while it has no partition and
wakes when one is added; it ends when it is closed (its ``closed`` flag, then cancellation
repeated until it ends: :mod:`strom.replication.task_stop` says why one cancellation is not enough).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.fetch.v12 import request as fetch_req
from kio.schema.offset_for_leader_epoch.v4 import request as ofle_req

from strom.protocol.errors import ErrorCode
from strom.protocol.messages import build
from strom.replication.connection import BrokerConnection, BrokerConnectionError
from strom.replication.task_stop import cancel_and_wait
from strom.storage.batch_validation import AppendOrigin

if TYPE_CHECKING:
    from strom.replication.partition import Partition
    from strom.replication.replica_manager import ReplicaManager
    from strom.storage.log import PendingAppend

log = logging.getLogger(__name__)
TopicPartition = tuple[str, int]
FETCH, OFFSET_FOR_LEADER_EPOCH = 1, 23


#: first retry of a partition whose leader refused it (e.g. the leader has not applied its
#: LeaderAndIsr yet, at topic creation); doubled per failure up to ``replica.fetch.backoff.ms``
FIRST_RETRY_S = 0.05


@dataclass(slots=True)
class FetchState:
    leader_epoch: int
    truncating: bool = True
    delayed_until: float = 0.0
    failures: int = 0  # refusals in a row: the next retry waits FIRST_RETRY_S * 2**failures

    def delay(self, now: float, backoff_s: float) -> None:
        """Hold this partition back after a refusal: briefly at first (a leader that is a
        few milliseconds behind its LeaderAndIsr), then up to ``backoff_s`` (Kafka's
        ``replica.fetch.backoff.ms``), so a leader that keeps refusing is not asked in a loop."""
        self.delayed_until = now + min(backoff_s, FIRST_RETRY_S * (1 << min(self.failures, 16)))
        self.failures += 1


@dataclass(frozen=True, slots=True)
class FetcherConfig:
    max_wait_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 10 * 1024 * 1024
    partition_max_bytes: int = 1024 * 1024
    backoff_ms: int = 1000
    source_host: str | None = None


class ReplicaFetcherManager:
    def __init__(self, replicas: ReplicaManager, config: FetcherConfig) -> None:
        self.replicas = replicas
        self.config = config
        self.fetchers: dict[int, LeaderFetcher] = {}
        self._owner: dict[TopicPartition, int] = {}

    def add(self, tp: TopicPartition, leader: int, leader_epoch: int) -> None:
        self.remove(tp)
        fetcher = self.fetchers.get(leader)
        if fetcher is None or fetcher.done:
            fetcher = self.fetchers[leader] = LeaderFetcher(self, leader)
            fetcher.start()
        fetcher.partitions[tp] = FetchState(leader_epoch)
        fetcher.wake.set()
        self._owner[tp] = leader

    def remove(self, tp: TopicPartition) -> None:
        leader = self._owner.pop(tp, None)
        if leader is not None and leader in self.fetchers:
            self.fetchers[leader].partitions.pop(tp, None)

    def wake_all(self) -> None:
        for fetcher in self.fetchers.values():
            fetcher.wake.set()

    async def close(self) -> None:
        for fetcher in list(self.fetchers.values()):
            await fetcher.close()
        self.fetchers.clear()


class LeaderFetcher:
    def __init__(self, manager: ReplicaFetcherManager, leader: int) -> None:
        self.manager = manager
        self.replicas = manager.replicas
        self.config = manager.config
        self.leader = leader
        self.partitions: dict[TopicPartition, FetchState] = {}
        self.wake = asyncio.Event()
        self._conn: BrokerConnection | None = None
        self._address: tuple[str, int] = ("", -1)
        self._task: asyncio.Task[None] | None = None
        self.closed = False  # set before the task is cancelled: ends it even if that is lost
        self.session = FollowerSession()

    @property
    def done(self) -> bool:
        return self._task is None or self._task.done()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        self.closed = True
        self.wake.set()
        await cancel_and_wait(self._task, f"replica fetcher of leader {self.leader}")
        if self._conn is not None:
            self._conn.close()

    def _connection(self) -> BrokerConnection | None:
        broker = self.replicas.cache.broker(self.leader)
        if broker is None:
            return None
        if self._conn is None or self._address != (broker.host, broker.port):
            if self._conn is not None:
                self._conn.close()
            self._address = (broker.host, broker.port)
            self.session.reset()
            self._conn = BrokerConnection(
                broker.host, broker.port, client_id=f"strom-fetcher-{self.replicas.node_id}",
                source_host=self.config.source_host,
            )  # fmt: skip
        return self._conn

    async def _run(self) -> None:
        backoff = self.config.backoff_ms / 1000
        loop = asyncio.get_running_loop()
        while not self.closed:
            if not self.partitions:
                self.wake.clear()
                await self.wake.wait()
                continue
            conn = self._connection()
            if conn is None:
                log.warning("leader %d of %d partitions has no known address", self.leader,
                            len(self.partitions))  # fmt: skip
                await self._sleep(backoff)
                continue
            try:
                now = loop.time()
                truncating = {tp: s for tp, s in self.partitions.items()
                              if s.truncating and s.delayed_until <= now}  # fmt: skip
                if truncating:
                    await self._truncate(conn, truncating)
                now = loop.time()
                ready = {tp: s for tp, s in self.partitions.items()
                         if not s.truncating and s.delayed_until <= now}  # fmt: skip
                if ready:
                    await self._fetch(conn, ready)
                elif not truncating:  # all held back: until the first is due (a wake is sooner)
                    due = min(s.delayed_until for s in self.partitions.values())
                    await self._sleep(min(backoff / 4, max(due - now, 0.001)))
            except BrokerConnectionError as exc:
                log.warning("fetching from broker %d failed: %s", self.leader, exc)
                await self._sleep(backoff)
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug or a disk error must not end fetching for good
                log.exception("fetcher of broker %d failed; retrying", self.leader)
                self.session.reset()
                await self._sleep(backoff)

    async def _sleep(self, seconds: float) -> None:
        self.wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.wake.wait(), seconds)

    # --- truncation ------------------------------------------------------------------------------

    async def _truncate(self, conn: BrokerConnection, states: dict[TopicPartition, FetchState]
                        ) -> None:  # fmt: skip
        topics: dict[str, list[Any]] = {}
        for (topic, index), state in states.items():
            log_ = self.replicas.logs.get(topic, index)
            if log_ is not None:
                # fetched batches still being written (a slow disk; the partition restarts
                # fetching, from a new leader): part of the log before it is compared with
                # the leader's (waits for the write on the loop: rare)
                log_.settle()
            latest = log_.leader_epochs.latest_epoch if log_ is not None else -1
            topics.setdefault(topic, []).append(build(ofle_req.OffsetForLeaderPartition,
                partition=index, current_leader_epoch=state.leader_epoch, leader_epoch=latest))  # fmt: skip
        request = build(ofle_req.OffsetForLeaderEpochRequest,
            replica_id=self.replicas.node_id,
            topics=tuple(build(ofle_req.OffsetForLeaderTopic, topic=t, partitions=tuple(ps))
                         for t, ps in topics.items()),
        )  # fmt: skip
        response = await conn.send(OFFSET_FOR_LEADER_EPOCH, 4, request, timeout=30)
        now = asyncio.get_running_loop().time()
        for topic in response.topics:
            for p in topic.partitions:
                tp = (str(topic.topic), int(p.partition))
                found = self.partitions.get(tp)
                if found is None or states.get(tp) is not found:
                    continue  # removed or re-added meanwhile
                state = found
                code = ErrorCode(p.error_code)
                if code != ErrorCode.none:
                    log.info("OffsetForLeaderEpoch of %s-%d from broker %d: %s", *tp,
                             self.leader, code.name)  # fmt: skip
                    state.delay(now, self.config.backoff_ms / 1000)
                    continue
                self._truncate_one(tp, int(p.leader_epoch), int(p.end_offset))
                state.truncating = False

    def _truncate_one(self, tp: TopicPartition, leader_epoch: int, leader_end: int) -> None:
        log_ = self.replicas.logs.get(*tp)
        if log_ is None:
            return
        cache = log_.leader_epochs
        own_latest = cache.latest_epoch
        if leader_epoch < 0 or own_latest < 0:
            target = log_.high_watermark
        elif leader_epoch == own_latest:
            target = min(leader_end, log_.log_end_offset)
        else:
            _e, own_end = cache.end_offset_for(leader_epoch, log_.log_end_offset)
            target = min(leader_end, own_end if own_end >= 0 else log_.high_watermark,
                         log_.log_end_offset)  # fmt: skip
        if target < log_.log_end_offset:
            log.info("truncating %s-%d from %d to %d (leader %d: epoch %d ends at %d)", *tp,
                     log_.log_end_offset, target, self.leader, leader_epoch, leader_end)  # fmt: skip
            log_.truncate_to(target)
            self.replicas.truncated(tp)

    # --- fetching --------------------------------------------------------------------------------

    async def _fetch(self, conn: BrokerConnection, states: dict[TopicPartition, FetchState]
                     ) -> None:  # fmt: skip
        cfg = self.config
        wanted: dict[TopicPartition, tuple[int, int, int]] = {}
        for tp, state in states.items():
            log_ = self.replicas.logs.get(*tp)
            if log_ is not None and log_.in_flight is None:  # (else fetched when written)
                wanted[tp] = (log_.log_end_offset, state.leader_epoch,
                              log_.leader_epochs.latest_epoch)  # fmt: skip
        session = self.session
        send, forgotten, epoch = session.build(wanted)
        topics: dict[str, list[Any]] = {}
        for (topic, index), (offset, leader_epoch, last_epoch) in send.items():
            topics.setdefault(topic, []).append(build(fetch_req.FetchPartition,
                partition=index, current_leader_epoch=leader_epoch, fetch_offset=offset,
                last_fetched_epoch=last_epoch, log_start_offset=-1,
                partition_max_bytes=cfg.partition_max_bytes))  # fmt: skip
        gone: dict[str, list[int]] = {}
        for topic, index in forgotten:
            gone.setdefault(topic, []).append(index)
        request = build(fetch_req.FetchRequest,
            replica_id=self.replicas.node_id, max_wait=cfg.max_wait_ms,
            min_bytes=cfg.min_bytes, max_bytes=cfg.max_bytes, isolation_level=0,
            session_id=session.id, session_epoch=epoch,
            topics=tuple(build(fetch_req.FetchTopic, topic=t, partitions=tuple(ps))
                         for t, ps in topics.items()),
            forgotten_topics_data=tuple(build(fetch_req.ForgottenTopic, topic=t, partitions=tuple(ps))
                                        for t, ps in gone.items()),
            rack_id="",
        )  # fmt: skip
        timeout = cfg.max_wait_ms / 1000 + 30
        try:
            response = await conn.send(FETCH, 12, request, timeout=timeout)
        except BrokerConnectionError:
            session.reset()  # the leader may have lost it; start again with a full fetch
            raise
        code = ErrorCode(response.error_code)
        if code != ErrorCode.none:
            log.info("fetch session %d with broker %d: %s; starting a new one", session.id,
                     self.leader, code.name)  # fmt: skip
            session.reset()
            return
        session.answered(int(response.session_id), send, forgotten)
        now = asyncio.get_running_loop().time()
        for topic in response.responses:
            for p in topic.partitions:
                tp = (str(topic.topic), int(p.partition_index))
                found = self.partitions.get(tp)
                if found is None or states.get(tp) is not found:
                    continue
                self._process(tp, found, p, now)

    def _process(self, tp: TopicPartition, state: FetchState, p: Any, now: float) -> None:
        code = ErrorCode(p.error_code)
        log_ = self.replicas.logs.get(*tp)
        leader_start = int(p.log_start_offset)
        if code == ErrorCode.offset_out_of_range and log_ is not None and (
                log_.log_end_offset < leader_start):  # fmt: skip
            log.warning("%s-%d ends at %d, below the log start %d of broker %d: starting over "
                        "there", *tp, log_.log_end_offset, leader_start, self.leader)  # fmt: skip
            log_.truncate_fully_and_start_at(leader_start)
            self.replicas.truncated(tp, everything=True)
            return
        if code == ErrorCode.offset_out_of_range:
            log.warning("fetch of %s-%d is out of range on broker %d: truncating again", *tp,
                        self.leader)  # fmt: skip
            state.truncating = True
            state.delay(now, self.config.backoff_ms / 1000)
            return
        if code != ErrorCode.none:
            log.info("fetch of %s-%d from broker %d: %s", *tp, self.leader, code.name)
            state.delay(now, self.config.backoff_ms / 1000)
            return
        state.failures = 0
        part = self.replicas.partitions.get(tp)
        if part is None or part.is_leader:
            return
        log_ = part.log
        if leader_start > log_.log_start_offset and leader_start <= log_.high_watermark:
            log_.delete_records_before(leader_start)  # the leader's retention or DeleteRecords
        records = p.records
        if records:
            try:
                if log_.speed.slow:  # a slow disk: written by a writer thread, not here
                    log_.append(records, origin=AppendOrigin.REPLICATION,
                                writer=self.replicas.logs.writers)  # fmt: skip
                    pending = log_.in_flight
                    if pending is not None:
                        self._written_later(tp, state, part, pending, int(p.high_watermark))
                        return
                else:
                    log_.append(records, origin=AppendOrigin.REPLICATION)
            except Exception:
                log.exception("appending fetched records to %s-%d failed", *tp)
                state.delayed_until = now + self.config.backoff_ms / 1000
                return
            self.replicas.purgatory.notify(tp)
        self.replicas.follower_high_watermark(part, int(p.high_watermark))

    def _written_later(self, tp: TopicPartition, state: FetchState, part: Partition,
                       pending: PendingAppend, leader_hw: int) -> None:  # fmt: skip
        """The fetched batches of ``tp`` are being written by a writer thread (its log
        directory is slow, :mod:`strom.storage.slow_disk`): the partition is not fetched
        again until they are part of the log (the next fetch starts at its end), then the
        high watermark follows the leader's as after any append. Other partitions go on."""
        state.delayed_until = math.inf
        loop = asyncio.get_running_loop()

        def written() -> None:
            try:
                pending.finish()
            except Exception:
                log.exception("appending fetched records to %s-%d failed", *tp)
                state.delayed_until = loop.time() + self.config.backoff_ms / 1000
            else:
                state.delayed_until = 0.0
                self.replicas.purgatory.notify(tp)
                if self.replicas.partitions.get(tp) is part and not part.is_leader:  # still
                    self.replicas.follower_high_watermark(part, leader_hw)  # the leader's
            self.wake.set()

        def done(_f: Any) -> None:
            if not loop.is_closed():
                loop.call_soon_threadsafe(written)

        pending.future.add_done_callback(done)


class FollowerSession:
    """The follower's side of a KIP-227 fetch session with one leader: the first request is
    full and asks for a session (epoch 0); later ones send only partitions whose fetch
    parameters changed, and name the partitions no longer fetched. Any session error, or a
    lost connection, starts again with a full request."""

    def __init__(self) -> None:
        self.id = 0
        self.epoch = 0
        self.sent: dict[TopicPartition, tuple[int, int, int]] = {}

    def reset(self) -> None:
        self.id, self.epoch, self.sent = 0, 0, {}

    def build(self, wanted: dict[TopicPartition, tuple[int, int, int]]
              ) -> tuple[dict[TopicPartition, tuple[int, int, int]], list[TopicPartition], int]:  # fmt: skip
        """(partitions to send, partitions to forget, session epoch) of the next request."""
        if self.id == 0:
            return dict(wanted), [], 0
        send = {tp: v for tp, v in wanted.items() if self.sent.get(tp) != v}
        forgotten = [tp for tp in self.sent if tp not in wanted]
        return send, forgotten, self.epoch

    def answered(self, session_id: int, send: dict[TopicPartition, tuple[int, int, int]],
                 forgotten: list[TopicPartition]) -> None:  # fmt: skip
        if self.id == 0:
            self.sent = dict(send)
            self.id = session_id
            self.epoch = 1
            return
        self.sent.update(send)
        for tp in forgotten:
            self.sent.pop(tp, None)
        self.epoch = 1 if self.epoch >= 2**31 - 1 else self.epoch + 1
