"""The one read path: which bytes of which segment file to serve, found from the offset index.

Every reader of stored batches goes through here: Fetch with ``sendfile``
(:mod:`strom.broker.zero_copy`), the copying Fetch path and internal readers (:meth:`Log.read`),
the compactor (:func:`read_batches` over its duplicated descriptors) and, later, followers.

:func:`locate` answers "serve ``offset`` with at most ``max_bytes``, nothing at or above
``max_offset``" with a :class:`SegmentSlice` (segment, file position, length) of **whole
batches**, without reading the data and without walking every batch header in between:

- the start is the batch containing ``offset``: an offset index lookup, then a walk over the
  few headers between that index entry and the batch (at most about ``index.interval.bytes``);
- the upper bound is the position of the first batch whose base offset is ``>= max_offset``
  (the high watermark): the end of the file when the bound is at or past the segment's end
  (the usual case: high watermark = log end offset), else another index lookup and short walk;
- the ``max_bytes`` cut is the last batch boundary at or below ``start + max_bytes``: the
  index entry at or below that position (entries are batch starts), then a short walk;
- at least the first batch is returned even above ``max_bytes`` when ``min_one_batch``
  (Kafka's KIP-74; GUIDE pitfall 4).

Kafka slices up to the byte bound and lets the client drop a partial last batch; strom cuts at
a batch boundary with one more short walk, so every reader (the compactor, internal topics,
future followers) gets whole batches and no partial batch crosses the wire. One slice never
spans two segments (as Kafka's): a fetch at a segment's end gets the next segment's data on
its next request.

Headers are read with :func:`scan_headers` (file chunks fed to
:func:`strom.protocol.batch_header.walk_headers`, the only batch-header walker); whole batches
with :func:`read_batches`. Neither touches a ``Log``: both run on any thread given an fd.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from strom.protocol.batch_header import (
    HEADER_SIZE,
    MIN_BATCH_LENGTH,
    BatchHeader,
    walk_headers,
)
from strom.storage import fileio

if TYPE_CHECKING:
    from strom.storage.segment import LogSegment

SEEK_CHUNK = 8192  # covers the default index.interval.bytes (4096) plus the batch after it
BULK_CHUNK = 1 << 20  # for walks over whole segments


@dataclass(frozen=True, slots=True)
class SegmentSlice:
    """``length`` bytes of whole batches at ``position`` of ``segment``'s ``.log`` file."""

    segment: LogSegment
    position: int
    length: int
    first_offset: int  # base offset of the first batch (may be below the requested offset)


def scan_headers(fd: int, start: int, end: int,
                 chunk: int = SEEK_CHUNK) -> Iterator[tuple[int, BatchHeader]]:  # fmt: skip
    """``(position, header)`` of each whole batch in bytes ``[start, end)`` of file ``fd``.

    Reads ``chunk`` bytes at a time and hands them to ``walk_headers``; a batch larger than the
    chunk costs one small read of the next header. Stops at a malformed header (length too
    small) or a batch running past ``end`` (a torn write, or a file read while it grows).
    """
    pos = start
    while pos + HEADER_SIZE <= end:
        buf = fileio.pread(fd, min(chunk, end - pos), pos)
        nxt = pos
        for off, header in walk_headers(buf):
            at = pos + off
            if header.batch_length < MIN_BATCH_LENGTH or at + header.size > end:
                return
            yield at, header
            nxt = at + header.size
        if nxt == pos:  # not even one header in the chunk: a short read
            return
        pos = nxt


def read_batches(fd: int, start: int, end: int,
                 chunk: int = BULK_CHUNK) -> Iterator[tuple[int, BatchHeader, bytes]]:  # fmt: skip
    """``(position, header, whole batch bytes)`` of each batch in ``[start, end)`` of ``fd``:
    chunks of ``chunk`` bytes, split with ``walk_headers``; a batch larger than the chunk is
    read on its own. Same stopping rules as :func:`scan_headers`."""
    pos = start
    while pos + HEADER_SIZE <= end:
        buf = fileio.pread(fd, min(chunk, end - pos), pos)
        nxt = pos
        for off, header in walk_headers(buf):
            at = pos + off
            size = header.size
            if header.batch_length < MIN_BATCH_LENGTH or at + size > end:
                return
            if off + size <= len(buf):
                data = buf[off : off + size]
            else:
                data = fileio.pread(fd, size, at)
                if len(data) != size:
                    return
            yield at, header, data
            nxt = at + size
        if nxt == pos:
            return
        pos = nxt


def find_batch(seg: LogSegment, offset: int, size: int) -> tuple[int, BatchHeader] | None:
    """Position and header of the first batch of ``seg`` whose last offset is ``>= offset``
    (within its first ``size`` bytes): index lookup, then a short walk."""
    _, pos = seg.index.lookup(offset)
    with seg.open_fd() as fd:
        for at, header in scan_headers(fd, pos, size):
            if header.base_offset + header.last_offset_delta >= offset:
                return at, header
    return None


def _bound_position(seg: LogSegment, max_offset: int, start: int, size: int) -> int:
    """Position of the first batch with base offset ``>= max_offset`` (``size`` if none)."""
    _, pos = seg.index.lookup(max_offset)
    with seg.open_fd() as fd:
        for at, header in scan_headers(fd, max(pos, start), size):
            if header.base_offset >= max_offset:
                return at
    return size


def _cut_position(seg: LogSegment, start: int, limit: int, size: int) -> int:
    """The last batch boundary in ``[start, limit]`` (``start`` if the first batch is longer)."""
    end = max(seg.index.position_floor(limit), start)
    with seg.open_fd() as fd:
        for at, header in scan_headers(fd, end, size):
            if at + header.size > limit:
                break
            end = at + header.size
    return end


def locate(segments: Sequence[LogSegment], bases: Sequence[int], offset: int, max_bytes: int,
           max_offset: int | None = None,
           min_one_batch: bool = True) -> SegmentSlice | None:  # fmt: skip
    """The whole batches to serve for ``offset`` (see the module docstring), or None.

    ``segments`` are a log's segments oldest first and ``bases`` their base offsets; the
    caller has checked ``offset`` against the log's range. Reads only batch headers.
    """
    i = max(0, bisect.bisect_right(bases, offset) - 1)
    for seg in segments[i:]:
        if offset >= seg.next_offset:  # nothing at or after offset here (or empty)
            continue
        size = seg.size
        found = find_batch(seg, offset, size)
        if found is None:
            continue
        start, first = found
        if max_offset is None or max_offset >= seg.next_offset:
            bound = size
        elif first.base_offset >= max_offset:
            return None
        else:
            bound = _bound_position(seg, max_offset, start + first.size, size)
        if bound - start <= max_bytes:
            end = bound
        else:
            end = _cut_position(seg, start, start + max(max_bytes, 0), bound)
            if end == start and min_one_batch:
                end = start + first.size
        if end <= start:
            return None
        return SegmentSlice(seg, start, end - start, first.base_offset)
    return None
