"""Producer ids: allocation, and Kafka's rules for who may bump an id's epoch.

Ids come from blocks of 1000 reserved in the metadata store node ``/latest_producer_id_block``
(Kafka's document ``{"version": 1, "broker": 1, "block_start": "1000", "block_end": "1999"}``,
written by a conditional set), so ids are never handed out twice, across restarts or brokers:
the block is reserved (persisted) before any id of it is used.

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

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass

from strom.metadata.store import BadVersionError, MetadataStore, NodeExistsError, NoNodeError
from strom.metadata.zk_model import PRODUCER_ID_BLOCK_PATH
from strom.protocol.errors import ErrorCode

PATH = PRODUCER_ID_BLOCK_PATH
BLOCK_SIZE = 1000
PREFETCH_AT = 0.9  # the next block is reserved once this share of the current one is used
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767  # Short.MaxValue: the epoch field is an int16
log = logging.getLogger(__name__)


def block_document(broker_id: int, start: int) -> bytes:
    """Kafka's ``ProducerIdBlockZNode`` (version 1): the last block reserved, ends inclusive."""
    return json.dumps({"version": 1, "broker": broker_id, "block_start": str(start),
                       "block_end": str(start + BLOCK_SIZE - 1)}).encode()  # fmt: skip


def next_block_start(data: bytes) -> int:
    """Where the block after the one ``data`` records starts (strom's older ``{"next": N}``
    is read too)."""
    doc = json.loads(data)
    if "block_end" in doc:
        return int(doc["block_end"]) + 1
    return int(doc["next"])


class ProducerIdManager:
    """Hands out producer ids from blocks of :data:`BLOCK_SIZE` reserved in the store.

    :meth:`next_id` is synchronous (the transaction coordinator calls it in its state
    machine): it serves the current block and, once :data:`PREFETCH_AT` of it is used, reserves
    the next one in the background (Kafka's ``ProducerIdManager`` does the same). Callers that
    can wait (InitProducerId) ``await`` :meth:`ensure_available` first, so they never meet an
    empty block. A reservation is a conditional write, retried on BadVersion / NodeExists, so
    two brokers never get the same block.
    """

    def __init__(self, store: MetadataStore, broker_id: int = 0) -> None:
        self._store = store
        self._broker_id = broker_id
        self._next = 0
        self._end = 0
        self._prefetched: tuple[int, int] | None = None
        self._reserving: asyncio.Task[tuple[int, int]] | None = None

    async def _reserve_block(self) -> tuple[int, int]:
        for _attempt in range(100):
            try:
                data, stat = await self._store.get(PATH)
            except NoNodeError:
                try:
                    await self._store.create(PATH, block_document(self._broker_id, 0))
                except NodeExistsError:
                    continue
                return 0, BLOCK_SIZE
            start = next_block_start(data)
            try:
                await self._store.set(PATH, block_document(self._broker_id, start), stat.version)
            except BadVersionError:
                continue  # another broker took it: read again
            log.info("producer id block %d-%d reserved", start, start + BLOCK_SIZE - 1)
            return start, start + BLOCK_SIZE
        raise RuntimeError("could not reserve a producer id block: too much contention")

    def _start_reserving(self) -> asyncio.Task[tuple[int, int]]:
        if self._reserving is None:
            self._reserving = asyncio.get_running_loop().create_task(self._reserve_block())
            self._reserving.add_done_callback(self._reserved)
        return self._reserving

    def _reserved(self, task: asyncio.Task[tuple[int, int]]) -> None:
        self._reserving = None
        if not task.cancelled() and task.exception() is None:
            self._prefetched = task.result()
        elif not task.cancelled():
            log.warning("producer id block could not be reserved: %s", task.exception())

    async def ensure_available(self) -> None:
        """Return once :meth:`next_id` has an id to give (reserving a block if needed)."""
        while self._next >= self._end and self._prefetched is None:
            await asyncio.shield(self._start_reserving())

    def next_id(self) -> int:
        """The next id; raises RuntimeError if no block is reserved yet (retriable)."""
        if self._next >= self._end:
            if self._prefetched is None:
                with contextlib.suppress(RuntimeError):  # no running loop: nothing to start
                    self._start_reserving()
                raise RuntimeError("no producer id block reserved yet")
            (self._next, self._end), self._prefetched = self._prefetched, None
        pid = self._next
        self._next += 1
        used = self._next - (self._end - BLOCK_SIZE)
        if used >= PREFETCH_AT * BLOCK_SIZE and self._prefetched is None:
            with contextlib.suppress(RuntimeError):
                self._start_reserving()
        return pid

    async def close(self) -> None:
        if self._reserving is not None:
            self._reserving.cancel()
            with contextlib.suppress(BaseException):
                await self._reserving


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
