"""The transaction coordinator's state: Kafka's ``TransactionStateManager``.

It holds the transactions of the ``__transaction_state`` partitions this broker loaded, which
partitions those are (and with which coordinator epoch), which are still loading, and writes
every change to the log before memory changes (:meth:`store`). The request-facing state machine
(:class:`strom.broker.txn.coordinator.TransactionCoordinator`) decides *what* changes; this
module owns *where* it is kept and whether this broker may keep it.

Ports injected: a clock and ``append(partition, key, value)`` (awaits one record of
``__transaction_state`` written and replicated — acks=all, done at the high watermark — and
raises :class:`KafkaError` if it cannot).

Invariants: a transactional id is in :attr:`txns` only while its partition is in :attr:`owned`;
a partition is never both in :attr:`owned` and :attr:`loading_partitions`; a store begun under
one load of a partition and finished after it was unloaded or reloaded leaves memory unchanged
and answers NOT_COORDINATOR.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass

from strom.broker.txn.records import TopicPartition, TxnState, TxnValue, encode_key, encode_value
from strom.broker.txn.records import partition_for as _partition_for
from strom.clock import Clock
from strom.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)
E = ErrorCode
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
class TxnConfig:
    partitions: int = 50  # transaction.state.log.num.partitions
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms


AppendFn = Callable[[int, bytes, bytes | None], Awaitable[None]]


class TransactionStateManager:
    def __init__(self, config: TxnConfig, clock: Clock, append: AppendFn) -> None:
        self.config = config
        self.clock = clock
        self._append = append
        self.txns: dict[str, TxnValue] = {}
        self._pid_index: dict[int, TxnValue] | None = None
        self.owned: dict[int, int] = {}  # loaded partition -> coordinator epoch
        self.loading_partitions: dict[int, int] = {}  # partition -> epoch being loaded
        self._busy: set[str] = set()  # ids with a request in flight

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

    def begin_load(self, partition: int, epoch: int) -> list[str]:
        """This broker leads ``partition`` in ``epoch``: its ids wait for :meth:`finish_load`.
        Returns the ids forgotten (those of a previous load)."""
        self.owned.pop(partition, None)
        self.loading_partitions[partition] = epoch
        return self.drop(partition)

    def finish_load(self, partition: int, epoch: int,
                    records: Iterable[tuple[str, TxnValue | None]]) -> dict[str, TxnValue] | None:  # fmt: skip
        """Apply ``partition``'s records (log order), serve its ids and return them; None when
        the load was superseded meanwhile (another epoch, or unloaded): nothing changes then."""
        if self.loading_partitions.get(partition) != epoch:
            return None
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
        return loaded

    def unload(self, partition: int) -> list[str]:
        """This broker no longer leads ``partition``: forget its ids (returned)."""
        self.loading_partitions.pop(partition, None)
        self.owned.pop(partition, None)
        return self.drop(partition)

    def drop(self, partition: int) -> list[str]:
        """Forget the ids of ``partition``; returns them."""
        dropped = [t for t in self.txns if self.partition_for(t) == partition]
        for txn_id in dropped:
            del self.txns[txn_id]
        self._pid_index = None
        return dropped

    # persistence ------------------------------------------------------------------------------
    async def store(self, txn_id: str, value: TxnValue | None) -> ErrorCode:
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

    def busy(self, txn_id: str) -> bool:
        """A request for ``txn_id`` is in flight (inside :meth:`exclusive`)."""
        return txn_id in self._busy

    @contextlib.contextmanager
    def exclusive(self, txn_id: str) -> Iterator[bool]:
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

    # lookups by producer id ---------------------------------------------------------------------
    def is_ongoing_with(self, producer_id: int, producer_epoch: int, tp: TopicPartition) -> bool:
        """True when ``tp`` is in the ongoing transaction of that producer (epoch): what a
        transactional produce or TxnOffsetCommit must be part of (KIP-890's verification)."""
        value = self._by_pid.get(producer_id)
        return (value is not None and value.producer_epoch == producer_epoch
                and value.state is TxnState.ONGOING and tp in value.partitions)  # fmt: skip

    def knows_producer(self, producer_id: int) -> bool:
        return producer_id in self._by_pid

    def transaction_of(self, producer_id: int) -> TxnValue | None:
        """The transaction (of the transactional id) that owns ``producer_id`` now, if any."""
        return self._by_pid.get(producer_id)

    @property
    def _by_pid(self) -> dict[int, TxnValue]:
        """Transactions by producer id (rebuilt when the transactions changed)."""
        if self._pid_index is None:
            self._pid_index = {v.producer_id: v for v in self.txns.values()}
        return self._pid_index
