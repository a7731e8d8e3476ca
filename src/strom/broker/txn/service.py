"""The transaction coordinator as a broker service: ``__transaction_state``, markers, timers.

``__transaction_state`` is created by the first FindCoordinator of a transactional id
(:mod:`strom.broker.internal_topics`), not here. The coordinator serves the transactional ids
of the partitions this broker leads: when it becomes a partition's leader (the replica
manager's leadership listener, and at start-up for the partitions already led) the partition
is replayed into the coordinator, then transactions a crash left in PrepareCommit/PrepareAbort
are completed; when it stops leading it, that partition's ids are dropped (NOT_COORDINATOR
for their requests here). The group coordinator's listener runs first (its service starts
first), so markers reaching ``__consumer_offsets`` publish or drop transactional offsets. Ongoing transactions found at start-up keep running; the timeout sweep
(``transaction.abort.timed.out.transaction.cleanup.interval.ms``) aborts them if their producer
does not come back.

Markers are written by :func:`write_txn_markers` only, shaped like a WriteTxnMarkers request
(a cluster turns the remote part into that request).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from strom.broker import internal_topics
from strom.broker.broker import Service, register_service
from strom.broker.group.service import EXTENSION as GROUP_EXTENSION
from strom.broker.group.service import OFFSETS_TOPIC, GroupService
from strom.broker.txn import records as rec
from strom.broker.txn.coordinator import TransactionCoordinator, TxnConfig, TxnMarker
from strom.protocol import record_batch as rb
from strom.protocol.control import build_marker
from strom.protocol.errors import ErrorCode, KafkaError, error_code_of
from strom.storage.batch_validation import AppendOrigin

if TYPE_CHECKING:
    from strom.broker.broker import Broker

log = logging.getLogger(__name__)
TXN_TOPIC = internal_topics.TXN_TOPIC
EXTENSION = "txn_coordinator"
TopicPartition = tuple[str, int]


def write_txn_markers(broker: Broker, markers: list[TxnMarker]) -> dict[TopicPartition, ErrorCode]:
    """Append each marker's control batch to each of its partitions (the WriteTxnMarkers
    request of a single node). A marker reaching ``__consumer_offsets`` also completes the
    producer's transactional offsets in the group coordinator."""
    out: dict[TopicPartition, ErrorCode] = {}
    now = broker.clock.time_ms()
    for m in markers:
        batch = build_marker(m.producer_id, m.producer_epoch, commit=m.commit,
                             coordinator_epoch=m.coordinator_epoch, timestamp_ms=now)  # fmt: skip
        for topic, partition in m.partitions:
            try:
                broker.replicas.append(topic, partition, batch, AppendOrigin.COORDINATOR)
            except Exception as exc:
                out[(topic, partition)] = error_code_of(exc)
                log.warning("marker for producer %d to %s-%d failed: %s",
                            m.producer_id, topic, partition, exc)  # fmt: skip
                continue
            out[(topic, partition)] = ErrorCode.none
            if topic == OFFSETS_TOPIC:
                group = broker.extensions.get(GROUP_EXTENSION)
                if isinstance(group, GroupService) and group.coordinator is not None:
                    group.coordinator.complete_txn(m.producer_id, m.commit)
    return out


class TxnService(Service):
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.coordinator: TransactionCoordinator | None = None

    async def start(self) -> None:
        broker = self.broker
        cfg = broker.config
        partitions = internal_topics.partition_count(broker, TXN_TOPIC)
        config = TxnConfig(
            partitions=partitions,
            max_timeout_ms=cfg.get_int("transaction.max.timeout.ms"),
            id_expiration_ms=cfg.get_int("transactional.id.expiration.ms"),
        )
        self.coordinator = TransactionCoordinator(
            config, broker.clock, self._append,
            lambda markers: write_txn_markers(broker, markers), broker.producer_ids.next_id,
        )  # fmt: skip
        self.coordinator.owned = set()
        broker.extensions[EXTENSION] = self
        broker.replicas.on_leadership(self._leadership)
        loaded = 0
        for partition in range(partitions):
            part = broker.replicas.partitions.get((TXN_TOPIC, partition))
            if part is not None and part.is_leader:
                self._load(partition)
                loaded += 1
        self.coordinator.loading = False
        log.info("transaction coordinator: loaded %d partitions of %s, %d ids", loaded,
                 TXN_TOPIC, len(self.coordinator.txns))  # fmt: skip
        abort_ms = cfg.get_int("transaction.abort.timed.out.transaction.cleanup.interval.ms")
        broker.every(max(abort_ms, 10) / 1000.0, self._abort_timed_out)
        expire_ms = cfg.get_int("transaction.remove.expired.transaction.cleanup.interval.ms")
        broker.every(max(expire_ms, 100) / 1000.0, self._expire_ids)

    def _abort_timed_out(self) -> None:
        if self.coordinator is not None:
            self.coordinator.abort_timed_out()

    def _expire_ids(self) -> None:
        if self.coordinator is not None:
            self.coordinator.expire_ids()

    def _leadership(self, topic: str, partition: int, leading: bool) -> None:
        coord = self.coordinator
        if topic != TXN_TOPIC or coord is None or partition >= coord.config.partitions:
            return
        if leading:
            self._load(partition)
        else:
            coord.unload_partition(partition)

    def _load(self, partition: int) -> None:
        """Replay ``partition`` of ``__transaction_state`` (this broker now leads it)."""
        coord = self.coordinator
        assert coord is not None
        count = 0
        coord.loading = True
        log_ = self.broker.logs.get(TXN_TOPIC, partition)
        if log_ is not None:
            offset = log_.log_start_offset
            while offset < log_.log_end_offset:
                data = log_.read(offset, 1 << 20).records
                if not data:
                    break
                for header, batch in rb.iter_batches(data):
                    if header.next_offset <= offset:
                        continue
                    if not header.is_control:
                        for record in rb.decode_records(batch):
                            if record.offset < offset or record.key is None:
                                continue
                            try:
                                value = None if record.value is None else rec.decode_value(record.value)
                                coord.replay(rec.decode_key(record.key), value)
                                count += 1
                            except ValueError as exc:
                                log.warning("%s-%d offset %d: skipping record: %s",
                                            TXN_TOPIC, partition, record.offset, exc)  # fmt: skip
                    offset = header.next_offset
        log.debug("replayed %d records of %s-%d", count, TXN_TOPIC, partition)
        coord.finish_loading(partition)

    def _append(self, partition: int, key: bytes, value: bytes | None) -> None:
        batch = rb.build_batch([(key, value, [], self.broker.clock.time_ms())])
        self.broker.replicas.append(TXN_TOPIC, partition, batch, AppendOrigin.COORDINATOR)


register_service(TxnService)


def txn_coordinator_of(broker: Broker) -> TransactionCoordinator:
    service = broker.extensions.get(EXTENSION)
    if not isinstance(service, TxnService) or service.coordinator is None:
        raise KafkaError(ErrorCode.coordinator_not_available, "transaction coordinator not started")
    return service.coordinator
