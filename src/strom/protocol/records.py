"""Record codec of Kafka record batch v2: varints, :class:`Record`, decode and build batches.

Each record inside a batch's (possibly compressed) payload: length varint, attributes int8,
timestampDelta varlong, offsetDelta varint, keyLength varint (-1 = null) + key,
valueLength varint (-1 = null) + value, headerCount varint, then per header keyLength varint +
utf-8 key, valueLength varint (-1 = null) + value. All varints are zigzag-encoded.

The broker never needs this on its hot paths (batches stay opaque, see
:mod:`strom.protocol.batch_header`); it is for internal topics, the compactor, null-key checks
of compacted topics, timestamp lookups and tests.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from strom.protocol import compression as _codec
from strom.protocol.batch_header import (
    COMPRESSION_MASK,
    CONTROL_BIT,
    CRC_POS,
    CREATE_TIME,
    HEADER_SIZE,
    HEADER_STRUCT,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    Buffer,
    CorruptRecordError,
    compute_crc,
    parse_header,
)

Header = tuple[str, bytes | None]

DELETE_HORIZON_BIT = 0x40
"""Batch attribute bit 6 (Kafka 2.8+, KIP-534): baseTimestamp holds the batch's delete horizon,
the time after which the cleaner may drop its tombstones / transaction marker. Record
timestamps stay ``baseTimestamp + timestampDelta``, so they are unchanged by it."""


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
    delete_horizon_ms: int | None = None,
) -> bytes:
    """Encode records keeping their absolute offsets (the compactor's path: gaps allowed).

    ``last_offset_delta`` defaults to the last record's delta; pass it to keep the original
    batch's offset range when trailing records were removed. An empty record list is allowed
    (Kafka keeps such batches to preserve producer state). ``delete_horizon_ms`` sets
    :data:`DELETE_HORIZON_BIT` and stores the horizon as baseTimestamp.
    """
    base_ts = records[0].timestamp if records else -1
    if delete_horizon_ms is not None:
        base_ts = delete_horizon_ms
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
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_BIT
    out = bytearray(HEADER_SIZE)
    HEADER_STRUCT.pack_into(
        out, 0, base_offset, HEADER_SIZE - LOG_OVERHEAD + len(payload), partition_leader_epoch,
        MAGIC, 0, attributes, last_offset_delta, base_ts, max_timestamp, producer_id,
        producer_epoch, base_sequence, len(records),
    )  # fmt: skip
    out += payload
    struct.pack_into(">I", out, CRC_POS, compute_crc(out))
    return bytes(out)


def _write_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out += encode_varint(-1)
    else:
        out += encode_varint(len(data))
        out += data
