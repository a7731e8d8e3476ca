"""Idempotent-producer state of one partition: per producer id, its epoch and last 5 batches.

Rules (Kafka >= 2.5, KIP-360; Kafka's ``ProducerAppendInfo``, see
:meth:`ProducerStateManager.check`):

* a producer id with no state here (never seen, or forgotten by expiry) is accepted at any
  sequence: its state may have gone with the data, so the sequence cannot be checked;
* a batch from an older epoch → :class:`InvalidProducerEpochError`;
* a newer epoch must start at sequence 0 (else :class:`OutOfOrderSequenceError`);
* same epoch: a batch whose (first, last) sequence equals one of the last 5 is a duplicate and
  is answered with its original offsets; otherwise its first sequence must follow the last one
  (0 when the entry holds no batch yet, e.g. after an epoch bump by a transaction marker).

Expiry (Kafka's ``producer.id.expiration.ms``, :meth:`ProducerStateManager.remove_expired`): a
producer whose newest batch timestamp is at least that old is forgotten, unless it has an open
transaction (a transactional batch not yet followed by its commit/abort marker). Snapshots are
written from the live map, so they no longer carry expired producers; loading a snapshot skips
producers that have expired meanwhile.

Snapshot files ``<offset:020d>.snapshot``: Kafka's binary format, crash-safe writes, each
producer's last batch only (:mod:`strom.storage.producer_snapshot`). State after a snapshot is
rebuilt by replaying batch headers from its offset on; an unreadable snapshot (corrupt, or
strom's older JSON ones) is deleted and an older one, or the whole log, replayed instead.

Transactions: ``txn_first_offset`` (first offset of the producer's open transaction, -1 if
none) gives the partition's first unstable offset (:meth:`first_unstable_offset`, the last
stable offset's bound) and, when an ABORT marker arrives, the aborted range for the
segment's ``.txnindex``; a control batch (marker) ends the transaction. ``coordinator_epoch``
(of the last marker) is kept per producer and in snapshots.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from strom.protocol.record_batch import BatchHeader, increment_sequence
from strom.storage import producer_snapshot
from strom.storage.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from strom.storage.producer_snapshot import SnapshotEntry
from strom.storage.read_path import BULK_CHUNK
from strom.storage.segment import LogSegment

MAX_BATCHES = 5
DEFAULT_EXPIRATION_MS = 86_400_000  # Kafka's producer.id.expiration.ms default (1 day)
SNAPSHOT_SUFFIX = ".snapshot"


@dataclass(frozen=True, slots=True)
class BatchMeta:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    batches: deque[BatchMeta] = field(default_factory=lambda: deque(maxlen=MAX_BATCHES))
    last_timestamp: int = -1
    txn_first_offset: int = -1  # first offset of the open transaction, -1 if none
    coordinator_epoch: int = -1  # of the last transaction marker, -1 if none

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    def copy(self) -> ProducerEntry:
        return ProducerEntry(self.epoch, deque(self.batches, maxlen=MAX_BATCHES),
                             self.last_timestamp, self.txn_first_offset,
                             self.coordinator_epoch)  # fmt: skip

    def to_snapshot(self, pid: int) -> SnapshotEntry:
        last = self.batches[-1] if self.batches else None
        return SnapshotEntry(
            pid, self.epoch,
            last.last_seq if last else -1, last.last_offset if last else -1,
            last.last_offset - last.first_offset if last else 0,
            self.last_timestamp, self.coordinator_epoch, self.txn_first_offset,
        )  # fmt: skip

    @classmethod
    def from_snapshot(cls, e: SnapshotEntry) -> ProducerEntry:
        entry = cls(e.epoch, last_timestamp=e.timestamp, txn_first_offset=e.current_txn_first_offset,
                    coordinator_epoch=e.coordinator_epoch)  # fmt: skip
        if e.last_offset >= 0:
            first_seq = e.last_sequence - e.offset_delta
            if first_seq < 0 <= e.last_sequence:  # the batch wrapped past int32 max
                first_seq += 2**31
            entry.batches.append(BatchMeta(first_seq, e.last_sequence,
                                           e.last_offset - e.offset_delta, e.last_offset))  # fmt: skip
        return entry


ControlHook = Callable[[LogSegment, int, BatchHeader], int | None]  # -> coordinator epoch


class ProducerStateManager:
    """Tracks producers of one partition; :meth:`check` validates, :meth:`update` commits."""

    def __init__(self, dir: Path, expiration_ms: int = DEFAULT_EXPIRATION_MS) -> None:
        self.dir = dir
        self.expiration_ms = expiration_ms
        self.producers: dict[int, ProducerEntry] = {}

    def check(self, header: BatchHeader, pending: dict[int, ProducerEntry]) -> BatchMeta | None:
        """Validate a batch against committed state plus ``pending`` (earlier batches of the
        same append). Returns the duplicate's metadata, or None if the batch is new (and then
        stages it in ``pending``, offsets still unknown: -1). Raises on fencing / sequence
        errors."""
        pid = header.producer_id
        entry = pending.get(pid) or self.producers.get(pid)
        first_seq, last_seq = header.base_sequence, header.last_sequence
        if entry is None:  # no state: accept whatever the sequence (KIP-360)
            entry = ProducerEntry(header.producer_epoch)
        elif header.producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {pid} epoch {header.producer_epoch} is older than {entry.epoch}"
            )
        elif header.producer_epoch > entry.epoch:
            if first_seq > 0:
                raise OutOfOrderSequenceError(
                    f"producer {pid} new epoch {header.producer_epoch} starts at {first_seq}"
                )
            entry = ProducerEntry(header.producer_epoch)
        elif first_seq >= 0:
            for meta in entry.batches:
                if meta.first_seq == first_seq and meta.last_seq == last_seq:
                    if meta.first_offset < 0:  # repeated within this very append
                        raise OutOfOrderSequenceError(f"producer {pid}: sequence {first_seq} twice")
                    return meta
            if first_seq != increment_sequence(entry.last_seq, 1):
                raise OutOfOrderSequenceError(
                    f"producer {pid}: sequence {first_seq} after {entry.last_seq}"
                )
            entry = entry.copy()
        else:
            entry = entry.copy()
        if first_seq >= 0:
            entry.batches.append(BatchMeta(first_seq, last_seq, -1, -1))
        pending[pid] = entry
        return None

    def update(self, header: BatchHeader, pending: dict[int, ProducerEntry] | None = None,
               coordinator_epoch: int | None = None) -> None:  # fmt: skip
        """Record an appended batch (offsets final). Uses the staged entry when given; a
        marker's ``coordinator_epoch`` is kept (DescribeProducers, snapshots)."""
        pid = header.producer_id
        if pid < 0:
            return
        entry = (pending or {}).get(pid) or self.producers.get(pid)
        if entry is None or header.producer_epoch > entry.epoch:
            entry = ProducerEntry(header.producer_epoch)
        if header.base_sequence >= 0:
            meta = BatchMeta(
                header.base_sequence, header.last_sequence, header.base_offset, header.last_offset
            )
            for i, staged in enumerate(entry.batches):  # the placeholder :meth:`check` staged
                if staged.first_offset < 0 and staged.first_seq == meta.first_seq:
                    entry.batches[i] = meta
                    break
            else:
                entry.batches.append(meta)
        entry.last_timestamp = max(entry.last_timestamp, header.max_timestamp)
        if header.is_control:
            entry.txn_first_offset = -1
            if coordinator_epoch is not None:
                entry.coordinator_epoch = coordinator_epoch
        elif header.is_transactional and entry.txn_first_offset < 0:
            entry.txn_first_offset = header.base_offset
        self.producers[pid] = entry

    def first_unstable_offset(self, exclude: int = -1) -> int | None:
        """The first offset of the earliest open transaction (of producers other than
        ``exclude``), or None when no transaction is open."""
        firsts = [e.txn_first_offset for pid, e in self.producers.items()
                  if e.txn_first_offset >= 0 and pid != exclude]  # fmt: skip
        return min(firsts) if firsts else None

    def open_transactions(self) -> dict[int, ProducerEntry]:
        """Producers with an open transaction in this partition."""
        return {pid: e for pid, e in self.producers.items() if e.txn_first_offset >= 0}

    def is_expired(self, entry: ProducerEntry, now_ms: int) -> bool:
        """Idle for ``expiration_ms`` or more (as Kafka, ``>=``) and no open transaction."""
        return entry.txn_first_offset < 0 and now_ms - entry.last_timestamp >= self.expiration_ms

    def remove_expired(self, now_ms: int) -> int:
        """Forget producers that :meth:`is_expired`; returns how many."""
        old = [pid for pid, e in self.producers.items() if self.is_expired(e, now_ms)]
        for pid in old:
            del self.producers[pid]
        return len(old)

    def rebuild(self, segments: Sequence[LogSegment], log_start_offset: int, now_ms: int,
                on_control: ControlHook | None = None, *,
                no_snapshots: bool = False) -> int:  # fmt: skip
        """Load the newest usable snapshot, replay the batch headers after it (or after
        ``log_start_offset`` without one), then drop producers expired at ``now_ms``.

        ``on_control(segment, position, header)`` is called for each replayed control batch
        before it ends its transaction (the log rebuilds ``.txnindex`` entries from it); it
        returns the marker's coordinator epoch. ``no_snapshots``: the caller listed the
        directory and saw none (saves a glob).
        Returns the offset the replay started from."""
        log_end = segments[-1].next_offset
        start = None if no_snapshots else self.load_latest(log_end, now_ms)
        start = log_start_offset if start is None else start
        for seg in segments:
            if seg.next_offset <= start:
                continue
            for pos, header in seg.iter_headers(0, BULK_CHUNK):
                if header.base_offset >= start and header.has_producer_id:
                    epoch = None
                    if header.is_control and on_control is not None:
                        epoch = on_control(seg, pos, header)
                    self.update(header, None, epoch)
        self.remove_expired(now_ms)
        return start

    # --- snapshots -------------------------------------------------------------------------

    def snapshot_offsets(self) -> list[int]:
        out = []
        for path in self.dir.glob(f"*{SNAPSHOT_SUFFIX}"):
            try:
                out.append(int(path.name[: -len(SNAPSHOT_SUFFIX)]))
            except ValueError:
                continue
        return sorted(out)

    def _path(self, offset: int) -> Path:
        return self.dir / f"{offset:020d}{SNAPSHOT_SUFFIX}"

    def take_snapshot(self, offset: int, keep: int = 2, *, sync: bool = True) -> None:
        """Write the state as of log end offset ``offset`` (crash-safe, Kafka's format); keep
        the newest ``keep`` files. ``sync=False``: the caller syncs the file system after."""
        self.write_snapshot(offset, self.snapshot_entries(), keep, sync=sync)

    def snapshot_entries(self) -> list[SnapshotEntry]:
        """The state now, as snapshot entries: a copy taken on the log's thread, written later
        by :meth:`write_snapshot` (on the flusher thread at a roll)."""
        return [e.to_snapshot(pid) for pid, e in self.producers.items()]

    def write_snapshot(self, offset: int, entries: list[SnapshotEntry], keep: int = 2, *,
                       sync: bool = True) -> None:  # fmt: skip
        """Write ``entries`` as the snapshot at ``offset`` (crash-safe, Kafka's format; no
        fsync with ``sync=False``); keep the newest ``keep`` files."""
        producer_snapshot.write(self._path(offset), entries, sync=sync)
        for old in self.snapshot_offsets()[:-keep]:
            self._path(old).unlink(missing_ok=True)

    def load_latest(self, max_offset: int, now_ms: int) -> int | None:
        """Load the newest readable snapshot at or below ``max_offset``; delete those above
        and unreadable ones. Producers expired at ``now_ms`` are left out.

        Returns the snapshot's offset (replay from there) or None (replay everything).
        """
        self.producers = {}
        for offset in reversed(self.snapshot_offsets()):
            path = self._path(offset)
            if offset > max_offset:
                path.unlink(missing_ok=True)
                continue
            try:
                entries = producer_snapshot.read(path)
            except (OSError, ValueError):
                path.unlink(missing_ok=True)
                continue
            for e in entries:
                entry = ProducerEntry.from_snapshot(e)
                if not self.is_expired(entry, now_ms):
                    self.producers[e.producer_id] = entry
            return offset
        return None

    def delete_snapshots(self) -> None:
        for offset in self.snapshot_offsets():
            self._path(offset).unlink(missing_ok=True)
