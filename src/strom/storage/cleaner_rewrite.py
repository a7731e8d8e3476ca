"""Log compaction, step 2: the rewrite (offset map, batch filtering, ``.cleaned`` segments).

:func:`clean` may run in a worker thread: it reads the plan's duplicated file descriptors, never
the ``Log``'s state, and writes only new ``.cleaned`` segments. It builds the *offset map*
``key -> latest offset`` over the dirty section (whole segments, up to ``max_map_entries`` keys,
stopping before the first undecided transaction) and rewrites every segment below that point,
grouping neighbours while their original sizes fit ``segment.bytes``. A record is kept unless a
later offset of its key is in the map, it is a tombstone past its batch's delete horizon, or it
belongs to an aborted transaction. Null-key records are kept.

Delete horizon (Kafka 2.8+, KIP-534): a tombstone is not dropped by its own timestamp (a
tombstone written with an old timestamp would vanish at the first cleaning, before a consumer
that is behind saw it). The first cleaning that keeps a tombstone rewrites its batch with the
horizon ``now + delete.retention.ms`` (attribute bit 6, baseTimestamp = horizon; record
timestamps unchanged); a later cleaning past the horizon drops the tombstones. Transaction
markers likewise: once no data of their transaction is left before them (aborted data goes at
the first cleaning, committed data when superseded), the marker gets a horizon, and is dropped
after it (kept empty if it is its producer's last batch).

Batches: untouched ones are copied byte for byte. A rewritten batch keeps its base offset,
last offset delta, producer id/epoch, base sequence, attributes (codec, timestamp type,
transactional) and partition leader epoch, so offsets and producer state stay as they were.
A batch whose records all go disappears, except (kept empty, as Kafka does) the last batch of
a producer still in the log's producer state (so its sequence survives a rebuild) and the last
batch of a group when dropping it would move the group's end below its last original segment's
base (the swap recovery relies on that). Control batches are always kept.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from strom.protocol import record_batch as rb
from strom.storage.cleaner_plan import CleanPlan, open_plan
from strom.storage.read_path import read_batches
from strom.storage.segment import LogSegment

DEFAULT_MAX_MAP_ENTRIES = 2_000_000  # Kafka's dedupe buffer is bounded too
_INT32_MAX = 2**31 - 1
_ABORT, _COMMIT = 0, 1


@dataclass
class CleanedGroup:
    old: list[LogSegment]
    new: LogSegment


@dataclass
class CleanResult:
    groups: list[CleanedGroup]
    first_uncleanable: int  # the new checkpoint
    records_read: int = 0
    records_kept: int = 0
    bytes_before: int = 0
    bytes_after: int = 0


class CleanAborted(Exception):
    """The cleaning was stopped (broker shutdown); nothing was swapped."""


def _batches(fd: int, size: int) -> Iterator[tuple[rb.BatchHeader, bytes]]:
    for _pos, header, data in read_batches(fd, 0, size):
        yield header, data


def _control_type(data: bytes) -> int | None:
    recs = rb.decode_records(data)
    if not recs or recs[0].key is None or len(recs[0].key) < 4:
        return None
    return int(struct.unpack_from(">hh", recs[0].key)[1])


def _scan_transactions(p: CleanPlan) -> tuple[set[int], int]:
    """(base offsets of aborted batches, index of the first segment with an undecided
    transaction (or len))."""
    aborted: set[int] = set()
    open_txn: dict[int, list[tuple[int, int]]] = {}  # pid -> [(segment index, base offset)]
    for i, (fd, size) in enumerate(zip(p.fds, p.sizes, strict=True)):
        for header, data in _batches(fd, size):
            if not header.is_transactional or (header.record_count == 0 and not header.is_control):
                continue  # an emptied data batch may outlive its marker (removed at its horizon)
            if header.is_control:
                pending = open_txn.pop(header.producer_id, [])
                if _control_type(data) == _ABORT:
                    aborted.update(base for _i, base in pending)
            else:
                open_txn.setdefault(header.producer_id, []).append((i, header.base_offset))
    undecided = min((v[0][0] for v in open_txn.values() if v), default=len(p.segments))
    return aborted, undecided


def _groups(p: CleanPlan, count: int) -> list[list[int]]:
    """Consecutive segment indexes whose original sizes fit one segment.bytes."""
    limit = p.log.config.segment_bytes
    groups: list[list[int]] = []
    for i in range(count):
        if groups:
            g = groups[-1]
            size = sum(p.sizes[j] for j in g) + p.sizes[i]
            if size <= limit and p.ends[i] - 1 - p.segments[g[0]].base_offset <= _INT32_MAX:
                g.append(i)
                continue
        groups.append([i])
    return groups


def clean(p: CleanPlan, now: int, *, abort: threading.Event | None = None,
          max_map_entries: int = DEFAULT_MAX_MAP_ENTRIES) -> CleanResult:  # fmt: skip
    """Build the offset map and write the ``.cleaned`` segments (see module doc).

    Safe in a worker thread: reads only ``p.fds`` and writes only new ``.cleaned`` files.
    Closes the duplicated descriptors. Raises :class:`CleanAborted` if ``abort`` is set.
    """
    if not p.fds:
        open_plan(p)
    written: list[LogSegment] = []
    try:
        return _clean(p, now, abort, max_map_entries, written)
    except BaseException:
        for seg in written:
            seg.delete()
        raise
    finally:
        p.release()


def _check(abort: threading.Event | None) -> None:
    if abort is not None and abort.is_set():
        raise CleanAborted()


def _clean(p: CleanPlan, now: int, abort: threading.Event | None, max_map_entries: int,
           written: list[LogSegment]) -> CleanResult:  # fmt: skip
    cfg = p.log.config
    aborted, undecided = _scan_transactions(p)
    # offset map over the dirty section, whole segments, stopping when the map is full
    offset_map: dict[bytes, int] = {}
    end_idx = p.dirty_start
    for i in range(p.dirty_start, undecided):
        if end_idx > p.dirty_start and len(offset_map) >= max_map_entries:
            break
        _check(abort)
        for header, data in _batches(p.fds[i], p.sizes[i]):
            if header.is_control or header.base_offset in aborted:
                continue
            for rec in rb.decode_records(data):
                if rec.key is not None:
                    offset_map[rec.key] = rec.offset
        end_idx = i + 1
    if end_idx == p.dirty_start:
        return CleanResult([], p.first_dirty)
    horizons = _Horizons(now, cfg.delete_retention_ms)
    result = CleanResult([], p.ends[end_idx - 1])
    for group in _groups(p, end_idx):
        _check(abort)
        first = p.segments[group[0]]
        new = p.log.create_cleaned_segment(first.base_offset)
        written.append(new)
        last_kept: tuple[rb.BatchHeader, bytes] | None = None
        for i in group:
            result.bytes_before += p.sizes[i]
            for header, data in _batches(p.fds[i], p.sizes[i]):
                out = _filter_batch(header, data, offset_map, aborted, horizons,
                                    p.producer_last, result)  # fmt: skip
                last_kept = (header, data)
                if out is None:
                    continue
                new.append(out, rb.parse_header(out))
        last_base = p.segments[group[-1]].base_offset
        if new.next_offset <= last_base and last_kept is not None:
            header, data = last_kept  # dropped: keep it empty so the group's range holds
            out = _rebuild(header, [])
            new.append(out, rb.parse_header(out))
        new.on_inactive()
        new.flush()  # here in the worker, so the swap on the log's thread need not fsync
        result.bytes_after += new.size
        result.groups.append(CleanedGroup([p.segments[i] for i in group], new))
    return result


@dataclass
class _Horizons:
    """Time of this cleaning, delete.retention.ms, and the producer ids whose transaction has
    data kept so far in this pass (their marker must stay, without a horizon)."""

    now: int
    retention_ms: int
    txn_data: set[int] = field(default_factory=set)

    @property
    def new_horizon(self) -> int:
        return self.now + self.retention_ms


def _horizon_of(header: rb.BatchHeader) -> int | None:
    return header.base_timestamp if header.attributes & rb.DELETE_HORIZON_BIT else None


def _filter_batch(header: rb.BatchHeader, data: bytes, offset_map: dict[bytes, int],
                  aborted: set[int], horizons: _Horizons, producer_last: dict[int, int],
                  result: CleanResult) -> bytes | None:  # fmt: skip
    """The batch to write for ``data``: itself, a rewritten copy, or None (dropped)."""
    horizon = _horizon_of(header)
    is_last = header.has_producer_id and producer_last.get(header.producer_id) == header.last_offset
    if header.is_control:
        return _filter_marker(header, data, horizon, horizons, is_last)
    records = rb.decode_records(data)
    result.records_read += len(records)
    if header.base_offset in aborted:
        kept = []
    else:
        kept = [r for r in records if _keep(r, offset_map, horizon, horizons.now)]
    result.records_kept += len(kept)
    if header.is_transactional and kept:
        horizons.txn_data.add(header.producer_id)
    if horizon is None and any(r.value is None and r.key is not None for r in kept):
        horizon = horizons.new_horizon  # first pass over these tombstones: start the clock
    elif len(kept) == len(records):
        return data
    if not kept:
        return _rebuild(header, []) if is_last else None
    return _rebuild(header, kept, horizon)


def _filter_marker(header: rb.BatchHeader, data: bytes, horizon: int | None,
                   horizons: _Horizons, is_last: bool) -> bytes | None:  # fmt: skip
    """A transaction marker stays while data of its transaction is kept before it; then it
    gets a delete horizon, and goes once the horizon has passed."""
    pid = header.producer_id
    if pid in horizons.txn_data:
        horizons.txn_data.discard(pid)
        return data
    if header.record_count == 0:  # emptied by an earlier cleaning: safe to discard (Kafka)
        return data if is_last else None
    if horizon is None:
        return _rebuild(header, rb.decode_records(data), horizons.new_horizon)
    if horizon > horizons.now:
        return data
    if not is_last:
        return None
    return _rebuild(header, []) if header.record_count else data


def _keep(rec: rb.Record, offset_map: dict[bytes, int], horizon: int | None, now: int) -> bool:
    if rec.key is None:
        return True
    latest = offset_map.get(rec.key)
    if latest is not None and latest > rec.offset:
        return False
    return not (rec.value is None and horizon is not None and horizon <= now)


def _rebuild(header: rb.BatchHeader, records: list[rb.Record],
             delete_horizon_ms: int | None = None) -> bytes:  # fmt: skip
    log_append = header.timestamp_type == rb.LOG_APPEND_TIME
    return rb.build_batch_from_records(
        records,
        base_offset=header.base_offset,
        last_offset_delta=header.last_offset_delta,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        is_transactional=header.is_transactional,
        is_control=header.is_control,
        compression=header.compression,
        timestamp_type=header.timestamp_type,
        partition_leader_epoch=header.partition_leader_epoch,
        max_timestamp=header.max_timestamp if log_append or not records else None,
        delete_horizon_ms=delete_horizon_ms if records else None,
    )
