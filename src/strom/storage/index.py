"""Sparse offset index of one segment (Kafka's ``.index`` file).

On-disk format: a flat array of 8-byte big-endian entries, no header::

    relativeOffset int32   (batch last offset - segment base offset)
    position       int32   (byte position of that batch in the .log file)

An entry is added at most every ``index.interval.bytes`` of log. Invariants: relative offsets
and positions strictly increase; every position is the start of a batch in the log file.
Entries, file handling and the checks shared with the time index:
:mod:`strom.storage.abstract_index`.
"""

from __future__ import annotations

import bisect
import struct
from pathlib import Path

from strom.storage.abstract_index import AbstractIndex, CorruptIndexError

__all__ = ["ENTRY_SIZE", "OffsetIndex"]

_ENTRY = struct.Struct(">ii")
ENTRY_SIZE = _ENTRY.size


class OffsetIndex(AbstractIndex):
    """Maps offsets to file positions for one segment: keys are the last offsets of indexed
    batches, values their byte positions in the ``.log``."""

    ENTRY = _ENTRY
    KEY_IS_OFFSET = True

    def __init__(self, path: Path, base_offset: int, max_bytes: int) -> None:
        super().__init__(path, base_offset, max_bytes)

    @classmethod
    def load(cls, path: Path, base_offset: int, max_bytes: int, log_size: int) -> OffsetIndex:
        """Read and sanity-check an existing file: besides the shared checks, no offset below
        the base, no negative position, none at or past ``log_size``; raises
        :class:`CorruptIndexError`."""
        index = cls._read(path, base_offset, max_bytes)
        offsets, positions = index._keys, index._values
        if offsets and (offsets[0] < base_offset or positions[0] < 0 or positions[-1] >= log_size):
            raise CorruptIndexError(f"{path}: entries out of order or past the log")
        return index

    @property
    def last_entry(self) -> tuple[int, int]:
        """(offset, position) of the last entry, or (base_offset, 0) when empty."""
        return self._last() or (self.base_offset, 0)

    def append(self, offset: int, position: int) -> None:
        """Add an entry; ignored unless both offset and position advance."""
        self._append(offset, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """Largest entry with offset <= ``offset``, or (base_offset, 0) (Kafka's
        ``largestLowerBoundSlotFor``; every Fetch gets here)."""
        i = bisect.bisect_right(self._keys, offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self._keys[i], self._values[i]

    def position_floor(self, position: int) -> int:
        """Largest indexed batch position ``<= position`` (0 when none): a batch boundary to
        walk forward from (the read path's ``max_bytes`` cut)."""
        i = bisect.bisect_right(self._values, position) - 1
        return 0 if i < 0 else self._values[i]

    def truncate_to_position(self, position: int) -> None:
        """Drop entries at or after byte ``position`` of the log."""
        self._truncate_values_from(position)
