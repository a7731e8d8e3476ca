"""A partition's log: an ordered list of segments plus its checkpoints and producer state.

Directory ``<data_dir>/<topic>-<partition>/`` holds ``<base:020d>.log/.index/.timeindex``
segments (:mod:`strom.storage.segment`; ``.txnindex`` aborted transactions,
:mod:`strom.storage.txn_index`), ``<offset:020d>.snapshot`` producer-state snapshots
(:mod:`strom.storage.producer_state`), the leader-epoch cache ``leader-epoch-checkpoint``
(:mod:`strom.storage.leader_epoch`), the checkpoints and the clean-shutdown marker
(:mod:`strom.storage.checkpoint`). Opening and crash recovery: :mod:`strom.storage.log_recovery`;
swaps of compacted segments: :mod:`strom.storage.segment_swap`; timestamp lookups:
:mod:`strom.storage.log_timestamps`.

Invariants: segments' offset ranges are disjoint and ascending; only the last (active) segment
is written; ``log_start_offset <= last_stable_offset <= high_watermark <= log_end_offset``;
an ``append`` either writes all its batches or none (everything is validated before the first
write). The last stable offset is the first offset of the earliest open transaction (producer
state), capped by the high watermark; read_committed readers stop there.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, NoReturn

from strom.clock import Clock
from strom.protocol import record_batch as rb
from strom.protocol.control import Marker, parse_marker
from strom.storage import checkpoint as ckpt
from strom.storage import log_timestamps, read_path, segment_swap
from strom.storage.batch_validation import AppendOrigin, validate_records, validate_shape
from strom.storage.deferred_delete import DeferredDeleter
from strom.storage.errors import (
    CorruptRecordError,
    DiskError,
    InvalidRecordError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
)
from strom.storage.flusher import INLINE, Flusher
from strom.storage.leader_epoch import LeaderEpochCache
from strom.storage.log_config import LogConfig
from strom.storage.log_dir_failures import LogDirFailures
from strom.storage.log_recovery import load_log_dir
from strom.storage.producer_state import (
    DEFAULT_EXPIRATION_MS,
    ProducerEntry,
    ProducerStateManager,
)
from strom.storage.read_path import SegmentSlice
from strom.storage.retention import segments_past_retention
from strom.storage.segment import LogSegment
from strom.storage.slow_disk import SLOW_FSYNC_S, SLOW_WRITE_S, DiskSpeed, WriterPool
from strom.storage.txn_index import AbortedTxn

logger = logging.getLogger(__name__)
_SNAPSHOT_MIN_BYTES = 1 << 20


def _marker(batch: bytes | bytearray | memoryview) -> Marker | None:
    """The transaction marker of a control batch (None if it holds another control record or
    cannot be read: validation has already accepted the batch's shape)."""
    try:
        return parse_marker(batch)
    except rb.CorruptRecordError:
        return None


_INT32_MAX = 2**31 - 1
# record_batch names read on every append, bound once (a module attribute lookup less each)
_LOG_OVERHEAD, _CONTROL_BIT = rb.LOG_OVERHEAD, rb.CONTROL_BIT
_HEADER_SIZE, _MAGIC, _MIN_BATCH_LENGTH = rb.HEADER_SIZE, rb.MAGIC, rb.MIN_BATCH_LENGTH
_LOG_APPEND_TIME, _TIMESTAMP_TYPE_BIT = rb.LOG_APPEND_TIME, rb.TIMESTAMP_TYPE_BIT
_parse_header, _pack_header = rb.parse_header, rb.HEADER_STRUCT.pack
_Buffer = bytes | bytearray | memoryview
_new_header = tuple.__new__  # a NamedTuple from a plain tuple, without keyword handling
_new_result = tuple.__new__
_perf = time.perf_counter


class AppendResult(NamedTuple):
    """What an append did. A NamedTuple, not a frozen dataclass: it is built once per Produce
    request, and a frozen dataclass's ``__init__`` (one ``object.__setattr__`` per field)
    cost about 2 us of the ~50 a request takes."""

    base_offset: int
    last_offset: int
    log_append_time: int  # -1 for CreateTime
    log_start_offset: int
    record_count: int
    duplicate: bool = False
    value_bytes: int = 0  # the records' value lengths summed (CLIENT/COORDINATOR appends)
    # set when this append triggered a flush.messages flush: done once it is on disk (a
    # response with acks must wait for it); None when nothing needs waiting for
    flushed: Future[None] | None = None


class PendingAppend:
    """Batches a writer thread is writing (:meth:`Log.append` with ``writer``): the write's
    ``future``, and what the log needs to make them part of itself once they are written
    (:meth:`finish`, on the log's own thread, once: later calls repeat its outcome)."""

    __slots__ = ("log", "future", "segment", "batches", "producers", "was_empty", "was_clean",
                 "value_bytes", "append_time", "_outcome")  # fmt: skip

    def __init__(self, log: Log, future: Future[None], segment: LogSegment,
                 batches: list[tuple[rb.BatchHeader, _Buffer, int]],
                 producers: dict[int, ProducerEntry], was_empty: bool, was_clean: bool,
                 value_bytes: int, append_time: int) -> None:  # fmt: skip
        self.log = log
        self.future = future
        self.segment = segment
        #: (header as written with its offsets final, the batch's bytes, its position)
        self.batches = batches
        self.producers = producers  # what ProducerStateManager.check staged for them
        self.was_empty = was_empty
        self.was_clean = was_clean
        self.value_bytes = value_bytes
        self.append_time = append_time
        self._outcome: AppendResult | BaseException | None = None

    def finish(self) -> AppendResult:
        """(the log's thread) Wait for the write if it is not done, then make the batch part
        of the log: the append's result (``flushed`` set when it triggered a flush.messages
        flush), or its error raised (a :class:`DiskError`: the write failed and was cut off,
        KAFKA_STORAGE_ERROR)."""
        if self._outcome is None:
            try:
                self._outcome = self.log._finish(self)
            except Exception as exc:
                self._outcome = exc
        if isinstance(self._outcome, BaseException):
            raise self._outcome
        return self._outcome


@dataclass(frozen=True, slots=True)
class ReadResult:
    records: bytes  # whole batches, possibly empty
    first_offset: int  # base offset of the first batch (may be < the requested offset)
    high_watermark: int
    log_start_offset: int
    log_end_offset: int


class Log:
    """One partition's log. Create with :meth:`Log.open`."""

    def __init__(self, dir: Path, config: LogConfig, clock: Clock,
                 producer_id_expiration_ms: int = DEFAULT_EXPIRATION_MS,
                 flusher: Flusher = INLINE) -> None:  # fmt: skip
        self.dir = dir
        self.config = config
        self.clock = clock
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self.log_start_offset = 0
        self._high_watermark = 0
        self.recovery_point = 0
        self.producer_state = ProducerStateManager(dir, producer_id_expiration_ms)
        self._unflushed_messages = 0
        self._last_flush = clock.monotonic()
        self._closed = False
        self._deleter = DeferredDeleter(clock)
        self.recovered = 0  # segments re-validated at open
        self._opened_end = 0  # log end / start offsets at open: close skips an unchanged log
        self._opened_start = 0
        self._flusher = flusher
        # checkpoint files are written by the flusher thread and (rarely) by the log's own
        # thread; the lock orders them and guards recovery_point / _truncations
        self._ckpt_lock = threading.Lock()
        self._truncations = 0  # a flush job submitted before a truncation must not move
        # the recovery point afterwards (the offsets it fsynced may have been rewritten)
        self.on_change: Callable[[], None] | None = None  # maintenance schedule hook
        #: told when the high watermark changes (the HW checkpoint writes only what moved)
        self.on_hw_change: Callable[[], None] | None = None
        self.leader_epochs = LeaderEpochCache(dir)
        #: where disk errors are reported (the log manager's; None: they are only raised)
        self.failures: LogDirFailures | None = None
        #: set when the log directory went offline: appends are refused from then on
        self.offline = False
        #: the log start offset its checkpoint file last got (what a restart finds): below
        #: :attr:`log_start_offset` while a write of it failed (a full disk) or is queued
        self.log_start_written = 0
        #: whether the log directory is slow now (the log manager's, shared by the
        #: directory's logs; :mod:`strom.storage.slow_disk`)
        self.speed = DiskSpeed(dir.name)
        #: the append a writer thread is writing (:meth:`append` with ``writer``), until
        #: :meth:`PendingAppend.finish`; the log's state does not include it meanwhile
        self.in_flight: PendingAppend | None = None

    # --- opening ---------------------------------------------------------------------------

    @classmethod
    def open(cls, dir: Path, config: LogConfig, clock: Clock, *,
             producer_id_expiration_ms: int = DEFAULT_EXPIRATION_MS, clean: bool = False,
             recovery_point: int = 0, flusher: Flusher = INLINE) -> Log:  # fmt: skip
        """Open (creating if needed) and recover the log in ``dir``.

        ``producer_id_expiration_ms`` is the broker's ``producer.id.expiration.ms``; ``clean``
        and ``recovery_point`` what the data directory's marker and checkpoint say;
        ``flusher`` runs the log's fsyncs and checkpoint writes (the broker's is a background
        thread; the default runs them inline). Opening writes nothing but the removal of the
        clean-shutdown marker (see :mod:`strom.storage.log_recovery`); :attr:`recovered` tells
        how many segments had to be re-validated. After a crash the recovery point stays where
        the checkpoints put it (as Kafka): re-validated segments are fsynced by the next
        flush or roll, and until then a crash re-validates them again.
        """
        dir.mkdir(parents=True, exist_ok=True)
        log = cls(dir, config, clock, producer_id_expiration_ms, flusher)
        loaded = load_log_dir(dir, config, clock.time_ms(), clean=clean,
                              recovery_point=recovery_point)  # fmt: skip
        log._set_segments(loaded.segments)
        log.log_start_offset = log.log_start_written = loaded.log_start_offset
        log._high_watermark = log.log_end_offset
        log._rebuild_producer_state(no_snapshots=not loaded.has_snapshots)
        log.recovery_point = loaded.recovery_point
        log.recovered = loaded.recovered
        log._load_leader_epochs()
        log._opened_end, log._opened_start = log.log_end_offset, log.log_start_offset
        if loaded.clean:
            (dir / ckpt.CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
        return log

    @classmethod
    def create(cls, dir: Path, config: LogConfig, clock: Clock, *,
               producer_id_expiration_ms: int = DEFAULT_EXPIRATION_MS,
               flusher: Flusher = INLINE) -> Log:  # fmt: skip
        """A new, empty log in the new directory ``dir`` (FileExistsError if it exists): one
        directory and one empty ``.log`` file, nothing fsynced (the caller fsyncs the parent
        directory once for a whole batch of partitions)."""
        dir.mkdir()
        log = cls(dir, config, clock, producer_id_expiration_ms, flusher)
        log._set_segments([LogSegment.create(dir, 0, config, clock.time_ms())])
        return log

    def _set_segments(self, segments: list[LogSegment]) -> None:
        self._segments = segments
        self._bases = [s.base_offset for s in segments]

    def _load_leader_epochs(self) -> None:
        """Read the leader-epoch checkpoint (rebuilt from the batches when missing, e.g. logs
        written before it existed) and fit it to what recovery left of the log."""
        cache = self.leader_epochs
        if not cache.load() and self.log_end_offset > self.log_start_offset:
            cache.rebuild((h.partition_leader_epoch, h.base_offset)
                          for seg in self._segments for _pos, h in seg.iter_headers(0))  # fmt: skip
        elif self.recovered:  # epochs of re-validated batches may be missing from the file
            for seg in self._segments[-self.recovered :]:
                for _pos, h in seg.iter_headers(0):
                    cache.assign(h.partition_leader_epoch, h.base_offset)
        cache.truncate_from_end(self.log_end_offset)
        cache.truncate_from_start(self.log_start_offset)

    def _rebuild_producer_state(self, *, no_snapshots: bool = False) -> None:
        """Rebuild producer state and the ``.txnindex`` entries of the replayed range
        (``no_snapshots``: opening listed the directory and saw no snapshot file)."""
        found: list[tuple[LogSegment, AbortedTxn]] = []

        def on_control(seg: LogSegment, pos: int, header: rb.BatchHeader) -> int | None:
            marker = _marker(seg.read_at(pos, header.size))
            txn = self._aborted_by(header, marker)
            if txn is not None:
                found.append((seg, txn))
            return None if marker is None else marker.coordinator_epoch

        start = self.producer_state.rebuild(self._segments, self.log_start_offset,
                                            self.clock.time_ms(), on_control,
                                            no_snapshots=no_snapshots)  # fmt: skip
        for seg in self._segments:
            if seg.next_offset > start or seg.txn_index.entries:
                seg.txn_index.truncate_to(max(start, seg.base_offset))
        for seg, txn in found:
            seg.txn_index.append(txn)

    def _aborted_by(self, header: rb.BatchHeader, marker: Marker | None) -> AbortedTxn | None:
        """The aborted transaction a marker ends (call before producer state applies it), or
        None for a commit, another control record, or no data in this partition."""
        entry = self.producer_state.producers.get(header.producer_id)
        if entry is None or entry.txn_first_offset < 0:
            return None
        if marker is None or marker.commit:
            return None
        lso = self.producer_state.first_unstable_offset(exclude=header.producer_id)
        return AbortedTxn(header.producer_id, entry.txn_first_offset, header.base_offset,
                          header.next_offset if lso is None else lso)  # fmt: skip

    # --- properties ------------------------------------------------------------------------

    @property
    def active(self) -> LogSegment:
        return self._segments[-1]

    @property
    def segments(self) -> list[LogSegment]:
        """The segments, oldest first (a copy; the last one is active)."""
        return list(self._segments)

    @property
    def log_end_offset(self) -> int:
        return self.active.next_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, value: int) -> None:
        hw = max(self.log_start_offset, min(value, self.log_end_offset))
        if hw != self._high_watermark:
            self._high_watermark = hw
            if self.on_hw_change is not None:
                self.on_hw_change()

    def advance_high_watermark_to_end(self) -> bool:
        """Move the HW to the log end offset (a leader alone in its ISR); True if it moved.
        The request path's version of the setter: the HW only rises here, and the log end
        offset is never below the log start offset."""
        end = self._segments[-1].next_offset
        if end > self._high_watermark:
            self._high_watermark = end
            if self.on_hw_change is not None:  # the HW checkpoint's dirty set
                self.on_hw_change()
            return True
        return False

    @property
    def last_stable_offset(self) -> int:
        """First offset of the earliest open transaction, or the high watermark."""
        first = self.producer_state.first_unstable_offset()
        return self._high_watermark if first is None else min(first, self._high_watermark)

    def collect_aborted(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping ``[start, end)``, by marker offset: a
        read_committed Fetch of that range returns them. A transaction's entry lives in the
        segment of its marker, which may follow ``end``, so every later segment is looked at
        (entries are in memory; there are few)."""
        i = max(0, bisect.bisect_right(self._bases, start) - 1)
        out: list[AbortedTxn] = []
        for seg in self._segments[i:]:
            out.extend(seg.txn_index.collect(start, end))
        return out

    @property
    def size(self) -> int:
        return sum(s.size for s in self._segments)

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        for seg in self._segments:
            seg.index_interval_bytes = config.index_interval_bytes
        self._changed()

    def _changed(self) -> None:
        """Something that moves maintenance deadlines happened (see storage/maintenance)."""
        if self.on_change is not None:
            self.on_change()

    def next_maintenance(self) -> float | None:
        """When this log's next time-based maintenance falls due (monotonic seconds), or None:
        the active segment's segment.ms roll, the oldest segment's retention.ms, a pending
        file deletion, a flush.ms flush. Changes (appends…) are signalled by ``on_change``."""
        now_ms = self.clock.time_ms()
        mono = self.clock.monotonic()
        cfg = self.config
        walls = []
        if self.active.size > 0 and cfg.segment_ms < 2**62:
            walls.append(self.active.created_ms + cfg.segment_ms + 1)
        if cfg.delete and cfg.retention_ms >= 0 and len(self._segments) > 1:
            walls.append(self._segments[0].max_timestamp + cfg.retention_ms + 1)
        dues = [mono + (w - now_ms) / 1000 for w in walls]
        pending = self._deleter.next_due()
        if pending is not None:
            dues.append(pending)
        if self._unflushed_messages and cfg.flush_ms < 2**62:
            dues.append(self._last_flush + cfg.flush_ms / 1000)
        return min(dues, default=None)

    # --- append ----------------------------------------------------------------------------

    def append(
        self, records: _Buffer, *, origin: AppendOrigin = AppendOrigin.CLIENT,
        leader_epoch: int = 0, writer: WriterPool | None = None,
    ) -> AppendResult:  # fmt: skip
        """Validate, assign offsets to and store the batches in ``records`` (all or nothing).

        The one append path of every writer: a leader's Produce (CLIENT), the coordinators'
        records and transaction markers (COORDINATOR), a follower copying its leader
        (REPLICATION). What is validated depends on ``origin``
        (:mod:`strom.storage.batch_validation`). CLIENT and COORDINATOR appends hold one batch,
        get offsets from the log end offset, the partition leader epoch ``leader_epoch`` and,
        on LogAppendTime topics, the broker's time; CLIENT batches of idempotent producers are
        checked against producer state (duplicates answered with their original offsets).
        REPLICATION keeps the batches' offsets and epochs (above the log end offset,
        ascending) and skips the client rules. Every batch is checked before the first is
        written; then each goes through :meth:`_store`.

        With ``writer`` (a log directory that is slow, :mod:`strom.storage.slow_disk`), a
        CLIENT batch, or REPLICATION batches that fit the active segment (one write for all),
        are written by a writer thread instead of the calling one: everything up to the write
        (validation, duplicates, offsets, a roll) happens here as usual, the result returned
        is the one the append will have (its ``flushed`` aside), and
        :attr:`in_flight` holds the write until :meth:`PendingAppend.finish` (on this thread)
        makes the batch part of the log: until then the log end offset, the segment's size,
        the indexes, producer state and the high watermark do not include it, so nothing
        reads or acknowledges a byte of it before it is written. One append is in flight at
        a time: any other call that changes the log first waits for it (:meth:`settle`).
        A slow write on this thread (without ``writer``) marks the directory slow.
        """
        if self.in_flight is not None:
            self.settle()
        if self.offline:
            raise KafkaStorageError(f"the log directory of {self.dir.name} is offline")
        config = self.config
        now = self.clock.time_ms()
        pending: dict[int, ProducerEntry] = {}
        was_clean = self._unflushed_messages == 0
        if origin is AppendOrigin.REPLICATION:
            batches = self._replicated_batches(records)
            first, last = batches[0][0].base_offset, batches[-1][0].last_offset
            count = sum(stored.record_count for stored, _ in batches)
            was_empty = self._segments[-1].size == 0
            append_time = -1
            value_bytes = 0
            if writer is not None and self._fits_whole(batches, len(records), now):
                self._write_later(writer, self._segments[-1], batches, records, None, pending,
                                  was_empty, was_clean, 0, -1)  # fmt: skip
                return _new_result(AppendResult, (first, last, -1, self.log_start_offset,
                                                  count, False, 0, None))  # fmt: skip
            began = _perf()
            try:
                for stored, batch in batches:  # stored as the leader wrote them
                    self._store(self._segments[-1], stored, None, batch, now, pending)
            except (OSError, DiskError) as exc:  # the batches before the failed one stay
                self.disk_error(exc)
            took = _perf() - began
            if took > SLOW_WRITE_S:
                self.speed.note(took)
        else:
            # Every Produce: the header is parsed once, the records validated in place and
            # written as they came beside the patched header (LogSegment.append), never copied.
            header = _parse_header(records) if len(records) >= _HEADER_SIZE else None
            if header is None or not (header.magic == _MAGIC and header.size == len(records)
                                      and header.batch_length >= _MIN_BATCH_LENGTH):  # fmt: skip
                header = self._one_batch(records)  # or the codec's error
            validate_shape(header, records, config)
            max_ts, value_bytes = validate_records(header, records, config, now, origin)
            (_, length, _, magic, crc, attributes, delta, base_ts, client_max_ts, pid, epoch,
             seq, count) = header  # fmt: skip
            if pid >= 0:
                try:
                    dup = self.producer_state.check(header, pending)
                except OutOfOrderSequenceError as exc:  # a client's retry gone wrong: say why
                    logger.info("%s refused a batch (epoch %d, sequences %d..%d): %s; producer "
                                "state here %s; log end offset %d", self.dir.name, epoch, seq,
                                header.last_sequence, exc, self.producer_state.producers.get(pid),
                                self.log_end_offset)  # fmt: skip
                    raise
                if dup is not None:
                    return AppendResult(dup.first_offset, dup.last_offset, -1,
                                        self.log_start_offset, count, True)  # fmt: skip
            append_time = now if config.timestamp_type == _LOG_APPEND_TIME else -1
            if append_time >= 0:
                attributes |= _TIMESTAMP_TYPE_BIT
                max_ts = append_time
            seg = self._segments[-1]
            first = seg.next_offset
            last = first + delta
            was_empty = seg.size == 0
            # the header as stored: offsets, epoch, and (when they changed) attributes,
            # maxTimestamp and the CRC over attributes..end, computed without joining header
            # and records
            stored = _new_header(rb.BatchHeader, (first, length, leader_epoch, magic, crc,
                                                  attributes, delta, base_ts, max_ts, pid, epoch,
                                                  seq, count))  # fmt: skip
            if max_ts != client_max_ts or attributes != header.attributes:
                stored = stored._replace(crc=rb.crc_of(stored, records))
            if writer is not None and not attributes & _CONTROL_BIT:
                try:
                    seg = self._segment_for(seg, stored, now)
                except (OSError, DiskError) as exc:  # a roll that failed
                    self.disk_error(exc)
                self._write_later(writer, seg, [(stored, records)], records,
                                  _pack_header(*stored), pending, was_empty, was_clean,
                                  value_bytes, append_time)  # fmt: skip
                return _new_result(AppendResult, (first, last, append_time,
                                                  self.log_start_offset, count, False,
                                                  value_bytes, None))  # fmt: skip
            began = _perf()  # a slow write marks the directory slow (two clock reads)
            try:
                self._store(seg, stored, _pack_header(*stored), records, now, pending)
            except (OSError, DiskError) as exc:  # nothing of the batch stays (LogSegment.append)
                self.disk_error(exc)
            took = _perf() - began
            if took > SLOW_WRITE_S:
                self.speed.note(took)
        self._unflushed_messages += count
        flushed = None
        if self._unflushed_messages >= config.flush_messages:
            flushed = self.flush_async()
        # Maintenance deadlines move only when the active segment gets its first batch
        # (segment.ms), the first unflushed message appears (flush.ms), or with a size bound
        # (retention.bytes); a roll signals by itself. Touching the schedule on every append
        # made each maintenance tick visit every partition written in the last second.
        if was_empty or (was_clean and config.flush_ms < 2**62) or (
                config.retention_bytes >= 0 and config.delete):  # fmt: skip
            self._changed()
        return _new_result(AppendResult, (first, last, append_time, self.log_start_offset,
                                          count, False, value_bytes, flushed))  # fmt: skip

    def _write_later(self, writer: WriterPool, seg: LogSegment,
                     batches: Sequence[tuple[rb.BatchHeader, _Buffer]], records: _Buffer,
                     head: bytes | None, pending: dict[int, ProducerEntry], was_empty: bool,
                     was_clean: bool, value_bytes: int, append_time: int) -> None:  # fmt: skip
        """:meth:`append`'s write on a writer thread: ``records`` (its first bytes replaced by
        ``head``), the ``batches`` back to back, at the end of ``seg`` (which they fit in:
        the caller rolled or checked); what :meth:`_finish` needs goes in :attr:`in_flight`."""
        position = seg.size
        placed = []
        for stored, batch in batches:
            placed.append((stored, batch, position))
            position += len(batch)
        speed = self.speed
        start = seg.size

        def write() -> None:
            seg.write_at(records, head, start)

        self.in_flight = PendingAppend(self, writer.submit(lambda: speed.timed(write)), seg,
                                       placed, pending, was_empty, was_clean, value_bytes,
                                       append_time)  # fmt: skip

    def _fits_whole(self, batches: Sequence[tuple[rb.BatchHeader, _Buffer]], size: int,
                    now: int) -> bool:  # fmt: skip
        """True when a follower's ``batches`` (``size`` bytes) all fit in the active segment
        as it is, with no roll before any of them (:meth:`_segment_for`'s test for the
        whole): they can be written with one write. A roll (rare) is done on the caller's
        thread instead."""
        seg = self._segments[-1]
        config = self.config
        index = seg.index
        return (seg.size > 0
                and batches[0][0].base_offset >= seg.base_offset
                and batches[-1][0].last_offset - seg.base_offset <= _INT32_MAX
                and seg.size + size + len(batches) * _LOG_OVERHEAD <= config.segment_bytes
                and now - seg.created_ms <= config.segment_ms - config.segment_jitter_ms
                and len(index) + len(batches) < index.max_entries)  # fmt: skip

    def settle(self) -> None:
        """Wait for the append in flight, if any, and make it part of the log (its error, if
        it failed, is its own caller's: :meth:`PendingAppend.finish`). Blocks the calling
        thread while the write is stalled: only the rare changes of a log with a write in
        flight (a truncation, a roll, closing) come here; appends queue instead
        (:meth:`strom.replication.replica_manager.ReplicaManager.append_later`)."""
        pending = self.in_flight
        if pending is not None:
            # its error is its append's (PendingAppend.finish raises it again there)
            with contextlib.suppress(Exception):
                pending.finish()

    def _finish(self, p: PendingAppend) -> AppendResult:
        """(owner's thread) The write of ``p`` is done (or waited for here): make the batch
        part of the log as :meth:`_store` and :meth:`append` would have, or report its error
        (the write was cut off again: the log is as it was before the append)."""
        self.in_flight = None
        error = p.future.exception()  # waits for the write when it is not done
        if self._closed:  # the directory went offline, or the log was deleted, meanwhile
            raise KafkaStorageError(f"{self.dir.name} stopped before its append was written")
        if isinstance(error, (OSError, DiskError)):
            self.disk_error(error)
        if error is not None:
            raise error
        seg = p.segment
        for stored, batch, position in p.batches:  # as _store, the write aside
            coordinator_epoch = None
            if stored[5] & _CONTROL_BIT:  # a transaction marker (a follower's)
                marker = _marker(batch)
                aborted = self._aborted_by(stored, marker)  # before producer state applies it
                seg.account(stored, position, len(batch))
                if aborted is not None:
                    seg.txn_index.append(aborted)
                if marker is not None:
                    coordinator_epoch = marker.coordinator_epoch
            else:
                seg.account(stored, position, len(batch))
            if stored[9] >= 0:  # a producer id
                self.producer_state.update(stored, p.producers, coordinator_epoch)
            epoch = stored[2]
            if epoch > self.leader_epochs.latest_epoch:
                self.leader_epochs.assign(epoch, stored[0])
        count = sum(stored[12] for stored, _b, _p in p.batches)
        config = self.config
        self._unflushed_messages += count
        flushed = None
        if self._unflushed_messages >= config.flush_messages:
            flushed = self.flush_async()
        if p.was_empty or (p.was_clean and config.flush_ms < 2**62) or (
                config.retention_bytes >= 0 and config.delete):  # fmt: skip
            self._changed()
        first, last = p.batches[0][0], p.batches[-1][0]
        return AppendResult(first[0], last[0] + last[6], p.append_time, self.log_start_offset,
                            count, False, p.value_bytes, flushed)  # fmt: skip

    def _store(self, seg: LogSegment, stored: rb.BatchHeader, head: bytes | None, batch: _Buffer,
               now: int, pending: dict[int, ProducerEntry]) -> None:  # fmt: skip
        """Write one checked batch whose offsets are final into the active segment ``seg``
        (``stored`` is its header as stored; ``head`` that header packed, when it differs from
        the batch's first bytes): roll first when it does not fit, then keep the transaction
        index, producer state (``pending``: what :meth:`ProducerStateManager.check` staged)
        and the leader epochs in step."""
        # BatchHeader's fields by position: cheaper than attributes or a 13-name unpack on
        # the Produce path (base offset, batch length, ..., last offset delta)
        offset, length, delta = stored[0], stored[1], stored[6]
        config = self.config
        seg_size = seg.size
        # The roll test, _segment_for's inline (every Produce: a call less; keep in step).
        if not (0 <= offset + delta - seg.base_offset <= _INT32_MAX and (seg_size == 0 or (
                seg_size + length + _LOG_OVERHEAD <= config.segment_bytes
                and now - seg.created_ms <= config.segment_ms - config.segment_jitter_ms
                and not seg.index.is_full))):  # fmt: skip
            seg = self._segment_for(seg, stored, now)  # rolls (or refuses)
        coordinator_epoch = None
        if stored[5] & _CONTROL_BIT:  # attributes: a control batch (a transaction marker)
            marker = _marker(batch)
            aborted = self._aborted_by(stored, marker)  # before producer state applies it
            seg.append(batch, stored, head)
            if aborted is not None:
                seg.txn_index.append(aborted)
            if marker is not None:
                coordinator_epoch = marker.coordinator_epoch
        else:
            seg.append(batch, stored, head)
        if stored[9] >= 0:  # a producer id
            self.producer_state.update(stored, pending, coordinator_epoch)
        epoch = stored[2]  # the partition leader epoch
        if epoch > self.leader_epochs.latest_epoch:
            self.leader_epochs.assign(epoch, offset)

    def _segment_for(self, seg: LogSegment, stored: rb.BatchHeader, now: int) -> LogSegment:
        """The active segment ``seg``, or a new one rolled for the batch ``stored`` when it
        does not fit. A batch fits when its offsets are expressible relative to the segment's
        base and, unless the segment is empty, it stays within segment.bytes, segment.ms
        (less the jitter) and the offset index's size."""
        # BatchHeader's fields by position: cheaper than attributes or a 13-name unpack on
        # the Produce path (base offset, batch length, ..., last offset delta)
        offset, length, delta = stored[0], stored[1], stored[6]
        config = self.config
        seg_size = seg.size
        if not (0 <= offset + delta - seg.base_offset <= _INT32_MAX and (seg_size == 0 or (
                seg_size + length + _LOG_OVERHEAD <= config.segment_bytes
                and now - seg.created_ms <= config.segment_ms - config.segment_jitter_ms
                and not seg.index.is_full))):  # fmt: skip
            if seg_size == 0:  # an empty segment's base is the log end: the offsets are wrong
                raise InvalidRecordError(f"batch offsets {offset} do not fit {seg}")
            seg = self.roll(offset)
        return seg

    @staticmethod
    def _split(records: _Buffer) -> list[tuple[rb.BatchHeader, memoryview]]:
        """The whole batches in ``records`` (at least one), or the codec's error."""
        try:
            batches = list(rb.iter_batches(records))
        except rb.CorruptRecordError as exc:
            raise CorruptRecordError(str(exc)) from exc
        if not batches:
            raise InvalidRecordError("record batch has no batches at all")
        return batches

    def _one_batch(self, records: _Buffer) -> rb.BatchHeader:
        """The header of a leader append that did not frame as one batch at first sight:
        refused with the codec's error, or for holding several batches."""
        batches = self._split(records)
        if len(batches) > 1:
            raise InvalidRecordError(
                f"{len(batches)} record batches in one append: a produce request carries one "
                "batch per partition"
            )
        return batches[0][0]

    def _replicated_batches(self, records: _Buffer) -> list[tuple[rb.BatchHeader, memoryview]]:
        """A follower's batches, stored as its leader wrote them: shape and CRC checked, base
        offsets ascending from the log end offset, all before the first is written."""
        batches = self._split(records)
        next_offset = self.log_end_offset
        for header, batch in batches:
            validate_shape(header, batch, self.config)
            if header.base_offset < next_offset:
                raise InvalidRecordError(
                    f"batch offset {header.base_offset} is below the log end offset {next_offset}"
                )
            next_offset = header.next_offset
        return batches

    def disk_error(self, exc: OSError | DiskError, *, undone: bool = True) -> NoReturn:
        """Report ``exc``, an operation on this log's files that failed, to the log manager's
        :class:`~strom.storage.log_dir_failures.LogDirFailures` (which may take the directory
        offline) and raise it as a :class:`DiskError` (KAFKA_STORAGE_ERROR). ``undone``: the
        operation left the files as they were (a :class:`DiskError` says so itself)."""
        if isinstance(exc, DiskError):
            if self.failures is not None:
                self.failures.report(self.dir.parent, exc.cause, undone=exc.undone and undone)
            raise exc
        if self.failures is not None:
            self.failures.report(self.dir.parent, exc, undone=undone)
        raise DiskError(f"{self.dir.name}: {exc}", exc, undone=undone) from exc

    def _submit(self, job: Callable[[], None]) -> Future[None]:
        """Queue ``job`` (fsyncs, checkpoint writes) on the flusher; a disk error it meets is
        reported (:meth:`disk_error`) before it fails the job's future."""

        def guarded() -> None:
            try:
                job()
            except (OSError, DiskError) as exc:
                self.disk_error(exc)

        return self._flusher.submit(guarded)

    def roll(self, base_offset: int | None = None) -> LogSegment:
        """Close the active segment for writes and start a new one; no-op if empty.

        The old segment's fsync, the producer snapshot and the recovery-point checkpoint are
        handed to the flusher (Kafka's asynchronous flush on roll): the caller does not wait
        on the disk. The recovery point moves only once that fsync is done."""
        self.settle()
        old = self.active
        if old.size == 0:
            return old
        base = self.log_end_offset if base_offset is None else base_offset
        old.on_inactive()
        seg = LogSegment.create(self.dir, base, self.config, self.clock.time_ms())
        self._segments.append(seg)
        self._bases.append(base)
        entries = self.producer_state.snapshot_entries()
        point, truncations = old.next_offset, self._truncations
        rolled = [s for s in self._segments[:-1] if s.unflushed]
        # queued before the recovery point passes the epochs it covers (KAFKA-15046)
        self.leader_epochs.flush(self._submit)

        def flush_rolled() -> None:
            if self._closed:
                return
            self.producer_state.write_snapshot(base, entries)
            for s in rolled:
                self._fsync(s)
            self._advance_recovery_point(point, truncations)

        self._submit(flush_rolled)
        self._changed()
        logger.info("rolled %s at offset %d", self.dir.name, base)
        return seg

    def _fsync(self, seg: LogSegment) -> None:
        """(Flusher thread) fsync ``seg``; a slow fsync marks the directory slow (a slow disk
        shows in its fsyncs first, and an append may wait for the journal commit a stalled
        fsync holds: :mod:`strom.storage.slow_disk`)."""
        began = _perf()
        seg.flush()
        self.speed.note(_perf() - began, SLOW_FSYNC_S)

    def _advance_recovery_point(self, point: int, truncations: int) -> None:
        """(Flusher thread) everything below ``point`` is fsynced: move the recovery point
        and persist it, unless the log was truncated since the fsync was requested."""
        with self._ckpt_lock:
            if self._closed or truncations != self._truncations or point <= self.recovery_point:
                return
            self.recovery_point = point
            ckpt.write_offset(self.dir / ckpt.RECOVERY_POINT_FILE, point)

    def _persist_log_start(self, offset: int) -> None:
        """Write the log-start-offset checkpoint (under ``_ckpt_lock``) and remember it."""
        ckpt.write_offset(self.dir / ckpt.LOG_START_OFFSET_FILE, offset)
        self.log_start_written = offset

    def _write_log_start_checkpoint(self) -> None:
        with self._ckpt_lock:
            if not self._closed:
                self._persist_log_start(self.log_start_offset)

    def durable(self) -> Future[None]:
        """Done once every fsync and checkpoint this log asked for so far is on disk."""
        return self._flusher.barrier()

    # --- read ------------------------------------------------------------------------------

    def _check_range(self, offset: int) -> None:
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self.log_start_offset}, {self.log_end_offset}]"
            )

    def read_region(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
                    min_one_batch: bool = True) -> SegmentSlice | None:  # fmt: skip
        """Where the whole batches to serve for ``offset`` lie (see
        :mod:`strom.storage.read_path`): from the batch containing ``offset``, at most
        ``max_bytes`` (but one batch if ``min_one_batch``), none starting at or after
        ``max_offset``. None when there is nothing to serve. Reads headers only. A read that
        fails (EIO) is a disk error like a write's (:meth:`disk_error`: Kafka takes the
        directory offline on any I/O error, reads included)."""
        self._check_range(offset)
        try:
            return read_path.locate(self._segments, self._bases, offset, max_bytes, max_offset,
                                    min_one_batch)  # fmt: skip
        except OSError as exc:
            self.disk_error(exc)

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_batch: bool = True) -> ReadResult:  # fmt: skip
        """The bytes of :meth:`read_region` (whole batches), see GUIDE §6.4."""
        found = self.read_region(offset, max_bytes, max_offset=max_offset,
                                 min_one_batch=min_one_batch)  # fmt: skip
        if found is None:
            return self._result(b"", offset)
        try:
            data = found.segment.read_at(found.position, found.length)
        except OSError as exc:
            self.disk_error(exc)
        return self._result(data, found.first_offset)

    def _result(self, data: bytes, first: int) -> ReadResult:
        return ReadResult(data, first, self._high_watermark, self.log_start_offset,
                          self.log_end_offset)  # fmt: skip

    # --- timestamps ------------------------------------------------------------------------

    def offset_for_timestamp(self, ts: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``ts``, or None."""
        return log_timestamps.offset_for_timestamp(self._segments, self.log_start_offset, ts)

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the record with the largest timestamp, or None."""
        return log_timestamps.max_timestamp_offset(self._segments)

    # --- deletion --------------------------------------------------------------------------

    def delete_records_before(self, offset: int) -> int:
        """Move the log start offset to ``offset`` (persisted); returns the new start."""
        if offset > self._high_watermark or offset < 0:
            raise OffsetOutOfRangeError(
                f"cannot delete before {offset}: high watermark is {self._high_watermark}"
            )
        if offset <= self.log_start_offset:
            return self.log_start_offset
        self.settle()  # a roll may follow
        self.log_start_offset = offset
        # Durable before the caller answers (a crash right after the response must not bring
        # the deleted records back; Kafka checkpoints within a minute): the checkpoint is the
        # flusher's, written below, and the DeleteRecords handler awaits ``durable()``.
        self.leader_epochs.truncate_from_start(offset, self._submit)
        if offset >= self.log_end_offset and self.active.size > 0:
            self.roll()
        doomed = 0
        while doomed + 1 < len(self._segments) and self._bases[doomed + 1] <= offset:
            doomed += 1
        if doomed:
            self._delete_oldest(doomed)  # persists the new start too
        else:  # the start moved inside a segment: persist it all the same
            self._submit(self._write_log_start_checkpoint)
        self._changed()
        return self.log_start_offset

    def enforce_retention(self) -> int:
        """Delete old inactive segments by retention.ms / retention.bytes; returns how many."""
        if not self.config.delete or len(self._segments) < 2:  # only inactive ones may go
            return 0
        now = self.clock.time_ms()
        doomed = segments_past_retention(self._segments, self._high_watermark, self.config, now)
        self._delete_oldest(doomed)
        return doomed

    def _delete_oldest(self, count: int) -> None:
        if count <= 0:
            return  # runs every maintenance tick: no checkpoint fsync when nothing changed
        for seg in self._segments[:count]:
            logger.info("deleting segment %s", seg.path)
            self._delete_segment(seg)
        if count:
            self._set_segments(self._segments[count:])
        self.log_start_offset = max(self.log_start_offset, self._segments[0].base_offset)
        self._submit(self._write_log_start_checkpoint)
        self.leader_epochs.truncate_from_start(self.log_start_offset, self._submit)

    def _delete_segment(self, seg: LogSegment) -> None:
        """Rename to ``.deleted`` now, unlink after file.delete.delay.ms (deferred_delete)."""
        self._deleter.schedule(seg, self.config.file_delete_delay_ms)

    def delete_due_files(self) -> int:
        """Unlink removed segments whose file.delete.delay.ms has passed; returns how many."""
        return self._deleter.delete_due()

    def truncate_to(self, offset: int) -> None:
        """Remove everything at or after ``offset`` (whole batches).

        Rare (replication): it waits for the log's queued flusher work first, so no snapshot
        or checkpoint written for the old contents lands after the truncation. A disk error
        half way is reported as not undone (:meth:`disk_error`): the directory goes offline."""
        self.settle()
        if offset >= self.log_end_offset:
            return
        if self.offline:
            raise KafkaStorageError(f"the log directory of {self.dir.name} is offline")
        try:
            self._truncate_to(offset)
        except (OSError, DiskError) as exc:
            self.disk_error(exc, undone=False)

    def _truncate_to(self, offset: int) -> None:
        self._begin_truncation()
        keep = [s for s in self._segments if s.base_offset < offset]
        for seg in self._segments[len(keep) :]:
            self._delete_segment(seg)
        with self._ckpt_lock:
            if not keep:
                keep = [LogSegment.create(self.dir, offset, self.config, self.clock.time_ms())]
                self.log_start_offset = offset
                self._persist_log_start(offset)
            else:
                keep[-1].truncate_to(offset)
            self._set_segments(keep)
            self._high_watermark = min(self._high_watermark, self.log_end_offset)
            self.recovery_point = min(self.recovery_point, self.log_end_offset)
            ckpt.write_offset(self.dir / ckpt.RECOVERY_POINT_FILE, self.recovery_point)
        self.leader_epochs.truncate_from_end(self.log_end_offset)
        self._end_truncation()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Replace the whole log by an empty one starting at ``offset`` (Kafka's
        ``truncateFullyAndStartAt``: a follower whose end is below its leader's log start)."""
        self.settle()
        if self.offline:
            raise KafkaStorageError(f"the log directory of {self.dir.name} is offline")
        try:
            self._truncate_fully_and_start_at(offset)
        except (OSError, DiskError) as exc:
            self.disk_error(exc, undone=False)

    def _truncate_fully_and_start_at(self, offset: int) -> None:
        self._begin_truncation()
        for seg in self._segments:
            self._delete_segment(seg)
        with self._ckpt_lock:
            self._set_segments([LogSegment.create(self.dir, offset, self.config,
                                                  self.clock.time_ms())])  # fmt: skip
            self.log_start_offset = offset
            self._persist_log_start(offset)
            self._high_watermark = offset
            self.recovery_point = offset
            ckpt.write_offset(self.dir / ckpt.RECOVERY_POINT_FILE, offset)
        self.leader_epochs.truncate_from_end(-1)
        self._end_truncation()

    def _begin_truncation(self) -> None:
        """Count the truncation (a flush job submitted before it must not move the recovery
        point afterwards) and wait for the queued flusher work, so that no snapshot or
        checkpoint written for the old contents lands after it."""
        with self._ckpt_lock:
            self._truncations += 1
        self._flusher.drain()

    def _end_truncation(self) -> None:
        """Rebuild what depends on the removed batches (producer state, the ``.txnindex``
        entries) and tell the maintenance schedule and the HW checkpoint."""
        self._rebuild_producer_state()
        self._changed()
        if self.on_hw_change is not None:
            self.on_hw_change()

    # --- compaction support ----------------------------------------------------------------

    def create_cleaned_segment(self, base_offset: int) -> LogSegment:
        """An empty ``.cleaned`` segment for the compactor to fill with ``LogSegment.append``."""
        return segment_swap.create_cleaned_segment(self.dir, base_offset, self.config,
                                                   self.clock.time_ms())  # fmt: skip

    def replace_segments(self, old: Sequence[LogSegment], new: LogSegment) -> None:
        """Atomically swap contiguous inactive segments ``old`` for the cleaned ``new``.

        Crash-safe: see :mod:`strom.storage.segment_swap`.
        """
        self._set_segments(
            segment_swap.replace_segments(self._segments, old, new, self._delete_segment)
        )
        self._changed()

    # --- lifecycle -------------------------------------------------------------------------

    def remove_expired_producers(self) -> int:
        """Forget producers idle for ``producer.id.expiration.ms`` (none with an open
        transaction); the next snapshot leaves them out. Returns how many."""
        removed = self.producer_state.remove_expired(self.clock.time_ms())
        if removed:
            logger.info("expired %d producer ids of %s", removed, self.dir.name)
        return removed

    def maybe_roll_by_time(self) -> None:
        if self.in_flight is not None:  # the next maintenance rolls (never wait on a write)
            return
        seg = self.active
        cfg = self.config
        if seg.size > 0 and self.clock.time_ms() - seg.created_ms > cfg.segment_ms:
            self.roll()

    def maybe_flush_by_time(self) -> None:
        if self._unflushed_messages and (
            (self.clock.monotonic() - self._last_flush) * 1000 >= self.config.flush_ms
        ):
            self.flush_async()

    def flush_async(self) -> Future[None]:
        """Have the flusher fsync what is written so far and then move the recovery point to
        the current log end offset (and persist both checkpoints); returns its future."""
        segments = [s for s in self._segments if s.unflushed]
        point, truncations = self.log_end_offset, self._truncations
        self._unflushed_messages = 0
        self._last_flush = self.clock.monotonic()
        self.leader_epochs.flush(self._submit)  # queued before the point moves

        def flush_job() -> None:
            if self._closed:
                return
            for seg in segments:
                self._fsync(seg)
            self._advance_recovery_point(point, truncations)
            self._write_log_start_checkpoint()

        return self._submit(flush_job)

    def flush(self) -> None:
        """fsync every unflushed segment, write the leader epochs, and move the recovery point
        to the log end offset, on the calling thread (closing, tools)."""
        self.settle()
        for seg in self._segments:
            if seg.unflushed:
                seg.flush()
        self.leader_epochs.flush()
        with self._ckpt_lock:
            self.recovery_point = self.log_end_offset
            ckpt.write_offset(self.dir / ckpt.RECOVERY_POINT_FILE, self.recovery_point)
            self._persist_log_start(self.log_start_offset)
        self._unflushed_messages = 0
        self._last_flush = self.clock.monotonic()

    def close(self, *, sync: bool = True) -> None:
        """Wait for queued flusher work, flush, snapshot producer state, close files and mark
        the shutdown clean.

        A log that did not change since it was opened writes nothing but the marker. With
        ``sync=False`` nothing is fsynced and no marker written: the caller (closing many logs
        at once) syncs the file system once, writes the recovery points to the data
        directory's checkpoint, then the data directory's marker
        (:meth:`strom.storage.log_manager.LogManager.close_all`).
        """
        if self._closed:
            return
        self.settle()
        self._flusher.drain()
        end = self.log_end_offset
        changed = (
            end != self._opened_end
            or self.log_start_offset != self._opened_start
            or self.recovery_point != end
            or self.recovered > 0
        )
        if changed:
            self.active.on_inactive()
            if sync:
                self.flush()
            else:  # the recovery point goes into the data directory's checkpoint
                with self._ckpt_lock:
                    self.recovery_point = end
                if self.log_start_offset != self._opened_start:
                    ckpt.write_offset(self.dir / ckpt.LOG_START_OFFSET_FILE,
                                      self.log_start_offset, fsync=False)  # fmt: skip
                # a small log's epochs are rebuilt from its batches at open more cheaply
                # than a file per partition is written here
                if self.size > _SNAPSHOT_MIN_BYTES or self.leader_epochs.path.exists():
                    self.leader_epochs.flush(sync=False)
        # A snapshot saves replaying the headers at the next open; for a small log without
        # producers that replay is cheaper than writing the file.
        if self.producer_state.producers or (changed and self.size > _SNAPSHOT_MIN_BYTES):
            self.producer_state.take_snapshot(end, sync=sync)
        for seg in self._segments:
            seg.close()  # writes the indexes' unwritten entries
        self._deleter.delete_all()
        self._closed = True
        if sync:
            self.mark_clean()

    @property
    def truncations(self) -> int:
        """How many times the log was truncated (a copy of its files must start again)."""
        return self._truncations

    def adopt(self, other: Log) -> None:
        """Become ``other`` (a log just opened from a copy of this one's files in another
        log directory) in place: partitions, fetch sessions and coordinators hold this object,
        so a replica moved between log directories keeps its identity. The high watermark
        and the maintenance hook (not on disk) stay; ``other`` must not be used afterwards."""
        self.settle()
        hw, hook, hw_hook = self._high_watermark, self.on_change, self.on_hw_change
        self.__dict__.update(other.__dict__)
        self._high_watermark, self.on_change = min(hw, self.log_end_offset), hook
        self.on_hw_change = hw_hook
        if hw_hook is not None:
            hw_hook()

    def go_offline(self) -> None:
        """The log directory went offline: refuse appends, and skip every flusher job and
        the clean close from now on (the files are left as they are for the restart's
        recovery; the descriptors are closed by the cache as it needs room)."""
        self.offline = True
        self._closed = True

    def mark_clean(self) -> None:
        """Write the clean-shutdown marker (after everything the log wrote is durable)."""
        (self.dir / ckpt.CLEAN_SHUTDOWN_FILE).touch()

    def delete(self) -> None:
        """Close the files and remove the whole directory."""
        self.close_files()
        shutil.rmtree(self.dir, ignore_errors=True)

    def close_files(self) -> None:
        """Close every file without flushing or marking a clean shutdown (the log is being
        deleted, or was never registered); queued flusher work for this log is skipped from
        now on."""
        self._closed = True
        for seg in self._segments:
            seg.close()
        self._deleter.delete_all()
        self._closed = True
