"""The aborted-transaction index of one segment (Kafka's ``TransactionIndex``).

File ``<baseOffset:020d>.txnindex`` beside the segment's ``.log``: fixed 34-byte entries, big
endian, appended when an ABORT marker lands in that segment, in marker order::

    version int16 (0) | producerId int64 | firstOffset int64 | lastOffset int64
    | lastStableOffset int64

``firstOffset`` is the first offset the aborted transaction wrote to the partition,
``lastOffset`` the offset of its abort marker, ``lastStableOffset`` the partition's LSO right
after the marker. A read_committed Fetch of ``[start, end)`` returns every entry whose range
overlaps it (:meth:`TransactionIndex.collect`), so the client can drop that producer's batches
from ``firstOffset`` until it meets the marker.

Invariants: entries' ``lastOffset`` increase; an entry whose ``lastOffset`` is at or above the
segment's end (after a truncation or a crash) is removed (:meth:`TransactionIndex.truncate_to`),
and the log re-adds those its producer-state replay finds again. The whole file is small and
kept in memory; a torn trailing entry is ignored on load.
"""

from __future__ import annotations

import logging
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from strom.storage import atomic_file, fileio

logger = logging.getLogger(__name__)

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
VERSION = 0


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(VERSION, self.producer_id, self.first_offset, self.last_offset,
                           self.last_stable_offset)  # fmt: skip


class TransactionIndex:
    """Entries of one segment, in memory and appended to its file (created on first use)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: list[AbortedTxn] = []
        self._dirty = False
        self._stale = False  # the file misses entries (an append failed): rewrite it
        if path.exists():
            data = path.read_bytes()
            for pos in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
                version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
                if version != VERSION:
                    break
                self.entries.append(AbortedTxn(pid, first, last, lso))
            if len(data) != len(self.entries) * ENTRY_SIZE:
                self._rewrite()

    def append(self, txn: AbortedTxn) -> None:
        if self.entries and txn.last_offset <= self.entries[-1].last_offset:
            raise ValueError(f"aborted txn at {txn.last_offset} is not after the last entry")
        self.entries.append(txn)
        self._dirty = True
        if self._stale:
            return  # the next flush rewrites the whole file
        try:
            fd = fileio.open_fd(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                fileio.write(fd, txn.encode())
            finally:
                fileio.close(fd)
        except OSError as exc:
            # The marker's batch is already in the log: the entry stays (reads use the
            # entries in memory) and the next flush rewrites the file whole, or fails there,
            # which keeps the recovery point (and so a rebuild after a crash) below it.
            logger.warning("appending to %s failed (%s): rewritten at the next flush",
                           self.path, exc)  # fmt: skip
            self._stale = True

    def collect(self, start: int, end: int) -> list[AbortedTxn]:
        """Entries overlapping ``[start, end)``: lastOffset >= start and firstOffset < end."""
        return [t for t in self.entries if t.last_offset >= start and t.first_offset < end]

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose marker is at or after ``offset``."""
        keep = [t for t in self.entries if t.last_offset < offset]
        if len(keep) != len(self.entries):
            self.entries = keep
            self._rewrite()

    def reset(self) -> None:
        self.entries = []
        self._stale = False
        self.path.unlink(missing_ok=True)

    def _rewrite(self) -> None:
        if not self.entries:
            self.path.unlink(missing_ok=True)
            return
        # fsynced by the next flush (like every entry the index gains)
        atomic_file.replace(self.path, b"".join(t.encode() for t in self.entries), fsync=False)

    def flush(self) -> None:
        if self._stale:
            self._rewrite()
            self._stale = False
        if self._dirty and self.path.exists():
            atomic_file.fsync_path(self.path)
        self._dirty = False
