"""Sparse offset index of one segment (Kafka's ``.index`` file).

On-disk format: a flat array of 8-byte big-endian entries, no header::

    relativeOffset int32   (batch last offset - segment base offset)
    position       int32   (byte position of that batch in the .log file)

An entry is added at most every ``index.interval.bytes`` of log. Invariants: relative offsets
and positions strictly increase; every position is the start of a batch in the log file.
The entries are held in memory (two ``array('q')``), so lookups are a bisect. The index holds
no file descriptor: new entries are written to the file at :meth:`flush` / :meth:`close`
(open, ``pwrite`` of the unwritten tail, optional fsync, close), truncations at once. A crash
may so lose the tail of an index, never make it wrong: an index is only trusted for segments
below the recovery point (which a flush of the index precedes) or after a clean shutdown, and
is rebuilt from the log otherwise.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import struct
from array import array
from pathlib import Path

_ENTRY = struct.Struct(">ii")
ENTRY_SIZE = _ENTRY.size


class CorruptIndexError(Exception):
    """The index file does not satisfy its invariants; the caller rebuilds it."""


def read_index_file(path: Path, entry_size: int) -> bytes:
    """The whole file; :class:`CorruptIndexError` if missing or not whole entries."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CorruptIndexError(f"{path}: missing") from None
    if len(data) % entry_size:
        raise CorruptIndexError(f"{path}: size {len(data)} is not a multiple of {entry_size}")
    return data


def write_index_tail(path: Path, data: bytes, position: int, fsync: bool) -> None:
    """Write ``data`` at ``position`` of ``path`` (created if needed); fsync if asked."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        if data:
            os.pwrite(fd, data, position)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def truncate_index_file(path: Path, size: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.truncate(path, size)


class OffsetIndex:
    """Maps offsets to file positions for one segment."""

    def __init__(self, path: Path, base_offset: int, max_bytes: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_bytes // ENTRY_SIZE)
        self._offsets: array[int] = array("q")
        self._positions: array[int] = array("q")
        self._written = 0  # entries already in the file

    @classmethod
    def load(cls, path: Path, base_offset: int, max_bytes: int, log_size: int) -> OffsetIndex:
        """Read and sanity-check an existing file; raises :class:`CorruptIndexError`."""
        index = cls(path, base_offset, max_bytes)
        data = read_index_file(path, ENTRY_SIZE)
        last_rel, last_pos = -1, -1
        for rel, pos in _ENTRY.iter_unpack(data):
            if rel <= last_rel or pos <= last_pos or pos >= log_size:
                raise CorruptIndexError(f"{path}: entries out of order or past the log")
            index._offsets.append(base_offset + rel)
            index._positions.append(pos)
            last_rel, last_pos = rel, pos
        index._written = len(index._offsets)
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
        if keep < self._written:
            self._written = keep
            truncate_index_file(self.path, keep * ENTRY_SIZE)

    def reset(self) -> None:
        """Forget every entry and empty the file (if one exists)."""
        del self._offsets[:]
        del self._positions[:]
        self._written = 0
        truncate_index_file(self.path, 0)

    def _write(self, fsync: bool) -> None:
        end = len(self._offsets)  # entries appended concurrently wait for the next write
        start = self._written
        base = self.base_offset
        data = b"".join(
            _ENTRY.pack(self._offsets[i] - base, self._positions[i]) for i in range(start, end)
        )
        if data or fsync:
            write_index_tail(self.path, data, start * ENTRY_SIZE, fsync)
        self._written = max(self._written, end)

    def flush(self) -> None:
        """Write the entries not yet in the file, and fsync it."""
        self._write(fsync=True)

    def close(self) -> None:
        """Write the entries not yet in the file (no fsync: :meth:`flush` is for durability)."""
        if self._written < len(self._offsets):
            self._write(fsync=False)
