"""Producer ids: allocation, and Kafka's rules for who may bump an id's epoch.

Ids come from blocks reserved in the metadata store node ``/latest_producer_id_block``
(``{"next": N}``, as Kafka's ZooKeeper path), so ids are never handed out twice, across
restarts or brokers: the block is reserved (persisted) before any id of it is used.

Who gets which id (Kafka's ``TransactionCoordinator.handleInitProducerId``):

* an idempotent producer (no transactional id) gets a **new id with epoch 0 every time**, whatever
  id and epoch it names: it owns no id on the broker, so naming one proves nothing, and bumping
  a named id would let any client fence any other (idempotent clients bump their epoch locally,
  KIP-360, and ask for a new id only when that is exhausted);
* a transactional id owns one producer id at a time; :func:`init_transactional` says what a
  caller naming ``expected`` (its current id and epoch, InitProducerId v3+) gets: the next epoch
  only with the matching id and current epoch (or a retry of the last bump), a new id when the
  epoch is exhausted, otherwise PRODUCER_FENCED. The transaction coordinator that will keep this
  state per transactional id is a later piece of work; the rule is here so it starts from it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from strom.metadata.store import NoNodeError, SyncMetadataStore
from strom.protocol.errors import ErrorCode

PATH = "/latest_producer_id_block"
BLOCK_SIZE = 1000
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767  # Short.MaxValue: the epoch field is an int16


class ProducerIdManager:
    def __init__(self, store: SyncMetadataStore) -> None:
        self._store = store
        self._next = 0
        self._end = 0

    def _reserve_block(self) -> None:
        try:
            data, version = self._store.get(PATH)
            start = int(json.loads(data)["next"])
            self._store.set(PATH, json.dumps({"next": start + BLOCK_SIZE}).encode(), version)
        except NoNodeError:
            start = 0
            self._store.create(PATH, json.dumps({"next": BLOCK_SIZE}).encode())
        self._next, self._end = start, start + BLOCK_SIZE

    def next_id(self) -> int:
        if self._next >= self._end:
            self._reserve_block()
        pid = self._next
        self._next += 1
        return pid


@dataclass(frozen=True, slots=True)
class ProducerIdAndEpoch:
    producer_id: int
    epoch: int


@dataclass(frozen=True, slots=True)
class TransactionalProducer:
    """What a transactional id owns: its producer id and epoch, and the ones before the last
    change (so a client retrying a bump whose answer it lost gets the same answer again)."""

    producer_id: int
    epoch: int = NO_PRODUCER_EPOCH
    previous_producer_id: int = NO_PRODUCER_ID
    last_epoch: int = NO_PRODUCER_EPOCH

    @property
    def as_pair(self) -> ProducerIdAndEpoch:
        return ProducerIdAndEpoch(self.producer_id, self.epoch)


def epoch_exhausted(epoch: int) -> bool:
    """Kafka keeps the last epoch free for fencing: an epoch ≥ MAX_EPOCH - 1 cannot be bumped."""
    return epoch >= MAX_EPOCH - 1


def init_transactional(
    current: TransactionalProducer,
    expected: ProducerIdAndEpoch | None,
    new_producer_id: Callable[[], int],
) -> TransactionalProducer | ErrorCode:
    """The state after an InitProducerId for a transactional id that owns ``current``, or the
    error to answer (Kafka's ``prepareInitProducerIdTransit`` / ``prepareIncrementProducerEpoch``,
    for a transactional id with no transaction in flight)."""
    if expected is not None and not (
        current.epoch == NO_PRODUCER_EPOCH
        or expected.producer_id == current.producer_id
        or (
            expected.producer_id == current.previous_producer_id
            and epoch_exhausted(expected.epoch)
        )
    ):
        return ErrorCode.producer_fenced
    if epoch_exhausted(current.epoch) and (expected is None or expected.epoch == current.epoch):
        last = current.epoch if expected is not None else NO_PRODUCER_EPOCH
        return TransactionalProducer(new_producer_id(), 0, current.producer_id, last)
    bumped = current.epoch + 1
    if expected is None:
        return TransactionalProducer(current.producer_id, bumped, current.previous_producer_id)
    if current.epoch == NO_PRODUCER_EPOCH or expected.epoch == current.epoch:
        return TransactionalProducer(
            current.producer_id, bumped, current.previous_producer_id, current.epoch
        )
    if expected.epoch == current.last_epoch:  # a retry of the bump we made: same answer
        return current
    return ErrorCode.producer_fenced
