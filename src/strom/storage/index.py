"""Sparse offset index of one segment (Kafka's ``.index`` file).

On-disk format: a flat array of 8-byte big-endian entries, no header::

    relativeOffset int32   (batch last offset - segment base offset)
    position       int32   (byte position of that batch in the .log file)

An entry is added at most every ``index.interval.bytes`` of log. Invariants: relative offsets
and positions strictly increase; every position is the start of a batch in the log file.
The entries are also held in memory (two ``array('q')``), so lookups are a bisect, and the file
is append-only (written with ``os.pwrite``; ``truncate`` rewrites the tail).
"""

from __future__ import annotations

import bisect
import os
import struct
from array import array
from pathlib import Path

_ENTRY = struct.Struct(">ii")
ENTRY_SIZE = _ENTRY.size


class CorruptIndexError(Exception):
    """The index file does not satisfy its invariants; the caller rebuilds it."""


class OffsetIndex:
    """Maps offsets to file positions for one segment."""

    def __init__(self, path: Path, base_offset: int, max_bytes: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_bytes // ENTRY_SIZE)
        self._offsets: array[int] = array("q")
        self._positions: array[int] = array("q")
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)

    @classmethod
    def load(cls, path: Path, base_offset: int, max_bytes: int, log_size: int) -> OffsetIndex:
        """Open and sanity-check an existing file; raises :class:`CorruptIndexError`."""
        index = cls(path, base_offset, max_bytes)
        try:
            data = os.pread(index._fd, os.fstat(index._fd).st_size, 0)
            if len(data) % ENTRY_SIZE:
                raise CorruptIndexError(f"{path}: size {len(data)} is not a multiple of 8")
            last_rel, last_pos = -1, -1
            for rel, pos in _ENTRY.iter_unpack(data):
                if rel <= last_rel or pos <= last_pos or pos >= log_size:
                    raise CorruptIndexError(f"{path}: entries out of order or past the log")
                index._offsets.append(base_offset + rel)
                index._positions.append(pos)
                last_rel, last_pos = rel, pos
        except CorruptIndexError:
            index.close()
            raise
        return index

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def is_full(self) -> bool:
        return len(self._offsets) >= self.max_entries

    @property
    def last_entry(self) -> tuple[int, int]:
        """(offset, position) of the last entry, or (base_offset, 0) when empty."""
        if not self._offsets:
            return self.base_offset, 0
        return self._offsets[-1], self._positions[-1]

    def append(self, offset: int, position: int) -> None:
        """Add an entry; ignored unless both offset and position advance."""
        if self._offsets and (offset <= self._offsets[-1] or position <= self._positions[-1]):
            return
        os.pwrite(
            self._fd, _ENTRY.pack(offset - self.base_offset, position), len(self) * ENTRY_SIZE
        )
        self._offsets.append(offset)
        self._positions.append(position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """Largest entry with offset <= ``offset``, or (base_offset, 0)."""
        i = bisect.bisect_right(self._offsets, offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self._offsets[i], self._positions[i]

    def position_floor(self, position: int) -> int:
        """Largest indexed batch position ``<= position`` (0 when none): a batch boundary to
        walk forward from (the read path's ``max_bytes`` cut)."""
        i = bisect.bisect_right(self._positions, position) - 1
        return 0 if i < 0 else self._positions[i]

    def truncate_to_position(self, position: int) -> None:
        """Drop entries at or after byte ``position`` of the log."""
        keep = bisect.bisect_left(self._positions, position)
        del self._offsets[keep:]
        del self._positions[keep:]
        os.ftruncate(self._fd, keep * ENTRY_SIZE)

    def reset(self) -> None:
        self.truncate_to_position(0)

    def flush(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
