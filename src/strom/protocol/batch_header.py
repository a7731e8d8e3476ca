"""Kafka record batch v2 (magic 2) header: parse, patch, CRC-32C (sans-IO).

Batch layout, big-endian; byte offsets from the start of the batch::

     0 baseOffset            int64    rewritten by the broker (outside the CRC)
     8 batchLength           int32    bytes after this field (batch size = batchLength + 12)
    12 partitionLeaderEpoch  int32    rewritten by the broker (outside the CRC)
    16 magic                 int8     always 2
    17 crc                   uint32   CRC-32C of bytes 21..end
    21 attributes            int16    bits 0-2 codec, 3 LogAppendTime, 4 transactional, 5 control
    23 lastOffsetDelta       int32
    27 baseTimestamp         int64
    35 maxTimestamp          int64
    43 producerId            int64
    51 producerEpoch         int16
    53 baseSequence          int32
    57 recordsCount          int32
    61 records               (compressed as a whole when the codec is not 0)

These are the broker's hot paths (:func:`parse_header`, :func:`walk_headers` (the only code
that steps from one batch header to the next; file readers feed it chunks), :func:`iter_batches`,
:func:`verify_crc`, the ``patch_*`` functions): the records stay opaque bytes. The records
themselves are encoded and decoded by :mod:`strom.protocol.records`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

import crc32c
from kio.schema.errors import ErrorCode

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength
MAGIC = 2
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD

HEADER_STRUCT = struct.Struct(">qiibIhiqqqhii")
CRC_POS = 17
_ATTRS_POS = 21
_MAX_TS_POS = 35
_INT32_MAX = 2**31 - 1

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20

CREATE_TIME = 0
LOG_APPEND_TIME = 1

Buffer = bytes | bytearray | memoryview


class RecordBatchError(Exception):
    """Base of the codec's errors; ``error_code`` is the wire code a handler should answer."""

    error_code: ErrorCode = ErrorCode.corrupt_message


class CorruptRecordError(RecordBatchError):
    """Bytes that are not a well-formed batch: truncated, bad magic, bad length, bad CRC."""

    error_code = ErrorCode.corrupt_message


class InvalidRecordError(RecordBatchError):
    """A well-formed batch whose contents break a rule (e.g. no records, bad offset delta)."""

    error_code = ErrorCode.invalid_record


class BatchHeader(NamedTuple):
    """The 61-byte batch header. Invariant: ``size == batch_length + 12``.

    A named tuple: it is built once per batch on every append and read, straight from
    ``struct.unpack_from``'s tuple (``tuple.__new__``), which costs a fraction of a frozen
    dataclass's thirteen ``object.__setattr__`` calls."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_BIT else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record; wraps past int32 max like Kafka; -1 without sequences."""
        if self.base_sequence < 0:
            return -1
        return increment_sequence(self.base_sequence, self.last_offset_delta)


_new_header = tuple.__new__


def increment_sequence(sequence: int, delta: int) -> int:
    """``sequence + delta`` wrapping from int32 max to 0 (Kafka's DefaultRecordBatch rule)."""
    if sequence > _INT32_MAX - delta:
        return delta - (_INT32_MAX - sequence) - 1
    return sequence + delta


def parse_header(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Parse the header at ``pos``; the caller guarantees 61 bytes are there."""
    return _new_header(BatchHeader, HEADER_STRUCT.unpack_from(buf, pos))


def walk_headers(buf: Buffer, pos: int = 0) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` of each batch header lying wholly in ``buf`` from ``pos``,
    stepping from one batch to the next by its size: the one batch-header walker.

    Only headers are looked at: a batch may run past the end of ``buf`` (the next header is
    then outside it and the walk ends; callers reading a file continue from there). A header
    whose ``batchLength`` is too small is yielded and ends the walk (stepping on would not
    advance); checking it, and magic, is the caller's business.
    """
    end = len(buf)
    unpack = HEADER_STRUCT.unpack_from
    while pos + HEADER_SIZE <= end:
        header = _new_header(BatchHeader, unpack(buf, pos))
        yield pos, header
        if header.batch_length < MIN_BATCH_LENGTH:
            return
        pos += header.batch_length + LOG_OVERHEAD


def iter_batches(buf: Buffer) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Yield ``(header, whole batch view)`` for each batch in ``buf``.

    Raises :class:`CorruptRecordError` on a truncated batch, magic != 2, or a batchLength too
    small to hold the header. CRCs are not checked here (see :func:`verify_crc`).
    """
    view = memoryview(buf)
    end = len(view)
    pos = 0  # end of the last whole batch
    for pos, header in walk_headers(view):  # noqa: B007 - the walk's position is ours too
        if header.magic != MAGIC:
            raise CorruptRecordError(f"unsupported magic {header.magic} at byte {pos}")
        if header.batch_length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"batch length {header.batch_length} too small")
        size = header.size
        if pos + size > end:
            raise CorruptRecordError(f"truncated batch at byte {pos}: needs {size} bytes")
        yield header, view[pos : pos + size]
        pos += size
    if pos < end:
        raise CorruptRecordError(f"truncated batch header at byte {pos}")


def with_offsets(header: BatchHeader, base_offset: int, leader_epoch: int, attributes: int,
                 max_timestamp: int) -> BatchHeader:
    """``header`` as the broker stores it: baseOffset and partitionLeaderEpoch assigned, and
    attributes / maxTimestamp possibly rewritten (then the CRC is stale: :func:`crc_of`)."""
    (_, length, _, magic, crc, _, delta, base_ts, _, pid, epoch, seq, count) = header
    return _new_header(BatchHeader, (base_offset, length, leader_epoch, magic, crc, attributes,
                                     delta, base_ts, max_timestamp, pid, epoch, seq, count))


def crc_of(header: BatchHeader, batch: Buffer) -> int:
    """CRC-32C of the batch ``batch`` with its header replaced by ``header``, computed over
    the two parts without joining them."""
    head = HEADER_STRUCT.pack(*header)
    return crc32c.crc32c(memoryview(batch)[HEADER_SIZE:], crc32c.crc32c(head[_ATTRS_POS:]))


def compute_crc(batch: Buffer) -> int:
    """CRC-32C of the attributes..end region of one whole batch."""
    return crc32c.crc32c(memoryview(batch)[_ATTRS_POS:])


def verify_crc(batch: Buffer) -> bool:
    """True when the stored CRC matches the batch contents."""
    view = memoryview(batch)
    if len(view) < HEADER_SIZE:
        return False
    (stored,) = struct.unpack_from(">I", view, CRC_POS)
    return bool(stored == compute_crc(view))


def patch_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    """Rewrite baseOffset of the batch at ``pos`` (outside the CRC)."""
    struct.pack_into(">q", buf, pos, base_offset)


def patch_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    """Rewrite partitionLeaderEpoch of the batch at ``pos`` (outside the CRC)."""
    struct.pack_into(">i", buf, pos + 12, epoch)


def set_log_append_time(buf: bytearray | memoryview, pos: int, ts: int) -> None:
    """Mark the batch at ``pos`` LogAppendTime with maxTimestamp ``ts``; recompute the CRC."""
    (attributes,) = struct.unpack_from(">h", buf, pos + _ATTRS_POS)
    struct.pack_into(">h", buf, pos + _ATTRS_POS, attributes | TIMESTAMP_TYPE_BIT)
    struct.pack_into(">q", buf, pos + _MAX_TS_POS, ts)
    (length,) = struct.unpack_from(">i", buf, pos + 8)
    batch = memoryview(buf)[pos : pos + length + LOG_OVERHEAD]
    struct.pack_into(">I", buf, pos + CRC_POS, compute_crc(batch))
