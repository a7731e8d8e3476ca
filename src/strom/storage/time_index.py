"""Sparse time index of one segment (Kafka's ``.timeindex`` file).

On-disk format: a flat array of 12-byte big-endian entries, no header::

    timestamp      int64   (largest timestamp seen in the segment so far)
    relativeOffset int32   (last offset of the batch that holds that timestamp)

Invariant used by :meth:`TimeIndex.lookup`: for an entry ``(T, o)`` every record of the
segment before the next entry's offset has timestamp ``<= T`` (T is a running maximum).
Timestamps and offsets strictly increase. Entries are written alongside offset index entries
(when the maximum moved) and once more when the segment becomes inactive (roll / close), so
the last entry carries the segment's max timestamp and where it is. Like the offset index it
holds no file descriptor: entries reach the file at flush / close (see :mod:`.index`).
"""

from __future__ import annotations

import bisect
import struct
from array import array
from pathlib import Path

from strom.storage.index import (
    CorruptIndexError,
    read_index_file,
    truncate_index_file,
    write_index_tail,
)

_ENTRY = struct.Struct(">qi")
ENTRY_SIZE = _ENTRY.size


class TimeIndex:
    """Maps timestamps to a safe offset to start scanning from, for one segment."""

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._timestamps: array[int] = array("q")
        self._offsets: array[int] = array("q")
        self._written = 0  # entries already in the file

    @classmethod
    def load(cls, path: Path, base_offset: int) -> TimeIndex:
        """Read and sanity-check an existing file; raises :class:`CorruptIndexError`."""
        index = cls(path, base_offset)
        data = read_index_file(path, ENTRY_SIZE)
        for ts, rel in _ENTRY.iter_unpack(data):
            if index._timestamps and (
                ts <= index._timestamps[-1] or base_offset + rel <= index._offsets[-1]
            ):
                raise CorruptIndexError(f"{path}: entries out of order")
            index._timestamps.append(ts)
            index._offsets.append(base_offset + rel)
        index._written = len(index._offsets)
        return index

    def __len__(self) -> int:
        return len(self._timestamps)

    @property
    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the last entry, or None."""
        if not self._timestamps:
            return None
        return self._timestamps[-1], self._offsets[-1]

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add ``(timestamp, offset)`` when both advance past the last entry."""
        if self._timestamps and (timestamp <= self._timestamps[-1] or offset <= self._offsets[-1]):
            return
        self._timestamps.append(timestamp)
        self._offsets.append(offset)

    def lookup(self, timestamp: int) -> int | None:
        """Offset of the last entry with timestamp < ``timestamp``: no record at or before it
        (nor before the next entry) reaches ``timestamp``. None: start at the segment base."""
        i = bisect.bisect_left(self._timestamps, timestamp) - 1
        return None if i < 0 else self._offsets[i]

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries whose offset is >= ``offset``."""
        keep = bisect.bisect_left(self._offsets, offset)
        del self._timestamps[keep:]
        del self._offsets[keep:]
        if keep < self._written:
            self._written = keep
            truncate_index_file(self.path, keep * ENTRY_SIZE)

    def reset(self) -> None:
        """Forget every entry and empty the file (if one exists)."""
        del self._timestamps[:]
        del self._offsets[:]
        self._written = 0
        truncate_index_file(self.path, 0)

    def _write(self, fsync: bool) -> None:
        end = len(self._timestamps)
        start = self._written
        base = self.base_offset
        data = b"".join(
            _ENTRY.pack(self._timestamps[i], self._offsets[i] - base) for i in range(start, end)
        )
        if data or fsync:
            write_index_tail(self.path, data, start * ENTRY_SIZE, fsync)
        self._written = max(self._written, end)

    def flush(self) -> None:
        """Write the entries not yet in the file, and fsync it."""
        self._write(fsync=True)

    def close(self) -> None:
        """Write the entries not yet in the file (no fsync)."""
        if self._written < len(self._timestamps):
            self._write(fsync=False)
