"""Validate the records of a v2 batch payload without decoding them into objects (sans-IO).

The broker keeps client batches as bytes, but Kafka's ``LogValidator`` still walks every
record of a client batch: varints well formed, lengths inside the record, the declared record
count exact, no bytes after the last record, header keys not null (and UTF-8: they are
strings, and strom's own readers, the cleaner among them, decode them). :func:`scan_records` does
that walk over the (decompressed) payload and, on the way, collects what the per-record rules
need (KIP-467): the indexes of records whose timestamp is out of range and of records with a
null key (compacted topics), and the largest timestamp delta; and the sum of the values'
lengths, which the broker's ``valuebytesin`` metric counts (one addition per record).

It is the hot path of a Produce request: no :class:`~strom.protocol.records.Record`, no key or
value copy, a one- and two-byte fast path for varints (the common lengths). Record layout: see
:mod:`strom.protocol.records`.

Stricter than Kafka in one place: every record's offsetDelta must equal its index. Kafka
silently rewrites compressed batches whose inner offsets are not 0..n-1 and stores uncompressed
ones as they come; strom stores client bytes unchanged, so it refuses them (no client writes
such batches).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from strom.protocol.batch_header import InvalidRecordError

Buffer = bytes | bytearray | memoryview


@dataclass(slots=True)
class RecordScan:
    """What :func:`scan_records` found (indexes are positions in the batch, from 0)."""

    max_timestamp_delta: int = -(2**63)  # largest timestampDelta (of records with one)
    bad_timestamps: list[int] = field(default_factory=list)
    null_keys: list[int] = field(default_factory=list)
    value_bytes: int = 0  # the records' value lengths summed (null values count 0)


def _varint(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
    """General zigzag varint/varlong at ``pos`` (at most 10 bytes), bounded by ``end``."""
    raw, pos = _raw_varint(buf, pos, end)
    return (raw >> 1) ^ -(raw & 1), pos


def _raw_varint(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
    """The unsigned (still zigzag-encoded) varint at ``pos``."""
    result = 0
    shift = 0
    while True:
        if pos >= end or shift > 63:
            raise InvalidRecordError("found invalid record structure: malformed varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def scan_records(payload: Buffer, count: int, ts_low: int, ts_high: int, no_timestamp: int,
                 keys_required: bool, start: int = 0) -> RecordScan:  # fmt: skip
    """Walk ``count`` records of ``payload`` from byte ``start`` (the records of an uncompressed
    batch are walked in place, ``start`` 61); raise :class:`InvalidRecordError` when malformed.

    A record whose timestampDelta is outside ``[ts_low, ts_high]`` (bounds as deltas from the
    batch's baseTimestamp), other than ``no_timestamp`` (the delta meaning timestamp -1), goes
    to ``bad_timestamps``; with ``keys_required`` a null-key record goes to ``null_keys``.

    Varints are read still zigzag-encoded (``raw``) with inline one- and two-byte paths: a
    length is ``raw >> 1`` when ``raw`` is even and null (negative) when odd, and the offset
    delta of record ``i`` must be ``raw == 2 * i``; only the timestamp delta is decoded.
    """
    buf = bytes(payload) if isinstance(payload, memoryview) else payload
    end = len(buf)
    pos = start
    scan = RecordScan()
    max_delta = scan.max_timestamp_delta
    value_bytes = 0
    raw_varint = _raw_varint
    try:
        for index in range(count):
            b = buf[pos]  # record length
            if b < 0x80:
                raw = b
                pos += 1
            elif buf[pos + 1] < 0x80:
                raw = (b & 0x7F) | (buf[pos + 1] << 7)
                pos += 2
            else:
                raw, pos = raw_varint(buf, pos, end)
            rec_end = pos + (raw >> 1)
            if raw & 1 or raw < 12 or rec_end > end:  # attributes + 5 one-byte varints at least
                raise InvalidRecordError(f"invalid record size at record {index}")
            b = buf[pos + 1]  # timestampDelta, after the attributes byte
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                raw, pos = raw_varint(buf, pos + 1, rec_end)
                ts_delta = (raw >> 1) ^ -(raw & 1)
            b = buf[pos]  # offsetDelta
            if b < 0x80:
                raw = b
                pos += 1
            else:
                raw, pos = raw_varint(buf, pos, rec_end)
            if raw != index << 1:
                raise InvalidRecordError(
                    f"record {index} has offset delta {(raw >> 1) ^ -(raw & 1)}: "
                    "inner offsets must be 0..n-1"
                )
            b = buf[pos]  # key length
            if b < 0x80:
                raw = b
                pos += 1
            elif buf[pos + 1] < 0x80:
                raw = (b & 0x7F) | (buf[pos + 1] << 7)
                pos += 2
            else:
                raw, pos = raw_varint(buf, pos, rec_end)
            if not raw & 1:
                pos += raw >> 1
            elif keys_required:
                scan.null_keys.append(index)
            if pos >= rec_end:
                raise InvalidRecordError(f"record {index} ends inside its key")
            b = buf[pos]  # value length
            if b < 0x80:
                raw = b
                pos += 1
            elif buf[pos + 1] < 0x80:
                raw = (b & 0x7F) | (buf[pos + 1] << 7)
                pos += 2
            else:
                raw, pos = raw_varint(buf, pos, rec_end)
            if not raw & 1:
                pos += raw >> 1
                value_bytes += raw >> 1
            if pos >= rec_end:
                raise InvalidRecordError(f"record {index} ends inside its value")
            if buf[pos] == 0:  # no headers
                pos += 1
            else:
                pos = _skip_headers(buf, pos, rec_end, index)
            if pos != rec_end:
                raise InvalidRecordError(
                    f"record {index}: its fields do not add up to its length"
                )
            if ts_delta > max_delta:
                max_delta = ts_delta
            if (ts_delta < ts_low or ts_delta > ts_high) and ts_delta != no_timestamp:
                scan.bad_timestamps.append(index)
    except IndexError:
        raise InvalidRecordError("incorrect declared batch size, premature end of records") from None
    if pos != end:
        raise InvalidRecordError(
            f"incorrect declared batch size: {end - pos} bytes after record {count - 1}"
        )
    scan.max_timestamp_delta = max_delta
    scan.value_bytes = value_bytes
    return scan


def _skip_headers(buf: Buffer, pos: int, rec_end: int, index: int) -> int:
    count, pos = _varint(buf, pos, rec_end)
    if count < 0:
        raise InvalidRecordError(f"record {index} has an invalid header count {count}")
    for _ in range(count):
        size, pos = _varint(buf, pos, rec_end)
        if size < 0:
            raise InvalidRecordError(f"record {index} has a header with a null key")
        try:  # keys are strings: the cleaner and internal readers decode them
            bytes(buf[pos : pos + size]).decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidRecordError(f"record {index} has a header key that is not UTF-8") from None
        pos += size
        size, pos = _varint(buf, pos, rec_end)
        if size > 0:
            pos += size
        if pos > rec_end:
            raise InvalidRecordError(f"record {index}: a header runs past the record")
    return pos
