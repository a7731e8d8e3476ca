"""Kafka record batch v2 (magic 2): header parse/patch, CRC, and a record codec (sans-IO).

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

Each record: length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
keyLength varint (-1 = null) + key, valueLength varint (-1 = null) + value, headerCount varint,
then per header keyLength varint + utf-8 key, valueLength varint (-1 = null) + value.
All varints are zigzag-encoded.

The broker's hot paths are header-only (:func:`parse_header`, :func:`iter_batches`,
:func:`verify_crc`, the ``patch_*`` functions); :func:`decode_records` and :func:`build_batch`
are for internal topics, the compactor and tests.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import crc32c
from kio.schema.errors import ErrorCode

from strom.protocol import compression as _codec

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength
MAGIC = 2
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD

_HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC_POS = 17
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
Header = tuple[str, bytes | None]


def encode_varint(value: int) -> bytes:
    """Zigzag varint (Kafka's signed varint/varlong) of ``value``."""
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def decode_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """Decode a zigzag varint at ``pos``; returns ``(value, next_pos)``.

    Raises :class:`CorruptRecordError` when the buffer ends mid-varint or it exceeds 10 bytes.
    """
    result = 0
    shift = 0
    end = len(buf)
    while True:
        if pos >= end or shift > 63:
            raise CorruptRecordError("malformed varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
    return (result >> 1) ^ -(result & 1), pos


class RecordBatchError(Exception):
    """Base of the codec's errors; ``error_code`` is the wire code a handler should answer."""

    error_code: ErrorCode = ErrorCode.corrupt_message


class CorruptRecordError(RecordBatchError):
    """Bytes that are not a well-formed batch: truncated, bad magic, bad length, bad CRC."""

    error_code = ErrorCode.corrupt_message


class InvalidRecordError(RecordBatchError):
    """A well-formed batch whose contents break a rule (e.g. no records, bad offset delta)."""

    error_code = ErrorCode.invalid_record


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The 61-byte batch header. Invariant: ``size == batch_length + 12``."""

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


def increment_sequence(sequence: int, delta: int) -> int:
    """``sequence + delta`` wrapping from int32 max to 0 (Kafka's DefaultRecordBatch rule)."""
    if sequence > _INT32_MAX - delta:
        return delta - (_INT32_MAX - sequence) - 1
    return sequence + delta


def parse_header(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Parse the header at ``pos``; the caller guarantees 61 bytes are there."""
    return BatchHeader(*_HEADER.unpack_from(buf, pos))


def iter_batches(buf: Buffer) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Yield ``(header, whole batch view)`` for each batch in ``buf``.

    Raises :class:`CorruptRecordError` on a truncated batch, magic != 2, or a batchLength too
    small to hold the header. CRCs are not checked here (see :func:`verify_crc`).
    """
    view = memoryview(buf)
    pos = 0
    end = len(view)
    while pos < end:
        if end - pos < HEADER_SIZE:
            raise CorruptRecordError(f"truncated batch header at byte {pos}")
        header = parse_header(view, pos)
        if header.magic != MAGIC:
            raise CorruptRecordError(f"unsupported magic {header.magic} at byte {pos}")
        if header.batch_length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"batch length {header.batch_length} too small")
        size = header.size
        if pos + size > end:
            raise CorruptRecordError(f"truncated batch at byte {pos}: needs {size} bytes")
        yield header, view[pos : pos + size]
        pos += size


def compute_crc(batch: Buffer) -> int:
    """CRC-32C of the attributes..end region of one whole batch."""
    return crc32c.crc32c(memoryview(batch)[_ATTRS_POS:])


def verify_crc(batch: Buffer) -> bool:
    """True when the stored CRC matches the batch contents."""
    view = memoryview(batch)
    if len(view) < HEADER_SIZE:
        return False
    (stored,) = struct.unpack_from(">I", view, _CRC_POS)
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
    struct.pack_into(">I", buf, pos + _CRC_POS, compute_crc(batch))


@dataclass(slots=True)
class Record:
    """One decoded record; ``offset`` and ``timestamp`` are absolute."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[Header] = field(default_factory=list)


def decode_records(batch: Buffer) -> list[Record]:
    """Decode (and decompress) every record of one whole batch.

    For a LogAppendTime batch every record carries the batch's maxTimestamp, as Kafka does.
    Raises :class:`CorruptRecordError` on any malformed content.
    """
    view = memoryview(batch)
    if len(view) < HEADER_SIZE:
        raise CorruptRecordError("batch shorter than its header")
    header = parse_header(view)
    try:
        payload = _codec.decompress(header.compression, view[HEADER_SIZE : header.size])
    except _codec.CompressionCodecError as exc:
        raise CorruptRecordError(str(exc)) from exc
    log_append = header.timestamp_type == LOG_APPEND_TIME
    records: list[Record] = []
    pos = 0
    try:
        for _ in range(header.record_count):
            length, pos = decode_varint(payload, pos)
            end = pos + length
            if length < 0 or end > len(payload):
                raise CorruptRecordError("record length runs past the batch")
            pos += 1  # record attributes, unused
            ts_delta, pos = decode_varint(payload, pos)
            offset_delta, pos = decode_varint(payload, pos)
            key, pos = _read_bytes(payload, pos)
            value, pos = _read_bytes(payload, pos)
            count, pos = decode_varint(payload, pos)
            headers: list[Header] = []
            for _h in range(count):
                hkey, pos = _read_bytes(payload, pos)
                hvalue, pos = _read_bytes(payload, pos)
                headers.append(((hkey or b"").decode("utf-8"), hvalue))
            if pos != end:
                raise CorruptRecordError("record length does not match its contents")
            timestamp = header.max_timestamp if log_append else header.base_timestamp + ts_delta
            records.append(
                Record(header.base_offset + offset_delta, timestamp, key, value, headers)
            )
    except (IndexError, UnicodeDecodeError) as exc:
        raise CorruptRecordError(f"malformed record: {exc}") from exc
    if pos != len(payload):
        raise CorruptRecordError("trailing bytes after the last record")
    return records


def _read_bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    length, pos = decode_varint(buf, pos)
    if length < 0:
        return None, pos
    end = pos + length
    if end > len(buf):
        raise CorruptRecordError("field runs past the record")
    return buf[pos:end], end


def build_batch(
    records: Sequence[tuple[bytes | None, bytes | None, Sequence[Header], int]],
    *,
    base_offset: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    compression: int = 0,
    timestamp_type: int = CREATE_TIME,
    partition_leader_epoch: int = -1,
) -> bytes:
    """Encode ``(key, value, headers, timestamp_ms)`` tuples as one batch with a valid CRC.

    Offset deltas are 0..n-1; baseTimestamp is the first record's timestamp.
    """
    entries = [
        Record(base_offset + i, ts, key, value, list(headers))
        for i, (key, value, headers, ts) in enumerate(records)
    ]
    return build_batch_from_records(
        entries,
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
        is_control=is_control,
        compression=compression,
        timestamp_type=timestamp_type,
        partition_leader_epoch=partition_leader_epoch,
    )


def build_batch_from_records(
    records: Sequence[Record],
    *,
    base_offset: int,
    last_offset_delta: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    compression: int = 0,
    timestamp_type: int = CREATE_TIME,
    partition_leader_epoch: int = -1,
    max_timestamp: int | None = None,
) -> bytes:
    """Encode records keeping their absolute offsets (the compactor's path: gaps allowed).

    ``last_offset_delta`` defaults to the last record's delta; pass it to keep the original
    batch's offset range when trailing records were removed. An empty record list is allowed
    (Kafka keeps such batches to preserve producer state).
    """
    base_ts = records[0].timestamp if records else -1
    body = bytearray()
    for rec in records:
        rec_body = bytearray(b"\x00")
        rec_body += encode_varint(rec.timestamp - base_ts)
        rec_body += encode_varint(rec.offset - base_offset)
        _write_bytes(rec_body, rec.key)
        _write_bytes(rec_body, rec.value)
        rec_body += encode_varint(len(rec.headers))
        for hkey, hvalue in rec.headers:
            _write_bytes(rec_body, hkey.encode("utf-8"))
            _write_bytes(rec_body, hvalue)
        body += encode_varint(len(rec_body))
        body += rec_body
    payload = _codec.compress(compression, body)
    if last_offset_delta is None:
        last_offset_delta = records[-1].offset - base_offset if records else 0
    if max_timestamp is None:
        max_timestamp = max((r.timestamp for r in records), default=-1)
    attributes = compression & COMPRESSION_MASK
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_BIT
    if is_transactional:
        attributes |= TRANSACTIONAL_BIT
    if is_control:
        attributes |= CONTROL_BIT
    out = bytearray(HEADER_SIZE)
    _HEADER.pack_into(
        out, 0, base_offset, HEADER_SIZE - LOG_OVERHEAD + len(payload), partition_leader_epoch,
        MAGIC, 0, attributes, last_offset_delta, base_ts, max_timestamp, producer_id,
        producer_epoch, base_sequence, len(records),
    )  # fmt: skip
    out += payload
    struct.pack_into(">I", out, _CRC_POS, compute_crc(out))
    return bytes(out)


def _write_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out += encode_varint(-1)
    else:
        out += encode_varint(len(data))
        out += data
