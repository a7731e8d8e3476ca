"""Sparse time index of one segment (Kafka's ``.timeindex`` file).

On-disk format: a flat array of 12-byte big-endian entries, no header::

    timestamp      int64   (largest timestamp seen in the segment so far)
    relativeOffset int32   (last offset of the batch that holds that timestamp)

Invariant used by :meth:`TimeIndex.lookup`: for an entry ``(T, o)`` every record of the
segment before the next entry's offset has timestamp ``<= T`` (T is a running maximum).
Timestamps and offsets strictly increase. Entries are written alongside offset index entries
(when the maximum moved) and once more when the segment becomes inactive (roll / close), so
the last entry carries the segment's max timestamp and where it is.
"""

from __future__ import annotations

import bisect
import os
import struct
from array import array
from pathlib import Path

from strom.storage.index import CorruptIndexError

_ENTRY = struct.Struct(">qi")
ENTRY_SIZE = _ENTRY.size


class TimeIndex:
    """Maps timestamps to a safe offset to start scanning from, for one segment."""

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._timestamps: array[int] = array("q")
        self._offsets: array[int] = array("q")
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)

    @classmethod
    def load(cls, path: Path, base_offset: int) -> TimeIndex:
        """Open and sanity-check an existing file; raises :class:`CorruptIndexError`."""
        index = cls(path, base_offset)
        try:
            data = os.pread(index._fd, os.fstat(index._fd).st_size, 0)
            if len(data) % ENTRY_SIZE:
                raise CorruptIndexError(f"{path}: size {len(data)} is not a multiple of 12")
            for ts, rel in _ENTRY.iter_unpack(data):
                if index._timestamps and (
                    ts <= index._timestamps[-1] or base_offset + rel <= index._offsets[-1]
                ):
                    raise CorruptIndexError(f"{path}: entries out of order")
                index._timestamps.append(ts)
                index._offsets.append(base_offset + rel)
        except CorruptIndexError:
            index.close()
            raise
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
        os.pwrite(
            self._fd,
            _ENTRY.pack(timestamp, offset - self.base_offset),
            len(self) * ENTRY_SIZE,
        )
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
        os.ftruncate(self._fd, keep * ENTRY_SIZE)

    def reset(self) -> None:
        self.truncate_to_offset(-(2**62))

    def flush(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
