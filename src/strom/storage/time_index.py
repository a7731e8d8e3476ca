"""Sparse time index of one segment (Kafka's ``.timeindex`` file).

On-disk format: a flat array of 12-byte big-endian entries, no header::

    timestamp      int64   (largest timestamp seen in the segment so far)
    relativeOffset int32   (last offset of the batch that holds that timestamp)

Invariant used by :meth:`TimeIndex.lookup`: for an entry ``(T, o)`` every record of the
segment before the next entry's offset has timestamp ``<= T`` (T is a running maximum).
Timestamps and offsets strictly increase. Entries are written alongside offset index entries
(when the maximum moved) and once more when the segment becomes inactive (roll / close), so
the last entry carries the segment's max timestamp and where it is. Entries, file handling and
the checks shared with the offset index: :mod:`strom.storage.abstract_index`; unlike the offset
index it has no size bound.
"""

from __future__ import annotations

import bisect
import struct
from pathlib import Path

from strom.storage.abstract_index import AbstractIndex

__all__ = ["ENTRY_SIZE", "TimeIndex"]

_ENTRY = struct.Struct(">qi")
ENTRY_SIZE = _ENTRY.size


class TimeIndex(AbstractIndex):
    """Maps timestamps to a safe offset to start scanning from, for one segment: keys are
    running-maximum timestamps, values the offsets where they are."""

    ENTRY = _ENTRY
    KEY_IS_OFFSET = False

    @classmethod
    def load(cls, path: Path, base_offset: int) -> TimeIndex:
        """Read and sanity-check an existing file; raises
        :class:`strom.storage.abstract_index.CorruptIndexError`."""
        return cls._read(path, base_offset)

    @property
    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the last entry, or None."""
        return self._last()

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add ``(timestamp, offset)`` when both advance past the last entry."""
        self._append(timestamp, offset)

    def lookup(self, timestamp: int) -> int | None:
        """Offset of the last entry with timestamp < ``timestamp``: no record at or before it
        (nor before the next entry) reaches ``timestamp``. None: start at the segment base."""
        i = bisect.bisect_left(self._keys, timestamp) - 1
        return None if i < 0 else self._values[i]

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries whose offset is >= ``offset``."""
        self._truncate_values_from(offset)
