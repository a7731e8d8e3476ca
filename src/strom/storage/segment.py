"""One log segment: a ``.log`` file of record batches plus its offset and time indexes.

On-disk format of ``<baseOffset:020d>.log``: record batches (magic 2) back to back, exactly as
received except baseOffset / partitionLeaderEpoch / the LogAppendTime rewrite. No header, no
padding. Invariants: batches' offsets strictly increase and are ``>= base_offset``; every
relative offset fits an int32. ``.index`` and ``.timeindex`` are described in
:mod:`strom.storage.index` and :mod:`strom.storage.time_index`; both can be rebuilt from the
``.log`` at any time (:meth:`LogSegment.recover`). ``.txnindex``, the aborted transactions
whose markers are in this segment (:mod:`strom.storage.txn_index`), needs producer state to
rebuild: the log re-adds entries when it replays the batches after a crash.

A segment being built by the compactor carries a suffix (``.cleaned``, then ``.swap``) on all
three file names until :class:`strom.storage.log.Log` swaps it in; a removed segment waiting
for ``file.delete.delay.ms`` carries ``.deleted`` (:mod:`strom.storage.deferred_delete`).

Descriptors: a segment holds at most one, its ``.log``'s, and only while it is in the
process-wide cache :data:`strom.storage.file_handles.HANDLES` (opened on demand, closed when
least recently used). Every use of it goes through :meth:`LogSegment.open_fd` (or
:meth:`LogSegment.dup_fd` for a descriptor that outlives the call), which pins it so that no
other thread's eviction closes it meanwhile. The indexes hold none (:mod:`strom.storage.abstract_index`).
"""

from __future__ import annotations

import errno
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from strom.protocol.record_batch import (
    LOG_OVERHEAD,
    MAGIC,
    BatchHeader,
    verify_crc,
)
from strom.storage import fileio
from strom.storage.abstract_index import CorruptIndexError
from strom.storage.errors import DiskError
from strom.storage.file_handles import HANDLES
from strom.storage.flush_stats import FLUSH_STATS
from strom.storage.index import OffsetIndex
from strom.storage.log_config import LogConfig
from strom.storage.read_path import SEEK_CHUNK, find_batch, read_batches, scan_headers
from strom.storage.time_index import TimeIndex
from strom.storage.txn_index import TransactionIndex

_INT32_MAX = 2**31 - 1


def segment_path(dir: Path, base_offset: int, ext: str, suffix: str = "") -> Path:
    return dir / f"{base_offset:020d}{ext}{suffix}"


class LogSegment:
    """A segment's files and in-memory summary (size, next offset, max timestamp)."""

    def __init__(self, dir: Path, base_offset: int, config: LogConfig, created_ms: int,
                 suffix: str = "") -> None:  # fmt: skip
        self.dir = dir
        self.base_offset = base_offset
        self.suffix = suffix
        self.path = segment_path(dir, base_offset, ".log", suffix)
        self._file = HANDLES.create(self.path)
        self.size = HANDLES.size_of(self._file)
        self.index_interval_bytes = config.index_interval_bytes
        self._index_bytes = config.segment_index_bytes
        self.index: OffsetIndex
        self.time_index: TimeIndex
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset  # last offset of the batch holding it
        self.created_ms = created_ms
        self._bytes_since_index = 0
        self._max_ts_indexed = -1
        self.txn_index = TransactionIndex(self._ipath(".txnindex"))
        self._writes = 0  # bumped by every write; flush() records the count it made durable
        self._flushed_writes = 0

    # --- opening ---------------------------------------------------------------------------

    @classmethod
    def create(cls, dir: Path, base_offset: int, config: LogConfig, now_ms: int,
               suffix: str = "") -> LogSegment:  # fmt: skip
        """A new empty segment (any old files of that name are emptied)."""
        seg = cls(dir, base_offset, config, now_ms, suffix)
        if seg.size:
            with seg.open_fd() as fd:
                fileio.ftruncate(fd, 0)
        seg.size = 0
        seg.index = OffsetIndex(seg._ipath(".index"), base_offset, seg._index_bytes)
        seg.index.reset()
        seg.time_index = TimeIndex(seg._ipath(".timeindex"), base_offset)
        seg.time_index.reset()
        seg.txn_index.reset()
        return seg

    @classmethod
    def open(cls, dir: Path, base_offset: int, config: LogConfig, now_ms: int) -> LogSegment:
        """Open an existing segment trusting its log; indexes are rebuilt if missing/corrupt.

        A missing index is an empty one when the log is too short to have needed an entry
        (indexes are only written once they have entries, see :mod:`strom.storage.index`)."""
        seg = cls(dir, base_offset, config, now_ms)
        try:
            ipath, tpath = seg._ipath(".index"), seg._ipath(".timeindex")
            if seg.size <= seg.index_interval_bytes and not ipath.exists():
                seg.index = OffsetIndex(ipath, base_offset, seg._index_bytes)
            else:
                seg.index = OffsetIndex.load(ipath, base_offset, seg._index_bytes,
                                             max(seg.size, 1))  # fmt: skip
            if seg.size <= seg.index_interval_bytes and not tpath.exists():
                seg.time_index = TimeIndex(tpath, base_offset)  # the scan below fills it in
            else:
                seg.time_index = TimeIndex.load(tpath, base_offset)
            seg._load_summary()
        except CorruptIndexError:
            seg.recover()
        return seg

    def _ipath(self, ext: str) -> Path:
        return segment_path(self.dir, self.base_offset, ext, self.suffix)

    def _load_summary(self) -> None:
        """Max timestamp from the time index; next offset (and any newer maximum) from a short
        scan after the last offset index entry."""
        entry = self.time_index.last_entry
        if entry is not None:
            self.max_timestamp, self.offset_of_max_timestamp = entry
            self._max_ts_indexed = entry[0]
        first = next(self.iter_headers(0), None)
        if first is not None:
            self.created_ms = first[1].max_timestamp
        _, pos = self.index.lookup(2**63 - 1)
        for _pos, header in self.iter_headers(pos):
            self.next_offset = header.next_offset
            self._track_timestamp(header)
        self._bytes_since_index = self.size - pos

    def recover(self) -> int:
        """Validate every batch, truncate at the first bad one, rebuild both indexes.

        Returns the number of bytes truncated. A batch is bad when it is truncated, has a wrong
        magic / length / CRC, or its offsets do not increase.
        """
        for ext in (".index", ".timeindex"):  # rebuilt in memory, written at the next flush
            self._ipath(ext).unlink(missing_ok=True)
        self.index = OffsetIndex(self._ipath(".index"), self.base_offset, self._index_bytes)
        self.time_index = TimeIndex(self._ipath(".timeindex"), self.base_offset)
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = self.base_offset
        self._bytes_since_index = 0
        self._max_ts_indexed = -1
        self._writes += 1  # indexes rewritten, and the data's durability is unknown
        valid_end = 0
        size = self.size
        with self.open_fd() as fd:
            for pos, header, data in read_batches(fd, 0, size):
                if (
                    header.magic != MAGIC
                    or header.base_offset < self.next_offset
                    or header.last_offset_delta < 0
                    or header.last_offset - self.base_offset > _INT32_MAX
                    or not verify_crc(data)
                ):
                    break
                self._index_batch(header, pos)
                self.next_offset = header.next_offset
                valid_end = pos + header.size
            truncated = size - valid_end
            if truncated:
                fileio.ftruncate(fd, valid_end)
        if truncated:
            self.size = valid_end
            self.txn_index.truncate_to(self.next_offset)
        first = next(self.iter_headers(0), None)
        if first is not None:
            self.created_ms = first[1].max_timestamp
        return truncated

    # --- writing ---------------------------------------------------------------------------

    def _track_timestamp(self, header: BatchHeader) -> None:
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = header.last_offset

    def _index_batch(self, header: BatchHeader, position: int) -> None:
        """Account for a recovered batch (:meth:`append` does the same inline)."""
        self._track_timestamp(header)
        if self._bytes_since_index > self.index_interval_bytes:
            self._add_index_entries(header.last_offset, position)
        self._bytes_since_index += header.size

    def _add_index_entries(self, last_offset: int, position: int) -> None:
        """An offset index entry for the batch at ``position``, and a time index entry when
        the segment's max timestamp moved since the last one."""
        self.index.append(last_offset, position)
        if self.max_timestamp > self._max_ts_indexed:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self._max_ts_indexed = self.max_timestamp
        self._bytes_since_index = 0

    def append(self, batch: bytes | bytearray | memoryview, header: BatchHeader,
               head: bytes | None = None) -> None:  # fmt: skip
        """Write one whole batch at the end of the ``.log`` and index it (every writer: the
        log's appends, the compactor's ``.cleaned`` segments). ``header`` is the batch's header
        as stored, its offsets final. With ``head`` (that header packed), the batch's first
        ``len(head)`` bytes are replaced by it in the same ``pwritev``: a leader's assigned
        offsets reach the file without the records being copied. :meth:`write_at` then
        :meth:`account` (inline), the two halves a slow disk's append runs on two threads."""
        # write_at() and account() inline (every Produce gets here: two calls less); keep
        # the three in step
        f = self._file
        position = self.size
        size = len(batch)
        fd = HANDLES.acquire(f)
        try:
            if head is None:
                written = fileio.pwrite(fd, batch, position)
            else:
                written = fileio.pwritev(fd, (head, memoryview(batch)[len(head) :]), position)
            if written != size:  # the file system ran out of space part of the way
                raise OSError(errno.ENOSPC, f"short write to {self.path}: {written} of "
                                            f"{size} bytes")  # fmt: skip
        except OSError as exc:
            undone = self._undo_write(fd, position)
            raise DiskError(f"writing {size} bytes to {self.path} failed: {exc}", exc,
                            undone=undone) from exc  # fmt: skip
        finally:
            HANDLES.release(f)
        last_offset = header.base_offset + header.last_offset_delta
        max_ts = header.max_timestamp
        if max_ts > self.max_timestamp:
            self.max_timestamp = max_ts
            self.offset_of_max_timestamp = last_offset
        if self._bytes_since_index > self.index_interval_bytes:
            self._add_index_entries(last_offset, position)
        self._bytes_since_index += size
        self.size = position + size
        self.next_offset = last_offset + 1
        self._writes += 1

    def write_at(self, batch: bytes | bytearray | memoryview, head: bytes | None,
                 position: int) -> None:  # fmt: skip
        """Write ``batch`` (its first bytes replaced by ``head``) at ``position``, the end of
        the file, and nothing else: :attr:`size` and the indexes do not move (:meth:`account`
        does that), so readers, which stop at :attr:`size`, never see the bytes before they
        are all written. Safe on a writer thread while the owner's thread reads the segment
        (the descriptor is pinned). A failed or short write is cut off again before the
        :class:`DiskError` is raised (``undone`` says whether that worked)."""
        f = self._file
        size = len(batch)
        fd = HANDLES.acquire(f)
        try:
            if head is None:
                written = fileio.pwrite(fd, batch, position)
            else:
                written = fileio.pwritev(fd, (head, memoryview(batch)[len(head) :]), position)
            if written != size:  # the file system ran out of space part of the way
                raise OSError(errno.ENOSPC, f"short write to {self.path}: {written} of "
                                            f"{size} bytes")  # fmt: skip
        except OSError as exc:
            undone = self._undo_write(fd, position)
            raise DiskError(f"writing {size} bytes to {self.path} failed: {exc}", exc,
                            undone=undone) from exc  # fmt: skip
        finally:
            HANDLES.release(f)

    def account(self, header: BatchHeader, position: int, size: int) -> None:
        """The batch ``header`` (``size`` bytes) is written at ``position``, the end of the
        file: index it, and move :attr:`size` and :attr:`next_offset` over it (from here on
        readers see it). :meth:`append` has the same lines inline."""
        last_offset = header.base_offset + header.last_offset_delta
        max_ts = header.max_timestamp
        if max_ts > self.max_timestamp:
            self.max_timestamp = max_ts
            self.offset_of_max_timestamp = last_offset
        if self._bytes_since_index > self.index_interval_bytes:
            self._add_index_entries(last_offset, position)
        self._bytes_since_index += size
        self.size = position + size
        self.next_offset = last_offset + 1
        self._writes += 1

    def _undo_write(self, fd: int, position: int) -> bool:
        """A write at ``position`` failed: cut whatever part of it reached the file, so the
        file ends where :attr:`size` says (nothing half-written is ever read, or found by
        recovery as a batch). False when that failed too: the file's tail is then unknown and
        only recovery (which truncates at the first bad batch) may trust it again."""
        try:
            fileio.ftruncate(fd, position)
        except OSError:
            return False
        return True

    def fits(self, header: BatchHeader) -> bool:
        """True when the batch's offsets are expressible relative to this segment's base."""
        return 0 <= header.last_offset - self.base_offset <= _INT32_MAX

    def on_inactive(self) -> None:
        """Write the final time index entry (the segment's max timestamp)."""
        if self.max_timestamp > self._max_ts_indexed:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self._max_ts_indexed = self.max_timestamp
            self._writes += 1

    # --- reading ---------------------------------------------------------------------------

    def iter_headers(self, position: int = 0,
                     chunk: int = SEEK_CHUNK) -> Iterator[tuple[int, BatchHeader]]:  # fmt: skip
        """Yield ``(position, header)`` of each batch from ``position`` on (headers only)."""
        with self.open_fd() as fd:
            yield from scan_headers(fd, position, self.size, chunk)

    def batches(self) -> Iterator[tuple[BatchHeader, bytes]]:
        """Every whole batch, in order (for the compactor and producer-state rebuilds)."""
        with self.open_fd() as fd:
            for _pos, header, data in read_batches(fd, 0, self.size):
                yield header, data

    def find_batch(self, offset: int) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset >= ``offset``."""
        return find_batch(self, offset, self.size)

    def read_at(self, position: int, length: int) -> bytes:
        with self.open_fd() as fd:
            return fileio.pread(fd, length, position)

    # --- the .log descriptor -----------------------------------------------------------------

    @contextmanager
    def open_fd(self) -> Iterator[int]:
        """The .log's descriptor, open (and pinned in the cache) for the ``with`` block."""
        f = self._file
        fd = HANDLES.acquire(f)
        try:
            yield fd
        finally:
            HANDLES.release(f)

    def dup_fd(self) -> int:
        """A descriptor of the .log of the caller's own (it closes it): it stays valid whatever
        happens to the segment (retention, a compaction swap) or to the cache."""
        return HANDLES.dup(self._file)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` (or :meth:`delete`) ran."""
        return self._file.closed

    @property
    def fd(self) -> int:
        """The .log's descriptor now (-1 once closed). Only valid until the next descriptor is
        opened, on any thread: prefer :meth:`open_fd` or :meth:`dup_fd`."""
        if self._file.closed:
            return -1
        with self.open_fd() as fd:
            return fd

    # --- truncation, lifecycle --------------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset >= ``offset``; returns bytes removed."""
        found = self.find_batch(offset)
        if found is None:
            return 0
        position, _ = found
        removed = self.size - position
        with self.open_fd() as fd:
            fileio.ftruncate(fd, position)
        self.size = position
        self._writes += 1
        self.index.truncate_to_position(position)
        self.time_index.truncate_to_offset(offset)
        self.txn_index.truncate_to(offset)
        self.recover()  # recompute summary + indexes of what remains (short: one segment)
        return removed

    @property
    def unflushed(self) -> bool:
        """True when something was written (or truncated) since the last :meth:`flush`."""
        return self._writes != self._flushed_writes

    def flush(self) -> None:
        """fsync the ``.log`` and write + fsync the indexes' entries. Safe on another thread
        than the writer's (the flusher's): what was written before the call is durable when it
        returns."""
        writes = self._writes
        started = time.perf_counter()
        try:
            with self.open_fd() as fd:
                try:
                    fileio.fsync(fd)
                except OSError as exc:
                    # After a failed fsync the kernel may have dropped the dirty pages it could
                    # not write: what the file holds is unknown (never undone, never retried).
                    raise DiskError(f"fsync of {self.path} failed: {exc}", exc,
                                    undone=False) from exc  # fmt: skip
            self.index.flush()
            self.time_index.flush()
            self.txn_index.flush()
        except (OSError, ValueError):  # ValueError: the descriptor cache's "closed"
            if self.closed:  # closed (deleted) meanwhile: nothing left to make durable
                return
            raise
        FLUSH_STATS.record(time.perf_counter() - started)
        self._flushed_writes = writes

    def close(self) -> None:
        """Close the .log (for good) and write the indexes' unwritten entries."""
        if self._file.closed:
            return
        HANDLES.close(self._file)
        if self.size <= self.index_interval_bytes and not self._ipath(".timeindex").exists():
            return  # a small segment's indexes are rebuilt by the short scan at open
        self.index.close()
        self.time_index.close()

    def file_paths(self) -> list[Path]:
        return [self.path, self._ipath(".index"), self._ipath(".timeindex"),
                self._ipath(".txnindex")]  # fmt: skip

    def delete(self) -> None:
        if not self._file.closed:
            HANDLES.close(self._file)  # the indexes' unwritten entries are not worth writing
        for path in self.file_paths():
            path.unlink(missing_ok=True)

    def rename_suffix(self, suffix: str, *, log_first: bool = False) -> None:
        """Rename the three files to carry ``suffix``: index files first and the .log last
        (a swap's commit point), or the .log first (a deletion's)."""
        if log_first:
            exts: tuple[str, ...] = (".log", ".index", ".timeindex", ".txnindex")
        else:
            exts = (".index", ".timeindex", ".txnindex", ".log")
        for ext in exts:
            src = segment_path(self.dir, self.base_offset, ext, self.suffix)
            dst = segment_path(self.dir, self.base_offset, ext, suffix)
            if ext == ".log":
                HANDLES.rename(self._file, dst)
            elif src.exists():
                fileio.replace(src, dst)
        self.suffix = suffix
        self.path = segment_path(self.dir, self.base_offset, ".log", suffix)
        self.index.path = self._ipath(".index")
        self.time_index.path = self._ipath(".timeindex")
        self.txn_index.path = self._ipath(".txnindex")

    def __repr__(self) -> str:
        return f"LogSegment({self.path.name}, size={self.size}, next={self.next_offset})"


__all__ = ["LOG_OVERHEAD", "LogSegment", "segment_path"]
