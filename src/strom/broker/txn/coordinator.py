"""The transaction coordinator: Kafka's ``TransactionCoordinator`` as a state machine.

Ports injected: a clock, ``append(partition, key, value)`` (the log port of its state,
:class:`strom.broker.txn.state_manager.TransactionStateManager`, which owns the transactions,
the partitions loaded here and the writes to ``__transaction_state``),
``write_markers(marker, still_owner)`` (the one path for transaction markers, shaped like a
WriteTxnMarkers request; it returns once every partition of the marker has it, retrying
meanwhile, or with the error that made it stop) and ``allocate_producer_id()``. Every state
change is appended *before* memory changes and before the answer.

Ownership is per partition of ``__transaction_state`` (:mod:`strom.replication.coordinator_partitions`):
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
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace

from strom.broker.producer_ids import (
    ProducerIdAndEpoch,
    TransactionalProducer,
    init_transactional,
)
from strom.broker.txn.records import TopicPartition, TxnState, TxnValue
from strom.broker.txn.state_manager import AppendFn, TransactionStateManager, TxnConfig
from strom.clock import Clock
from strom.protocol.errors import ErrorCode

__all__ = ["AppendFn", "MarkersFn", "TransactionCoordinator", "TxnConfig", "TxnMarker", "TxnValue"]

log = logging.getLogger(__name__)
E = ErrorCode
MAX_EPOCH = 32767
END_WAIT_S = 10.0  # EndTxn waits this long for the markers before answering on Prepare*
RETRY_S = 0.1  # between tries of a completion's store
_PREPARING = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT, TxnState.PREPARE_EPOCH_FENCE)


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """One entry of a WriteTxnMarkers request."""

    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: tuple[TopicPartition, ...]


# (marker, still_owner) -> NONE once every partition has it, else why it stopped
MarkersFn = Callable[[TxnMarker, Callable[[], bool]], Awaitable[ErrorCode]]


class TransactionCoordinator:
    def __init__(self, config: TxnConfig, clock: Clock, append: AppendFn,
                 write_markers: MarkersFn, allocate_producer_id: Callable[[], int]) -> None:  # fmt: skip
        self.state = TransactionStateManager(config, clock, append)
        self.config = config
        self.clock = clock
        self._write_markers = write_markers
        self._allocate = allocate_producer_id
        self._completions: dict[str, asyncio.Task[ErrorCode]] = {}
        # the state's queries, as handlers and FindCoordinator ask them
        self.txns = self.state.txns  # never rebound: the same dict
        self.owned = self.state.owned
        self.partition_for = self.state.partition_for
        self.ownership = self.state.ownership
        self.not_here = self.state.not_here
        self.is_ongoing_with = self.state.is_ongoing_with
        self.knows_producer = self.state.knows_producer

    @property
    def loading(self) -> bool:
        """Some partition is being loaded (ListTransactions answers LOAD_IN_PROGRESS)."""
        return self.state.loading

    @property
    def owns_all(self) -> bool:
        """Every partition is loaded here (a single node): what it does not know, nobody does."""
        return self.state.owns_all

    # loading ----------------------------------------------------------------------------------
    def begin_load(self, partition: int, epoch: int) -> None:
        """This broker leads ``partition`` in ``epoch``: its ids wait for :meth:`finish_load`."""
        self._cancel_completions(self.state.begin_load(partition, epoch))

    def finish_load(self, partition: int, epoch: int,
                    records: Iterable[tuple[str, TxnValue | None]]) -> list[str]:  # fmt: skip
        """Apply ``partition``'s records (log order) and serve its ids; returns the ids whose
        completion (markers + Complete*) was started again. A load superseded meanwhile
        (another epoch, or unloaded) is ignored."""
        loaded = self.state.finish_load(partition, epoch, records)
        if loaded is None:
            return []
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
        self._cancel_completions(self.state.unload(partition))

    def _cancel_completions(self, txn_ids: list[str]) -> None:
        for txn_id in txn_ids:
            task = self._completions.pop(txn_id, None)
            if task is not None:
                task.cancel()

    async def wait_completions(self) -> None:
        """Wait for the completions running now (tests, shutdown)."""
        tasks = list(self._completions.values())
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def close(self) -> None:
        for task in self._completions.values():
            task.cancel()
        self._completions.clear()

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
        with self.state.exclusive(txn_id) as mine:
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
        code = await self.state.store(txn_id, value)
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
        if value.state in _PREPARING or self.state.busy(txn_id):
            return E.concurrent_transactions
        return E.none

    def verify(self, txn_id: str, producer_id: int, producer_epoch: int,
               partitions: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:  # fmt: skip
        """AddPartitionsToTxn v4 ``verify_only`` (KIP-890), asked by a partition leader before
        it appends a transactional batch (Kafka's ``handleVerifyPartitionsInTransaction``): the
        ownership error (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS) when ``txn_id`` is not
        here; INVALID_PRODUCER_ID_MAPPING when the id owns another producer id (or none);
        PRODUCER_FENCED for another epoch (a zombie: the leader answers its produce
        INVALID_PRODUCER_EPOCH, which every client treats as fatal); CONCURRENT_TRANSACTIONS
        while the transaction is being ended; else per partition NONE when it is in the ongoing
        transaction, INVALID_TXN_STATE when not (Kafka's TRANSACTION_ABORTABLE, which a leader
        answers INVALID_TXN_STATE to clients before transaction version 2)."""
        code = self.ownership(txn_id)
        if code == E.none:
            value = self.txns.get(txn_id)
            if value is None or value.producer_id != producer_id:
                code = E.invalid_producer_id_mapping
            elif value.producer_epoch != producer_epoch:
                code = E.producer_fenced
            elif value.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                code = E.concurrent_transactions
        if code != E.none:
            return {tp: code for tp in partitions}
        return {tp: E.none if self.is_ongoing_with(producer_id, producer_epoch, tp)
                else E.invalid_txn_state for tp in partitions}  # fmt: skip

    def verify_producer(self, producer_id: int, producer_epoch: int,
                        tp: TopicPartition) -> ErrorCode:  # fmt: skip
        """:meth:`verify` for a batch that names no transactional id (a raw request), by its
        producer id among the transactions loaded here."""
        value = self.state.transaction_of(producer_id)
        if value is None:
            return E.invalid_txn_state
        if value.producer_epoch != producer_epoch:
            return E.producer_fenced
        return E.none if self.is_ongoing_with(producer_id, producer_epoch, tp) \
            else E.invalid_txn_state

    # AddPartitionsToTxn / AddOffsetsToTxn -----------------------------------------------------
    async def add_partitions(self, txn_id: str, producer_id: int, producer_epoch: int,
                             partitions: list[TopicPartition]) -> ErrorCode:  # fmt: skip
        code = self.check(txn_id, producer_id, producer_epoch)
        if code != E.none:
            return code
        with self.state.exclusive(txn_id) as mine:
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
            return await self.state.store(txn_id, value)

    # EndTxn -----------------------------------------------------------------------------------
    async def end_txn(self, txn_id: str, producer_id: int, producer_epoch: int,
                      commit: bool) -> ErrorCode:  # fmt: skip
        code = self.check(txn_id, producer_id, producer_epoch)
        if code != E.none:
            return code
        with self.state.exclusive(txn_id) as mine:
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
        code = await self.state.store(txn_id, value)
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
            code = await self.state.store(txn_id, replace(value))
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
                with self.state.exclusive(txn_id) as mine:
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
                with self.state.exclusive(txn_id) as mine:
                    if mine and self.txns.get(txn_id) is value \
                            and await self.state.store(txn_id, None) == E.none:
                        gone.append(txn_id)
        return gone
