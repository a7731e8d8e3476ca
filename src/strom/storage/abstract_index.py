"""What a segment's sparse indexes share (Kafka's ``AbstractIndex``): entries, file, checks.

An index is a list of entries ``(key, value)`` of two integers, both columns strictly
increasing: the offset index maps offsets to byte positions (:mod:`strom.storage.index`), the
time index timestamps to offsets (:mod:`strom.storage.time_index`). Each subclass states its
on-disk entry (:attr:`AbstractIndex.ENTRY`, big-endian, no header, no padding) and which of
its two columns is an offset, stored relative to the segment's base offset
(:attr:`AbstractIndex.KEY_IS_OFFSET`); in memory every value is absolute.

File handling, unlike Kafka's memory-mapped and preallocated files (so no resize at roll): the
entries are held in two ``array('q')`` (lookups are a bisect) and the index holds no file
descriptor. New entries reach the file at :meth:`AbstractIndex.flush` / :meth:`close` (open,
``pwrite`` of the unwritten tail, optional fsync, close), truncations at once. A crash may so
lose the tail of an index, never make it wrong: an index is only trusted for segments below the
recovery point (which a flush of the index precedes) or after a clean shutdown, and is rebuilt
from the log otherwise. A file that breaks the invariants when loaded raises
:class:`CorruptIndexError`, and the segment rebuilds it.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import struct
import sys
from array import array
from pathlib import Path
from typing import ClassVar, Self

from strom.storage import fileio


class CorruptIndexError(Exception):
    """The index file does not satisfy its invariants; the caller rebuilds it."""


class AbstractIndex:
    """Entries ``(key, value)``, both columns strictly increasing, of one segment's index."""

    #: the on-disk entry: two big-endian integers, key then value
    ENTRY: ClassVar[struct.Struct]
    #: True: the key column is an offset (stored relative to the base); False: the value is
    KEY_IS_OFFSET: ClassVar[bool]

    def __init__(self, path: Path, base_offset: int, max_bytes: int | None = None) -> None:
        self.path = path
        self.base_offset = base_offset
        #: entries the index may hold (``segment.index.bytes``; no bound without ``max_bytes``)
        self.max_entries = sys.maxsize if max_bytes is None else max(1, max_bytes // self.ENTRY.size)
        self._keys: array[int] = array("q")
        self._values: array[int] = array("q")
        self._written = 0  # entries already in the file
        # what to add to the key / value column of a file entry to make it absolute
        self._rebase = (base_offset, 0) if self.KEY_IS_OFFSET else (0, base_offset)

    @classmethod
    def _read(cls, path: Path, base_offset: int, max_bytes: int | None = None) -> Self:
        """The index in ``path``, sanity-checked: whole entries, both columns strictly
        increasing; :class:`CorruptIndexError` otherwise (a missing file too)."""
        index = cls(path, base_offset, max_bytes)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise CorruptIndexError(f"{path}: missing") from None
        if len(data) % cls.ENTRY.size:
            raise CorruptIndexError(
                f"{path}: size {len(data)} is not a multiple of {cls.ENTRY.size}"
            )
        key_base, value_base = index._rebase
        keys, values = index._keys, index._values
        last_key = last_value = -(2**63)
        for key, value in cls.ENTRY.iter_unpack(data):
            key += key_base
            value += value_base
            if key <= last_key or value <= last_value:
                raise CorruptIndexError(f"{path}: entries out of order")
            keys.append(key)
            values.append(value)
            last_key, last_value = key, value
        index._written = len(keys)
        return index

    def __len__(self) -> int:
        return len(self._keys)

    @property
    def is_full(self) -> bool:
        return len(self._keys) >= self.max_entries  # on every append's roll check

    def _append(self, key: int, value: int) -> None:
        """Add an entry; ignored unless both key and value advance past the last one."""
        keys, values = self._keys, self._values
        if keys and (key <= keys[-1] or value <= values[-1]):
            return
        keys.append(key)
        values.append(value)

    def _last(self) -> tuple[int, int] | None:
        return (self._keys[-1], self._values[-1]) if self._keys else None

    def _truncate_values_from(self, value: int) -> None:
        """Drop every entry whose value is ``>= value`` (from the file at once)."""
        keep = bisect.bisect_left(self._values, value)
        del self._keys[keep:]
        del self._values[keep:]
        if keep < self._written:
            self._written = keep
            with contextlib.suppress(FileNotFoundError):
                fileio.truncate(self.path, keep * self.ENTRY.size)

    def reset(self) -> None:
        """Forget every entry and empty the file (if one exists, whatever it held)."""
        del self._keys[:]
        del self._values[:]
        self._written = 0
        with contextlib.suppress(FileNotFoundError):
            fileio.truncate(self.path, 0)

    def _write(self, fsync: bool) -> None:
        """Write the entries not yet in the file (created if needed); fsync if asked. Entries
        appended meanwhile (the flusher runs beside the writer) wait for the next write."""
        end = len(self._keys)
        start = self._written
        key_base, value_base = self._rebase
        keys, values, pack = self._keys, self._values, self.ENTRY.pack
        data = b"".join(pack(keys[i] - key_base, values[i] - value_base) for i in range(start, end))
        if data or fsync:
            fd = fileio.open_fd(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                if data:
                    fileio.pwrite(fd, data, start * self.ENTRY.size)
                if fsync:
                    fileio.fsync(fd)
            finally:
                fileio.close(fd)
        self._written = max(self._written, end)

    def flush(self) -> None:
        """Write the entries not yet in the file, and fsync it."""
        self._write(fsync=True)

    def close(self) -> None:
        """Write the entries not yet in the file (no fsync: :meth:`flush` is for durability)."""
        if self._written < len(self._keys):
            self._write(fsync=False)
