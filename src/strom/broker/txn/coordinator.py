"""The transaction coordinator: Kafka's ``TransactionCoordinator`` as a state machine.

Sans-IO. Ports injected: a clock, ``append(partition, key, value)`` (writes one record to
``__transaction_state`` synchronously, raises if it cannot), ``write_markers(markers)`` (the
one path for transaction markers, shaped like a WriteTxnMarkers request so a cluster can send
it to other brokers; :class:`TxnMarker`) and ``allocate_producer_id()``. Every state change is
appended *before* memory changes and before the answer; :meth:`replay` rebuilds the state
from those records at start-up, and :meth:`finish_loading` completes transactions caught
between PrepareCommit/PrepareAbort and Complete* by a crash (their markers are written again:
a marker for a transaction already ended in a partition changes nothing there).

States (Kafka's): Empty → Ongoing (AddPartitions/AddOffsets) → PrepareCommit|PrepareAbort
(EndTxn; then markers) → CompleteCommit|CompleteAbort → Ongoing … A single node writes
markers synchronously, so Prepare* lasts one request unless a marker cannot be written.

Fencing: InitProducerId with a transactional id bumps the epoch (a new id when the epoch
would overflow; Kafka's rule in :func:`strom.broker.producer_ids.init_transactional`) and aborts
an ongoing transaction with the new epoch, so markers and the new
epoch fence the previous instance: its requests get PRODUCER_FENCED, its produce requests
INVALID_PRODUCER_EPOCH from the partitions. A transaction older than its
``transaction.timeout.ms`` is aborted the same way (:meth:`abort_timed_out`), epoch bumped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

from strom.broker.producer_ids import (
    ProducerIdAndEpoch,
    TransactionalProducer,
    init_transactional,
)
from strom.broker.txn.records import TopicPartition, TxnState, TxnValue, encode_key, encode_value
from strom.broker.txn.records import partition_for as _partition_for
from strom.clock import Clock
from strom.protocol.errors import ErrorCode

log = logging.getLogger(__name__)
E = ErrorCode
MAX_EPOCH = 32767
COORDINATOR_EPOCH = 0  # the single node leads __transaction_state in leader epoch 0
_PREPARING = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT, TxnState.PREPARE_EPOCH_FENCE)


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


AppendFn = Callable[[int, bytes, bytes | None], None]
MarkersFn = Callable[[list[TxnMarker]], dict[TopicPartition, ErrorCode]]


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
        self.loading = True
        # the partitions of __transaction_state this coordinator leads and loaded; None: all
        self.owned: set[int] | None = None

    def not_here(self, txn_id: str) -> ErrorCode | None:
        """COORDINATOR_LOAD_IN_PROGRESS while loading, NOT_COORDINATOR for an id of a
        partition this coordinator does not own, else None."""
        if self.loading:
            return E.coordinator_load_in_progress
        if self.owned is not None and self.partition_for(txn_id) not in self.owned:
            return E.not_coordinator
        return None

    # persistence ------------------------------------------------------------------------------
    def partition_for(self, transactional_id: str) -> int:
        return _partition_for(transactional_id, self.config.partitions)

    def _store(self, txn_id: str, value: TxnValue) -> None:
        """Persist, then apply. Raises what ``append`` raises (memory is left unchanged)."""
        value.last_update_ms = self.clock.time_ms()
        self._append(self.partition_for(txn_id), encode_key(txn_id), encode_value(value))
        self.txns[txn_id] = value
        self._pid_index = None

    def replay(self, txn_id: str, value: TxnValue | None) -> None:
        """Apply one record of ``__transaction_state`` (in log order) while loading."""
        if value is None:
            self.txns.pop(txn_id, None)
        else:
            self.txns[txn_id] = value
        self._pid_index = None

    def finish_loading(self, partition: int | None = None) -> None:
        """Complete the transactions a crash left between Prepare* and Complete* (of
        ``partition`` only when given, which this coordinator then owns)."""
        self.loading = False
        if partition is not None and self.owned is not None:
            self.owned.add(partition)
        for txn_id, value in list(self.txns.items()):
            if partition is not None and self.partition_for(txn_id) != partition:
                continue
            if value.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                log.info("completing transaction %s (%s) left by a restart", txn_id, value.state.name)
                self._complete(txn_id, value, value.state is TxnState.PREPARE_COMMIT)
        if partition is None:
            log.info("transaction coordinator loaded %d transactional ids", len(self.txns))

    def unload_partition(self, partition: int) -> None:
        """This broker stopped leading ``partition``: forget its transactional ids (the new
        leader loads them from the log)."""
        if self.owned is not None:
            self.owned.discard(partition)
        gone = [t for t in self.txns if self.partition_for(t) == partition]
        for txn_id in gone:
            del self.txns[txn_id]
        self._pid_index = None
        if gone:
            log.info("transaction coordinator unloaded %d ids of partition %d", len(gone), partition)

    # InitProducerId ---------------------------------------------------------------------------
    def init_producer_id(self, txn_id: str, timeout_ms: int,
                         expected: ProducerIdAndEpoch | None = None) -> tuple[ErrorCode, int, int]:  # fmt: skip
        """(error, producer id, epoch) for a transactional producer; ``expected`` is the id and
        epoch the caller has (v3+). Who may bump: :func:`strom.broker.producer_ids.init_transactional`."""
        if not txn_id:
            return E.invalid_request, -1, -1
        if (code := self.not_here(txn_id)) is not None:
            return code, -1, -1
        if timeout_ms <= 0 or timeout_ms > self.config.max_timeout_ms:
            return E.invalid_transaction_timeout, -1, -1
        current = self.txns.get(txn_id)
        if current is None:
            value = TxnValue(self._allocate(), 0, timeout_ms, TxnState.EMPTY)
            return self._store_answer(txn_id, value)
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
            code = self._end(txn_id, fence, commit=False)
            if code != E.none:
                return code, -1, -1
            current = self.txns[txn_id]
        value = replace(current, producer_id=result.producer_id, producer_epoch=result.epoch,
                        previous_producer_id=result.previous_producer_id,
                        last_epoch=result.last_epoch, timeout_ms=timeout_ms,
                        state=TxnState.EMPTY, partitions=set(), start_ms=-1)  # fmt: skip
        if current.state is TxnState.COMPLETE_ABORT and current.producer_id == value.producer_id \
                and current.producer_epoch == value.producer_epoch:
            value.state = TxnState.COMPLETE_ABORT  # just aborted under this very epoch
        return self._store_answer(txn_id, value)

    def _store_answer(self, txn_id: str, value: TxnValue) -> tuple[ErrorCode, int, int]:
        try:
            self._store(txn_id, value)
        except Exception as exc:
            log.warning("transactional id %s: storing state failed: %s", txn_id, exc)
            return E.coordinator_not_available, -1, -1
        return E.none, value.producer_id, value.producer_epoch

    # checks shared by the transactional requests -----------------------------------------------
    def check(self, txn_id: str, producer_id: int, producer_epoch: int) -> ErrorCode:
        """The error a request of (``producer_id``, ``producer_epoch``) for ``txn_id`` gets,
        or NONE when it is the current instance."""
        if (code := self.not_here(txn_id)) is not None:
            return code
        value = self.txns.get(txn_id)
        if value is None or value.producer_id != producer_id:
            return E.invalid_producer_id_mapping
        if value.producer_epoch != producer_epoch:
            return E.producer_fenced
        if value.state in _PREPARING:
            return E.concurrent_transactions
        return E.none

    def is_ongoing_with(self, producer_id: int, producer_epoch: int, tp: TopicPartition) -> bool:
        """True when ``tp`` is in the ongoing transaction of that producer (epoch): what a
        transactional produce or TxnOffsetCommit must be part of (KIP-890's verification)."""
        value = self._by_pid.get(producer_id)
        return (value is not None and value.producer_epoch == producer_epoch
                and value.state is TxnState.ONGOING and tp in value.partitions)  # fmt: skip

    @property
    def _by_pid(self) -> dict[int, TxnValue]:
        """Transactions by producer id (rebuilt when the transactions changed)."""
        if self._pid_index is None:
            self._pid_index = {v.producer_id: v for v in self.txns.values()}
        return self._pid_index

    # AddPartitionsToTxn / AddOffsetsToTxn -----------------------------------------------------
    def add_partitions(self, txn_id: str, producer_id: int, producer_epoch: int,
                       partitions: list[TopicPartition]) -> ErrorCode:  # fmt: skip
        code = self.check(txn_id, producer_id, producer_epoch)
        if code != E.none:
            return code
        current = self.txns[txn_id]
        if current.state is TxnState.ONGOING and current.partitions.issuperset(partitions):
            return E.none
        value = replace(current, partitions=set(current.partitions))
        if value.state is not TxnState.ONGOING:
            value.state = TxnState.ONGOING
            value.partitions = set()
            value.start_ms = self.clock.time_ms()
        value.partitions.update(partitions)
        return self._store_answer(txn_id, value)[0]

    # EndTxn -----------------------------------------------------------------------------------
    def end_txn(self, txn_id: str, producer_id: int, producer_epoch: int,
                commit: bool) -> ErrorCode:  # fmt: skip
        code = self.check(txn_id, producer_id, producer_epoch)
        if code != E.none:
            return code
        current = self.txns[txn_id]
        if current.state is TxnState.COMPLETE_COMMIT:  # a retry of the same EndTxn
            return E.none if commit else E.invalid_txn_state
        if current.state is TxnState.COMPLETE_ABORT:
            return E.invalid_txn_state if commit else E.none
        if current.state is not TxnState.ONGOING:
            return E.invalid_txn_state
        return self._end(txn_id, replace(current, partitions=set(current.partitions)), commit)

    def _end(self, txn_id: str, value: TxnValue, commit: bool) -> ErrorCode:
        """Prepare (persisted), write the markers, complete (persisted)."""
        value.state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        try:
            self._store(txn_id, value)
        except Exception as exc:
            log.warning("transactional id %s: storing %s failed: %s", txn_id, value.state, exc)
            return E.coordinator_not_available
        return self._complete(txn_id, replace(value, partitions=set(value.partitions)), commit)

    def _complete(self, txn_id: str, value: TxnValue, commit: bool) -> ErrorCode:
        marker = TxnMarker(value.producer_id, value.producer_epoch, commit, COORDINATOR_EPOCH,
                           tuple(sorted(value.partitions)))  # fmt: skip
        failed = {tp: c for tp, c in self._write_markers([marker]).items()
                  if c not in (E.none, E.unknown_topic_or_partition)}  # fmt: skip
        if failed:  # stays Prepare*: completed by a later retry or at the next start
            log.warning("transactional id %s: markers failed: %s", txn_id, failed)
            return E.coordinator_not_available
        value.state = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        value.partitions = set()
        try:
            self._store(txn_id, value)
        except Exception as exc:
            log.warning("transactional id %s: storing completion failed: %s", txn_id, exc)
        return E.none

    # timers -------------------------------------------------------------------------------------
    def abort_timed_out(self) -> list[str]:
        """Abort (epoch bumped, fencing the producer) every ongoing transaction older than its
        timeout; returns their ids."""
        now = self.clock.time_ms()
        done = []
        for txn_id, value in list(self.txns.items()):
            if value.state is TxnState.ONGOING and now - value.start_ms > value.timeout_ms:
                bumped = replace(value, partitions=set(value.partitions))
                if bumped.producer_epoch < MAX_EPOCH - 1:
                    bumped.producer_epoch += 1
                log.info("transactional id %s: aborting a transaction open for %d ms",
                         txn_id, now - value.start_ms)  # fmt: skip
                if self._end(txn_id, bumped, commit=False) == E.none:
                    done.append(txn_id)
        return done

    def expire_ids(self) -> list[str]:
        """Forget transactional ids idle for ``transactional.id.expiration.ms`` (tombstones)."""
        now = self.clock.time_ms()
        gone = []
        for txn_id, value in list(self.txns.items()):
            idle = value.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT,
                                   TxnState.COMPLETE_ABORT)  # fmt: skip
            if idle and now - value.last_update_ms >= self.config.id_expiration_ms:
                try:
                    self._append(self.partition_for(txn_id), encode_key(txn_id), None)
                except Exception as exc:
                    log.warning("transactional id %s: expiring failed: %s", txn_id, exc)
                    continue
                del self.txns[txn_id]
                self._pid_index = None
                gone.append(txn_id)
        return gone
