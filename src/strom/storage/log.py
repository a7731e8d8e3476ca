"""A partition's log: an ordered list of segments plus its checkpoints and producer state.

Directory ``<data_dir>/<topic>-<partition>/`` holds ``<base:020d>.log/.index/.timeindex``
segments (:mod:`strom.storage.segment`), ``<offset:020d>.snapshot`` producer-state snapshots
(:mod:`strom.storage.producer_state`), the checkpoints and the clean-shutdown marker
(:mod:`strom.storage.checkpoint`). Swaps of compacted segments: :mod:`strom.storage.log_recovery`.

Invariants: segments' offset ranges are disjoint and ascending; only the last (active) segment
is written; ``log_start_offset <= high_watermark <= log_end_offset``; an ``append`` either
writes all its batches or none (everything is validated before the first write).
"""

from __future__ import annotations

import bisect
import logging
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from strom.clock import Clock
from strom.protocol import record_batch as rb
from strom.storage import checkpoint as ckpt
from strom.storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    StorageError,
)
from strom.storage.log_config import LogConfig
from strom.storage.log_recovery import CLEANED_SUFFIX, SWAP_SUFFIX, complete_swaps, load_segments
from strom.storage.producer_state import (
    DEFAULT_EXPIRATION_MS,
    ProducerEntry,
    ProducerStateManager,
)
from strom.storage.segment import LogSegment

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AppendResult:
    base_offset: int
    last_offset: int
    log_append_time: int  # -1 for CreateTime
    log_start_offset: int
    record_count: int
    duplicate: bool = False


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
                 producer_id_expiration_ms: int = DEFAULT_EXPIRATION_MS) -> None:  # fmt: skip
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

    # --- opening ---------------------------------------------------------------------------

    @classmethod
    def open(cls, dir: Path, config: LogConfig, clock: Clock, *,
             producer_id_expiration_ms: int = DEFAULT_EXPIRATION_MS) -> Log:  # fmt: skip
        """Open (creating if needed) and recover the log in ``dir``.

        ``producer_id_expiration_ms`` is the broker's ``producer.id.expiration.ms``.
        """
        dir.mkdir(parents=True, exist_ok=True)
        log = cls(dir, config, clock, producer_id_expiration_ms)
        now = clock.time_ms()
        complete_swaps(dir, config, now)
        marker = dir / ckpt.CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        stored_start = ckpt.read_offset(dir / ckpt.LOG_START_OFFSET_FILE, 0)
        rp = ckpt.read_offset(dir / ckpt.RECOVERY_POINT_FILE, 0)
        segments = load_segments(dir, config, now, clean, rp)
        if not segments:
            segments = [LogSegment.create(dir, stored_start, config, now)]
        log._set_segments(segments)
        log.log_start_offset = max(stored_start, segments[0].base_offset)
        log._high_watermark = log.log_end_offset
        log._rebuild_producer_state()
        if not clean:
            log.flush()
        else:
            log.recovery_point = log.log_end_offset
        marker.unlink(missing_ok=True)
        return log

    def _set_segments(self, segments: list[LogSegment]) -> None:
        self._segments = segments
        self._bases = [s.base_offset for s in segments]

    def _rebuild_producer_state(self) -> None:
        now = self.clock.time_ms()
        start = self.producer_state.load_latest(self.log_end_offset, now)
        start = self.log_start_offset if start is None else start
        for seg in self._segments:
            if seg.next_offset <= start:
                continue
            for _pos, header in seg.iter_headers(0):
                if header.base_offset >= start and header.has_producer_id:
                    self.producer_state.update(header)
        self.producer_state.remove_expired(now)

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
        self._high_watermark = max(self.log_start_offset, min(value, self.log_end_offset))

    @property
    def size(self) -> int:
        return sum(s.size for s in self._segments)

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        for seg in self._segments:
            seg.index_interval_bytes = config.index_interval_bytes

    # --- append ----------------------------------------------------------------------------

    def append(
        self, records: bytes | bytearray | memoryview, *, leader_epoch: int = 0,
        assign_offsets: bool = True,
    ) -> AppendResult:  # fmt: skip
        """Validate, assign offsets to and store the batches in ``records`` (all or nothing).

        ``assign_offsets=False`` (replication, internal copies) keeps the batches' offsets,
        which must be above the log end offset, and skips producer checks and timestamp rules.
        """
        buf = bytearray(records)
        try:
            headers = [h for h, _view in rb.iter_batches(buf)]
        except rb.CorruptRecordError as exc:
            raise CorruptRecordError(str(exc)) from exc
        if not headers:
            raise InvalidRecordError("no record batches")
        positions = [0]
        for h in headers[:-1]:
            positions.append(positions[-1] + h.size)
        now = self.clock.time_ms()
        pending: dict[int, ProducerEntry] = {}
        next_offset = self.log_end_offset
        for header, pos in zip(headers, positions, strict=True):
            self._validate(header, memoryview(buf)[pos : pos + header.size], now, assign_offsets)
            if assign_offsets and header.has_producer_id:
                dup = self.producer_state.check(header, pending)
                if dup is not None:
                    return AppendResult(dup.first_offset, dup.last_offset, -1,
                                        self.log_start_offset, header.record_count, True)  # fmt: skip
            elif not assign_offsets and header.base_offset < next_offset:
                raise InvalidRecordError(
                    f"batch offset {header.base_offset} is below the log end offset {next_offset}"
                )
            next_offset = next_offset + header.last_offset_delta + 1
        append_time = -1
        if assign_offsets:
            if self.config.timestamp_type == rb.LOG_APPEND_TIME:
                append_time = now
            offset = self.log_end_offset
            for i, pos in enumerate(positions):
                rb.patch_base_offset(buf, pos, offset)
                rb.patch_partition_leader_epoch(buf, pos, leader_epoch)
                if append_time >= 0:
                    rb.set_log_append_time(buf, pos, append_time)
                headers[i] = rb.parse_header(buf, pos)
                offset = headers[i].next_offset
        count = 0
        for header, pos in zip(headers, positions, strict=True):
            self._maybe_roll(header, now)
            self.active.append(memoryview(buf)[pos : pos + header.size], header)
            self.producer_state.update(header, pending)
            count += header.record_count
        self._unflushed_messages += count
        if self._unflushed_messages >= self.config.flush_messages:
            self.flush()
        return AppendResult(headers[0].base_offset, headers[-1].last_offset, append_time,
                            self.log_start_offset, count)  # fmt: skip

    def _validate(self, header: rb.BatchHeader, batch: memoryview, now: int,
                  assign_offsets: bool) -> None:  # fmt: skip
        if header.size > self.config.max_message_bytes:
            raise RecordTooLargeError(
                f"batch of {header.size} bytes exceeds max.message.bytes "
                f"{self.config.max_message_bytes}"
            )
        if not rb.verify_crc(batch):
            raise CorruptRecordError(f"CRC mismatch in batch at offset {header.base_offset}")
        if header.record_count < 1 or header.last_offset_delta < 0:
            raise InvalidRecordError("a batch must hold at least one record")
        if assign_offsets and header.record_count != header.last_offset_delta + 1:
            raise InvalidRecordError(
                f"record count {header.record_count} does not match lastOffsetDelta "
                f"{header.last_offset_delta}"
            )
        if header.record_count > header.last_offset_delta + 1:
            raise InvalidRecordError("more records than the batch's offset range")
        if assign_offsets and self.config.compact and not header.is_control:
            # Kafka rejects null keys in compacted topics; needs the records (compacted only)
            try:
                keys = [r.key for r in rb.decode_records(batch)]
            except rb.CorruptRecordError as exc:
                raise CorruptRecordError(str(exc)) from exc
            if any(k is None for k in keys):
                raise InvalidRecordError("compacted topic does not accept records with a null key")
        if assign_offsets and self.config.timestamp_type == rb.CREATE_TIME:
            cfg = self.config
            if header.max_timestamp - now > cfg.message_timestamp_after_max_ms or (
                now - min(header.base_timestamp, header.max_timestamp)
                > cfg.message_timestamp_before_max_ms
            ):
                raise InvalidTimestampError(
                    f"timestamp {header.max_timestamp} is out of range (now {now})"
                )

    def _maybe_roll(self, header: rb.BatchHeader, now: int) -> None:
        seg = self.active
        cfg = self.config
        if seg.size > 0 and (
            seg.size + header.size > cfg.segment_bytes
            or now - seg.created_ms > cfg.segment_ms - cfg.segment_jitter_ms
            or seg.index.is_full
            or not seg.fits(header)
        ):
            self.roll(header.base_offset)
        elif not seg.fits(header):
            raise InvalidRecordError(f"batch offsets {header.base_offset} do not fit {seg}")

    def roll(self, base_offset: int | None = None) -> LogSegment:
        """Close the active segment for writes (fsynced) and start a new one; no-op if empty."""
        old = self.active
        if old.size == 0:
            return old
        base = self.log_end_offset if base_offset is None else base_offset
        old.on_inactive()
        old.flush()
        seg = LogSegment.create(self.dir, base, self.config, self.clock.time_ms())
        self._segments.append(seg)
        self._bases.append(base)
        self.producer_state.take_snapshot(base)
        self.recovery_point = old.next_offset
        ckpt.write_offset(self.dir / ckpt.RECOVERY_POINT_FILE, self.recovery_point)
        logger.info("rolled %s at offset %d", self.dir.name, base)
        return seg

    # --- read ------------------------------------------------------------------------------

    def _check_range(self, offset: int) -> None:
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self.log_start_offset}, {self.log_end_offset}]"
            )

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_batch: bool = True) -> ReadResult:  # fmt: skip
        """Whole batches from the one containing ``offset``, see module and GUIDE §6.4."""
        self._check_range(offset)
        i = max(0, bisect.bisect_right(self._bases, offset) - 1)
        for seg in self._segments[i:]:
            found = seg.find_batch(offset)
            if found is None:
                continue
            pos, header = found
            data = seg.read(pos, max_bytes, max_offset, min_one_batch)
            return self._result(data, header.base_offset if data else offset)
        return self._result(b"", offset)

    def _result(self, data: bytes, first: int) -> ReadResult:
        return ReadResult(data, first, self._high_watermark, self.log_start_offset,
                          self.log_end_offset)  # fmt: skip

    def read_slices(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
                    min_one_batch: bool = True) -> list[tuple[int, int, int]]:  # fmt: skip
        """Like :meth:`read` but as ``(fd, position, length)`` regions (for sendfile)."""
        self._check_range(offset)
        i = max(0, bisect.bisect_right(self._bases, offset) - 1)
        for seg in self._segments[i:]:
            found = seg.find_batch(offset)
            if found is not None:
                length = len(seg.read(found[0], max_bytes, max_offset, min_one_batch))
                return [(seg.fd, found[0], length)] if length else []
        return []

    # --- timestamps ------------------------------------------------------------------------

    def offset_for_timestamp(self, ts: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``ts``, or None."""
        for seg in self._segments:
            if seg.max_timestamp < ts:
                continue
            start = seg.time_index.lookup(ts)
            found = seg.find_batch(max(self.log_start_offset, -1 if start is None else start + 1))
            if found is None:
                continue
            for _pos, header in seg.iter_headers(found[0]):
                if header.max_timestamp < ts:
                    continue
                for rec in rb.decode_records(seg.read_at(_pos, header.size)):
                    if rec.timestamp >= ts and rec.offset >= self.log_start_offset:
                        return rec.offset, rec.timestamp
        return None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the record with the largest timestamp, or None."""
        best = max(self._segments, key=lambda s: s.max_timestamp)
        if best.max_timestamp < 0:
            return None
        found = best.find_batch(best.offset_of_max_timestamp)
        if found is None:
            return None
        pos, header = found
        for rec in rb.decode_records(best.read_at(pos, header.size)):
            if rec.timestamp == best.max_timestamp:
                return rec.offset, rec.timestamp
        return header.last_offset, best.max_timestamp

    # --- deletion --------------------------------------------------------------------------

    def delete_records_before(self, offset: int) -> int:
        """Move the log start offset to ``offset`` (persisted); returns the new start."""
        if offset > self._high_watermark or offset < 0:
            raise OffsetOutOfRangeError(
                f"cannot delete before {offset}: high watermark is {self._high_watermark}"
            )
        if offset <= self.log_start_offset:
            return self.log_start_offset
        self.log_start_offset = offset
        if offset >= self.log_end_offset and self.active.size > 0:
            self.roll()
        doomed = 0
        while doomed + 1 < len(self._segments) and self._bases[doomed + 1] <= offset:
            doomed += 1
        self._delete_oldest(doomed)
        return self.log_start_offset

    def enforce_retention(self) -> int:
        """Delete old inactive segments by retention.ms / retention.bytes; returns how many."""
        if not self.config.delete:
            return 0
        now = self.clock.time_ms()
        cfg = self.config
        candidates = [s for s in self._segments[:-1] if s.next_offset <= self._high_watermark]
        doomed = 0
        if cfg.retention_ms >= 0:
            while doomed < len(candidates) and (
                now - candidates[doomed].max_timestamp > cfg.retention_ms
            ):
                doomed += 1
        if cfg.retention_bytes >= 0:
            excess = self.size - cfg.retention_bytes
            for seg in self._segments[:doomed]:
                excess -= seg.size
            while doomed < len(candidates) and excess - candidates[doomed].size >= 0:
                excess -= candidates[doomed].size
                doomed += 1
        self._delete_oldest(doomed)
        return doomed

    def _delete_oldest(self, count: int) -> None:
        if count <= 0:
            return  # runs every maintenance tick: no checkpoint fsync when nothing changed
        for seg in self._segments[:count]:
            logger.info("deleting segment %s", seg.path)
            seg.delete()
        if count:
            self._set_segments(self._segments[count:])
        self.log_start_offset = max(self.log_start_offset, self._segments[0].base_offset)
        ckpt.write_offset(self.dir / ckpt.LOG_START_OFFSET_FILE, self.log_start_offset)

    def truncate_to(self, offset: int) -> None:
        """Remove everything at or after ``offset`` (whole batches)."""
        if offset >= self.log_end_offset:
            return
        keep = [s for s in self._segments if s.base_offset < offset]
        for seg in self._segments[len(keep) :]:
            seg.delete()
        if not keep:
            keep = [LogSegment.create(self.dir, offset, self.config, self.clock.time_ms())]
            self.log_start_offset = offset
            ckpt.write_offset(self.dir / ckpt.LOG_START_OFFSET_FILE, offset)
        else:
            keep[-1].truncate_to(offset)
        self._set_segments(keep)
        self._high_watermark = min(self._high_watermark, self.log_end_offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        ckpt.write_offset(self.dir / ckpt.RECOVERY_POINT_FILE, self.recovery_point)
        self._rebuild_producer_state()

    # --- compaction support ----------------------------------------------------------------

    def create_cleaned_segment(self, base_offset: int) -> LogSegment:
        """An empty ``.cleaned`` segment for the compactor to fill with ``LogSegment.append``."""
        return LogSegment.create(self.dir, base_offset, self.config, self.clock.time_ms(),
                                 CLEANED_SUFFIX)  # fmt: skip

    def replace_segments(self, old: Sequence[LogSegment], new: LogSegment) -> None:
        """Atomically swap contiguous inactive segments ``old`` for the cleaned ``new``.

        Crash-safe: see :mod:`strom.storage.log_recovery`.
        """
        idx = [self._segments.index(s) for s in old]
        if not idx or idx != list(range(idx[0], idx[0] + len(idx))):
            raise StorageError("segments to replace must be contiguous segments of this log")
        if idx[-1] == len(self._segments) - 1:
            raise StorageError("the active segment cannot be replaced")
        if new.suffix != CLEANED_SUFFIX or new.base_offset != old[0].base_offset:
            raise StorageError("replacement must be a cleaned segment with the first base")
        new.on_inactive()
        new.flush()
        new.rename_suffix(SWAP_SUFFIX)
        for seg in old:
            seg.delete()
        new.rename_suffix("")
        self._set_segments(self._segments[: idx[0]] + [new] + self._segments[idx[-1] + 1 :])

    # --- lifecycle -------------------------------------------------------------------------

    def remove_expired_producers(self) -> int:
        """Forget producers idle for ``producer.id.expiration.ms`` (none with an open
        transaction); the next snapshot leaves them out. Returns how many."""
        removed = self.producer_state.remove_expired(self.clock.time_ms())
        if removed:
            logger.info("expired %d producer ids of %s", removed, self.dir.name)
        return removed

    def maybe_roll_by_time(self) -> None:
        seg = self.active
        cfg = self.config
        if seg.size > 0 and self.clock.time_ms() - seg.created_ms > cfg.segment_ms:
            self.roll()

    def maybe_flush_by_time(self) -> None:
        if self._unflushed_messages and (
            (self.clock.monotonic() - self._last_flush) * 1000 >= self.config.flush_ms
        ):
            self.flush()

    def flush(self) -> None:
        """fsync the active segment and move the recovery point to the log end offset."""
        self.active.flush()
        self.recovery_point = self.log_end_offset
        ckpt.write_offset(self.dir / ckpt.RECOVERY_POINT_FILE, self.recovery_point)
        ckpt.write_offset(self.dir / ckpt.LOG_START_OFFSET_FILE, self.log_start_offset)
        self._unflushed_messages = 0
        self._last_flush = self.clock.monotonic()

    def close(self) -> None:
        """Flush, snapshot producer state, close files and mark the shutdown clean."""
        if self._closed:
            return
        self.active.on_inactive()
        self.flush()
        self.producer_state.take_snapshot(self.log_end_offset)
        for seg in self._segments:
            seg.close()
        (self.dir / ckpt.CLEAN_SHUTDOWN_FILE).touch()
        self._closed = True

    def delete(self) -> None:
        """Close the files and remove the whole directory."""
        for seg in self._segments:
            seg.close()
        self._closed = True
        shutil.rmtree(self.dir, ignore_errors=True)
