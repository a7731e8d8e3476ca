"""The transaction coordinator: Kafka's ``TransactionCoordinator`` as a state machine.

Ports injected: a clock, ``append(partition, key, value)`` (awaits one record of
``__transaction_state`` written and replicated — acks=all, done at the high watermark — and
raises :class:`KafkaError` if it cannot), ``write_markers(marker, still_owner)`` (the one path
for transaction markers, shaped like a WriteTxnMarkers request; it returns once every
partition of the marker has it, retrying meanwhile, or with the error that made it stop) and
``allocate_producer_id()``. Every state change is appended *before* memory changes and before
the answer.

Ownership is per partition of ``__transaction_state`` (:mod:`strom.broker.coordinator_partitions`):
:meth:`begin_load` (the broker became its leader; its ids answer COORDINATOR_LOAD_IN_PROGRESS),
:meth:`finish_load` (its records replayed, in log order; transactions caught between
PrepareCommit/PrepareAbort and Complete* are completed again — a marker for a transaction already
ended in a partition changes nothing there) and :meth:`unload` (its ids answer NOT_COORDINATOR).
The coordinator epoch of a partition is its leader epoch at the load; it is carried in the
markers, and a store or a completion begun under an older load is dropped (NOT_COORDINATOR).

States (Kafka's): Empty → Ongoing (AddPartitions/AddOffsets) → PrepareCommit|PrepareAbort
(EndTxn; then markers) → CompleteCommit|CompleteAbort → Ongoing … EndTxn answers once the
transaction is complete, or after :data:`END_WAIT_S` with Prepare* durable (Kafka's answer: the
markers keep being sent and the commit cannot be lost); requests meanwhile get
CONCURRENT_TRANSACTIONS, as do requests for an id whose previous write is still in flight.

Fencing: InitProducerId with a transactional id bumps the epoch (a new id when the epoch
would overflow; Kafka's rule in :func:`strom.broker.producer_ids.init_transactional`) and aborts
an ongoing transaction with the new epoch, so markers and the new
epoch fence the previous instance: its requests get PRODUCER_FENCED, its produce requests
INVALID_PRODUCER_EPOCH from the partitions. A transaction older than its
``transaction.timeout.ms`` is aborted the same way (:meth:`abort_timed_out`), epoch bumped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, replace

from strom.broker.producer_ids import (
    ProducerIdAndEpoch,
    TransactionalProducer,
    init_transactional,
)
from strom.broker.txn.records import TopicPartition, TxnState, TxnValue, encode_key, encode_value
from strom.broker.txn.records import partition_for as _partition_for
from strom.clock import Clock
from strom.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)
E = ErrorCode
MAX_EPOCH = 32767
END_WAIT_S = 10.0  # EndTxn waits this long for the markers before answering on Prepare*
RETRY_S = 0.1  # between tries of a completion's store
_PREPARING = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT, TxnState.PREPARE_EPOCH_FENCE)
# Kafka's TransactionStateManager.appendTransactionToLog: what a failed append answers
_APPEND_ERRORS = {
    E.unknown_topic_or_partition: E.coordinator_not_available,
    E.not_enough_replicas: E.coordinator_not_available,
    E.not_enough_replicas_after_append: E.coordinator_not_available,
    E.request_timed_out: E.coordinator_not_available,
    E.not_leader_or_follower: E.not_coordinator,
    E.kafka_storage_error: E.not_coordinator,
    E.fenced_leader_epoch: E.not_coordinator,
    E.message_too_large: E.unknown_server_error,
    E.record_list_too_large: E.unknown_server_error,
}


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """One entry of a WriteTxnMarkers request."""

    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class TxnConfig:
    partitions: int = 50  # transaction.state.log.num.partitions
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms


AppendFn = Callable[[int, bytes, bytes | None], Awaitable[None]]
# (marker, still_owner) -> NONE once every partition has it, else why it stopped
MarkersFn = Callable[[TxnMarker, Callable[[], bool]], Awaitable[ErrorCode]]


class TransactionCoordinator:
    def __init__(self, config: TxnConfig, clock: Clock, append: AppendFn,
                 write_markers: MarkersFn, allocate_producer_id: Callable[[], int]) -> None:  # fmt: skip
        self.config = config
        self.clock = clock
        self._append = append
        self._write_markers = write_markers
        self._allocate = allocate_producer_id
        self.txns: dict[str, TxnValue] = {}
        self._pid_index: dict[int, TxnValue] | None = None
        self.owned: dict[int, int] = {}  # loaded partition -> coordinator epoch
        self.loading_partitions: dict[int, int] = {}  # partition -> epoch being loaded
        self._busy: set[str] = set()  # ids with a request in flight
        self._completions: dict[str, asyncio.Task[ErrorCode]] = {}

    # ownership --------------------------------------------------------------------------------
    def partition_for(self, transactional_id: str) -> int:
        return _partition_for(transactional_id, self.config.partitions)

    @property
    def loading(self) -> bool:
        """Some partition is being loaded (ListTransactions answers LOAD_IN_PROGRESS)."""
        return bool(self.loading_partitions)

    @property
    def owns_all(self) -> bool:
        """Every partition is loaded here (a single node): what it does not know, nobody does."""
        return len(self.owned) == self.config.partitions

    def ownership(self, txn_id: str) -> ErrorCode:
        """NONE when this coordinator serves ``txn_id``; COORDINATOR_LOAD_IN_PROGRESS while its
        partition loads; NOT_COORDINATOR when another broker's."""
        partition = self.partition_for(txn_id)
        if partition in self.loading_partitions:
            return E.coordinator_load_in_progress
        return E.none if partition in self.owned else E.not_coordinator

    def not_here(self, txn_id: str) -> ErrorCode | None:
        """:meth:`ownership` in the group coordinator's shape (None: served here), for
        FindCoordinator, which asks both coordinators the same way."""
        code = self.ownership(txn_id)
        return None if code == E.none else code

    def begin_load(self, partition: int, epoch: int) -> None:
        """This broker leads ``partition`` in ``epoch``: its ids wait for :meth:`finish_load`."""
        self.owned.pop(partition, None)
        self._drop(partition)
        self.loading_partitions[partition] = epoch

    def finish_load(self, partition: int, epoch: int,
                    records: Iterable[tuple[str, TxnValue | None]]) -> list[str]:  # fmt: skip
        """Apply ``partition``'s records (log order) and serve its ids; returns the ids whose
        completion (markers + Complete*) was started again. A load superseded meanwhile
        (another epoch, or unloaded) is ignored."""
        if self.loading_partitions.get(partition) != epoch:
            return []
        loaded: dict[str, TxnValue] = {}
        for txn_id, value in records:
            if value is None:
                loaded.pop(txn_id, None)
            else:
                loaded[txn_id] = value
        del self.loading_partitions[partition]
        self.owned[partition] = epoch
        self.txns.update(loaded)
        self._pid_index = None
        resumed = []
        for txn_id, value in loaded.items():
            if value.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                log.info("completing transaction %s (%s) left by the previous coordinator",
                         txn_id, value.state.name)  # fmt: skip
                self._start_completion(txn_id, replace(value, partitions=set(value.partitions)),
                                       value.state is TxnState.PREPARE_COMMIT)  # fmt: skip
                resumed.append(txn_id)
        log.info("transaction coordinator loaded %d transactional ids of partition %d (epoch %d)",
                 len(loaded), partition, epoch)  # fmt: skip
        return resumed

    def unload(self, partition: int) -> None:
        """This broker no longer leads ``partition``: forget its ids, stop their markers."""
        self.loading_partitions.pop(partition, None)
        self.owned.pop(partition, None)
        self._drop(partition)

    def _drop(self, partition: int) -> None:
        for txn_id in [t for t in self.txns if self.partition_for(t) == partition]:
            del self.txns[txn_id]
            task = self._completions.pop(txn_id, None)
            if task is not None:
                task.cancel()
        self._pid_index = None

    async def wait_completions(self) -> None:
        """Wait for the completions running now (tests, shutdown)."""
        tasks = list(self._completions.values())
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def close(self) -> None:
        for task in self._completions.values():
            task.cancel()
        self._completions.clear()

    # persistence ------------------------------------------------------------------------------
    async def _store(self, txn_id: str, value: TxnValue | None) -> ErrorCode:
        """Persist (replicated), then apply; memory is left unchanged on an error."""
        partition = self.partition_for(txn_id)
        epoch = self.owned.get(partition)
        if epoch is None:
            return self.ownership(txn_id)
        if value is not None:
            value.last_update_ms = self.clock.time_ms()
        try:
            await self._append(partition, encode_key(txn_id),
                               None if value is None else encode_value(value))  # fmt: skip
        except Exception as exc:
            code = getattr(exc, "error_code", E.unknown_server_error)
            log.warning("transactional id %s: storing %s failed: %s", txn_id,
                        "a tombstone" if value is None else value.state.name, exc)  # fmt: skip
            return _APPEND_ERRORS.get(code, E.coordinator_not_available if isinstance(
                exc, KafkaError) else E.unknown_server_error)  # fmt: skip
        if self.owned.get(partition) != epoch:  # unloaded or reloaded while waiting
            return E.not_coordinator
        if value is None:
            self.txns.pop(txn_id, None)
        else:
            self.txns[txn_id] = value
        self._pid_index = None
        return E.none

    @contextlib.contextmanager
    def _exclusive(self, txn_id: str) -> Iterator[bool]:
        """One request per transactional id at a time (Kafka's pending state): False when one
        is in flight already (the caller answers CONCURRENT_TRANSACTIONS)."""
        if txn_id in self._busy:
            yield False
            return
        self._busy.add(txn_id)
        try:
            yield True
        finally:
            self._busy.discard(txn_id)

    # InitProducerId ---------------------------------------------------------------------------
    async def init_producer_id(self, txn_id: str, timeout_ms: int,
                               expected: ProducerIdAndEpoch | None = None) -> tuple[ErrorCode, int, int]:  # fmt: skip
        """(error, producer id, epoch) for a transactional producer; ``expected`` is the id and
        epoch the caller has (v3+). Who may bump: :func:`strom.broker.producer_ids.init_transactional`."""
        if not txn_id:
            return E.invalid_request, -1, -1
        code = self.ownership(txn_id)
        if code != E.none:
            return code, -1, -1
        if timeout_ms <= 0 or timeout_ms > self.config.max_timeout_ms:
            return E.invalid_transaction_timeout, -1, -1
        with self._exclusive(txn_id) as mine:
            if not mine:
                return E.concurrent_transactions, -1, -1
            return await self._init(txn_id, timeout_ms, expected)

    async def _init(self, txn_id: str, timeout_ms: int,
                    expected: ProducerIdAndEpoch | None) -> tuple[ErrorCode, int, int]:  # fmt: skip
        current = self.txns.get(txn_id)
        if current is None:
            value = TxnValue(self._allocate(), 0, timeout_ms, TxnState.EMPTY)
            return await self._store_answer(txn_id, value)
        if current.state in _PREPARING:
            return E.concurrent_transactions, -1, -1
        owned = TransactionalProducer(current.producer_id, current.producer_epoch,
                                      current.previous_producer_id, current.last_epoch)  # fmt: skip
        result = init_transactional(owned, expected, self._allocate)
        if isinstance(result, ErrorCode):
            return result, -1, -1
        if result == owned:  # a retry of the bump we made: the same answer
            return E.none, current.producer_id, current.producer_epoch
        if current.state is TxnState.ONGOING:
            # the previous instance's transaction is aborted under a fencing epoch of its own
            # producer id (its markers end it in every partition), before the new id/epoch
            fence = replace(current, partitions=set(current.partitions))
            if result.producer_id == current.producer_id:
                fence.producer_epoch = result.epoch
            log.info("transactional id %s: fencing epoch %d, aborting its transaction",
                     txn_id, current.producer_epoch)  # fmt: skip
            code = await self._end(txn_id, fence, commit=False, wait=True)
            if code != E.none:
                return code, -1, -1
            current = self.txns.get(txn_id)  # type: ignore[assignment]
            if current is None:  # unloaded meanwhile
                return E.not_coordinator, -1, -1
            if current.state in _PREPARING:  # the markers are still on their way
                return E.concurrent_transactions, -1, -1
        value = replace(current, producer_id=result.producer_id, producer_epoch=result.epoch,
                        previous_producer_id=result.previous_producer_id,
                        last_epoch=result.last_epoch, timeout_ms=timeout_ms,
                        state=TxnState.EMPTY, partitions=set(), start_ms=-1)  # fmt: skip
        if current.state is TxnState.COMPLETE_ABORT and current.producer_id == value.producer_id \
                and current.producer_epoch == value.producer_epoch:
            value.state = TxnState.COMPLETE_ABORT  # just aborted under this very epoch
        return await self._store_answer(txn_id, value)

    async def _store_answer(self, txn_id: str, value: TxnValue) -> tuple[ErrorCode, int, int]:
        code = await self._store(txn_id, value)
        if code != E.none:
            return code, -1, -1
        return E.none, value.producer_id, value.producer_epoch

    # checks shared by the transactional requests -----------------------------------------------
    def check(self, txn_id: str, producer_id: int, producer_epoch: int) -> ErrorCode:
        """The error a request of (``producer_id``, ``producer_epoch``) for ``txn_id`` gets,
        or NONE when it is the current instance."""
        code = self.ownership(txn_id)
        if code != E.none:
            return code
        value = self.txns.get(txn_id)
        if value is None or value.producer_id != producer_id:
            return E.invalid_producer_id_mapping
        if value.producer_epoch != producer_epoch:
            return E.producer_fenced
        if value.state in _PREPARING or txn_id in self._busy:
            return E.concurrent_transactions
        return E.none

    def is_ongoing_with(self, producer_id: int, producer_epoch: int, tp: TopicPartition) -> bool:
        """True when ``tp`` is in the ongoing transaction of that producer (epoch): what a
        transactional produce or TxnOffsetCommit must be part of (KIP-890's verification)."""
        value = self._by_pid.get(producer_id)
        return (value is not None and value.producer_epoch == producer_epoch
                and value.state is TxnState.ONGOING and tp in value.partitions)  # fmt: skip

    def verify(self, txn_id: str, producer_id: int, producer_epoch: int,
               partitions: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:  # fmt: skip
        """AddPartitionsToTxn v4 ``verify_only`` (KIP-890), asked by a partition leader before
        it appends a transactional batch: per partition NONE when it is in the ongoing
        transaction of that producer (epoch), else INVALID_TXN_STATE; the ownership error
        (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS) for all when ``txn_id`` is not here."""
        code = self.ownership(txn_id)
        if code != E.none:
            return {tp: code for tp in partitions}
        return {tp: E.none if self.is_ongoing_with(producer_id, producer_epoch, tp)
                else E.invalid_txn_state for tp in partitions}  # fmt: skip

    def knows_producer(self, producer_id: int) -> bool:
        return producer_id in self._by_pid

    @property
    def _by_pid(self) -> dict[int, TxnValue]:
        """Transactions by producer id (rebuilt when the transactions changed)."""
        if self._pid_index is None:
            self._pid_index = {v.producer_id: v for v in self.txns.values()}
        return self._pid_index

    # AddPartitionsToTxn / AddOffsetsToTxn -----------------------------------------------------
    async def add_partitions(self, txn_id: str, producer_id: int, producer_epoch: int,
                             partitions: list[TopicPartition]) -> ErrorCode:  # fmt: skip
        code = self.check(txn_id, producer_id, producer_epoch)
        if code != E.none:
            return code
        with self._exclusive(txn_id) as mine:
            if not mine:
                return E.concurrent_transactions
            current = self.txns[txn_id]
            if current.state is TxnState.ONGOING and current.partitions.issuperset(partitions):
                return E.none
            value = replace(current, partitions=set(current.partitions))
            if value.state is not TxnState.ONGOING:
                value.state = TxnState.ONGOING
                value.partitions = set()
                value.start_ms = self.clock.time_ms()
            value.partitions.update(partitions)
            return await self._store(txn_id, value)

    # EndTxn -----------------------------------------------------------------------------------
    async def end_txn(self, txn_id: str, producer_id: int, producer_epoch: int,
                      commit: bool) -> ErrorCode:  # fmt: skip
        code = self.check(txn_id, producer_id, producer_epoch)
        if code != E.none:
            return code
        with self._exclusive(txn_id) as mine:
            if not mine:
                return E.concurrent_transactions
            current = self.txns[txn_id]
            if current.state is TxnState.COMPLETE_COMMIT:  # a retry of the same EndTxn
                return E.none if commit else E.invalid_txn_state
            if current.state is TxnState.COMPLETE_ABORT:
                return E.invalid_txn_state if commit else E.none
            if current.state is not TxnState.ONGOING:
                return E.invalid_txn_state
            value = replace(current, partitions=set(current.partitions))
            return await self._end(txn_id, value, commit, wait=False)

    async def _end(self, txn_id: str, value: TxnValue, commit: bool, *, wait: bool) -> ErrorCode:
        """Persist Prepare*, then complete (markers, Complete*) in a task of its own: awaited
        up to :data:`END_WAIT_S` (``wait``: to its end), the transaction being decided once
        Prepare* is stored."""
        value.state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        code = await self._store(txn_id, value)
        if code != E.none:
            return code
        task = self._start_completion(txn_id, replace(value, partitions=set(value.partitions)),
                                      commit)  # fmt: skip
        try:
            return await asyncio.wait_for(asyncio.shield(task), None if wait else END_WAIT_S)
        except TimeoutError:
            log.info("transactional id %s: markers still on their way; answering on %s",
                     txn_id, value.state.name)  # fmt: skip
            return E.none

    def _start_completion(self, txn_id: str, value: TxnValue, commit: bool) -> asyncio.Task[ErrorCode]:
        task = asyncio.get_running_loop().create_task(self._complete(txn_id, value, commit))
        self._completions[txn_id] = task
        task.add_done_callback(lambda t: self._completions.pop(txn_id, None)
                               if self._completions.get(txn_id) is t else None)  # fmt: skip
        return task

    async def _complete(self, txn_id: str, value: TxnValue, commit: bool) -> ErrorCode:
        """Markers to every partition (until all have them), then Complete* (retried while
        this load of the partition lasts)."""
        partition = self.partition_for(txn_id)
        epoch = self.owned.get(partition)
        if epoch is None:
            return E.not_coordinator
        marker = TxnMarker(value.producer_id, value.producer_epoch, commit, epoch,
                           tuple(sorted(value.partitions)))  # fmt: skip
        code = await self._write_markers(marker, lambda: self.owned.get(partition) == epoch)
        if code != E.none:  # stays Prepare*: the next load of the partition completes it
            log.warning("transactional id %s: markers stopped: %s", txn_id, code.name)
            return code
        value.state = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        value.partitions = set()
        while True:
            code = await self._store(txn_id, replace(value))
            if code in (E.none, E.not_coordinator) or self.owned.get(partition) != epoch:
                return E.none  # decided and marked; a later load completes it if need be
            await asyncio.sleep(RETRY_S)

    # timers -------------------------------------------------------------------------------------
    async def abort_timed_out(self) -> list[str]:
        """Abort (epoch bumped, fencing the producer) every ongoing transaction older than its
        timeout; returns their ids."""
        now = self.clock.time_ms()
        done = []
        for txn_id, value in list(self.txns.items()):
            if value.state is TxnState.ONGOING and now - value.start_ms > value.timeout_ms:
                with self._exclusive(txn_id) as mine:
                    if not mine or self.txns.get(txn_id) is not value:
                        continue
                    bumped = replace(value, partitions=set(value.partitions))
                    if bumped.producer_epoch < MAX_EPOCH - 1:
                        bumped.producer_epoch += 1
                    log.info("transactional id %s: aborting a transaction open for %d ms",
                             txn_id, now - value.start_ms)  # fmt: skip
                    if await self._end(txn_id, bumped, commit=False, wait=True) == E.none:
                        done.append(txn_id)
        return done

    async def expire_ids(self) -> list[str]:
        """Forget transactional ids idle for ``transactional.id.expiration.ms`` (tombstones)."""
        now = self.clock.time_ms()
        gone = []
        for txn_id, value in list(self.txns.items()):
            idle = value.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT,
                                   TxnState.COMPLETE_ABORT)  # fmt: skip
            if idle and now - value.last_update_ms >= self.config.id_expiration_ms:
                with self._exclusive(txn_id) as mine:
                    if mine and self.txns.get(txn_id) is value \
                            and await self._store(txn_id, None) == E.none:
                        gone.append(txn_id)
        return gone
