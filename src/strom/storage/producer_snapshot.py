"""Producer-state snapshot files in Kafka's own format, written crash-safely.

File ``<offset:020d>.snapshot`` in the partition directory: the producers' state as of log end
offset ``offset``. Layout (Kafka's ``ProducerSnapshot`` message, version 1, big-endian,
not flexible), as ``ProducerStateManager.writeSnapshot`` writes it::

    int16  version = 1
    uint32 crc                CRC-32C of every byte after this field
    int32  entry count
    entry count times (46 bytes each):
        int64 producerId
        int16 epoch
        int32 lastSequence         -1 when the producer has no batch in the log
        int64 lastOffset           last offset of its last batch, -1 when none
        int32 offsetDelta          lastSequence - firstSequence of that batch
        int64 timestamp            max timestamp of that batch
        int32 coordinatorEpoch     of the last transaction marker, -1 when none
        int64 currentTxnFirstOffset  first offset of the open transaction, -1 when none

As in Kafka, only each producer's *last* batch is kept (the deduplication window rebuilt
after a restart is the last batch plus whatever is replayed from the log after the snapshot).

Writes are crash-safe: a temporary file is written and fsynced, renamed over the final name,
and the directory fsynced, so a crash leaves either the old set of snapshots or the new one,
never a torn file. A file that fails its CRC or schema (or strom's older JSON snapshots) is
reported unreadable and the caller rebuilds from the log.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import crc32c

from strom.storage import atomic_file

VERSION = 1
_HEAD = struct.Struct(">hIi")  # version, crc, entry count
_ENTRY = struct.Struct(">qhiqiqiq")
_CRC_START = 6  # bytes covered by the CRC start after version and crc


@dataclass(frozen=True, slots=True)
class SnapshotEntry:
    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int


class CorruptSnapshotError(ValueError):
    """The file is not a readable version-1 snapshot (bad CRC, truncated, other version)."""


def encode(entries: list[SnapshotEntry]) -> bytes:
    out = bytearray(_HEAD.size + _ENTRY.size * len(entries))
    _HEAD.pack_into(out, 0, VERSION, 0, len(entries))
    pos = _HEAD.size
    for e in entries:
        _ENTRY.pack_into(out, pos, e.producer_id, e.epoch, e.last_sequence, e.last_offset,
                         e.offset_delta, e.timestamp, e.coordinator_epoch,
                         e.current_txn_first_offset)  # fmt: skip
        pos += _ENTRY.size
    struct.pack_into(">I", out, 2, crc32c.crc32c(memoryview(out)[_CRC_START:]))
    return bytes(out)


def decode(data: bytes) -> list[SnapshotEntry]:
    """The entries of a snapshot file's bytes; :class:`CorruptSnapshotError` when unreadable."""
    if len(data) < _HEAD.size:
        raise CorruptSnapshotError("snapshot shorter than its header")
    version, crc, count = _HEAD.unpack_from(data, 0)
    if version != VERSION:
        raise CorruptSnapshotError(f"snapshot contained an unknown file version {version}")
    if count < 0 or len(data) != _HEAD.size + count * _ENTRY.size:
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes cannot hold {count} entries")
    if crc != crc32c.crc32c(memoryview(data)[_CRC_START:]):
        raise CorruptSnapshotError("snapshot is corrupt (CRC is no longer valid)")
    return [SnapshotEntry(*_ENTRY.unpack_from(data, _HEAD.size + i * _ENTRY.size))
            for i in range(count)]  # fmt: skip


def write(path: Path, entries: list[SnapshotEntry], *, sync: bool = True) -> None:
    """Write ``path`` crash-safely (temp file, fsync, rename, fsync the directory); with
    ``sync=False`` the caller syncs the whole file system afterwards (a shutdown)."""
    atomic_file.replace(path, encode(entries), fsync=sync, fsync_parent=sync)


def read(path: Path) -> list[SnapshotEntry]:
    """Read and check ``path``; :class:`CorruptSnapshotError` or ``OSError`` on failure."""
    return decode(path.read_bytes())

